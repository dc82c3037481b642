//! Every handoff trigger, driven through the orchestrator on a virtual clock: a routing tool's
//! arguments (seed 000), transfer tools with a summary (seed 001), the caller's words, the
//! agent's own handoff phrases (seed 002) and handback phrase, call data (seed 003), and
//! operator commands.

use crate::agents_support;

use agents_support::*;
use baton::agents::orchestrator::Timer;
use baton::agents::{Action, CommandError, Input};
use baton::model::gemini::wire::FunctionResponseScheduling;
use serde_json::json;

fn financial_query(topic: &str, extra: serde_json::Value) -> serde_json::Value {
    let mut v = json!({
        "response": "…",
        "topic": topic,
        "conversation_stage": "providing_information",
        "user_intent": "learn_about_topic",
    });
    if let (Some(o), Some(e)) = (v.as_object_mut(), extra.as_object()) {
        o.extend(e.clone());
    }
    v
}

#[test]
fn seed_000_function_args_bring_the_specialist_in_and_hand_back() {
    let mut h = H::new(shipped("financial.toml"), ALL);
    h.caller("Can the government help with my hospital costs?");
    h.speaks("There is a health scheme. Our government schemes specialist knows it best.");
    let (id, a) = h.call(
        "respond_to_financial_query",
        financial_query(
            "government_scheme",
            json!({"requires_specialist": true, "specialist_type": "government_schemes_specialist",
                   "conversation_stage": "specialist_handoff"}),
        ),
    );
    let ann = announcements(&a);
    assert_eq!(ann.len(), 1, "{a:#?}");
    assert_eq!(ann[0]["from"], "advisor");
    assert_eq!(ann[0]["to"], "schemes");
    assert_eq!(ann[0]["trigger"], "function_args");
    assert_eq!(ann[0]["strategy"], "context_update");
    // Joint mode: both agents active, one instruction with both personas and both tools.
    assert_eq!(h.active(), ["schemes", "advisor"]);
    // The update goes out once the announcing turn is generated.
    assert!(context_updates(&a).is_empty());
    let done = h.generation_complete();
    let cu = &context_updates(&done)[0];
    let text = instruction(cu);
    assert!(text.starts_with("2 agents share this call"), "{text}");
    assert!(text.contains("Ravi answers about: PM-KISAN"));
    let names = function_names(&cu.tools.as_ref().unwrap().tools);
    assert!(
        names.contains(&"respond_to_scheme_query".to_owned()),
        "{names:?}"
    );
    assert!(names.contains(&"respond_to_financial_query".to_owned()));
    // The routing tool still runs and its own answer lets the model continue.
    let r = h.run_tools(&a);
    let resp = &responses(&r)[0];
    assert_eq!(resp.id.as_deref(), Some(id.as_str()));
    assert_eq!(resp.response, Some(json!({"output": {"status": "noted"}})));
    h.turn_complete();
    // The specialist's first turn: attribution switches and the handoff is complete.
    let a = h.speaks("Hello! I'm the Government Schemes Specialist.");
    assert!(
        a.iter()
            .any(|x| matches!(x, Action::Attribute(t) if t.id == "schemes"))
    );
    assert_eq!(event_json(&a, "handoff_complete")[0]["to"], "schemes");
    h.generation_complete();
    h.turn_complete();
    // "Should not activate for general loans": a loans topic changes nothing while both are on.
    h.caller("Now about my farm loan.");
    let (_, a) = h.call(
        "respond_to_financial_query",
        financial_query("loans", json!({})),
    );
    assert!(announcements(&a).is_empty());
    h.run_tools(&a);
    // The specialist asks to hand back.
    let (_, a) = h.call(
        "respond_to_scheme_query",
        json!({"response": "…", "user_intent": "learn_about_scheme", "requires_handback": true}),
    );
    let ann = announcements(&a);
    assert_eq!(ann[0]["to"], "advisor");
    assert_eq!(
        ann[0]["reason"],
        "respond_to_scheme_query: requires_handback = true"
    );
    assert_eq!(h.active(), ["advisor"]);
    let end = event_json(&a, "agent_end");
    assert_eq!(end[0]["agent_id"], "schemes");
    assert_eq!(end[0]["message_count"], 1);
    let hist = h.o.history();
    assert_eq!(hist.len(), 2);
    assert!(hist[1].deactivated_at_ms.is_some());
}

