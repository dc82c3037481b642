//! The store stalls (another connection holds a lock through both calls of seed 001): the calls
//! sound exactly as with a working store — the caller's contexts are waited for only within the
//! bound before the audio starts, and writes queue up off the audio path.

use crate::store_support;

use std::path::{Path, PathBuf};

use baton::call::CallReport;
use baton::demo::{self, DemoArgs, DemoOutcome};
use serde_json::{Value, json};
use sqlx::Executor;

fn timeline(r: &CallReport) -> Value {
    json!({
        "frames": r.frames_played,
        "voiced": r.voice_frames,
        "underruns": r.underruns,
        "late_ticks": r.late_ticks,
        "uplink_max": r.uplink_added_ms.iter().cloned().fold(0.0, f64::max),
        "turns": r.turns.iter().map(|t| json!([t.agent_start_ms, t.agent_end_ms, t.first_audio_ms])).collect::<Vec<_>>(),
    })
}

async fn seed001(store: String, out: PathBuf) -> DemoOutcome {
    tokio::task::spawn_blocking(move || {
        demo::run(&DemoArgs {
            scenario: Some(
                Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("audio-fixtures/scenarios/seed001.toml")
                    .display()
                    .to_string(),
            ),
            out,
            api_key_env: "BATON_TEST_NO_KEY".into(),
            store: Some(store),
            caller: Some("+4520009999".into()),
            ..Default::default()
        })
        .unwrap()
    })
    .await
    .unwrap()
}

async fn calls_go_on_while_the_store_stalls(url: &str) {
    let dir = tempfile::tempdir().unwrap();
    let fine = seed001(url.to_owned(), dir.path().join("fine")).await;
    let blocker = sqlx::AnyPool::connect(url).await.unwrap();
    let mut lock = blocker.begin().await.unwrap();
    if url.starts_with("sqlite") {
        lock.execute("INSERT INTO calls (id, leg, started_at) VALUES ('lock', 'x', 0)")
            .await
            .unwrap();
    } else {
        lock.execute(
            "LOCK TABLE calls, transcript_lines, tool_calls, agent_contexts IN ACCESS EXCLUSIVE MODE",
        )
        .await
        .unwrap();
    }
    let stalled = seed001(url.to_owned(), dir.path().join("stalled")).await;
    lock.rollback().await.unwrap();
    for (a, b) in fine.calls.iter().zip(&stalled.calls) {
        assert_eq!(timeline(&a.report), timeline(&b.report), "{}", b.id);
        assert_eq!(b.report.end_reason, "caller hung up");
    }
    // A read that waits on the lock is cut at the bound; one that does not (SQLite's readers
    // never wait for its writer) finds nothing, since the stalled writes are not in.
    let c2 = &stalled.calls[1];
    let load = c2.context_load_ms.unwrap();
    assert!(load < 1000.0, "bounded: {load} ms");
    assert!(
        !c2.context_ops
            .iter()
            .any(|op| matches!(op, baton::agents::contexts::ContextOp::Resume { .. })),
        "nothing to resume from a stalled store: {:?}",
        c2.context_ops
    );
}
on_both!(stalled_store_call, calls_go_on_while_the_store_stalls);
