//! The Live models baton knows by id, and what each takes inside a live session (the
//! [`Capabilities`] the orchestrator plans handoffs with). A model id is looked up as sent in
//! `setup` / the OpenAI URL, with or without `models/` and as a Vertex resource name; an id the
//! table does not know gets the protocol's safe defaults (nothing in place that a model might
//! refuse with 1007) until the config says otherwise (`[model.capabilities]`). A feature the
//! service still refuses mid-call (close 1007 naming it, [`refused_feature`]) is turned off for
//! the rest of that call.
//!
//! | model | backend | `contextUpdate` | NON_BLOCKING tools | mid-session `clientContent` | `historyConfig` | calls pause speech |
//! |---|---|---|---|---|---|---|
//! | `gemini-3.8-live`, `gemini-3.8-live-extended-thinking` | Developer API, Vertex | yes | yes | yes | yes | no |
//! | `gemini-2.5-flash-native-audio-preview-09-2025`, `…-12-2025`, `…-latest` | Developer API | no | yes | yes | yes | no |
//! | `gemini-live-2.5-flash-native-audio` | Vertex | no | no (scheduling dropped) | yes | no | yes |
//! | `gemini-3.1-flash-live-preview` | Developer API | no | no (synchronous only) | no | yes | yes |
//! | `gpt-realtime*`, `gpt-4o-realtime-preview*`, `gpt-4o-mini-realtime-preview*` | OpenAI | `session.update` | no (a call ends the response) | yes (`conversation.item.create`) | yes (items) | no |
//!
//! Resumption: every Gemini Live model; no OpenAI model (a new connection is a new
//! conversation).

use std::fmt;

use super::Capabilities;
use super::handle::Protocol;

/// The Gemini Live model a session names when nothing names one.
pub const DEFAULT_GEMINI_MODEL: &str = "models/gemini-3.8-live";
/// The OpenAI Realtime model a session names when nothing names one.
pub const DEFAULT_OPENAI_MODEL: &str = "gpt-realtime";

/// 3.8-class: everything in place.
const GEMINI_38: Capabilities = Capabilities {
    update_instructions: true,
    update_tools: true,
    non_blocking_tools: true,
    mid_session_client_content: true,
    resumption: true,
    history_config: true,
    calls_pause_speech: false,
};

/// gemini-2.5 native audio on the Developer API: no `contextUpdate`.
const GEMINI_25: Capabilities = Capabilities {
    update_instructions: false,
    update_tools: false,
    ..GEMINI_38
};

/// gemini-live-2.5 native audio on Vertex: `scheduling` dropped (NON_BLOCKING unreliable), no
/// `historyConfig`.
const GEMINI_25_VERTEX: Capabilities = Capabilities {
    non_blocking_tools: false,
    history_config: false,
    calls_pause_speech: true,
    ..GEMINI_25
};

/// gemini-3.1-flash-live-preview: synchronous tools only, no mid-session client content.
const GEMINI_31: Capabilities = Capabilities {
    update_instructions: false,
    update_tools: false,
    non_blocking_tools: false,
    mid_session_client_content: false,
    resumption: true,
    history_config: true,
    calls_pause_speech: true,
};

/// A Gemini model the table does not know: nothing a model might refuse mid-session.
const GEMINI_UNKNOWN: Capabilities = GEMINI_31;

/// Every OpenAI Realtime model: `session.update` swaps instructions and tools for the next
/// response, `system` items add context without a response, a function call ends the response
/// (no non-blocking tools, nothing paused mid-speech), no resumption.
const OPENAI: Capabilities = Capabilities {
    update_instructions: true,
    update_tools: true,
    non_blocking_tools: false,
    mid_session_client_content: true,
    resumption: false,
    history_config: true,
    calls_pause_speech: false,
};

/// One row of the table: ids matched exactly, or by prefix when `prefix` is set.
struct Row {
    ids: &'static [&'static str],
    prefix: bool,
    family: &'static str,
    caps: Capabilities,
}

const GEMINI_ROWS: &[Row] = &[
    Row {
        ids: &["gemini-3.8-live", "gemini-3.8-live-extended-thinking"],
        prefix: false,
        family: "gemini-3.8",
        caps: GEMINI_38,
    },
    Row {
        ids: &["gemini-2.5-flash-native-audio"],
        prefix: true,
        family: "gemini-2.5",
        caps: GEMINI_25,
    },
    Row {
        ids: &["gemini-live-2.5-flash-native-audio"],
        prefix: true,
        family: "gemini-2.5 (Vertex)",
        caps: GEMINI_25_VERTEX,
    },
    Row {
        ids: &["gemini-3.1-flash-live-preview"],
        prefix: true,
        family: "gemini-3.1",
        caps: GEMINI_31,
    },
];

