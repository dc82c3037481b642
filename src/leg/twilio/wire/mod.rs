//! Twilio Media Streams wire format: typed messages both ways (Twilio → media server:
//! `connected`, `start`, `media`, `dtmf`, `mark`, `stop`; media server → Twilio: `media`, `mark`,
//! `clear`), their JSON, and parsers that refuse garbage with an error naming the event and field.
//!
//! Parsing is lenient where the protocol varies between bridges that speak it: unknown events
//! become [`TwilioEvent::Unknown`] / [`ToTwilio::Unknown`] carrying their name, unknown fields are
//! ignored, optional fields may be missing, and numeric-looking fields (`sequenceNumber`, `chunk`,
//! `timestamp`, `sampleRate`, `channels`) are accepted as numbers or as numeric strings. It is
//! strict where a value cannot be used: a `media` without a decodable `payload`, a `mark` without
//! a `name`, a `dtmf` whose `digit` is not one key.
//!
//! The parsers live in `parse.rs`; this module holds the types, their JSON, and a writer for the
//! per-frame messages.

mod parse;

use std::collections::BTreeMap;
use std::fmt::{self, Write as _};

use crate::b64::STANDARD;
use base64::Engine;
use serde::Serialize;
use serde_json::{Value, json};

pub use parse::{parse_from_twilio, parse_to_twilio};

/// Largest message accepted from Twilio. A 20 ms `media` message is about 300 bytes; the largest
/// legitimate one is a `start` with many custom parameters.
pub const MAX_INBOUND_MESSAGE: usize = 64 * 1024;
/// Largest message accepted toward Twilio (by the caller): outbound `media` may be of any length,
/// so this allows about six minutes of audio in one message.
pub const MAX_OUTBOUND_MESSAGE: usize = 4 * 1024 * 1024;
/// The only media encoding Twilio Media Streams uses: G.711 μ-law, 8000 Hz, mono.
pub const MULAW_ENCODING: &str = "audio/x-mulaw";

/// A message that cannot be used. Its text names the event and the field at fault.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("message of {len} bytes refused: the limit is {limit} bytes")]
    TooLarge { len: usize, limit: usize },
    #[error("not JSON: {0}")]
    NotJson(String),
    #[error("not a JSON object (got {0}): every Twilio Media Streams message is one")]
    NotObject(&'static str),
    #[error("message has no \"event\" field: every Twilio Media Streams message names its event")]
    NoEvent,
    #[error("\"event\" must be a string naming the event, got {0}")]
    EventNotString(String),
    #[error("\"{event}\" message: {field}: {reason}")]
    BadField {
        event: String,
        field: String,
        reason: String,
    },
}

impl WireError {
    fn field(event: &str, field: &str, reason: impl Into<String>) -> Self {
        WireError::BadField {
            event: event.to_owned(),
            field: field.to_owned(),
            reason: reason.into(),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Twilio → media server
// ---------------------------------------------------------------------------------------------

/// One message from Twilio (or from a caller speaking its dialect).
#[derive(Clone, Debug, PartialEq)]
pub struct FromTwilio {
    /// Counts up from 1 on every message but `connected`.
    pub sequence_number: Option<u64>,
    /// The stream's id, repeated on every message but `connected`.
    pub stream_sid: Option<String>,
    pub event: TwilioEvent,
}

/// What a message from Twilio says.
#[derive(Clone, Debug, PartialEq)]
pub enum TwilioEvent {
    /// Always first: `{"event":"connected","protocol":"Call","version":"1.0.0"}`.
    Connected {
        protocol: Option<String>,
        version: Option<String>,
    },
    /// Stream metadata, once, straight after `connected`.
    Start(Start),
    /// Caller audio.
    Media(Media),
    /// The caller pressed a key.
    Dtmf(Dtmf),
    /// The echo of a mark the media server sent: the audio queued before it has been played
    /// (or dropped by a `clear`).
    Mark(Mark),
    /// The stream ended.
    Stop(Stop),
    /// An event this code does not know; tolerated and ignored.
    Unknown { event: String },
}

/// The `start` body.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Start {
    /// `start.streamSid`, or the top-level `streamSid` when the body lacks it.
    pub stream_sid: Option<String>,
    pub account_sid: Option<String>,
    pub call_sid: Option<String>,
    /// e.g. `["inbound"]`.
    pub tracks: Vec<String>,
    /// The `<Parameter>`s of the TwiML `<Stream>`; non-string values are kept as their JSON text.
    pub custom_parameters: BTreeMap<String, String>,
    pub media_format: Option<MediaFormat>,
}

/// `start.mediaFormat`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MediaFormat {
    pub encoding: Option<String>,
    pub sample_rate: Option<u64>,
    pub channels: Option<u64>,
}

impl MediaFormat {
    /// `audio/x-mulaw`, 8000 Hz, mono: what Twilio sends.
    pub fn mulaw_8k() -> Self {
        MediaFormat {
            encoding: Some(MULAW_ENCODING.to_owned()),
            sample_rate: Some(8000),
            channels: Some(1),
        }
    }

