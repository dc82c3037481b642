//! The JSON control messages of `WS /stream`, both ways (audio travels in binary messages and is
//! not here). Parsing is lenient about unknown fields and events, strict about the audio format.

use serde::Serialize;
use serde_json::Value;

/// Rates a stream may use (both encodings).
pub const RATES: [u32; 4] = [8_000, 16_000, 24_000, 48_000];
/// Largest control message accepted.
pub const MAX_TEXT: usize = 64 * 1024;

/// How audio is carried.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Encoding {
    /// Raw signed 16-bit little-endian mono PCM, any message size inbound, 20 ms outbound.
    Pcm16,
    /// One Opus packet per message (mono), 20 ms outbound.
    Opus,
}

/// The audio format named in `start`, used both ways.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Format {
    pub encoding: Encoding,
    pub sample_rate: u32,
}

impl std::fmt::Display for Format {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let e = match self.encoding {
            Encoding::Pcm16 => "pcm16",
            Encoding::Opus => "opus",
        };
        write!(f, "{e} at {} Hz", self.sample_rate)
    }
}

/// A message from the client.
#[derive(Clone, Debug, PartialEq)]
pub enum FromClient {
    Start {
        format: Format,
    },
    /// The client has played the audio before baton's mark of this name.
    Mark {
        name: String,
    },
    /// The client hangs up.
    Stop,
    /// An event this code does not know (ignored).
    Unknown {
        event: String,
    },
}

/// A message to the client.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "event", rename_all = "lowercase")]
pub enum ToClient {
    /// The start was accepted; audio may flow.
    Started { format: Format, frame_ms: u32 },
    /// Sent after the last frame of a reply; echo it once that audio has played.
    Mark { name: String },
    /// Barge-in: drop the audio you have buffered (and the marks behind it).
    Clear,
    /// A fragment of what the caller (`role: "caller"`) or the agent (`"agent"`) said.
    Transcript {
        role: &'static str,
        text: String,
        finished: bool,
    },
    /// The call is over: why, and its turns (who spoke, what was said) and handoffs.
    Stop {
        reason: String,
        #[serde(skip_serializing_if = "Value::is_null")]
        summary: Value,
    },
    /// A message was refused; `fatal` when the stream is closed because of it.
    Error { message: String, fatal: bool },
}

impl ToClient {
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// A control message that cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("control message of {0} bytes is larger than the {MAX_TEXT}-byte limit")]
    TooLarge(usize),
    #[error("not JSON: {0}")]
    NotJson(String),
    #[error("a control message is a JSON object with an \"event\" string")]
    NoEvent,
    #[error(
        "\"start\" needs \"format\": {{\"encoding\": \"pcm16\" or \"opus\", \"sample_rate\": 8000, 16000, 24000 or 48000}}"
    )]
    NoFormat,
    #[error("unknown encoding {0:?}: use \"pcm16\" (16-bit little-endian PCM) or \"opus\"")]
    UnknownEncoding(String),
    #[error("sample_rate {0} is not supported: use 8000, 16000, 24000 or 48000")]
    BadRate(String),
    #[error("\"mark\" needs a \"name\" string")]
    MarkWithoutName,
}

/// Parses one text message from the client.
pub fn parse(text: &str) -> Result<FromClient, WireError> {
    if text.len() > MAX_TEXT {
        return Err(WireError::TooLarge(text.len()));
    }
    let v: Value = serde_json::from_str(text).map_err(|e| WireError::NotJson(e.to_string()))?;
    let event = v
        .get("event")
        .and_then(Value::as_str)
        .ok_or(WireError::NoEvent)?;
    match event {
        "start" => {
            let f = v
                .get("format")
                .filter(|f| f.is_object())
                .ok_or(WireError::NoFormat)?;
            let encoding = match f.get("encoding").and_then(Value::as_str) {
                Some("pcm16") => Encoding::Pcm16,
                Some("opus") => Encoding::Opus,
                Some(other) => return Err(WireError::UnknownEncoding(other.to_owned())),
                None => return Err(WireError::NoFormat),
            };
            let rate = f.get("sample_rate").ok_or(WireError::NoFormat)?;
            let sample_rate = rate
                .as_u64()
                .and_then(|r| u32::try_from(r).ok())
                .filter(|r| RATES.contains(r))
                .ok_or_else(|| WireError::BadRate(rate.to_string()))?;
            Ok(FromClient::Start {
                format: Format {
                    encoding,
                    sample_rate,
                },
            })
        }
        "mark" => {
            let name = v
                .get("name")
                .or_else(|| v.get("mark").and_then(|m| m.get("name")))
                .and_then(Value::as_str)
                .ok_or(WireError::MarkWithoutName)?;
            Ok(FromClient::Mark {
                name: name.to_owned(),
            })
        }
        "stop" => Ok(FromClient::Stop),
        other => Ok(FromClient::Unknown {
            event: other.to_owned(),
        }),
    }
}

