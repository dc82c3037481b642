//! How handoffs reach the model: `auto` per capability set, and for each strategy when its wire
//! message goes out relative to generationComplete / turnComplete (never cutting a turn being
//! generated), warm standby sessions and the cold baseline, attribution and the event stream.

use crate::agents_support;

use std::time::Duration;

use agents_support::*;
use baton::agents::{Action, Input, Timer};
use baton::model::Capabilities;
use baton::model::gemini::wire::FunctionResponseScheduling;
use serde_json::json;

const DUO: &str = r#"
[set]
name = "duo"
[agents.host]
name = "Host"
role = "primary"
voice = "Kore"
instruction = "You host the call."
tools = ["note"]
[agents.host.activation]
keywords = ["host"]
[agents.guest]
name = "Guest Expert"
role = "specialist"
instruction = "You are the guest expert."
greeting = "Hi, guest here."
tools = ["note"]
GUEST_EXTRA
[agents.guest.activation]
keywords = ["guest"]
[tools.note]
description = "Take a note."
backend = "static"
reply = { ok = true }
"#;

fn duo(extra: &str, caps: Capabilities) -> H {
    H::new(inline(&DUO.replace("GUEST_EXTRA", extra)), caps)
}

fn strategy_of(actions: &[Action]) -> String {
    announcements(actions)[0]["strategy"]
        .as_str()
        .unwrap()
        .to_owned()
}

#[test]
fn auto_picks_the_strategy_from_the_capabilities_and_policy() {
    let by_words = |extra: &str, caps| {
        let mut h = duo(extra, caps);
        strategy_of(&h.caller("Can I talk to the guest?"))
    };
    let by_tool = |caps| {
        let mut h = duo("", caps);
        strategy_of(
            &h.call("transfer_to_guest", json!({"summary": "wants the guest"}))
                .1,
        )
    };
    assert_eq!(by_words("", ALL), "context_update");
    assert_eq!(by_tool(ALL), "context_update");
    assert_eq!(by_tool(NO_UPDATE), "tool_response");
    assert_eq!(by_words("", NO_UPDATE), "inject_turn");
    assert_eq!(by_words("", CONTENT_ONLY), "inject_turn");
    assert_eq!(
        by_tool(CONTENT_ONLY),
        "inject_turn",
        "a blocking call cannot carry the brief"
    );
    assert_eq!(by_words("", BARE), "recreate");
    assert_eq!(
        by_words("voice = \"Puck\"", ALL),
        "recreate",
        "another voice"
    );
    assert_eq!(by_words("policy.isolation = \"isolated\"", ALL), "recreate");
    // A tool change the model cannot apply in place (seed 002's filtered tools on a 2.5 model).
    let mut h = H::new(shipped("support.toml"), NO_UPDATE);
    assert_eq!(
        strategy_of(&h.caller("What offers are available?")),
        "recreate"
    );
    // A configured strategy that cannot carry the handoff falls back, and says why.
    let mut h = duo("policy.strategy = \"tool_response\"", ALL);
    let a = h.caller("Can I talk to the guest?");
    assert_eq!(strategy_of(&a), "context_update");
    assert!(
        announcements(&a)[0]["note"]
            .as_str()
            .unwrap()
            .contains("non-blocking call")
    );
}

#[test]
fn tool_response_answers_the_handoff_call_with_the_brief_when_idle() {
    let mut h = duo("", NO_UPDATE);
    h.speaks("Let me get our guest expert.");
    let (id, a) = h.call("transfer_to_guest", json!({"summary": "wants the guest"}));
    assert!(context_updates(&a).is_empty() && contents(&a).is_empty());
    let r = &responses(&a)[0];
    assert_eq!(r.id.as_deref(), Some(id.as_str()));
    assert_eq!(r.scheduling, Some(FunctionResponseScheduling::WhenIdle));
    let brief = r.response.as_ref().unwrap()["output"]["brief"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        brief.starts_with("[AGENT SWITCH] Guest Expert now speaks with the caller."),
        "{brief}"
    );
    assert!(brief.contains("CONTEXT: wants the guest"));
    assert!(brief.ends_with("starting with: \"Hi, guest here.\""));
    h.generation_complete();
    h.turn_complete();
    let a = h.speaks("Hi, guest here.");
    assert!(
        a.iter()
            .any(|x| matches!(x, Action::Attribute(t) if t.id == "guest"))
    );
    assert_eq!(
        event_json(&a, "handoff_complete")[0]["strategy"],
        "tool_response"
    );
}

