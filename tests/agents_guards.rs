//! Guards and tools: the loop guard, sticky routing and minimum turns, priorities, the tool
//! filter with its exact declarations, and tool results (including overdue ones).

use crate::agents_support;

use std::time::Duration;

use agents_support::*;
use baton::agents::{Action, Input};
use baton::model::gemini::wire::FunctionResponseScheduling;
use serde_json::json;

const AB: &str = r#"
[set]
name = "ab"
[guards]
max_handoffs = 3
window_s = 60
sticky = STICKY
min_turns = MIN_TURNS
[agents.a]
name = "Alpha Desk"
role = "primary"
instruction = "You are the alpha desk."
[agents.a.activation]
keywords = ["alpha", "shared topic"]
[agents.b]
name = "Beta Desk"
role = "specialist"
instruction = "You are the beta desk."
[agents.b.activation]
keywords = ["beta", "shared topic"]
"#;

fn ab(sticky: bool, min_turns: u32) -> H {
    let text = AB
        .replace("STICKY", &sticky.to_string())
        .replace("MIN_TURNS", &min_turns.to_string());
    H::new(inline(&text), ALL)
}

#[test]
fn the_loop_guard_stops_the_fourth_handoff_within_the_window() {
    let mut h = ab(false, 0);
    for (said, to) in [("beta", "b"), ("alpha", "a"), ("beta", "b")] {
        let a = h.caller(&format!("I need {said} help"));
        assert_eq!(announcements(&a)[0]["to"], to);
        h.model_turn("Sure.");
    }
    let a = h.caller("I need alpha help");
    assert!(announcements(&a).is_empty());
    let b = blocked(&a);
    assert_eq!(b[0]["reason"], "loop guard: 3 handoffs within 60 s already");
    assert_eq!(h.lead(), "b");
    h.model_turn("Still me.");
    // Once the first handoffs leave the window, handoffs are allowed again.
    h.advance(Duration::from_secs(61));
    let a = h.caller("I need alpha help");
    assert_eq!(announcements(&a)[0]["to"], "a");
}

/// An operator's commands are exempt from the loop guard both ways: they are carried out past it,
/// and they do not use up the handoffs the call itself may make within the window.
#[test]
fn operator_commands_neither_pass_nor_use_up_the_loop_guard() {
    let mut h = ab(false, 0);
    for to in ["b", "a", "b", "a"] {
        let a = h.feed(Input::Activate { agent: to.into() });
        assert!(blocked(&a).is_empty(), "{to}: {:?}", blocked(&a));
        h.model_turn("Here.");
        assert_eq!(h.lead(), to);
    }
    // Four operator handoffs in the window; the caller's own three are still allowed.
    for (said, to) in [("beta", "b"), ("alpha", "a"), ("beta", "b")] {
        let a = h.caller(&format!("I need {said} help"));
        assert!(blocked(&a).is_empty(), "{said}: {:?}", blocked(&a));
        assert_eq!(announcements(&a)[0]["to"], to);
        h.model_turn("Sure.");
    }
    let a = h.caller("I need alpha help");
    assert_eq!(
        blocked(&a)[0]["reason"],
        "loop guard: 3 handoffs within 60 s already"
    );
    // And the operator still gets through.
    let a = h.feed(Input::Activate { agent: "a".into() });
    assert!(blocked(&a).is_empty());
}

#[test]
fn seed_003_ships_a_loop_guard_of_three() {
    let r = shipped("realty.toml");
    assert_eq!(r.guards.max_handoffs, 3);
}

#[test]
fn sticky_routing_keeps_the_caller_with_an_agent_that_also_matches() {
    let mut h = ab(true, 0);
    let a = h.caller("About the shared topic");
    assert!(announcements(&a).is_empty());
    assert_eq!(h.lead(), "a");
    let mut h = ab(false, 0);
    let a = h.caller("About the shared topic");
    assert_eq!(announcements(&a)[0]["to"], "b");
}

#[test]
fn min_turns_keeps_a_new_agent_for_that_many_caller_turns() {
    let mut h = ab(false, 2);
    h.caller("beta please");
    assert_eq!(h.lead(), "b");
    for _ in 0..2 {
        h.model_turn("Beta here.");
        let a = h.caller("alpha please");
        assert!(announcements(&a).is_empty());
    }
    h.model_turn("Beta here.");
    let a = h.caller("alpha please");
    assert_eq!(announcements(&a)[0]["to"], "a");
}

