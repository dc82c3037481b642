//! The session's configuration: validates a client's `setup` (model name, enums, tools) the way
//! the real service does and turns it into the [`SessionConfig`] the engine runs with. Also owns
//! what the endpoint path implies (backend, API version). Model-behaviour profiles live in
//! [`super::profile`] (re-exported here).

use std::collections::HashMap;
use std::time::Duration;

use serde_json::Value;

use super::inbound::{CLOSE_POLICY, Rejection};
use crate::model::gemini::wire::{Content, Setup};

pub use super::profile::Profile;

/// Which service the client connected to; decides naming and a few rules.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Backend {
    /// Gemini Developer API (`generativelanguage`): `models/ID`, `responseTokenCount`, no
    /// `role:"system"` turns.
    #[default]
    DevApi,
    /// Vertex AI (`aiplatform`): full resource names, `candidatesTokenCount`.
    Vertex,
}

/// What the request path said: the backend and the API version (`v1beta`, `v1`, …).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    pub backend: Backend,
    pub api_version: String,
}

impl Default for Endpoint {
    fn default() -> Self {
        Endpoint {
            backend: Backend::DevApi,
            api_version: "v1beta".into(),
        }
    }
}

/// How a declared function behaves when the model calls it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Behavior {
    /// Generation pauses until the client answers.
    Blocking,
    /// The model keeps talking.
    NonBlocking,
}

/// The effective configuration of one session.
#[derive(Clone, Debug, PartialEq)]
pub struct SessionConfig {
    pub model: String,
    /// Server-side VAD on (`automaticActivityDetection.disabled` not true).
    pub auto_vad: bool,
    /// `silenceDurationMs` if the client set one.
    pub silence: Option<Duration>,
    /// `START_OF_ACTIVITY_INTERRUPTS` (the default) rather than `NO_INTERRUPTION`.
    pub interrupts: bool,
    pub input_transcription: bool,
    pub output_transcription: bool,
    pub system_instruction: Option<Content>,
    /// Declared functions by name.
    pub functions: HashMap<String, Behavior>,
    /// `historyConfig.initialHistoryInClientContent`: `clientContent` up to the first
    /// `turnComplete:true` is history, ingested without calling the model.
    pub initial_history: bool,
}

impl SessionConfig {
    /// How the named function behaves; undeclared functions count as blocking.
    pub fn behavior(&self, name: &str) -> Behavior {
        self.functions
            .get(name)
            .copied()
            .unwrap_or(Behavior::Blocking)
    }

    /// The function is declared in the current tools (setup or the latest `contextUpdate`).
    pub fn declares(&self, name: &str) -> bool {
        self.functions.contains_key(name)
    }
}

