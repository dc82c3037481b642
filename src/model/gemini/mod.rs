//! The Gemini Live protocol (Developer API and Vertex AI): wire types, a pure codec, endpoints and
//! credentials, and the session client over tokio-tungstenite.

pub mod codec;
pub mod endpoint;
pub mod keepalive;
pub mod protocol;
pub mod session;
pub mod setup;
pub mod wire;

/// The model's native input rate: caller audio from a leg faster than this is resampled to it
/// (slower legs are sent at their own rate, declared in the MIME type).
pub const INPUT_RATE: u32 = 16_000;
/// Audio the model always produces.
pub const OUTPUT_RATE: u32 = 24_000;