const PRIORITY: &str = r#"
[set]
name = "p"
[agents.front]
name = "Front Desk"
role = "primary"
instruction = "You greet callers."
[agents.refunds]
name = "Refunds"
role = "specialist"
priority = 5
instruction = "You handle refunds."
[agents.refunds.activation]
keywords = ["refund"]
[agents.disputes]
name = "Disputes"
role = "specialist"
priority = 9
instruction = "You handle disputes."
[agents.disputes.activation]
keywords = ["refund"]
[agents.chargebacks]
name = "Chargebacks"
role = "specialist"
priority = 9
instruction = "You handle chargebacks."
[agents.chargebacks.activation]
keywords = ["refund", "money back"]
"#;

#[test]
fn priority_then_match_count_decides_between_matching_agents() {
    let mut h = H::new(inline(PRIORITY), ALL);
    let a = h.caller("I want a refund");
    // disputes and chargebacks (9) beat refunds (5); equal priority, equal matches: set order.
    assert_eq!(announcements(&a)[0]["to"], "chargebacks");
    let mut h = H::new(
        inline(&PRIORITY.replace(
            "keywords = [\"refund\", \"money back\"]",
            "keywords = [\"refund\"]",
        )),
        ALL,
    );
    let a = h.caller("I want a refund");
    assert_eq!(
        announcements(&a)[0]["to"],
        "chargebacks",
        "ties go by set order (ids sorted)"
    );
    let mut h = H::new(inline(PRIORITY), ALL);
    let a = h.caller("A refund, my money back");
    assert_eq!(announcements(&a)[0]["to"], "chargebacks");
    let mut h = H::new(
        inline(&PRIORITY.replace("[\"refund\", \"money back\"]", "[\"money back\"]")),
        ALL,
    );
    let a = h.caller("I want a refund");
    assert_eq!(announcements(&a)[0]["to"], "disputes");
}

#[test]
fn the_tool_filter_refuses_a_tool_outside_the_active_agents_set() {
    let mut h = H::new(shipped("support.toml"), ALL);
    let declared = function_names(&h.o.tools_json());
    assert!(declared.contains(&"get_billing_summary".to_owned()));
    assert!(!declared.contains(&"unlock_account".to_owned()));
    let (id, a) = h.call("unlock_account", json!({"customer_id": 251}));
    assert!(!a.iter().any(|x| matches!(x, Action::RunTool(_))));
    let r = &responses(&a)[0];
    assert_eq!(r.id.as_deref(), Some(id.as_str()));
    let err = r.response.as_ref().unwrap()["error"].as_str().unwrap();
    assert!(
        err.starts_with("tool 'unlock_account' is not available to Bill"),
        "{err}"
    );
    let e = event_json(&a, "tool_called");
    assert_eq!(e[0]["allowed"], false);
    assert_eq!(e[0]["agent_id"], "crm_billing");
    // A transfer to oneself is refused too.
    let (_, a) = h.call("transfer_to_crm_billing", json!({"summary": "x"}));
    let err = responses(&a)[0].response.clone().unwrap()["error"].clone();
    assert_eq!(err, "you are already Bill");
}

const ONE_TOOL: &str = r#"
[set]
name = "t"
[agents.desk]
name = "Desk"
role = "primary"
instruction = "You help."
tools = ["lookup"]
[agents.expert]
name = "Expert"
role = "specialist"
instruction = "You know more."
expertise = ["hard questions"]
[tools.lookup]
description = "Look an order up."
backend = "static"
reply = { status = "shipped" }
behavior = "non_blocking"
scheduling = "silent"
[tools.lookup.parameters]
type = "object"
required = ["order"]
properties.order = { type = "string" }
"#;

#[test]
fn function_declarations_are_exact() {
    let h = H::new(inline(ONE_TOOL), ALL);
    assert_eq!(
        serde_json::Value::Array(h.o.tools_json()),
        json!([{"functionDeclarations": [
            {"name": "lookup", "description": "Look an order up.", "behavior": "NON_BLOCKING",
             "parametersJsonSchema": {"type": "object", "required": ["order"],
                                      "properties": {"order": {"type": "string"}}}},
            {"name": "transfer_to_expert",
             "description": "Hand the caller to Expert (hard questions). Say one short sentence announcing it first.",
             "behavior": "NON_BLOCKING",
             "parametersJsonSchema": {"type": "object", "required": ["summary"],
                "properties": {"summary": {"type": "string",
                    "description": "One or two sentences for Expert: what the caller needs and what is known."}}}}
        ]}])
    );
    // Without non-blocking tools no behavior is declared.
    let h = H::new(inline(ONE_TOOL), BARE);
    let decls = h.o.tools_json();
    assert!(
        decls[0]["functionDeclarations"][0]
            .get("behavior")
            .is_none()
    );
}

