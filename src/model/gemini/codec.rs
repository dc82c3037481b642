//! Pure encoding and decoding of Gemini Live frames: client messages to JSON text, server frames
//! to [`ModelEvent`]s. No sockets, no clock. The uplink audio message has a hand-written fast path
//! (checked against the serde form in tests) because it is built 50 times a second per call.
//!
//! Event order within one server message: setupComplete, toolCallCancellation, inputTranscription,
//! modelTurn audio, outputTranscription, toolCall, generationComplete, interrupted, turnComplete,
//! sessionResumptionUpdate, goAway, usageMetadata.

use crate::b64::{STANDARD, URL_SAFE};
use base64::Engine;

use super::wire::{self, ClientMessage, ServerMessage};
use crate::model::decode::decode_object;
use crate::model::{ModelEvent, ToolCallRequest};

pub use crate::model::decode::DecodeError;

/// Largest server frame accepted (a few seconds of 24 kHz audio is ~200 KiB of base64).
pub const MAX_FRAME_BYTES: usize = 16 * 1024 * 1024;

/// Serialises any client message as the camelCase JSON text the service expects.
pub fn encode(msg: &ClientMessage) -> String {
    // Serialising these plain structs cannot fail: no maps with non-string keys, no custom Serialize.
    serde_json::to_string(msg).unwrap_or_default()
}

