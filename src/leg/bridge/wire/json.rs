//! Field access on a parsed JSON message for the dialects read through `serde_json::Value`: dotted
//! paths, numbers accepted as JSON numbers or numeric strings, and every problem reported as a
//! [`WireError`] naming the event and the field.

use std::collections::BTreeMap;

use crate::b64::STANDARD;
use base64::Engine;
use serde_json::{Map, Value};

use super::{Inbound, Media, MediaFormat};
use crate::leg::twilio::wire::WireError;

/// One JSON object message and the event it names.
pub struct Msg {
    pub event: String,
    pub map: Map<String, Value>,
}

/// Parses `text` (at most `limit` bytes) as an object and reads its event from `key` (`event`, or
/// Vonage's `action` toward the bridge).
pub fn object(text: &str, limit: usize, key: &str) -> Result<Msg, WireError> {
    if text.len() > limit {
        return Err(WireError::TooLarge {
            len: text.len(),
            limit,
        });
    }
    let map = match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(map)) => map,
        Ok(other) => return Err(WireError::NotObject(kind_of(&other))),
        Err(e) => return Err(WireError::NotJson(e.to_string())),
    };
    let event = match map.get(key) {
        None | Some(Value::Null) => return Err(WireError::NoEvent),
        Some(Value::String(s)) => s.clone(),
        Some(other) => return Err(WireError::EventNotString(other.to_string())),
    };
    Ok(Msg { event, map })
}

pub fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

impl Msg {
    /// The value at a dotted path; `None` when any step is missing or null.
    pub fn get(&self, path: &str) -> Option<&Value> {
        let mut parts = path.split('.');
        let mut v = self.map.get(parts.next()?)?;
        for p in parts {
            v = v.as_object()?.get(p)?;
        }
        (!v.is_null()).then_some(v)
    }

    pub fn has(&self, path: &str) -> bool {
        self.get(path).is_some()
    }

    fn bad(&self, path: &str, reason: impl Into<String>) -> WireError {
        WireError::BadField {
            event: self.event.clone(),
            field: path.to_owned(),
            reason: reason.into(),
        }
    }

    pub fn missing(&self, path: &str) -> WireError {
        self.bad(path, "missing")
    }

    /// A string; numbers are taken as their text.
    pub fn str(&self, path: &str) -> Result<Option<String>, WireError> {
        match self.get(path) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(Value::Number(n)) => Ok(Some(n.to_string())),
            Some(other) => {
                Err(self.bad(path, format!("expected a string, got {}", kind_of(other))))
            }
        }
    }

    /// A non-negative integer, as a JSON number or a string holding one.
    pub fn num(&self, path: &str) -> Result<Option<u64>, WireError> {
        let bad = |v: &dyn std::fmt::Display| {
            self.bad(
                path,
                format!("expected a non-negative integer or a string holding one, got {v}"),
            )
        };
        match self.get(path) {
            None => Ok(None),
            Some(Value::Number(n)) => n.as_u64().map(Some).ok_or_else(|| bad(n)),
            Some(Value::String(s)) => s
                .trim()
                .parse()
                .map(Some)
                .map_err(|_| bad(&format!("{s:?}"))),
            Some(other) => Err(bad(&kind_of(other))),
        }
    }

    /// An object of strings (other values kept as their JSON text).
    pub fn string_map(&self, path: &str) -> Result<BTreeMap<String, String>, WireError> {
        match self.get(path) {
            None => Ok(BTreeMap::new()),
            Some(Value::Object(m)) => Ok(m
                .iter()
                .map(|(k, v)| match v {
                    Value::String(s) => (k.clone(), s.clone()),
                    other => (k.clone(), other.to_string()),
                })
                .collect()),
            Some(other) => {
                Err(self.bad(path, format!("expected an object, got {}", kind_of(other))))
            }
        }
    }

    /// An array of strings.
    pub fn strings(&self, path: &str) -> Result<Vec<String>, WireError> {
        match self.get(path) {
            None => Ok(Vec::new()),
            Some(Value::Array(a)) => a
                .iter()
                .map(|v| match v {
                    Value::String(s) => Ok(s.clone()),
                    other => {
                        Err(self.bad(path, format!("expected strings, got {}", kind_of(other))))
                    }
                })
                .collect(),
            Some(other) => {
                Err(self.bad(path, format!("expected an array, got {}", kind_of(other))))
            }
        }
    }

    /// Required object at `path`.
    pub fn require_object(&self, path: &str) -> Result<(), WireError> {
        match self.get(path) {
            None => Err(self.missing(path)),
            Some(Value::Object(_)) => Ok(()),
            Some(other) => {
                Err(self.bad(path, format!("expected an object, got {}", kind_of(other))))
            }
        }
    }

    /// Base64 audio at `path`.
    pub fn payload(&self, path: &str) -> Result<Vec<u8>, WireError> {
        let b64 = match self.get(path) {
            None => return Err(self.missing(path)),
            Some(Value::String(s)) => s,
            Some(other) => {
                return Err(self.bad(
                    path,
                    format!("expected base64 text, got {}", kind_of(other)),
                ));
            }
        };
        let mut out = Vec::with_capacity(b64.len() / 4 * 3);
        STANDARD.decode_vec(b64, &mut out).map_err(|e| {
            self.bad(
                path,
                format!("not valid base64 ({e}); expected base64 audio"),
            )
        })?;
        Ok(out)
    }

    /// One DTMF key at `path`.
    pub fn digit(&self, path: &str) -> Result<char, WireError> {
        let raw = self.str(path)?.ok_or_else(|| self.missing(path))?;
        let mut chars = raw.chars();
        match (chars.next(), chars.next()) {
            (Some(c), None) => Ok(c),
            _ => Err(self.bad(
                path,
                format!("must be exactly one key (0-9, *, #), got {raw:?}"),
            )),
        }
    }

    /// A required string at `path`.
    pub fn required(&self, path: &str) -> Result<String, WireError> {
        self.str(path)?.ok_or_else(|| self.missing(path))
    }

    /// The stream's declared audio format at `path` (`encoding`, the rate under `rate_key`,
    /// `channels`), if the message has one.
    pub fn media_format(
        &self,
        path: &str,
        rate_key: &str,
    ) -> Result<Option<MediaFormat>, WireError> {
        if !self.has(path) {
            return Ok(None);
        }
        Ok(Some(MediaFormat {
            encoding: self.str(&format!("{path}.encoding"))?,
            sample_rate: self.num(&format!("{path}.{rate_key}"))?,
            channels: self.num(&format!("{path}.channels"))?,
        }))
    }

    /// `start.custom_parameters`, with each of `keys` found directly under `start` added unless
    /// a custom parameter of that name is already there.
    pub fn start_parameters(&self, keys: &[&str]) -> Result<BTreeMap<String, String>, WireError> {
        let mut params = self.string_map("start.custom_parameters")?;
        for key in keys {
            if let Some(v) = self.str(&format!("start.{key}"))? {
                params.entry((*key).to_owned()).or_insert(v);
            }
        }
        Ok(params)
    }

    /// The `media` event the JSON dialects share: `media.{track, chunk, timestamp, payload}`
    /// and the sequence number at `seq` (`sequence_number`, or Plivo's `sequenceNumber`).
    pub fn media(&self, seq: &str) -> Result<Inbound, WireError> {
        self.require_object("media")?;
        Ok(Inbound::Media {
            media: Media {
                track: self.str("media.track")?,
                chunk: self.num("media.chunk")?,
                timestamp: self.num("media.timestamp")?,
                payload: self.payload("media.payload")?,
            },
            seq: self.num(seq)?,
        })
    }
}