#[test]
fn tool_results_are_answered_with_the_declared_scheduling() {
    let mut h = H::new(inline(ONE_TOOL), ALL);
    let (id, a) = h.call("lookup", json!({"order": "A1"}));
    let run = a
        .iter()
        .find_map(|x| match x {
            Action::RunTool(r) => Some(r.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(
        (run.call_id.as_str(), run.agent.as_str()),
        (id.as_str(), "desk")
    );
    let r = h.run_tools(&a);
    let resp = &responses(&r)[0];
    assert_eq!(
        resp.response,
        Some(json!({"output": {"status": "shipped"}}))
    );
    assert_eq!(resp.scheduling, Some(FunctionResponseScheduling::Silent));
    // On a model without non-blocking tools the same tool is blocking: no scheduling.
    let mut h = H::new(inline(ONE_TOOL), BARE);
    let (_, a) = h.call("lookup", json!({"order": "A1"}));
    let r = h.run_tools(&a);
    assert_eq!(responses(&r)[0].scheduling, None);
}

#[test]
fn an_overdue_tool_is_answered_with_an_error_and_its_late_result_dropped() {
    let mut h = H::new(shipped("support.toml"), ALL);
    let (id, a) = h.call("get_billing_summary", json!({"customer_id": 251}));
    assert!(a.iter().any(|x| matches!(x, Action::RunTool(_))));
    let (_, reason) = h.o.poll_timeout().unwrap();
    assert_eq!(reason, baton::agents::Timer::ToolResult);
    let a = h.advance(Duration::from_millis(1500));
    let r = &responses(&a)[0];
    assert_eq!(r.id.as_deref(), Some(id.as_str()));
    assert_eq!(
        r.response.as_ref().unwrap()["error"],
        "tool 'get_billing_summary' gave no result within 1000 ms"
    );
    let a = h.feed(baton::agents::Input::ToolResult {
        call_id: id,
        result: Ok(json!({})),
    });
    assert!(responses(&a).is_empty());
    // A tool failure is reported to the model as an error, not a crash.
    let (id, _) = h.call("get_billing_summary", json!({"customer_id": 251}));
    let a = h.feed(baton::agents::Input::ToolResult {
        call_id: id,
        result: Err("CRM down".into()),
    });
    assert_eq!(
        responses(&a)[0].response,
        Some(json!({"error": "CRM down"}))
    );
    // Both failures are events too (the feed, the store, the trace), with what the model heard.
    let failed: Vec<(String, String, String)> = h
        .events()
        .into_iter()
        .filter_map(|e| match e {
            baton::agents::CallEvent::ToolFailed {
                agent_id,
                tool_name,
                error,
                ..
            } => Some((agent_id, tool_name, error)),
            _ => None,
        })
        .collect();
    let billing = |why: &str| {
        (
            "crm_billing".to_owned(),
            "get_billing_summary".to_owned(),
            why.to_owned(),
        )
    };
    assert_eq!(
        failed,
        [
            billing("tool 'get_billing_summary' gave no result within 1000 ms"),
            billing("CRM down"),
        ]
    );
}

#[test]
fn a_cancelled_call_is_not_answered() {
    let mut h = H::new(shipped("support.toml"), ALL);
    let (id, _) = h.call("get_billing_summary", json!({"customer_id": 251}));
    h.feed(baton::agents::Input::ToolCallCancelled(vec![id.clone()]));
    let a = h.feed(baton::agents::Input::ToolResult {
        call_id: id,
        result: Ok(json!({})),
    });
    assert!(responses(&a).is_empty());
    assert_eq!(h.o.poll_timeout(), None);
}

#[test]
fn model_events_feed_the_orchestrator_directly() {
    use baton::model::{ModelEvent, ToolCallRequest};
    let mut h = H::new(shipped("support.toml"), ALL);
    let call = |id: &str, name: &str| ToolCallRequest {
        id: id.into(),
        name: name.into(),
        args: json!({"customer_id": 251}),
    };
    h.o.handle_model_event(
        &ModelEvent::ToolCall(vec![
            call("a", "get_billing_summary"),
            call("b", "unlock_account"),
        ]),
        h.now,
    );
    let mut runs = 0;
    let mut refused = 0;
    while let Some(a) = h.o.poll_action() {
        match a {
            Action::RunTool(r) => {
                assert_eq!(r.call_id, "a");
                runs += 1;
            }
            Action::ToolResponse(r) => {
                assert_eq!(r.id.as_deref(), Some("b"));
                refused += 1;
            }
            _ => {}
        }
    }
    assert_eq!((runs, refused), (1, 1));
    h.o.handle_model_event(&ModelEvent::ToolCallCancellation(vec!["a".into()]), h.now);
    assert_eq!(h.o.poll_timeout(), None);
}
