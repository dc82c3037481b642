//! The demo's store: `--store URL`, or a fresh SQLite file in the output folder for a scenario of
//! several calls (seed 001 pauses a context in one call and resumes it in the next). Its I/O runs
//! on a runtime of its own, on the real clock: the accelerated demo's paused clock would
//! otherwise jump ahead while a query is on another thread and time the query out.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use super::args::{DemoArgs, DemoError};
use super::outcome::DemoOutcome;
use crate::server::attach::{Ran, StoreHandle};
use crate::store::{Store, StoreWriter};

fn io_runtime() -> Result<&'static tokio::runtime::Runtime, DemoError> {
    // Built once, inside the lock: a second runtime built by a racing thread would be dropped
    // inside that thread's runtime, which tokio refuses.
    static RT: OnceLock<Result<tokio::runtime::Runtime, String>> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("baton-store")
            .enable_all()
            .build()
            .map_err(|e| e.to_string())
    })
    .as_ref()
    .map_err(|e| DemoError::Runtime(e.clone()))
}

/// The store the demo's calls use, if any.
pub async fn open(args: &DemoArgs, several_calls: bool) -> Result<Option<StoreHandle>, DemoError> {
    let url = match (&args.store, several_calls) {
        (Some(u), _) => u.clone(),
        (None, true) => {
            let db = args.out.join("baton.db");
            for suffix in ["", "-wal", "-shm"] {
                let mut p = db.clone().into_os_string();
                p.push(suffix);
                let _ = std::fs::remove_file(p);
            }
            format!("sqlite://{}", db.display())
        }
        (None, false) => return Ok(None),
    };
    let rt = io_runtime()?;
    let opened = rt
        .spawn(async move {
            let store = Store::open(&url).await?;
            let (writer, _task) = StoreWriter::spawn(store.clone(), 10_000);
            Ok::<_, crate::store::StoreError>((store, writer))
        })
        .await
        .map_err(|e| DemoError::Store(e.to_string()))?
        .map_err(|e| DemoError::Store(e.to_string()))?;
    Ok(Some(StoreHandle {
        store: opened.0,
        writer: opened.1,
        read_timeout: Duration::from_millis(300),
        recordings: None,
        io: Some(rt.handle().clone()),
    }))
}

/// Waits until every queued write is in the store, then closes it.
pub async fn finish(store: &Option<StoreHandle>) {
    let Some(s) = store else { return };
    let w = s.writer.clone();
    let db = s.store.clone();
    let finish = async move {
        let done = w.flush(Duration::from_secs(10)).await;
        db.close().await;
        done
    };
    let done = match &s.io {
        Some(io) => io.spawn(finish).await.unwrap_or(false),
        None => finish.await,
    };
    if !done {
        tracing::warn!("demo store: writes still queued");
    }
}

/// The calls a scenario makes: the scenario itself, then `<scenario>/call*.toml` (a scenario of
/// several calls from one caller, e.g. seed 001's pause and resume), in name order.
pub fn scenario_calls(first: &Path) -> Vec<PathBuf> {
    let mut v = vec![first.to_path_buf()];
    let dir = first.with_extension("");
    if let Ok(entries) = std::fs::read_dir(&dir) {
        let mut more: Vec<PathBuf> = entries
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| {
                p.extension().is_some_and(|x| x == "toml")
                    && p.file_name()
                        .is_some_and(|n| n.to_string_lossy().starts_with("call"))
            })
            .collect();
        more.sort();
        v.extend(more);
    }
    v
}

/// Per call: its contexts and sidecars (when there is something to say).
pub fn render_calls(outcome: &DemoOutcome) -> String {
    let mut s = String::new();
    for (i, c) in outcome.calls.iter().enumerate() {
        if outcome.calls.len() < 2 && c.context_ops.is_empty() && c.sidecars.is_none() {
            continue;
        }
        let _ = writeln!(
            s,
            "call {} ({}): {} turns, {} handoffs, {} underruns; {}",
            i + 1,
            c.id,
            c.report.turns.len(),
            c.report.handoffs.len(),
            c.report.underruns,
            c.report.end_reason
        );
        call_details(&mut s, c);
    }
    s
}

/// A call's contexts (how long loading them took, what happened to each) and sidecars, one
/// indented line each.
pub fn call_details(s: &mut String, c: &Ran) {
    if let Some(ms) = c.context_load_ms {
        let _ = writeln!(s, "  the caller's contexts loaded in {ms:.2} ms");
    }
    for op in &c.context_ops {
        let _ = writeln!(s, "  context {}", super::summary::describe(op));
    }
    for (id, st) in c.sidecars.iter().flatten() {
        let _ = writeln!(
            s,
            "  sidecar {id}: {} runs, {} in time ({} fed to the session, {} over budget), {} timed out, {} failed, {} still running at the call's end",
            st.runs, st.ok, st.offered, st.over_budget, st.timeouts, st.errors, st.unfinished
        );
    }
}
