//! The dialects' messages in one vocabulary. Each dialect module reads what its bridge sends into
//! an [`Inbound`], writes baton's [`Transmit`]s in its own shapes ([`Outgoing`] text or binary),
//! and — for the caller used by tests and load — does the reverse: writes what the bridge sends
//! ([`BridgeWriter`]) and reads what baton sends back ([`parse_reply`]).
//!
//! Twilio keeps its own typed parser (`leg::twilio::wire`, the fast path it always had); the
//! others read through `serde_json::Value` with `json::Msg`, which names the event and field of
//! every problem in the same [`WireError`].

mod exotel;
pub(crate) mod json;
mod plivo;
mod telnyx;
pub mod twilio_adapter;
mod vonage;

use crate::b64::STANDARD;
use base64::Engine;

use super::Dialect;
use super::audio::AudioFormat;
pub use crate::leg::twilio::wire::{
    MAX_INBOUND_MESSAGE, MAX_OUTBOUND_MESSAGE, Media, MediaFormat, Start, WireError,
};
pub use vonage::CONNECTED as VONAGE_CONNECTED;

/// One message from a bridge, whatever its dialect.
#[derive(Clone, Debug, PartialEq)]
pub enum Inbound {
    /// The socket is up (Twilio/Telnyx/Exotel `connected`); stream metadata follows.
    Connected,
    /// Stream metadata (`start`; Vonage's `websocket:connected`).
    Start(Start),
    /// Caller audio; `seq` is the message's envelope sequence number, if any.
    Media {
        media: Media,
        seq: Option<u64>,
    },
    Dtmf(char),
    /// A playback acknowledgement: the audio queued before this mark (Plivo checkpoint, Vonage
    /// notify) has played, or was dropped by a clear.
    Mark(String),
    /// The bridge acknowledged a clear (Plivo `clearedAudio`, Vonage `websocket:cleared`).
    Cleared,
    Stop,
    /// The bridge reported an error (Telnyx `error`); the stream carries on.
    Error(String),
    /// An event this code does not know; tolerated and ignored.
    Unknown(String),
}

impl Inbound {
    pub fn name(&self) -> &'static str {
        match self {
            Inbound::Connected => "connected",
            Inbound::Start(_) => "start",
            Inbound::Media { .. } => "media",
            Inbound::Dtmf(_) => "dtmf",
            Inbound::Mark(_) => "mark",
            Inbound::Cleared => "cleared",
            Inbound::Stop => "stop",
            Inbound::Error(_) => "error",
            Inbound::Unknown(_) => "unknown",
        }
    }
}

/// One thing baton sends to a bridge.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Transmit {
    /// Audio in the stream's format, queued by the bridge for playback in order.
    Media(Vec<u8>),
    /// Acknowledged by the bridge once the audio queued before it has played.
    Mark(String),
    /// Drop the bridge's queued, unplayed audio.
    Clear,
}

/// What a bridge receives from baton, as the caller reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    Media(Vec<u8>),
    Mark(String),
    Clear,
    Unknown(String),
}

/// A WebSocket message to write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outgoing {
    Text(String),
    Binary(Vec<u8>),
}

/// What a dialect's outbound messages need to know about the stream.
#[derive(Clone, Copy, Debug)]
pub struct Ctx<'a> {
    pub stream_sid: &'a str,
    pub format: AudioFormat,
}

/// Reads one text message from a bridge speaking `dialect`.
pub fn parse(dialect: Dialect, text: &str) -> Result<Inbound, WireError> {
    match dialect {
        Dialect::Twilio => twilio_adapter::parse(text),
        Dialect::Telnyx => telnyx::parse(text),
        Dialect::Plivo => plivo::parse(text),
        Dialect::Exotel => exotel::parse(text),
        Dialect::Vonage => vonage::parse(text),
    }
}

/// The stream's audio format from its `start`; `fallback` is what the route was configured with
/// (Exotel's `?sample-rate=`), used where the dialect leaves the format out. `Err` explains why
/// the format cannot be spoken.
pub fn format(
    dialect: Dialect,
    start: &Start,
    fallback: Option<AudioFormat>,
) -> Result<AudioFormat, String> {
    match dialect {
        Dialect::Twilio => twilio_adapter::format(start),
        Dialect::Telnyx => telnyx::format(start),
        Dialect::Plivo => plivo::format(start),
        Dialect::Exotel => exotel::format(start, fallback),
        Dialect::Vonage => vonage::format(start),
    }
}

/// Writes one of baton's messages in `dialect`.
pub fn render(dialect: Dialect, t: &Transmit, ctx: Ctx<'_>) -> Outgoing {
    match dialect {
        Dialect::Twilio => twilio_adapter::render(t, ctx),
        Dialect::Telnyx => telnyx::render(t, ctx),
        Dialect::Plivo => plivo::render(t, ctx),
        Dialect::Exotel => exotel::render(t, ctx),
        Dialect::Vonage => vonage::render(t, ctx),
    }
}

/// Reads one text message baton sent to a bridge speaking `dialect` (the caller's side).
pub fn parse_reply(dialect: Dialect, text: &str) -> Result<Reply, WireError> {
    match dialect {
        Dialect::Twilio => twilio_adapter::parse_reply(text),
        Dialect::Telnyx => telnyx::parse_reply(text),
        Dialect::Plivo => plivo::parse_reply(text),
        Dialect::Exotel => exotel::parse_reply(text),
        Dialect::Vonage => vonage::parse_reply(text),
    }
}

