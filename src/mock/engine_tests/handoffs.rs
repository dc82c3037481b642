//! Engine tests: personas (which agent speaks, and how the wire names it), handoff follow-ups,
//! `scheduling` of NON_BLOCKING responses, initial history, and what each profile refuses.

use serde_json::json;

use super::*;
use crate::mock::profile::Quirks;
use crate::mock::scenario::{Handoff, Persona};

fn reply(text: &str, ms: usize) -> Reply {
    Reply {
        audio: vec![1000i16; 24 * ms].into(),
        text: text.into(),
    }
}

/// Two personas, "a" (Ada) and "b" (Bo), each with its own default reply.
fn two_agents(turns: Vec<Turn>) -> Arc<Scenario> {
    let mut s = (*scenario(turns)).clone();
    s.personas = vec![
        Persona {
            id: "a".into(),
            marker: "Ada".into(),
            default_reply: Some(reply("ada default", 400)),
        },
        Persona {
            id: "b".into(),
            marker: "Bo".into(),
            default_reply: Some(reply("bo default", 400)),
        },
    ];
    Arc::new(s)
}

/// Ada announces Bo, who greets after the handoff.
fn handoff_turn(input: &str) -> Turn {
    Turn {
        by: Some("a".into()),
        handoff: Some(Handoff {
            to: "b".into(),
            reply: reply("bo greets", 600),
            tool_call: Some(ScriptedToolCall {
                name: "transfer_to_b".into(),
                args: json!({}),
            }),
        }),
        ..Turn::new(Some(input.into()), reply("ada announces", 1000))
    }
}

fn si(text: &str) -> Value {
    json!({"systemInstruction": {"parts": [{"text": text}]}})
}

fn text(t: &str) -> Value {
    json!({"realtimeInput": {"text": t}})
}

/// The output transcription of each model turn in `log`, split at `turnComplete`.
fn said(log: &[(Duration, Outgoing)]) -> Vec<String> {
    let mut out = vec![String::new()];
    for (_, o) in log {
        if let Some(t) = sc(o).and_then(|c| c.output_transcription.as_ref())
            && let Some(last) = out.last_mut()
        {
            last.push_str(t.text.as_deref().unwrap_or_default());
        }
        if is(o, |c| c.turn_complete == Some(true)) {
            out.push(String::new());
        }
    }
    out.retain(|s| !s.is_empty());
    out
}

fn first_audio_after(log: &[(Duration, Outgoing)], from: usize) -> Option<Duration> {
    log[from..]
        .iter()
        .find(|(_, o)| audio_samples(o) > 0)
        .map(|(t, _)| *t)
}

fn position(log: &[(Duration, Outgoing)], f: fn(&ServerContent) -> bool) -> usize {
    log.iter().position(|(_, o)| is(o, f)).unwrap()
}

#[test]
fn by_persona_and_by_choose_the_voice() {
    let turns = || {
        vec![
            Turn {
                by: Some("a".into()),
                by_persona: [("b".to_owned(), reply("x by b", 300))].into(),
                ..Turn::new(None, reply("x by a", 300))
            },
            Turn {
                by: Some("b".into()),
                ..Turn::new(None, reply("y by b", 300))
            },
            Turn::new(None, reply("z anyone", 300)),
        ]
    };
    for (instruction, want) in [
        (
            "You are Bo.",
            ["x by b", "y by b", "z anyone", "bo default"],
        ),
        (
            "You are Ada.",
            ["x by a", "ada default", "z anyone", "ada default"],
        ),
        (
            "You are nobody.",
            ["x by a", "y by b", "z anyone", REPLY_TEXT],
        ),
    ] {
        let mut h = Harness::ready(two_agents(turns()), si(instruction));
        for i in 0..4 {
            h.send(text(&format!("line {i}")));
            h.settle();
        }
        assert_eq!(said(&h.log), want, "{instruction}");
    }
}

#[test]
fn the_wire_names_the_persona_latest_first() {
    let mut h = Harness::ready(two_agents(vec![]), si("You are Ada, hand over to Bo."));
    assert_eq!(h.s.persona(), Some("a"));
    // The model's own lines in client content do not name it.
    h.send(json!({"clientContent": {"turns": [{"role": "model", "parts": [{"text": "You are Bo"}]}], "turnComplete": false}}));
    assert_eq!(h.s.persona(), Some("a"));
    h.send(json!({"clientContent": {"turns": [{"role": "user", "parts": [{"text": "Ada briefed: you are Bo now."}]}], "turnComplete": false}}));
    assert_eq!(h.s.persona(), Some("b"));
    h.send(json!({"contextUpdate": {"systemInstruction": {"parts": [{"text": "You are Ada."}]}}}));
    assert_eq!(h.s.persona(), Some("a"));
    // Texts naming nobody leave it.
    h.send(json!({"contextUpdate": {"systemInstruction": {"parts": [{"text": "Be brief."}]}}}));
    assert_eq!(h.s.persona(), Some("a"));
    assert!(!h.s.is_closed());
}