/// Writes `{"realtimeInput":{"audio":{"mimeType":"audio/pcm;rate=R","data":"…"}}}` for PCM16 LE
/// samples into `out` (cleared first), reusing its allocation. `scratch` holds the raw bytes.
pub fn encode_audio(samples: &[i16], rate: u32, scratch: &mut Vec<u8>, out: &mut String) {
    use std::fmt::Write;
    scratch.clear();
    crate::audio::push_pcm16le(samples, scratch);
    out.clear();
    out.push_str(r#"{"realtimeInput":{"audio":{"mimeType":"audio/pcm;rate="#);
    let _ = write!(out, "{rate}");
    out.push_str(r#"","data":""#);
    STANDARD.encode_string(&scratch[..], out);
    out.push_str(r#""}}}"#);
}

/// Parses one server frame (text or binary; the service sends binary).
pub fn decode(frame: &[u8]) -> Result<ServerMessage, DecodeError> {
    decode_object(frame, MAX_FRAME_BYTES)
}

/// Decodes base64 PCM16 LE (standard alphabet, or URL-safe) into samples appended to `out`.
pub fn decode_pcm(data: &str, out: &mut Vec<i16>) -> Result<(), String> {
    let bytes = STANDARD
        .decode(data)
        .or_else(|_| URL_SAFE.decode(data))
        .map_err(|e| format!("audio data is not base64: {e}"))?;
    if bytes.len() % 2 != 0 {
        return Err(format!(
            "audio data has an odd byte count ({}) for PCM16",
            bytes.len()
        ));
    }
    out.extend(
        bytes
            .chunks_exact(2)
            .map(|b| i16::from_le_bytes([b[0], b[1]])),
    );
    Ok(())
}

/// Sample rate of an `audio/pcm;rate=N` MIME type (`audio/pcm` alone means 24 kHz output).
pub fn pcm_rate(mime: &str) -> Option<u32> {
    let mut parts = mime.split(';').map(str::trim);
    let kind = parts.next()?;
    if !kind.eq_ignore_ascii_case("audio/pcm") && !kind.eq_ignore_ascii_case("audio/l16") {
        return None;
    }
    for p in parts {
        if let Some(r) = p.strip_prefix("rate=") {
            return r.parse().ok().filter(|&r| (1000..=192_000).contains(&r));
        }
    }
    Some(super::OUTPUT_RATE)
}

/// Turns one server message into events, appended to `out` in the documented order. Parts baton
/// cannot use become [`ModelEvent::ProtocolError`]s; the rest of the message is still delivered.
pub fn into_events(msg: ServerMessage, out: &mut Vec<ModelEvent>) {
    if msg.setup_complete.is_some() {
        out.push(ModelEvent::SetupComplete);
    }
    if let Some(c) = msg.tool_call_cancellation {
        out.push(ModelEvent::ToolCallCancellation(c.ids));
    }
    let mut flags = None;
    if let Some(sc) = msg.server_content {
        if let Some(t) = sc.input_transcription {
            out.push(ModelEvent::InputTranscript {
                text: t.text.unwrap_or_default(),
                finished: t.finished.unwrap_or(false),
            });
        }
        for (i, part) in sc.model_turn.into_iter().flat_map(|t| t.parts).enumerate() {
            if let Some(blob) = part.inline_data {
                out.push(audio_event(blob, i));
            }
        }
        if let Some(t) = sc.output_transcription {
            out.push(ModelEvent::OutputTranscript {
                text: t.text.unwrap_or_default(),
                finished: t.finished.unwrap_or(false),
            });
        }
        flags = Some((sc.generation_complete, sc.interrupted, sc.turn_complete));
    }
    push_tool_call(msg.tool_call, out);
    if let Some((generation_complete, interrupted, turn_complete)) = flags {
        if generation_complete == Some(true) {
            out.push(ModelEvent::GenerationComplete);
        }
        if interrupted == Some(true) {
            out.push(ModelEvent::Interrupted);
        }
        if turn_complete == Some(true) {
            out.push(ModelEvent::TurnComplete);
        }
    }
    push_tail(
        msg.session_resumption_update,
        msg.go_away,
        msg.usage_metadata,
        out,
    );
}

fn push_tool_call(tc: Option<wire::ToolCall>, out: &mut Vec<ModelEvent>) {
    let Some(tc) = tc else { return };
    let calls = tc
        .function_calls
        .into_iter()
        .map(|c| ToolCallRequest {
            id: c.id.unwrap_or_default(),
            name: c.name.unwrap_or_default(),
            args: c
                .args
                .unwrap_or(serde_json::Value::Object(Default::default())),
        })
        .collect();
    out.push(ModelEvent::ToolCall(calls));
}

fn push_tail(
    ru: Option<wire::SessionResumptionUpdate>,
    go_away: Option<wire::GoAway>,
    usage: Option<wire::UsageMetadata>,
    out: &mut Vec<ModelEvent>,
) {
    if let Some(ru) = ru {
        out.push(ModelEvent::ResumptionUpdate {
            handle: ru.new_handle.filter(|h| !h.is_empty()),
            resumable: ru.resumable.unwrap_or(false),
        });
    }
    if let Some(g) = go_away {
        out.push(ModelEvent::GoAway {
            time_left: g.time_left.as_deref().and_then(wire::parse_duration),
        });
    }
    if let Some(u) = usage {
        out.push(ModelEvent::Usage {
            total_tokens: u.total_token_count,
        });
    }
}

fn audio_event(blob: wire::Blob, part: usize) -> ModelEvent {
    let mime = blob.mime_type.unwrap_or_default();
    let Some(rate) = pcm_rate(&mime) else {
        return ModelEvent::ProtocolError(format!(
            "serverContent.modelTurn.parts[{part}].inlineData.mimeType is {mime:?}; expected audio/pcm;rate=N"
        ));
    };
    let mut samples = Vec::new();
    match decode_pcm(blob.data.as_deref().unwrap_or(""), &mut samples) {
        Ok(()) => ModelEvent::Audio { rate, samples },
        Err(e) => ModelEvent::ProtocolError(format!(
            "serverContent.modelTurn.parts[{part}].inlineData.data: {e}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::gemini::wire::{Blob, RealtimeInput};

    #[test]
    fn audio_fast_path_matches_serde() {
        let samples = [0i16, 1, -1, 12345, i16::MIN, i16::MAX];
        let (mut scratch, mut out) = (Vec::new(), String::new());
        encode_audio(&samples, 16000, &mut scratch, &mut out);
        let bytes: Vec<u8> = samples.iter().flat_map(|s| s.to_le_bytes()).collect();
        let serde_form = encode(&ClientMessage::RealtimeInput(RealtimeInput {
            audio: Some(Blob {
                mime_type: Some("audio/pcm;rate=16000".into()),
                data: Some(STANDARD.encode(bytes)),
            }),
            ..Default::default()
        }));
        assert_eq!(out, serde_form);
    }

    #[test]
    fn decodes_a_multi_part_message_in_order() {
        let data = STANDARD.encode([1u8, 0, 2, 0]);
        let frame = format!(
            r#"{{"serverContent":{{"modelTurn":{{"parts":[{{"inlineData":{{"mimeType":"audio/pcm;rate=24000","data":"{data}"}}}}]}},
               "outputTranscription":{{"text":"hi"}},"generationComplete":true,"turnComplete":true}},
               "usageMetadata":{{"totalTokenCount":7}}}}"#
        );
        let mut ev = vec![];
        into_events(decode(frame.as_bytes()).unwrap(), &mut ev);
        assert_eq!(
            ev,
            vec![
                ModelEvent::Audio {
                    rate: 24000,
                    samples: vec![1, 2]
                },
                ModelEvent::OutputTranscript {
                    text: "hi".into(),
                    finished: false
                },
                ModelEvent::GenerationComplete,
                ModelEvent::TurnComplete,
                ModelEvent::Usage {
                    total_tokens: Some(7)
                },
            ]
        );
    }

    #[test]
    fn bad_frames_give_typed_errors_naming_the_field() {
        assert!(matches!(decode(b"not json"), Err(DecodeError::NotJson(_))));
        assert!(matches!(
            decode(br#"{"serverContent":{"turnCompl"#),
            Err(DecodeError::NotJson(_))
        ));
        match decode(br#"{"serverContent":{"turnComplete":"yes"}}"#) {
            Err(DecodeError::Field { path, .. }) => assert_eq!(path, "serverContent.turnComplete"),
            other => panic!("{other:?}"),
        }
        match decode(br#"{"toolCall":{"functionCalls":[{"id":5}]}}"#) {
            Err(DecodeError::Field { path, .. }) => {
                assert_eq!(path, "toolCall.functionCalls[0].id")
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            decode(br#" [{"setupComplete":{}}]"#),
            Err(DecodeError::NotObject("an array"))
        );
        let big = vec![b' '; MAX_FRAME_BYTES + 1];
        assert!(matches!(decode(&big), Err(DecodeError::TooLarge(..))));
    }

    #[test]
    fn bad_audio_parts_become_protocol_errors_and_the_rest_survives() {
        let frame = br#"{"serverContent":{"modelTurn":{"parts":[
            {"inlineData":{"mimeType":"image/png","data":"AAAA"}},
            {"inlineData":{"mimeType":"audio/pcm;rate=24000","data":"***"}},
            {"inlineData":{"mimeType":"audio/pcm;rate=24000","data":"AAE"}}]},"turnComplete":true}}"#;
        let mut ev = vec![];
        into_events(decode(frame).unwrap(), &mut ev);
        assert_eq!(ev.len(), 4, "{ev:?}");
        for (i, e) in ev[..3].iter().enumerate() {
            match e {
                ModelEvent::ProtocolError(m) => assert!(m.contains(&format!("parts[{i}]")), "{m}"),
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(ev[3], ModelEvent::TurnComplete);
    }

    #[test]
    fn unknown_message_kinds_are_tolerated() {
        let mut ev = vec![];
        into_events(
            decode(br#"{"voiceActivity":{"type":"ACTIVITY_START"}}"#).unwrap(),
            &mut ev,
        );
        assert!(ev.is_empty());
    }

    #[test]
    fn rates() {
        assert_eq!(pcm_rate("audio/pcm;rate=24000"), Some(24000));
        assert_eq!(pcm_rate("audio/pcm; rate=16000"), Some(16000));
        assert_eq!(pcm_rate("audio/pcm"), Some(24000));
        assert_eq!(pcm_rate("audio/pcm;rate=0"), None);
        assert_eq!(pcm_rate("audio/opus"), None);
    }
}