const OPENAI_ROWS: &[Row] = &[Row {
    ids: &[
        "gpt-realtime",
        "gpt-4o-realtime-preview",
        "gpt-4o-mini-realtime-preview",
    ],
    prefix: true,
    family: "openai-realtime",
    caps: OPENAI,
}];

/// Where a model's capabilities came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// The table knows the model.
    Known,
    /// The table does not: the protocol's safe defaults.
    Unknown,
    /// `[model.capabilities]` in the config set some of them.
    Configured,
}

/// A model id and what baton will use in its sessions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelInfo {
    /// The id as configured.
    pub id: String,
    /// The table's family name (`gemini-2.5`, `openai-realtime`, …), or `unknown`.
    pub family: &'static str,
    pub capabilities: Capabilities,
    pub source: Source,
}

/// What the table says of `model` on `protocol`.
pub fn lookup(protocol: Protocol, model: &str) -> ModelInfo {
    let id = bare_id(model);
    let (rows, fallback) = match protocol {
        Protocol::Gemini => (GEMINI_ROWS, GEMINI_UNKNOWN),
        Protocol::OpenAi => (OPENAI_ROWS, OPENAI),
    };
    let row = rows.iter().find(|r| {
        r.ids
            .iter()
            .any(|k| id == *k || (r.prefix && id.starts_with(k)))
    });
    match row {
        Some(r) => ModelInfo {
            id: model.to_owned(),
            family: r.family,
            capabilities: r.caps,
            source: Source::Known,
        },
        None => ModelInfo {
            id: model.to_owned(),
            family: "unknown",
            capabilities: fallback,
            source: Source::Unknown,
        },
    }
}

/// Capabilities set in the config for a model the table does not know (or knows wrong); each
/// `None` keeps the table's value.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Override {
    pub context_update: Option<bool>,
    pub non_blocking_tools: Option<bool>,
    pub mid_session_client_content: Option<bool>,
    pub history_config: Option<bool>,
    pub calls_pause_speech: Option<bool>,
}

impl Override {
    pub fn is_empty(&self) -> bool {
        *self == Override::default()
    }
}

/// The table's entry for `model`, with the config's overrides applied.
pub fn resolve(protocol: Protocol, model: &str, o: &Override) -> ModelInfo {
    let mut info = lookup(protocol, model);
    if o.is_empty() {
        return info;
    }
    let c = &mut info.capabilities;
    if let Some(v) = o.context_update {
        c.update_instructions = v;
        c.update_tools = v;
    }
    if let Some(v) = o.non_blocking_tools {
        c.non_blocking_tools = v;
    }
    if let Some(v) = o.mid_session_client_content {
        c.mid_session_client_content = v;
    }
    if let Some(v) = o.history_config {
        c.history_config = v;
    }
    if let Some(v) = o.calls_pause_speech {
        c.calls_pause_speech = v;
    }
    info.source = Source::Configured;
    info
}

/// `models/ID`, a Vertex resource name (`…/publishers/P/models/ID`) or a bare id → `ID`.
fn bare_id(model: &str) -> &str {
    let m = model.trim();
    match m.rfind("/models/") {
        Some(i) => &m[i + "/models/".len()..],
        None => m.strip_prefix("models/").unwrap_or(m),
    }
}

/// Something a session can be refused mid-call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Feature {
    /// `contextUpdate` (instruction and tools in place).
    ContextUpdate,
    /// `clientContent` after the first turn.
    ClientContent,
    /// `behavior: NON_BLOCKING` / `scheduling`.
    NonBlocking,
}

impl Feature {
    /// Turns the feature off in `caps`.
    pub fn disable(self, caps: &mut Capabilities) {
        match self {
            Feature::ContextUpdate => {
                caps.update_instructions = false;
                caps.update_tools = false;
            }
            Feature::ClientContent => caps.mid_session_client_content = false,
            Feature::NonBlocking => {
                caps.non_blocking_tools = false;
                caps.calls_pause_speech = true;
            }
        }
    }
}

impl fmt::Display for Feature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Feature::ContextUpdate => "contextUpdate",
            Feature::ClientContent => "mid-session clientContent",
            Feature::NonBlocking => "NON_BLOCKING tools",
        })
    }
}

