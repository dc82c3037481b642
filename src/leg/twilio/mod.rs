//! The Twilio Media Streams leg: baton's side of a bidirectional `<Connect><Stream>` WebSocket,
//! and a caller that speaks the same protocol as Twilio does (for tests, `baton dial` and load
//! benchmarks against any Twilio-protocol server).
//!
//! Layers, each owning one thing:
//! * [`wire`]: the JSON messages both ways and their parsers (no sockets, no state);
//! * [`signature`]: `X-Twilio-Signature` signing and validation.

pub mod signature;
pub mod wire;

pub use signature::{AuthToken, SignatureError, sign, verify_upgrade};
