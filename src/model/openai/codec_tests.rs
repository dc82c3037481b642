//! Unit tests of the OpenAI codec: the event mapping, barge-in, bad frames.

use super::*;
use serde_json::json;

fn ev(v: Value) -> ServerEvent {
    decode(v.to_string().as_bytes()).unwrap()
}

fn run(d: &mut Decoder, v: Value) -> Vec<ModelEvent> {
    let mut out = vec![];
    d.into_events(ev(v), &mut out);
    out
}

fn pcm_b64(samples: &[i16]) -> String {
    STANDARD.encode(
        samples
            .iter()
            .flat_map(|s| s.to_le_bytes())
            .collect::<Vec<_>>(),
    )
}

#[test]
fn append_fast_path_matches_serde() {
    let samples = [0i16, 1, -1, 12345, i16::MIN, i16::MAX];
    let (mut scratch, mut out) = (Vec::new(), String::new());
    encode_append_pcm16(&samples, &mut scratch, &mut out);
    let serde_form = encode(&ClientEvent::InputAudioBufferAppend {
        event_id: None,
        audio: pcm_b64(&samples),
    });
    assert_eq!(out, serde_form);
}

#[test]
fn a_spoken_turn_maps_in_order() {
    let mut d = Decoder::new(AudioFormat::PCM24K);
    assert!(
        run(
            &mut d,
            json!({"type": "session.created", "event_id": "e0", "session": {}})
        )
        .is_empty()
    );
    assert_eq!(
        run(
            &mut d,
            json!({"type": "session.updated", "event_id": "e1", "session": {}})
        ),
        vec![ModelEvent::SetupComplete]
    );
    assert!(
        run(
            &mut d,
            json!({"type": "session.updated", "event_id": "e1b", "session": {}})
        )
        .is_empty()
    );
    assert!(
        run(
            &mut d,
            json!({"type": "input_audio_buffer.speech_started", "event_id": "e2",
        "audio_start_ms": 100, "item_id": "u1"})
        )
        .is_empty(),
        "nothing to interrupt"
    );
    run(
        &mut d,
        json!({"type": "response.created", "event_id": "e3", "response": {"id": "r1", "status": "in_progress"}}),
    );
    assert_eq!(d.active_response(), Some("r1"));
    assert_eq!(
        run(
            &mut d,
            json!({"type": "response.output_audio.delta", "event_id": "e4", "response_id": "r1",
            "item_id": "a1", "output_index": 0, "content_index": 0, "delta": pcm_b64(&[1, 2, 3])})
        ),
        vec![ModelEvent::Audio {
            rate: 24000,
            samples: vec![1, 2, 3]
        }]
    );
    assert_eq!(
        run(
            &mut d,
            json!({"type": "response.output_audio_transcript.delta", "event_id": "e5",
            "response_id": "r1", "item_id": "a1", "output_index": 0, "content_index": 0, "delta": "Hi"})
        ),
        vec![ModelEvent::OutputTranscript {
            text: "Hi".into(),
            finished: false
        }]
    );
    assert_eq!(
        run(
            &mut d,
            json!({"type": "response.output_audio_transcript.done", "item_id": "a1", "transcript": "Hi"})
        ),
        vec![ModelEvent::OutputTranscript {
            text: String::new(),
            finished: true
        }]
    );
    assert_eq!(
        run(
            &mut d,
            json!({"type": "conversation.item.input_audio_transcription.completed",
            "item_id": "u1", "content_index": 0, "transcript": "hello", "usage": {"type": "duration", "seconds": 1}})
        ),
        vec![ModelEvent::InputTranscript {
            text: "hello".into(),
            finished: true
        }]
    );
    assert_eq!(
        run(
            &mut d,
            json!({"type": "response.done", "response": {"id": "r1", "status": "completed",
            "usage": {"total_tokens": 42}}})
        ),
        vec![
            ModelEvent::GenerationComplete,
            ModelEvent::TurnComplete,
            ModelEvent::Usage {
                total_tokens: Some(42)
            }
        ]
    );
    assert_eq!(d.active_response(), None);
    // The client may still be playing: the caller speaking now is a barge-in.
    assert_eq!(
        run(
            &mut d,
            json!({"type": "input_audio_buffer.speech_started", "audio_start_ms": 900, "item_id": "u2"})
        ),
        vec![ModelEvent::Interrupted]
    );
}

