//! The store on SQLite and on a real PostgreSQL server (each test runs on both; the PostgreSQL
//! half says SKIPPED when `BATON_TEST_POSTGRES_URL` is not set, and fails when `CI` is set —
//! `.ci/run` sets both).

use crate::store_support;

use std::time::Duration;

use baton::store::read::{ContextPatch, Table};
use baton::store::{
    ContextStatus, HandoffRow, HistoryRow, Store, StoreWriter, Write, new_id, now_ms,
};
use serde_json::json;
use sqlx::Executor;

const FLUSH: Duration = Duration::from_secs(20);

async fn migrations_are_versioned_and_idempotent(url: &str) {
    let a = Store::open(url).await.unwrap();
    a.close().await;
    let b = Store::open(url).await.unwrap();
    assert_eq!(b.count(Table::Calls).await.unwrap(), 0);
    b.close().await;
    let pool = sqlx::AnyPool::connect(&with_rwc(url)).await.unwrap();
    let row: (i64,) = sqlx::query_as("SELECT COUNT(*) FROM _sqlx_migrations")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(row.0, baton::store::migrations::MIGRATIONS.len() as i64);
}
on_both!(migrations, migrations_are_versioned_and_idempotent);

fn with_rwc(url: &str) -> String {
    sqlx::any::install_default_drivers();
    url.to_owned()
}

async fn a_call_round_trips(url: &str) {
    let store = Store::open(url).await.unwrap();
    let (w, task) = StoreWriter::spawn(store.clone(), 64);
    let id = new_id("call_");
    assert!(w.write(Write::CallStarted {
        id: id.clone(),
        caller: Some("+15550100".into()),
        leg: "twilio".into(),
        agent_set: Some("seed001".into()),
        at: now_ms(),
    }));
    for (seq, (role, agent, text)) in [
        ("caller", "router", "I want a quote for a Toyota."),
        ("agent", "offer", "Happy to help with your quote."),
    ]
    .into_iter()
    .enumerate()
    {
        w.write(Write::Line {
            call_id: id.clone(),
            seq: seq as i64,
            role: role.into(),
            agent: agent.into(),
            text: text.into(),
            at_ms: 1000 * seq as i64,
        });
    }
    w.write(Write::ToolCall {
        call_id: id.clone(),
        seq: 0,
        agent: "offer".into(),
        tool: "update_offer".into(),
        call_ref: "fc1".into(),
        turn: 2,
        allowed: true,
        args: Some(json!({"brand": "Toyota"}).to_string()),
        error: None,
        at_ms: 1500,
    });
    // A second call of the tool, then a third with the same id, which fails: the failure lands
    // on that row only.
    w.write(Write::ToolCall {
        call_id: id.clone(),
        seq: 1,
        agent: "offer".into(),
        tool: "update_offer".into(),
        call_ref: "fc2".into(),
        turn: 3,
        allowed: true,
        args: None,
        error: None,
        at_ms: 2500,
    });
    // A later session's model reuses the id: the failure is that latest call's.
    w.write(Write::ToolCall {
        call_id: id.clone(),
        seq: 2,
        agent: "offer".into(),
        tool: "update_offer".into(),
        call_ref: "fc2".into(),
        turn: 4,
        allowed: true,
        args: None,
        error: None,
        at_ms: 3500,
    });
    w.write(Write::ToolFailed {
        call_id: id.clone(),
        call_ref: "fc2".into(),
        error: "tool 'update_offer' is unavailable: MCP server 'crm' is not connected".into(),
    });
    w.write(Write::CallEnded {
        id: id.clone(),
        at: now_ms(),
        end_reason: "caller hung up".into(),
        figures: json!({"underruns": 0, "first_audio_ms": {"p50": 800.0}}).to_string(),
        history: vec![HistoryRow {
            seq: 0,
            agent: "router".into(),
            activated_at_ms: 0,
            deactivated_at_ms: Some(1200),
            message_count: 1,
            activation_summary: String::new(),
        }],
        handoffs: vec![HandoffRow {
            seq: 0,
            from: "router".into(),
            to: "offer".into(),
            strategy: "context_update".into(),
            trigger: "transfer_tool".into(),
            gap_ms: Some(0.0),
            announcement_queued_ms: Some(1730.0),
            trigger_to_wire_ms: Some(0.11),
            heard_at_ms: Some(2400.0),
            at_ms: 1200,
        }],
    });
    w.write(Write::Recording {
        call_id: id.clone(),
        path: "out/calls/x.wav".into(),
    });
    assert!(w.flush(FLUSH).await);
    let c = w.counts();
    assert_eq!((c.queued, c.written, c.dropped, c.failed), (9, 9, 0, 0));

    let call = store.call(&id).await.unwrap();
    assert_eq!(call.caller.as_deref(), Some("+15550100"));
    assert_eq!(call.end_reason.as_deref(), Some("caller hung up"));
    assert_eq!(call.figures.unwrap()["underruns"], 0);
    assert_eq!(call.recording.as_deref(), Some("out/calls/x.wav"));
    let lines = store.transcript(&id).await.unwrap();
    assert_eq!(lines.len(), 2);
    assert_eq!(
        (lines[1].role.as_str(), lines[1].agent.as_str()),
        ("agent", "offer")
    );
    let tools = store.tool_calls(&id).await.unwrap();
    assert_eq!(tools[0].args, Some(json!({"brand": "Toyota"})));
    assert!(tools[0].allowed);
    assert_eq!(tools[0].error, None);
    assert_eq!(tools[1].error, None, "the earlier call of the same id");
    assert_eq!(
        tools[2].error.as_deref(),
        Some("tool 'update_offer' is unavailable: MCP server 'crm' is not connected")
    );
    let h = store.history(&id).await.unwrap();
    assert_eq!(h[0].deactivated_at_ms, Some(1200));
    let hs = store.handoffs(&id).await.unwrap();
    assert_eq!(hs[0].gap_ms, Some(0.0));
    assert_eq!(hs[0].trigger_to_wire_ms, Some(0.11));
    assert_eq!(store.calls(10).await.unwrap().len(), 1);
    assert!(store.call("nope").await.is_err());
    drop(w);
    task.await.unwrap();
}
on_both!(call_round_trip, a_call_round_trips);