    /// Whether this is μ-law 8 kHz mono (missing fields are taken as the Twilio defaults).
    pub fn is_mulaw_8k_mono(&self) -> bool {
        self.encoding
            .as_deref()
            .is_none_or(|e| e.eq_ignore_ascii_case(MULAW_ENCODING))
            && self.sample_rate.is_none_or(|r| r == 8000)
            && self.channels.is_none_or(|c| c == 1)
    }
}

impl fmt::Display for MediaFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let or_q = |v: Option<u64>| v.map_or_else(|| "?".to_owned(), |v| v.to_string());
        write!(
            f,
            "{} {} Hz {} channel(s)",
            self.encoding.as_deref().unwrap_or("?"),
            or_q(self.sample_rate),
            or_q(self.channels)
        )
    }
}

/// The `media` body from Twilio.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Media {
    /// `"inbound"` on a bidirectional stream.
    pub track: Option<String>,
    /// Counts the track's messages up from 1.
    pub chunk: Option<u64>,
    /// Milliseconds since the stream started, of the payload's first sample.
    pub timestamp: Option<u64>,
    /// μ-law bytes, decoded from base64.
    pub payload: Vec<u8>,
}

/// The `dtmf` body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dtmf {
    pub track: Option<String>,
    pub digit: char,
}

/// The `mark` body (both directions).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mark {
    pub name: String,
}

/// The `stop` body.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stop {
    pub account_sid: Option<String>,
    pub call_sid: Option<String>,
}

impl FromTwilio {
    /// The message as Twilio writes it (numeric counters as strings).
    pub fn to_json(&self) -> String {
        let mut v = match &self.event {
            TwilioEvent::Connected { protocol, version } => {
                json!({"event": "connected", "protocol": protocol, "version": version})
            }
            TwilioEvent::Start(s) => json!({"event": "start", "start": {
                "streamSid": s.stream_sid.as_ref().or(self.stream_sid.as_ref()),
                "accountSid": s.account_sid,
                "callSid": s.call_sid,
                "tracks": s.tracks,
                "customParameters": s.custom_parameters,
                "mediaFormat": s.media_format.as_ref().map(|f| json!({
                    "encoding": f.encoding, "sampleRate": f.sample_rate, "channels": f.channels,
                })),
            }}),
            TwilioEvent::Media(m) => json!({"event": "media", "media": {
                "track": m.track,
                "chunk": m.chunk.map(|c| c.to_string()),
                "timestamp": m.timestamp.map(|t| t.to_string()),
                "payload": STANDARD.encode(&m.payload),
            }}),
            TwilioEvent::Dtmf(d) => {
                json!({"event": "dtmf", "dtmf": {"track": d.track, "digit": d.digit.to_string()}})
            }
            TwilioEvent::Mark(m) => json!({"event": "mark", "mark": {"name": m.name}}),
            TwilioEvent::Stop(s) => json!({"event": "stop", "stop": {
                "accountSid": s.account_sid, "callSid": s.call_sid,
            }}),
            TwilioEvent::Unknown { event } => json!({ "event": event }),
        };
        if let Value::Object(map) = &mut v {
            if let Some(n) = self.sequence_number {
                map.insert("sequenceNumber".into(), Value::String(n.to_string()));
            }
            if let Some(sid) = &self.stream_sid {
                map.insert("streamSid".into(), Value::String(sid.clone()));
            }
            strip_nulls(map);
        }
        v.to_string()
    }
}

/// Writes Twilio's two per-frame messages, `media` and the `mark` echo, without building a JSON
/// tree: the stream id is escaped once, each message appends only numbers, base64 and the name.
#[derive(Clone, Debug)]
pub struct InboundWriter {
    /// `,"streamSid":"…"` escaped.
    sid_field: String,
}

