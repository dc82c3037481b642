//! The drain of a real `baton serve` process, as an operator's SIGTERM (or `POST /admin/drain`)
//! starts it: `/readyz` turns 503 at once while the listener stays open, `/livez`, `/healthz` and
//! `/metrics` answer 200, a new Twilio call and a new WHIP offer are refused with the reason and
//! `Retry-After`, the call in progress runs to its end, and the process exits 0.

use crate::cluster_support;

use std::time::Duration;

use baton::leg::twilio::caller::{self, CallerEnd};
use cluster_support::{Instance, OFFER, Scratch, get, post, request, short_caller, until, upgrade};

fn config(dir: &Scratch, drain_s: u64) -> std::path::PathBuf {
    let path = dir.0.join("baton.toml");
    std::fs::write(
        &path,
        format!(
            "[server]\nlisten = \"127.0.0.1:0\"\ndrain_timeout_s = {drain_s}\n\
             [model]\nbackend = \"mock\"\n[limits]\nmax_calls = 10\n"
        ),
    )
    .unwrap();
    path
}

#[test]
fn sigterm_drains_while_answering_and_the_call_in_progress_completes() {
    let dir = Scratch::new("drain");
    let mut b = Instance::spawn(
        "solo",
        &config(&dir, 30),
        "127.0.0.1:0",
        &dir.0.join("serve.log"),
    );
    let a = b.addr;
    assert_eq!(get(a, "/readyz").unwrap().status, 200);
    assert_eq!(get(a, "/livez").unwrap().status, 200);

    let rt = tokio::runtime::Runtime::new().unwrap();
    let url = format!("ws://{a}/twilio");
    // About 6 s: 0.2 s of silence, 1.4 s of speech, the answer, then quiet.
    let opts = short_caller("in-progress", 1400, 4000, Duration::from_secs(6));
    let call = rt.spawn(async move { caller::dial(&url, opts).await });
    until("the call to be listed", Duration::from_secs(10), || {
        let v = get(a, "/healthz")?.json();
        (v["active_calls"] == 1).then_some(())
    });

    b.terminate();
    let r = until("/readyz to turn 503", Duration::from_secs(2), || {
        get(a, "/readyz").filter(|r| r.status == 503)
    });
    assert_eq!(r.json()["status"], "draining", "{}", r.body);
    let r = get(a, "/livez").expect("the listener stays open");
    assert_eq!(r.status, 200);
    let r = get(a, "/healthz").unwrap();
    assert_eq!(
        (r.status, &r.json()["status"]),
        (200, &"draining".into()),
        "{}",
        r.body
    );

    // A new Twilio call: refused before the upgrade, with the reason and when to try again.
    let r = upgrade(a, "/twilio").expect("an answer, not a refused connection");
    assert_eq!(r.status, 503, "{r:?}");
    assert_eq!(r.header("retry-after").as_deref(), Some("5"));
    assert!(r.body.contains("draining"), "{}", r.body);
    // A new WHIP offer: 503 too.
    let r = request(
        a,
        "POST",
        "/whip",
        &[("Content-Type", "application/sdp")],
        OFFER.as_bytes(),
    )
    .unwrap();
    assert_eq!(r.status, 503, "{r:?}");
    assert!(r.header("retry-after").is_some(), "{r:?}");
    // The refusals are counted, and the figures can be scraped during the drain.
    let m = get(a, "/metrics").unwrap();
    assert_eq!(m.status, 200);
    assert!(
        m.body
            .contains("baton_calls_refused_total{reason=\"draining\"} 2"),
        "{}",
        m.body
    );
    // The admin API answers too.
    let r = get(a, "/admin/calls").unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["calls"].as_array().map(Vec::len), Some(1));

    let report = rt.block_on(call).unwrap().expect("the call ran");
    assert!(matches!(report.end, CallerEnd::HungUp), "{:?}", report.end);
    assert!(report.played_ms > 500, "the agent answered: {report:?}");
    let status = b
        .wait_exit(Duration::from_secs(20))
        .expect("the process exits");
    assert!(status.success(), "{status:?}\n{}", b.log_text());
    let log = b.log_text();
    assert!(log.contains("draining"), "{log}");
    // It exits once its calls end, not at the drain deadline.
    assert!(!log.contains("drain deadline passed"), "{log}");
}

#[test]
fn admin_drain_refuses_new_calls_and_an_idle_instance_exits_0() {
    let dir = Scratch::new("admin-drain");
    let mut b = Instance::spawn(
        "solo",
        &config(&dir, 30),
        "127.0.0.1:0",
        &dir.0.join("serve.log"),
    );
    let r = post(b.addr, "/admin/drain").unwrap();
    assert_eq!(r.status, 202, "{r:?}");
    assert_eq!(r.json()["status"], "draining");
    let status = b
        .wait_exit(Duration::from_secs(15))
        .expect("the process exits");
    assert!(status.success(), "{status:?}\n{}", b.log_text());
}