/// The feature a close names, if it is a refusal of one (1007 "… is not supported …").
pub fn refused_feature(code: Option<u16>, reason: &str) -> Option<Feature> {
    if code != Some(1007) {
        return None;
    }
    let r = reason.to_ascii_lowercase();
    if !(r.contains("not supported") || r.contains("unsupported") || r.contains("not enabled")) {
        return None;
    }
    if r.contains("contextupdate") || r.contains("context_update") {
        Some(Feature::ContextUpdate)
    } else if r.contains("clientcontent") || r.contains("client_content") {
        Some(Feature::ClientContent)
    } else if r.contains("non_blocking") || r.contains("scheduling") {
        Some(Feature::NonBlocking)
    } else {
        None
    }
}

/// One line per capability, for `check-config` and logs.
pub fn describe(info: &ModelInfo) -> String {
    let c = &info.capabilities;
    let yes = |b: bool| if b { "yes" } else { "no" };
    let source = match info.source {
        Source::Known => format!("known model ({})", info.family),
        Source::Unknown => "not in baton's table: safe defaults; set [model.capabilities] to \
                            use more"
            .to_owned(),
        Source::Configured => format!("{} with [model.capabilities] applied", info.family),
    };
    format!(
        "model {}: {source}\n  contextUpdate/session.update in place: {}\n  non-blocking tools: {}\n  \
         mid-session client content: {}\n  initial history (historyConfig): {}\n  a tool call \
         pauses speech: {}\n  session resumption: {}",
        info.id,
        yes(c.update_instructions),
        yes(c.non_blocking_tools),
        yes(c.mid_session_client_content),
        yes(c.history_config),
        yes(c.calls_pause_speech),
        yes(c.resumption),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_ids_in_every_spelling() {
        for id in [
            "models/gemini-2.5-flash-native-audio-preview-09-2025",
            "gemini-2.5-flash-native-audio-preview-12-2025",
            "models/gemini-2.5-flash-native-audio-latest",
        ] {
            let i = lookup(Protocol::Gemini, id);
            assert_eq!((i.family, i.source), ("gemini-2.5", Source::Known), "{id}");
            assert!(!i.capabilities.update_instructions && i.capabilities.non_blocking_tools);
        }
        let v = lookup(
            Protocol::Gemini,
            "projects/p/locations/us-central1/publishers/google/models/gemini-live-2.5-flash-native-audio",
        );
        assert_eq!(v.family, "gemini-2.5 (Vertex)");
        assert!(!v.capabilities.non_blocking_tools && !v.capabilities.history_config);
        let t = lookup(Protocol::Gemini, "models/gemini-3.1-flash-live-preview");
        assert_eq!(t.capabilities, GEMINI_31);
        let e = lookup(Protocol::Gemini, "models/gemini-3.8-live");
        assert_eq!(e.capabilities, GEMINI_38);
        for id in [
            "gpt-realtime",
            "gpt-realtime-2025-08-28",
            "gpt-realtime-mini",
            "gpt-4o-realtime-preview-2025-06-03",
        ] {
            let o = lookup(Protocol::OpenAi, id);
            assert_eq!((o.source, o.capabilities), (Source::Known, OPENAI), "{id}");
        }
    }

    #[test]
    fn unknown_models_get_nothing_a_service_might_refuse() {
        let u = lookup(Protocol::Gemini, "models/gemini-9-live");
        assert_eq!(u.source, Source::Unknown);
        let c = u.capabilities;
        assert!(!c.update_instructions && !c.non_blocking_tools && !c.mid_session_client_content);
        assert!(c.resumption, "resumption is the protocol's");
        assert!(describe(&u).contains("[model.capabilities]"));
    }

    #[test]
    fn overrides_apply_and_say_so() {
        let o = Override {
            context_update: Some(true),
            ..Default::default()
        };
        let i = resolve(Protocol::Gemini, "models/gemini-9-live", &o);
        assert!(i.capabilities.update_instructions && i.capabilities.update_tools);
        assert_eq!(i.source, Source::Configured);
        let same = resolve(
            Protocol::Gemini,
            "models/gemini-3.8-live",
            &Override::default(),
        );
        assert_eq!(same.source, Source::Known);
    }

    #[test]
    fn refusals_name_their_feature() {
        let f = |r: &str| refused_feature(Some(1007), r);
        assert_eq!(
            f("contextUpdate is not supported by models/gemini-2.5-flash"),
            Some(Feature::ContextUpdate)
        );
        assert_eq!(
            f("clientContent is not supported mid-session by models/gemini-3.1-flash-live-preview"),
            Some(Feature::ClientContent)
        );
        assert_eq!(f("Request contains an invalid argument."), None);
        assert_eq!(
            refused_feature(Some(1011), "contextUpdate is not supported"),
            None
        );
        let mut c = GEMINI_38;
        Feature::ContextUpdate.disable(&mut c);
        assert!(!c.update_instructions && !c.update_tools && c.non_blocking_tools);
    }
}
