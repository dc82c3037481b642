//! Seed 002 on MCP tools, end to end: `baton demo --scenario seed002` starts the bundled seed 002
//! MCP server (rmcp's server side) beside the embedded mock model, and the call runs the seed's
//! flows on it — Bill answers a billing question with get_billing_summary (single domain), hands
//! the caller to Priya (billing → products) who hands a lockout to Sam (out of her domain), and
//! Sam opens a ticket with create_support_ticket — each call allowed only to its own domain's
//! agent and answered by the server.

use baton::agents::CallEvent;
use baton::demo::{self, DemoArgs};

#[tokio::test(start_paused = true)]
async fn seed002_runs_its_flows_on_the_bundled_mcp_server() {
    let args = DemoArgs {
        scenario: Some("seed002".into()),
        ..Default::default()
    };
    let out = demo::run_call(&args, false).await.unwrap();
    let r = &out.report;
    assert_eq!(r.end_reason, "caller hung up");
    let calls: Vec<(String, String, bool)> = r
        .events
        .iter()
        .filter_map(|e| match e {
            CallEvent::ToolCalled {
                agent_id,
                tool_name,
                allowed,
                ..
            } if !tool_name.starts_with("transfer_to_") => {
                Some((agent_id.clone(), tool_name.clone(), *allowed))
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        calls,
        [
            ("crm_billing".into(), "get_billing_summary".into(), true),
            (
                "security_authentication".into(),
                "create_support_ticket".into(),
                true
            ),
        ]
    );
    let flow: Vec<(String, String)> = r
        .handoffs
        .iter()
        .map(|h| (h.from.clone(), h.to.clone()))
        .collect();
    assert_eq!(
        flow,
        [
            ("crm_billing".to_owned(), "product_promotions".to_owned()),
            (
                "product_promotions".to_owned(),
                "security_authentication".to_owned()
            )
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_demo_set_naming_another_mcp_server_is_refused_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let set = dir.path().join("other.toml");
    std::fs::write(
        &set,
        r#"
[set]
name = "other"
[agents.crm_billing]
name = "Bill"
role = "primary"
instruction = "You are Bill."
mcp.crm = ["get_*"]
"#,
    )
    .unwrap();
    let args = DemoArgs {
        scenario: Some("seed002".into()),
        agents: Some(set),
        ..Default::default()
    };
    let e = demo::run_call(&args, false)
        .await
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("MCP server 'crm'") && e.contains("[mcp.crm]"),
        "{e}"
    );
}
