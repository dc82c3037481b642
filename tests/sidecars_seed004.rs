//! Seed 004's sidecar agents, on the paused (accelerated) clock: a slow sidecar times out, is
//! counted and ignored, and the live audio is unchanged frame for frame (same played frames,
//! same reply timing, no underrun, nothing flushed); a fast sidecar's result reaches the model on
//! the wire as context that interrupts nothing.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Json;
use axum::routing::post;
use baton::agents::CallEvent;
use baton::backend::ModelBackend;
use baton::call::{Agents, CallOptions, CallReport};
use baton::demo::{self, DemoArgs};
use baton::leg::fixture::{FixtureCaller, LegCodec};
use baton::mock::record::RecordSink;
use baton::mock::{MockOptions, Scenario};
use baton::model::gemini::session::SessionConfig;
use baton::server::attach::{self, Attach, CallInfo, Ran};
use serde_json::{Value, json};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn path(p: &str) -> PathBuf {
    Path::new(ROOT).join(p)
}

/// What a caller hears, turn by turn, and how playout went.
fn audio_timeline(r: &CallReport) -> Value {
    json!({
        "frames": r.frames_played,
        "voiced": r.voice_frames,
        "underruns": r.underruns,
        "late_ticks": r.late_ticks,
        "flushed": r.playout_flushed_samples,
        "interruptions": r.interruptions,
        "turns": r.turns.iter().map(|t| json!([t.caller_end_ms, t.agent_start_ms, t.agent_end_ms, t.first_audio_ms])).collect::<Vec<_>>(),
    })
}

fn demo_with(agents: &Path, out: &Path) -> demo::DemoOutcome {
    demo::run(&DemoArgs {
        scenario: Some(
            path("audio-fixtures/scenarios/seed004.toml")
                .display()
                .to_string(),
        ),
        agents: Some(agents.to_path_buf()),
        out: out.to_path_buf(),
        api_key_env: "BATON_TEST_NO_KEY".into(),
        ..Default::default()
    })
    .unwrap()
}

#[test]
fn a_slow_sidecar_times_out_and_the_audio_is_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let set = path("config/agents/sidecars.toml");
    let text = std::fs::read_to_string(&set).unwrap();
    let bare = dir.path().join("no_sidecars.toml");
    let cut = text.find("[sidecars.analysis]").unwrap();
    std::fs::write(&bare, &text[..cut]).unwrap();

    let with = demo_with(&set, &dir.path().join("with"));
    let without = demo_with(&bare, &dir.path().join("without"));
    assert_eq!(
        audio_timeline(&with.report),
        audio_timeline(&without.report),
        "the sidecars changed what the caller heard"
    );
    assert_eq!(with.report.underruns, 0);
    assert_eq!(with.report.interruptions, 0);

    let sc = with.calls[0].sidecars.clone().expect("sidecars ran");
    let (analysis, research) = (&sc["analysis"], &sc["research"]);
    assert_eq!(analysis.runs, 4, "one run per caller line: {analysis:?}");
    assert_eq!(analysis.ok, 4);
    assert_eq!(analysis.offered, 4);
    assert!(
        analysis.latency_ms.iter().all(|&ms| ms == 300),
        "{analysis:?}"
    );
    assert!(analysis.over_budget == 4, "300 ms against a 250 ms budget");
    assert_eq!(research.ok, 0, "{research:?}");
    assert!(research.timeouts >= 3, "{research:?}");
    assert_eq!(research.errors, 0);
    assert_eq!(
        research.ok + research.timeouts + research.errors + research.unfinished,
        research.runs,
        "every run accounted for: {research:?}"
    );
    // Each of analysis' results went to the session after the turn, as context.
    let delivered: Vec<&CallEvent> = with
        .report
        .events
        .iter()
        .filter(|e| matches!(e, CallEvent::SidecarDelivered { .. }))
        .collect();
    assert_eq!(delivered.len(), 4, "{delivered:#?}");
    assert!(delivered.iter().all(|e| matches!(e,
        CallEvent::SidecarDelivered { sidecar, delivery, .. } if sidecar == "analysis" && delivery == "client_content")));
}