#[test]
fn barge_in_during_a_response_is_reported_once() {
    let mut d = Decoder::new(AudioFormat::PCM24K);
    run(
        &mut d,
        json!({"type": "response.created", "response": {"id": "r1"}}),
    );
    run(
        &mut d,
        json!({"type": "response.output_audio.delta", "item_id": "a1", "delta": pcm_b64(&[0; 2400])}),
    );
    run(
        &mut d,
        json!({"type": "response.output_audio.delta", "item_id": "a1", "delta": pcm_b64(&[0; 2400])}),
    );
    assert_eq!(d.audio_item().map(AudioItem::produced_ms), Some(200));
    assert_eq!(
        run(
            &mut d,
            json!({"type": "input_audio_buffer.speech_started", "item_id": "u2"})
        ),
        vec![ModelEvent::Interrupted]
    );
    let cut = d.barge_in(150);
    assert_eq!(
        serde_json::to_value(&cut).unwrap(),
        json!([{"type": "response.cancel"},
               {"type": "conversation.item.truncate", "item_id": "a1", "content_index": 0, "audio_end_ms": 150}])
    );
    // Heard more than was produced (clock skew): clamped, the service would refuse it.
    assert_eq!(
        serde_json::to_value(d.barge_in(5000)).unwrap()[1]["audio_end_ms"],
        json!(200)
    );
    assert_eq!(
        run(
            &mut d,
            json!({"type": "response.done", "response": {"id": "r1", "status": "cancelled",
            "status_details": {"type": "cancelled", "reason": "turn_detected"}}})
        ),
        vec![ModelEvent::TurnComplete]
    );
    // No response in progress any more: only the truncate.
    assert_eq!(d.barge_in(100).len(), 1);
}

