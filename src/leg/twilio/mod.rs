//! The Twilio Media Streams leg: baton's side of a bidirectional `<Connect><Stream>` WebSocket,
//! and a caller that speaks the same protocol as Twilio does (for tests, `baton dial` and load
//! benchmarks against any Twilio-protocol server).
//!
//! Layers, each owning one thing:
//! * [`wire`]: the JSON messages both ways and their parsers (no sockets, no state);
//! * [`signature`]: `X-Twilio-Signature` signing and validation;
//! * [`stream`]: the sans-IO core of one stream (re-framing, gaps, marks, clear; no clock).

pub mod signature;
pub mod stream;
pub mod wire;

pub use signature::{AuthToken, SignatureError, sign, verify_upgrade};
pub use stream::{StartInfo, StreamOptions, StreamStats, TwilioStream};