#[test]
fn inject_turn_is_held_until_the_announcing_turn_has_been_generated() {
    let mut h = duo("", CONTENT_ONLY);
    let a = h.caller("Can I talk to the guest?");
    assert_eq!(strategy_of(&a), "inject_turn");
    assert!(contents(&a).is_empty(), "the model owes the caller a reply");
    assert_eq!(h.lead(), "host", "the model still speaks as the host");
    let a = h.speaks("Sure, let me get our guest expert.");
    assert!(contents(&a).is_empty(), "never during generation");
    // A BLOCKING call inside the announcing turn holds it too.
    let (_, calls) = h.call("note", json!({}));
    let a = h.generation_complete();
    assert!(
        contents(&a).is_empty(),
        "the model waits for its tool result"
    );
    let a = h.run_tools(&calls);
    let c = contents(&a);
    assert_eq!(c.len(), 1, "{a:#?}");
    assert_eq!(c[0].turn_complete, Some(true));
    assert_eq!(
        c[0].turns.as_ref().unwrap()[0].role.as_deref(),
        Some("user")
    );
    assert!(content_text(&c[0]).starts_with("[AGENT SWITCH] Guest Expert now speaks"));
    assert_eq!(h.lead(), "guest");
    // The server may cut the announcement's playback for our turn: that is not a barge-in.
    assert!(h.o.expects_own_interruption());
    h.feed(Input::Interrupted);
    assert!(!h.o.expects_own_interruption());
    h.turn_complete();
    let a = h.speaks("Hi, guest here.");
    assert_eq!(event_json(&a, "handoff_complete")[0]["from"], "host");
}

#[test]
fn a_held_message_goes_out_when_the_model_does_not_start_its_reply() {
    let mut h = duo("", CONTENT_ONLY);
    h.caller("Can I talk to the guest?");
    assert_eq!(h.o.poll_timeout().map(|(_, r)| r), Some(Timer::HeldMessage));
    let a = h.advance(Duration::from_millis(2900));
    assert!(contents(&a).is_empty());
    let a = h.advance(Duration::from_millis(200));
    assert_eq!(contents(&a).len(), 1);
    assert!(!h.o.expects_own_interruption(), "no turn was playing");
}

/// The update and the greeting both wait for the announcing turn's generation to complete
/// (the new agent cannot speak earlier, and a service refusing the update then cuts nothing),
/// update first.
#[test]
fn context_update_and_its_greeting_wait_for_generation_complete() {
    let mut h = duo("", ALL);
    h.caller("Who knows the rules?");
    h.speaks("Let me see who can help.");
    let a = h.feed(Input::Activate {
        agent: "guest".into(),
    });
    assert!(context_updates(&a).is_empty());
    assert!(contents(&a).is_empty());
    // The running turn is still the host's.
    let a = h.feed(Input::AgentTranscript {
        text: " One moment.".into(),
        finished: false,
    });
    assert!(!a.iter().any(|x| matches!(x, Action::Attribute(_))));
    let a = h.generation_complete();
    let cu = context_updates(&a);
    assert_eq!(cu.len(), 1);
    assert!(instruction(&cu[0]).starts_with("You are the guest expert."));
    let update_at = a.iter().position(|x| matches!(x, Action::ContextUpdate(_)));
    let content_at = a.iter().position(|x| matches!(x, Action::ClientContent(_)));
    assert!(update_at < content_at, "{a:?}");
    let c = contents(&a);
    assert_eq!(
        content_text(&c[0]),
        "[AGENT SWITCH] You are now Guest Expert. Context: The caller said: \"Who knows the rules?\" \
         Greet the caller with \"Hi, guest here.\" and continue."
    );
    assert_eq!(h.o.transcript()[1].agent, "host");
    // The agent history keeps why the guest came in.
    assert_eq!(
        h.o.history()[1].activation_summary,
        "an operator brought in Guest Expert"
    );
}