#[test]
fn seed_000_routing_arguments_of_the_wrong_type_are_noticed_not_fatal() {
    let mut h = H::new(shipped("financial.toml"), ALL);
    let (_, a) = h.call(
        "respond_to_financial_query",
        financial_query("loans", json!({"requires_specialist": "yes"})),
    );
    let n = event_json(&a, "notice");
    assert!(
        n[0]["message"]
            .as_str()
            .unwrap()
            .contains("requires_specialist (expected true or false)")
    );
    assert!(announcements(&a).is_empty());
    assert_eq!(
        a.iter().filter(|x| matches!(x, Action::RunTool(_))).count(),
        1
    );
}

#[test]
fn a_transfer_tool_carries_its_summary_to_the_next_agent() {
    let mut h = H::new(shipped("support.toml"), ALL);
    h.caller("Hmm, what else can I do?");
    h.speaks("I'll hand you over.");
    let (id, a) = h.call(
        "transfer_to_product_promotions",
        json!({"summary": "Customer 251 wants a cheaper plan"}),
    );
    assert_eq!(announcements(&a)[0]["trigger"], "transfer_tool");
    // The update and the answer that makes the new agent speak go out once the announcing
    // turn is generated.
    assert!(context_updates(&a).is_empty() && responses(&a).is_empty());
    let done = h.generation_complete();
    let cu = &context_updates(&done)[0];
    assert!(instruction(cu).ends_with("CONTEXT: Customer 251 wants a cheaper plan"));
    let r = &responses(&done)[0];
    assert_eq!(r.id.as_deref(), Some(id.as_str()));
    assert_eq!(r.scheduling, Some(FunctionResponseScheduling::WhenIdle));
    assert_eq!(
        r.response.as_ref().unwrap()["output"]["status"],
        "transferred"
    );
    let start = event_json(&a, "agent_start");
    assert_eq!(start[0]["summary"], "Customer 251 wants a cheaper plan");
    assert_eq!(start[0]["handoff"], true);
    assert_eq!(
        h.o.history()[1].activation_summary,
        "Customer 251 wants a cheaper plan"
    );
    // Only the new agent's tools and transfers are declared.
    let names = function_names(&cu.tools.as_ref().unwrap().tools);
    assert!(names.contains(&"get_promotions".to_owned()));
    assert!(names.contains(&"transfer_to_crm_billing".to_owned()));
    assert!(!names.contains(&"get_billing_summary".to_owned()));
    assert!(!names.contains(&"transfer_to_product_promotions".to_owned()));
}

#[test]
fn a_transfer_without_summary_is_answered_with_an_error_naming_the_argument() {
    let mut h = H::new(shipped("support.toml"), ALL);
    let (_, a) = h.call("transfer_to_product_promotions", json!({"reason": "plans"}));
    assert!(announcements(&a).is_empty());
    let r = &responses(&a)[0];
    let err = r.response.as_ref().unwrap()["error"].as_str().unwrap();
    assert!(err.contains("argument 'summary'"), "{err}");
    assert_eq!(h.lead(), "crm_billing");
}

#[test]
fn caller_keywords_hand_over_and_the_model_answers_as_the_new_agent() {
    let mut h = H::new(shipped("support.toml"), ALL);
    let a = h.caller("What offers are available?");
    let ann = announcements(&a);
    assert_eq!(ann[0]["to"], "product_promotions");
    assert_eq!(ann[0]["trigger"], "caller_words");
    assert!(
        ann[0]["reason"]
            .as_str()
            .unwrap()
            .contains("keyword \"offers\"")
    );
    // The caller is owed a reply: the model gives it as the new agent, no greeting prompt.
    let mut a = h.model_turn("We have three promotions.");
    a.extend(h.advance(std::time::Duration::from_secs(10)));
    assert!(contents(&a).is_empty() && contents(&h.log).is_empty());
    let t = h.o.transcript();
    assert_eq!(
        (t[0].agent.as_str(), t[0].text.as_str()),
        ("crm_billing", "What offers are available?")
    );
    assert_eq!(t[1].agent, "product_promotions");
}

#[test]
fn seed_002_phrases_each_rule_hands_over_to_the_agent_named() {
    let cases = [
        (
            "This is outside my area. Let me connect you with the right specialist, our promotions specialist.",
            "exact_template",
        ),
        (
            "Plans are not my expertise; the promotions specialist can help.",
            "boundary_phrase",
        ),
        (
            "Let me transfer you to the promotions specialist.",
            "explicit_handoff",
        ),
        (
            "Plans are outside of what my area covers; our promotions specialist will take it from here.",
            "keyword_proximity",
        ),
    ];
    for (said, rule) in cases {
        let mut h = H::new(shipped("support.toml"), ALL);
        h.caller("Tell me more.");
        let a = h.speaks(said);
        let ann = announcements(&a);
        assert_eq!(ann.len(), 1, "{said}");
        assert_eq!(ann[0]["trigger"], "agent_phrase");
        assert_eq!(ann[0]["phrase_rule"], rule, "{said}");
        assert_eq!(ann[0]["to"], "product_promotions", "{said}");
        // The agent is mid-turn: the new agent is prompted to greet after generationComplete.
        assert!(contents(&a).is_empty());
        let a = h.generation_complete();
        let c = contents(&a);
        assert_eq!(c.len(), 1, "{said}");
        assert!(content_text(&c[0]).contains("You are now Priya."));
        assert_eq!(c[0].turn_complete, Some(true));
    }
}

