//! Engine tests: caller turns, bursty replies, barge-in, client content and tool calls.

use serde_json::json;

use super::*;

#[test]
fn vad_turn_gets_a_bursty_reply_then_turn_complete_after_playback() {
    let mut h = Harness::ready(
        scenario(vec![Turn::new(Some("hello there".into()), reply_clip())]),
        json!({}),
    );
    h.speak(&tone(1000));
    h.speak(&silence(1000));
    h.settle();
    let log = std::mem::take(&mut h.log);

    // Input transcription once the silence window (500 ms) has passed after the speech.
    let (t_in, _) = log
        .iter()
        .find(|(_, o)| is(o, |c| c.input_transcription.is_some()))
        .unwrap();
    assert!((1500 * MS..=1540 * MS).contains(t_in), "{t_in:?}");
    let input = sc(&log[0].1).unwrap().input_transcription.clone().unwrap();
    assert_eq!(input.text.as_deref(), Some("hello there"));

    let audio: Vec<(Duration, usize)> = log
        .iter()
        .filter(|(_, o)| audio_samples(o) > 0)
        .map(|(t, o)| (*t, audio_samples(o)))
        .collect();
    // first_audio_ms after the end of the turn.
    assert_eq!(audio[0].0, *t_in + 300 * MS);
    // 1 s in 40 ms chunks: 25 chunks, every sample sent exactly once.
    assert_eq!(audio.len(), 25);
    assert!(audio.iter().all(|&(_, n)| n == 960));
    // Bursty: three chunks at the same instant, then a pause of 3 × 40 ms / 4 = 30 ms.
    assert!(audio[..3].iter().all(|&(t, _)| t == audio[0].0));
    assert_eq!(audio[3].0, audio[0].0 + 30 * MS);
    // Faster than real time: 1 s of audio generated in well under 1 s.
    let gen_time = audio[24].0 - audio[0].0;
    assert!(gen_time <= 250 * MS, "{gen_time:?}");

    // Transcription: spread over the chunks, sometimes in the same message as audio.
    let text: String = log
        .iter()
        .filter_map(|(_, o)| sc(o)?.output_transcription.as_ref()?.text.clone())
        .collect();
    assert_eq!(text, REPLY_TEXT);
    assert!(log.iter().any(|(_, o)| is(o, |c| c.model_turn.is_some()
        && c.output_transcription.is_some())));
    assert!(log.iter().any(|(_, o)| is(o, |c| c.model_turn.is_none()
        && c.output_transcription.is_some())));

    // generationComplete right after the last chunk; turnComplete when playback ends.
    let gc = log
        .iter()
        .position(|(_, o)| is(o, |c| c.generation_complete == Some(true)))
        .unwrap();
    let tc = log
        .iter()
        .position(|(_, o)| is(o, |c| c.turn_complete == Some(true)))
        .unwrap();
    assert!(gc < tc);
    assert!(
        log[..gc]
            .iter()
            .filter(|(_, o)| audio_samples(o) > 0)
            .count()
            == 25
    );
    assert_eq!(log[gc].0, audio[24].0);
    assert_eq!(
        log[tc].0,
        audio[0].0 + 1000 * MS,
        "one second of playback from the first chunk"
    );
    let Outgoing::Message(m) = &log[tc].1 else {
        panic!()
    };
    let usage = m.usage_metadata.clone().unwrap();
    assert_eq!(usage.response_token_count, Some(25));
    assert!(
        usage.prompt_token_count.unwrap() >= 50,
        "2 s of input audio: {usage:?}"
    );
    assert_eq!(tc, log.len() - 1);
}

#[test]
fn transcriptions_only_when_asked_for() {
    let mut h = Harness::new(scenario(vec![]));
    h.send(json!({"setup": {"model": "models/mock"}}));
    h.speak(&tone(500));
    h.speak(&silence(700));
    h.settle();
    assert!(h.log.iter().any(|(_, o)| audio_samples(o) > 0));
    assert!(
        !h.log
            .iter()
            .any(|(_, o)| is(o, |c| c.input_transcription.is_some()
                || c.output_transcription.is_some()))
    );
}