/// The client's side: serialises a client message (for the test client and examples).
pub fn client_json(msg: &FromClient) -> String {
    let v = match msg {
        FromClient::Start { format } => serde_json::json!({"event": "start", "format": format}),
        FromClient::Mark { name } => serde_json::json!({"event": "mark", "name": name}),
        FromClient::Stop => serde_json::json!({"event": "stop"}),
        FromClient::Unknown { event } => serde_json::json!({ "event": event }),
    };
    v.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_formats() {
        let f = |t: &str| parse(t);
        assert_eq!(
            f(r#"{"event":"start","format":{"encoding":"pcm16","sample_rate":16000},"x":1}"#),
            Ok(FromClient::Start {
                format: Format {
                    encoding: Encoding::Pcm16,
                    sample_rate: 16000
                }
            })
        );
        let start = FromClient::Start {
            format: Format {
                encoding: Encoding::Opus,
                sample_rate: 48000,
            },
        };
        assert_eq!(f(&client_json(&start)), Ok(start));
        assert_eq!(
            f(r#"{"event":"start","format":{"encoding":"mp3","sample_rate":16000}}"#),
            Err(WireError::UnknownEncoding("mp3".into()))
        );
        assert_eq!(
            f(r#"{"event":"start","format":{"encoding":"pcm16","sample_rate":44100}}"#),
            Err(WireError::BadRate("44100".into()))
        );
        assert_eq!(
            f(r#"{"event":"start","format":{"encoding":"pcm16","sample_rate":"16000"}}"#),
            Err(WireError::BadRate("\"16000\"".into()))
        );
        assert_eq!(f(r#"{"event":"start"}"#), Err(WireError::NoFormat));
        assert!(matches!(f("{"), Err(WireError::NotJson(_))));
        assert_eq!(f(r#"{"type":"start"}"#), Err(WireError::NoEvent));
    }

    #[test]
    fn marks_stop_and_unknown() {
        assert_eq!(
            parse(r#"{"event":"mark","name":"reply-1"}"#),
            Ok(FromClient::Mark {
                name: "reply-1".into()
            })
        );
        // The Twilio shape is accepted too.
        assert_eq!(
            parse(r#"{"event":"mark","mark":{"name":"reply-2"}}"#),
            Ok(FromClient::Mark {
                name: "reply-2".into()
            })
        );
        assert_eq!(
            parse(r#"{"event":"mark"}"#),
            Err(WireError::MarkWithoutName)
        );
        assert_eq!(parse(r#"{"event":"stop"}"#), Ok(FromClient::Stop));
        assert_eq!(
            parse(r#"{"event":"ping"}"#),
            Ok(FromClient::Unknown {
                event: "ping".into()
            })
        );
    }

    #[test]
    fn server_messages() {
        assert_eq!(ToClient::Clear.to_json(), r#"{"event":"clear"}"#);
        assert_eq!(
            ToClient::Mark {
                name: "reply-1".into()
            }
            .to_json(),
            r#"{"event":"mark","name":"reply-1"}"#
        );
        let s = ToClient::Started {
            format: Format {
                encoding: Encoding::Pcm16,
                sample_rate: 8000,
            },
            frame_ms: 20,
        };
        assert_eq!(
            s.to_json(),
            r#"{"event":"started","format":{"encoding":"pcm16","sample_rate":8000},"frame_ms":20}"#
        );
    }
}