fn activate(id: &str, caller: &str, agent: &str, data: serde_json::Value) -> Write {
    Write::ContextActivated {
        id: id.into(),
        caller: caller.into(),
        agent: agent.into(),
        summary: format!("{agent}: caller wants a quote"),
        call_id: Some("call_1".into()),
        position: Some(3),
        data: data.to_string(),
        at: now_ms(),
    }
}

async fn context_lifecycle(url: &str) {
    let store = Store::open(url).await.unwrap();
    let (w, _task) = StoreWriter::spawn(store.clone(), 64);
    let caller = "+15550111";
    w.write(activate("c1", caller, "offer", json!({"brand": "Toyota"})));
    w.write(activate("c2", caller, "booking", json!({})));
    assert!(w.flush(FLUSH).await);
    let all = store.contexts(caller).await.unwrap();
    let status = |id: &str| all.iter().find(|c| c.id == id).map(|c| c.status);
    assert_eq!(
        status("c1"),
        Some(ContextStatus::Paused),
        "one active per caller"
    );
    assert_eq!(status("c2"), Some(ContextStatus::Active));
    let c1 = store.context("c1").await.unwrap();
    assert_eq!(c1.context_data, json!({"brand": "Toyota"}));
    assert_eq!(c1.activation_position, Some(3));
    assert_eq!(c1.activation_summary, "offer: caller wants a quote");

    // Resume c1: c2 pauses.
    w.write(Write::ContextResumed {
        id: "c1".into(),
        caller: caller.into(),
        call_id: Some("call_2".into()),
        position: Some(0),
        at: now_ms(),
    });
    w.write(Write::ContextStatus {
        id: "c1".into(),
        status: ContextStatus::Completed,
        data: Some(json!({"brand": "Toyota", "quote": 199000}).to_string()),
        at: now_ms(),
    });
    assert!(w.flush(FLUSH).await);
    let c1 = store.context("c1").await.unwrap();
    assert_eq!(c1.status, ContextStatus::Completed);
    assert!(c1.completed_at.is_some());
    assert_eq!(c1.context_data["quote"], 199000);
    assert_eq!(c1.activation_call_id.as_deref(), Some("call_2"));
    let resumable = store.resumable_contexts(caller).await.unwrap();
    assert_eq!(resumable.len(), 1);
    assert_eq!(resumable[0].id, "c2");
    assert_eq!(resumable[0].status, ContextStatus::Paused);

    // The operator's update: make c2 active, edit its state.
    let patch = ContextPatch {
        status: Some(ContextStatus::Active),
        context_data: Some(json!({"slot": "Saturday 10:00"})),
        activation_summary: None,
    };
    let c2 = store.update_context("c2", &patch).await.unwrap();
    assert_eq!(c2.status, ContextStatus::Active);
    assert_eq!(c2.context_data["slot"], "Saturday 10:00");
    assert!(store.update_context("nope", &patch).await.is_err());
    // A second active row for the caller is refused by the database itself.
    assert!(w.write(Write::ContextStatus {
        id: "c2".into(),
        status: ContextStatus::Active,
        data: None,
        at: now_ms(),
    }));
    assert!(w.flush(FLUSH).await);
    assert_eq!(w.counts().failed, 1, "status active only through a resume");
    let pool = sqlx::AnyPool::connect(url).await.unwrap();
    let dup = pool
        .execute(
            "INSERT INTO agent_contexts (id, caller, agent, activation_summary, status, created_at, updated_at) \
             VALUES ('c3', '+15550111', 'offer', 's', 'active', 1, 1)",
        )
        .await;
    assert!(dup.is_err(), "the partial unique index holds");
}
on_both!(contexts, context_lifecycle);

