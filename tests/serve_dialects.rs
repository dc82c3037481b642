//! `baton serve` with Telnyx, Plivo, Exotel and Vonage callers (and Twilio on the shared path)
//! over loopback, in real time: each dialect on its own path and detected on `/media-stream`,
//! hearing the agent's reply; barge-in through each dialect's clear; hostile input per dialect
//! ending only its own call; Telnyx's streaming token; each call listed, reported and counted
//! under its dialect's name.

use crate::support;

use std::path::Path;
use std::time::Duration;

use baton::leg::bridge::audio::{AudioFormat, Encoding};
use baton::leg::bridge::caller::{self, CallerEnd, CallerError, CallerOptions, CallerReport};
use baton::leg::bridge::{Dialect, Dialect::*};
use futures_util::{SinkExt, StreamExt};
use support::{Daemon, ROOT, Raw, voiced_segments};
use tokio_tungstenite::tungstenite::Message;

fn clip(name: &str) -> Vec<i16> {
    let w =
        baton::audio::wav::read(&Path::new(ROOT).join(format!("audio-fixtures/clips/{name}.wav")))
            .unwrap();
    assert_eq!(w.rate, 16000);
    w.samples
}

fn pcmu() -> AudioFormat {
    AudioFormat::PCMU_8K
}
fn l16(rate: u32) -> AudioFormat {
    AudioFormat::new(Encoding::L16Le, rate)
}

/// 0.5 s of silence, the caller's first question, 0.5 s of silence (16 kHz).
fn question() -> Vec<i16> {
    let mut pcm = vec![0i16; 8000];
    pcm.extend_from_slice(&clip("caller_01"));
    pcm.extend(std::iter::repeat_n(0, 8000));
    pcm
}

