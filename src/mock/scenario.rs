//! Scenario files: the script the mock model follows. A scenario is TOML; clip paths are relative
//! to the scenario file; every error names the file and the key.
//!
//! ```toml
//! name = "demo"
//! description = "A caller checks a balance, then asks about a savings scheme."
//! caller = "../clips/caller_conversation.wav"  # optional: what a fixture caller replays (not used by the mock itself)
//! [model]
//! first_audio_ms = 300     # end of the caller's turn (after the VAD silence window) → first audio chunk sent
//! speed = 4.0              # generation speed, × real time
//! chunk_ms = 40            # audio per modelTurn message
//! burst = 3                # chunks sent back to back before pausing to hold the average `speed`
//! jitter_ms = 0            # extra random delay per burst, uniform 0..=jitter_ms, seeded
//! seed = 1
//! silence_ms = 500         # VAD silence window when setup sets no silenceDurationMs
//! default_reply = "../clips/advisor_default.wav"   # optional
//! default_reply_text = "Sorry, could you say that again?"
//! [[turn]]
//! input_text = "Hi, what's my balance?"     # inputTranscription when the caller's turn ends
//! reply = "../clips/advisor_01.wav"
//! output_text = "Your balance is ..."        # outputTranscription of the reply
//! [turn.tool_call]                           # optional: emitted before the reply audio
//! name = "get_balance"
//! args = { account = "checking" }
//! ```
//!
//! Each caller turn (however it ends: VAD, `activityEnd`, `clientContent` with `turnComplete`,
//! `realtimeInput.text`) consumes the next `[[turn]]`; once they are used up every turn gets the
//! default reply. All `[model]` keys are optional with the defaults shown. A `[[turn]]` without
//! `reply` speaks the default reply clip; without `output_text` it has no output transcription
//! (unless it also has no `reply`, then the default reply text is used). Unknown keys are errors.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

use super::clip::{self, BUILTIN_DEFAULT_TEXT, Clip, ClipError};

/// A scenario could not be loaded; the message names the file and, where it applies, the key.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    #[error("{path}: cannot read scenario: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("{path}: {key}: {what}")]
    Invalid {
        path: PathBuf,
        key: String,
        what: String,
    },
    #[error("{path}: {key}: {source}")]
    Clip {
        path: PathBuf,
        key: String,
        source: ClipError,
    },
}

/// How the mock model paces itself.
#[derive(Clone, Debug, PartialEq)]
pub struct Timing {
    /// End of the caller's turn → first audio chunk sent.
    pub first_audio: Duration,
    /// Generation speed as a multiple of real time.
    pub speed: f64,
    /// Audio per `modelTurn` message.
    pub chunk: Duration,
    /// Chunks sent back to back before pausing.
    pub burst: u32,
    /// Extra random delay per burst, uniform in `0..=jitter`.
    pub jitter: Duration,
    /// Seed for the jitter.
    pub seed: u64,
    /// VAD silence window when `setup` sets no `silenceDurationMs`.
    pub silence: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        Timing {
            first_audio: Duration::from_millis(300),
            speed: 4.0,
            chunk: Duration::from_millis(40),
            burst: 3,
            jitter: Duration::ZERO,
            seed: 1,
            silence: Duration::from_millis(500),
        }
    }
}

/// Something the model says: 24 kHz audio and its transcription.
#[derive(Clone, Debug, PartialEq)]
pub struct Reply {
    pub audio: Clip,
    /// The `outputTranscription` text; empty for none.
    pub text: String,
}

/// A function call the model makes before it speaks.
#[derive(Clone, Debug, PartialEq)]
pub struct ScriptedToolCall {
    pub name: String,
    /// A JSON object.
    pub args: Value,
}

/// One scripted exchange: what the caller is heard to say and what the model answers.
#[derive(Clone, Debug, PartialEq)]
pub struct Turn {
    /// The `inputTranscription` text, if any.
    pub input_text: Option<String>,
    pub reply: Reply,
    pub tool_call: Option<ScriptedToolCall>,
}

/// A loaded scenario: all clips are in memory at 24 kHz.
#[derive(Clone, Debug, PartialEq)]
pub struct Scenario {
    pub name: String,
    pub description: String,
    /// What a fixture caller replays (absolute path); the mock itself does not use it.
    pub caller: Option<PathBuf>,
    pub timing: Timing,
    pub default_reply: Reply,
    pub turns: Vec<Turn>,
}

