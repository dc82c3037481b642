//! `baton serve` with Asterisk-protocol (AudioSocket) callers: whole calls at 8 and 16 kHz over
//! loopback TCP in real time, the output pacing on a paused clock, and hostile connections that
//! are hung up without touching a call running beside them.

use crate::support;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use baton::leg::audiosocket::caller::{self, CallerEnd, CallerOptions, CallerReport};
use baton::leg::audiosocket::wire::{self, Decoder, Message};
use support::{Daemon, ROOT, voiced_segments};

fn config() -> String {
    format!(
        "{}\n[audiosocket]\nlisten = \"127.0.0.1:0\"\n",
        support::mock_config("audio-fixtures/scenarios/demo.toml", "")
    )
}

async fn audiosocket_addr(d: &Daemon) -> SocketAddr {
    d.bound("the AudioSocket listener", |app| {
        app.audiosocket_addr.get().copied()
    })
    .await
}

/// A daemon's state and one AudioSocket connection to it over an in-memory pipe: the caller's
/// end, and the task serving the call.
fn call_in_memory() -> (
    Arc<baton::server::AppState>,
    tokio::io::DuplexStream,
    tokio::task::JoinHandle<Option<baton::call::CallReport>>,
) {
    let loaded =
        baton::config::parse(&config(), &Path::new(ROOT).join("config/test.toml")).unwrap();
    let app = baton::server::state(loaded).unwrap();
    let (client, server) = tokio::io::duplex(1 << 16);
    let peer: SocketAddr = "127.0.0.1:1".parse().unwrap();
    let call = tokio::spawn(baton::server::audiosocket::serve_connection(
        Arc::clone(&app),
        server,
        peer,
    ));
    (app, client, call)
}

/// Half a second of silence, the caller's first turn, then silence for the reply.
fn caller_turn(rate: u32) -> CallerOptions {
    let c1 = baton::audio::wav::read(&Path::new(ROOT).join("audio-fixtures/clips/caller_01.wav"))
        .unwrap();
    let mut pcm = vec![0i16; 8000];
    pcm.extend_from_slice(&c1.samples);
    pcm.extend(std::iter::repeat_n(0, 8000));
    let samples = baton::audio::resample::resample_all(&pcm, 16_000, rate).unwrap();
    let mut opts = CallerOptions::new(samples, rate);
    opts.dtmf = vec![(Duration::from_millis(300), '5')];
    opts.max_tail = Duration::from_secs(10);
    opts
}

