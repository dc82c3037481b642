//! The mock model's OpenAI Realtime profile (`baton mock-model --profile openai`, reference
//! §12.2): the same scenarios, clips and VAD as the Gemini mock, behind the OpenAI wire protocol
//! (GA event names; the beta dialect when the client sends `OpenAI-Beta: realtime=v1`).
//!
//! - [`engine`]: the sans-IO session core ([`RealtimeSession`]): session config, caller audio and
//!   turns, conversation items, truncation, errors; `respond.rs`: responses, function calls,
//!   cancellation; `response.rs`: what a response is (its plan, its speech cut into deltas).
//! - [`config`]: the effective session, partial `session.update` merges and their checks.
//! - [`server`]: the tokio/WebSocket shell serving `GET /v1/realtime?model=…`.
//!
//! Not modelled: out-of-band responses running in parallel (`conversation: "none"` is answered,
//! one response at a time, without writing the conversation), text-only output, semantic VAD's
//! eagerness (a fixed 800 ms window), idle timeouts, MCP tools.

pub mod config;
pub mod engine;
mod items;
mod respond;
mod response;
pub mod server;

use std::time::Duration;

pub use engine::{Outgoing, RealtimeSession};
pub use server::serve_connection;

/// The service's session lifetime (60 minutes on GA).
pub const DEFAULT_LIFETIME: Duration = Duration::from_secs(60 * 60);

/// What a server in the OpenAI profile needs beyond the shared mock options.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpenAiOptions {
    /// Each session ends (`error` `session_expired`, then close) this long after it connected.
    pub lifetime: Duration,
}

impl Default for OpenAiOptions {
    fn default() -> Self {
        OpenAiOptions {
            lifetime: DEFAULT_LIFETIME,
        }
    }
}

/// What a client can do in place in a session of the OpenAI profile: `session.update` of
/// instructions and tools, conversation items at any time, function calls that end the
/// response, no resumption.
pub const CAPABILITIES: crate::model::Capabilities = crate::model::Capabilities {
    update_instructions: true,
    update_tools: true,
    non_blocking_tools: false,
    mid_session_client_content: true,
    resumption: false,
    history_config: true,
    calls_pause_speech: false,
};

/// The model a client names when it talks to this mock (it serves any).
pub const MODEL_ID: &str = crate::model::catalog::DEFAULT_OPENAI_MODEL;

#[cfg(test)]
mod capability_tests {
    /// The mock's OpenAI behaviour and baton's model table agree on the model it imitates.
    #[test]
    fn baton_knows_the_mocked_model() {
        use crate::model::catalog::{Source, lookup};
        use crate::model::handle::Protocol;
        let info = lookup(Protocol::OpenAi, super::MODEL_ID);
        assert_eq!(info.source, Source::Known);
        assert_eq!(info.capabilities, super::CAPABILITIES);
    }
}
