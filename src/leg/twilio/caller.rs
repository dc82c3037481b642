//! A Twilio-protocol caller: the bridge caller ([`crate::leg::bridge::caller`]), whose options
//! default to the Twilio dialect (μ-law 8 kHz, `X-Twilio-Signature` when given a token). It sends
//! `connected` and `start`, one 20 ms `media` per tick at real time, plays what it receives like
//! Twilio does (queued, consumed at real time, marks echoed once played, `clear` echoing every
//! pending mark) and records both sides, or only counts what it heard when a load run turns the
//! recording off (`record_audio`); its report carries how late its own tick timer fired.

pub use crate::leg::bridge::caller::{CallerEnd, CallerError, CallerOptions, CallerReport, dial};
