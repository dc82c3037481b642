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
//! A message is read in two passes over the text: the envelope (`event`, `sequenceNumber`,
//! `streamSid`) first, then only the body that event names. Both passes skip what they do not
//! need, so an unknown event whose fields happen to share a name with another event's body never
//! fails to parse.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt::{self, Write as _};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

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
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Parses one text message from Twilio (limit [`MAX_INBOUND_MESSAGE`]).
pub fn parse_from_twilio(text: &str) -> Result<FromTwilio, WireError> {
    let env = envelope(text, MAX_INBOUND_MESSAGE)?;
    let event = match env.event.as_ref() {
        "connected" => {
            let b: ConnectedBody = body(text, "connected")?;
            TwilioEvent::Connected {
                protocol: b.protocol,
                version: b.version,
            }
        }
        "start" => {
            let b: StartBody = body(text, "start")?;
            let s = b
                .start
                .ok_or_else(|| WireError::field("start", "start", "missing"))?;
            let stream_sid = s.stream_sid.or_else(|| env.stream_sid.clone());
            if stream_sid.is_none() {
                return Err(WireError::field(
                    "start",
                    "start.streamSid",
                    "missing (and no top-level streamSid either)",
                ));
            }
            TwilioEvent::Start(Start {
                stream_sid,
                account_sid: s.account_sid,
                call_sid: s.call_sid,
                tracks: s.tracks.unwrap_or_default(),
                custom_parameters: s
                    .custom_parameters
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(k, v)| match v {
                        Value::String(s) => (k, s),
                        other => (k, other.to_string()),
                    })
                    .collect(),
                media_format: s.media_format.map(|f| MediaFormat {
                    encoding: f.encoding,
                    sample_rate: f.sample_rate,
                    channels: f.channels,
                }),
            })
        }
        "media" => {
            let b: InMediaBody = body(text, "media")?;
            let m = b
                .media
                .ok_or_else(|| WireError::field("media", "media", "missing"))?;
            let payload = decode_payload("media", m.payload.as_deref())?;
            TwilioEvent::Media(Media {
                track: m.track,
                chunk: m.chunk,
                timestamp: m.timestamp,
                payload,
            })
        }
        "dtmf" => {
            let b: DtmfBody = body(text, "dtmf")?;
            let d = b
                .dtmf
                .ok_or_else(|| WireError::field("dtmf", "dtmf", "missing"))?;
            let raw = d
                .digit
                .ok_or_else(|| WireError::field("dtmf", "dtmf.digit", "missing"))?;
            let mut chars = raw.chars();
            let digit = match (chars.next(), chars.next()) {
                (Some(c), None) => c,
                _ => {
                    return Err(WireError::field(
                        "dtmf",
                        "dtmf.digit",
                        format!("must be exactly one key (0-9, *, #), got {raw:?}"),
                    ));
                }
            };
            TwilioEvent::Dtmf(Dtmf {
                track: d.track,
                digit,
            })
        }
        "mark" => TwilioEvent::Mark(mark_body(text)?),
        "stop" => {
            let b: StopBody = body(text, "stop")?;
            let s = b.stop.unwrap_or_default();
            TwilioEvent::Stop(Stop {
                account_sid: s.account_sid,
                call_sid: s.call_sid,
            })
        }
        other => TwilioEvent::Unknown {
            event: other.to_owned(),
        },
    };
    Ok(FromTwilio {
        sequence_number: env.sequence_number,
        stream_sid: env.stream_sid,
        event,
    })
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
    /// The message as Twilio expects it.
    pub fn to_json(&self) -> String {
        let b64;
        let msg = match self {
            ToTwilio::Media {
                stream_sid,
                payload,
            } => {
                b64 = STANDARD.encode(payload);
                OutMsg {
                    event: "media",
                    stream_sid,
                    media: Some(OutPayload { payload: &b64 }),
                    mark: None,
                }
            }
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

/// Parses one text message sent toward Twilio (limit [`MAX_OUTBOUND_MESSAGE`]).
pub fn parse_to_twilio(text: &str) -> Result<ToTwilio, WireError> {
    let env = envelope(text, MAX_OUTBOUND_MESSAGE)?;
    let stream_sid = env.stream_sid.unwrap_or_default();
    Ok(match env.event.as_ref() {
        "media" => {
            let b: OutMediaBody = body(text, "media")?;
            let m = b
                .media
                .ok_or_else(|| WireError::field("media", "media", "missing"))?;
            let payload = decode_payload("media", m.payload.as_deref())?;
            ToTwilio::Media {
                stream_sid,
                payload,
            }
        }
        "mark" => ToTwilio::Mark {
            stream_sid,
            name: mark_body(text)?.name,
        },
        "clear" => ToTwilio::Clear { stream_sid },
        other => ToTwilio::Unknown {
            event: other.to_owned(),
        },
    })
}

// ---------------------------------------------------------------------------------------------
// Parsing helpers
// ---------------------------------------------------------------------------------------------

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Envelope<'a> {
    #[serde(default, borrow)]
    event: Option<Cow<'a, str>>,
    #[serde(default, deserialize_with = "opt_num")]
    sequence_number: Option<u64>,
    #[serde(default)]
    stream_sid: Option<String>,
}

struct ParsedEnvelope<'a> {
    event: Cow<'a, str>,
    sequence_number: Option<u64>,
    stream_sid: Option<String>,
}