#[test]
fn seed_002_phrase_without_a_name_uses_the_callers_words_or_waits_for_them() {
    // The caller's words matched both domains; billing kept the caller (sticky) until it said
    // the template: then the caller's words pick promotions.
    let mut h = H::new(shipped("support.toml"), ALL);
    let a = h.caller("I want to pay for a new plan");
    assert!(
        announcements(&a).is_empty(),
        "sticky: billing matched 'pay'"
    );
    let a = h.speaks("This is outside my area. Let me connect you with the right specialist.");
    assert_eq!(announcements(&a)[0]["to"], "product_promotions");
    // Nothing to go on: the next caller words pick the agent (seed 002: re-classify next message).
    let mut h = H::new(shipped("support.toml"), ALL);
    h.caller("Hello there.");
    let a = h.speaks("This is outside my area. Let me connect you with the right specialist.");
    assert!(announcements(&a).is_empty());
    assert_eq!(h.o.poll_timeout().map(|(_, r)| r), Some(Timer::Reroute));
    h.generation_complete();
    h.turn_complete();
    let a = h.caller("Yes please, I can't log in.");
    let ann = announcements(&a);
    assert_eq!(ann[0]["to"], "security_authentication");
    assert_eq!(ann[0]["trigger"], "agent_phrase");
    assert_eq!(ann[0]["phrase_rule"], "exact_template");
}

#[test]
fn seed_002_words_spread_beyond_100_characters_are_not_a_handoff() {
    let mut h = H::new(shipped("support.toml"), ALL);
    h.caller("Tell me more.");
    let filler = "and ".repeat(30);
    let a = h.speaks(&format!(
        "That is outside {filler} the area I cover; I will transfer you."
    ));
    assert!(announcements(&a).is_empty());
    assert_eq!(h.o.poll_timeout(), None, "no reroute armed");
}

#[test]
fn the_specialists_handback_phrase_returns_the_caller() {
    let mut h = H::new(shipped("financial.toml"), ALL);
    h.o.handle(
        Input::Activate {
            agent: "government_schemes".into(),
        },
        h.now,
    )
    .unwrap();
    h.model_turn("Hello! I'm the Government Schemes Specialist.");
    let a = h.speaks("For that, let me hand you back to Asha.");
    let ann = announcements(&a);
    assert_eq!(ann[0]["trigger"], "handback_phrase");
    assert_eq!(ann[0]["to"], "advisor");
    assert_eq!(h.active(), ["advisor"]);
}

#[test]
fn caller_handback_keywords_return_an_exclusive_specialist() {
    let mut h = H::new(shipped("support.toml"), ALL);
    h.caller("What offers are available?");
    h.model_turn("We have three.");
    assert_eq!(h.lead(), "product_promotions");
    // Back to billing through billing's own activation words (the way back is the return stack).
    let a = h.caller("Thanks. Now, why is my bill so high?");
    assert_eq!(announcements(&a)[0]["to"], "crm_billing");
}

#[test]
fn seed_003_call_data_hands_over_but_never_while_dicom_is_dirty() {
    let mut h = H::new(shipped("realty.toml"), ALL);
    h.caller("Hi, I'm Ana, I'd like to see apartments in Ñuñoa.");
    let lead = json!({"name": "Ana", "phone": "+56 9 1234 5678", "email": "ana@example.com",
                      "budget": "1.500.000 CLP", "location": "Ñuñoa", "dicom_status": "dirty"});
    let (_, a) = h.call("record_lead_data", lead);
    let b = blocked(&a);
    assert_eq!(b.len(), 1, "{a:#?}");
    assert_eq!(b[0]["to"], "scheduler");
    assert_eq!(b[0]["trigger"], "call_data");
    assert_eq!(
        b[0]["reason"],
        "blocked: DICOM status is dirty: no visit can be scheduled"
    );
    assert_eq!(h.lead(), "qualifier");
    assert_eq!(h.o.call_data()["dicom_status"], "dirty");
    h.run_tools(&a);
    // A caller asking for a visit does not get past the rule either.
    h.generation_complete();
    h.turn_complete();
    let a = h.caller("Can I book a visit anyway?");
    assert_eq!(blocked(&a)[0]["trigger"], "caller_words");
    h.model_turn("Not until your DICOM is clean, sorry.");
    // Once clean, the scheduler takes over.
    let a = h.feed(Input::CallData {
        key: "dicom_status".into(),
        value: "clean".into(),
    });
    let ann = announcements(&a);
    assert_eq!(ann[0]["to"], "scheduler");
    assert_eq!(ann[0]["trigger"], "call_data");
    assert_eq!(h.lead(), "scheduler");
    // The model never sees a transfer_to_scheduler (policy.transfer_tool = false).
    assert!(
        !function_names(&h.o.initial_setup().tools).contains(&"transfer_to_scheduler".to_owned())
    );
}

