//! Live model adapters behind one event vocabulary. Each adapter turns its wire protocol into
//! [`ModelEvent`]s and declares its [`Capabilities`], so the call (and later the orchestrator) never
//! depends on a protocol's JSON.

pub mod gemini;
pub mod handle;
pub mod openai;
pub mod session;
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
    pub update_instructions: bool,
    pub update_tools: bool,
    pub non_blocking_tools: bool,
    pub mid_session_client_content: bool,
    pub resumption: bool,
}
