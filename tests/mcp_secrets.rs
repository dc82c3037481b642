//! An MCP server's auth header value never leaves baton: with every log target at trace level,
//! a server that requires the header (the official Python SDK's, over Streamable HTTP) is
//! connected and called, a call is refused, a call fails, a server whose variable is unset is
//! reported down — and the sentinel value appears in none of the logs, call events, function
//! responses, errors or statuses, in any of its usual forms (raw, hex, base64).

use crate::mcp_support;

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use serde_json::json;

use baton::mcp::{Hub, State, Transport};
use mcp_support::*;

const SENTINEL: &str = "BATON_TEST_SENTINEL_mcp+Auth/z=9";
const VAR: &str = "BATON_TEST_MCP_AUTH";

fn forms(secret: &str) -> Vec<String> {
    let mut v = vec![
        secret.to_owned(),
        "BATON_TEST_SENTINEL".to_owned(),
        secret.bytes().map(|b| format!("{b:02x}")).collect(),
    ];
    for skip in 0..3 {
        let tail = &secret.as_bytes()[skip..];
        for enc in [STANDARD.encode(tail), URL_SAFE_NO_PAD.encode(tail)] {
            v.push(enc[..enc.len() - 4].to_owned());
        }
    }
    v
}

#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if let Ok(mut v) = self.0.lock() {
            v.extend_from_slice(buf);
        }
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_auth_header_value_never_appears() {
    // The only test of this file, in a process of its own (nextest, or `cargo test --test suite
    // mcp_secrets::`): nothing else reads the environment while it is set, and the log
    // subscriber installed below is this test's alone.
    unsafe { std::env::set_var(VAR, format!("Bearer {SENTINEL}")) };
    let logs = Captured::default();
    let sink = logs.clone();
    tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_ansi(false)
        .with_writer(move || sink.clone())
        .init();

    let py = PyHttp::start(&[
        "--require-header",
        &format!("authorization=Bearer {SENTINEL}"),
    ]);
    let mut spec = py.spec("py");
    if let Transport::Http { header, .. } = &mut spec.transport {
        *header = Some(("Authorization".into(), VAR.into()));
    }
    let mut unset = py.spec("nokey");
    if let Transport::Http { header, .. } = &mut unset.transport {
        *header = Some(("Authorization".into(), "BATON_TEST_MCP_UNSET".into()));
    }
    let hub = Hub::start(vec![spec, unset]);
    assert!(hub.ready(Duration::from_secs(20)).await);
    let mut reg = set("py", &["get_billing_*", "slow"], &["get_promotions"]);
    reg.bind_mcp(hub.catalog()).unwrap();
    let mut call = CallSide::new(Arc::new(reg));

    let id = call.call("get_billing_summary", json!({"customer_id": 251}));
    let ok = call.response(&id, Duration::from_secs(10)).await;
    assert_eq!(
        ok.as_ref().unwrap()["output"]["customer_id"],
        json!(251),
        "the header was sent"
    );
    let id = call.call("get_promotions", json!({}));
    let refused = call.response(&id, Duration::from_secs(2)).await;
    let id = call.call("slow", json!({"ms": "no"}));
    let invalid = call.response(&id, Duration::from_secs(2)).await;
    let status = hub.status();
    let down = status.iter().find(|s| s.name == "nokey").unwrap();
    assert_eq!(down.state, State::Down);
    assert!(
        down.error
            .as_deref()
            .is_some_and(|e| e.contains("BATON_TEST_MCP_UNSET")),
        "the error names the variable: {down:?}"
    );
    hub.shutdown().await;
    assert_eq!(
        py.stats()["unauthorized"],
        json!(0),
        "every request carried the header"
    );

    let mut texts = vec![
        String::from_utf8_lossy(&logs.0.lock().unwrap()).into_owned(),
        serde_json::to_string(&status).unwrap(),
        format!("{ok:?} {refused:?} {invalid:?}"),
    ];
    texts.extend(call.events.iter().map(|e| e.to_json_line()));
    assert!(texts[0].len() > 1000, "trace logs were captured");
    for text in &texts {
        for f in forms(SENTINEL) {
            assert!(
                !text.contains(&f),
                "{f:?} leaked in: {}",
                &text[..text.len().min(400)]
            );
        }
    }
}
