//! Store throughput under many concurrent calls, and the time to load a caller's contexts at call
//! start (what a resumed call waits for before its audio starts).
//!
//! ```sh
//! cargo bench --bench store_load -- --calls 200 --lines 100                 # SQLite (temp file)
//! eval "$(scripts/postgres.sh)"
//! cargo bench --bench store_load -- --calls 200 --lines 100 --url "$BATON_TEST_POSTGRES_URL"
//! ```
//!
//! Each simulated call writes what a real one does — its start, transcript lines, a tool call
//! every fifth line, a context activation and pause, its end with figures — through one
//! `StoreWriter` (the daemon's: one bounded queue, one writer task, batched transactions), all
//! calls at once and as fast as the queue takes them (a full queue makes a producer wait 1 ms and
//! retry, so nothing is lost and the writer runs flat out). Then the contexts of 200 callers are
//! loaded one by one, first with the store idle, then while a second wave of calls writes.

use std::time::{Duration, Instant};

use baton::store::recorder::load_contexts;
use baton::store::{Store, StoreWriter, Write, new_id, now_ms};
use serde_json::json;

fn arg(name: &str, default: &str) -> String {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
        .unwrap_or_else(|| default.to_owned())
}

async fn put(w: &StoreWriter, mut make: impl FnMut() -> Write, full: &mut u64) {
    loop {
        if w.backlog() + 1 < CAPACITY && w.write(make()) {
            return;
        }
        *full += 1;
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

const CAPACITY: usize = 10_000;

/// One simulated call; returns how often its writes met a full queue.
async fn call(w: StoreWriter, caller: String, lines: i64) -> u64 {
    let mut full = 0;
    let id = new_id("call_");
    let ctx = new_id("ctx_");
    put(
        &w,
        || Write::CallStarted {
            id: id.clone(),
            caller: Some(caller.clone()),
            leg: "bench".into(),
            agent_set: Some("router".into()),
            at: now_ms(),
        },
        &mut full,
    )
    .await;
    for seq in 0..lines {
        put(
            &w,
            || Write::Line {
                call_id: id.clone(),
                seq,
                role: if seq % 2 == 0 {
                    "caller".into()
                } else {
                    "agent".into()
                },
                agent: "vehicle_offer".into(),
                text: "About two hundred thousand kroner, leasing please.".into(),
                at_ms: seq * 2000,
            },
            &mut full,
        )
        .await;
        if seq % 5 == 0 {
            put(
                &w,
                || Write::ToolCall {
                    call_id: id.clone(),
                    seq: seq / 5,
                    agent: "vehicle_offer".into(),
                    tool: "update_offer".into(),
                    call_ref: format!("fc{seq}"),
                    turn: seq,
                    allowed: true,
                    args: Some(json!({"budget_dkk": 200000}).to_string()),
                    error: None,
                    at_ms: seq * 2000,
                },
                &mut full,
            )
            .await;
        }
        if seq == 2 {
            put(
                &w,
                || Write::ContextActivated {
                    id: ctx.clone(),
                    caller: caller.clone(),
                    agent: "vehicle_offer".into(),
                    summary: "Caller wants a quote for a Toyota Camry.".into(),
                    call_id: Some(id.clone()),
                    position: Some(2),
                    data: "{}".into(),
                    at: now_ms(),
                },
                &mut full,
            )
            .await;
        }
        tokio::task::yield_now().await;
    }
    put(
        &w,
        || Write::ContextStatus {
            id: ctx.clone(),
            status: baton::store::ContextStatus::Paused,
            data: Some(json!({"brand": "Toyota"}).to_string()),
            at: now_ms(),
        },
        &mut full,
    )
    .await;
    put(
        &w,
        || Write::CallEnded {
            id: id.clone(),
            at: now_ms(),
            end_reason: "caller hung up".into(),
            figures: json!({"underruns": 0}).to_string(),
            history: vec![],
            handoffs: vec![],
        },
        &mut full,
    )
    .await;
    full
}

fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

async fn wave(w: &StoreWriter, calls: usize, lines: i64, prefix: &str) -> (u64, Duration) {
    let t0 = Instant::now();
    let tasks: Vec<_> = (0..calls)
        .map(|i| tokio::spawn(call(w.clone(), format!("{prefix}{i:05}"), lines)))
        .collect();
    let mut full = 0;
    for t in tasks {
        full += t.await.unwrap_or(0);
    }
    assert!(
        w.flush(Duration::from_secs(600)).await,
        "writer did not drain"
    );
    (full, t0.elapsed())
}

async fn resume_latency(store: &Store, callers: usize, prefix: &str) -> Vec<f64> {
    let mut v = Vec::new();
    for i in 0..callers {
        let l = load_contexts(store, &format!("{prefix}{i:05}"), Duration::from_secs(5)).await;
        assert!(
            !l.timed_out && l.contexts.len() == 1,
            "{prefix}{i:05}: {l:?}"
        );
        v.push(l.took.as_secs_f64() * 1000.0);
    }
    v
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let dir = tempfile::tempdir().expect("temp dir");
    let default = format!("sqlite://{}/bench.db", dir.path().display());
    let url = arg("--url", &default);
    let calls: usize = arg("--calls", "200").parse().expect("--calls N");
    let lines: i64 = arg("--lines", "100").parse().expect("--lines N");
    let store = Store::open(&url).await.expect("store");
    let (w, _task) = StoreWriter::spawn(store.clone(), CAPACITY);
    let run = new_id("");
    let (full, took) = wave(&w, calls, lines, &format!("+1{run}")).await;
    let c = w.counts();
    println!(
        "store {}: {calls} concurrent calls x {lines} lines: {} writes in {:.2} s = {:.0} writes/s sustained \
         ({} transactions, {:.1} writes each; {} failed; queue full {full} times, producers retried)",
        store.url(),
        c.written,
        took.as_secs_f64(),
        c.written as f64 / took.as_secs_f64(),
        c.batches,
        c.written as f64 / c.batches.max(1) as f64,
        c.failed,
    );
    let n = calls.min(200);
    let mut idle = resume_latency(&store, n, &format!("+1{run}")).await;
    let busy_writer = w.clone();
    let run2 = new_id("");
    let load =
        tokio::spawn(async move { wave(&busy_writer, calls, lines, &format!("+2{run2}")).await });
    let mut busy = resume_latency(&store, n, &format!("+1{run}")).await;
    let _ = load.await;
    println!(
        "contexts loaded at call start ({n} callers): idle p50 {:.2} ms p99 {:.2} ms max {:.2} ms; \
         during a second write wave p50 {:.2} ms p99 {:.2} ms max {:.2} ms",
        pct(&mut idle, 0.5),
        pct(&mut idle, 0.99),
        pct(&mut idle, 1.0),
        pct(&mut busy, 0.5),
        pct(&mut busy, 0.99),
        pct(&mut busy, 1.0),
    );
}
