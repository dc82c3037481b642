//! The browser leg: WebRTC with WHIP-style signalling (the answer is `sendrecv`), Opus both ways.
//!
//! * [`peer`] answers an SDP offer with webrtc-rs: one Opus track each way, non-trickle ICE.
//! * [`codec`] is the sans-IO media core: RTP payloads → 20 ms frames (gaps found by sequence
//!   number and timestamp, concealed with libopus FEC and PLC), and frames → Opus packets.
//! * [`driver`] runs an answered connection as a [`crate::leg::LegHandle`].
//!
//! The HTTP side (`POST /whip`, `DELETE /whip/<session>`) lives in `server::whip`.
//!
//! # Rate
//!
//! The leg presents **24 kHz** frames to the call, both ways ([`LEG_RATE`]). Opus runs natively
//! at 24 kHz (libopus decodes and encodes at 8/12/16/24/48 kHz without a resampler of its own
//! in the path), and 24 kHz is the model's output rate, so the agent's voice reaches the
//! encoder untouched: the call's downlink resampler is a pass-through (no filter delay, the
//! model's full 12 kHz band kept). The uplink is resampled once, 24 → 16 kHz, by the call's
//! streaming resampler (10 ms delay, as every leg pays). 48 kHz would add a second resampler
//! (24 → 48 kHz down, 48 → 16 kHz up) for no audible gain; 16 kHz would save the uplink
//! resampler but band-limit the agent's voice to 8 kHz and move the 10 ms to the downlink.

pub mod codec;
pub mod config;
pub mod driver;
pub mod peer;

pub use driver::{LegEnd, LegStats, WebrtcLegError, WebrtcLegOptions, start};
pub use peer::{Answered, IceServer, Peer, PeerError, PeerSettings, answer, check_offer};

/// The PCM rate of a WebRTC leg, both directions.
pub const LEG_RATE: u32 = 24_000;