#[test]
fn barge_in_interrupts_then_completes_and_cancels_tool_calls() {
    let mut h = Harness::ready(scenario(vec![]), json!({}));
    h.speak(&tone(500));
    h.speak(&silence(600));
    // Generation has finished (it is fast) but the client is still playing.
    h.advance(600 * MS);
    assert!(
        h.log
            .iter()
            .any(|(_, o)| is(o, |c| c.generation_complete == Some(true)))
    );
    assert!(
        !h.log
            .iter()
            .any(|(_, o)| is(o, |c| c.turn_complete == Some(true)))
    );
    h.take();
    h.speak(&tone(100));
    let out = h.take();
    let i = out
        .iter()
        .position(|o| is(o, |c| c.interrupted == Some(true)))
        .unwrap();
    let t = out
        .iter()
        .position(|o| is(o, |c| c.turn_complete == Some(true)))
        .unwrap();
    assert!(i < t);
    assert!(out.iter().all(|o| audio_samples(o) == 0));

    // With a blocking call outstanding the barge-in cancels it; a late answer is tolerated.
    let mut h = Harness::ready(
        scenario(vec![tool_turn("get_balance")]),
        json!({"tools": [{"functionDeclarations": [{"name": "get_balance"}]}]}),
    );
    h.send(json!({"clientContent": {"turns": [{"role": "user", "parts": [{"text": "balance?"}]}], "turnComplete": true}}));
    h.advance(400 * MS);
    let id = h
        .take()
        .into_iter()
        .find_map(|o| match o {
            Outgoing::Message(m) => m.tool_call?.function_calls[0].id.clone(),
            _ => None,
        })
        .unwrap();
    h.speak(&tone(100));
    let out = h.take();
    let kinds: Vec<&str> = out
        .iter()
        .map(|o| match o {
            Outgoing::Message(m) if m.tool_call_cancellation.is_some() => "cancel",
            o if is(o, |c| c.interrupted == Some(true)) => "interrupted",
            o if is(o, |c| c.turn_complete == Some(true)) => "turnComplete",
            _ => "other",
        })
        .collect();
    assert_eq!(kinds, ["interrupted", "cancel", "turnComplete"]);
    let Outgoing::Message(m) = &out[1] else {
        panic!()
    };
    assert_eq!(
        m.tool_call_cancellation.as_ref().unwrap().ids,
        vec![id.clone()]
    );
    h.send(json!({"toolResponse": {"functionResponses": [{"id": id, "name": "get_balance", "response": {}}]}}));
    assert!(!h.s.is_closed());
}

#[test]
fn no_interruption_waits_for_the_turn_to_finish() {
    let mut h = Harness::ready(
        scenario(vec![]),
        json!({"realtimeInputConfig": {"activityHandling": "NO_INTERRUPTION"}}),
    );
    h.speak(&tone(500));
    h.speak(&silence(600));
    h.take();
    h.speak(&tone(300));
    h.speak(&silence(600));
    h.settle();
    let log = std::mem::take(&mut h.log);
    assert!(!log.iter().any(|(_, o)| is(o, |c| c.interrupted.is_some())));
    let completes: Vec<usize> = log
        .iter()
        .enumerate()
        .filter(|(_, (_, o))| is(o, |c| c.turn_complete == Some(true)))
        .map(|(i, _)| i)
        .collect();
    assert_eq!(completes.len(), 2);
    // The second reply only starts after the first turn completed.
    let second_audio = log.iter().rposition(|(_, o)| audio_samples(o) > 0).unwrap();
    assert!(second_audio > completes[0]);
    let first_after = log[completes[0] + 1..]
        .iter()
        .position(|(_, o)| audio_samples(o) > 0)
        .unwrap();
    assert!(log[completes[0] + 1 + first_after].0 >= log[completes[0]].0);
}

