//! Engine tests: a warm transfer's brief session (the scenario's `[brief]`) on every Gemini
//! profile: the brief on the starting text, the answer's function call on the person's first
//! turn, its response accepted without more speech, and nothing of the `[[turn]]`s.

use serde_json::json;

use super::*;
use crate::mock::brief::{Answer, Brief};

fn reply(text: &str, ms: usize) -> Reply {
    Reply {
        audio: vec![1000i16; 24 * ms].into(),
        text: text.into(),
    }
}

fn brief_scenario(answer: Answer, answer_reply: Option<Reply>) -> Arc<Scenario> {
    let mut s = (*scenario(vec![tool_turn("get_balance")])).clone();
    s.greeting = Some(reply("greeting", 200));
    s.brief = Some(Brief {
        marker: "You are briefing".into(),
        reply: reply("Hi Ravi, a caller about savings.", 400),
        answer,
        answer_reply,
        drop_mid_brief: false,
    });
    Arc::new(s)
}

const INSTRUCTION: &str = "You are briefing Ravi, who is about to take a transferred call.";
const START: &str = "The person has answered. Brief them now.";

fn setup(profile: Profile) -> Value {
    let model = match profile {
        Profile::Gemini25 => "models/gemini-2.5-flash-native-audio-preview-09-2025",
        Profile::Gemini31 => "models/gemini-3.1-flash-live-preview",
        _ => "models/gemini-3.8-live",
    };
    json!({"model": model,
           "systemInstruction": {"parts": [{"text": INSTRUCTION}]},
           "tools": [{"functionDeclarations": [
               {"name": "accept_transfer"},
               {"name": "decline_transfer", "parameters": {"type": "object",
                   "properties": {"reason": {"type": "string"}}}}]}]})
}

/// Everything sent, as server messages.
fn messages(out: Vec<Outgoing>) -> Vec<ServerMessage> {
    out.into_iter()
        .map(|o| match o {
            Outgoing::Message(m) => m,
            other => panic!("unexpected {other:?}"),
        })
        .collect()
}

fn said(ms: &[ServerMessage]) -> String {
    ms.iter()
        .filter_map(|m| {
            m.server_content
                .as_ref()?
                .output_transcription
                .as_ref()?
                .text
                .clone()
        })
        .collect()
}

fn calls(ms: &[ServerMessage]) -> Vec<FunctionCall> {
    ms.iter()
        .filter_map(|m| m.tool_call.as_ref())
        .flat_map(|t| t.function_calls.clone())
        .collect()
}

/// baton's starting text: clientContent, or realtimeInput.text on gemini-3.1.
fn start(h: &mut Harness, profile: Profile) {
    if profile == Profile::Gemini31 {
        h.send(json!({"realtimeInput": {"text": START}}));
    } else {
        h.send(
            json!({"clientContent": {"turns": [{"role": "user", "parts": [{"text": START}]}],
                                        "turnComplete": true}}),
        );
    }
}

/// A brief session of `profile` up to the person's answer: the starting text is answered with
/// the brief; returns the harness and what the person's turn produced.
fn brief_then_answer(profile: Profile, scenario: Arc<Scenario>) -> (Harness, Vec<ServerMessage>) {
    let mut h = Harness::with(scenario, Endpoint::default(), profile);
    let mut setup = setup(profile);
    setup["outputAudioTranscription"] = json!({});
    setup["inputAudioTranscription"] = json!({});
    h.send(json!({ "setup": setup }));
    let setup_done = messages(h.take());
    assert!(setup_done[0].setup_complete.is_some(), "{setup_done:?}");
    assert!(h.s.is_brief());
    start(&mut h, profile);
    h.settle();
    let brief = messages(h.take());
    assert_eq!(
        said(&brief),
        "Hi Ravi, a caller about savings.",
        "{profile:?}"
    );
    assert!(calls(&brief).is_empty());
    // No greeting, no persona.
    assert_eq!(h.s.persona(), None);
    h.speak(&[8000i16; 16 * 600]);
    h.speak(&[0i16; 16 * 800]);
    h.settle();
    let answer = messages(h.take());
    (h, answer)
}

#[test]
fn accept_on_every_profile_then_the_response_is_ignored() {
    for profile in [Profile::Gemini38, Profile::Gemini25, Profile::Gemini31] {
        let sc = brief_scenario(Answer::Accept, Some(reply("Putting them through.", 300)));
        let (mut h, answer) = brief_then_answer(profile, sc);
        let c = calls(&answer);
        assert_eq!(c.len(), 1, "{profile:?}: {answer:?}");
        assert_eq!(c[0].name.as_deref(), Some("accept_transfer"));
        assert_eq!(c[0].args, Some(json!({})));
        // No input transcription of a scripted [[turn]] line.
        assert!(
            answer.iter().all(|m| m
                .server_content
                .as_ref()
                .is_none_or(|c| c.input_transcription.is_none())),
            "{profile:?}"
        );
        let id = c[0].id.clone().unwrap();
        h.send(json!({"toolResponse": {"functionResponses": [
            {"id": id, "name": "accept_transfer", "response": {"result": "ok, Ravi is bridged"}}]}}));
        h.settle();
        let after = messages(h.take());
        // BLOCKING: the answer's reply follows the response; nothing else is said.
        assert_eq!(said(&after), "Putting them through.", "{profile:?}");
        assert!(calls(&after).is_empty());
        assert!(!h.s.is_closed());
    }
}

