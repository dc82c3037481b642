//! Unit tests of the OpenAI mock engine, on a virtual clock: event order of a spoken turn,
//! function calls, concurrency errors, barge-in, truncation, manual turns, the lifetime.

use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value, json};

use super::*;
use crate::mock::clip;
use crate::mock::scenario::{Reply, Scenario, ScriptedToolCall, Turn};

struct Harness {
    s: RealtimeSession,
    now: Instant,
    seen: Vec<Value>,
}

fn scenario() -> Scenario {
    let mut sc = Scenario::builtin();
    sc.timing.first_audio = Duration::from_millis(100);
    sc.timing.speed = 4.0;
    let mut t = Turn::new(
        Some("What is my balance?".into()),
        Reply {
            audio: clip::synthetic_utterance().into(),
            text: "Your balance is five dollars.".into(),
        },
    );
    t.tool_call = Some(ScriptedToolCall {
        name: "get_balance".into(),
        args: json!({"account": "checking"}),
    });
    sc.turns.push(Turn::new(
        Some("Hello there.".into()),
        Reply {
            audio: clip::synthetic_utterance().into(),
            text: "Hi, how can I help?".into(),
        },
    ));
    sc.turns.push(t);
    sc
}

impl Harness {
    fn new(api: Api) -> Self {
        Harness::with(api, scenario())
    }

    fn with(api: Api, scenario: Scenario) -> Self {
        let mut s = RealtimeSession::new(
            Arc::new(scenario),
            api,
            "gpt-realtime",
            Duration::from_secs(600),
        );
        let now = Instant::now();
        s.start(now);
        let mut h = Harness {
            s,
            now,
            seen: vec![],
        };
        h.drain();
        h
    }

    fn drain(&mut self) -> Vec<Value> {
        let mut got = vec![];
        while let Some(o) = self.s.poll_transmit() {
            match o {
                Outgoing::Event(v) => got.push(v),
                Outgoing::Close { code, reason } => {
                    got.push(json!({"close": code, "reason": reason}))
                }
            }
        }
        self.seen.extend(got.clone());
        got
    }

    fn send(&mut self, v: Value) -> Vec<Value> {
        self.s.handle_frame(v.to_string().as_bytes(), self.now);
        self.drain()
    }

    /// Runs timers up to `for_`.
    fn run(&mut self, for_: Duration) -> Vec<Value> {
        let end = self.now + for_;
        let mut got = vec![];
        while let Some(t) = self.s.poll_timeout().filter(|t| *t <= end) {
            self.now = self.now.max(t);
            self.s.handle_timeout(self.now);
            got.extend(self.drain());
        }
        self.now = end;
        got
    }

    /// Caller speech then silence, in 20 ms appends of 24 kHz PCM.
    fn speak(&mut self, ms: usize, silence_ms: usize) -> Vec<Value> {
        self.speak_until(ms, silence_ms, None)
    }

    /// Like `speak`, but the silence stops as soon as an event of type `until` arrives.
    fn speak_until(&mut self, ms: usize, silence_ms: usize, until: Option<&str>) -> Vec<Value> {
        let mut got: Vec<Value> = vec![];
        let tone: Vec<i16> = (0..480)
            .map(|i| ((i as f64 * 0.3).sin() * 8000.0) as i16)
            .collect();
        let seen = |got: &[Value]| until.is_some_and(|u| got.iter().any(|e| e["type"] == u));
        for i in 0..(ms + silence_ms) / 20 {
            let chunk: Vec<i16> = if i * 20 < ms {
                tone.clone()
            } else {
                vec![0; 480]
            };
            let b: Vec<u8> = chunk.iter().flat_map(|s| s.to_le_bytes()).collect();
            got.extend(
                self.send(
                    json!({"type": "input_audio_buffer.append", "audio": STANDARD.encode(b)}),
                ),
            );
            if seen(&got) {
                return got;
            }
            got.extend(self.run(Duration::from_millis(20)));
            if seen(&got) {
                return got;
            }
        }
        got
    }
}

fn types(evs: &[Value]) -> Vec<&str> {
    evs.iter()
        .map(|e| e["type"].as_str().unwrap_or("close"))
        .collect()
}