#[test]
fn interrupt_scheduling_cuts_and_follows_up_at_once() {
    let mut h = Harness::ready(
        two_agents(vec![handoff_turn("need b")]),
        json!({"systemInstruction": {"parts": [{"text": "You are Ada."}]},
               "tools": [{"functionDeclarations": [{"name": "transfer_to_b", "behavior": "NON_BLOCKING"}]}]}),
    );
    h.send(text("need b"));
    h.advance(300 * MS);
    let call = h
        .log
        .iter()
        .find_map(|(_, o)| match o {
            Outgoing::Message(m) => m.tool_call.as_ref().map(|t| t.function_calls[0].clone()),
            _ => None,
        })
        .expect("the handoff call, after the first burst");
    assert!(audio_samples(&h.log[0].1) > 0, "audio came first");
    let at = h.now - h.t0;
    h.send(
        json!({"toolResponse": {"functionResponses": [{"id": call.id, "name": "transfer_to_b",
        "response": {"output": "You are Bo."}, "scheduling": "INTERRUPT"}]}}),
    );
    let cut = position(&h.log, |c| c.interrupted == Some(true));
    assert!(is(&h.log[cut + 1].1, |c| c.turn_complete == Some(true)));
    h.settle();
    assert_eq!(first_audio_after(&h.log, cut), Some(at + 300 * MS));
    assert_eq!(said(&h.log)[1], "bo greets");
}

#[test]
fn when_idle_without_a_new_persona_says_the_after_tool_reply() {
    let mut t = tool_turn("lookup");
    t.after_tool = Some(reply("found it", 300));
    for (scheduling, want) in [
        ("WHEN_IDLE", vec![REPLY_TEXT, "found it"]),
        ("SILENT", vec![REPLY_TEXT]),
    ] {
        let mut h = Harness::ready(
            scenario(vec![t.clone()]),
            json!({"tools": [{"functionDeclarations": [{"name": "lookup", "behavior": "NON_BLOCKING"}]}]}),
        );
        h.send(text("look it up"));
        h.advance(300 * MS);
        let id = h
            .log
            .iter()
            .find_map(|(_, o)| match o {
                Outgoing::Message(m) => m.tool_call.as_ref()?.function_calls[0].id.clone(),
                _ => None,
            })
            .unwrap();
        h.send(
            json!({"toolResponse": {"functionResponses": [{"id": id, "name": "lookup",
            "response": {"output": 42}, "scheduling": scheduling}]}}),
        );
        h.settle();
        assert_eq!(said(&h.log), want, "{scheduling}");
        assert!(
            !h.log
                .iter()
                .any(|(_, o)| is(o, |c| c.interrupted.is_some()))
        );
        if scheduling == "WHEN_IDLE" {
            // After generationComplete (and the finished turn's turnComplete), never before.
            let gc = position(&h.log, |c| c.generation_complete == Some(true));
            let gc_at = h.log[gc].0;
            assert!(is(&h.log[gc + 1].1, |c| c.turn_complete == Some(true)));
            assert_eq!(first_audio_after(&h.log, gc + 1), Some(gc_at + 300 * MS));
        }
    }
}

#[test]
fn the_next_caller_line_is_never_a_trigger() {
    let next = Turn {
        by: Some("b".into()),
        ..Turn::new(Some("and then?".into()), reply("bo answers", 300))
    };
    let mut h = Harness::ready(
        two_agents(vec![handoff_turn("need b"), next]),
        si("You are Ada."),
    );
    h.send(text("need b"));
    h.advance(300 * MS);
    h.send(json!({"contextUpdate": {"systemInstruction": {"parts": [{"text": "You are Bo."}]}}}));
    h.settle();
    h.send(text("and then?"));
    h.settle();
    assert_eq!(said(&h.log), ["ada announces", "bo answers"]);
    assert_eq!(h.s.script_position(), 2);
}

#[test]
fn initial_history_sets_where_the_script_resumes() {
    let turns = || {
        vec![
            Turn::new(Some("one".into()), reply("r1", 300)),
            handoff_turn("two"),
            Turn::new(Some("three".into()), reply("r3", 300)),
        ]
    };
    let user = |t: &str| json!({"role": "user", "parts": [{"text": t}]});
    for (history, position) in [
        // The last scripted caller line in it, in order; other user turns do not count.
        (
            vec![
                user("one"),
                user("unscripted"),
                user(" two "),
                user("(brief: Ada hands over)"),
            ],
            2,
        ),
        // Nothing scripted: one turn per non-empty user turn.
        (vec![user("hello"), user(""), user("again")], 2),
        (vec![], 0),
    ] {
        let mut h = Harness::ready(
            two_agents(turns()),
            json!({"systemInstruction": {"parts": [{"text": "You are Bo."}]},
                   "historyConfig": {"initialHistoryInClientContent": true}}),
        );
        h.send(json!({"clientContent": {"turns": history, "turnComplete": true}}));
        h.settle();
        assert!(
            h.log.is_empty(),
            "history is ingested without calling the model"
        );
        assert_eq!(h.s.script_position(), position);
        assert_eq!(h.s.persona(), Some("b"), "history never names the persona");
        h.send(text("(greet the caller)"));
        h.settle();
        // Resumed at the handoff turn, the trigger gets Bo's greeting; with no history it is the
        // first caller turn.
        let want = if position == 2 { "bo greets" } else { "r1" };
        assert_eq!(said(&h.log)[0], want, "{position}");
    }
}