/// The ids and parameters a caller announces in its `start`.
#[derive(Clone, Debug, Default)]
pub struct CallIds {
    pub account_sid: String,
    pub call_sid: String,
    pub stream_sid: String,
    pub custom_parameters: std::collections::BTreeMap<String, String>,
}

/// Writes what a bridge sends to baton, in one dialect (the caller's side).
#[derive(Clone, Debug)]
pub struct BridgeWriter {
    pub dialect: Dialect,
    pub ids: CallIds,
    pub format: AudioFormat,
    twilio: crate::leg::twilio::wire::InboundWriter,
}

impl BridgeWriter {
    pub fn new(dialect: Dialect, ids: CallIds, format: AudioFormat) -> Self {
        let twilio = crate::leg::twilio::wire::InboundWriter::new(&ids.stream_sid);
        BridgeWriter {
            dialect,
            ids,
            format,
            twilio,
        }
    }

    /// What opens the stream, in order (`connected` then `start`; Vonage's single
    /// `websocket:connected`).
    pub fn opening(&self, seq: &mut u64) -> Vec<Outgoing> {
        match self.dialect {
            Dialect::Twilio => twilio_adapter::opening(self, seq),
            Dialect::Telnyx => telnyx::opening(self, seq),
            Dialect::Plivo => plivo::opening(self, seq),
            Dialect::Exotel => exotel::opening(self, seq),
            Dialect::Vonage => vonage::opening(self),
        }
    }

    /// One message of caller audio (already encoded in the stream's format).
    pub fn media(&self, seq: u64, chunk: u64, timestamp_ms: u64, payload: &[u8]) -> Outgoing {
        match self.dialect {
            Dialect::Twilio => {
                let mut out = String::new();
                self.twilio
                    .media(seq, chunk, timestamp_ms, payload, &mut out);
                Outgoing::Text(out)
            }
            Dialect::Telnyx => telnyx::media(self, seq, chunk, timestamp_ms, payload),
            Dialect::Plivo => plivo::media(self, seq, chunk, timestamp_ms, payload),
            Dialect::Exotel => exotel::media(self, seq, chunk, timestamp_ms, payload),
            Dialect::Vonage => Outgoing::Binary(payload.to_vec()),
        }
    }

    /// The acknowledgement of baton's mark `name` once its audio has played (or was cleared).
    pub fn mark_echo(&self, seq: u64, name: &str) -> Outgoing {
        match self.dialect {
            Dialect::Twilio => {
                let mut out = String::new();
                self.twilio.mark(seq, name, &mut out);
                Outgoing::Text(out)
            }
            Dialect::Telnyx => telnyx::mark_echo(self, seq, name),
            Dialect::Plivo => plivo::mark_echo(self, seq, name),
            Dialect::Exotel => exotel::mark_echo(self, seq, name),
            Dialect::Vonage => vonage::mark_echo(name),
        }
    }

    /// The acknowledgement of a clear, where the dialect has one.
    pub fn cleared(&self, seq: u64) -> Option<Outgoing> {
        match self.dialect {
            Dialect::Plivo => Some(plivo::cleared(self, seq)),
            Dialect::Vonage => Some(vonage::cleared()),
            Dialect::Twilio | Dialect::Telnyx | Dialect::Exotel => None,
        }
    }

    /// A key press.
    pub fn dtmf(&self, seq: u64, digit: char) -> Outgoing {
        match self.dialect {
            Dialect::Twilio => twilio_adapter::dtmf(self, seq, digit),
            Dialect::Telnyx => telnyx::dtmf(self, seq, digit),
            Dialect::Plivo => plivo::dtmf(self, seq, digit),
            Dialect::Exotel => exotel::dtmf(self, seq, digit),
            Dialect::Vonage => vonage::dtmf(digit),
        }
    }

    /// The end of the stream, where the dialect announces it (Vonage just closes).
    pub fn stop(&self, seq: u64) -> Option<Outgoing> {
        match self.dialect {
            Dialect::Twilio => Some(twilio_adapter::stop(self, seq)),
            Dialect::Telnyx => Some(telnyx::stop(self, seq)),
            Dialect::Plivo => Some(plivo::stop(self, seq)),
            Dialect::Exotel => Some(exotel::stop(self, seq)),
            Dialect::Vonage => None,
        }
    }
}

fn b64(payload: &[u8]) -> String {
    STANDARD.encode(payload)
}

/// The channel count, where given, must be one.
fn mono(f: &MediaFormat) -> Result<(), String> {
    match f.channels {
        Some(c) if c != 1 => Err(format!("{c} channels; only mono is spoken here")),
        _ => Ok(()),
    }
}

/// A sample rate baton can run a leg at.
fn usable_rate(rate: u64) -> Result<u32, String> {
    u32::try_from(rate)
        .ok()
        .filter(|r| super::audio::RATES.contains(r))
        .ok_or_else(|| {
            format!("sample rate {rate} Hz; only 8000, 16000 or 24000 Hz is spoken here")
        })
}