/// Validates `setup` for a connection to `endpoint`.
pub fn validate(setup: &Setup, endpoint: &Endpoint) -> Result<SessionConfig, Rejection> {
    check_model(&setup.model, endpoint)?;
    if let Some(gc) = &setup.generation_config
        && let Some(mods) = &gc.response_modalities
        && !(mods.is_empty() || mods.iter().all(|m| m == "AUDIO"))
    {
        return Err(Rejection::invalid(format!(
            "setup.generationConfig.responseModalities {mods:?}: {} supports only AUDIO \
             (use outputAudioTranscription for text)",
            setup.model
        )));
    }
    let ric = setup.realtime_input_config.clone().unwrap_or_default();
    let interrupts = match ric.activity_handling.as_deref() {
        None | Some("ACTIVITY_HANDLING_UNSPECIFIED" | "START_OF_ACTIVITY_INTERRUPTS") => true,
        Some("NO_INTERRUPTION") => false,
        Some(other) => return Err(bad_enum("realtimeInputConfig.activityHandling", other)),
    };
    check_enum(
        "realtimeInputConfig.turnCoverage",
        ric.turn_coverage.as_deref(),
        &[
            "TURN_COVERAGE_UNSPECIFIED",
            "TURN_INCLUDES_ONLY_ACTIVITY",
            "TURN_INCLUDES_ALL_INPUT",
            "TURN_INCLUDES_AUDIO_ACTIVITY_AND_ALL_VIDEO",
        ],
    )?;
    let aad = ric.automatic_activity_detection.unwrap_or_default();
    check_enum(
        "realtimeInputConfig.automaticActivityDetection.startOfSpeechSensitivity",
        aad.start_of_speech_sensitivity.as_deref(),
        &[
            "START_SENSITIVITY_UNSPECIFIED",
            "START_SENSITIVITY_HIGH",
            "START_SENSITIVITY_LOW",
        ],
    )?;
    check_enum(
        "realtimeInputConfig.automaticActivityDetection.endOfSpeechSensitivity",
        aad.end_of_speech_sensitivity.as_deref(),
        &[
            "END_SENSITIVITY_UNSPECIFIED",
            "END_SENSITIVITY_HIGH",
            "END_SENSITIVITY_LOW",
        ],
    )?;
    Ok(SessionConfig {
        model: setup.model.clone(),
        auto_vad: aad.disabled != Some(true),
        silence: aad
            .silence_duration_ms
            .map(|ms| Duration::from_millis(u64::from(ms))),
        interrupts,
        input_transcription: setup.input_audio_transcription.is_some(),
        output_transcription: setup.output_audio_transcription.is_some(),
        system_instruction: setup.system_instruction.clone(),
        functions: functions(setup.tools.as_deref().unwrap_or_default(), "setup.tools")?,
        initial_history: setup
            .history_config
            .as_ref()
            .is_some_and(|h| h.initial_history_in_client_content == Some(true)),
    })
}

/// Reads the function declarations (and their `behavior`) out of a `tools` list; other tool kinds
/// (`googleSearch`, …) are accepted and ignored. `at` names the list in errors.
pub fn functions(tools: &[Value], at: &str) -> Result<HashMap<String, Behavior>, Rejection> {
    let mut out = HashMap::new();
    for (i, tool) in tools.iter().enumerate() {
        let Some(tool) = tool.as_object() else {
            return Err(Rejection::invalid(format!("{at}[{i}] must be an object")));
        };
        let Some(decls) = tool.get("functionDeclarations") else {
            continue;
        };
        let Some(decls) = decls.as_array() else {
            return Err(Rejection::invalid(format!(
                "{at}[{i}].functionDeclarations must be a list"
            )));
        };
        for (j, decl) in decls.iter().enumerate() {
            let here = format!("{at}[{i}].functionDeclarations[{j}]");
            let Some(name) = decl.get("name").and_then(Value::as_str) else {
                return Err(Rejection::invalid(format!("{here}.name is required")));
            };
            if name.is_empty() {
                return Err(Rejection::invalid(format!("{here}.name is empty")));
            }
            let behavior = match decl.get("behavior") {
                None | Some(Value::Null) => Behavior::Blocking,
                Some(Value::String(s)) => match s.as_str() {
                    "UNSPECIFIED" | "BLOCKING" => Behavior::Blocking,
                    "NON_BLOCKING" => Behavior::NonBlocking,
                    other => return Err(bad_enum(&format!("{here}.behavior"), other)),
                },
                Some(other) => {
                    return Err(bad_enum(&format!("{here}.behavior"), &other.to_string()));
                }
            };
            out.insert(name.to_owned(), behavior);
        }
    }
    Ok(out)
}

fn check_model(model: &str, endpoint: &Endpoint) -> Result<(), Rejection> {
    if model.is_empty() {
        return Err(Rejection::invalid("setup.model is required"));
    }
    let id = match endpoint.backend {
        Backend::DevApi => model.strip_prefix("models/"),
        Backend::Vertex => vertex_model_id(model),
    };
    let supported = id.is_some_and(|id| {
        !id.is_empty()
            && !id.contains('/')
            && (id.contains("live") || id.contains("native-audio") || id.contains("mock"))
    });
    if supported {
        Ok(())
    } else {
        Err(Rejection::new(
            CLOSE_POLICY,
            format!(
                "{model} is not found for API version {}, or is not supported for bidiGenerateContent",
                endpoint.api_version
            ),
        ))
    }
}

