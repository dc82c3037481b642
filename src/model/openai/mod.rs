//! The OpenAI Realtime protocol (GA, and the beta dialect where it differs): wire types, a pure
//! codec with the little state the protocol needs, the endpoint and its credential, and the
//! session client over tokio-tungstenite.

pub mod codec;
pub mod endpoint;
pub mod protocol;
pub mod session;
pub mod setup;
pub mod translate;
pub mod wire;

/// Audio rate of `audio/pcm`, both directions (the only one the service supports).
pub const PCM_RATE: u32 = 24_000;
/// Audio rate of `audio/pcmu` and `audio/pcma`.
pub const G711_RATE: u32 = 8_000;
