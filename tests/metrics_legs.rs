//! `GET /metrics` counts the calls of every leg, not only the telephony bridges': an AudioSocket
//! call, a `/stream` call and a WebRTC (WHIP) call through one `baton serve` each show up under
//! their leg label in `baton_calls_total` and the frame counters, and their reports reach the
//! per-call histograms.

use crate::support;
use crate::webrtc_support;

use std::path::Path;
use std::time::Duration;

use baton::audio::resample::resample_all;
use baton::leg::audiosocket::caller::{self as audiosocket, CallerEnd, CallerOptions};
use baton::leg::stream::client::{self as stream, ClientOptions};
use baton::leg::stream::{Encoding, Format};
use support::{Daemon, ROOT};

fn config() -> String {
    format!(
        "{}\n[audiosocket]\nlisten = \"127.0.0.1:0\"\n",
        support::mock_config("audio-fixtures/scenarios/demo.toml", "")
    )
}

/// Half a second of silence, the caller's first turn, then a second of silence, at `rate`.
fn caller_turn(rate: u32) -> Vec<i16> {
    let c1 = baton::audio::wav::read(&Path::new(ROOT).join("audio-fixtures/clips/caller_01.wav"))
        .unwrap();
    let mut pcm = vec![0i16; 8000];
    pcm.extend_from_slice(&c1.samples);
    pcm.extend(std::iter::repeat_n(0, 16000));
    resample_all(&pcm, 16_000, rate).unwrap()
}

async fn scrape(d: &Daemon) -> String {
    let resp = support::http(
        &d.addr,
        "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    .await;
    let (head, body) = resp.split_once("\r\n\r\n").expect("an HTTP response");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    body.to_owned()
}

/// The sum of the samples of `name` carrying every one of `labels` (`None`: no such sample).
fn value(body: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let mut found = None;
    for line in body.lines().filter(|l| !l.starts_with('#')) {
        let Some((series, v)) = line.rsplit_once(' ') else {
            continue;
        };
        let (n, l) = series.split_once('{').unwrap_or((series, ""));
        if n != name
            || !labels
                .iter()
                .all(|(k, v)| l.contains(&format!("{k}=\"{v}\"")))
        {
            continue;
        }
        *found.get_or_insert(0.0) += v.parse::<f64>().unwrap();
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audiosocket_stream_and_webrtc_calls_reach_metrics() {
    let d = Daemon::start(&config()).await;
    let addr = d
        .bound("the AudioSocket listener", |app| {
            app.audiosocket_addr.get().copied()
        })
        .await
        .to_string();
    // The three calls at once, each one caller turn and the reply.
    let audiosocket = tokio::spawn(async move {
        let mut opts = CallerOptions::new(caller_turn(8000), 8000);
        opts.max_tail = Duration::from_secs(10);
        audiosocket::dial(&addr, opts).await.unwrap()
    });
    let url = d.url("/stream");
    let stream = tokio::spawn(async move {
        let format = Format {
            encoding: Encoding::Pcm16,
            sample_rate: 16_000,
        };
        let mut opts = ClientOptions::new(format, caller_turn(16_000));
        opts.max_tail = Duration::from_secs(10);
        stream::dial(&url, opts).await.unwrap()
    });
    let webrtc = webrtc_support::place_call(
        d.addr,
        &caller_turn(webrtc_support::RATE),
        Duration::from_secs(3),
        |_| async {},
    )
    .await;
    let audiosocket = audiosocket.await.unwrap();
    let stream = stream.await.unwrap();
    assert_eq!(audiosocket.end, CallerEnd::HungUp, "{:?}", audiosocket.end);
    assert!(audiosocket.audio_received > 0, "no reply over AudioSocket");
    assert_eq!(stream.end, "client stop", "{stream:?}");
    assert!(stream.audio_received > 0, "no reply over /stream");
    assert!(webrtc.packets_in > 0, "no reply over WebRTC");
    assert_eq!(d.calls_ended().await, 0);

    let body = scrape(&d).await;
    for leg in ["audiosocket", "stream", "webrtc"] {
        assert_eq!(
            value(&body, "baton_calls_total", &[("leg", leg)]),
            Some(1.0),
            "{leg}: {body}"
        );
    }
    for leg in ["audiosocket", "stream"] {
        assert_eq!(
            value(
                &body,
                "baton_calls_total",
                &[("leg", leg), ("end", "caller_hung_up")]
            ),
            Some(1.0),
            "{leg}: {body}"
        );
    }
    // Frames, as each leg moved them: at least what the caller said (the last frames may be cut
    // by its hang-up), and every frame it heard.
    let frames = |dir: &str, leg: &str| {
        value(&body, &format!("baton_frames_{dir}_total"), &[("leg", leg)])
            .unwrap_or_else(|| panic!("no {dir} frames of {leg}: {body}"))
    };
    let within = |got: f64, sent: u64| got >= sent.saturating_sub(2) as f64;
    let (fin, fout) = (frames("in", "audiosocket"), frames("out", "audiosocket"));
    let sent = audiosocket.frames_sent;
    assert!(within(fin, sent), "{fin} in, {sent} sent");
    assert!(fout >= audiosocket.audio_received as f64, "{fout} out");
    let (fin, fout) = (frames("in", "stream"), frames("out", "stream"));
    assert!(
        within(fin, stream.frames_sent),
        "{fin} in, {} sent",
        stream.frames_sent
    );
    assert!(fout >= stream.audio_received as f64, "{fout} out");
    // The browser call: every packet it heard was one frame sent; what it said, ~4.6 s.
    let (fin, fout) = (frames("in", "webrtc"), frames("out", "webrtc"));
    assert!(fin >= 200.0, "{fin} in");
    assert!(fout >= webrtc.packets_in as f64, "{fout} out");
    // The three reports reached the histograms: each call heard a reply; the AudioSocket and
    // `/stream` legs keep their send intervals.
    assert!(
        value(&body, "baton_first_audio_ms_count", &[]).is_some_and(|n| n >= 3.0),
        "{body}"
    );
    assert!(
        value(&body, "baton_uplink_added_ms_count", &[]).is_some_and(|n| n > 0.0),
        "{body}"
    );
    assert!(
        value(&body, "baton_egress_jitter_ms_count", &[]).is_some_and(|n| n > 0.0),
        "{body}"
    );
    d.stop().await;
}