fn envelope(text: &str, limit: usize) -> Result<ParsedEnvelope<'_>, WireError> {
    if text.len() > limit {
        return Err(WireError::TooLarge {
            len: text.len(),
            limit,
        });
    }
    // serde reads a struct from a JSON array too; a Twilio message is always an object.
    if !text.trim_start().starts_with('{') {
        return Err(match serde_json::from_str::<Value>(text) {
            Ok(v) => WireError::NotObject(kind_of(&v)),
            Err(e) => WireError::NotJson(e.to_string()),
        });
    }
    let de = &mut serde_json::Deserializer::from_str(text);
    let env: Envelope = match serde_path_to_error::deserialize(de) {
        Ok(env) => env,
        Err(e) => {
            let path = e.path().to_string();
            let inner = e.into_inner();
            // Only the rare failure path looks at the message twice, to name the event.
            return Err(match serde_json::from_str::<Value>(text) {
                Ok(Value::Object(map)) => match map.get("event") {
                    Some(Value::String(ev)) => {
                        WireError::field(ev, &path, strip_location(&inner.to_string()))
                    }
                    Some(other) if path == "event" => WireError::EventNotString(other.to_string()),
                    _ => WireError::field("?", &path, strip_location(&inner.to_string())),
                },
                _ => WireError::NotJson(inner.to_string()),
            });
        }
    };
    let event = env.event.ok_or(WireError::NoEvent)?;
    Ok(ParsedEnvelope {
        event,
        sequence_number: env.sequence_number,
        stream_sid: env.stream_sid,
    })
}

/// Decodes the body of `event`, naming the field at fault.
fn body<'a, T: Deserialize<'a>>(text: &'a str, event: &str) -> Result<T, WireError> {
    let de = &mut serde_json::Deserializer::from_str(text);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let field = e.path().to_string();
        WireError::field(event, &field, strip_location(&e.into_inner().to_string()))
    })
}

fn mark_body(text: &str) -> Result<Mark, WireError> {
    let b: MarkBody = body(text, "mark")?;
    let m = b
        .mark
        .ok_or_else(|| WireError::field("mark", "mark", "missing"))?;
    let name = m
        .name
        .ok_or_else(|| WireError::field("mark", "mark.name", "missing"))?;
    Ok(Mark { name })
}

