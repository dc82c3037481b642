//! The store's side of many instances, on a PostgreSQL server of the test's own: the registry
//! (heartbeats, the sweep that gives up a silent instance, ends its calls and pauses their
//! contexts, and never takes one instance twice), and the writer riding out a PostgreSQL
//! restart without losing a write.

use crate::cluster_support;

use std::time::Duration;

use baton::store::instances::{Beat, failed_reason};
use baton::store::read::Table;
use baton::store::{ContextStatus, Store, StoreWriter, Write, new_id, now_ms};
use cluster_support::Postgres;

fn beat<'a>(id: &'a str, state: &'a str, active: i64) -> Beat<'a> {
    Beat {
        id,
        url: "http://127.0.0.1:1",
        capacity: 10,
        active_calls: active,
        state,
    }
}

fn started(id: &str, caller: &str) -> Write {
    Write::CallStarted {
        id: id.into(),
        caller: Some(caller.into()),
        leg: "twilio".into(),
        agent_set: Some("router".into()),
        at: now_ms(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_instance_is_given_up_once_with_its_calls_and_contexts() {
    let pg = tokio::task::spawn_blocking(Postgres::start).await.unwrap();
    let store = Store::open(&pg.url).await.unwrap();
    assert_eq!(store.heartbeat(&beat("a", "ready", 0)).await.unwrap(), None);
    assert_eq!(
        store
            .heartbeat(&beat("a", "ready", 1))
            .await
            .unwrap()
            .as_deref(),
        Some("ready"),
        "the second heartbeat finds the first"
    );
    store.heartbeat(&beat("b", "ready", 2)).await.unwrap();
    // b starts two calls (one ends), a context is activated in the open one.
    let (w, _task) = StoreWriter::spawn_as(store.clone(), 64, Some("b".into()));
    w.write(started("call_open", "+451"));
    w.write(started("call_done", "+452"));
    w.write(Write::ContextActivated {
        id: "ctx_1".into(),
        caller: "+451".into(),
        agent: "vehicle_offer".into(),
        summary: "a quote".into(),
        call_id: Some("call_open".into()),
        position: Some(1),
        data: "{}".into(),
        at: now_ms(),
    });
    w.write(Write::CallEnded {
        id: "call_done".into(),
        at: now_ms(),
        end_reason: "caller hung up".into(),
        figures: "{}".into(),
        history: Vec::new(),
        handoffs: Vec::new(),
    });
    assert!(w.flush(Duration::from_secs(10)).await);
    let owner = store.call_owner("call_open").await.unwrap().unwrap();
    assert_eq!(owner.instance.as_deref(), Some("b"));
    assert_eq!(owner.ended, None);
    assert_eq!(owner.holder.unwrap().active_calls, 2);

    // Nothing is stale yet.
    assert!(store.sweep_stale(5_000).await.unwrap().is_empty());
    // Time itself is the condition: b's heartbeat ages past the 1 s the sweep allows, and a's
    // stays well inside it even on a loaded machine.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    store.heartbeat(&beat("a", "ready", 0)).await.unwrap();
    // b is silent for 1.5 s, a just spoke: two sweepers at once take b once.
    let (s1, s2) = tokio::join!(store.sweep_stale(1_000), store.sweep_stale(1_000));
    let mut swept: Vec<_> = s1.unwrap().into_iter().chain(s2.unwrap()).collect();
    assert_eq!(swept.len(), 1, "{swept:?}");
    let s = swept.remove(0);
    assert_eq!(
        (s.id.as_str(), s.calls_ended, s.contexts_paused),
        ("b", 1, 1)
    );
    let rows = store.instances().await.unwrap();
    let state = |id: &str| rows.iter().find(|r| r.id == id).unwrap().state.clone();
    assert_eq!((state("a"), state("b")), ("ready".into(), "gone".into()));
    let call = store.call("call_open").await.unwrap();
    assert_eq!(
        call.end_reason.as_deref(),
        Some(failed_reason("b").as_str())
    );
    assert_eq!(
        store.call("call_done").await.unwrap().end_reason.as_deref(),
        Some("caller hung up"),
        "an ended call keeps its reason"
    );
    let ctx = store.context("ctx_1").await.unwrap();
    assert_eq!(ctx.status, ContextStatus::Paused, "resumable");
    assert_eq!(
        store.resumable_contexts("+451").await.unwrap().len(),
        1,
        "the caller's next call finds it"
    );
    // b comes back (its heartbeats had only stalled): it is registered again.
    assert_eq!(
        store
            .heartbeat(&beat("b", "ready", 0))
            .await
            .unwrap()
            .as_deref(),
        Some("gone")
    );
    store.deregister("a").await.unwrap();
    let rows = store.instances().await.unwrap();
    assert_eq!(rows.iter().find(|r| r.id == "a").unwrap().state, "stopped");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_writer_holds_its_writes_through_a_postgres_restart() {
    let pg = tokio::task::spawn_blocking(Postgres::start).await.unwrap();
    let pg = std::sync::Arc::new(pg);
    let store = Store::open(&pg.url).await.unwrap();
    let (w, _task) = StoreWriter::spawn_as(store.clone(), 10_000, Some("i".into()));
    let ids: Vec<String> = (0..600).map(|_| new_id("call_")).collect();
    // Writes keep coming while the server stops, stays down and starts again.
    let restart = tokio::task::spawn_blocking({
        let (pg, w) = (pg.clone(), w.clone());
        move || {
            // Once writes are landing (at most 10 s); then two seconds down.
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            while w.counts().written < 10 {
                assert!(std::time::Instant::now() < deadline, "no write landed");
                std::thread::sleep(Duration::from_millis(5));
            }
            pg.stop();
            std::thread::sleep(Duration::from_secs(2));
            pg.start_again();
        }
    });
    for id in &ids {
        assert!(w.write(started(id, "+45")), "the queue has room");
        // 600 writes spread over some 3 s, so the outage falls among them.
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    restart.await.unwrap();
    assert!(
        w.flush(Duration::from_secs(40)).await,
        "the writer catches up"
    );
    let c = w.counts();
    assert_eq!((c.written, c.dropped, c.failed), (600, 0, 0), "{c:?}");
    assert_eq!(store.count(Table::Calls).await.unwrap(), 600);
}
