//! Overload: beyond `limits.max_calls` a new call is refused with 503 and the reason before the
//! upgrade, and the calls already running keep normal figures.

use crate::support;

use std::time::Duration;

use baton::leg::twilio::caller::{self, CallerEnd, CallerError};
use support::{Daemon, assert_normal, finished_calls, speaking_caller};

const CONFIG: &str = "[server]\nlisten = \"127.0.0.1:0\"\ndrain_timeout_s = 1\n[model]\nbackend = \"mock\"\n[limits]\nmax_calls = 3\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_over_the_limit_is_refused_and_the_others_are_untouched() {
    let d = Daemon::start(CONFIG).await;
    let mut finished = d.app.calls.subscribe_finished();
    let mut calls = Vec::new();
    for i in 0..3 {
        let url = d.twilio_url();
        let opts = speaking_caller(&format!("MZatlimit{i}"), Duration::from_secs(6));
        calls.push(tokio::spawn(async move { caller::dial(&url, opts).await }));
    }
    support::wait_until("three active calls", Duration::from_secs(10), || {
        d.app.calls.active() == 3
    })
    .await;

    // The fourth call: refused before the upgrade, with the reason.
    let extra = speaking_caller("MZextra", Duration::from_secs(1));
    let e = caller::dial(&d.twilio_url(), extra)
        .await
        .expect_err("over the limit");
    assert!(matches!(e, CallerError::Refused { status: 503, .. }), "{e}");
    let raw = support::http(
        &d.addr,
        "GET /twilio HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, close\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
    )
    .await;
    assert!(raw.starts_with("HTTP/1.1 503"), "{raw}");
    assert!(
        raw.contains("at its call limit (3 calls, limits.max_calls); try again later"),
        "{raw}"
    );
    assert!(raw.to_ascii_lowercase().contains("retry-after: 5"), "{raw}");
    assert_eq!(d.active_calls().await, 3, "a refusal never takes a slot");

    for c in calls {
        let report = c.await.unwrap().unwrap();
        assert_eq!(report.end, CallerEnd::HungUp, "{report:?}");
        assert!(report.media_received > 0, "the caller heard the agent");
    }
    let ended = finished_calls(&mut finished, 3, Duration::from_secs(10)).await;
    for call in &ended {
        assert!(call.stream_sid.starts_with("MZatlimit"), "{call:?}");
        assert_normal(call, 0);
    }
    d.stop().await;
}
