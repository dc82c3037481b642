//! The http tool backend against a tiny axum server on loopback: JSON in and out, the header
//! whose value comes from a named environment variable, and clear errors for a timeout, a body
//! that is not JSON, a non-2xx status, a refused connection and a missing variable.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use axum::Json;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use baton::agents::orchestrator::ToolRun;
use baton::agents::runner::{self, ToolError};
use baton::agents::{self, Input};
use serde_json::{Value, json};

async fn server() -> SocketAddr {
    async fn ok(headers: HeaderMap, Json(body): Json<Value>) -> Json<Value> {
        let auth = headers
            .get("x-crm-token")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        let ct = headers
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        Json(json!({"got": body, "token_ok": auth == "s3cret-value", "content_type": ct}))
    }
    let app = axum::Router::new()
        .route("/ok", post(ok))
        .route("/slow", post(std::future::pending::<&'static str>))
        .route("/text", post(|| async { "plain words, not JSON" }))
        .route(
            "/fail",
            post(|| async { (StatusCode::SERVICE_UNAVAILABLE, "{\"error\":\"down\"}") }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    addr
}

/// A one-tool set whose http tool posts to `url`.
fn tool_run(url: &str, extra: &str) -> ToolRun {
    let text = format!(
        r#"
[set]
name = "h"
[agents.a]
name = "A"
role = "primary"
instruction = "You help."
tools = ["crm"]
[tools.crm]
description = "CRM lookup."
backend = "http"
url = "{url}"
timeout_ms = 300
{extra}
"#
    );
    let reg = agents::parse(&text, Path::new("http.toml")).unwrap();
    ToolRun {
        call_id: "fc_1".into(),
        agent: "a".into(),
        tool: Arc::clone(reg.tool("crm").unwrap()),
        args: json!({"customer_id": 251, "note": "ñandú"}),
    }
}

#[tokio::test]
async fn a_2xx_json_answer_is_the_result() {
    let addr = server().await;
    let run = tool_run(&format!("http://{addr}/ok?src=baton"), "");
    let v = runner::run(&run).await.unwrap();
    assert_eq!(v["got"], json!({"customer_id": 251, "note": "ñandú"}));
    assert_eq!(v["content_type"], "application/json");
    assert_eq!(v["token_ok"], false, "no header configured");
    match run.into_input(Ok(v.clone())) {
        Input::ToolResult { call_id, result } => {
            assert_eq!(call_id, "fc_1");
            assert_eq!(result, Ok(v));
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_slow_backend_times_out() {
    let addr = server().await;
    let run = tool_run(&format!("http://{addr}/slow"), "");
    let e = runner::run(&run).await.unwrap_err();
    assert_eq!(
        e,
        ToolError::Timeout {
            tool: "crm".into(),
            ms: 300
        }
    );
    assert_eq!(e.to_string(), "tool 'crm' gave no result within 300 ms");
}

#[tokio::test]
async fn a_body_that_is_not_json_is_a_clear_error() {
    let addr = server().await;
    let run = tool_run(&format!("http://{addr}/text"), "");
    let e = runner::run(&run).await.unwrap_err();
    assert!(matches!(e, ToolError::NotJson { .. }), "{e:?}");
    assert!(
        e.to_string().starts_with(&format!(
            "tool 'crm': the answer from http://{addr}/text is not JSON"
        )),
        "{e}"
    );
    let input = run.into_input(Err(e));
    let Input::ToolResult {
        result: Err(msg), ..
    } = input
    else {
        panic!("{input:?}")
    };
    assert!(msg.contains("is not JSON"));
}

#[tokio::test]
async fn a_non_2xx_status_is_a_clear_error() {
    let addr = server().await;
    let run = tool_run(&format!("http://{addr}/fail"), "");
    let e = runner::run(&run).await.unwrap_err();
    assert_eq!(
        e.to_string(),
        format!("tool 'crm': http://{addr}/fail answered HTTP 503")
    );
}

#[tokio::test]
async fn a_refused_connection_is_a_clear_error() {
    // Bind then drop: nothing listens on that port any more.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let run = tool_run(&format!("http://127.0.0.1:{port}/ok"), "");
    let e = runner::run(&run).await.unwrap_err();
    assert!(matches!(e, ToolError::Connect { .. }), "{e:?}");
    assert!(e.to_string().contains("could not reach"), "{e}");
    // A credential in the URL's user info or query never shows in the error (it reaches the
    // log, the call's events, the store and traces).
    let run = tool_run(
        &format!("http://crm:s3cret-pw@127.0.0.1:{port}/ok?token=s3cret-q"),
        "",
    );
    let e = runner::run(&run).await.unwrap_err().to_string();
    assert!(e.contains(&format!("http://127.0.0.1:{port}/ok")), "{e}");
    assert!(!e.contains("s3cret"), "{e}");
}

#[tokio::test]
async fn the_header_value_comes_from_the_named_variable_and_never_shows() {
    let addr = server().await;
    let var = format!("BATON_TEST_CRM_TOKEN_{}", std::process::id());
    let extra = format!("header = \"x-crm-token\"\nheader_env = \"{var}\"");
    // Unset: the tool reports which variable is missing.
    let run = tool_run(&format!("http://{addr}/ok"), &extra);
    let e = runner::run(&run).await.unwrap_err();
    assert_eq!(
        e.to_string(),
        format!("tool 'crm' is not configured: environment variable {var} is not set")
    );
    // SAFETY: no other test reads or writes this variable.
    unsafe { std::env::set_var(&var, "s3cret-value") };
    let v = runner::run(&run).await.unwrap();
    assert_eq!(v["token_ok"], true);
    // Errors with the header configured never carry its value.
    let slow = tool_run(&format!("http://{addr}/slow"), &extra);
    let e = runner::run(&slow).await.unwrap_err();
    assert!(!format!("{e} {e:?} {slow:?}").contains("s3cret-value"));
    // SAFETY: as above.
    unsafe { std::env::set_var(&var, "bad\nvalue") };
    let e = runner::run(&run).await.unwrap_err();
    assert!(matches!(e, ToolError::BadHeaderValue { .. }));
    assert!(!e.to_string().contains("bad"));
    unsafe { std::env::remove_var(&var) };
}

#[tokio::test]
async fn static_tools_answer_their_canned_reply() {
    let reg =
        agents::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("config/agents/support.toml"))
            .unwrap();
    let run = ToolRun {
        call_id: "fc_9".into(),
        agent: "crm_billing".into(),
        tool: Arc::clone(reg.tool("get_billing_summary").unwrap()),
        args: json!({"customer_id": 251}),
    };
    let v = runner::run(&run).await.unwrap();
    assert_eq!(v["current_bill_usd"], 45.99);
}
