//! Caller ↔ leg over a real loopback socket: a tiny axum server checks the upgrade's signature,
//! `accept`s the stream and runs a loopback "agent" that plays every caller frame straight back;
//! the Twilio-protocol caller `dial`s it. Also the leg's behaviour with raw, misbehaving clients.

use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::extract::{State, WebSocketUpgrade};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::serve::ListenerExt;
use baton::audio::{Frame, vad};
use baton::leg::twilio::caller::{CallerEnd, CallerError, CallerOptions, CallerReport, dial};
use baton::leg::twilio::server::{LegEnd, LegStats, TwilioLegOptions, accept, configure_upgrade};
use baton::leg::twilio::signature::{AuthToken, verify_upgrade};
use baton::leg::twilio::stream::{StartInfo, StreamOptions};
use baton::leg::{LegCommand, LegEvent, PlayedKind};
use futures_util::{SinkExt, StreamExt};
use tokio::sync::mpsc;
use tokio::time::timeout;
use tokio_tungstenite::connect_async;
use tokio_tungstenite::tungstenite::Message;

const PUBLIC_URL: &str = "wss://baton.example.com/twilio";
const TOKEN: &str = "0123456789abcdef0123456789abcdef";

#[derive(Clone, Copy, Debug)]
enum Mode {
    /// Play every caller frame straight back.
    Echo,
    /// At caller frame 10 queue one second of tone at once; at frame 15 clear it; at frame 40
    /// play 100 ms of tone again.
    BurstThenClear,
}

#[derive(Debug)]
enum Outcome {
    Refused(String),
    Done {
        info: Box<StartInfo>,
        frames: u64,
        heard: u64,
        dtmf: Vec<char>,
        /// Frames played whose buffer the leg handed back, the same samples.
        given_back: u64,
        stats: Box<LegStats>,
    },
}

#[derive(Clone)]
struct Harness {
    mode: Mode,
    opts: TwilioLegOptions,
    outcomes: mpsc::UnboundedSender<Outcome>,
}

async fn upgrade(State(h): State<Harness>, headers: HeaderMap, ws: WebSocketUpgrade) -> Response {
    if let Err(e) = verify_upgrade(&headers, PUBLIC_URL, &AuthToken::new(TOKEN)) {
        return (StatusCode::FORBIDDEN, e.to_string()).into_response();
    }
    configure_upgrade(ws).on_upgrade(move |socket| async move {
        let outcome = match accept(socket, h.opts.clone()).await {
            Err(e) => Outcome::Refused(e.to_string()),
            Ok((leg, info, task)) => agent(leg, info, task, h.mode).await,
        };
        let _ = h.outcomes.send(outcome);
    })
}

fn tone(ts: Duration, k: usize) -> Frame {
    let samples = (0..160)
        .map(|i| {
            let t = (k * 160 + i) as f64 / 8000.0;
            (8000.0 * (2.0 * std::f64::consts::PI * 440.0 * t).sin()) as i16
        })
        .collect();
    Frame {
        rate: 8000,
        ts,
        samples,
    }
}

async fn agent(
    mut leg: baton::leg::LegHandle,
    info: StartInfo,
    task: tokio::task::JoinHandle<LegStats>,
    mode: Mode,
) -> Outcome {
    assert_eq!(leg.rate, 8000);
    let (mut frames, mut heard, mut dtmf, mut given_back) = (0u64, 0u64, Vec::new(), 0u64);
    let play = |frame, leg: &mut baton::leg::LegHandle| {
        leg.send(LegCommand::Play {
            frame,
            kind: PlayedKind::Voice,
        })
        .ok()
        .flatten()
    };
    while let Some(ev) = leg.recv().await {
        match ev {
            LegEvent::Frame { frame, .. } => {
                frames += 1;
                match mode {
                    Mode::Echo => {
                        let samples = frame.samples.clone();
                        // The bridge leg writes a frame out in place and hands its buffer back
                        // for the call's playout to fill again.
                        if play(frame, &mut leg).is_some_and(|f| f.samples == samples) {
                            given_back += 1;
                        }
                    }
                    Mode::BurstThenClear => {
                        let base = Duration::from_secs(100);
                        if frames == 10 {
                            for k in 0..50 {
                                play(
                                    tone(base + Duration::from_millis(20 * k as u64), k),
                                    &mut leg,
                                );
                            }
                        } else if frames == 15 {
                            let _ = leg.send(LegCommand::Clear);
                        } else if frames == 40 {
                            for k in 50..55 {
                                play(
                                    tone(base + Duration::from_millis(20 * k as u64), k),
                                    &mut leg,
                                );
                            }
                        }
                    }
                }
            }
            LegEvent::Heard { .. } => heard += 1,
            LegEvent::Dtmf { digit } => dtmf.push(digit),
            LegEvent::Stop(_) => {
                let _ = leg.send(LegCommand::Hangup);
                break;
            }
        }
    }
    let stats = Box::new(task.await.expect("leg task"));
    Outcome::Done {
        info: Box::new(info),
        frames,
        heard,
        dtmf,
        given_back,
        stats,
    }
}