fn assert_heard_a_reply(r: &CallerReport, rate: u32) {
    assert_eq!(r.end, CallerEnd::HungUp, "{:?}", r.end);
    assert_eq!(r.dtmf_sent, 1);
    assert_eq!(r.odd_sized, 0, "every message from baton is 20 ms");
    let segs = voiced_segments(&r.recording.agent, rate);
    // The caller finishes speaking at 3.1 s; the reply (2.6 s) follows it.
    assert!(
        segs.iter().any(|(s, e)| *s > 3.0 && e - s > 1.5),
        "no reply heard at {rate} Hz: {segs:?}"
    );
    // Pacing, loosely (CI machines are loaded): the median interval is one frame.
    let mut iv = r.intervals_us.clone();
    iv.sort_unstable();
    assert!(iv.len() > 50, "{} intervals", iv.len());
    let median = iv[iv.len() / 2];
    assert!(
        (15_000..=25_000).contains(&median),
        "median interval {median} µs at {rate} Hz"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_at_8_and_16_khz_hear_the_replies() {
    let d = Daemon::start(&config()).await;
    let addr = audiosocket_addr(&d).await.to_string();
    let mut calls = Vec::new();
    for rate in [8000, 16_000] {
        let addr = addr.clone();
        calls.push(tokio::spawn(async move {
            (rate, caller::dial(&addr, caller_turn(rate)).await.unwrap())
        }));
    }
    for c in calls {
        let (rate, report) = c.await.unwrap();
        assert_heard_a_reply(&report, rate);
    }
    assert_eq!(d.calls_ended().await, 0);
    d.stop().await;
}

/// On a paused clock the leg adds no timing error of its own: inside a reply, every message
/// follows the previous one by exactly one frame.
#[tokio::test(start_paused = true)]
async fn output_is_paced_one_frame_per_tick() {
    let (app, client, call) = call_in_memory();
    let report = caller::run(client, caller_turn(16_000)).await.unwrap();
    assert_heard_a_reply(&report, 16_000);
    assert!(report.bursts >= 1);
    assert!(
        report.intervals_us.iter().all(|&us| us == 20_000),
        "intervals off 20 ms: {:?}",
        report
            .intervals_us
            .iter()
            .filter(|&&us| us != 20_000)
            .collect::<Vec<_>>()
    );
    let call = call.await.unwrap().expect("a call ran");
    assert!(!call.uplink_added_ms.is_empty() && !call.downlink_added_ms.is_empty());
    // Every caller frame reached the model socket and was counted once: the writes the call
    // takes between passes, and those of the last pass before the hang-up.
    assert_eq!(call.uplink_added_seen, report.frames_sent, "{call:?}");
    assert_eq!(call.underruns, 0);
    assert_eq!(app.calls.active(), 0);
}

/// What the daemon logs on this thread, as its plain format writes it.
#[derive(Clone, Default)]
struct Logs(Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Logs {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Logs {
    fn text(&self) -> String {
        String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
    }

    /// The value of `field=` on the first line with `message` and that field.
    fn field(&self, message: &str, field: &str) -> String {
        let text = self.text();
        let key = format!(" {field}=");
        let line = text
            .lines()
            .find(|l| l.contains(&format!(": {message} ")) && l.contains(&key))
            .unwrap_or_else(|| panic!("no {message:?} line with {field} in\n{text}"));
        let value = line.split(&key).nth(1).unwrap_or_default();
        match value.strip_prefix('"') {
            Some(quoted) => quoted.split('"').next().unwrap_or_default().to_owned(),
            None => value
                .split_whitespace()
                .next()
                .unwrap_or_default()
                .to_owned(),
        }
    }
}

/// A caller that breaks the protocol in the middle of the call (a DTMF byte that is no key, as
/// `baton dial audiosocket --dtmf X@1` sends) ends the call with the leg's reason — in its
/// report, its metrics and its `call ended` line — not as a hang-up; and that line names the call
/// by baton's call id (the one `GET /calls`, the admin API and the store use), the UUID apart.
#[tokio::test(start_paused = true)]
async fn a_protocol_error_ends_the_call_under_batons_call_id() {
    let logs = Logs::default();
    let writer = logs.clone();
    let _log = tracing::subscriber::set_default(
        tracing_subscriber::fmt()
            .with_ansi(false)
            .with_max_level(tracing::Level::INFO)
            .with_writer(move || writer.clone())
            .finish(),
    );
    let (app, client, call) = call_in_memory();
    let mut opts = caller_turn(8000);
    opts.dtmf = vec![(Duration::from_secs(1), 'X')];
    let report = caller::run(client, opts).await.unwrap();
    assert_eq!(report.end, CallerEnd::ServerHungUp, "{:?}", report.end);
    let call = call.await.unwrap().expect("a call ran");
    let why = "caller's leg failed: protocol error: DTMF byte 0x58 is not a key";
    assert!(call.end_reason.starts_with(why), "{}", call.end_reason);

    let metrics = app.metrics.render(0);
    assert!(
        metrics.contains("baton_calls_total{leg=\"audiosocket\",end=\"leg_failed\"} 1"),
        "{metrics}"
    );
    assert!(!metrics.contains("caller_hung_up"), "{metrics}");

    assert!(
        logs.text()
            .lines()
            .any(|l| l.contains("call ended") && l.contains(&format!("end={why}"))),
        "{}",
        logs.text()
    );
    let id = logs.field("call started", "call");
    assert!(!id.is_empty());
    assert_eq!(logs.field("call ended", "call"), id);
    assert_eq!(
        logs.field("call ended", "uuid"),
        "0b6e4d2a-8f1c-4e55-9a3b-2c7d1e0f9a88"
    );
}

/// Sends `bytes`, optionally closes the write side, then reads what baton answers until it
/// closes. Returns the messages baton sent.
async fn hostile(addr: &str, bytes: &[u8], eof: bool) -> Vec<Message> {
    let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    tcp.write_all(bytes).await.unwrap();
    if eof {
        tcp.shutdown().await.unwrap();
    }
    let mut got = Vec::new();
    let r = tokio::time::timeout(Duration::from_secs(5), tcp.read_to_end(&mut got)).await;
    assert!(r.is_ok(), "baton did not close the connection");
    let mut d = Decoder::new(u16::MAX as usize);
    d.push(&got);
    std::iter::from_fn(|| d.next_message().ok().flatten()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_hangs_up_only_that_connection() {
    let d = Daemon::start(&config()).await;
    let addr = audiosocket_addr(&d).await.to_string();
    let good = tokio::spawn({
        let addr = addr.clone();
        async move { caller::dial(&addr, caller_turn(8000)).await.unwrap() }
    });
    let start = |b: &mut BytesMut| {
        wire::encode_raw(wire::KIND_UUID, &[7; 16], b);
        wire::encode_audio(0x10, &[0; 160], b);
    };
    let script = |f: &dyn Fn(&mut BytesMut)| {
        let mut b = BytesMut::new();
        f(&mut b);
        b.to_vec()
    };
    let cases: Vec<(&str, Vec<u8>, bool)> = vec![
        (
            "unknown kind",
            script(&|b| {
                start(b);
                b.extend_from_slice(&[0x42, 0, 1, 9]);
            }),
            false,
        ),
        (
            "length-0 audio",
            script(&|b| {
                start(b);
                b.extend_from_slice(&[0x10, 0, 0]);
            }),
            false,
        ),
        (
            "oversize length",
            script(&|b| {
                start(b);
                b.extend_from_slice(&[0x10, 0xFF, 0xFF]);
            }),
            false,
        ),
        (
            "truncated header at EOF",
            script(&|b| {
                start(b);
                b.extend_from_slice(&[0x10, 0x01]);
            }),
            true,
        ),
        (
            "truncated header, stalled",
            script(&|b| {
                start(b);
                b.extend_from_slice(&[0x10]);
            }),
            false,
        ),
        (
            "audio before the UUID",
            script(&|b| wire::encode_audio(0x10, &[0; 160], b)),
            false,
        ),
        ("unknown kind before the call", vec![0x02, 0, 0], false),
    ];
    for (name, bytes, eof) in cases {
        let msgs = hostile(&addr, &bytes, eof).await;
        assert_eq!(msgs.last(), Some(&Message::Hangup), "{name}: {msgs:?}");
    }
    let report = good.await.unwrap();
    assert_heard_a_reply(&report, 8000);
    assert_eq!(d.calls_ended().await, 0);
    d.stop().await;
}