/// `projects/P/locations/L/publishers/PUB/models/ID` or `publishers/PUB/models/ID` → `ID`.
fn vertex_model_id(model: &str) -> Option<&str> {
    let rest = match model.strip_prefix("projects/") {
        Some(r) => {
            let (_project, r) = r.split_once("/locations/")?;
            let (_location, r) = r.split_once('/')?;
            r
        }
        None => model,
    };
    let rest = rest.strip_prefix("publishers/")?;
    let (_publisher, rest) = rest.split_once("/models/")?;
    Some(rest)
}

fn check_enum(field: &str, value: Option<&str>, allowed: &[&str]) -> Result<(), Rejection> {
    match value {
        Some(v) if !allowed.contains(&v) => Err(bad_enum(field, v)),
        _ => Ok(()),
    }
}

fn bad_enum(field: &str, value: &str) -> Rejection {
    Rejection::invalid(format!("invalid value {value:?} for {field}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mock::inbound::CLOSE_INVALID;
    use serde_json::json;

    fn setup(v: Value) -> Setup {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn model_names() {
        let dev = Endpoint::default();
        let vertex = Endpoint {
            backend: Backend::Vertex,
            api_version: "v1beta1".into(),
        };
        for ok in [
            "models/gemini-3.8-live",
            "models/gemini-2.5-flash-native-audio-preview-12-2025",
            "models/mock",
        ] {
            check_model(ok, &dev).unwrap();
        }
        check_model(
            "projects/p/locations/us-central1/publishers/google/models/gemini-live-2.5-flash-native-audio",
            &vertex,
        )
        .unwrap();
        let e = check_model("models/gemini-2.5-pro", &dev).unwrap_err();
        assert_eq!(e.code, CLOSE_POLICY);
        assert_eq!(
            e.reason,
            "models/gemini-2.5-pro is not found for API version v1beta, or is not supported for bidiGenerateContent"
        );
        assert_eq!(
            check_model("gemini-3.8-live", &dev).unwrap_err().code,
            CLOSE_POLICY
        );
        assert_eq!(
            check_model("models/gemini-3.8-live", &vertex)
                .unwrap_err()
                .code,
            CLOSE_POLICY
        );
        assert_eq!(check_model("", &dev).unwrap_err().code, CLOSE_INVALID);
    }

    #[test]
    fn reads_vad_and_tools() {
        let c = validate(
            &setup(json!({
                "model": "models/gemini-3.8-live",
                "realtimeInputConfig": {"automaticActivityDetection": {"disabled": true, "silenceDurationMs": 200},
                                        "activityHandling": "NO_INTERRUPTION"},
                "outputAudioTranscription": {},
                "tools": [{"functionDeclarations": [{"name": "a"}, {"name": "b", "behavior": "NON_BLOCKING"}]},
                          {"googleSearch": {}}]
            })),
            &Endpoint::default(),
        )
        .unwrap();
        assert!(!c.auto_vad);
        assert!(!c.interrupts);
        assert_eq!(c.silence, Some(Duration::from_millis(200)));
        assert!(c.output_transcription && !c.input_transcription);
        assert_eq!(c.behavior("a"), Behavior::Blocking);
        assert_eq!(c.behavior("b"), Behavior::NonBlocking);
        assert_eq!(c.behavior("undeclared"), Behavior::Blocking);
    }

    #[test]
    fn bad_enums_and_modalities_close_1007() {
        for s in [
            json!({"model": "models/mock", "realtimeInputConfig": {"activityHandling": "SOMETIMES"}}),
            json!({"model": "models/mock", "tools": [{"functionDeclarations": [{"name": "a", "behavior": "LATER"}]}]}),
            json!({"model": "models/mock", "tools": [{"functionDeclarations": [{"description": "no name"}]}]}),
            json!({"model": "models/mock", "generationConfig": {"responseModalities": ["TEXT"]}}),
            json!({"model": "models/mock", "realtimeInputConfig": {"automaticActivityDetection": {"startOfSpeechSensitivity": "LOUD"}}}),
        ] {
            let e = validate(&setup(s.clone()), &Endpoint::default()).unwrap_err();
            assert_eq!(e.code, CLOSE_INVALID, "{s}: {e}");
        }
    }
}