async fn serve(
    mode: Mode,
    opts: TwilioLegOptions,
) -> (SocketAddr, mpsc::UnboundedReceiver<Outcome>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let app = Router::new()
        .route("/twilio", get(upgrade))
        .with_state(Harness {
            mode,
            opts,
            outcomes: tx,
        });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    tokio::spawn(async move { axum::serve(listener, app).await });
    (addr, rx)
}

async fn outcome(rx: &mut mpsc::UnboundedReceiver<Outcome>) -> Outcome {
    timeout(Duration::from_secs(10), rx.recv())
        .await
        .expect("the agent reports within 10 s")
        .expect("an outcome")
}

/// Deterministic noise: a sharp autocorrelation peak, so the echo delay is unambiguous.
fn noise(len: usize) -> Vec<i16> {
    let mut x: u32 = 12345;
    (0..len)
        .map(|_| {
            x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
            ((x >> 16) as i16) / 4
        })
        .collect()
}

fn caller_opts(samples: Vec<i16>) -> CallerOptions {
    let mut o = CallerOptions::new(samples);
    o.auth_token = Some(AuthToken::new(TOKEN));
    o.signed_url = Some(PUBLIC_URL.into());
    o.custom_parameters.insert("tenant".into(), "acme".into());
    o.quiet_after = Duration::from_millis(300);
    o.max_tail = Duration::from_secs(2);
    o
}

