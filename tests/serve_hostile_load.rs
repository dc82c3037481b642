//! Fifty concurrent calls through `baton serve`, one of them fed garbage on every input: its
//! Twilio socket carries malformed, oversized, binary and half-valid messages between real media,
//! and its model session (and only its: the daemon's first model connection goes to a hostile
//! server, the rest to the mock model) answers with frames no Live model would send. The hostile
//! call ends cleanly, and the other 49 end with normal figures.

use crate::support;

use std::time::Duration;

use base64::Engine;
use futures_util::{SinkExt, StreamExt};
use tokio::net::TcpListener;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

use baton::leg::twilio::caller::{self, CallerEnd};
use support::{Daemon, assert_normal, finished_calls, speaking_caller};

const GOOD_CALLS: usize = 49;
const HOSTILE: &str = "MZhostile";
/// Underruns a good call may have: a few ticks of scheduling noise with 50 real-time calls, the
/// daemon, the mock model and 50 callers sharing two cores in one unoptimised test process.
const MAX_UNDERRUNS: u64 = 5;
/// A call whose playout clock released more than this share of its frames a whole tick late was
/// starved of CPU by the machine (other builds), not by the hostile call: its underruns say
/// nothing about isolation and are reported, not asserted. Everything else is asserted always.
const STARVED_LATE_SHARE: f64 = 0.25;