#[test]
fn seed_003_a_confirmed_visit_hands_the_lead_to_follow_up() {
    let mut h = H::new(shipped("realty.toml"), ALL);
    h.feed(Input::Activate {
        agent: "scheduler".into(),
    });
    h.model_turn("Great news, you qualify!");
    let (_, a) = h.call(
        "book_visit",
        json!({"project": "Vista Andes", "slot": "2026-12-02T10:00"}),
    );
    assert!(
        announcements(&a).is_empty(),
        "the result, not the call, confirms"
    );
    let r = h.run_tools(&a);
    assert_eq!(announcements(&r)[0]["to"], "follow_up");
    assert_eq!(h.o.call_data()["appointment_status"], "confirmed");
}

#[test]
fn operators_activate_and_deactivate_agents() {
    let mut h = H::new(shipped("support.toml"), ALL);
    assert_eq!(
        h.o.handle(
            Input::Activate {
                agent: "nobody".into()
            },
            h.now
        ),
        Err(CommandError::UnknownAgent("nobody".into()))
    );
    assert_eq!(
        h.o.handle(
            Input::Deactivate {
                agent: "crm_billing".into()
            },
            h.now
        ),
        Err(CommandError::LastAgent)
    );
    let a = h.feed(Input::Activate {
        agent: "Product & Promotions Specialist".into(),
    });
    assert_eq!(announcements(&a)[0]["trigger"], "manual");
    assert_eq!(h.lead(), "product_promotions");
    // Asking for the agent already leading changes nothing, and says so.
    assert_eq!(
        h.o.handle(
            Input::Activate {
                agent: "product_promotions".into()
            },
            h.now
        ),
        Err(CommandError::AlreadyLeads("product_promotions".into()))
    );
    // Nobody is speaking and nobody waits: the greeting prompt goes out at once.
    assert_eq!(contents(&a).len(), 1);
    assert_eq!(
        h.o.handle(
            Input::Deactivate {
                agent: "security_authentication".into()
            },
            h.now
        ),
        Err(CommandError::NotActive("security_authentication".into()))
    );
    h.model_turn("Hi, I'm the promotions specialist.");
    let a = h.feed(Input::Deactivate {
        agent: "product_promotions".into(),
    });
    assert_eq!(announcements(&a)[0]["to"], "crm_billing");
}

/// Ending the part of an agent that does not lead (a joint call's other member) hands nothing
/// over: the lead goes on, nothing is announced or prompted, the agent's part ends, and the
/// session takes the instruction without it once the turn being generated is done. The handoff
/// that brought the lead in keeps its completion.
#[test]
fn ending_the_part_of_an_agent_beside_the_lead_hands_nothing_over() {
    let mut h = H::new(shipped("financial.toml"), ALL);
    let a = h.feed(Input::Activate {
        agent: "schemes".into(),
    });
    assert_eq!(announcements(&a)[0]["to"], "schemes");
    assert_eq!(h.active(), ["schemes", "advisor"]);
    // Asked in silence: the update goes out at once, ahead of the prompt that makes Ravi speak.
    let update = a.iter().position(|x| matches!(x, Action::ContextUpdate(_)));
    let prompt = a.iter().position(|x| matches!(x, Action::ClientContent(_)));
    assert!(update.is_some() && update < prompt, "{a:?}");
    // Ravi starts speaking; Asha's part is ended meanwhile.
    let a = h.speaks("Ravi here, about the schemes.");
    assert_eq!(event_json(&a, "handoff_complete")[0]["to"], "schemes");
    let a = h.feed(Input::Deactivate {
        agent: "advisor".into(),
    });
    assert!(announcements(&a).is_empty(), "{a:?}");
    assert!(blocked(&a).is_empty(), "{a:?}");
    assert_eq!(event_json(&a, "agent_end")[0]["agent_id"], "advisor");
    assert!(context_updates(&a).is_empty(), "not while Ravi speaks");
    assert!(
        contents(&a).is_empty(),
        "nothing for the caller to hear: {a:?}"
    );
    assert_eq!(
        (h.lead(), h.active()),
        ("schemes".into(), vec!["schemes".to_owned()])
    );
    let a = h.generation_complete();
    let cu = context_updates(&a);
    assert_eq!(cu.len(), 1, "{a:?}");
    let alone = instruction(&cu[0]);
    assert!(
        alone.starts_with("You are Ravi") && !alone.contains("You are Asha"),
        "{alone}"
    );
    assert!(contents(&a).is_empty());
    h.turn_complete();
    let a = h.model_turn("Anything else about the schemes?");
    assert!(event_json(&a, "handoff_complete").is_empty(), "{a:?}");
    let hist = h.o.history();
    assert_eq!(hist.len(), 2, "{hist:?}");
    assert!(hist[0].deactivated_at_ms.is_some() && hist[1].deactivated_at_ms.is_none());
}

