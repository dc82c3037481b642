//! Inbound client frames → [`ClientMessage`]. Owns everything between the bytes of one WebSocket
//! message and a typed client message: the size limit, JSON parsing, the snake_case → camelCase key
//! normalisation the Python SDK needs (it sends `realtime_input`, `tool_response`), the "exactly one
//! top-level key" rule, and typed decoding whose error names the offending field. Every failure is
//! a [`Rejection`]: the close code and reason the real service would give.

use serde::Deserialize;
use serde_json::{Map, Value};

use crate::model::gemini::wire::{Blob, ClientMessage, RealtimeInput};

/// Close code for malformed or invalid client data.
pub const CLOSE_INVALID: u16 = 1007;
/// Close code for policy failures: unknown model, bad credentials.
pub const CLOSE_POLICY: u16 = 1008;
/// Close code for a message larger than [`MAX_MESSAGE_BYTES`].
pub const CLOSE_TOO_BIG: u16 = 1009;

/// Largest client message the mock accepts (the real service publishes no limit).
pub const MAX_MESSAGE_BYTES: usize = 16 * 1024 * 1024;

/// The top-level keys a client message may carry (one per message).
pub const TOP_LEVEL_KEYS: [&str; 5] = [
    "setup",
    "clientContent",
    "realtimeInput",
    "toolResponse",
    "contextUpdate",
];

/// Keys whose values are the caller's own data (function arguments, schemas, results) and are
/// passed through untouched by key normalisation.
const OPAQUE_KEYS: [&str; 5] = [
    "args",
    "response",
    "parameters",
    "parametersJsonSchema",
    "responseJsonSchema",
];

/// Why the session ends: a WebSocket close code and a human-readable reason.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("close {code}: {reason}")]
pub struct Rejection {
    pub code: u16,
    pub reason: String,
}

/// A WebSocket close reason holds at most 123 bytes.
pub const MAX_REASON_BYTES: usize = 123;

impl Rejection {
    /// A rejection; a reason too long for a close frame is cut at a character boundary and ends
    /// with `…`.
    pub fn new(code: u16, reason: impl Into<String>) -> Self {
        let mut reason = reason.into();
        if reason.len() > MAX_REASON_BYTES {
            let mut cut = MAX_REASON_BYTES - '…'.len_utf8();
            while !reason.is_char_boundary(cut) {
                cut -= 1;
            }
            reason.truncate(cut);
            reason.push('…');
        }
        Rejection { code, reason }
    }

    /// 1007 with the real service's "invalid argument" wording.
    pub fn invalid(what: impl std::fmt::Display) -> Self {
        Rejection::new(
            CLOSE_INVALID,
            format!("Request contains an invalid argument: {what}"),
        )
    }
}

/// Parses one WebSocket message (text or binary payload) into a client message.
pub fn parse(frame: &[u8]) -> Result<ClientMessage, Rejection> {
    if frame.len() > MAX_MESSAGE_BYTES {
        return Err(Rejection::new(
            CLOSE_TOO_BIG,
            format!(
                "message of {} bytes exceeds the {} MiB limit",
                frame.len(),
                MAX_MESSAGE_BYTES / (1024 * 1024)
            ),
        ));
    }
    let text = std::str::from_utf8(frame).map_err(|e| {
        Rejection::new(
            CLOSE_INVALID,
            format!("Invalid JSON payload received: not UTF-8 ({e})"),
        )
    })?;
    match audio_chunk(text) {
        Some(message) => Ok(message),
        None => parse_any(text),
    }
}

/// Any client message: JSON → key normalisation → the one-key rule → typed decoding.
fn parse_any(text: &str) -> Result<ClientMessage, Rejection> {
    let value: Value = serde_json::from_str(text).map_err(|e| {
        Rejection::new(CLOSE_INVALID, format!("Invalid JSON payload received: {e}"))
    })?;
    let Value::Object(obj) = value else {
        return Err(Rejection::new(
            CLOSE_INVALID,
            "Invalid JSON payload received: a client message must be a JSON object",
        ));
    };
    let obj = normalise_object(obj)?;
    check_top_level(&obj)?;
    serde_path_to_error::deserialize::<_, ClientMessage>(Value::Object(obj)).map_err(|e| {
        Rejection::new(
            CLOSE_INVALID,
            format!(
                "Invalid JSON payload received at '{}': {}",
                e.path(),
                e.inner()
            ),
        )
    })
}