impl InboundWriter {
    pub fn new(stream_sid: &str) -> Self {
        let mut sid_field = String::from(r#","streamSid":"#);
        push_json_str(&mut sid_field, stream_sid);
        InboundWriter { sid_field }
    }

    /// Appends one `media` message (inbound track; counters as strings, as Twilio sends them).
    pub fn media(
        &self,
        sequence_number: u64,
        chunk: u64,
        timestamp_ms: u64,
        mulaw: &[u8],
        out: &mut String,
    ) {
        out.reserve(self.sid_field.len() + 128 + mulaw.len().div_ceil(3) * 4);
        // Writing into a String cannot fail.
        let _ = write!(
            out,
            r#"{{"event":"media","sequenceNumber":"{sequence_number}"{},"media":{{"track":"inbound","chunk":"{chunk}","timestamp":"{timestamp_ms}","payload":""#,
            self.sid_field
        );
        STANDARD.encode_string(mulaw, out);
        out.push_str("\"}}");
    }

    /// Appends one `mark` message echoing `name`.
    pub fn mark(&self, sequence_number: u64, name: &str, out: &mut String) {
        out.reserve(self.sid_field.len() + 64 + name.len());
        let _ = write!(
            out,
            r#"{{"event":"mark","sequenceNumber":"{sequence_number}"{},"mark":{{"name":"#,
            self.sid_field
        );
        push_json_str(out, name);
        out.push_str("}}");
    }
}

/// Appends `s` as a JSON string literal.
fn push_json_str(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// The length of `s` written by [`push_json_str`].
fn json_str_len(s: &str) -> usize {
    2 + s
        .chars()
        .map(|c| match c {
            '"' | '\\' | '\n' | '\r' | '\t' | '\u{8}' | '\u{c}' => 2,
            c if (c as u32) < 0x20 => 6,
            c => c.len_utf8(),
        })
        .sum::<usize>()
}

// ---------------------------------------------------------------------------------------------
// Media server → Twilio
// ---------------------------------------------------------------------------------------------

/// One message to Twilio. `stream_sid` is empty when a received message lacked it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ToTwilio {
    /// μ-law audio of any length, queued for playback in order.
    Media {
        stream_sid: String,
        payload: Vec<u8>,
    },
    /// Echoed by Twilio once the audio queued before it has played (or was cleared).
    Mark { stream_sid: String, name: String },
    /// Drop all queued, unplayed audio; Twilio echoes every pending mark.
    Clear { stream_sid: String },
    /// An event this code does not know; tolerated and ignored.
    Unknown { event: String },
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct OutMsg<'a> {
    event: &'a str,
    stream_sid: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    media: Option<OutPayload<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    mark: Option<OutName<'a>>,
}

#[derive(Serialize)]
struct OutPayload<'a> {
    payload: &'a str,
}

#[derive(Serialize)]
struct OutName<'a> {
    name: &'a str,
}

impl ToTwilio {
    /// The `media` message carrying `payload` (μ-law), written straight into one string: the
    /// per-frame message toward Twilio, 50 a second per call. The same text as the serde form.
    pub fn media_json(stream_sid: &str, payload: &[u8]) -> String {
        // Exactly the text's length: a string that fills its buffer becomes the socket's
        // message without another allocation.
        let len = 53 + json_str_len(stream_sid) + payload.len().div_ceil(3) * 4;
        let mut out = String::with_capacity(len);
        out.push_str(r#"{"event":"media","streamSid":"#);
        push_json_str(&mut out, stream_sid);
        out.push_str(r#","media":{"payload":""#);
        STANDARD.encode_string(payload, &mut out);
        out.push_str("\"}}");
        debug_assert_eq!(out.len(), len);
        out
    }

    /// The message as Twilio expects it.
    pub fn to_json(&self) -> String {
        let msg = match self {
            ToTwilio::Media {
                stream_sid,
                payload,
            } => return ToTwilio::media_json(stream_sid, payload),
            ToTwilio::Mark { stream_sid, name } => OutMsg {
                event: "mark",
                stream_sid,
                media: None,
                mark: Some(OutName { name }),
            },
            ToTwilio::Clear { stream_sid } => OutMsg {
                event: "clear",
                stream_sid,
                media: None,
                mark: None,
            },
            ToTwilio::Unknown { event } => OutMsg {
                event,
                stream_sid: "",
                media: None,
                mark: None,
            },
        };
        // Serialising plain strings into a String cannot fail.
        serde_json::to_string(&msg).unwrap_or_default()
    }
}

fn strip_nulls(map: &mut serde_json::Map<String, Value>) {
    map.retain(|_, v| !v.is_null());
    for v in map.values_mut() {
        if let Value::Object(inner) = v {
            strip_nulls(inner);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The hand-written `media` text is the one the serde form gives, escapes included.
    #[test]
    fn media_json_is_the_serde_form() {
        for sid in ["MZ0123", "M\"Z\\\n\u{1}\u{8}\u{c}\u{1f}é", ""] {
            for payload in [&[][..], &[0xff, 0x7f, 0x00], &[0x55; 160]] {
                let b64 = STANDARD.encode(payload);
                let serde_form = serde_json::to_string(&OutMsg {
                    event: "media",
                    stream_sid: sid,
                    media: Some(OutPayload { payload: &b64 }),
                    mark: None,
                })
                .unwrap();
                let text = ToTwilio::media_json(sid, payload);
                assert_eq!(text, serde_form);
                assert_eq!(text.len(), text.capacity());
            }
        }
    }
}
