//! Tool round-trip overhead added by baton over loopback: the seed 002 MCP server (rmcp's server
//! side) on Streamable HTTP at 127.0.0.1, called two ways, interleaved call by call:
//!
//! - **direct**: a plain rmcp client session calls the tool (`Peer::call_tool`) — transport and
//!   the server's own time;
//! - **baton**: the model's function call fed to the orchestrator (the agent's tool filter), the
//!   tool run by `ToolTasks` on the daemon's shared session (arguments checked against the
//!   server's schema, a slot, the deadline, the result mapped), the function response out of the
//!   orchestrator.
//!
//! The overhead is baton − direct, per quantile. Prints p50/p90/p99 of both and of the overhead.
//!
//!     cargo bench --bench mcp_roundtrip            # 3000 calls each
//!     MCP_BENCH_CALLS=500 cargo bench --bench mcp_roundtrip

use std::sync::Arc;
use std::time::{Duration, Instant};

use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use serde_json::json;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use baton::agents::runner::ToolTasks;
use baton::agents::{Action, Input, Orchestrator};
use baton::mcp::{Hub, ServerSpec};
use baton::mock::mcp_server::{SERVER_NAME, SupportDesk, serve_http};
use baton::model::{Capabilities, ToolCallRequest};

const CAPS: Capabilities = Capabilities {
    update_instructions: true,
    update_tools: true,
    non_blocking_tools: false,
    mid_session_client_content: true,
    resumption: true,
    history_config: true,
    calls_pause_speech: false,
};

fn quantile(sorted: &[f64], q: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn main() {
    let calls: usize = std::env::var("MCP_BENCH_CALLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3000);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(run(calls));
}

async fn run(calls: usize) {
    let stop = CancellationToken::new();
    let addr = serve_http(SupportDesk::default(), "127.0.0.1:0", stop.clone())
        .await
        .expect("server");
    let url = url::Url::parse(&format!("http://{addr}/mcp")).expect("url");

    // baton's side: the daemon's hub and an agent set allowed the billing tools.
    let hub = Hub::start(vec![ServerSpec::http(SERVER_NAME, url.clone())]);
    assert!(hub.ready(Duration::from_secs(10)).await);
    let set = baton::agents::parse(
        r#"
[set]
name = "bench"
[agents.crm_billing]
name = "Bill"
role = "primary"
instruction = "You are Bill."
mcp.support = ["get_billing_summary", "get_customer_*"]
"#,
        std::path::Path::new("bench.toml"),
    )
    .expect("set");
    let mut reg = set;
    reg.bind_mcp(hub.catalog()).expect("bind");
    let reg = Arc::new(reg);
    let mut orch = Orchestrator::new(reg, CAPS, Instant::now());
    let mut tasks = ToolTasks::default();
    let (tx, mut rx) = mpsc::channel::<Box<Input>>(16);

    // The direct side: a plain rmcp session of its own.
    let tls = baton::model::tls::default_client_config().expect("tls");
    let client = reqwest::Client::builder()
        .tls_backend_preconfigured((*tls).clone())
        .tcp_nodelay(true)
        .build()
        .expect("client");
    let transport = rmcp::transport::StreamableHttpClientTransport::with_client(
        client,
        rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(
            url.as_str(),
        ),
    );
    let direct = ().serve(transport).await.expect("direct client");

    let args = json!({"customer_id": 251});
    let mut baton_ms = Vec::with_capacity(calls);
    let mut direct_ms = Vec::with_capacity(calls);
    for i in 0..calls + 100 {
        // direct
        let t = Instant::now();
        let params = CallToolRequestParams::new("get_billing_summary")
            .with_arguments(args.as_object().cloned().unwrap_or_default());
        let r = direct.call_tool(params).await.expect("direct call");
        assert_ne!(r.is_error, Some(true));
        let d = t.elapsed();
        // baton
        let t = Instant::now();
        let id = format!("c{i}");
        let _ = orch.handle(
            Input::ToolCall(ToolCallRequest {
                id: id.clone(),
                name: "get_billing_summary".into(),
                args: args.clone(),
            }),
            Instant::now(),
        );
        let mut answered = false;
        while !answered {
            while let Some(a) = orch.poll_action() {
                match a {
                    Action::RunTool(run) => tasks.spawn(run, tx.clone()),
                    Action::ToolResponse(fr) => {
                        assert!(
                            fr.response
                                .as_ref()
                                .is_some_and(|v| v.get("output").is_some())
                        );
                        answered = true;
                    }
                    _ => {}
                }
            }
            if !answered {
                let input = rx.recv().await.expect("tool result");
                let _ = orch.handle(*input, Instant::now());
            }
        }
        let b = t.elapsed();
        if i >= 100 {
            direct_ms.push(d.as_secs_f64() * 1e3);
            baton_ms.push(b.as_secs_f64() * 1e3);
        }
    }
    let mut over: Vec<f64> = Vec::new();
    direct_ms.sort_by(f64::total_cmp);
    baton_ms.sort_by(f64::total_cmp);
    for q in [0.5, 0.9, 0.99] {
        over.push(quantile(&baton_ms, q) - quantile(&direct_ms, q));
    }
    println!("MCP tool round trip over loopback, {calls} calls each (after 100 warm-up), ms:");
    println!("                 p50      p90      p99");
    for (name, v) in [("direct rmcp", &direct_ms), ("through baton", &baton_ms)] {
        println!(
            "{name:<15} {:>7.3}  {:>7.3}  {:>7.3}",
            quantile(v, 0.5),
            quantile(v, 0.9),
            quantile(v, 0.99)
        );
    }
    println!(
        "{:<15} {:>7.3}  {:>7.3}  {:>7.3}   (baton − direct, per quantile; goal p99 ≤ 1 ms)",
        "added by baton", over[0], over[1], over[2]
    );
    let _ = direct.cancel().await;
    hub.shutdown().await;
    stop.cancel();
}