#[test]
fn recreate_prepares_a_warm_standby_and_switches_at_the_turn_boundary() {
    let mut h = H::new(shipped("support.toml"), ALL);
    h.caller("What's my bill? My id is 251.");
    h.model_turn("Your bill is 45.99.");
    h.caller("And my data usage?");
    h.model_turn("12 gigabytes.");
    let a = h.caller("Also I'm locked out, can you unlock my account?");
    assert_eq!(strategy_of(&a), "recreate");
    let setup = a
        .iter()
        .find_map(|x| match x {
            Action::PrepareStandby(s) => Some(s.clone()),
            _ => None,
        })
        .expect("standby prepared at once");
    assert_eq!(setup.agent, "security_authentication");
    assert_eq!(setup.voice.as_deref(), Some("Charon"));
    assert!(function_names(&setup.tools).contains(&"unlock_account".to_owned()));
    assert!(!function_names(&setup.tools).contains(&"get_billing_summary".to_owned()));
    // history = "last 2": the last two finished exchanges (the line being spoken follows in the
    // greeting prompt).
    let turns: Vec<String> = setup
        .history
        .iter()
        .map(|c| c.parts[0].text.clone().unwrap())
        .collect();
    assert_eq!(
        turns,
        [
            "What's my bill? My id is 251.",
            "Your bill is 45.99.",
            "And my data usage?",
            "12 gigabytes."
        ]
    );
    let roles: Vec<&str> = setup
        .history
        .iter()
        .map(|c| c.role.as_deref().unwrap())
        .collect();
    assert_eq!(roles, ["user", "model", "user", "model"]);
    assert_eq!(
        h.o.poll_timeout().map(|(_, r)| r),
        Some(Timer::StandbySetup)
    );
    // The old session answers the caller meanwhile.
    h.speaks("Let me get our security team.");
    let (old_call, calls) = h.call("get_billing_summary", json!({"customer_id": 251}));
    let a = h.feed(Input::StandbyReady);
    assert!(
        !a.iter()
            .any(|x| matches!(x, Action::SwitchToStandby { .. })),
        "mid-turn"
    );
    let a = h.generation_complete();
    assert!(
        !a.iter()
            .any(|x| matches!(x, Action::SwitchToStandby { .. })),
        "its model waits for a result"
    );
    // The old model's call is answered on the old session, then the switch happens.
    let a = h.run_tools(&calls);
    let pos = |f: &dyn Fn(&Action) -> bool| a.iter().position(f).unwrap();
    let answered = pos(
        &|x| matches!(x, Action::ToolResponse(r) if r.id.as_deref() == Some(old_call.as_str())),
    );
    let switched = pos(
        &|x| matches!(x, Action::SwitchToStandby { agent } if agent.id == "security_authentication"),
    );
    assert!(answered < switched, "{a:#?}");
    let c = contents(&a);
    let greet = content_text(&c[0]);
    assert!(greet.contains("You are now Sam."), "{greet}");
    assert!(
        greet.contains("The caller also said: \"Also I'm locked out, can you unlock my account?\""),
        "{greet}"
    );
    assert_eq!(h.lead(), "security_authentication");
    // A call the new session never made is not answered.
    let a = h.feed(Input::ToolResult {
        call_id: old_call,
        result: Ok(json!({})),
    });
    assert!(responses(&a).is_empty());
    let a = h.speaks("Hello, security team here.");
    assert!(
        a.iter()
            .any(|x| matches!(x, Action::Attribute(t) if t.id == "security_authentication"))
    );
    let done = event_json(&a, "handoff_complete");
    assert_eq!(
        (done[0]["from"].as_str(), done[0]["strategy"].as_str()),
        (Some("crm_billing"), Some("recreate"))
    );
    assert!(done[0]["gap_ms"].is_null());
}

#[test]
fn a_standby_that_is_not_ready_in_time_is_discarded() {
    let mut h = H::new(shipped("support.toml"), ALL);
    h.caller("I can't log in.");
    let a = h.advance(Duration::from_secs(6));
    assert!(a.iter().any(|x| matches!(x, Action::DiscardStandby { .. })));
    let f = event_json(&a, "handoff_failed");
    assert_eq!(f[0]["reason"], "recreate session: not ready in time");
    assert_eq!(h.lead(), "crm_billing");
    // A failed setup reported by the call layer needs no discard.
    let mut h = H::new(shipped("support.toml"), ALL);
    h.caller("I can't log in.");
    let a = h.feed(Input::StandbyFailed {
        reason: "1008 model not found".into(),
    });
    assert!(!a.iter().any(|x| matches!(x, Action::DiscardStandby { .. })));
    assert_eq!(event_json(&a, "handoff_failed").len(), 1);
    assert_eq!(h.o.poll_timeout(), None);
}