/// An HTTP backend: `/fast` answers at once, `/slow` after 10 s (virtual time); every request
/// body is kept.
async fn sidecar_backend() -> (String, Arc<Mutex<Vec<Value>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (s1, s2) = (seen.clone(), seen.clone());
    let app = axum::Router::new()
        .route(
            "/fast",
            post(move |Json(v): Json<Value>| async move {
                s1.lock().unwrap().push(v);
                Json(json!({"text": "the caller sounds calm; topic savings"}))
            }),
        )
        .route(
            "/slow",
            post(move |Json(v): Json<Value>| async move {
                s2.lock().unwrap().push(v);
                tokio::time::sleep(Duration::from_secs(10)).await;
                Json(json!({"text": "too late"}))
            }),
        );
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(l, app).await });
    (format!("http://{addr}"), seen)
}

async fn call_seed004(agent_set: &str, record: Option<&Path>) -> Ran {
    let scenario = Scenario::load(&path("audio-fixtures/scenarios/seed004.toml")).unwrap();
    let silence = scenario.timing.silence;
    let caller = scenario.caller.clone().unwrap();
    let mut opts = MockOptions::new(Arc::new(scenario));
    if let Some(p) = record {
        opts.record = Some(RecordSink::create(p).await.unwrap().0);
    }
    let caps = opts.capabilities();
    let backend = ModelBackend::in_process(Arc::new(opts));
    let reg = Arc::new(baton::agents::parse(agent_set, Path::new("inline.toml")).unwrap());
    let mut cfg = SessionConfig::default();
    let agents = Agents::start(reg, caps, backend.clone(), &mut cfg);
    let open = async {
        let s = backend.open(&cfg).await?;
        Ok::<_, baton::model::handle::OpenError>((s, Some(agents)))
    };
    let fixture = FixtureCaller::from_wav(&caller, LegCodec::L16k16).unwrap();
    let attach = Attach {
        store: None,
        live: None,
        opts: CallOptions {
            caller_silence: silence,
            ..Default::default()
        },
    };
    let info = CallInfo {
        leg: "fixture",
        caller: None,
    };
    attach::run_attached(open, || fixture.start().0, info, attach)
        .await
        .unwrap()
}

const AGENT: &str = r#"
[set]
name = "http-sidecars"
[agents.advisor]
name = "Asha"
role = "primary"
instruction = "You are Asha."
"#;

#[tokio::test(start_paused = true)]
async fn an_http_sidecar_result_reaches_the_model_without_an_interruption() {
    let (base, seen) = sidecar_backend().await;
    let set = format!(
        "{AGENT}
[sidecars.analysis]
backend = \"http\"
url = \"{base}/fast\"
timeout_ms = 2000
[sidecars.research]
backend = \"http\"
url = \"{base}/slow\"
timeout_ms = 5000
"
    );
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("wire.jsonl");
    let with = call_seed004(&set, Some(&rec)).await;
    let without = call_seed004(AGENT, None).await;
    assert_eq!(
        audio_timeline(&with.report),
        audio_timeline(&without.report)
    );
    let sc = with.sidecars.clone().unwrap();
    assert_eq!(sc["analysis"].ok, 4, "{sc:?}");
    assert!(sc["research"].timeouts >= 3, "{sc:?}");
    // The backend got the transcript so far.
    let bodies = seen.lock().unwrap().clone();
    let last = bodies
        .iter()
        .filter(|b| b["transcript"].as_array().is_some_and(|t| t.len() >= 5))
        .count();
    assert!(last > 0, "{bodies:#?}");
    assert_eq!(bodies[0]["transcript"][0]["role"], "caller");
    assert_eq!(bodies[0]["agent"], "advisor");
    // On the wire: clientContent without turnComplete, after the turn; no interruption. The
    // recorder may still be writing its last lines: read until all four are there (at most 5 s).
    let fed_in = |wire: &str| -> Vec<Value> {
        wire.lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|v| {
                v["clientContent"]["turns"][0]["parts"][0]["text"]
                    .as_str()
                    .is_some_and(|t| t.starts_with("[analysis] the caller sounds calm"))
            })
            .collect()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let mut wire = std::fs::read_to_string(&rec).unwrap_or_default();
    while fed_in(&wire).len() < 4 && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
        wire = std::fs::read_to_string(&rec).unwrap_or_default();
    }
    let fed = fed_in(&wire);
    assert_eq!(fed.len(), 4, "{wire}");
    assert!(
        fed.iter()
            .all(|v| v["clientContent"]["turnComplete"] == json!(false))
    );
    assert_eq!(with.report.interruptions, 0);
    assert_eq!(with.report.playout_flushed_samples, 0);
}
