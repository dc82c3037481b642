//! The Twilio Media Streams leg: baton's side of a bidirectional `<Connect><Stream>` WebSocket,
//! and a caller that speaks the same protocol as Twilio does (for tests, `baton dial` and load
//! benchmarks against any Twilio-protocol server).
//!
//! Layers, each owning one thing:
//! * [`wire`]: the JSON messages both ways and their parsers (no sockets, no state);
//! * [`signature`]: `X-Twilio-Signature` signing and validation;
//! * [`stream`]: the sans-IO core of one stream (re-framing, gaps, marks, clear; no clock);
//! * [`server`]: the async shell over an axum WebSocket that hands the call a `LegHandle`;
//! * [`caller`]: the Twilio-protocol client with Twilio-like playback and a stereo recording;
//! * [`cadence`]: frame-interval figures shared by the server's and the caller's reports.

pub mod cadence;
pub mod caller;
pub mod server;
pub mod signature;
pub mod stream;
pub mod wire;

pub use caller::{CallerEnd, CallerError, CallerOptions, CallerReport, dial};
pub use server::{LegEnd, LegStats, TwilioLegError, TwilioLegOptions, accept, configure_upgrade};
pub use signature::{AuthToken, SignatureError, sign, verify_upgrade};
pub use stream::{StartInfo, StreamOptions, StreamStats, TwilioStream};