fn find<'a>(evs: &'a [Value], t: &str) -> &'a Value {
    evs.iter()
        .find(|e| e["type"] == t)
        .unwrap_or_else(|| panic!("no {t} in {:?}", types(evs)))
}

#[test]
fn session_created_then_updated_with_the_effective_config() {
    let mut h = Harness::new(Api::Ga);
    assert_eq!(h.seen[0]["type"], "session.created");
    assert_eq!(h.seen[0]["session"]["model"], "gpt-realtime");
    let got = h.send(json!({"type": "session.update", "session": {"type": "realtime", "instructions": "Be brief."}}));
    assert_eq!(types(&got), ["session.updated"]);
    assert_eq!(got[0]["session"]["instructions"], "Be brief.");
    assert_eq!(got[0]["session"]["audio"]["output"]["voice"], "alloy");
    let bad = h.send(json!({"type": "session.update", "event_id": "c1",
        "session": {"type": "realtime", "audio": {"input": {"format": {"type": "audio/pcm", "rate": 16000}}}}}));
    assert_eq!(types(&bad), ["error"]);
    assert_eq!(bad[0]["error"]["event_id"], "c1");
    assert_eq!(bad[0]["error"]["param"], "session.audio.input.format.rate");
}

#[test]
fn a_spoken_turn_in_protocol_order() {
    let mut h = Harness::new(Api::Ga);
    h.send(
        json!({"type": "session.update", "session": {"type": "realtime",
        "audio": {"input": {"transcription": {"model": "gpt-4o-mini-transcribe"}}}}}),
    );
    let mut got = h.speak(600, 700);
    got.extend(h.run(Duration::from_secs(5)));
    let t = types(&got);
    let pos = |name: &str| {
        t.iter()
            .position(|x| *x == name)
            .unwrap_or_else(|| panic!("no {name} in {t:?}"))
    };
    assert!(pos("input_audio_buffer.speech_started") < pos("input_audio_buffer.speech_stopped"));
    assert!(pos("input_audio_buffer.speech_stopped") < pos("input_audio_buffer.committed"));
    assert!(
        pos("input_audio_buffer.committed")
            < pos("conversation.item.input_audio_transcription.completed")
    );
    assert!(pos("response.created") < pos("response.output_item.added"));
    assert!(pos("response.content_part.added") < pos("response.output_audio.delta"));
    assert!(pos("response.output_audio.done") < pos("response.done"));
    assert!(pos("response.done") < pos("rate_limits.updated"));
    assert_eq!(
        find(
            &got,
            "conversation.item.input_audio_transcription.completed"
        )["transcript"],
        "Hello there."
    );
    let transcript: String = got
        .iter()
        .filter(|e| e["type"] == "response.output_audio_transcript.delta")
        .map(|e| e["delta"].as_str().unwrap())
        .collect();
    assert_eq!(transcript, "Hi, how can I help?");
    assert_eq!(
        find(&got, "response.done")["response"]["status"],
        "completed"
    );
    let started = find(&got, "input_audio_buffer.speech_started");
    assert_eq!(
        started["item_id"],
        find(&got, "input_audio_buffer.committed")["item_id"]
    );
}

#[test]
fn function_call_round_trip_and_concurrency_errors() {
    let mut h = Harness::new(Api::Ga);
    h.send(
        json!({"type": "session.update", "session": {"type": "realtime",
        "tools": [{"type": "function", "name": "get_balance", "parameters": {"type": "object"}}]}}),
    );
    // First turn: an ordinary reply; response.create during it is refused.
    h.speak_until(600, 1000, Some("response.created"));
    let busy = h.send(json!({"type": "response.create", "event_id": "c7"}));
    assert_eq!(
        busy[0]["error"]["code"],
        "conversation_already_has_active_response"
    );
    assert_eq!(busy[0]["error"]["event_id"], "c7");
    h.run(Duration::from_secs(5));
    let none = h.send(json!({"type": "response.cancel"}));
    assert_eq!(none[0]["error"]["code"], "response_cancel_not_active");
    // Second turn: a function call ends the response; the reply follows its output.
    let mut got = h.speak(600, 700);
    got.extend(h.run(Duration::from_secs(1)));
    let call = find(&got, "response.function_call_arguments.done").clone();
    assert_eq!(call["name"], "get_balance");
    assert_eq!(call["arguments"], "{\"account\":\"checking\"}");
    assert!(!types(&got).contains(&"response.output_audio.delta"));
    let wrong = h.send(json!({"type": "conversation.item.create",
        "item": {"type": "function_call_output", "call_id": "call_nope", "output": "{}"}}));
    assert_eq!(wrong[0]["error"]["param"], "item.call_id");
    let ok = h.send(json!({"type": "conversation.item.create",
        "item": {"type": "function_call_output", "call_id": call["call_id"], "output": "{\"balance\":5}"}}));
    assert_eq!(
        types(&ok),
        ["conversation.item.added", "conversation.item.done"]
    );
    h.send(json!({"type": "response.create"}));
    let reply = h.run(Duration::from_secs(5));
    let transcript = find(&reply, "response.output_audio_transcript.done")["transcript"].clone();
    assert_eq!(transcript, "Your balance is five dollars.");
}

