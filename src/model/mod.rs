//! Live model adapters behind one event vocabulary. Each adapter turns its wire protocol into
//! [`ModelEvent`]s and declares its [`Capabilities`], so the call (and later the orchestrator) never
//! depends on a protocol's JSON.

pub mod catalog;
pub mod credential;
pub mod decode;
pub mod endpoint;
pub mod gemini;
pub mod handle;
pub mod openai;
pub mod protocol;
pub mod session;
pub mod shell;
pub mod tls;

use std::time::Duration;

/// A function call the model asked the client to run.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolCallRequest {
    pub id: String,
    pub name: String,
    pub args: serde_json::Value,
}

/// What a model session reports, in protocol order.
#[derive(Clone, Debug, PartialEq)]
pub enum ModelEvent {
    /// The session accepted its setup; audio may flow.
    SetupComplete,
    /// Model speech: mono PCM16 at `rate` Hz.
    Audio {
        rate: u32,
        samples: Vec<i16>,
    },
    /// A fragment of what the caller said.
    InputTranscript {
        text: String,
        finished: bool,
    },
    /// A fragment of what the model is saying.
    OutputTranscript {
        text: String,
        finished: bool,
    },
    /// The model will send no more audio for this turn.
    GenerationComplete,
    /// The model's turn is over (after the server's estimate of playback end).
    TurnComplete,
    /// The caller (or client content) interrupted generation: flush playout.
    Interrupted,
    ToolCall(Vec<ToolCallRequest>),
    ToolCallCancellation(Vec<String>),
    /// The server will close the connection after `time_left`.
    GoAway {
        time_left: Option<Duration>,
    },
    ResumptionUpdate {
        handle: Option<String>,
        resumable: bool,
    },
    Usage {
        total_tokens: Option<u64>,
    },
    /// A frame or part the client could not use; the session carries on.
    ProtocolError(String),
}

/// What an adapter can do in place, inside a live session (the orchestrator plans with these).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Capabilities {
    /// The system instruction can be replaced in place (`contextUpdate`, `session.update`).
    pub update_instructions: bool,
    /// The tools can be replaced in place.
    pub update_tools: bool,
    /// Functions can be declared NON_BLOCKING (answered with a `scheduling`).
    pub non_blocking_tools: bool,
    /// Client content (conversation items) is taken after the first turn.
    pub mid_session_client_content: bool,
    /// A dropped connection can be resumed with a handle.
    pub resumption: bool,
    /// A new session takes the conversation so far as initial history.
    pub history_config: bool,
    /// A function call made while the model speaks pauses its speech until it is answered
    /// (synchronous tools on a protocol that calls mid-utterance).
    pub calls_pause_speech: bool,
}