fn decode_payload(event: &str, b64: Option<&str>) -> Result<Vec<u8>, WireError> {
    let b64 = b64.ok_or_else(|| WireError::field(event, "media.payload", "missing"))?;
    let mut out = Vec::with_capacity(b64.len() / 4 * 3);
    STANDARD.decode_vec(b64, &mut out).map_err(|e| {
        WireError::field(
            event,
            "media.payload",
            format!("not valid base64 ({e}); expected base64 μ-law audio"),
        )
    })?;
    Ok(out)
}

/// serde_json appends " at line L column C"; the field path says more.
fn strip_location(msg: &str) -> String {
    match msg.rfind(" at line ") {
        Some(i) => msg[..i].to_owned(),
        None => msg.to_owned(),
    }
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
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

/// A number, or a string holding one (Twilio sends counters as strings). `null` reads as absent.
fn opt_num<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    struct NumVisitor;
    impl<'de> Visitor<'de> for NumVisitor {
        type Value = Option<u64>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a non-negative integer or a string holding one")
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
            Ok(Some(v))
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
            u64::try_from(v)
                .map(Some)
                .map_err(|_| E::custom(format!("expected a non-negative integer, got {v}")))
        }
        fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
            if v >= 0.0 && v.fract() == 0.0 && v < u64::MAX as f64 {
                Ok(Some(v as u64))
            } else {
                Err(E::custom(format!(
                    "expected a non-negative integer, got {v}"
                )))
            }
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
            v.trim().parse::<u64>().map(Some).map_err(|_| {
                E::custom(format!(
                    "expected a non-negative integer or a string holding one, got {v:?}"
                ))
            })
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
    }
    d.deserialize_any(NumVisitor)
}

#[derive(Deserialize)]
struct ConnectedBody {
    #[serde(default)]
    protocol: Option<String>,
    #[serde(default)]
    version: Option<String>,
}

#[derive(Deserialize)]
struct StartBody {
    #[serde(default)]
    start: Option<RawStart>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawStart {
    #[serde(default)]
    stream_sid: Option<String>,
    #[serde(default)]
    account_sid: Option<String>,
    #[serde(default)]
    call_sid: Option<String>,
    #[serde(default)]
    tracks: Option<Vec<String>>,
    #[serde(default)]
    custom_parameters: Option<BTreeMap<String, Value>>,
    #[serde(default)]
    media_format: Option<RawMediaFormat>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawMediaFormat {
    #[serde(default)]
    encoding: Option<String>,
    #[serde(default, deserialize_with = "opt_num")]
    sample_rate: Option<u64>,
    #[serde(default, deserialize_with = "opt_num")]
    channels: Option<u64>,
}

#[derive(Deserialize)]
struct InMediaBody<'a> {
    #[serde(default, borrow)]
    media: Option<RawInMedia<'a>>,
}

#[derive(Deserialize)]
struct RawInMedia<'a> {
    #[serde(default)]
    track: Option<String>,
    #[serde(default, deserialize_with = "opt_num")]
    chunk: Option<u64>,
    #[serde(default, deserialize_with = "opt_num")]
    timestamp: Option<u64>,
    #[serde(default, borrow)]
    payload: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct OutMediaBody<'a> {
    #[serde(default, borrow)]
    media: Option<RawOutMedia<'a>>,
}

#[derive(Deserialize)]
struct RawOutMedia<'a> {
    #[serde(default, borrow)]
    payload: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct DtmfBody {
    #[serde(default)]
    dtmf: Option<RawDtmf>,
}

#[derive(Deserialize)]
struct RawDtmf {
    #[serde(default)]
    track: Option<String>,
    #[serde(default)]
    digit: Option<String>,
}

#[derive(Deserialize)]
struct MarkBody {
    #[serde(default)]
    mark: Option<RawMark>,
}

#[derive(Deserialize)]
struct RawMark {
    #[serde(default)]
    name: Option<String>,
}

#[derive(Deserialize)]
struct StopBody {
    #[serde(default)]
    stop: Option<RawStop>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct RawStop {
    #[serde(default)]
    account_sid: Option<String>,
    #[serde(default)]
    call_sid: Option<String>,
}