#[test]
fn client_content_turn_complete_starts_a_reply_and_interrupts() {
    let mut h = Harness::ready(scenario(vec![]), json!({}));
    h.send(json!({"clientContent": {"turns": [{"role": "user", "parts": [{"text": "context"}]}], "turnComplete": false}}));
    h.send(json!({"client_content": {"turns": [{"role": "model", "parts": [{"text": "ok"}]}]}}));
    h.advance(2000 * MS);
    assert!(
        h.log.is_empty(),
        "no reply without turnComplete: {:?}",
        h.log
    );

    h.send(json!({"clientContent": {"turns": [{"role": "user", "parts": [{"text": "hi"}]}], "turnComplete": true}}));
    h.advance(350 * MS);
    let out = h.take();
    assert!(out.iter().any(|o| audio_samples(o) > 0));
    assert!(
        !out.iter()
            .any(|o| is(o, |c| c.input_transcription.is_some())),
        "text is not transcribed"
    );

    // turnComplete:false while speaking only appends.
    h.send(json!({"clientContent": {"turns": [{"role": "user", "parts": [{"text": "note"}]}], "turnComplete": false}}));
    assert!(h.log.is_empty());
    // turnComplete:true while speaking interrupts and starts a new reply.
    h.send(json!({"clientContent": {"turns": [{"role": "user", "parts": [{"text": "again"}]}], "turnComplete": true}}));
    let out = h.take();
    assert!(is(&out[0], |c| c.interrupted == Some(true)));
    assert!(is(&out[1], |c| c.turn_complete == Some(true)));
    h.settle();
    let out = h.take();
    assert!(out.iter().any(|o| audio_samples(o) > 0));
    assert!(out.iter().any(|o| is(o, |c| c.turn_complete == Some(true))));

    // Dev API: role "system" is refused.
    h.send(json!({"clientContent": {"turns": [{"role": "system", "parts": [{"text": "x"}]}], "turnComplete": false}}));
    let (code, reason) = close_of(&h.log);
    assert_eq!(code, 1007);
    assert!(reason.contains("valid role"), "{reason}");
}

fn first_tool_call(out: &[Outgoing]) -> Option<FunctionCall> {
    out.iter().find_map(|o| match o {
        Outgoing::Message(m) => m.tool_call.as_ref().map(|t| t.function_calls[0].clone()),
        _ => None,
    })
}

#[test]
fn blocking_tool_call_pauses_until_its_response() {
    for tools in [
        json!([{"functionDeclarations": [{"name": "get_balance", "behavior": "BLOCKING"}]}]),
        json!([{"functionDeclarations": [{"name": "get_balance"}]}]),
    ] {
        let mut h = Harness::ready(
            scenario(vec![tool_turn("get_balance")]),
            json!({"tools": tools}),
        );
        h.send(json!({"realtimeInput": {"text": "what's my balance?"}}));
        h.advance(300 * MS);
        let out = h.take();
        let call = first_tool_call(&out).unwrap();
        assert_eq!(call.name.as_deref(), Some("get_balance"));
        assert_eq!(call.args, Some(json!({"account": "checking"})));
        let id = call.id.unwrap();
        assert!(!out.iter().any(|o| audio_samples(o) > 0));
        h.advance(5000 * MS);
        assert!(
            h.log.is_empty(),
            "generation must wait for the tool response"
        );
        h.send(json!({"tool_response": {"function_responses": [{"id": id, "name": "get_balance", "response": {"output": 1}}]}}));
        h.advance(299 * MS);
        assert!(h.log.is_empty());
        h.settle();
        let out = h.take();
        assert!(out.iter().any(|o| audio_samples(o) > 0));
        assert!(out.iter().any(|o| is(o, |c| c.turn_complete == Some(true))));
    }

    // An answer to an unknown id closes the session.
    let mut h = Harness::ready(scenario(vec![tool_turn("get_balance")]), json!({}));
    h.send(json!({"realtimeInput": {"text": "balance?"}}));
    h.advance(300 * MS);
    h.send(json!({"toolResponse": {"functionResponses": [{"id": "nope", "name": "get_balance", "response": {}}]}}));
    let (code, reason) = close_of(&h.log);
    assert_eq!(code, 1007);
    assert!(
        reason.contains("function response id \"nope\" not found"),
        "{reason}"
    );
}