#[test]
fn decline_gives_the_reason_and_none_gives_the_default_reply() {
    let sc = brief_scenario(
        Answer::Decline {
            reason: "busy with a client".into(),
        },
        None,
    );
    let (mut h, answer) = brief_then_answer(Profile::Gemini38, sc);
    let c = calls(&answer);
    assert_eq!(c.len(), 1);
    assert_eq!(c[0].name.as_deref(), Some("decline_transfer"));
    assert_eq!(c[0].args, Some(json!({"reason": "busy with a client"})));
    h.send(json!({"toolResponse": {"functionResponses": [
        {"id": c[0].id.clone().unwrap(), "name": "decline_transfer", "response": {}}]}}));
    h.settle();
    assert_eq!(said(&messages(h.take())), "");

    let sc = brief_scenario(Answer::None, None);
    let (mut h, answer) = brief_then_answer(Profile::Gemini31, sc);
    assert!(calls(&answer).is_empty());
    assert_eq!(said(&answer), REPLY_TEXT);
    // Later turns: the default reply.
    h.speak(&[8000i16; 16 * 600]);
    h.speak(&[0i16; 16 * 800]);
    h.settle();
    assert_eq!(said(&messages(h.take())), REPLY_TEXT);
}

#[test]
fn without_the_marker_the_session_follows_the_turns() {
    let sc = brief_scenario(Answer::Accept, None);
    let mut h = Harness::with(sc, Endpoint::default(), Profile::Gemini38);
    h.send(json!({"setup": {"model": "models/gemini-3.8-live",
                            "outputAudioTranscription": {},
                            "systemInstruction": {"parts": [{"text": "You are Asha."}]},
                            "tools": [{"functionDeclarations": [{"name": "get_balance"}]}]}}));
    assert!(!h.s.is_brief());
    h.settle();
    // The greeting is said; the first turn is the scripted one (its tool call).
    assert_eq!(said(&messages(h.take())[1..]), "greeting");
    h.send(
        json!({"clientContent": {"turns": [{"role": "user", "parts": [{"text": START}]}],
                                    "turnComplete": true}}),
    );
    h.settle();
    let c = calls(&messages(h.take()));
    assert_eq!(c[0].name.as_deref(), Some("get_balance"));
}

#[test]
fn drop_mid_brief_closes_only_a_brief_session_half_way_through_the_brief() {
    let mut sc = (*brief_scenario(Answer::Accept, None)).clone();
    sc.brief.as_mut().unwrap().drop_mid_brief = true;
    let sc = Arc::new(sc);
    for profile in [Profile::Gemini38, Profile::Gemini25, Profile::Gemini31] {
        let mut h = Harness::with(sc.clone(), Endpoint::default(), profile);
        h.send(json!({ "setup": setup(profile) }));
        h.take();
        start(&mut h, profile);
        h.settle();
        let out = h.take();
        let audio = out
            .iter()
            .filter(|o| {
                matches!(o, Outgoing::Message(m) if m.server_content.as_ref()
                    .and_then(|c| c.model_turn.as_ref()).is_some())
            })
            .count();
        // The 400 ms brief is ten 40 ms chunks sent three at a time: the connection closes after
        // the burst that completes five (the sixth).
        assert!(
            (5..10).contains(&audio),
            "{profile:?}: half of the brief was said, not all of it: {audio} chunks"
        );
        assert!(
            matches!(out.last(), Some(Outgoing::Close { code: 1011, .. })),
            "{profile:?}: the brief's connection closes mid-brief: {out:?}"
        );
        assert!(
            !out.iter().any(
                |o| matches!(o, Outgoing::Message(m) if m.server_content.as_ref()
                .is_some_and(|c| c.turn_complete == Some(true)))
            ),
            "{profile:?}: the brief never finished"
        );
        assert!(h.s.is_closed());
    }
    // A session that is not a brief plays its replies to the end.
    let mut h = Harness::with(sc, Endpoint::default(), Profile::Gemini38);
    h.send(json!({"setup": {"model": "models/gemini-3.8-live",
                            "outputAudioTranscription": {},
                            "systemInstruction": {"parts": [{"text": "You are Asha."}]}}}));
    h.settle();
    assert_eq!(said(&messages(h.take())[1..]), "greeting");
    assert!(!h.s.is_closed());
}