async fn call(
    url: String,
    d: Dialect,
    f: AudioFormat,
    pcm: Vec<i16>,
) -> (Dialect, String, CallerReport) {
    let mut o = CallerOptions::for_dialect(d, f, &pcm, 16000, "fixture").unwrap();
    o.max_tail = Duration::from_secs(10);
    if d == Telnyx {
        o.swap_every = 9;
    }
    let what = format!("{d} {f} via {url}");
    let r = caller::dial(&url, o)
        .await
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    (d, what, r)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_dialect_on_its_own_path_and_detected_on_the_shared_one_hears_the_reply() {
    let d = Daemon::start(&support::mock_config(
        "audio-fixtures/scenarios/demo.toml",
        "",
    ))
    .await;
    let own = [
        (Telnyx, pcmu()),
        (Telnyx, AudioFormat::new(Encoding::Pcma, 8000)),
        (Telnyx, AudioFormat::new(Encoding::L16Be, 16000)),
        (Plivo, pcmu()),
        (Plivo, l16(16000)),
        (Exotel, l16(8000)),
        (Vonage, l16(16000)),
        (Vonage, l16(8000)),
    ];
    let shared = [
        (Twilio, pcmu()),
        (Telnyx, pcmu()),
        (Plivo, l16(8000)),
        (Exotel, l16(8000)),
        (Vonage, l16(16000)),
    ];
    let mut calls = Vec::new();
    for (dialect, f) in own {
        calls.push(tokio::spawn(call(
            d.url(dialect.path()),
            dialect,
            f,
            question(),
        )));
    }
    calls.push(tokio::spawn(call(
        d.url("/exotel?sample-rate=16000"),
        Exotel,
        l16(16000),
        question(),
    )));
    for (dialect, f) in shared {
        calls.push(tokio::spawn(call(
            d.url("/media-stream"),
            dialect,
            f,
            question(),
        )));
    }
    let question_end = 0.5 + clip("caller_01").len() as f64 / 16000.0;
    for c in calls {
        let (dialect, what, r) = c.await.unwrap();
        assert_eq!(r.end, CallerEnd::HungUp, "{what}: {r:?}");
        assert_eq!(r.bad_messages, 0, "{what}: {:?}", r.errors);
        let segs = voiced_segments(&r.recording.agent, r.recording.rate);
        // The reply (two phrases), after the question, seconds of it.
        assert!(!segs.is_empty(), "{what}: no agent speech heard");
        let (s, e) = (segs[0].0, segs[segs.len() - 1].1);
        assert!(
            s > question_end && s < question_end + 3.0,
            "{what}: reply at {s}s"
        );
        let voiced: f64 = segs.iter().map(|(a, b)| b - a).sum();
        assert!(
            voiced > 2.0 && e - s < 6.0,
            "{what}: reply heard as {segs:?}"
        );
        assert!(
            r.marks_received > 0 && r.marks_echoed == r.marks_received,
            "{what}: {r:?}"
        );
        assert_eq!(r.clears_received, 0, "{what}");
        // The reply's cadence, taken against the dialect's message period (Exotel's 100 ms
        // chunks, one 20 ms frame for the others): about on time, not 80 ms off.
        let period = if dialect == Exotel { 100 } else { 20 };
        assert_eq!(r.cadence_period_ms, period, "{what}");
        assert!(
            r.cadence.intervals > 0 && r.cadence.p50_dev_us < 15_000,
            "{what}: {:?}",
            r.cadence
        );
    }
    assert_eq!(d.calls_ended().await, 0);
    d.stop().await;
}

/// A dialect's call runs like a `/twilio` call: listed under its dialect's name (a detected one
/// under the dialect it speaks) with the caller its `start` names, reported when it ends, and
/// counted in the metrics with its dialect as the leg label.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_dialects_call_is_listed_reported_and_counted_under_its_name() {
    let d = Daemon::start(&support::mock_config(
        "audio-fixtures/scenarios/demo.toml",
        "",
    ))
    .await;
    let mut finished = d.app.calls.subscribe_finished();
    let telnyx = tokio::spawn(call(d.url("/telnyx"), Telnyx, pcmu(), question()));
    let plivo = tokio::spawn(call(d.url("/media-stream"), Plivo, l16(8000), question()));
    // Both listed while they run, each with the caller its start names (Plivo's names none).
    let mut seen = std::collections::BTreeMap::new();
    for _ in 0..100 {
        for c in d.app.calls.list() {
            if let Some(s) = c.steering() {
                seen.insert(c.leg, s.caller.clone());
            }
        }
        if seen.len() == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        seen.get("telnyx"),
        Some(&Some("+15550100".to_owned())),
        "{seen:?}"
    );
    assert_eq!(seen.get("plivo"), Some(&None), "{seen:?}");
    for c in [telnyx, plivo] {
        let (_, what, r) = c.await.unwrap();
        assert_eq!(r.end, CallerEnd::HungUp, "{what}: {r:?}");
    }
    let ended = support::finished_calls(&mut finished, 2, Duration::from_secs(10)).await;
    let mut sids: Vec<_> = ended.iter().map(|c| c.stream_sid.clone()).collect();
    sids.sort();
    assert_eq!(sids, ["plivo-stream-0001", "telnyx-stream-0001"]);
    for c in &ended {
        support::assert_normal(c, 5);
    }
    let metrics = d.app.metrics.render(0);
    for leg in ["telnyx", "plivo"] {
        assert!(
            metrics.contains(&format!(
                "baton_calls_total{{leg=\"{leg}\",end=\"caller_hung_up\"}} 1"
            )),
            "{leg}: {metrics}"
        );
        let frames = metrics
            .lines()
            .find_map(|l| l.strip_prefix(&format!("baton_frames_in_total{{leg=\"{leg}\"}} ")))
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0);
        assert!(frames >= 200.0, "{leg}: {frames} frames in");
    }
    d.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_barge_in_sends_each_dialects_clear() {
    let d = Daemon::start(&support::mock_config(
        "audio-fixtures/scenarios/demo.toml",
        "",
    ))
    .await;
    // The caller says turn 1, then talks over the agent's reply 1.4 s after finishing.
    let mut pcm = vec![0i16; 8000];
    pcm.extend_from_slice(&clip("caller_01"));
    pcm.extend(std::iter::repeat_n(0, 16000 * 14 / 10));
    let barge_at = pcm.len() as f64 / 16000.0;
    pcm.extend_from_slice(&clip("caller_02"));
    pcm.extend(std::iter::repeat_n(0, 16000));
    let mut calls = Vec::new();
    for (dialect, f) in [
        (Telnyx, pcmu()),
        (Plivo, pcmu()),
        (Exotel, l16(8000)),
        (Vonage, l16(16000)),
    ] {
        calls.push(tokio::spawn(call(
            d.url(dialect.path()),
            dialect,
            f,
            pcm.clone(),
        )));
    }
    for c in calls {
        let (dialect, what, r) = c.await.unwrap();
        assert!(r.clears_received >= 1, "{what}: {r:?}");
        if matches!(dialect, Plivo | Vonage) {
            // The clear is acknowledged instead of the marks it dropped.
            assert!(r.marks_echoed < r.marks_received, "{what}");
        } else {
            assert_eq!(r.marks_echoed, r.marks_received, "{what}");
        }
        let segs = voiced_segments(&r.recording.agent, r.recording.rate);
        let cut = segs
            .iter()
            .find(|(s, e)| *s < barge_at && *e > barge_at - 1.0)
            .copied();
        let (_, end) =
            cut.unwrap_or_else(|| panic!("{what}: no reply around {barge_at}s: {segs:?}"));
        assert!(
            end < barge_at + 0.3,
            "{what}: the interrupted reply played until {end}s"
        );
    }
    d.stop().await;
}