#[test]
fn barge_in_cancels_and_truncation_is_bounded_by_what_was_produced() {
    let mut h = Harness::new(Api::Ga);
    h.speak_until(600, 1000, Some("response.created"));
    // Only the first burst or so has gone out.
    let first = h.run(Duration::from_millis(110));
    let item = find(&first, "response.output_audio.delta")["item_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let got = h.speak(200, 0);
    let t = types(&got);
    let started = t
        .iter()
        .position(|x| *x == "input_audio_buffer.speech_started")
        .unwrap();
    let done = t.iter().position(|x| *x == "response.done").unwrap();
    assert!(started < done, "{t:?}");
    let response = &got[done]["response"];
    assert_eq!(response["status"], "cancelled");
    assert_eq!(response["status_details"]["reason"], "turn_detected");
    assert_eq!(response["output"][0]["status"], "incomplete");
    let too_far = h.send(
        json!({"type": "conversation.item.truncate", "item_id": item,
        "content_index": 0, "audio_end_ms": 60_000}),
    );
    assert_eq!(too_far[0]["error"]["param"], "audio_end_ms");
    let ok = h.send(
        json!({"type": "conversation.item.truncate", "item_id": item,
        "content_index": 0, "audio_end_ms": 50}),
    );
    assert_eq!(types(&ok), ["conversation.item.truncated"]);
    let unknown = h.send(
        json!({"type": "conversation.item.truncate", "item_id": "item_x",
        "content_index": 0, "audio_end_ms": 1}),
    );
    assert_eq!(unknown[0]["error"]["param"], "item_id");
}

#[test]
fn client_cancel_without_server_interruption() {
    let mut h = Harness::new(Api::Ga);
    h.send(json!({"type": "session.update", "session": {"type": "realtime",
        "audio": {"input": {"turn_detection": {"type": "server_vad", "interrupt_response": false}}}}}));
    h.speak_until(600, 1000, Some("response.created"));
    h.run(Duration::from_millis(110));
    let got = h.speak(200, 0);
    assert!(types(&got).contains(&"input_audio_buffer.speech_started"));
    assert!(!types(&got).contains(&"response.done"), "the reply runs on");
    let cancel = h.send(json!({"type": "response.cancel"}));
    let done = find(&cancel, "response.done");
    assert_eq!(
        done["response"]["status_details"]["reason"],
        "client_cancelled"
    );
    assert!(
        h.run(Duration::from_secs(2))
            .iter()
            .all(|e| e["type"] != "response.output_audio.delta")
    );
}

#[test]
fn manual_turns_and_items() {
    let mut h = Harness::new(Api::Ga);
    h.send(
        json!({"type": "session.update", "session": {"type": "realtime",
        "audio": {"input": {"turn_detection": null}}}}),
    );
    let empty = h.send(json!({"type": "input_audio_buffer.commit"}));
    assert_eq!(empty[0]["error"]["code"], "input_audio_buffer_commit_empty");
    let got = h.speak(600, 700);
    assert!(
        got.is_empty(),
        "no VAD events in manual mode: {:?}",
        types(&got)
    );
    let committed = h.send(json!({"type": "input_audio_buffer.commit"}));
    assert_eq!(committed[0]["type"], "input_audio_buffer.committed");
    let sys = h.send(json!({"type": "conversation.item.create",
        "item": {"type": "message", "role": "system", "content": [{"type": "input_text", "text": "Be kind."}]}}));
    assert_eq!(
        types(&sys),
        ["conversation.item.added", "conversation.item.done"]
    );
    let bad = h.send(json!({"type": "conversation.item.create", "previous_item_id": "nope",
        "item": {"type": "message", "role": "system", "content": [{"type": "input_text", "text": "x"}]}}));
    assert_eq!(bad[0]["error"]["param"], "previous_item_id");
    let audio = h.send(json!({"type": "conversation.item.create",
        "item": {"type": "message", "role": "assistant", "content": [{"type": "output_audio", "audio": "AAAA"}]}}));
    assert_eq!(audio[0]["type"], "error");
    h.send(json!({"type": "response.create"}));
    let reply = h.run(Duration::from_secs(5));
    assert_eq!(
        find(&reply, "response.output_audio_transcript.done")["transcript"],
        "Hi, how can I help?"
    );
    let junk = h.send(json!({"type": "input_audio_buffer.append"}));
    assert_eq!(junk[0]["error"]["type"], "invalid_request_error");
    let unknown = h.send(json!({"type": "session.frobnicate"}));
    assert_eq!(unknown[0]["error"]["param"], "type");
}

#[test]
fn g711_formats_and_beta_names() {
    let mut h = Harness::new(Api::Beta);
    assert!(h.seen[0]["session"].get("input_audio_format").is_some());
    h.send(
        json!({"type": "session.update", "session": {"output_audio_format": "g711_ulaw",
        "turn_detection": null}}),
    );
    h.send(json!({"type": "conversation.item.create",
        "item": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Hello there."}]}}));
    h.send(json!({"type": "response.create"}));
    let got = h.run(Duration::from_secs(5));
    let delta = find(&got, "response.audio.delta");
    let bytes = STANDARD.decode(delta["delta"].as_str().unwrap()).unwrap();
    // 40 ms of 8 kHz μ-law: one byte per sample.
    assert_eq!(bytes.len(), 320);
    assert!(types(&got).contains(&"response.audio_transcript.done"));
    assert!(types(&got).contains(&"conversation.item.created"));
}

#[test]
fn the_session_expires_with_an_error_then_a_close() {
    let mut h = Harness::new(Api::Ga);
    let got = h.run(Duration::from_secs(601));
    assert_eq!(got[0]["error"]["code"], "session_expired");
    assert_eq!(got[1]["close"], 1000);
    assert!(h.s.is_closed());
}

/// The scenario with a `[brief]` whose answer is `answer`, said back with "Thanks." when the
/// answer makes a call.
fn brief_scenario(answer: crate::mock::brief::Answer) -> Scenario {
    let mut sc = scenario();
    let with_reply = answer != crate::mock::brief::Answer::None;
    sc.brief = Some(crate::mock::brief::Brief {
        marker: "You are briefing".into(),
        reply: Reply {
            audio: clip::synthetic_utterance().into(),
            text: "Hi Ravi, a caller about savings.".into(),
        },
        answer,
        answer_reply: with_reply.then(|| Reply {
            audio: clip::synthetic_utterance().into(),
            text: "Thanks.".into(),
        }),
        drop_mid_brief: false,
    });
    sc
}

/// A brief session up to the person's answer: setup, the starting text (the brief is said), then
/// the person's turn; returns what that turn produced.
fn brief_answer(h: &mut Harness) -> Vec<Value> {
    h.send(
        json!({"type": "session.update", "session": {"type": "realtime",
        "instructions": "You are briefing Ravi, who is about to take a transferred call.",
        "tools": [{"type": "function", "name": "accept_transfer", "parameters": {"type": "object"}},
                  {"type": "function", "name": "decline_transfer", "parameters": {"type": "object",
                      "properties": {"reason": {"type": "string"}}}}]}}),
    );
    assert!(h.s.is_brief());
    h.send(
        json!({"type": "conversation.item.create", "item": {"type": "message", "role": "user",
        "content": [{"type": "input_text", "text": "The person has answered. Brief them now."}]}}),
    );
    h.send(json!({"type": "response.create"}));
    let brief = h.run(Duration::from_secs(5));
    assert_eq!(
        find(&brief, "response.output_audio_transcript.done")["transcript"],
        "Hi Ravi, a caller about savings."
    );
    let mut got = h.speak(600, 700);
    got.extend(h.run(Duration::from_secs(2)));
    got
}

#[test]
fn a_brief_session_accepts_then_ignores_the_output() {
    let mut h = Harness::with(Api::Ga, brief_scenario(crate::mock::brief::Answer::Accept));
    let got = brief_answer(&mut h);
    let call = find(&got, "response.function_call_arguments.done").clone();
    assert_eq!(
        (call["name"].as_str(), call["arguments"].as_str()),
        (Some("accept_transfer"), Some("{}"))
    );
    assert!(!types(&got).contains(&"response.output_audio.delta"));
    h.send(json!({"type": "conversation.item.create",
        "item": {"type": "function_call_output", "call_id": call["call_id"], "output": "{\"ok\":true}"}}));
    h.send(json!({"type": "response.create"}));
    let after = h.run(Duration::from_secs(5));
    assert_eq!(
        find(&after, "response.output_audio_transcript.done")["transcript"],
        "Thanks."
    );
    assert!(!types(&after).contains(&"response.function_call_arguments.done"));
}

#[test]
fn a_brief_session_declines_or_gives_no_answer() {
    use crate::mock::brief::Answer;
    let mut h = Harness::with(
        Api::Ga,
        brief_scenario(Answer::Decline {
            reason: "busy".into(),
        }),
    );
    let got = brief_answer(&mut h);
    let call = find(&got, "response.function_call_arguments.done").clone();
    assert_eq!(call["name"], "decline_transfer");
    assert_eq!(call["arguments"], "{\"reason\":\"busy\"}");

    let mut h = Harness::with(Api::Ga, brief_scenario(Answer::None));
    let got = brief_answer(&mut h);
    assert!(!types(&got).contains(&"response.function_call_arguments.done"));
    let default = Scenario::builtin().default_reply.text;
    assert_eq!(
        find(&got, "response.output_audio_transcript.done")["transcript"],
        default.as_str()
    );
}

#[test]
fn drop_mid_brief_closes_a_brief_session_half_way_through_the_brief() {
    let mut sc = brief_scenario(crate::mock::brief::Answer::Accept);
    sc.brief.as_mut().unwrap().drop_mid_brief = true;
    // 24 kHz PCM, and μ-law at 8 kHz (the cut is counted at the rate the speech is sent at).
    for format in ["audio/pcm", "audio/pcmu"] {
        let mut h = Harness::with(Api::Ga, sc.clone());
        h.send(
            json!({"type": "session.update", "session": {"type": "realtime",
            "instructions": "You are briefing Ravi, who is about to take a transferred call.",
            "audio": {"output": {"format": {"type": format}}}}}),
        );
        assert!(h.s.is_brief());
        h.send(
            json!({"type": "conversation.item.create", "item": {"type": "message", "role": "user",
            "content": [{"type": "input_text", "text": "The person has answered. Brief them now."}]}}),
        );
        h.send(json!({"type": "response.create"}));
        let got = h.run(Duration::from_secs(5));
        let chunk = (sc.timing.chunk.as_secs_f64() * 24_000.0).round() as usize;
        let chunks = clip::synthetic_utterance().len().div_ceil(chunk);
        let said = types(&got)
            .iter()
            .filter(|t| **t == "response.output_audio.delta")
            .count();
        assert!(
            said >= chunks / 2 && said < chunks,
            "{format}: half of the brief was said, not all of it: {said} of {chunks} deltas"
        );
        assert!(
            !types(&got).contains(&"response.done"),
            "{format}: the brief never finished"
        );
        assert_eq!(got.last().map(|v| v["close"].clone()), Some(json!(1011)));
    }
    // A session that is not a brief answers to the end.
    let mut h = Harness::with(Api::Ga, sc);
    h.send(
        json!({"type": "conversation.item.create", "item": {"type": "message", "role": "user",
        "content": [{"type": "input_text", "text": "Hello there."}]}}),
    );
    h.send(json!({"type": "response.create"}));
    let got = h.run(Duration::from_secs(5));
    assert!(types(&got).contains(&"response.done"), "{got:?}");
    assert!(!got.iter().any(|v| v.get("close").is_some()));
}
