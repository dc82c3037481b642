//! baton's MCP client against servers written independently with the official Python SDK (`mcp`
//! 2.x, `MCPServer`, in the test venv), over Streamable HTTP and stdio, through the path a call
//! takes: the orchestrator's tool filter and declarations, `ToolTasks` running the tools, the
//! function responses the model gets. Tools listed and filtered per agent, an untranslatable
//! schema refused at load, calls with arguments (and arguments refused before sending), an
//! out-of-allow-list call refused with an event, `tools/list_changed` picked up mid-call, a
//! closed SSE stream resumed with `Last-Event-ID`, a hung tool cancelled at its deadline, on barge-in and at the call's end (the server hears
//! `notifications/cancelled`), the server killed and restarted mid-call, a stdio child restarted
//! after it dies and a line of garbage on its stdout survived, and 200 concurrent calls on one
//! session.

use crate::mcp_support;
use crate::support;

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use baton::agents::CallEvent;
use baton::mcp::{Hub, State};
use mcp_support::*;
use support::eventually;

const BILLING: &[&str] = &[
    "get_billing_*",
    "slow",
    "hang",
    "garbage",
    "crash",
    "add_refunds",
    "get_refund_*",
    "tree",
];

async fn bound(hub: &Hub, billing: &[&str], promos: &[&str]) -> Arc<baton::agents::Registry> {
    assert!(hub.ready(Duration::from_secs(20)).await, "hub not ready");
    let mut reg = set("py", billing, promos);
    reg.bind_mcp(hub.catalog()).unwrap();
    Arc::new(reg)
}

fn output(r: &Option<Value>) -> Value {
    r.as_ref()
        .map(|v| v["output"].clone())
        .unwrap_or(Value::Null)
}

