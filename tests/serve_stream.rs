//! `baton serve` with generic WebSocket (`/stream`) clients over loopback in real time: PCM16 at
//! 16 and 8 kHz and Opus at 48 kHz complete calls and hear the replies, marks come back in
//! playback order, transcripts arrive live; a bad `start` is refused with a reason while another
//! call runs unaffected; a close without `stop` is counted as a hang-up or a failure by its code.

use crate::support;

use std::path::Path;
use std::time::Duration;

use baton::leg::stream::client::{self, ClientError, ClientOptions, ClientReport};
use baton::leg::stream::{Encoding, Format};
use futures_util::{SinkExt, StreamExt};
use support::{Daemon, ROOT, voiced_segments};
use tokio_tungstenite::tungstenite::Message;

fn config() -> String {
    support::mock_config("audio-fixtures/scenarios/demo.toml", "")
}

fn url(d: &Daemon) -> String {
    format!("ws://{}/stream", d.addr)
}

/// Half a second of silence, the caller's first turn, then silence for the reply.
fn caller_turn(format: Format) -> ClientOptions {
    let c1 = baton::audio::wav::read(&Path::new(ROOT).join("audio-fixtures/clips/caller_01.wav"))
        .unwrap();
    let mut pcm = vec![0i16; 8000];
    pcm.extend_from_slice(&c1.samples);
    pcm.extend(std::iter::repeat_n(0, 8000));
    let samples = baton::audio::resample::resample_all(&pcm, 16_000, format.sample_rate).unwrap();
    let mut opts = ClientOptions::new(format, samples);
    opts.max_tail = Duration::from_secs(10);
    opts
}