/// Runs a hostile script; returns the close frame baton sent, if any, within 3 s of the end.
async fn hostile(url: &str, script: &[Raw]) -> Option<(u16, String)> {
    let (mut ws, _) = tokio_tungstenite::connect_async(url).await.ok()?;
    let mut abort = false;
    for step in script {
        let r = match step {
            Raw::Text(t) => ws.send(Message::text(t.clone())).await,
            Raw::Binary(b) => ws.send(Message::binary(b.clone())).await,
            Raw::Abort => {
                abort = true;
                break;
            }
        };
        if r.is_err() {
            break;
        }
        // One message per 20 ms, at a media stream's pace.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    if abort {
        return None;
    }
    let wait = async {
        while let Some(Ok(m)) = ws.next().await {
            if let Message::Close(f) = m {
                return f.map(|f| (u16::from(f.code), f.reason.to_string()));
            }
        }
        None
    };
    tokio::time::timeout(Duration::from_secs(3), wait)
        .await
        .ok()
        .flatten()
}

fn t(s: &str) -> Raw {
    Raw::Text(s.to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_input_in_each_dialect_ends_only_that_call() {
    let d = Daemon::start(&support::mock_config("", "")).await;
    // A well-behaved call per dialect runs throughout.
    let mut good = Vec::new();
    for (dialect, f) in [
        (Twilio, pcmu()),
        (Telnyx, pcmu()),
        (Plivo, l16(8000)),
        (Exotel, l16(8000)),
        (Vonage, l16(16000)),
    ] {
        let mut o =
            CallerOptions::for_dialect(dialect, f, &vec![0i16; 8000 * 4], 8000, "silence").unwrap();
        o.max_tail = Duration::from_secs(2);
        let url = d.url(dialect.path());
        good.push(tokio::spawn(async move {
            (dialect, caller::dial(&url, o).await)
        }));
    }
    let big = Raw::Text(format!(
        r#"{{"event":"media","pad":"{}"}}"#,
        "x".repeat(1 << 20)
    ));
    let telnyx_start = r#"{"event":"start","sequence_number":"1","stream_id":"h","start":{"call_control_id":"c","media_format":{"encoding":"PCMU","sample_rate":8000,"channels":1}}}"#;
    let plivo_start = r#"{"event":"start","sequenceNumber":1,"start":{"streamId":"h","callId":"c","mediaFormat":{"encoding":"audio/x-l16","sampleRate":16000}}}"#;
    let refused: Vec<(&str, Vec<Raw>, &str)> = vec![
        (
            "/telnyx",
            vec![
                t("garbage"),
                t(
                    r#"{"event":"start","stream_id":"h","start":{"media_format":{"encoding":"G722","sample_rate":16000}}}"#,
                ),
            ],
            "G722",
        ),
        (
            "/plivo",
            vec![t(
                r#"{"event":"start","start":{"streamId":"h","mediaFormat":{"encoding":"audio/x-l16","sampleRate":44100}}}"#,
            )],
            "44100",
        ),
        (
            "/exotel",
            vec![
                t(r#"{"event":"connected"}"#),
                t(
                    r#"{"event":"start","stream_sid":"h","start":{"stream_sid":"h","media_format":{"encoding":"audio/x-mulaw","sample_rate":"16000"}}}"#,
                ),
            ],
            "8000",
        ),
        (
            "/vonage",
            vec![
                Raw::Binary(vec![0; 640]),
                t(r#"{"event":"websocket:connected","content-type":"audio/ogg"}"#),
            ],
            "audio/ogg",
        ),
        (
            "/media-stream",
            (0..9).map(|_| t("garbage")).collect(),
            "own path",
        ),
    ];
    for (path, script, why) in &refused {
        let close = hostile(&d.url(path), script).await;
        let Some((code, reason)) = close else {
            panic!("{path}: no close frame")
        };
        assert_eq!(code, 1008, "{path}: {reason}");
        assert!(
            reason.contains(why),
            "{path}: close reason {reason:?} does not say {why:?}"
        );
    }
    let survived: Vec<(&str, Vec<Raw>)> = vec![
        (
            "/telnyx",
            vec![
                t(r#"{"event":"connected","version":"1.0.0"}"#),
                t(telnyx_start),
                t(r#"{"event":"media","media":{"chunk":"1","payload":"%%%"}}"#),
                t(r#"{"event":"media","media":{"chunk":"2","payload":12}}"#),
                t(r#"{"event":"dtmf","dtmf":{"digit":"12"}}"#),
                Raw::Binary(vec![1, 2, 3]),
                t(r#"{"event":"media","media":{"chunk":"9","payload":"//8="}}"#),
                big.clone(),
                Raw::Abort,
            ],
        ),
        (
            "/plivo",
            vec![
                t(r#"{"event":"media","media":{"payload":"AAAA"}}"#),
                t(plivo_start),
                t(r#"{"event":"media","media":{"payload":"AAAB"}}"#),
                t(r#"{"event":"playedStream"}"#),
                t(r#"{"event":"clearedAudio"}"#),
                big.clone(),
                Raw::Abort,
            ],
        ),
        (
            "/exotel",
            vec![
                t(r#"{"event":"start","start":{}}"#),
                t(r#"{"event":"start","stream_sid":"h","start":{"stream_sid":"h"}}"#),
                t(r#"{"event":"media","media":{"payload":"%%%"}}"#),
                Raw::Binary(vec![0; 320]),
                Raw::Abort,
            ],
        ),
        (
            "/vonage",
            vec![
                t(r#"{"event":"websocket:connected","content-type":"audio/l16;rate=16000"}"#),
                Raw::Binary(vec![1, 2, 3]),
                big.clone(),
                t("garbage"),
                Raw::Binary(vec![0; 640]),
                t(r#"{"event":"websocket:dtmf","digit":"55"}"#),
                Raw::Abort,
            ],
        ),
        (
            "/media-stream",
            vec![
                t(r#"{"event":"connected","version":"1.0.0"}"#),
                t(telnyx_start),
                t(r#"{"event":"media","media":{"payload":"%%%"}}"#),
                big,
                Raw::Abort,
            ],
        ),
    ];
    for (path, script) in &survived {
        support::send_raw(&d.url(path), script).await;
    }
    let bad_url = caller::dial(
        &d.url("/exotel?sample-rate=9999"),
        CallerOptions::new(vec![0; 160]),
    )
    .await;
    assert!(
        matches!(bad_url, Err(CallerError::Refused { status: 400, .. })),
        "{bad_url:?}"
    );
    for g in good {
        let (dialect, r) = g.await.unwrap();
        let r = r.unwrap();
        assert_eq!(r.end, CallerEnd::HungUp, "{dialect}: {r:?}");
        assert_eq!(r.bad_messages, 0, "{dialect}");
        assert!(r.frames_sent >= 200, "{dialect}");
    }
    assert_eq!(d.calls_ended().await, 0);
    d.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn telnyx_token_and_exotel_basic_auth_are_checked_before_the_upgrade() {
    let d = Daemon::start_with(&support::mock_config("", ""), |st| {
        st.telnyx_token = Some(baton::secret::Secret::new("tok-123"));
        st.exotel_basic = Some(baton::secret::Secret::new("KEY:TOKEN"));
    })
    .await;
    let short = |token: Option<&str>| {
        let mut o =
            CallerOptions::for_dialect(Telnyx, pcmu(), &vec![0i16; 4000], 8000, "s").unwrap();
        o.max_tail = Duration::from_secs(1);
        if let Some(v) = token {
            o.headers
                .push(("x-telnyx-streaming-auth-token".into(), v.into()));
        }
        o
    };
    for bad in [None, Some("tok-124")] {
        let e = caller::dial(&d.url("/telnyx"), short(bad))
            .await
            .expect_err("refused");
        assert!(matches!(e, CallerError::Refused { status: 403, .. }), "{e}");
    }
    let r = caller::dial(&d.url("/telnyx"), short(Some("tok-123")))
        .await
        .unwrap();
    assert_eq!(r.end, CallerEnd::HungUp);

    let exotel = |auth: Option<&str>| {
        let mut o =
            CallerOptions::for_dialect(Exotel, l16(8000), &vec![0i16; 4000], 8000, "s").unwrap();
        o.max_tail = Duration::from_secs(1);
        if let Some(v) = auth {
            o.headers.push(("authorization".into(), v.into()));
        }
        o
    };
    // base64("KEY:TOKEN") = S0VZOlRPS0VO
    for bad in [
        None,
        Some("Basic S0VZOlRPS0VP"),
        Some("Bearer S0VZOlRPS0VO"),
    ] {
        let e = caller::dial(&d.url("/exotel"), exotel(bad))
            .await
            .expect_err("refused");
        assert!(matches!(e, CallerError::Refused { status: 403, .. }), "{e}");
    }
    let r = caller::dial(&d.url("/exotel"), exotel(Some("Basic S0VZOlRPS0VO")))
        .await
        .unwrap();
    assert_eq!(r.end, CallerEnd::HungUp);
    d.stop().await;
}

/// A bridge whose socket drops without its hang-up (no `stop`, no close frame) ends the call as
/// the caller's side failing — in the call's report (its stored end reason) and its metrics —
/// not as the caller hanging up; one that sends `stop` hung up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bridge_lost_without_stop_ends_the_call_as_a_failed_leg() {
    let d = Daemon::start(&support::mock_config("", "")).await;
    let mut finished = d.app.calls.subscribe_finished();
    let start = |sid: &str| {
        t(&format!(
            r#"{{"event":"start","sequenceNumber":"1","streamSid":"{sid}","start":{{"streamSid":"{sid}","accountSid":"AC00000000000000000000000000000000","callSid":"CA{sid}","tracks":["inbound"],"customParameters":{{}},"mediaFormat":{{"encoding":"audio/x-mulaw","sampleRate":8000,"channels":1}}}}}}"#
        ))
    };
    let media = |sid: &str, n: u32| {
        t(&format!(
            r#"{{"event":"media","sequenceNumber":"{}","streamSid":"{sid}","media":{{"track":"inbound","chunk":"{n}","timestamp":"{}","payload":"{}"}}}}"#,
            n + 1,
            n * 20,
            "/".repeat(212) + "w=="
        ))
    };
    for (sid, last) in [
        ("MZlost", Raw::Abort),
        ("MZstop", t(r#"{"event":"stop","streamSid":"MZstop"}"#)),
    ] {
        let mut script = vec![t(r#"{"event":"connected","protocol":"Call"}"#), start(sid)];
        script.extend((0..10).map(|n| media(sid, n)));
        script.push(last);
        support::send_raw(&d.url("/twilio"), &script).await;
    }
    let ended = support::finished_calls(&mut finished, 2, Duration::from_secs(10)).await;
    let reason = |sid: &str| {
        let c = ended.iter().find(|c| c.stream_sid == sid).expect(sid);
        c.outcome.as_ref().expect("a report").end_reason.clone()
    };
    let lost = reason("MZlost");
    assert!(
        lost.starts_with("caller's leg failed: ") && lost.contains("without closing handshake"),
        "{lost}"
    );
    assert_eq!(reason("MZstop"), "caller hung up");
    let metrics = d.app.metrics.render(0);
    for end in ["leg_failed", "caller_hung_up"] {
        assert!(
            metrics.contains(&format!(
                "baton_calls_total{{leg=\"twilio\",end=\"{end}\"}} 1"
            )),
            "{end}: {metrics}"
        );
    }
    d.stop().await;
}

/// A caller of one bridge on another's own path is told at its opening which path to use (a
/// policy close naming it), not left waiting for a start that cannot come.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bridge_on_another_bridges_path_is_told_where_to_go() {
    let d = Daemon::start(&support::mock_config("", "")).await;
    for (spoken, path) in [(Twilio, Plivo), (Plivo, Twilio), (Vonage, Plivo)] {
        let mut o =
            CallerOptions::for_dialect(spoken, pcmu(), &vec![0i16; 4000], 8000, "s").unwrap();
        o.max_tail = Duration::from_secs(1);
        let r = caller::dial(&d.url(path.path()), o).await;
        let said = format!("{r:?}");
        // Whole: the reason fits a close frame.
        assert!(
            said.contains(&format!("send it to {} or /media-stream", spoken.path())),
            "{spoken} on {}: {said}",
            path.path()
        );
    }
    assert_eq!(d.calls_ended().await, 0);
    d.stop().await;
}

/// A bridge that goes silent after its start (a half-open connection: no media, no stop, no
/// close) does not hold its call and model session: the stream is given up after
/// `SILENT_BRIDGE` and the call ends as a failed leg.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bridge_that_goes_silent_is_given_up() {
    let d = Daemon::start(&support::mock_config("", "")).await;
    let mut finished = d.app.calls.subscribe_finished();
    let (mut ws, _) = tokio_tungstenite::connect_async(d.url("/twilio"))
        .await
        .unwrap();
    let sid = "MZquiet";
    for text in [
        r#"{"event":"connected","protocol":"Call"}"#.to_owned(),
        format!(
            r#"{{"event":"start","sequenceNumber":"1","streamSid":"{sid}","start":{{"streamSid":"{sid}","accountSid":"AC00000000000000000000000000000000","callSid":"CAquiet","tracks":["inbound"],"customParameters":{{}},"mediaFormat":{{"encoding":"audio/x-mulaw","sampleRate":8000,"channels":1}}}}}}"#
        ),
    ] {
        ws.send(Message::text(text)).await.unwrap();
    }
    // Nothing more is sent; the socket stays open (its reads answer the server's close).
    let reader = tokio::spawn(async move { while let Some(Ok(_)) = ws.next().await {} });
    let silent = baton::leg::bridge::server::SILENT_BRIDGE;
    let ended = support::finished_calls(&mut finished, 1, silent + Duration::from_secs(10)).await;
    let end = ended[0]
        .outcome
        .as_ref()
        .expect("a report")
        .end_reason
        .clone();
    assert!(
        end.starts_with("caller's leg failed: ") && end.contains("sent nothing for 10 s"),
        "{end}"
    );
    let _ = tokio::time::timeout(Duration::from_secs(5), reader).await;
    d.stop().await;
}
