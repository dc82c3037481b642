//! Seed 001 end to end: a router activates a subagent with an activation summary, the call ends
//! mid-task (the context is paused with its working state), the same caller calls again and the
//! subagent resumes — its instruction carries the earlier summary and state — then hands back
//! (completed). Also: two concurrent callers' runs on one store keep one active context per
//! caller, and the resume is measured.

use crate::agents_support;

use std::path::{Path, PathBuf};

use agents_support::*;
use baton::agents::contexts::{ContextOp, Resumable};
use baton::demo::{self, DemoArgs, DemoOutcome};
use baton::store::{ContextStatus, Store};
use serde_json::json;

fn run_seed001(out: &Path, store: Option<String>, caller: &str) -> DemoOutcome {
    let args = DemoArgs {
        scenario: Some(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("audio-fixtures/scenarios/seed001.toml")
                .display()
                .to_string(),
        ),
        out: out.to_path_buf(),
        api_key_env: "BATON_TEST_NO_KEY".into(),
        store,
        caller: Some(caller.into()),
        ..Default::default()
    };
    demo::run(&args).unwrap()
}

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

#[test]
fn activate_pause_and_resume_across_two_calls() {
    let dir = tempfile::tempdir().unwrap();
    let out = run_seed001(dir.path(), None, "+4520001001");
    assert_eq!(out.calls.len(), 2, "seed001 is two calls");
    let (c1, c2) = (&out.calls[0], &out.calls[1]);

    // Call 1: Gina's transfer brings Victor in with her summary; the caller hangs up mid-quote.
    let [
        ContextOp::Activate {
            id,
            agent,
            summary,
            position,
            data,
        },
        ContextOp::Pause {
            id: paused,
            data: state,
        },
    ] = c1.context_ops.as_slice()
    else {
        panic!("call 1: {:#?}", c1.context_ops);
    };
    assert_eq!(agent, "vehicle_offer");
    assert_eq!(summary, "Caller wants a quote for a Toyota Camry.");
    assert!(*position >= 1, "after the caller's first line: {position}");
    assert_eq!(data, &json!({}));
    assert_eq!(paused, id);
    assert_eq!(
        state["budget_dkk"], 200000,
        "update_offer's arguments: {state}"
    );
    assert_eq!(state["brand"], "Toyota");
    assert_eq!(c1.report.handoffs.len(), 1);
    assert_eq!(c1.report.handoffs[0].gap_ms, Some(0.0), "gapless");

    // Call 2: the same caller; Victor's context is offered, resumed and completed on handback.
    assert!(
        c2.context_load_ms.is_some(),
        "contexts were loaded at call start"
    );
    match c2.context_ops.as_slice() {
        [
            ContextOp::Resume {
                id: r, agent: a, ..
            },
            ContextOp::Complete { id: done, data },
        ] => {
            assert_eq!((r, a.as_str(), done), (id, "vehicle_offer", id));
            assert_eq!(
                data["budget_dkk"], 200000,
                "state kept across calls: {data}"
            );
            assert_eq!(data["financing"], "lease");
            assert_eq!(data["status"], "quote_sent");
        }
        other => panic!("call 2: {other:#?}"),
    }
    let hs: Vec<(&str, &str)> = c2
        .report
        .handoffs
        .iter()
        .map(|h| (h.from.as_str(), h.to.as_str()))
        .collect();
    assert_eq!(
        hs,
        [("general", "vehicle_offer"), ("vehicle_offer", "general")]
    );
    assert!(c2.report.handoffs.iter().all(|h| h.gap_ms == Some(0.0)));

    // The store holds both calls and the context as it ended.
    let db = format!("sqlite://{}/baton.db", dir.path().display());
    block_on(async {
        let s = Store::open(&db).await.unwrap();
        let ctx = s.contexts("+4520001001").await.unwrap();
        assert_eq!(ctx.len(), 1, "{ctx:#?}");
        let c = &ctx[0];
        assert_eq!(c.status, ContextStatus::Completed);
        assert_eq!(
            c.activation_summary,
            "Caller wants a quote for a Toyota Camry."
        );
        assert_eq!(c.activation_call_id.as_deref(), Some(c2.id.as_str()));
        assert_eq!(c.context_data["financing"], "lease");
        let t1 = s.transcript(&c1.id).await.unwrap();
        assert!(
            t1.iter()
                .any(|l| l.role == "agent" && l.agent == "vehicle_offer"),
            "{t1:#?}"
        );
        let call = s.call(&c2.id).await.unwrap();
        let f = call.figures.unwrap();
        assert_eq!(f["contexts_offered"], json!([id]));
        assert!(f["context_load_ms"].as_f64().is_some());
        assert_eq!(s.handoffs(&c2.id).await.unwrap().len(), 2);
        let h = s.history(&c2.id).await.unwrap();
        assert_eq!(h[1].agent, "vehicle_offer");
    });
}