/// On a model that takes no instruction update, the agent beside the lead leaves by a note in
/// the conversation (no turn: nothing is said); one that takes no mid-call content either
/// refuses, saying what to do instead.
#[test]
fn ending_the_part_of_an_agent_beside_the_lead_on_models_that_cannot_update_it() {
    let joint = |caps| {
        let mut h = H::new(shipped("financial.toml"), caps);
        let a = h.feed(Input::Activate {
            agent: "schemes".into(),
        });
        // Ravi's voice differs from Asha's: without in-place updates he comes in on a standby
        // session, swapped in once it is ready.
        if a.iter().any(|x| matches!(x, Action::PrepareStandby(_))) {
            h.feed(Input::StandbyReady);
        }
        h.model_turn("Ravi here, about the schemes.");
        assert_eq!(h.active(), ["schemes", "advisor"]);
        h
    };
    let mut h = joint(NO_UPDATE);
    let a = h.feed(Input::Deactivate {
        agent: "advisor".into(),
    });
    assert!(
        announcements(&a).is_empty() && context_updates(&a).is_empty(),
        "{a:?}"
    );
    let notes = contents(&a);
    assert_eq!(notes.len(), 1, "{a:?}");
    assert_eq!(notes[0].turn_complete, Some(false), "a note, not a turn");
    let text = content_text(&notes[0]);
    assert!(
        text.contains("Asha has left the call") && text.contains("only as Ravi"),
        "{text}"
    );
    assert_eq!(h.active(), ["schemes"]);

    let mut h = joint(BARE);
    let e =
        h.o.handle(
            Input::Deactivate {
                agent: "advisor".into(),
            },
            h.now,
        )
        .unwrap_err();
    assert!(matches!(e, CommandError::CannotLeave(_)), "{e}");
    assert!(e.to_string().contains("deactivate the lead"), "{e}");
    assert_eq!(h.active(), ["schemes", "advisor"], "nothing changed");
}

#[test]
fn an_operators_command_during_another_handoff_is_refused_with_the_reason() {
    let mut h = H::new(shipped("support.toml"), ALL);
    // The primary agent is mid-reply: the operator's handoff waits for the turn boundary.
    h.speaks("Let me look at your bill");
    let a = h.feed(Input::Activate {
        agent: "product_promotions".into(),
    });
    assert_eq!(announcements(&a)[0]["to"], "product_promotions");
    assert!(contents(&a).is_empty(), "held for the boundary: {a:?}");
    let asked = Input::Activate {
        agent: "security_authentication".into(),
    };
    // Refused, not accepted and dropped: the operator is told to ask again.
    assert_eq!(
        h.o.handle(asked.clone(), h.now),
        Err(CommandError::Blocked(
            "another handoff is in progress".into()
        ))
    );
    assert_eq!(blocked(&h.drain())[0]["to"], "security_authentication");
    // Who leads and who is active are about to change: "not now", not "already leads" or "not
    // active".
    for asked in [
        Input::Activate {
            agent: "crm_billing".into(),
        },
        Input::Deactivate {
            agent: "product_promotions".into(),
        },
    ] {
        assert_eq!(
            h.o.handle(asked, h.now),
            Err(CommandError::Blocked(
                "another handoff is in progress".into()
            ))
        );
    }
    // Once the first handoff is carried out at the boundary, the same command is accepted.
    h.generation_complete();
    h.turn_complete();
    assert_eq!(h.lead(), "product_promotions");
    let a = h.feed(asked);
    assert_eq!(announcements(&a)[0]["to"], "security_authentication");
}
