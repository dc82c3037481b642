//! baton's OpenAI Realtime session against `baton mock-model --profile openai` over loopback
//! TCP: the session is set up by `session.update`, caller audio in gives model audio out with
//! both transcripts, a function call round trip, and a barge-in whose `response.cancel` +
//! `conversation.item.truncate` the mock accepts.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tokio::time::timeout;

use baton::mock::clip;
use baton::mock::openai::OpenAiOptions;
use baton::mock::scenario::{Reply, ScriptedToolCall, Turn};
use baton::mock::{MockOptions, Scenario, bind};
use baton::model::ModelEvent;
use baton::model::openai::endpoint::{Endpoint, Secret};
use baton::model::openai::session::{self, Session, SessionConfig, SessionEvent, Transport};
use baton::model::openai::wire::{Api, AudioFormat, ClientEvent, FunctionTool, TurnDetection};

const KEY: &str = "sk-mock-test";

fn scenario() -> Scenario {
    let mut sc = Scenario::builtin();
    sc.timing.first_audio = Duration::from_millis(50);
    sc.turns.push(Turn::new(
        Some("Hello there.".into()),
        Reply {
            audio: clip::synthetic_utterance().into(),
            text: "Hi, how can I help?".into(),
        },
    ));
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
    sc.turns.push(t);
    sc
}

async fn start_mock() -> baton::mock::RunningMockServer {
    let opts = MockOptions {
        api_key: Some(KEY.into()),
        openai: Some(OpenAiOptions::default()),
        ..MockOptions::new(Arc::new(scenario()))
    };
    bind("127.0.0.1:0", Arc::new(opts), None)
        .await
        .unwrap()
        .spawn()
}

fn config(turn_detection: TurnDetection) -> SessionConfig {
    SessionConfig {
        instructions: Some("You are a friendly financial advisor.".into()),
        voice: Some("marin".into()),
        tools: vec![FunctionTool::new(
            "get_balance",
            Some("Look up the caller's balance.".into()),
            json!({"type": "object", "properties": {"account": {"type": "string"}}}),
        )],
        turn_detection: Some(turn_detection),
        ..Default::default()
    }
}

async fn open(base: &str, cfg: &SessionConfig) -> Session {
    let ep = Endpoint::new(
        &format!("{base}/v1"),
        "gpt-realtime",
        Api::Ga,
        Some(Secret::new(KEY)),
    )
    .unwrap();
    timeout(
        Duration::from_secs(10),
        session::connect(&ep, Transport::Network, cfg),
    )
    .await
    .expect("connect timed out")
    .expect("session refused")
}

/// One caller utterance then enough silence for the server VAD, as fast as the socket takes it.
fn say(s: &mut Session) {
    let mut audio = clip::synthetic_utterance();
    audio.extend(vec![0i16; 24_000]);
    for chunk in audio.chunks(480) {
        assert!(s.append_pcm16(chunk, None));
    }
}

/// Model events until one matches `stop` (included), failing after 10 s.
async fn until(s: &mut Session, stop: impl Fn(&ModelEvent) -> bool) -> Vec<ModelEvent> {
    let mut got = vec![];
    loop {
        let ev = timeout(Duration::from_secs(10), s.recv())
            .await
            .unwrap_or_else(|_| panic!("timed out; so far {got:?}"));
        match ev {
            Some(SessionEvent::Model(e, _)) => {
                let done = stop(&e);
                got.push(e);
                if done {
                    return got;
                }
            }
            other => panic!("session ended: {other:?} after {got:?}"),
        }
    }
}