#[test]
fn recreate_cold_closes_and_reopens_at_the_boundary() {
    let mut h = duo("policy.strategy = \"recreate_cold\"", ALL);
    let a = h.caller("Can I talk to the guest?");
    assert_eq!(strategy_of(&a), "recreate_cold");
    assert!(!a.iter().any(|x| matches!(x, Action::RecreateCold(_))));
    h.speaks("Sure, one moment.");
    let a = h.generation_complete();
    let setup = a
        .iter()
        .find_map(|x| match x {
            Action::RecreateCold(s) => Some(s.clone()),
            _ => None,
        })
        .expect("at the boundary");
    assert_eq!(setup.agent, "guest");
    assert_eq!(
        setup.voice.as_deref(),
        Some("Kore"),
        "the guest has no voice of its own"
    );
    let a = h.feed(Input::StandbyReady);
    assert_eq!(contents(&a).len(), 1);
    assert_eq!(h.lead(), "guest");
    // A failed cold replacement reopens the agents that were active.
    let mut h = duo("policy.strategy = \"recreate_cold\"", ALL);
    h.caller("Can I talk to the guest?");
    h.model_turn("Sure.");
    let a = h.feed(Input::StandbyFailed {
        reason: "refused".into(),
    });
    let restore = a
        .iter()
        .find_map(|x| match x {
            Action::RecreateCold(s) => Some(s.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(restore.agent, "host");
    let a = h.feed(Input::StandbyReady);
    assert!(contents(&a).is_empty());
    assert_eq!(h.lead(), "host");
}

/// An announcement carried in place (the transfer called mid-line closes the host's
/// activation before the line ends) still counts as the host's message.
#[test]
fn an_announcement_carried_in_place_counts_as_its_agents_message() {
    let mut h = duo("", ALL);
    h.caller("Who knows the rules?");
    h.speaks("Let me get our guest for that.");
    let (_, a) = h.call("transfer_to_guest", json!({"summary": "wants the rules"}));
    assert_eq!(strategy_of(&a), "context_update");
    assert_eq!(h.lead(), "guest", "carried in place, mid-line");
    h.generation_complete();
    h.turn_complete();
    h.model_turn("Guest here. The rules are simple.");
    let counts: Vec<(String, u32)> =
        h.o.history()
            .iter()
            .map(|x| (x.agent.clone(), x.message_count))
            .collect();
    assert_eq!(
        counts,
        [("host".to_owned(), 1), ("guest".to_owned(), 1)],
        "{:?}",
        h.o.transcript()
    );
}

#[test]
fn joint_agents_answer_their_own_topics() {
    let mut h = H::new(shipped("financial.toml"), ALL);
    h.feed(Input::Activate {
        agent: "schemes".into(),
    });
    h.model_turn("Hello! I'm the Government Schemes Specialist.");
    h.caller("And what about the loan?");
    let a = h.speaks("For the farm loan, let me ask some questions.");
    assert!(
        a.iter()
            .any(|x| matches!(x, Action::Attribute(t) if t.id == "advisor"))
    );
    h.generation_complete();
    h.turn_complete();
    h.caller("And PMAY?");
    let a = h.speaks("PMAY gives a housing subsidy.");
    assert!(
        a.iter()
            .any(|x| matches!(x, Action::Attribute(t) if t.id == "schemes"))
    );
    h.generation_complete();
    let t = h.o.transcript();
    let agents: Vec<(&str, &str)> = t
        .iter()
        .map(|l| (l.agent.as_str(), l.text.as_str()))
        .collect();
    assert_eq!(
        agents[2],
        ("advisor", "For the farm loan, let me ask some questions.")
    );
    assert_eq!(agents[4], ("schemes", "PMAY gives a housing subsidy."));
    let hist = h.o.history();
    assert_eq!(
        (hist[0].agent.as_str(), hist[0].message_count),
        ("advisor", 1)
    );
    assert_eq!(
        (hist[1].agent.as_str(), hist[1].message_count),
        ("schemes", 2)
    );
}

#[test]
fn every_event_is_one_json_line_with_a_seed_002_name() {
    let mut h = H::new(shipped("support.toml"), ALL);
    h.caller("What's my bill?");
    let (_, a) = h.call("get_billing_summary", json!({"customer_id": 251}));
    h.run_tools(&a);
    h.model_turn("Your bill is 45.99.");
    h.caller("Any offers?");
    h.model_turn("We have three.");
    let kinds: Vec<String> = h
        .events()
        .iter()
        .map(|e| {
            let line = e.to_json_line();
            assert!(!line.contains('\n'));
            serde_json::from_str::<serde_json::Value>(&line).unwrap()["type"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    for k in [
        "agent_start",
        "transcript",
        "tool_called",
        "handoff_announcement",
        "agent_end",
        "handoff_complete",
    ] {
        assert!(kinds.iter().any(|x| x == k), "{k} missing from {kinds:?}");
    }
    let t = event_json(&h.log, "transcript");
    assert_eq!(
        (t[0]["role"].as_str(), t[0]["agent_id"].as_str()),
        (Some("caller"), Some("crm_billing"))
    );
    assert_eq!(
        (t[3]["role"].as_str(), t[3]["agent_id"].as_str()),
        (Some("agent"), Some("product_promotions"))
    );
}
