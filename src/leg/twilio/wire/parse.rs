//! Parsing of Twilio Media Streams messages: the envelope first (`event`, `sequenceNumber`,
//! `streamSid`), then only the body that event names, each into a private serde mirror whose
//! fields are all optional, so that a missing field is reported by name and an unknown event
//! never fails on fields it happens to share with another event.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;

use crate::b64::STANDARD;
use base64::Engine;
use serde::Deserialize;
use serde::de::{self, Deserializer, Visitor};
use serde_json::Value;

use super::{
    Dtmf, FromTwilio, MAX_INBOUND_MESSAGE, MAX_OUTBOUND_MESSAGE, Mark, Media, MediaFormat, Start,
    Stop, ToTwilio, TwilioEvent, WireError,
};

/// Parses one text message from Twilio (limit [`MAX_INBOUND_MESSAGE`]).
pub fn parse_from_twilio(text: &str) -> Result<FromTwilio, WireError> {
    if let Some((m, media)) = fast_media::<FastInBody>(text, MAX_INBOUND_MESSAGE) {
        let payload = decode_payload("media", Some(media.payload))?;
        return Ok(FromTwilio {
            sequence_number: m.sequence_number,
            stream_sid: m.stream_sid.map(str::to_owned),
            event: TwilioEvent::Media(Media {
                track: media.track.map(str::to_owned),
                chunk: media.chunk,
                timestamp: media.timestamp,
                payload,
            }),
        });
    }
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

/// Parses one text message sent toward Twilio (limit [`MAX_OUTBOUND_MESSAGE`]).
pub fn parse_to_twilio(text: &str) -> Result<ToTwilio, WireError> {
    if let Some((m, media)) = fast_media::<FastOutBody>(text, MAX_OUTBOUND_MESSAGE) {
        return Ok(ToTwilio::Media {
            stream_sid: m.stream_sid.unwrap_or_default().to_owned(),
            payload: decode_payload("media", Some(media.payload))?,
        });
    }
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

/// A `media` message (50 a second each way) read in one pass, its strings borrowed from the text.
/// Anything else — another event, a string with escapes, a field of the wrong type, a missing
/// payload — is not one, and goes the general way, which also names what is wrong. `B` is the
/// body each direction reads (the same fields as the general way's, so that both accept alike).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct FastMedia<'a, B> {
    event: &'a str,
    #[serde(default, deserialize_with = "opt_num")]
    sequence_number: Option<u64>,
    #[serde(default, borrow)]
    stream_sid: Option<&'a str>,
    /// Optional here (a missing `Option` reads as `None`) so that another event (a `mark`) is
    /// told apart without building an error.
    media: Option<B>,
}

/// A `media` body from Twilio.
#[derive(Deserialize)]
struct FastInBody<'a> {
    #[serde(default, borrow)]
    track: Option<&'a str>,
    #[serde(default, deserialize_with = "opt_num")]
    chunk: Option<u64>,
    #[serde(default, deserialize_with = "opt_num")]
    timestamp: Option<u64>,
    payload: &'a str,
}

/// A `media` body toward Twilio.
#[derive(Deserialize)]
struct FastOutBody<'a> {
    payload: &'a str,
}

fn fast_media<'a, B: Deserialize<'a>>(
    text: &'a str,
    limit: usize,
) -> Option<(FastMedia<'a, B>, B)> {
    // serde reads a struct from a JSON array too; a Twilio message is always an object.
    if text.len() > limit || !text.trim_start().starts_with('{') {
        return None;
    }
    let mut m = FastMedia::<B>::deserialize(&mut serde_json::Deserializer::from_str(text)).ok()?;
    let body = m.media.take().filter(|_| m.event == "media")?;
    Some((m, body))
}

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
    // The plain decoder first (it does not track the path); only a failure is decoded again to
    // name the field at fault.
    let fast = Envelope::deserialize(&mut serde_json::Deserializer::from_str(text));
    let de = &mut serde_json::Deserializer::from_str(text);
    let env: Envelope = match fast.or_else(|_| serde_path_to_error::deserialize(de)) {
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
    if let Ok(v) = T::deserialize(&mut serde_json::Deserializer::from_str(text)) {
        return Ok(v);
    }
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