impl Scenario {
    /// The scenario used when none is given: default timing, no scripted turns, every turn answered
    /// with the built-in default reply. Needs no files.
    pub fn builtin() -> Self {
        Scenario {
            name: "builtin".into(),
            description: "Answers every caller turn with the default reply.".into(),
            caller: None,
            timing: Timing::default(),
            default_reply: Reply {
                audio: clip::builtin_default(),
                text: BUILTIN_DEFAULT_TEXT.into(),
            },
            turns: Vec::new(),
        }
    }

    /// The scripted turn for the `index`-th caller turn (0-based), or the default reply.
    pub fn turn(&self, index: usize) -> Turn {
        self.turns.get(index).cloned().unwrap_or_else(|| Turn {
            input_text: None,
            reply: self.default_reply.clone(),
            tool_call: None,
        })
    }

    /// Loads a scenario file and every clip it names.
    pub fn load(path: &Path) -> Result<Self, ScenarioError> {
        let text = std::fs::read_to_string(path).map_err(|source| ScenarioError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::parse(&text, path)
    }

    /// Parses scenario text; `path` names the file in errors and anchors relative clip paths.
    pub fn parse(text: &str, path: &Path) -> Result<Self, ScenarioError> {
        let raw: RawScenario = toml::from_str(text).map_err(|e| ScenarioError::Parse {
            path: path.to_path_buf(),
            message: e.to_string().trim_end().to_owned(),
        })?;
        let base = path.parent().unwrap_or(Path::new("."));
        let invalid = |key: &str, what: &str| ScenarioError::Invalid {
            path: path.to_path_buf(),
            key: key.to_owned(),
            what: what.to_owned(),
        };
        let load_clip = |key: String, rel: &str| {
            clip::load(&base.join(rel)).map_err(|source| ScenarioError::Clip {
                path: path.to_path_buf(),
                key,
                source,
            })
        };

        let m = raw.model;
        let defaults = Timing::default();
        let speed = m.speed.unwrap_or(defaults.speed);
        if !(speed.is_finite() && speed > 0.0) {
            return Err(invalid("model.speed", "must be a positive number"));
        }
        let chunk_ms = m.chunk_ms.unwrap_or(40);
        if !(1..=10_000).contains(&chunk_ms) {
            return Err(invalid("model.chunk_ms", "must be between 1 and 10000"));
        }
        let burst = m.burst.unwrap_or(defaults.burst);
        if burst == 0 {
            return Err(invalid("model.burst", "must be at least 1"));
        }
        let ms = |v: Option<u64>, d: Duration| v.map(Duration::from_millis).unwrap_or(d);
        let timing = Timing {
            first_audio: ms(m.first_audio_ms, defaults.first_audio),
            speed,
            chunk: Duration::from_millis(chunk_ms),
            burst,
            jitter: ms(m.jitter_ms, defaults.jitter),
            seed: m.seed.unwrap_or(defaults.seed),
            silence: ms(m.silence_ms, defaults.silence),
        };

        let default_audio = match &m.default_reply {
            Some(rel) => load_clip("model.default_reply".into(), rel)?,
            None => clip::builtin_default(),
        };
        let default_reply = Reply {
            audio: default_audio,
            text: m
                .default_reply_text
                .unwrap_or_else(|| BUILTIN_DEFAULT_TEXT.into()),
        };

        let mut turns = Vec::with_capacity(raw.turn.len());
        for (i, t) in raw.turn.into_iter().enumerate() {
            let reply = match &t.reply {
                Some(rel) => Reply {
                    audio: load_clip(format!("turn[{i}].reply"), rel)?,
                    text: t.output_text.unwrap_or_default(),
                },
                None => Reply {
                    audio: default_reply.audio.clone(),
                    text: t.output_text.unwrap_or_else(|| default_reply.text.clone()),
                },
            };
            let tool_call = match t.tool_call {
                None => None,
                Some(tc) => {
                    let key = format!("turn[{i}].tool_call");
                    if tc.name.trim().is_empty() {
                        return Err(invalid(&format!("{key}.name"), "must not be empty"));
                    }
                    let args = match tc.args {
                        None => Value::Object(Default::default()),
                        Some(v @ Value::Object(_)) => v,
                        Some(_) => {
                            return Err(invalid(&format!("{key}.args"), "must be a table"));
                        }
                    };
                    Some(ScriptedToolCall {
                        name: tc.name,
                        args,
                    })
                }
            };
            turns.push(Turn {
                input_text: t.input_text,
                reply,
                tool_call,
            });
        }

        Ok(Scenario {
            name: raw.name.unwrap_or_else(|| {
                path.file_stem()
                    .map(|s| s.to_string_lossy().into_owned())
                    .unwrap_or_default()
            }),
            description: raw.description.unwrap_or_default(),
            caller: raw.caller.map(|c| base.join(c)),
            timing,
            default_reply,
            turns,
        })
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawScenario {
    name: Option<String>,
    description: Option<String>,
    caller: Option<String>,
    #[serde(default)]
    model: RawModel,
    #[serde(default)]
    turn: Vec<RawTurn>,
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawModel {
    first_audio_ms: Option<u64>,
    speed: Option<f64>,
    chunk_ms: Option<u64>,
    burst: Option<u32>,
    jitter_ms: Option<u64>,
    seed: Option<u64>,
    silence_ms: Option<u64>,
    default_reply: Option<String>,
    default_reply_text: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTurn {
    input_text: Option<String>,
    reply: Option<String>,
    output_text: Option<String>,
    tool_call: Option<RawToolCall>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawToolCall {
    name: String,
    args: Option<Value>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    #[test]
    fn loads_clips_relative_to_the_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("clips")).unwrap();
        crate::audio::wav::write_mono(&dir.path().join("clips/a.wav"), 16000, &[100; 16000])
            .unwrap();
        let p = write(
            dir.path(),
            "s.toml",
            r#"
name = "t"
caller = "clips/a.wav"
[model]
speed = 2.0
jitter_ms = 7
[[turn]]
input_text = "hello"
reply = "clips/a.wav"
output_text = "hi there"
[turn.tool_call]
name = "get_balance"
args = { account = "checking" }
[[turn]]
"#,
        );
        let s = Scenario::load(&p).unwrap();
        assert_eq!(s.name, "t");
        assert_eq!(s.caller, Some(dir.path().join("clips/a.wav")));
        assert_eq!(s.timing.speed, 2.0);
        assert_eq!(s.timing.jitter, Duration::from_millis(7));
        assert_eq!(s.timing.chunk, Duration::from_millis(40));
        assert_eq!(s.turns.len(), 2);
        assert_eq!(s.turns[0].reply.audio.len(), 24000);
        assert_eq!(s.turns[0].reply.text, "hi there");
        assert_eq!(
            s.turns[0].tool_call,
            Some(ScriptedToolCall {
                name: "get_balance".into(),
                args: serde_json::json!({"account": "checking"})
            })
        );
        assert_eq!(s.turns[1].reply, s.default_reply);
        assert_eq!(s.turn(5).reply, s.default_reply);
    }

    #[test]
    fn errors_name_file_and_key() {
        let dir = tempfile::tempdir().unwrap();
        let cases = [
            ("[model]\nspeeed = 2.0\n", "speeed"),
            ("[model]\nspeed = -1.0\n", "model.speed"),
            ("[model]\nburst = 0\n", "model.burst"),
            ("[[turn]]\nreply = \"missing.wav\"\n", "turn[0].reply"),
            (
                "[[turn]]\n[turn.tool_call]\nname = \"f\"\nargs = 3\n",
                "turn[0].tool_call.args",
            ),
            ("name = ", "line 1"),
        ];
        for (text, key) in cases {
            let p = write(dir.path(), "bad.toml", text);
            let err = Scenario::load(&p).unwrap_err().to_string();
            assert!(err.contains("bad.toml"), "{err}");
            assert!(err.contains(key), "{key}: {err}");
        }
        let err = Scenario::load(&dir.path().join("none.toml"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("none.toml"), "{err}");
    }

    #[test]
    fn builtin_needs_no_files() {
        let s = Scenario::builtin();
        assert!(s.turns.is_empty());
        assert!(!s.default_reply.audio.is_empty());
        assert_eq!(s.turn(0).reply.text, BUILTIN_DEFAULT_TEXT);
    }
}