#[test]
fn a_client_cancel_reports_interrupted_and_g711_is_decoded() {
    let mut d = Decoder::new(AudioFormat::PCM24K);
    run(
        &mut d,
        json!({"type": "session.updated", "session": {"type": "realtime",
        "audio": {"output": {"format": {"type": "audio/pcmu"}}}}}),
    );
    assert_eq!(d.format(), &AudioFormat::Pcmu);
    run(
        &mut d,
        json!({"type": "response.created", "response": {"id": "r1"}}),
    );
    let ulaw_silence = STANDARD.encode([0xffu8; 160]);
    match &run(
        &mut d,
        json!({"type": "response.output_audio.delta", "item_id": "a1", "delta": ulaw_silence}),
    )[..]
    {
        [
            ModelEvent::Audio {
                rate: 8000,
                samples,
            },
        ] => {
            assert_eq!(samples.len(), 160);
            assert!(samples.iter().all(|s| s.abs() < 10));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(d.audio_item().map(AudioItem::produced_ms), Some(20));
    assert_eq!(
        run(
            &mut d,
            json!({"type": "response.done", "response": {"id": "r1", "status": "cancelled"}})
        ),
        vec![ModelEvent::Interrupted, ModelEvent::TurnComplete]
    );
    // Beta name of the format and of the event.
    let mut b = Decoder::new(AudioFormat::PCM24K);
    run(
        &mut b,
        json!({"type": "session.updated", "session": {"output_audio_format": "g711_alaw"}}),
    );
    assert_eq!(b.format(), &AudioFormat::Pcma);
    assert!(matches!(
        run(
            &mut b,
            json!({"type": "response.audio.delta", "item_id": "a", "delta": STANDARD.encode([0xd5u8; 8])})
        )[..],
        [ModelEvent::Audio { rate: 8000, .. }]
    ));
}

#[test]
fn function_calls_and_errors() {
    let mut d = Decoder::new(AudioFormat::PCM24K);
    assert_eq!(
        run(
            &mut d,
            json!({"type": "response.function_call_arguments.done", "event_id": "e", "response_id": "r",
            "item_id": "fc1", "output_index": 0, "call_id": "call_7", "name": "get_balance",
            "arguments": "{\"account\":\"checking\"}"})
        ),
        vec![ModelEvent::ToolCall(vec![ToolCallRequest {
            id: "call_7".into(),
            name: "get_balance".into(),
            args: json!({"account": "checking"}),
        }])]
    );
    let bad = run(
        &mut d,
        json!({"type": "response.function_call_arguments.done", "call_id": "c", "name": "f", "arguments": "{oops"}),
    );
    assert!(
        matches!(&bad[0], ModelEvent::ProtocolError(m) if m.contains("not JSON")),
        "{bad:?}"
    );
    assert!(matches!(&bad[1], ModelEvent::ToolCall(c) if c[0].args == json!("{oops")));
    let err = run(
        &mut d,
        json!({"type": "error", "event_id": "e9", "error": {"type": "invalid_request_error",
        "code": "conversation_already_has_active_response", "message": "busy", "param": null, "event_id": "c1"}}),
    );
    match &err[..] {
        [ModelEvent::ProtocolError(m)] => {
            assert_eq!(
                error_code(m),
                Some("conversation_already_has_active_response")
            );
            assert!(m.contains("busy") && m.contains("c1"), "{m}");
        }
        other => panic!("{other:?}"),
    }
    let failed = run(
        &mut d,
        json!({"type": "response.done", "response": {"id": "r2", "status": "failed",
        "status_details": {"type": "failed", "error": {"code": "server_error"}}}}),
    );
    assert!(matches!(&failed[0], ModelEvent::ProtocolError(m) if m.contains("server_error")));
    assert_eq!(failed[1], ModelEvent::TurnComplete);
}

#[test]
fn input_transcription_deltas_are_not_repeated() {
    let mut d = Decoder::new(AudioFormat::PCM24K);
    run(
        &mut d,
        json!({"type": "conversation.item.input_audio_transcription.delta", "item_id": "u1", "delta": "he"}),
    );
    assert_eq!(
        run(
            &mut d,
            json!({"type": "conversation.item.input_audio_transcription.completed", "item_id": "u1", "transcript": "hello"})
        ),
        vec![ModelEvent::InputTranscript {
            text: String::new(),
            finished: true
        }]
    );
}

#[test]
fn bad_frames_give_typed_errors_and_bad_audio_a_protocol_error() {
    assert!(matches!(decode(b"nope"), Err(DecodeError::NotJson(_))));
    assert_eq!(decode(b"[]"), Err(DecodeError::NotObject("an array")));
    assert_eq!(decode(b"42"), Err(DecodeError::NotObject("a number")));
    assert_eq!(decode(b"{}"), Err(DecodeError::NoType));
    match decode(br#"{"type":"input_audio_buffer.speech_started","audio_start_ms":"soon"}"#) {
        Err(DecodeError::Field { path, .. }) => assert_eq!(path, "audio_start_ms"),
        other => panic!("{other:?}"),
    }
    let big = vec![b' '; MAX_FRAME_BYTES + 1];
    assert!(matches!(decode(&big), Err(DecodeError::TooLarge(..))));
    let mut d = Decoder::new(AudioFormat::PCM24K);
    for delta in ["***", "AAEC"] {
        let out = run(
            &mut d,
            json!({"type": "response.output_audio.delta", "item_id": "a1", "delta": delta}),
        );
        assert!(
            matches!(&out[..], [ModelEvent::ProtocolError(m)] if m.contains("a1")),
            "{out:?}"
        );
    }
    // Unknown events and fields are tolerated.
    assert!(
        run(
            &mut d,
            json!({"type": "mcp_list_tools.in_progress", "whatever": [1]})
        )
        .is_empty()
    );
}

#[test]
fn without_interrupt_response_speech_is_not_an_interruption() {
    let mut d = Decoder::new(AudioFormat::PCM24K);
    run(
        &mut d,
        json!({"type": "session.updated", "session": {"type": "realtime",
            "audio": {"input": {"turn_detection": {"type": "server_vad", "interrupt_response": false}}}}}),
    );
    run(
        &mut d,
        json!({"type": "response.created", "response": {"id": "r1"}}),
    );
    run(
        &mut d,
        json!({"type": "response.output_audio.delta", "item_id": "a1", "delta": pcm_b64(&[0; 24])}),
    );
    assert!(
        run(
            &mut d,
            json!({"type": "input_audio_buffer.speech_started", "item_id": "u"})
        )
        .is_empty(),
        "the client decides"
    );
    // Its own cancel still reports the interruption.
    assert_eq!(
        run(
            &mut d,
            json!({"type": "response.done", "response": {"id": "r1", "status": "cancelled"}})
        ),
        vec![ModelEvent::Interrupted, ModelEvent::TurnComplete]
    );
}