#[test]
fn non_blocking_tool_call_keeps_talking_and_context_update_swaps_tools() {
    let mut h = Harness::ready(
        scenario(vec![tool_turn("transfer"), tool_turn("transfer")]),
        json!({"tools": [{"functionDeclarations": [{"name": "transfer", "behavior": "NON_BLOCKING"}]}]}),
    );
    h.send(json!({"realtimeInput": {"text": "transfer me"}}));
    h.advance(300 * MS);
    let out = h.take();
    let call = out
        .iter()
        .position(|o| matches!(o, Outgoing::Message(m) if m.tool_call.is_some()))
        .unwrap();
    assert!(
        audio_samples(&out[call + 1]) > 0,
        "audio right after a non-blocking call"
    );
    h.settle();
    h.take();

    // contextUpdate makes the same function blocking: the next call pauses generation.
    h.send(json!({"contextUpdate": {"systemInstruction": {"parts": [{"text": "You are a specialist."}]},
                                    "tools": {"tools": [{"functionDeclarations": [{"name": "transfer", "behavior": "BLOCKING"}]}]}}}));
    assert!(h.log.is_empty(), "contextUpdate starts no turn");
    h.send(json!({"realtimeInput": {"text": "again"}}));
    h.advance(2000 * MS);
    let out = h.take();
    assert!(first_tool_call(&out).is_some());
    assert!(!out.iter().any(|o| audio_samples(o) > 0));
    assert_eq!(
        h.s.config().unwrap().system_instruction,
        Some(Content {
            role: None,
            parts: vec![crate::model::gemini::wire::Part::text(
                "You are a specialist."
            )]
        })
    );
}

#[test]
fn vertex_matches_a_response_without_id_and_counts_candidates() {
    let mut h = Harness::at(
        scenario(vec![tool_turn("get_balance")]),
        Endpoint {
            backend: Backend::Vertex,
            api_version: "v1beta1".into(),
        },
    );
    h.send(json!({"setup": {"model": "projects/p/locations/us-central1/publishers/google/models/gemini-live-2.5-flash-native-audio"}}));
    h.send(json!({"clientContent": {"turns": [{"role": "user", "parts": [{"text": "balance?"}]}], "turnComplete": true}}));
    h.advance(300 * MS);
    assert!(first_tool_call(&h.take()).is_some());
    h.send(json!({"toolResponse": {"functionResponses": [{"name": "get_balance", "response": {"output": 1}}]}}));
    h.settle();
    let out = h.take();
    assert!(out.iter().any(|o| audio_samples(o) > 0));
    let Some(Outgoing::Message(last)) = out.last() else {
        panic!()
    };
    let usage = last.usage_metadata.clone().unwrap();
    assert_eq!(usage.candidates_token_count, Some(25));
    assert_eq!(usage.response_token_count, None);
}

#[test]
fn non_blocking_responses_may_continue() {
    let mut h = Harness::ready(
        scenario(vec![tool_turn("lookup")]),
        json!({"tools": [{"functionDeclarations": [{"name": "lookup", "behavior": "NON_BLOCKING"}]}]}),
    );
    h.send(json!({"realtimeInput": {"text": "look it up"}}));
    h.advance(300 * MS);
    let id = first_tool_call(&h.take()).unwrap().id.unwrap();
    let part = |more: bool| {
        json!({"toolResponse": {"functionResponses": [
        {"id": id, "name": "lookup", "response": {"output": "partial"}, "willContinue": more, "scheduling": "SILENT"}]}})
    };
    h.send(part(true));
    h.send(part(true));
    h.send(part(false));
    assert!(!h.s.is_closed());
    h.send(part(false));
    let (code, reason) = close_of(&h.log);
    assert_eq!(code, 1007);
    assert!(reason.contains("not found"), "{reason}");
}