fn assert_heard_a_reply(r: &ClientReport, what: &str) {
    assert_eq!(r.end, "client stop", "{what}: {r:?}");
    assert!(r.errors.is_empty(), "{what}: {:?}", r.errors);
    let segs = voiced_segments(&r.recording.agent, r.recording.rate);
    // The caller finishes speaking at 3.1 s; the reply (2.6 s) follows it.
    assert!(
        segs.iter().any(|(s, e)| *s > 3.0 && e - s > 1.5),
        "{what}: no reply heard: {segs:?}"
    );
    // A mark after the reply, echoed once played, in the order sent.
    assert!(!r.marks_received.is_empty(), "{what}: no mark");
    assert_eq!(r.marks_echoed, r.marks_received, "{what}");
    let expected: Vec<String> = (1..=r.marks_received.len())
        .map(|i| format!("reply-{i}"))
        .collect();
    assert_eq!(r.marks_received, expected, "{what}");
    // Live transcripts, then the summary in the final stop.
    assert!(
        r.transcripts
            .iter()
            .any(|(role, text)| role == "agent" && !text.is_empty()),
        "{what}: {:?}",
        r.transcripts
    );
    let (reason, summary) = r.stop.as_ref().expect("a final stop");
    assert_eq!(reason, "caller hung up", "{what}");
    assert!(
        summary["turns"][0]["agent_text"]
            .as_str()
            .is_some_and(|t| t.contains("emergency fund")),
        "{what}: {summary}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pcm16_and_opus_clients_hear_the_replies() {
    let d = Daemon::start(&config()).await;
    let formats = [
        (Encoding::Pcm16, 16_000, Some(1001)),
        (Encoding::Pcm16, 8_000, None),
        (Encoding::Opus, 48_000, None),
    ];
    let mut calls = Vec::new();
    for (encoding, sample_rate, chunk) in formats {
        let format = Format {
            encoding,
            sample_rate,
        };
        let mut opts = caller_turn(format);
        // Odd-sized messages: baton re-frames them.
        opts.chunk_bytes = chunk;
        let url = url(&d);
        calls.push(tokio::spawn(async move {
            let r = client::dial(&url, opts).await;
            (format, r.unwrap_or_else(|e| panic!("{format}: {e}")))
        }));
    }
    for c in calls {
        let (format, report) = c.await.unwrap();
        assert_heard_a_reply(&report, &format.to_string());
    }
    assert_eq!(d.calls_ended().await, 0);
    d.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_start_is_refused_with_a_reason() {
    let d = Daemon::start(&config()).await;
    let good = tokio::spawn({
        let url = url(&d);
        let format = Format {
            encoding: Encoding::Pcm16,
            sample_rate: 16_000,
        };
        async move { client::dial(&url, caller_turn(format)).await.unwrap() }
    });
    let refusals = [
        (
            r#"{"event":"start","format":{"encoding":"mp3","sample_rate":16000}}"#,
            1003,
            "unknown encoding \"mp3\"",
        ),
        (
            r#"{"event":"start","format":{"encoding":"pcm16","sample_rate":44100}}"#,
            1003,
            "sample_rate 44100 is not supported",
        ),
        (r#"{"event":"start"}"#, 1008, "\"start\" needs \"format\""),
        (r#"{"event":"mark","name":"x"}"#, 1008, "before \"start\""),
        ("not json", 1008, "not JSON"),
    ];
    for (first, code, reason) in refusals {
        let (mut ws, _) = tokio_tungstenite::connect_async(url(&d)).await.unwrap();
        ws.send(Message::text(first)).await.unwrap();
        let mut error = None;
        let close = loop {
            match tokio::time::timeout(Duration::from_secs(5), ws.next()).await {
                Ok(Some(Ok(Message::Text(t)))) => error = Some(t.as_str().to_owned()),
                Ok(Some(Ok(Message::Close(f)))) => break f.expect("a close frame"),
                other => panic!("{first}: no close: {other:?}"),
            }
        };
        assert_eq!(u16::from(close.code), code, "{first}");
        assert!(close.reason.contains(reason), "{first}: {}", close.reason);
        let error: serde_json::Value =
            serde_json::from_str(&error.expect("an error message before the close")).unwrap();
        assert_eq!(error["fatal"], true, "{error}");
        assert!(
            error["message"]
                .as_str()
                .is_some_and(|m| m.contains(reason)),
            "{error}"
        );
    }
    // Audio before start.
    let (mut ws, _) = tokio_tungstenite::connect_async(url(&d)).await.unwrap();
    ws.send(Message::binary(vec![0u8; 640])).await.unwrap();
    let refused = loop {
        match tokio::time::timeout(Duration::from_secs(5), ws.next()).await {
            Ok(Some(Ok(Message::Close(f)))) => break f.expect("a close frame"),
            Ok(Some(Ok(_))) => {}
            other => panic!("no close: {other:?}"),
        }
    };
    assert_eq!(u16::from(refused.code), 1008);
    // The client's own error type carries the reason too.
    let mut bad = caller_turn(Format {
        encoding: Encoding::Pcm16,
        sample_rate: 16_000,
    });
    bad.format.sample_rate = 11_025;
    match client::dial(&url(&d), bad).await {
        Err(ClientError::Refused { code, message, .. }) => {
            assert_eq!(code, Some(1003));
            assert!(message.is_some_and(|m| m.contains("11025")));
        }
        other => panic!("{other:?}"),
    }
    let report = good.await.unwrap();
    assert_heard_a_reply(&report, "the call beside the refusals");
    assert_eq!(d.calls_ended().await, 0);
    d.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_barge_in_makes_baton_send_clear() {
    let d = Daemon::start(&config()).await;
    // The caller says turn 1, then talks over the agent's reply 1.4 s after finishing.
    let read = |name: &str| {
        baton::audio::wav::read(&Path::new(ROOT).join("audio-fixtures/clips").join(name))
            .unwrap()
            .samples
    };
    let mut pcm = vec![0i16; 8000];
    pcm.extend_from_slice(&read("caller_01.wav"));
    pcm.extend(std::iter::repeat_n(0, 16000 * 14 / 10));
    let barge_at = pcm.len() as f64 / 16000.0;
    pcm.extend_from_slice(&read("caller_02.wav"));
    pcm.extend(std::iter::repeat_n(0, 16000));
    let format = Format {
        encoding: Encoding::Pcm16,
        sample_rate: 16_000,
    };
    let report = client::dial(&url(&d), ClientOptions::new(format, pcm))
        .await
        .unwrap();
    assert!(report.clears >= 1, "{report:?}");
    let segs = voiced_segments(&report.recording.agent, 16_000);
    let cut = segs
        .iter()
        .find(|(s, e)| *s < barge_at && *e > barge_at - 1.0)
        .copied();
    let (_, end) =
        cut.unwrap_or_else(|| panic!("no reply around the barge-in at {barge_at}s: {segs:?}"));
    assert!(
        end < barge_at + 0.3,
        "the interrupted reply kept playing until {end}s (barge-in at {barge_at}s)"
    );
    // The cut reply got no mark; the next one did.
    assert_eq!(report.marks_echoed, report.marks_received);
    d.stop().await;
}

/// A client that ends by closing its socket, without `stop`: a close frame with no code (a
/// browser's `ws.close()`) is the caller hanging up; one whose code says something broke
/// (1011) is the caller's side failing. Each call is counted so in `/metrics`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_close_without_stop_is_a_hang_up_unless_its_code_says_it_broke() {
    use tokio_tungstenite::tungstenite::protocol::CloseFrame;
    use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
    let d = Daemon::start(&config()).await;
    for close in [None, Some(CloseCode::Error)] {
        let (mut ws, _) = tokio_tungstenite::connect_async(url(&d)).await.unwrap();
        ws.send(Message::text(
            r#"{"event":"start","format":{"encoding":"pcm16","sample_rate":16000}}"#,
        ))
        .await
        .unwrap();
        for _ in 0..10 {
            ws.send(Message::binary(vec![0u8; 640])).await.unwrap();
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        ws.close(close.map(|code| CloseFrame {
            code,
            reason: "".into(),
        }))
        .await
        .unwrap();
        // Read until baton closes its side too.
        while let Ok(Some(Ok(_))) = tokio::time::timeout(Duration::from_secs(5), ws.next()).await {}
    }
    let counted = |end: &str| {
        let wanted = format!("baton_calls_total{{leg=\"stream\",end=\"{end}\"}} 1");
        d.app.metrics.render(0).contains(&wanted)
    };
    for _ in 0..600 {
        if counted("caller_hung_up") && counted("leg_failed") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let metrics = d.app.metrics.render(0);
    assert!(counted("caller_hung_up"), "{metrics}");
    assert!(counted("leg_failed"), "{metrics}");
    d.stop().await;
}