/// The lag (in samples, 0..max) at which `right` best matches `left`, and the normalised
/// correlation there.
fn best_lag(left: &[i16], right: &[i16], max: usize) -> (usize, f64) {
    let n = left.len().min(right.len().saturating_sub(max));
    let energy = |s: &[i16]| s.iter().map(|&v| f64::from(v).powi(2)).sum::<f64>();
    let el = energy(&left[..n]);
    (0..max)
        .map(|lag| {
            let r = &right[lag..lag + n];
            let dot: f64 = left[..n]
                .iter()
                .zip(r)
                .map(|(&a, &b)| f64::from(a) * f64::from(b))
                .sum();
            let denom = (el * energy(r)).sqrt();
            (lag, if denom > 0.0 { dot / denom } else { 0.0 })
        })
        .fold((0, f64::MIN), |best, c| if c.1 > best.1 { c } else { best })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn caller_hears_its_own_audio_back_through_the_leg() {
    let (addr, mut outcomes) = serve(Mode::Echo, TwilioLegOptions::default()).await;
    let fixture = noise(8000); // one second
    let url = format!("ws://{addr}/twilio");
    let report: CallerReport = dial(&url, caller_opts(fixture)).await.expect("dial");

    let Outcome::Done {
        info,
        frames,
        heard,
        given_back,
        stats,
        ..
    } = outcome(&mut outcomes).await
    else {
        panic!("leg refused the caller")
    };
    assert_eq!(given_back, frames, "every frame played came back for reuse");
    // What start carried reached the leg.
    assert_eq!(info.custom_parameters["tenant"], "acme");
    assert_eq!(
        info.call_sid.as_deref(),
        Some("CA00000000000000000000000000000000")
    );
    assert_eq!(report.end, CallerEnd::HungUp);
    assert_eq!(stats.end, LegEnd::Stopped);

    // Every frame the caller sent reached the agent as one 20 ms frame, and came back.
    assert!(
        report.frames_sent >= 50,
        "sent {} received {} marks {}/{} dropped {} ms",
        report.frames_sent,
        report.media_received,
        report.marks_echoed,
        report.marks_received,
        report.dropped_ms
    );
    // It hangs up once the agent has been quiet for 300 ms, well before the 2 s tail limit.
    assert!(
        report.frames_sent < 50 + 60,
        "sent {} frames",
        report.frames_sent
    );
    assert_eq!(frames, stats.stream.frames_in);
    assert!(
        frames + 2 >= report.frames_sent,
        "sent {} got {frames}",
        report.frames_sent
    );
    assert!(
        report.media_received + 5 >= frames,
        "echoed {frames}, received {}",
        report.media_received
    );
    assert_eq!(stats.stream.bad_messages, 0);
    assert_eq!(stats.frames_dropped, 0);

    // The recording's right channel is the caller's own audio, delayed by the round trip plus
    // Twilio-style playout (a frame or two on loopback).
    let rec = &report.recording;
    assert_eq!(rec.rate, 8000);
    assert_eq!(rec.caller.len(), rec.agent.len());
    let (lag, corr) = best_lag(&rec.caller[..8000], &rec.agent, 8000 * 300 / 1000);
    let lag_ms = lag as f64 / 8.0;
    assert!(
        corr > 0.9,
        "right channel does not hold the caller's audio (corr {corr:.3})"
    );
    assert!((20.0..=300.0).contains(&lag_ms), "echo delay {lag_ms} ms");

    // One mark per played frame; the caller echoed each once its audio had played; the leg
    // reported them heard. At hang-up, what was still queued (about the echo delay) is not.
    let in_flight = (lag / 160) as u64 + 3;
    assert!(report.marks_received <= report.media_received);
    assert!(report.marks_received + 1 >= report.media_received);
    assert!(report.marks_echoed <= report.marks_received);
    assert!(
        report.marks_echoed + in_flight >= report.marks_received,
        "sent {} received {} marks {}/{} dropped {} ms",
        report.frames_sent,
        report.media_received,
        report.marks_echoed,
        report.marks_received,
        report.dropped_ms
    );
    assert!(
        stats.stream.marks_played + in_flight >= stats.stream.marks_sent,
        "{:?}",
        stats.stream
    );
    assert_eq!(heard, stats.stream.marks_played);
    assert_eq!(stats.stream.marks_dropped, 0);

    // Behavioural cadence: audio reaches the caller at the 20 ms frame rate (generous bounds).
    assert!(report.cadence.intervals >= 40, "{:?}", report.cadence);
    assert!(report.cadence.p50_dev_us < 8_000, "{:?}", report.cadence);
    let sent = stats.send_cadence();
    assert!(sent.intervals >= 40 && sent.p50_dev_us < 8_000, "{sent:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clear_drops_queued_audio_and_its_marks_come_back_as_dropped() {
    let (addr, mut outcomes) = serve(Mode::BurstThenClear, TwilioLegOptions::default()).await;
    let url = format!("ws://{addr}/twilio");
    let mut opts = caller_opts(vec![0; 8000]);
    opts.quiet_after = Duration::from_millis(200);
    let report = dial(&url, opts).await.expect("dial");
    let Outcome::Done { heard, stats, .. } = outcome(&mut outcomes).await else {
        panic!("leg refused the caller")
    };

    assert_eq!(report.clears_received, 1);
    assert_eq!(report.media_received, 55);
    // Every mark came back: those played one by one, those cleared all at once.
    assert_eq!(report.marks_echoed, 55);
    let st = &stats.stream;
    assert_eq!((st.marks_sent, st.clears), (55, 1));
    assert_eq!(st.marks_played + st.marks_dropped, 55, "{st:?}");
    assert!(
        st.marks_dropped >= 25,
        "most of the burst was cleared: {st:?}"
    );
    assert!(
        st.marks_played >= 5,
        "the audio after the clear was heard: {st:?}"
    );
    assert_eq!(heard, st.marks_played);

    // The caller heard the start of the burst, not the rest of it, and then the last 100 ms.
    assert!(
        report.dropped_ms >= 500,
        "sent {} received {} marks {}/{} dropped {} ms",
        report.frames_sent,
        report.media_received,
        report.marks_echoed,
        report.marks_received,
        report.dropped_ms
    );
    let rec = &report.recording;
    let voiced_frames = rec
        .agent
        .chunks(160)
        .filter(|f| vad::rms_dbfs(f) > vad::DEFAULT_THRESHOLD_DBFS)
        .count();
    let played = st.marks_played as usize;
    assert!(
        (played.saturating_sub(2)..=played + 2).contains(&voiced_frames),
        "heard {voiced_frames} voiced frames, {played} marks played"
    );
    assert!(voiced_frames < 35, "the cleared audio was not heard");
}

#[tokio::test]
async fn a_bad_signature_is_refused_before_the_upgrade() {
    let (addr, _outcomes) = serve(Mode::Echo, TwilioLegOptions::default()).await;
    let url = format!("ws://{addr}/twilio");
    let mut opts = caller_opts(vec![0; 800]);
    opts.auth_token = Some(AuthToken::new("not-the-token"));
    let err = dial(&url, opts).await.unwrap_err();
    assert!(
        matches!(err, CallerError::Refused { status: 403, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("403"), "{err}");

    let mut unsigned = caller_opts(vec![0; 800]);
    unsigned.auth_token = None;
    assert!(matches!(
        dial(&url, unsigned).await.unwrap_err(),
        CallerError::Refused { status: 403, .. }
    ));
}

/// A raw WebSocket client with a valid signature, for misbehaving-peer tests.
async fn raw_client(
    addr: SocketAddr,
) -> tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>> {
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    let mut req = format!("ws://{addr}/twilio").into_client_request().unwrap();
    let sig = baton::leg::twilio::signature::sign(PUBLIC_URL, &[], &AuthToken::new(TOKEN));
    req.headers_mut()
        .insert("X-Twilio-Signature", sig.parse().unwrap());
    connect_async(req).await.expect("raw connect").0
}

const START: &str = r#"{"event":"start","sequenceNumber":"1","streamSid":"MZ1","start":{"streamSid":"MZ1","accountSid":"AC1","callSid":"CA1","tracks":["inbound"],"customParameters":{},"mediaFormat":{"encoding":"audio/x-mulaw","sampleRate":8000,"channels":1}}}"#;

fn media_json(chunk: u64) -> String {
    let payload = "/".repeat(213) + "w=="; // 160 bytes of 0xFF (μ-law silence)
    format!(
        r#"{{"event":"media","sequenceNumber":"{}","streamSid":"MZ1","media":{{"track":"inbound","chunk":"{chunk}","timestamp":"{}","payload":"{payload}"}}}}"#,
        chunk + 1,
        (chunk - 1) * 20
    )
}

#[tokio::test]
async fn garbage_is_survived_and_an_abrupt_close_ends_the_leg() {
    let (addr, mut outcomes) = serve(Mode::Echo, TwilioLegOptions::default()).await;
    let mut ws = raw_client(addr).await;
    let send = |t: String| Message::Text(t.into());
    ws.send(send(
        r#"{"event":"connected","protocol":"Call","version":"1.0.0"}"#.into(),
    ))
    .await
    .unwrap();
    ws.send(send("garbage".into())).await.unwrap();
    ws.send(send(media_json(1))).await.unwrap(); // before start
    ws.send(send(START.into())).await.unwrap();
    ws.send(send(media_json(1))).await.unwrap();
    ws.send(send(
        r#"{"event":"media","media":{"payload":"%%%"}}"#.into(),
    ))
    .await
    .unwrap();
    ws.send(Message::Binary(vec![1u8, 2, 3].into()))
        .await
        .unwrap();
    ws.send(send(format!(
        r#"{{"event":"media","media":{{"payload":"{}"}}}}"#,
        "A".repeat(1 << 20)
    )))
    .await
    .unwrap();
    ws.send(send(
        r#"{"event":"dtmf","streamSid":"MZ1","dtmf":{"digit":"5"}}"#.into(),
    ))
    .await
    .unwrap();
    ws.send(send(media_json(2))).await.unwrap();
    // The echoed frames come back as media + mark.
    let mut got = 0;
    while got < 4 {
        let msg = timeout(Duration::from_secs(5), ws.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        if msg.is_text() {
            got += 1;
        }
    }
    // Drop the TCP connection without a close frame.
    drop(ws);
    let Outcome::Done {
        frames,
        dtmf,
        stats,
        ..
    } = outcome(&mut outcomes).await
    else {
        panic!("refused")
    };
    assert_eq!(frames, 2);
    assert_eq!(dtmf, ['5']);
    // garbage, media before start, bad base64, 1 MB message.
    assert_eq!(stats.stream.bad_messages, 4, "{:?}", stats.stream);
    assert_eq!(stats.binary_ignored, 1);
    assert!(
        matches!(
            stats.end,
            LegEnd::SocketClosed { .. } | LegEnd::SocketError(_)
        ),
        "{:?}",
        stats.end
    );
}

#[tokio::test]
async fn accept_gives_up_without_start_and_refuses_a_foreign_account() {
    let opts = TwilioLegOptions {
        start_timeout: Duration::from_millis(300),
        stream: StreamOptions {
            expected_account_sid: Some("AC2".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    let (addr, mut outcomes) = serve(Mode::Echo, opts).await;

    let mut silent = raw_client(addr).await;
    let Outcome::Refused(e) = outcome(&mut outcomes).await else {
        panic!("accepted")
    };
    assert!(e.contains("no \"start\""), "{e}");
    let closed = timeout(Duration::from_secs(5), silent.next())
        .await
        .unwrap();
    assert!(
        matches!(closed, Some(Ok(Message::Close(Some(ref f)))) if u16::from(f.code) == 1008),
        "{closed:?}"
    );

    let mut foreign = raw_client(addr).await;
    foreign.send(Message::Text(START.into())).await.unwrap();
    let Outcome::Refused(e) = outcome(&mut outcomes).await else {
        panic!("accepted")
    };
    assert!(e.contains("AC1") && e.contains("AC2"), "{e}");
    let closed = timeout(Duration::from_secs(5), foreign.next())
        .await
        .unwrap();
    assert!(
        matches!(closed, Some(Ok(Message::Close(Some(ref f)))) if u16::from(f.code) == 1008),
        "{closed:?}"
    );
}
