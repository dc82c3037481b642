//! `[mcp.*]` in `baton serve`: the servers are connected once at start and the agent set is bound
//! to them; a server that is down does not stop the daemon, and `/healthz` and `baton
//! check-config` say which server is up (its tools, the ones refused at load) and which is down
//! (and why); an agent set naming a server the config lacks is refused by both.

use crate::mcp_support;
use crate::support;

use std::process::Command;

use serde_json::Value;

use baton::mcp::State;
use mcp_support::PyHttp;
use support::{Daemon, mock_config};

fn config(py: &PyHttp, set: &std::path::Path) -> String {
    format!(
        "{}\n[agents]\nset = {:?}\n[mcp.py]\nurl = \"{}\"\n[mcp.down]\nurl = \"http://127.0.0.1:9/mcp\"\nconnect_timeout_ms = 1000\n",
        mock_config("", ""),
        set.to_string_lossy(),
        py.url()
    )
}

const SET: &str = r#"
[set]
name = "daemon-test"
[agents.billing]
name = "Bill"
role = "primary"
instruction = "You are Bill."
mcp.py = ["get_billing_*"]
mcp.down = ["*"]
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_connects_once_reports_in_healthz_and_survives_a_down_server() {
    let py = PyHttp::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let set = dir.path().join("set.toml");
    std::fs::write(&set, SET).unwrap();
    let d = Daemon::start(&config(&py, &set)).await;

    // reqwest is built without a crypto provider of its own: give it baton's TLS config.
    let tls = baton::model::tls::default_client_config().unwrap();
    let client = reqwest::Client::builder()
        .tls_backend_preconfigured((*tls).clone())
        .build()
        .unwrap();
    let get = |path: &'static str| {
        let (client, addr) = (client.clone(), d.addr);
        async move {
            let body = client
                .get(format!("http://{addr}{path}"))
                .send()
                .await
                .unwrap()
                .text()
                .await
                .unwrap();
            serde_json::from_str::<Value>(&body).unwrap()
        }
    };
    let health = get("/healthz").await;
    assert_eq!(health["status"], "ok", "{health}");
    let server = |name: &str| {
        health["mcp"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == name)
            .cloned()
            .unwrap()
    };
    let up = server("py");
    assert_eq!(up["state"], "connected", "{up}");
    assert!(
        up["tools"]
            .as_array()
            .unwrap()
            .contains(&"get_billing_summary".into())
    );
    assert_eq!(up["refused"][0]["tool"], "tree");
    assert_eq!(up["sessions"], 1);
    let down = server("down");
    assert_eq!(down["state"], "down", "{down}");
    assert!(down["error"].as_str().is_some_and(|e| !e.is_empty()));

    // The set is bound: Bill sees his allow-list of the live server's tools.
    let reg = d.app.agents.clone().unwrap();
    let names: Vec<String> = reg
        .mcp_tools(reg.agent(reg.primary))
        .iter()
        .map(|t| t.name.clone())
        .collect();
    assert_eq!(names, ["get_billing_summary"]);
    // The admin API lists each agent's allow-list per server and what it lets through now.
    let agents = get("/admin/agents").await;
    let bill = &agents["agents"][0];
    assert_eq!(
        bill["mcp"],
        serde_json::json!({
            "py": {"allow": ["get_billing_*"], "tools": ["get_billing_summary"]},
            "down": {"allow": ["*"], "tools": []},
        }),
        "{agents}"
    );
    let hub = d.app.mcp.clone().unwrap();
    assert!(
        hub.status()
            .iter()
            .any(|s| s.name == "down" && s.state == State::Down)
    );
    d.stop().await;
    assert_eq!(
        py.stats()["sessions"].as_array().map(Vec::len),
        Some(1),
        "one session for the daemon"
    );
}

#[test]
fn check_config_tries_each_server_and_refuses_an_unknown_one() {
    let py = PyHttp::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let set = dir.path().join("set.toml");
    std::fs::write(&set, SET).unwrap();
    let file = dir.path().join("baton.toml");
    std::fs::write(&file, config(&py, &set)).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_baton"))
        .arg("check-config")
        .arg(&file)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("MCP server py (") && text.contains("connected, 9 tool(s)"),
        "{text}"
    );
    assert!(text.contains("tool 'tree': refused at load"), "{text}");
    assert!(
        text.contains("MCP server down (http://127.0.0.1:9/mcp): DOWN"),
        "{text}"
    );

    let without = config(&py, &set).replace("[mcp.down]", "[mcp.other]");
    std::fs::write(&file, without).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_baton"))
        .arg("check-config")
        .arg(&file)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("agents.set") && err.contains("MCP servers this config does not: down"),
        "{err}"
    );
}
