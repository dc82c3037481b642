//! Every client message baton sends during the bundled call (setup, realtime audio, tool
//! responses) validates against the official google-genai SDK's pydantic types
//! (`types.LiveClientMessage.model_validate`, which refuses unknown fields). The mock records the
//! messages exactly as received.
//!
//! Needs python3 with venv and PyPI access the first time (`scripts/python-env.sh`).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use baton::backend::ModelBackend;
use baton::call::{self, CallOptions};
use baton::leg::fixture::{FixtureCaller, LegCodec};
use baton::mock::record::RecordSink;
use baton::mock::{MockOptions, Scenario};
use baton::model::gemini::session::SessionConfig;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn python() -> PathBuf {
    let out = Command::new("bash")
        .arg(Path::new(ROOT).join("scripts/python-env.sh"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "scripts/python-env.sh failed (python3 with venv and PyPI access are needed):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

/// Runs the bundled call with a tool-calling turn on the accelerated clock, recording what baton
/// sends.
fn record_bundled_call(record: &Path) -> usize {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    rt.block_on(async {
        let mut scenario =
            Scenario::load(&Path::new(ROOT).join("audio-fixtures/scenarios/demo.toml")).unwrap();
        // One turn calls a tool, so a toolResponse is among the recorded messages.
        scenario.turns[0].tool_call = Some(baton::mock::scenario::ScriptedToolCall {
            name: "lookup_account".into(),
            args: serde_json::json!({"caller": "+15550100"}),
        });
        let (sink, writer) = RecordSink::create(record).await.unwrap();
        let mut opts = MockOptions::new(Arc::new(scenario.clone()));
        opts.record = Some(sink);
        let backend = ModelBackend::in_process(Arc::new(opts));
        let config = SessionConfig {
            system_instruction: Some("You are a friendly financial advisor.".into()),
            voice: Some("Kore".into()),
            silence_duration_ms: Some(500),
            tools: vec![serde_json::json!({"functionDeclarations": [{
                "name": "lookup_account",
                "description": "Look up the caller's account.",
                "parameters": {"type": "OBJECT", "properties": {"caller": {"type": "STRING"}}},
                "behavior": "BLOCKING"
            }]})],
            ..Default::default()
        };
        let session = backend.open(&config).await.unwrap();
        let fixture =
            FixtureCaller::from_wav(scenario.caller.as_ref().unwrap(), LegCodec::L16k16).unwrap();
        let (leg, rec) = fixture.start();
        let report = call::run(leg, session, CallOptions::default())
            .await
            .unwrap();
        rec.await.unwrap();
        drop(backend);
        // The writer finishes once every sink clone is gone.
        let _ = tokio::time::timeout(std::time::Duration::from_secs(5), writer).await;
        assert_eq!(report.tool_calls, 1);
        report.turns.len()
    })
}

#[test]
fn every_message_baton_sends_validates_against_the_sdk_types() {
    let python = python();
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("sent.jsonl");
    let turns = record_bundled_call(&record);
    assert_eq!(turns, 4);
    let text = std::fs::read_to_string(&record).unwrap();
    let kinds: Vec<String> = text
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            v.as_object().unwrap().keys().next().unwrap().clone()
        })
        .collect();
    assert_eq!(kinds[0], "setup");
    for k in ["realtimeInput", "toolResponse"] {
        assert!(kinds.iter().any(|x| x == k), "no {k} recorded");
    }
    let out = Command::new(&python)
        .arg(Path::new(ROOT).join("tests/python/validate_client_messages.py"))
        .arg(&record)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the SDK refused a message baton sent:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