/// Frames no Live model sends, each a different way of being wrong.
fn model_garbage(i: usize) -> Message {
    let b64 = |n: usize| base64::engine::general_purpose::STANDARD.encode(vec![0x11u8; n]);
    let audio = |mime: &str, data: &str| {
        format!(
            r#"{{"serverContent":{{"modelTurn":{{"parts":[{{"inlineData":{{"mimeType":"{mime}","data":"{data}"}}}}]}}}}}}"#
        )
    };
    let text: String = match i % 12 {
        0 => "not json at all".into(),
        1 => r#"[{"setupComplete":{}}]"#.into(),
        2 => r#"{"serverContent":{"turnComplete":"yes"}}"#.into(),
        3 => audio("audio/pcm;rate=24000", "@@@@"),
        4 => audio("audio/pcm;rate=24000", &b64(4801)),
        5 => audio("audio/pcm;rate=0", &b64(480)),
        6 => audio("image/png", &b64(480)),
        7 => r#"{"toolCall":{"functionCalls":[{"id":5}]}}"#.into(),
        8 => format!(r#"{{"x":{}{}}}"#, "[".repeat(3000), "]".repeat(3000)),
        9 => r#"{"goAway":{"timeLeft":"soon"}}"#.into(),
        10 => {
            return Message::binary(
                (0..2048u32)
                    .map(|n| (n.wrapping_mul(2_654_435_761) >> 13) as u8)
                    .collect::<Vec<u8>>(),
            );
        }
        _ => format!(
            r#"{{"serverContent":{{"outputTranscription":{{"text":"{}"}}}}}}"#,
            "\u{fffd}".repeat(20_000)
        ),
    };
    if i.is_multiple_of(2) {
        Message::text(text)
    } else {
        Message::binary(text.into_bytes())
    }
}

/// The hostile model: setupComplete, then garbage every 10 ms for four seconds, then a close
/// with a code and reason no service uses.
async fn hostile_model(tcp: tokio::net::TcpStream) {
    let Ok(mut ws) = tokio_tungstenite::accept_async(tcp).await else {
        return;
    };
    let _setup = ws.next().await;
    let _ = ws
        .send(Message::binary(br#"{"setupComplete":{}}"#.to_vec()))
        .await;
    for i in 0..400 {
        if ws.send(model_garbage(i)).await.is_err() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let _ = ws
        .send(Message::Close(Some(CloseFrame {
            code: CloseCode::from(4321),
            reason: "\u{1F4A5} garbage".into(),
        })))
        .await;
    while let Some(Ok(_)) = ws.next().await {}
}

/// A model endpoint whose first connection is the hostile model and every later one is relayed
/// byte for byte to the mock model at `mock`. Returns its URL and a signal of the first connection.
async fn model_front(mock: std::net::SocketAddr) -> (String, tokio::sync::oneshot::Receiver<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("ws://{}", listener.local_addr().unwrap());
    let (first_tx, first_rx) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let mut first = Some(first_tx);
        while let Ok((mut tcp, _)) = listener.accept().await {
            let _ = tcp.set_nodelay(true);
            if let Some(tx) = first.take() {
                let _ = tx.send(());
                tokio::spawn(hostile_model(tcp));
                continue;
            }
            tokio::spawn(async move {
                let Ok(mut upstream) = tokio::net::TcpStream::connect(mock).await else {
                    return;
                };
                let _ = upstream.set_nodelay(true);
                let _ = tokio::io::copy_bidirectional(&mut tcp, &mut upstream).await;
            });
        }
    });
    (url, first_rx)
}

/// Messages no Twilio bridge sends, between real ones.
fn twilio_garbage(i: usize) -> Message {
    let media = |payload: &str| {
        format!(
            r#"{{"event":"media","sequenceNumber":"{n}","streamSid":"{HOSTILE}","media":{{"track":"inbound","chunk":"{n}","timestamp":"{t}","payload":"{payload}"}}}}"#,
            n = i + 3,
            t = i * 20
        )
    };
    let ulaw = |n: usize| base64::engine::general_purpose::STANDARD.encode(vec![0x7Eu8; n]);
    let text = match i % 10 {
        0 => "garbage, not JSON".to_owned(),
        1 => media("%%%not base64%%%"),
        2 => media(&ulaw(160)),
        3 => format!(r#"{{"event":"media","pad":"{}"}}"#, "x".repeat(100_000)),
        4 => r#"{"event":"dtmf","dtmf":{"digit":"123"}}"#.to_owned(),
        5 => r#"{"event":{"nested":true}}"#.to_owned(),
        6 => media(&ulaw(7)),
        7 => r#"{"event":"mark"}"#.to_owned(),
        8 => return Message::binary(vec![0xFF; 3000]),
        _ => format!(r#"{{"event":"start","start":{}}}"#, "[".repeat(200)),
    };
    Message::text(text)
}

/// The hostile caller: a valid `connected` and `start` (so a call begins), then garbage and
/// media every 10 ms for three seconds, then the TCP connection dropped without a close.
async fn hostile_caller(url: String) {
    let (mut ws, _) = tokio_tungstenite::connect_async(url.as_str())
        .await
        .unwrap();
    ws.send(Message::text(
        r#"{"event":"connected","protocol":"Call","version":"1.0.0"}"#,
    ))
    .await
    .unwrap();
    let start = format!(
        r#"{{"event":"start","sequenceNumber":"1","streamSid":"{HOSTILE}","start":{{"streamSid":"{HOSTILE}","accountSid":"AC00000000000000000000000000000000","callSid":"CAhostile","tracks":["inbound"],"customParameters":{{}},"mediaFormat":{{"encoding":"audio/x-mulaw","sampleRate":8000,"channels":1}}}}}}"#
    );
    ws.send(Message::text(start)).await.unwrap();
    for i in 0..300 {
        if ws.send(twilio_garbage(i)).await.is_err() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    drop(ws);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_hostile_call_among_fifty_ends_alone() {
    let opts = std::sync::Arc::new(baton::mock::MockOptions::new(std::sync::Arc::new(
        baton::mock::Scenario::builtin(),
    )));
    let mock = baton::mock::bind("127.0.0.1:0", opts, None)
        .await
        .unwrap()
        .spawn();
    let (front, first_connection) = model_front(mock.local_addr()).await;
    let config = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\ndrain_timeout_s = 1\n[model]\nbackend = \"mock\"\nurl = \"{front}\"\n[limits]\nmax_calls = 60\n"
    );
    let d = Daemon::start(&config).await;
    let mut finished = d.app.calls.subscribe_finished();
    let started = std::time::Instant::now();

    let hostile = tokio::spawn(hostile_caller(d.twilio_url()));
    // The daemon opens the hostile call's model session after its `start`: once that first
    // model connection is made (to the hostile model), the other calls may start.
    tokio::time::timeout(Duration::from_secs(10), first_connection)
        .await
        .expect("the hostile call reached the model")
        .unwrap();
    let mut good = Vec::new();
    for i in 0..GOOD_CALLS {
        let url = d.twilio_url();
        let opts = speaking_caller(&format!("MZgood{i:02}"), Duration::from_secs(8));
        good.push(tokio::spawn(async move { caller::dial(&url, opts).await }));
        // Calls arrive one by one, as they would, not in one burst.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    hostile.await.unwrap();
    for (i, c) in good.into_iter().enumerate() {
        let report = c.await.unwrap().unwrap();
        assert_eq!(report.end, CallerEnd::HungUp, "caller {i}: {report:?}");
        assert_eq!(report.bad_messages, 0, "caller {i}: {:?}", report.errors);
    }
    let ended = finished_calls(&mut finished, GOOD_CALLS + 1, Duration::from_secs(20)).await;
    let figures: Vec<String> = ended
        .iter()
        .filter_map(|c| {
            let r = c.outcome.as_ref().ok()?;
            Some(format!(
                "{}: underruns {} late {} first_audio {:?}",
                c.stream_sid, r.underruns, r.late_ticks, r.first_audio_ms
            ))
        })
        .collect();
    eprintln!("{}", figures.join("\n"));
    let (mut normal, mut starved) = (0, 0);
    for call in &ended {
        if call.stream_sid == HOSTILE {
            // It ended (no panic, no hang); its report names what was wrong.
            if let Ok(r) = &call.outcome {
                assert!(!r.protocol_errors.is_empty(), "{r:?}");
                eprintln!(
                    "hostile call: ended with {:?}, {} protocol errors, e.g. {:?}",
                    r.end_reason,
                    r.protocol_errors.len(),
                    r.protocol_errors.first()
                );
            }
        } else {
            assert_normal(call, u64::MAX);
            let r = call.outcome.as_ref().unwrap();
            let late_share = r.late_ticks as f64 / r.frames_played.max(1) as f64;
            if late_share <= STARVED_LATE_SHARE {
                assert_normal(call, MAX_UNDERRUNS);
            } else {
                starved += 1;
            }
            normal += 1;
        }
    }
    assert_eq!(normal, GOOD_CALLS);
    if starved > 0 {
        eprintln!(
            "{starved} of {GOOD_CALLS} calls were starved of CPU by the machine (more than \
             {STARVED_LATE_SHARE} of their ticks late); their underruns were not asserted"
        );
    }
    assert_eq!(d.calls_ended().await, 0);
    eprintln!("{} calls in {:?}", GOOD_CALLS + 1, started.elapsed());
    d.stop().await;
}