fn error(r: &Option<Value>) -> String {
    r.as_ref()
        .and_then(|v| v["error"].as_str())
        .unwrap_or("")
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_tools_are_listed_filtered_called_and_refused() {
    let py = PyHttp::start(&[]);
    let hub = Hub::start(vec![py.spec("py")]);
    let reg = bound(&hub, BILLING, &["get_promotions"]).await;

    // The untranslatable tool is refused at load, naming server, tool and keyword.
    let status = &hub.status()[0];
    assert_eq!(status.state, State::Connected);
    assert_eq!(status.refused.len(), 1, "{:?}", status.refused);
    let r = &status.refused[0];
    assert_eq!(
        (r.server.as_str(), r.tool.as_str(), r.keyword.as_str()),
        ("py", "tree", "$ref")
    );
    assert!(r.to_string().contains("refers to itself"), "{r}");

    // Bill sees only his allow-list (and never the refused tool); Priya only hers.
    let mut call = CallSide::new(reg.clone());
    let mut declared = call.declared();
    declared.retain(|n| !n.starts_with("transfer_to_"));
    declared.sort();
    assert_eq!(
        declared,
        [
            "add_refunds",
            "crash",
            "garbage",
            "get_billing_summary",
            "hang",
            "slow"
        ]
    );
    let priya = reg.find("promos").unwrap();
    let names: Vec<String> = reg
        .mcp_tools(priya)
        .iter()
        .map(|t| t.name.clone())
        .collect();
    assert_eq!(names, ["get_promotions"]);

    // A call with arguments: the server's structured result is the function response.
    let id = call.call("get_billing_summary", json!({"customer_id": 251}));
    let r = call.response(&id, Duration::from_secs(10)).await;
    assert_eq!(
        output(&r),
        json!({"customer_id": 251, "current_bill_usd": 45.99})
    );

    // Arguments the schema refuses never reach the server.
    let id = call.call("get_billing_summary", json!({"customer_id": "two"}));
    let r = call.response(&id, Duration::from_secs(10)).await;
    assert_eq!(
        error(&r),
        "tool 'get_billing_summary': invalid arguments: argument $.customer_id: must be of type integer, got string"
    );

    // Another domain's tool: refused with an error response and an event, never sent.
    let id = call.call("get_promotions", json!({}));
    let r = call.response(&id, Duration::from_secs(1)).await;
    assert!(
        error(&r).starts_with("tool 'get_promotions' is not available to Bill"),
        "{r:?}"
    );
    let refused = call.events.iter().any(|e| {
        matches!(e, CallEvent::ToolCalled { tool_name, allowed: false, .. } if tool_name == "get_promotions")
    });
    assert!(refused, "no refusal event: {:?}", call.events);
    let calls = py.stats()["calls"].clone();
    assert_eq!(calls, json!(["get_billing_summary"]), "what the server ran");
    hub.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_list_changed_is_picked_up_mid_call() {
    let py = PyHttp::start(&[]);
    let hub = Hub::start(vec![py.spec("py")]);
    let reg = bound(&hub, BILLING, &["get_promotions"]).await;
    let mut call = CallSide::new(reg.clone());
    assert!(!call.declared().contains(&"get_refund_status".to_owned()));
    let id = call.call("add_refunds", json!({}));
    // The SDK gives a function's plain return value as structured content {"result": …}.
    assert_eq!(
        output(&call.response(&id, Duration::from_secs(10)).await),
        json!({"result": "added"})
    );
    let catalog = hub.catalog();
    eventually("the new tool in the catalog", || {
        catalog
            .tools("py")
            .tools
            .iter()
            .any(|t| t.name == "get_refund_status")
    })
    .await;
    // The same call's next declarations and calls see it (the allow-list's glob takes it).
    assert!(call.declared().contains(&"get_refund_status".to_owned()));
    let id = call.call("get_refund_status", json!({"order_id": 7}));
    let r = call.response(&id, Duration::from_secs(10)).await;
    assert_eq!(output(&r), json!({"order_id": 7, "refund": "issued"}));
    assert!(hub.status()[0].tool_lists >= 2);
    hub.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_sse_stream_is_resumed_with_last_event_id() {
    let py = PyHttp::start(&["--event-store"]);
    let hub = Hub::start(vec![py.spec("py")]);
    let reg = bound(&hub, &["resumable"], &["get_promotions"]).await;
    let mut call = CallSide::new(reg);
    let id = call.call("resumable", json!({"ms": 300}));
    let r = call.response(&id, Duration::from_secs(10)).await;
    assert_eq!(output(&r), json!({"result": "answered after a resume"}));
    let stats = py.stats();
    assert!(
        stats["resumed"].as_array().is_some_and(|r| !r.is_empty()),
        "the client resumed the stream with Last-Event-ID: {stats}"
    );
    assert_eq!(hub.status()[0].sessions, 1, "on the same session");
    hub.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_tool_is_cancelled_at_its_deadline_on_barge_in_and_at_the_calls_end() {
    let py = PyHttp::start(&[]);
    let mut spec = py.spec("py");
    spec.timeouts
        .insert("hang".into(), Duration::from_millis(400));
    let hub = Hub::start(vec![spec]);
    let reg = bound(&hub, BILLING, &["get_promotions"]).await;
    let cancelled = |py: &PyHttp| py.stats()["cancelled"].clone();
    // How many `hang` calls the server has started (each is cancelled while it runs).
    let hangs = |py: &PyHttp| calls_of(py, "hang");

    let mut call = CallSide::new(reg.clone());
    let id = call.call("hang", json!({"label": "deadline"}));
    let r = call.response(&id, Duration::from_secs(5)).await;
    assert_eq!(error(&r), "tool 'hang' gave no result within 400 ms");
    eventually("the server to hear the deadline's cancellation", || {
        cancelled(&py)
            .as_array()
            .is_some_and(|a| a.contains(&json!("deadline")))
    })
    .await;

    let id = call.call("hang", json!({"label": "barge-in"}));
    eventually("the server to run the second hang", || hangs(&py) == 2).await;
    call.barge_in(std::slice::from_ref(&id));
    eventually("the server to hear the barge-in's cancellation", || {
        cancelled(&py)
            .as_array()
            .is_some_and(|a| a.contains(&json!("barge-in")))
    })
    .await;
    // The model cancelled it: it is not answered.
    assert_eq!(call.response(&id, Duration::from_millis(300)).await, None);

    let _ = call.call("hang", json!({"label": "call-end"}));
    eventually("the server to run the third hang", || hangs(&py) == 3).await;
    drop(call);
    eventually("the server to hear the call end's cancellation", || {
        cancelled(&py)
            .as_array()
            .is_some_and(|a| a.contains(&json!("call-end")))
    })
    .await;
    hub.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_killed_mid_call_fails_that_call_and_serves_the_next() {
    let py = PyHttp::start(&[]);
    let hub = Hub::start(vec![py.spec("py")]);
    let reg = bound(&hub, BILLING, &["get_promotions"]).await;
    let mut call = CallSide::new(reg.clone());
    let id = call.call("slow", json!({"ms": 5000}));
    // Killed while the call runs on the server.
    eventually("the server to run slow", || calls_of(&py, "slow") == 1).await;
    let py = py.restart();
    let r = call.response(&id, Duration::from_secs(10)).await;
    assert!(
        error(&r).starts_with("tool 'slow'"),
        "the call in flight gets an error response: {r:?}"
    );
    // The next call succeeds once the session is back (reconnected or re-initialised).
    let mut ok = None;
    for _ in 0..100 {
        let id = call.call("get_billing_summary", json!({"customer_id": 1}));
        let r = call.response(&id, Duration::from_secs(10)).await;
        if r.as_ref().is_some_and(|v| v.get("output").is_some()) {
            ok = r;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        output(&ok),
        json!({"customer_id": 1, "current_bill_usd": 45.99})
    );
    // The new server refused the old session id, and the client opened a new session.
    let sessions = py.stats()["sessions"].as_array().map_or(0, Vec::len);
    assert!(sessions >= 1, "{}", py.stats());
    hub.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stdio_child_survives_garbage_is_restarted_when_it_dies_and_stopped_at_shutdown() {
    let dir = tempfile::tempdir().unwrap();
    let stats = dir.path().join("stats.json");
    let hub = Hub::start(vec![stdio_spec("py", &stats)]);
    let reg = bound(&hub, BILLING, &["get_promotions"]).await;
    assert_eq!(
        hub.status()[0].state,
        State::Connected,
        "{:?}",
        hub.status()
    );
    let mut call = CallSide::new(reg.clone());

    // A line that is not JSON-RPC and an answer to nothing, then the real answer.
    let id = call.call("garbage", json!({}));
    let r = call.response(&id, Duration::from_secs(10)).await;
    assert_eq!(output(&r), json!({"result": "still fine"}));
    let id = call.call("get_billing_summary", json!({"customer_id": 3}));
    let r = call.response(&id, Duration::from_secs(10)).await;
    assert_eq!(output(&r)["customer_id"], json!(3));
    assert_eq!(
        hub.status()[0].sessions,
        1,
        "garbage did not cost the session"
    );

    // The child dies mid-call: that call gets an error response, a new child serves the next.
    let id = call.call("crash", json!({}));
    let r = call.response(&id, Duration::from_secs(10)).await;
    assert!(error(&r).starts_with("tool 'crash'"), "{r:?}");
    eventually("a second child", || {
        hub.status()[0].sessions >= 2 && hub.status()[0].state == State::Connected
    })
    .await;
    let id = call.call("get_billing_summary", json!({"customer_id": 4}));
    let r = call.response(&id, Duration::from_secs(10)).await;
    assert_eq!(output(&r)["customer_id"], json!(4));

    // Shutdown stops the child: its stdin closes and it exits.
    assert_eq!(children_running(&stats), 1, "one child at a time");
    hub.shutdown().await;
    eventually("the child to exit", || children_running(&stats) == 0).await;
}

/// Python processes of this test's server still running (by the stats path in their command
/// line).
fn children_running(stats: &std::path::Path) -> usize {
    let needle = stats.to_string_lossy().into_owned();
    std::fs::read_dir("/proc")
        .map(|d| {
            d.filter_map(Result::ok)
                .filter(|e| {
                    std::fs::read(e.path().join("cmdline"))
                        .map(|c| String::from_utf8_lossy(&c).contains(&needle))
                        .unwrap_or(false)
                })
                .count()
        })
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_concurrent_calls_share_one_session() {
    let py = PyHttp::start(&["--json-response"]);
    let hub = Hub::start(vec![py.spec("py")]);
    let reg = bound(&hub, BILLING, &["get_promotions"]).await;
    let mut call = CallSide::new(reg.clone());
    let ids: Vec<String> = (0..200)
        .map(|i| call.call("get_billing_summary", json!({"customer_id": i})))
        .collect();
    for (i, id) in ids.iter().enumerate() {
        let r = call.response(id, Duration::from_secs(30)).await;
        assert_eq!(output(&r)["customer_id"], json!(i), "call {i}: {r:?}");
    }
    let stats = py.stats();
    let sessions = stats["sessions"].as_array().map_or(0, Vec::len);
    let connections = stats["ports"].as_array().map_or(0, Vec::len);
    println!("200 calls: {sessions} MCP session(s), {connections} TCP connection(s)");
    assert_eq!(sessions, 1, "one MCP session for every call: {stats}");
    assert_eq!(hub.status()[0].sessions, 1);
    // HTTP/1.1 carries one request at a time per connection: at most max_concurrent (64)
    // requests are in flight, plus the session's standing GET stream and the handshake.
    assert!(connections <= 64 + 2, "{connections} TCP connections");
    hub.shutdown().await;
}

/// How many times the server has started `tool` (from its stats file).
fn calls_of(py: &PyHttp, tool: &str) -> usize {
    py.stats()["calls"]
        .as_array()
        .map_or(0, |a| a.iter().filter(|c| *c == tool).count())
}

/// A Streamable HTTP server that dies between calls: nothing tells the session until a call
/// needs it. That call fails with an error the model hears and a `tool_failed` event, and it
/// marks the server down (it is reconnected with back-off); while down, its tools answer that
/// the server is not connected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_found_dead_by_a_call_is_marked_down_and_said_so() {
    let py = PyHttp::start(&[]);
    let hub = Hub::start(vec![py.spec("py")]);
    let reg = bound(&hub, BILLING, &["get_promotions"]).await;
    let mut call = CallSide::new(reg.clone());
    drop(py);
    assert_eq!(
        hub.status()[0].state,
        State::Connected,
        "nothing noticed yet"
    );
    let id = call.call("get_billing_summary", json!({"customer_id": 1}));
    let r = call.response(&id, Duration::from_secs(10)).await;
    assert!(
        error(&r).starts_with("tool 'get_billing_summary'"),
        "an error response: {r:?}"
    );
    let failed = call.events.iter().any(|e| {
        matches!(e, CallEvent::ToolFailed { tool_name, error, .. }
            if tool_name == "get_billing_summary" && error.starts_with("tool 'get_billing_summary'"))
    });
    assert!(failed, "no tool_failed event: {:?}", call.events);
    eventually("the server marked down", || {
        hub.status()[0].state != State::Connected
    })
    .await;
    let id = call.call("get_billing_summary", json!({"customer_id": 1}));
    let r = call.response(&id, Duration::from_secs(10)).await;
    assert!(
        error(&r).contains("MCP server 'py' is not connected"),
        "{r:?}"
    );
    hub.shutdown().await;
}

/// A server down from the start has listed no tools: a tool the agent's allow-list names on it
/// is unavailable (allowed, with the server's state), not refused by the filter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_of_a_server_down_from_the_start_is_unavailable_not_refused() {
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let url = url::Url::parse(&format!("http://127.0.0.1:{dead}/mcp")).unwrap();
    let hub = Hub::start(vec![baton::mcp::config::ServerSpec::http("py", url)]);
    let reg = bound(&hub, BILLING, &["get_promotions"]).await;
    assert_eq!(hub.status()[0].state, State::Down);
    let mut call = CallSide::new(reg);
    let id = call.call("get_billing_summary", json!({"customer_id": 1}));
    let r = call.response(&id, Duration::from_secs(5)).await;
    assert!(
        error(&r).starts_with(
            "tool 'get_billing_summary' is unavailable: MCP server 'py' is not connected (down"
        ),
        "{r:?}"
    );
    let event = call.events.iter().find_map(|e| match e {
        CallEvent::ToolCalled {
            tool_name,
            allowed,
            error,
            ..
        } if tool_name == "get_billing_summary" => Some((*allowed, error.is_some())),
        _ => None,
    });
    assert_eq!(event, Some((true, true)), "{:?}", call.events);
    assert!(
        call.events.iter().any(|e| matches!(e, CallEvent::ToolFailed { tool_name, .. } if tool_name == "get_billing_summary")),
        "a tool_failed event too: {:?}",
        call.events
    );
    // A name no allow-list has is still the filter's refusal.
    let id = call.call("get_promotions", json!({}));
    let r = call.response(&id, Duration::from_secs(5)).await;
    assert!(error(&r).contains("is not available to Bill"), "{r:?}");
    hub.shutdown().await;
}
