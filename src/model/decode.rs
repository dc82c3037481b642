//! Reading one server message of either protocol as a JSON object: the size limit, arrays and
//! scalars refused, and on a failure the field at fault named.

use serde::Deserialize;

/// A server message baton cannot use.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum DecodeError {
    #[error("model message is not valid JSON ({0})")]
    NotJson(String),
    #[error("model message has a bad value at `{path}`: {message}")]
    Field { path: String, message: String },
    #[error("model message is {0} bytes, over the {1}-byte limit")]
    TooLarge(usize, usize),
    #[error("model message is not a JSON object (got {0}); every server message is one")]
    NotObject(&'static str),
    /// An OpenAI event without its `type`.
    #[error("model message has no `type`")]
    NoType,
}

/// Decodes `frame` (at most `limit` bytes) as one JSON object of type `T`. The plain decoder
/// runs first; only a failure is decoded again, tracking the path, to name the field at fault.
pub fn decode_object<'a, T: Deserialize<'a>>(
    frame: &'a [u8],
    limit: usize,
) -> Result<T, DecodeError> {
    if frame.len() > limit {
        return Err(DecodeError::TooLarge(frame.len(), limit));
    }
    // serde reads a struct from a JSON array too (fields by position): `[{"setupComplete":{}}]`
    // would pass for a setupComplete. A server message is always an object.
    let first = frame.iter().find(|b| !b.is_ascii_whitespace()).copied();
    if first == Some(b'[') {
        return Err(DecodeError::NotObject("an array"));
    }
    if let Ok(v) = T::deserialize(&mut serde_json::Deserializer::from_slice(frame)) {
        return Ok(v);
    }
    let de = &mut serde_json::Deserializer::from_slice(frame);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if inner.is_syntax() || inner.is_eof() {
            DecodeError::NotJson(inner.to_string())
        } else if path == "." && inner.to_string().contains("missing field `type`") {
            DecodeError::NoType
        } else if path == "." {
            DecodeError::NotObject(match first {
                Some(b'"') => "a string",
                Some(b't' | b'f') => "a boolean",
                Some(b'n') => "null",
                _ => "a number",
            })
        } else {
            DecodeError::Field {
                path,
                message: inner.to_string(),
            }
        }
    })
}
