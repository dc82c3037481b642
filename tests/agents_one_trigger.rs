//! One handoff, one trigger: whichever signal decides a handoff first (the announcing agent's
//! words, its transfer call), the handoff's other signals are absorbed — a transfer call still
//! gets the answer the protocol requires, but quietly (`SILENT`, which the OpenAI translation
//! sends as a `function_call_output` with no `response.create`). On a model whose calls pause
//! its speech, handoffs ride on the announcing words: no transfer tools are declared. Context
//! that must not make the model speak never does.

use crate::agents_support;

use agents_support::{ALL, H, announcements, contents, context_updates, responses, shipped};
use baton::agents::{Action, CallEvent, Input};
use baton::model::Capabilities;
use baton::model::catalog;
use baton::model::gemini::wire::{ClientMessage, FunctionResponseScheduling, ToolResponse};
use baton::model::handle::Protocol;
use baton::model::openai::translate::{Step, Translator};
use baton::model::openai::wire::Api;
use serde_json::json;

fn openai() -> Capabilities {
    catalog::lookup(Protocol::OpenAi, "gpt-realtime").capabilities
}

fn gemini_31() -> Capabilities {
    catalog::lookup(Protocol::Gemini, "models/gemini-3.1-flash-live-preview").capabilities
}

/// The OpenAI steps for these tool answers.
fn openai_steps(answers: Vec<baton::model::gemini::wire::FunctionResponse>) -> Vec<Step> {
    Translator::new(Api::Ga, false).translate(&ClientMessage::ToolResponse(ToolResponse {
        function_responses: Some(answers),
    }))
}

#[test]
fn the_transfer_call_after_the_announcing_words_is_answered_quietly() {
    for caps in [ALL, openai()] {
        let mut h = H::new(shipped("financial.toml"), caps);
        h.caller("Is there a government scheme for savers?");
        let a = h.speaks("Let me bring in Ravi, our government schemes specialist.");
        assert_eq!(announcements(&a).len(), 1, "{caps:?}");
        assert_eq!(announcements(&a)[0]["trigger"], "agent_phrase");
        let (id, a) = h.call(
            "transfer_to_schemes",
            json!({"summary": "wants a savings scheme"}),
        );
        assert!(announcements(&a).is_empty(), "a second handoff: {a:#?}");
        let r = responses(&a);
        assert_eq!(r.len(), 1, "{a:#?}");
        assert_eq!(r[0].id.as_deref(), Some(id.as_str()));
        assert_eq!(r[0].scheduling, Some(FunctionResponseScheduling::Silent));
        assert_eq!(
            r[0].response.as_ref().unwrap()["output"]["status"],
            "transferred"
        );
        // On OpenAI Realtime: the output, and no response for it.
        let steps = openai_steps(r);
        assert_eq!(steps.len(), 1, "{steps:?}");
        assert!(!steps.contains(&Step::Respond));
        // The one trigger: the greeting prompt at the end of the announcement.
        let a = h.generation_complete();
        assert_eq!(contents(&a).len(), 1, "{caps:?}: {a:#?}");
        assert_eq!(context_updates(&a).len(), 1);
        let events: Vec<_> = h
            .log
            .iter()
            .filter(|x| matches!(x, Action::Event(CallEvent::HandoffBlocked { .. })))
            .collect();
        assert!(events.is_empty(), "absorbed, not refused: {events:?}");
    }
}

#[test]
fn the_announcing_words_after_the_transfer_call_start_nothing_more() {
    let mut h = H::new(shipped("financial.toml"), openai());
    h.caller("Is there a government scheme for savers?");
    h.speaks("Let");
    let (_, a) = h.call(
        "transfer_to_schemes",
        json!({"summary": "wants a savings scheme"}),
    );
    assert_eq!(announcements(&a).len(), 1);
    let a = h.feed(Input::AgentTranscript {
        text: " me bring in Ravi, our government schemes specialist.".into(),
        finished: false,
    });
    assert!(
        announcements(&a).is_empty() && responses(&a).is_empty(),
        "{a:#?}"
    );
    // Once the response is done: the update, then the call's answer, which asks for the one
    // response.
    let a = h.generation_complete();
    let r = responses(&a);
    assert_eq!(context_updates(&a).len(), 1);
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].scheduling, None);
    assert!(openai_steps(r).contains(&Step::Respond));
    assert!(contents(&a).is_empty(), "no prompt on top: {a:#?}");
}

#[test]
fn on_a_model_whose_calls_pause_speech_handoffs_ride_on_the_words() {
    // router.toml has no [phrases]: the built-in announcement language, naming the agent.
    let mut h = H::new(shipped("router.toml"), gemini_31());
    let tools = h.o.tools_json();
    let names = agents_support::function_names(&tools);
    assert!(
        !names.iter().any(|n| n.starts_with("transfer_to_")),
        "{names:?}"
    );
    let setup = h.o.initial_setup();
    assert!(
        setup.system_instruction.contains("Let me bring in Victor"),
        "{}",
        setup.system_instruction
    );
    h.caller("Hi. I'd like a quote for a Toyota Camry.");
    let a = h.speaks("Let me bring in");
    assert!(announcements(&a).is_empty(), "no agent named yet");
    let a = h.feed(Input::AgentTranscript {
        text: " Victor, our vehicle offer specialist.".into(),
        finished: false,
    });
    let ann = announcements(&a);
    assert_eq!(ann.len(), 1, "{a:#?}");
    assert_eq!(ann[0]["to"], "vehicle_offer");
    assert_eq!(ann[0]["trigger"], "agent_phrase");
    // Words without handoff language move nobody, even naming an agent.
    let mut h = H::new(shipped("router.toml"), gemini_31());
    h.caller("Who is Victor?");
    assert!(announcements(&h.speaks("Victor prepares our quotes.")).is_empty());
}

#[test]
fn sidecar_context_never_makes_the_model_speak() {
    // A model without mid-session client content would only take it as a prompt: not sent.
    let mut h = H::new(shipped("sidecars.toml"), gemini_31());
    h.caller("Hi. I need some advice on my savings.");
    h.model_turn("Happy to help. Do you have an emergency fund?");
    let a = h.feed(Input::SidecarResult {
        sidecar: "analysis".into(),
        text: "The caller is saving for a house.".into(),
        deliver: baton::agents::registry::Delivery::Auto,
    });
    assert!(contents(&a).is_empty(), "{a:#?}");
    assert!(
        a.iter().any(|x| matches!(
            x,
            Action::Event(CallEvent::SidecarUndelivered { sidecar, .. }) if sidecar == "analysis"
        )),
        "{a:#?}"
    );
    // Where it can go, it goes without a turn: turnComplete false, a system item on OpenAI.
    let mut h = H::new(shipped("sidecars.toml"), openai());
    h.caller("Hi. I need some advice on my savings.");
    h.model_turn("Happy to help. Do you have an emergency fund?");
    let a = h.feed(Input::SidecarResult {
        sidecar: "analysis".into(),
        text: "The caller is saving for a house.".into(),
        deliver: baton::agents::registry::Delivery::Auto,
    });
    let c = contents(&a);
    assert_eq!(c.len(), 1);
    assert_eq!(c[0].turn_complete, Some(false));
    let steps =
        Translator::new(Api::Ga, false).translate(&ClientMessage::ClientContent(c[0].clone()));
    assert!(!steps.contains(&Step::Respond), "{steps:?}");
    let Step::Send(ev) = &steps[0] else {
        panic!("{steps:?}")
    };
    let v = serde_json::to_value(ev).unwrap();
    assert_eq!(v["item"]["role"], "system", "{v}");
}