#[test]
fn gemini_31_takes_initial_history_only() {
    let history = json!({"clientContent": {"turns": [{"role": "user", "parts": [{"text": "hi"}]}], "turnComplete": false}});
    let done = json!({"clientContent": {"turns": [{"role": "model", "parts": [{"text": "hello"}]}], "turnComplete": true}});
    let mut h = Harness::ready_as(
        scenario(vec![]),
        Profile::Gemini31,
        json!({"historyConfig": {"initialHistoryInClientContent": true}}),
    );
    h.send(history.clone());
    h.send(done.clone());
    assert!(!h.s.is_closed());
    h.send(history.clone());
    let (code, reason) = close_of(&h.log);
    assert_eq!(code, 1007);
    assert!(reason.contains("mid-session"), "{reason}");

    // Once the model has replied, history is no longer initial.
    let mut h = Harness::ready_as(
        scenario(vec![]),
        Profile::Gemini31,
        json!({"historyConfig": {"initialHistoryInClientContent": true}}),
    );
    h.send(text("hi"));
    h.settle();
    h.send(history.clone());
    assert_eq!(close_of(&h.log).0, 1007);

    let mut h = Harness::ready_as(scenario(vec![]), Profile::Gemini31, json!({}));
    h.send(history);
    assert_eq!(close_of(&h.log).0, 1007);
    assert!(!h.s.capabilities().mid_session_client_content);
}

#[test]
fn older_profiles_keep_a_blocking_call_when_the_caller_speaks() {
    let mut h = Harness::ready_as(
        scenario(vec![tool_turn("get_balance")]),
        Profile::Gemini25,
        json!({"tools": [{"functionDeclarations": [{"name": "get_balance"}]}]}),
    );
    h.send(text("balance?"));
    h.advance(300 * MS);
    let id = h
        .take()
        .into_iter()
        .find_map(|o| match o {
            Outgoing::Message(m) => m.tool_call?.function_calls[0].id.clone(),
            _ => None,
        })
        .unwrap();
    h.speak(&tone(300));
    h.speak(&silence(700));
    assert!(
        !h.log.iter().any(|(_, o)| is(o, |c| c.interrupted.is_some())
            || matches!(o, Outgoing::Message(m) if m.tool_call_cancellation.is_some())),
        "{:?}",
        h.log
    );
    h.send(json!({"toolResponse": {"functionResponses": [{"id": id, "name": "get_balance", "response": {"output": 1}}]}}));
    h.settle();
    // The call's turn is answered, then the caller's queued turn.
    let out = h.take();
    let completes = out
        .iter()
        .filter(|o| is(o, |c| c.turn_complete == Some(true)))
        .count();
    assert_eq!(completes, 2);
}

#[test]
fn gemini_25_quirks_are_opt_in() {
    let quirky = |q: Quirks| {
        let mut s = (*scenario(vec![])).clone();
        s.quirks = q;
        Arc::new(s)
    };
    let partial = json!({"clientContent": {"turns": [{"role": "user", "parts": [{"text": "note"}]}], "turnComplete": false}});
    let wedges = Quirks {
        partial_content_wedges_vad: true,
        ..Quirks::default()
    };
    for (profile, replies) in [(Profile::Gemini25, false), (Profile::Gemini38, true)] {
        let mut h = Harness::ready_as(quirky(wedges), profile, json!({}));
        h.send(partial.clone());
        h.speak(&tone(400));
        h.speak(&silence(700));
        h.settle();
        assert_eq!(
            h.log.iter().any(|(_, o)| audio_samples(o) > 0),
            replies,
            "{profile}"
        );
        h.take();
        h.send(json!({"clientContent": {"turnComplete": true}}));
        h.settle();
        assert!(
            h.log.iter().any(|(_, o)| audio_samples(o) > 0),
            "{profile}: unwedged"
        );
    }

    let mut h = Harness::ready(
        quirky(Quirks {
            partial_content_interrupts: true,
            ..Quirks::default()
        }),
        json!({}),
    );
    h.send(text("hi"));
    h.advance(320 * MS);
    h.send(partial);
    assert!(
        h.log
            .iter()
            .any(|(_, o)| is(o, |c| c.interrupted == Some(true)))
    );
}
