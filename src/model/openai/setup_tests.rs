//! The `session.update` shapes the session sends.
use super::*;
use serde_json::json;

#[test]
fn ga_session_update_shape() {
    let cfg = SessionConfig {
        instructions: Some("Be brief.".into()),
        voice: Some("marin".into()),
        input_format: AudioFormat::Pcmu,
        output_format: AudioFormat::Pcmu,
        tools: vec![FunctionTool::new(
            "get_balance",
            Some("Look up a balance.".into()),
            json!({"type": "object", "properties": {}}),
        )],
        turn_detection: Some(TurnDetection::server_vad(Some(500))),
        ..Default::default()
    };
    let v = serde_json::to_value(cfg.session_update(Api::Ga)).unwrap();
    assert_eq!(v["type"], "session.update");
    let s = &v["session"];
    assert_eq!(s["type"], "realtime");
    assert_eq!(s["instructions"], "Be brief.");
    assert_eq!(s["output_modalities"], json!(["audio"]));
    assert_eq!(s["audio"]["input"]["format"], json!({"type": "audio/pcmu"}));
    assert_eq!(
        s["audio"]["input"]["transcription"]["model"],
        "gpt-4o-mini-transcribe"
    );
    assert_eq!(s["audio"]["input"]["turn_detection"]["type"], "server_vad");
    assert_eq!(
        s["audio"]["input"]["turn_detection"]["silence_duration_ms"],
        500
    );
    assert_eq!(s["audio"]["output"]["voice"], "marin");
    assert_eq!(s["tools"][0]["type"], "function");
    assert!(s.get("model").is_none(), "the model is in the URL");
    let manual = SessionConfig {
        turn_detection: None,
        ..Default::default()
    };
    let v = serde_json::to_value(manual.session_update(Api::Ga)).unwrap();
    assert_eq!(
        v["session"]["audio"]["input"]["turn_detection"],
        Value::Null
    );
}

#[test]
fn beta_session_update_is_flat() {
    let cfg = SessionConfig {
        input_format: AudioFormat::Pcma,
        ..Default::default()
    };
    let v = serde_json::to_value(cfg.session_update(Api::Beta)).unwrap();
    let s = &v["session"];
    assert!(s.get("type").is_none());
    assert_eq!(s["input_audio_format"], "g711_alaw");
    assert_eq!(s["output_audio_format"], "pcm16");
    assert_eq!(s["modalities"], json!(["text", "audio"]));
    assert_eq!(
        s["input_audio_transcription"]["model"],
        "gpt-4o-mini-transcribe"
    );
}

#[test]
fn partial_update_sends_only_what_changes() {
    let v = serde_json::to_value(update_event(Api::Ga, Some("You are billing."), None)).unwrap();
    assert_eq!(
        v,
        json!({"type": "session.update", "session": {"type": "realtime", "instructions": "You are billing."}})
    );
    let v = serde_json::to_value(update_event(Api::Ga, None, Some(&[]))).unwrap();
    assert_eq!(v["session"]["tools"], json!([]));
}