/// Four instances (four pools, four writers) activate contexts for two callers at the same
/// time, half of them in the opposite caller order. Each activation pauses the caller's active
/// context and inserts its own as the one active, so the instances race on the
/// one-active-context index and on each other's locks: none of them may lose a write.
async fn unique_active_under_concurrent_instances(url: &str) {
    let instances = 4;
    let n = 40;
    let callers = ["+15550122", "+15550123"];
    let mut stores = Vec::new();
    let mut writers = Vec::new();
    for _ in 0..instances {
        let store = Store::open(url).await.unwrap();
        writers.push(StoreWriter::spawn(store.clone(), 256));
        stores.push(store);
    }
    let mut producers = Vec::new();
    for (k, (w, _)) in writers.iter().enumerate() {
        let w = w.clone();
        producers.push(tokio::spawn(async move {
            for i in 0..n {
                let caller = callers[(i + k) % 2];
                w.write(activate(
                    &format!("i{k}-{i}"),
                    caller,
                    "offer",
                    json!({"i": i}),
                ));
                tokio::task::yield_now().await;
            }
        }));
    }
    for p in producers {
        p.await.unwrap();
    }
    for (w, _) in &writers {
        assert!(w.flush(FLUSH).await);
    }
    let counts: Vec<_> = writers.iter().map(|(w, _)| w.counts()).collect();
    for caller in callers {
        let all = stores[0].contexts(caller).await.unwrap();
        assert_eq!(
            all.len(),
            instances * n / 2,
            "no activation lost: {counts:?}"
        );
        let active = all
            .iter()
            .filter(|c| c.status == ContextStatus::Active)
            .count();
        assert_eq!(active, 1, "exactly one active context per caller");
    }
    assert_eq!(counts.iter().map(|c| c.failed).sum::<u64>(), 0);
}
on_both!(unique_active, unique_active_under_concurrent_instances);

/// The database stalls (another connection holds a lock): writes queue up to the bound, the
/// rest are dropped and counted, and `write` never waits. When the lock goes, the queue drains.
async fn a_stalled_store_sheds_writes_without_blocking(url: &str) {
    let store = Store::open(url).await.unwrap();
    let blocker = sqlx::AnyPool::connect(url).await.unwrap();
    let mut lock = blocker.begin().await.unwrap();
    let sql = if url.starts_with("sqlite") {
        // A write transaction: the writer's own waits on the busy timeout.
        "INSERT INTO calls (id, leg, started_at) VALUES ('lock', 'x', 0)"
    } else {
        "LOCK TABLE transcript_lines IN ACCESS EXCLUSIVE MODE"
    };
    lock.execute(sql).await.unwrap();
    let cap = 50;
    let (w, _task) = StoreWriter::spawn(store.clone(), cap);
    let line = |seq: i64| Write::Line {
        call_id: "stalled".into(),
        seq,
        role: "caller".into(),
        agent: "router".into(),
        text: "hello".into(),
        at_ms: seq * 20,
    };
    // The first batch is taken by the writer (the queue is empty again) and stalls on the lock;
    // then the queue fills.
    w.write(line(0));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while w.backlog() > 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the writer never took the first write"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // `write` never waits: all 500 return while the lock is still held (a write that waited on
    // the store would wait here until the rollback below, which comes only after them).
    let mut accepted = 0;
    for seq in 1..=500 {
        if w.write(line(seq)) {
            accepted += 1;
        }
    }
    assert_eq!(accepted, cap, "the queue holds its bound");
    let c = w.counts();
    assert_eq!(c.dropped, 500 - cap as u64);
    assert_eq!(w.backlog(), cap);
    lock.rollback().await.unwrap();
    assert!(w.flush(FLUSH).await);
    let c = w.counts();
    assert_eq!(c.written + c.failed, 1 + cap as u64);
    assert_eq!(
        store.transcript("stalled").await.unwrap().len() as u64,
        c.written
    );
}
on_both!(stalled_store, a_stalled_store_sheds_writes_without_blocking);

#[tokio::test]
async fn a_bad_url_is_refused_with_a_fix_and_no_password() {
    let e = Store::open("mysql://u:secret@h/db").await.unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains("sqlite://") && !msg.contains("secret"),
        "{msg}"
    );
    let e = Store::open_with(
        "postgres://u:secret@127.0.0.1:1/db",
        Duration::from_millis(300),
    )
    .await
    .unwrap_err();
    assert!(!e.to_string().contains("secret"), "{e}");
}

/// A SQLite store closed (as `serve` and `demo` close it when they stop) has folded its
/// write-ahead log into the database file: a copy of the `.db` alone holds every call.
#[tokio::test]
async fn a_closed_sqlite_store_is_whole_in_its_database_file() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("baton.db");
    let store = Store::open(&format!("sqlite://{}", db.display()))
        .await
        .unwrap();
    let (w, _task) = StoreWriter::spawn(store.clone(), 64);
    assert!(w.write(Write::CallStarted {
        id: new_id("call_"),
        caller: None,
        leg: "twilio".into(),
        agent_set: None,
        at: now_ms(),
    }));
    assert!(w.flush(FLUSH).await);
    store.close().await;
    let copy = dir.path().join("copy.db");
    std::fs::copy(&db, &copy).unwrap();
    let alone = Store::open(&format!("sqlite://{}", copy.display()))
        .await
        .unwrap();
    assert_eq!(alone.count(Table::Calls).await.unwrap(), 1);
}