#[test]
fn a_resumed_agent_is_told_the_summary_and_state_not_the_history() {
    let mut h = H::new(shipped("router.toml"), ALL);
    h.o.resume_contexts(vec![Resumable {
        context_id: "ctx_1".into(),
        agent: "vehicle_offer".into(),
        summary: "Caller wants a quote for a Toyota Camry.".into(),
        data: json!({"brand": "Toyota", "budget_dkk": 200000}),
    }]);
    h.caller("Hi, it's me again about my car quote.");
    let (_, a) = h.call(
        "transfer_to_vehicle_offer",
        json!({"summary": "Caller is back about the car quote."}),
    );
    // In place: a context update with Victor's instruction (no new session, no history copied),
    // once the announcing turn is generated.
    assert!(context_updates(&a).is_empty());
    let a = h.generation_complete();
    let cu = context_updates(&a);
    assert_eq!(cu.len(), 1, "{a:#?}");
    let text = instruction(&cu[0]);
    assert!(text.starts_with("You are Victor"), "{text}");
    assert!(
        text.contains("resuming a task you paused")
            && text.contains("Caller wants a quote for a Toyota Camry.")
            && text.contains("\"budget_dkk\":200000")
            && text.contains("Now: Caller is back about the car quote."),
        "{text}"
    );
    assert!(
        !text.contains("it's me again"),
        "the earlier conversation is not replayed: {text}"
    );
    // Only the first activation resumes.
    assert_eq!(event_json(&h.log, "agent_start").len(), 2);
}

#[test]
fn without_a_transfer_summary_the_agents_template_is_the_activation_summary() {
    let mut h = H::new(shipped("router.toml"), ALL);
    h.caller("I need a price for a van.");
    h.feed(baton::agents::Input::Activate {
        agent: "vehicle_offer".into(),
    });
    let starts = event_json(&h.log, "agent_start");
    let s = starts.last().unwrap()["summary"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        s,
        "Brought in because an operator brought in Victor; the caller last said: \"I need a price for a van.\""
    );
}

#[test]
fn two_concurrent_runs_from_one_caller_keep_one_active_context() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}/shared.db", dir.path().display());
    let caller = "+4520001002";
    let runs: Vec<PathBuf> = (0..2).map(|i| dir.path().join(format!("run{i}"))).collect();
    let outs: Vec<DemoOutcome> = std::thread::scope(|s| {
        let hs: Vec<_> = runs
            .iter()
            .map(|out| {
                let db = db.clone();
                s.spawn(move || run_seed001(out, Some(db), caller))
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    block_on(async {
        let s = Store::open(&db).await.unwrap();
        let rows = s.contexts(caller).await.unwrap();
        let active = rows
            .iter()
            .filter(|c| c.status == ContextStatus::Active)
            .count();
        assert_eq!(active, 0, "every call ended: {rows:#?}");
        // Every activation of both runs is a row; none was lost to the unique rule.
        let mut activated: Vec<&String> = outs
            .iter()
            .flat_map(|o| &o.calls)
            .flat_map(|c| &c.context_ops)
            .filter_map(|op| match op {
                ContextOp::Activate { id, .. } => Some(id),
                _ => None,
            })
            .collect();
        activated.sort();
        activated.dedup();
        let mut ids: Vec<&String> = rows.iter().map(|c| &c.id).collect();
        ids.sort();
        assert_eq!(ids, activated);
        assert!(!rows.is_empty());
        // Every call was stored with its transcript.
        for c in outs.iter().flat_map(|o| &o.calls) {
            assert!(!s.transcript(&c.id).await.unwrap().is_empty(), "{}", c.id);
        }
    });
}
