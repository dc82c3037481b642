//! Engine tests: setup ordering, input decoding, manual activity, bad input, clock rules.

use std::sync::Arc;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::json;

use super::*;

#[test]
fn setup_must_come_first() {
    let mut h = Harness::new(scenario(vec![]));
    h.send(json!({"realtimeInput": {"text": "hi"}}));
    let (code, reason) = close_of(&h.log);
    assert_eq!(code, 1007);
    assert!(reason.contains("setup"), "{reason}");
    assert!(h.s.is_closed());
    assert_eq!(h.s.poll_timeout(), None);
    h.send(json!({"setup": {"model": "models/mock"}}));
    assert_eq!(h.log.len(), 1, "nothing after a close");

    let mut h = Harness::ready(scenario(vec![]), json!({}));
    h.send(json!({"setup": {"model": "models/mock"}}));
    assert_eq!(close_of(&h.log).0, 1007);

    let mut h = Harness::new(scenario(vec![]));
    h.send(json!({"setup": {"model": "models/gemini-2.5-pro"}}));
    assert_eq!(
        close_of(&h.log),
        (1008, "models/gemini-2.5-pro is not found for API version v1beta, or is not supported for bidiGenerateContent".into())
    );
}

#[test]
fn manual_activity_and_audio_stream_end() {
    let mut h = Harness::ready(
        scenario(vec![]),
        json!({"realtimeInputConfig": {"automaticActivityDetection": {"disabled": true}}}),
    );
    h.speak(&tone(500));
    h.speak(&silence(1000));
    h.settle();
    assert!(h.log.is_empty(), "no VAD turns when detection is disabled");
    h.send(json!({"realtimeInput": {"activityStart": {}}}));
    h.speak(&silence(200));
    h.send(json!({"realtimeInput": {"activityEnd": {}}}));
    h.settle();
    assert!(h.take().iter().any(|o| audio_samples(o) > 0));

    // With VAD on, audioStreamEnd ends a turn in progress at once.
    let mut h = Harness::ready(scenario(vec![]), json!({}));
    h.speak(&tone(400));
    h.send(json!({"realtimeInput": {"audioStreamEnd": true}}));
    let t_end = h.now;
    h.settle();
    let first_audio = h.log.iter().find(|(_, o)| audio_samples(o) > 0).unwrap().0;
    assert_eq!(first_audio, t_end - h.t0 + 300 * MS);
}

#[test]
fn media_chunks_url_safe_base64_and_silence_window_from_setup() {
    let mut h = Harness::ready(
        scenario(vec![]),
        json!({"realtimeInputConfig": {"automaticActivityDetection": {"silenceDurationMs": 200}}}),
    );
    let mut signal = tone(500);
    signal.extend(silence(400));
    for chunk in signal.chunks(320) {
        h.advance(20 * MS);
        let bytes: Vec<u8> = chunk.iter().flat_map(|s| s.to_le_bytes()).collect();
        h.send(json!({"realtime_input": {"media_chunks": [
            {"mime_type": "audio/pcm;rate=16000", "data": URL_SAFE_NO_PAD.encode(bytes)},
            {"mime_type": "audio/pcm;rate=16000", "data": "ignored!"}]}}));
    }
    h.settle();
    let first_audio = h.log.iter().find(|(_, o)| audio_samples(o) > 0).unwrap().0;
    // Speech ends at 500 ms; 200 ms window; 300 ms to first audio.
    assert!(
        (1000 * MS..=1040 * MS).contains(&first_audio),
        "{first_audio:?}"
    );
}

#[test]
fn bad_inputs_close_with_a_reason() {
    let big = format!(
        "{{\"realtimeInput\":{{\"text\":\"{}\"}}}}",
        "a".repeat(17 << 20)
    );
    let cases: Vec<(Vec<u8>, u16, &str)> = vec![
        (
            json!({"realtimeInput": {"audio": {"mimeType": "image/png", "data": "AAAA"}}})
                .to_string()
                .into_bytes(),
            1007,
            "image/png",
        ),
        (
            json!({"realtimeInput": {"audio": {"mimeType": "audio/pcm", "data": "@@@"}}})
                .to_string()
                .into_bytes(),
            1007,
            "base64",
        ),
        (
            json!({"realtimeInput": {"text": "a", "audioStreamEnd": true}})
                .to_string()
                .into_bytes(),
            1007,
            "exactly one",
        ),
        (
            json!({"realtimeInput": {}}).to_string().into_bytes(),
            1007,
            "exactly one",
        ),
        (
            json!({"sessionUpdate": {}}).to_string().into_bytes(),
            1007,
            "sessionUpdate",
        ),
        (b"garbage".to_vec(), 1007, "Invalid JSON"),
        (b"{\"realtimeInput\": {\"text\": \"a".to_vec(), 1007, "EOF"),
        (big.into_bytes(), 1009, "16 MiB"),
        (
            json!({"realtimeInput": {"activityStart": {}}})
                .to_string()
                .into_bytes(),
            1007,
            "disabled",
        ),
        (
            json!({"toolResponse": {"functionResponses": [{"name": "f", "response": {}}]}})
                .to_string()
                .into_bytes(),
            1007,
            "id is required",
        ),
    ];
    for (frame, code, want) in cases {
        let mut h = Harness::ready(scenario(vec![]), json!({}));
        h.send_raw(&frame);
        let (c, reason) = close_of(&h.log);
        assert_eq!(c, code, "{want}: {reason}");
        assert!(reason.contains(want), "{want}: {reason}");
        assert!(reason.len() <= 123);
    }
}

#[test]
fn long_close_reasons_are_cut_to_fit_a_close_frame() {
    let mut h = Harness::new(scenario(vec![]));
    h.send(json!({"setup": {"model": format!("models/{}", "x".repeat(300))}}));
    let (code, reason) = close_of(&h.log);
    assert_eq!(code, 1008);
    assert!(reason.len() <= 123 && reason.ends_with('…'), "{reason}");
}

#[test]
fn jitter_is_seeded_and_time_never_goes_backwards() {
    let jittery = |seed| {
        let mut s = (*scenario(vec![])).clone();
        s.timing.jitter = 25 * MS;
        s.timing.seed = seed;
        let mut h = Harness::ready(Arc::new(s), json!({}));
        h.send(json!({"realtimeInput": {"text": "hi"}}));
        h.settle();
        h.log
            .iter()
            .filter(|(_, o)| audio_samples(o) > 0)
            .map(|(t, _)| *t)
            .collect::<Vec<_>>()
    };
    assert_eq!(jittery(3), jittery(3));
    assert_ne!(jittery(3), jittery(4));

    let mut h = Harness::ready(scenario(vec![]), json!({}));
    h.send(json!({"realtimeInput": {"text": "hi"}}));
    let due = h.s.poll_timeout().unwrap();
    // An older `now` counts as the latest seen: nothing fires early.
    h.s.handle_timeout(h.t0);
    h.drain();
    assert!(h.log.is_empty());
    assert_eq!(h.s.poll_timeout(), Some(due));
}
