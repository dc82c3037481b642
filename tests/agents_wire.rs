//! The orchestrator's wire messages are accepted by the embedded mock model, which validates
//! client messages the way the service does: the first session's setup, a `contextUpdate` that
//! swaps the instruction and the filtered tools, a greeting `clientContent`, and a standby
//! session's setup followed by its history.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use baton::agents::{self, Action, Input, Orchestrator};
use baton::mock::setup::Behavior;
use baton::mock::{Endpoint, MockSession, Outgoing, Profile, Scenario};
use baton::model::catalog::lookup;
use baton::model::gemini::session::SessionConfig;
use baton::model::gemini::wire::ClientMessage;
use baton::model::handle::Protocol;

fn mock() -> MockSession {
    MockSession::new(
        Arc::new(Scenario::builtin()),
        Endpoint::default(),
        Profile::default(),
    )
}

fn base() -> SessionConfig {
    SessionConfig {
        model: "models/gemini-3.8-live".into(),
        ..SessionConfig::default()
    }
}

/// Sends `msg`; fails the test if the mock closes the session.
fn send(m: &mut MockSession, msg: ClientMessage, now: Instant) -> Vec<Outgoing> {
    m.handle_message(msg, now);
    let mut out = Vec::new();
    while let Some(o) = m.poll_transmit() {
        if let Outgoing::Close { code, reason } = &o {
            panic!("the mock closed the session: {code} {reason}");
        }
        out.push(o);
    }
    out
}

fn drain(o: &mut Orchestrator) -> Vec<Action> {
    std::iter::from_fn(|| o.poll_action()).collect()
}

#[test]
fn setup_context_update_and_greeting_are_valid_client_messages() {
    let reg =
        agents::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("config/agents/support.toml"))
            .unwrap();
    let t0 = Instant::now();
    let mut o = Orchestrator::new(
        Arc::new(reg),
        lookup(Protocol::Gemini, "models/gemini-3.8-live").capabilities,
        t0,
    );
    let mut m = mock();
    let setup = o.initial_setup().setup_message(&base());
    send(&mut m, setup, t0);
    let cfg = m.config().unwrap();
    assert_eq!(
        cfg.behavior("transfer_to_product_promotions"),
        Behavior::NonBlocking
    );
    assert!(cfg.functions.contains_key("get_billing_summary"));
    assert!(!cfg.functions.contains_key("unlock_account"));
    // Caller words: the instruction and tools change in place.
    o.handle(
        Input::CallerTranscript {
            text: "What offers are available?".into(),
            finished: true,
        },
        t0,
    )
    .unwrap();
    for a in drain(&mut o) {
        if let Action::ContextUpdate(cu) = a {
            send(&mut m, ClientMessage::ContextUpdate(cu), t0);
        }
    }
    let cfg = m.config().unwrap();
    assert!(cfg.functions.contains_key("get_promotions"));
    assert!(!cfg.functions.contains_key("get_billing_summary"));
    let si = cfg.system_instruction.as_ref().unwrap().parts[0]
        .text
        .clone();
    assert!(
        si.unwrap()
            .starts_with("You are Priya, the Product & Promotions Specialist")
    );
    // The model answers; then an operator brings billing back while nobody speaks: the
    // greeting goes out at once.
    for i in [
        Input::ModelAudio,
        Input::GenerationComplete,
        Input::TurnComplete,
    ] {
        o.handle(i, t0).unwrap();
    }
    o.handle(
        Input::Activate {
            agent: "crm_billing".into(),
        },
        t0,
    )
    .unwrap();
    let mut greeted = false;
    for a in drain(&mut o) {
        match a {
            Action::ContextUpdate(cu) => {
                send(&mut m, ClientMessage::ContextUpdate(cu), t0);
            }
            Action::ClientContent(cc) => {
                send(&mut m, ClientMessage::ClientContent(cc), t0);
                greeted = true;
            }
            _ => {}
        }
    }
    assert!(greeted);
}

#[test]
fn a_standby_setup_and_its_history_are_valid_client_messages() {
    let reg =
        agents::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("config/agents/support.toml"))
            .unwrap();
    let t0 = Instant::now();
    let mut o = Orchestrator::new(
        Arc::new(reg),
        lookup(Protocol::Gemini, "models/gemini-3.8-live").capabilities,
        t0,
    );
    for (caller, agent) in [("What's my bill?", "Your bill is 45.99.")] {
        o.handle(
            Input::CallerTranscript {
                text: caller.into(),
                finished: true,
            },
            t0,
        )
        .unwrap();
        for i in [
            Input::ModelAudio,
            Input::AgentTranscript {
                text: agent.into(),
                finished: true,
            },
            Input::GenerationComplete,
            Input::TurnComplete,
        ] {
            o.handle(i, t0).unwrap();
        }
    }
    o.handle(
        Input::CallerTranscript {
            text: "I can't log in to my account.".into(),
            finished: true,
        },
        t0,
    )
    .unwrap();
    let setup = drain(&mut o)
        .into_iter()
        .find_map(|a| match a {
            Action::PrepareStandby(s) => Some(s),
            _ => None,
        })
        .expect("security is isolated: a standby session");
    let mut m = mock();
    let msg = setup.setup_message(&base());
    let json = serde_json::to_value(&msg).unwrap();
    assert_eq!(
        json["setup"]["historyConfig"]["initialHistoryInClientContent"],
        true
    );
    send(&mut m, msg, t0);
    send(&mut m, setup.history_message().unwrap(), t0);
    assert!(m.config().unwrap().functions.contains_key("unlock_account"));
}