/// The message a live session carries fifty times a second,
/// `{"realtimeInput":{"audio":{"mimeType":…,"data":…}}}` in camelCase with nothing else, decoded
/// straight into its typed form. Anything else (snake_case keys, other or duplicate fields, nulls)
/// is `None` and takes the general path, so both paths accept and reject the same messages.
fn audio_chunk(text: &str) -> Option<ClientMessage> {
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields, rename_all = "camelCase")]
    struct Message {
        realtime_input: Object<Input>,
    }
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Input {
        audio: Object<Audio>,
    }
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields, rename_all = "camelCase")]
    struct Audio {
        mime_type: String,
        data: String,
    }
    if let Some(message) = canonical_audio_chunk(text) {
        return Some(message);
    }
    let Object(m) = serde_json::from_str::<Object<Message>>(text).ok()?;
    let Object(audio) = m.realtime_input.0.audio;
    Some(ClientMessage::RealtimeInput(RealtimeInput {
        audio: Some(Blob {
            mime_type: Some(audio.mime_type),
            data: Some(audio.data),
        }),
        ..RealtimeInput::default()
    }))
}

/// The audio chunk exactly as baton and the official SDKs write it, without whitespace:
/// `{"realtimeInput":{"audio":{"mimeType":"…","data":"…"}}}`, read by its layout instead of by a
/// JSON parser. It takes only strings a parser would read as they stand (no quote, backslash
/// or control character), so it reads nothing differently from the parser; anything else is
/// `None`. What the data holds is the base64 decoder's to judge, on either path.
fn canonical_audio_chunk(text: &str) -> Option<ClientMessage> {
    let rest = text.strip_prefix(r#"{"realtimeInput":{"audio":{"mimeType":""#)?;
    let (mime, rest) = rest.split_once('"')?;
    let data = rest.strip_prefix(r#","data":""#)?.strip_suffix(r#""}}}"#)?;
    if !verbatim(mime) || !verbatim(data) {
        return None;
    }
    Some(ClientMessage::RealtimeInput(RealtimeInput {
        audio: Some(Blob {
            mime_type: Some(mime.to_owned()),
            data: Some(data.to_owned()),
        }),
        ..RealtimeInput::default()
    }))
}

/// Whether `s` stands in JSON as it is, between quotes: no quote, backslash or control
/// character, so a parser reads it unchanged and a serializer writes it unchanged. (A fold
/// without early exit, so that it runs over whole vectors: audio data is a few KiB.)
pub(super) fn verbatim(s: &str) -> bool {
    !s.bytes().fold(false, |bad, b| {
        bad | (b < 0x20) | (b == b'"') | (b == b'\\')
    })
}

/// `T` read only from a JSON object: serde's derived structs also accept an array, field by
/// field, which the general path refuses.
struct Object<T>(T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Object<T> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Map<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>> serde::de::Visitor<'de> for Map<T> {
            type Value = T;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
                T::deserialize(serde::de::value::MapAccessDeserializer::new(map))
            }
        }
        d.deserialize_map(Map(std::marker::PhantomData)).map(Object)
    }
}

fn check_top_level(obj: &Map<String, Value>) -> Result<(), Rejection> {
    if let Some(unknown) = obj.keys().find(|k| !TOP_LEVEL_KEYS.contains(&k.as_str())) {
        return Err(Rejection::new(
            CLOSE_INVALID,
            format!(
                "Invalid JSON payload received. Unknown name \"{unknown}\": Cannot find field."
            ),
        ));
    }
    match obj.len() {
        1 => Ok(()),
        0 => Err(Rejection::new(
            CLOSE_INVALID,
            "Invalid JSON payload received: empty message; expected one of setup, clientContent, \
             realtimeInput, toolResponse, contextUpdate",
        )),
        _ => {
            let keys: Vec<&str> = obj.keys().map(String::as_str).collect();
            Err(Rejection::new(
                CLOSE_INVALID,
                format!(
                    "Invalid JSON payload received: exactly one message kind allowed, got {}",
                    keys.join(" and ")
                ),
            ))
        }
    }
}

