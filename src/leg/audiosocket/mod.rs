//! The Asterisk AudioSocket leg: baton's side of the raw TCP protocol Asterisk speaks from the
//! `AudioSocket()` dialplan application and the `AudioSocket/` channel driver, and a caller that
//! speaks it as Asterisk does (for tests, `baton dial audiosocket` and benchmarks).
//!
//! Asterisk is the TCP client: it connects, sends the call's UUID, then slin audio (8 kHz `0x10`,
//! or `0x11`–`0x18` for other rates with `Dial(AudioSocket/…/c(slin16))`), DTMF digits and finally
//! a hang-up. It plays whatever it receives the moment it arrives, with no buffer, no clear and no
//! playback acknowledgement, so baton paces its output on the call's playout clock and a barge-in
//! simply stops the audio.
//!
//! Layers, each owning one thing:
//! * [`wire`]: the 3-byte-header framing and its limits (no sockets, no state);
//! * [`session`]: the sans-IO core of one connection (start, re-framing, errors, outbound; no clock);
//! * [`server`]: the async shell over any byte stream that hands the call a `LegHandle`;
//! * [`caller`]: the Asterisk-like client with a recording and receive timestamps.

pub mod caller;
pub mod server;
pub mod session;
pub mod wire;

pub use caller::{CallerEnd, CallerError, CallerOptions, CallerReport, dial};
pub use server::{AudioSocketLegError, AudioSocketLegOptions, LegStats, accept};
pub use session::{AudioSocketSession, EndReason, SessionError, SessionStats, StartInfo};