fn output_text(evs: &[ModelEvent]) -> String {
    evs.iter()
        .filter_map(|e| match e {
            ModelEvent::OutputTranscript { text, .. } => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

fn errors(evs: &[ModelEvent]) -> Vec<&String> {
    evs.iter()
        .filter_map(|e| match e {
            ModelEvent::ProtocolError(m) => Some(m),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn audio_in_audio_out_with_transcripts_and_a_function_call() {
    let server = start_mock().await;
    let mut s = open(
        server.base_url(),
        &config(TurnDetection::server_vad(Some(400))),
    )
    .await;
    let setup = until(&mut s, |e| matches!(e, ModelEvent::SetupComplete)).await;
    assert!(errors(&setup).is_empty(), "{setup:?}");

    // Turn 1: a spoken reply.
    say(&mut s);
    let turn = until(&mut s, |e| matches!(e, ModelEvent::TurnComplete)).await;
    assert!(errors(&turn).is_empty(), "{:?}", errors(&turn));
    let samples: usize = turn
        .iter()
        .map(|e| match e {
            ModelEvent::Audio { rate, samples } => {
                assert_eq!(*rate, 24_000);
                samples.len()
            }
            _ => 0,
        })
        .sum();
    assert_eq!(samples, clip::synthetic_utterance().len());
    assert_eq!(output_text(&turn), "Hi, how can I help?");
    assert!(turn.contains(&ModelEvent::InputTranscript {
        text: "Hello there.".into(),
        finished: false
    }));
    let gc = turn
        .iter()
        .position(|e| *e == ModelEvent::GenerationComplete);
    assert!(gc.is_some_and(|i| i + 1 < turn.len()), "{turn:?}");

    // Turn 2: the model calls a function; its result makes the reply.
    say(&mut s);
    let call = until(&mut s, |e| matches!(e, ModelEvent::ToolCall(_))).await;
    let Some(ModelEvent::ToolCall(calls)) = call.last() else {
        unreachable!()
    };
    assert_eq!(calls[0].name, "get_balance");
    assert_eq!(calls[0].args, json!({"account": "checking"}));
    let id = calls[0].id.clone();
    until(&mut s, |e| matches!(e, ModelEvent::TurnComplete)).await;
    assert!(s.tool_response(&id, &json!({"balance": 5})));
    let reply = until(&mut s, |e| matches!(e, ModelEvent::TurnComplete)).await;
    assert!(errors(&reply).is_empty(), "{:?}", errors(&reply));
    assert_eq!(output_text(&reply), "Your balance is five dollars.");
    assert!(reply.iter().any(|e| matches!(e, ModelEvent::Audio { .. })));
    server.stop().await;
}

#[tokio::test]
async fn barge_in_sends_cancel_and_truncate_and_the_mock_accepts_them() {
    let server = start_mock().await;
    // The client decides barge-in itself (the server does not cancel on speech).
    let mut td = TurnDetection::server_vad(Some(400));
    td.interrupt_response = Some(false);
    let mut s = open(server.base_url(), &config(td)).await;
    until(&mut s, |e| matches!(e, ModelEvent::SetupComplete)).await;
    say(&mut s);
    let first = until(&mut s, |e| matches!(e, ModelEvent::Audio { .. })).await;
    assert!(errors(&first).is_empty(), "{first:?}");
    let item = s.audio_item().await.expect("an audio item is playing");
    assert!(item.item_id.starts_with("item_"));
    let sent = s.barge_in(20).await;
    assert!(
        matches!(
            &sent[..],
            [
                ClientEvent::ResponseCancel { .. },
                ClientEvent::ConversationItemTruncate {
                    audio_end_ms: 20,
                    content_index: 0,
                    ..
                }
            ]
        ),
        "{sent:?}"
    );
    let end = until(&mut s, |e| matches!(e, ModelEvent::TurnComplete)).await;
    assert!(end.contains(&ModelEvent::Interrupted), "{end:?}");
    assert!(!end.contains(&ModelEvent::GenerationComplete), "{end:?}");
    assert!(errors(&end).is_empty(), "{:?}", errors(&end));
    // Nothing is refused afterwards either (the truncate answer arrives after response.done).
    let mut late = vec![];
    while let Ok(Some(ev)) = timeout(Duration::from_millis(300), s.recv()).await {
        if let SessionEvent::Model(e, _) = ev {
            late.push(e);
        }
    }
    assert!(errors(&late).is_empty(), "{late:?}");
    assert!(
        !late.iter().any(|e| matches!(e, ModelEvent::Audio { .. })),
        "audio after cancel"
    );
    server.stop().await;
}

#[tokio::test]
async fn g711_both_ways_and_refused_configs() {
    let server = start_mock().await;
    let cfg = SessionConfig {
        input_format: AudioFormat::Pcmu,
        output_format: AudioFormat::Pcmu,
        ..config(TurnDetection::server_vad(Some(400)))
    };
    let mut s = open(server.base_url(), &cfg).await;
    until(&mut s, |e| matches!(e, ModelEvent::SetupComplete)).await;
    let pcm8k =
        baton::audio::resample::resample_all(&clip::synthetic_utterance(), 24_000, 8_000).unwrap();
    let mut ulaw = Vec::new();
    baton::audio::g711::encode_ulaw(&pcm8k, &mut ulaw);
    ulaw.extend(vec![0xffu8; 8_000]);
    let mut json = String::new();
    for chunk in ulaw.chunks(160) {
        baton::model::openai::codec::encode_append_bytes(chunk, &mut json);
        assert!(s.send(baton::model::session::Outbound::Text {
            json: json.clone(),
            received_at: None
        }));
    }
    let turn = until(&mut s, |e| matches!(e, ModelEvent::TurnComplete)).await;
    assert!(errors(&turn).is_empty(), "{:?}", errors(&turn));
    assert!(
        turn.iter()
            .any(|e| matches!(e, ModelEvent::Audio { rate: 8_000, .. }))
    );
    assert_eq!(output_text(&turn), "Hi, how can I help?");

    // A format the service does not take: the session is refused with the error's code.
    let bad = SessionConfig {
        input_format: AudioFormat::Pcm { rate: Some(16_000) },
        ..config(TurnDetection::server_vad(None))
    };
    let ep = Endpoint::new(
        &format!("{}/v1", server.base_url()),
        "gpt-realtime",
        Api::Ga,
        Some(Secret::new(KEY)),
    )
    .unwrap();
    let err = session::connect(&ep, Transport::Network, &bad)
        .await
        .err()
        .expect("refused");
    assert!(err.to_string().contains("invalid_value"), "{err}");
    // A wrong key is refused at the handshake, and the error does not show it.
    let wrong = Endpoint::new(
        &format!("{}/v1", server.base_url()),
        "gpt-realtime",
        Api::Ga,
        Some(Secret::new("sk-wrong-guess")),
    )
    .unwrap();
    let err = session::connect(&wrong, Transport::Network, &cfg)
        .await
        .err()
        .expect("refused");
    assert!(!err.to_string().contains("sk-wrong-guess"), "{err}");
    server.stop().await;
}