/// snake_case → lowerCamelCase (`realtime_input` → `realtimeInput`); other keys are unchanged.
pub fn camel_case(key: &str) -> String {
    if !key.contains('_') {
        return key.to_owned();
    }
    let mut out = String::with_capacity(key.len());
    let mut upper = false;
    for (i, c) in key.chars().enumerate() {
        if c == '_' && i > 0 {
            upper = true;
        } else if upper {
            out.extend(c.to_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    out
}

fn normalise_object(obj: Map<String, Value>) -> Result<Map<String, Value>, Rejection> {
    let mut out = Map::with_capacity(obj.len());
    for (key, value) in obj {
        let key = camel_case(&key);
        let value = if OPAQUE_KEYS.contains(&key.as_str()) {
            value
        } else {
            normalise(value)?
        };
        if out.contains_key(&key) {
            return Err(Rejection::new(
                CLOSE_INVALID,
                format!("Invalid JSON payload received: field \"{key}\" given twice"),
            ));
        }
        out.insert(key, value);
    }
    Ok(out)
}

fn normalise(value: Value) -> Result<Value, Rejection> {
    Ok(match value {
        Value::Object(obj) => Value::Object(normalise_object(obj)?),
        Value::Array(items) => {
            Value::Array(items.into_iter().map(normalise).collect::<Result<_, _>>()?)
        }
        other => other,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::gemini::wire::{FunctionResponse, RealtimeInput, ToolResponse};
    use serde_json::json;

    fn parse_json(v: Value) -> Result<ClientMessage, Rejection> {
        parse(v.to_string().as_bytes())
    }

    #[test]
    fn sdk_snake_case_top_level_keys_are_accepted() {
        let m = parse_json(json!({"realtime_input": {"audio": {"mime_type": "audio/pcm;rate=16000", "data": "AA-_"}}}))
            .unwrap();
        let ClientMessage::RealtimeInput(RealtimeInput {
            audio: Some(blob), ..
        }) = m
        else {
            panic!("{m:?}")
        };
        assert_eq!(blob.mime_type.as_deref(), Some("audio/pcm;rate=16000"));
        assert_eq!(blob.data.as_deref(), Some("AA-_"));
    }

    #[test]
    fn user_data_keeps_its_keys() {
        let m = parse_json(json!({"tool_response": {"function_responses": [
            {"id": "1", "name": "f", "response": {"snake_key": {"inner_key": 1}}, "will_continue": false}
        ]}}))
        .unwrap();
        let ClientMessage::ToolResponse(ToolResponse {
            function_responses: Some(frs),
        }) = m
        else {
            panic!("{m:?}")
        };
        let FunctionResponse {
            response,
            will_continue,
            ..
        } = &frs[0];
        assert_eq!(response, &Some(json!({"snake_key": {"inner_key": 1}})));
        assert_eq!(will_continue, &Some(false));

        let m = parse_json(json!({"setup": {"model": "models/x", "tools": [{"function_declarations": [
            {"name": "f", "parameters_json_schema": {"type": "object", "properties": {"my_arg": {}}}}
        ]}]}}))
        .unwrap();
        let ClientMessage::Setup(s) = m else { panic!() };
        assert_eq!(
            s.tools.unwrap()[0],
            json!({"functionDeclarations": [{"name": "f", "parametersJsonSchema": {"type": "object", "properties": {"my_arg": {}}}}]})
        );
    }

    #[test]
    fn rejections_name_the_problem() {
        let e = parse(b"{\"setup\": {\"model\": ").unwrap_err();
        assert_eq!(e.code, CLOSE_INVALID);
        assert!(e.reason.contains("EOF"), "{e}");

        let e = parse(b"not json").unwrap_err();
        assert_eq!(e.code, CLOSE_INVALID);
        assert!(e.reason.starts_with("Invalid JSON payload received"), "{e}");

        let e = parse_json(json!({"bogus": {}})).unwrap_err();
        assert_eq!(e.code, CLOSE_INVALID);
        assert!(e.reason.contains("\"bogus\""), "{e}");

        let e = parse_json(json!({"setup": {}, "realtimeInput": {}})).unwrap_err();
        assert!(e.reason.contains("exactly one"), "{e}");

        let e = parse_json(json!({})).unwrap_err();
        assert!(e.reason.contains("empty"), "{e}");

        let e = parse_json(json!([1])).unwrap_err();
        assert!(e.reason.contains("object"), "{e}");

        let e = parse_json(json!({"realtimeInput": {"audio": {"data": 5}}})).unwrap_err();
        assert_eq!(e.code, CLOSE_INVALID);
        assert!(e.reason.contains("realtimeInput.audio.data"), "{e}");

        let e = parse_json(json!({"realtime_input": {}, "realtimeInput": {}})).unwrap_err();
        assert!(e.reason.contains("twice"), "{e}");

        let e = parse(&[0xff, 0xfe]).unwrap_err();
        assert!(e.reason.contains("UTF-8"), "{e}");
    }

    #[test]
    fn oversized_messages_close_1009() {
        let big = vec![b' '; MAX_MESSAGE_BYTES + 1];
        let e = parse(&big).unwrap_err();
        assert_eq!(e.code, CLOSE_TOO_BIG);
        assert!(e.reason.contains("16 MiB"), "{e}");
    }

    #[test]
    fn camel_case_conversion() {
        assert_eq!(camel_case("realtime_input"), "realtimeInput");
        assert_eq!(camel_case("parameters_json_schema"), "parametersJsonSchema");
        assert_eq!(camel_case("mimeType"), "mimeType");
        assert_eq!(camel_case("_private"), "_private");
    }

    #[test]
    fn the_audio_fast_path_agrees_with_the_general_path() {
        let taken = [
            r#"{"realtimeInput":{"audio":{"mimeType":"audio/pcm;rate=16000","data":"AAD/fw=="}}}"#,
            r#"{"realtimeInput":{"audio":{"data":"","mimeType":"audio/pcm"}}}"#,
            r#" { "realtimeInput" : { "audio" : { "mimeType" : "x" , "data" : "\u0041" } } } "#,
        ];
        for m in taken {
            let fast = audio_chunk(m).expect("fast path");
            assert_eq!(Ok(fast), parse_any(m), "{m}");
        }
        let general = [
            r#"{"realtime_input":{"audio":{"mime_type":"audio/pcm","data":"AAA="}}}"#,
            r#"{"realtimeInput":{"audio":{"mimeType":"audio/pcm","data":"AAA=","extra":1}}}"#,
            r#"{"realtimeInput":{"audio":{"mimeType":"audio/pcm"}}}"#,
            r#"{"realtimeInput":{"audio":null}}"#,
            r#"{"realtimeInput":{"audio":{"mimeType":"a","data":"b"},"text":"hi"}}"#,
            r#"{"realtimeInput":{"audio":{"mimeType":"a","data":"b"}},"setup":{}}"#,
            r#"{"realtimeInput":{"audio":{"mimeType":"a","data":"b"}},"realtimeInput":{"text":"x"}}"#,
            r#"{"realtimeInput":{"audioStreamEnd":true}}"#,
            r#"{"realtimeInput":{"audio":{"mimeType":"a","data":"b"}}"#,
            r#"[{"audio":{"mimeType":"a","data":"b"}}]"#,
            r#"{"realtimeInput":[{"mimeType":"a","data":"b"}]}"#,
            r#"{"realtimeInput":{"audio":["a","b"]}}"#,
            r#"[[["a","b"]]]"#,
        ];
        for m in general {
            assert!(audio_chunk(m).is_none(), "{m}");
            assert!(canonical_audio_chunk(m).is_none(), "{m}");
            assert_eq!(parse(m.as_bytes()), parse_any(m), "{m}");
        }
    }

    #[test]
    fn the_audio_layout_is_read_only_where_a_parser_reads_it_the_same() {
        let canonical = [
            r#"{"realtimeInput":{"audio":{"mimeType":"audio/pcm;rate=16000","data":"AAD/fw=="}}}"#,
            r#"{"realtimeInput":{"audio":{"mimeType":"audio/pcm","data":"AA-_"}}}"#,
            r#"{"realtimeInput":{"audio":{"mimeType":"","data":""}}}"#,
            r#"{"realtimeInput":{"audio":{"mimeType":"é","data":"A A"}}}"#,
        ];
        for m in canonical {
            let read = canonical_audio_chunk(m).expect("canonical layout");
            assert_eq!(Ok(read), parse_any(m), "{m}");
        }
        // Escapes, other characters, extra fields or spacing inside the layout: left to the
        // parser, which accepts or refuses them as it would any message.
        let other = [
            r#"{"realtimeInput":{"audio":{"mimeType":"a\"b","data":"AAA="}}}"#,
            r#"{"realtimeInput":{"audio":{"mimeType":"a\\","data":"AAA="}}}"#,
            r#"{"realtimeInput":{"audio":{"mimeType":"a","data":"\u0041"}}}"#,
            r#"{"realtimeInput":{"audio":{"mimeType":"a","data":"AA","x":"A"}}}"#,
            r#"{"realtimeInput":{"audio":{"mimeType":"a","data":"AA"}},"x":{"y":"A"}}}"#,
            r#"{"realtimeInput":{"audio":{"mimeType":"a","data":"AA"}}} "#,
            "{\"realtimeInput\":{\"audio\":{\"mimeType\":\"a\tb\",\"data\":\"AA\"}}}",
        ];
        for m in other {
            assert!(canonical_audio_chunk(m).is_none(), "{m}");
            assert_eq!(parse(m.as_bytes()), parse_any(m), "{m}");
        }
    }
}
