//! Helpers shared by the `serve` integration tests: an in-process daemon on a loopback port, an
//! echo Live model, raw hostile clients, and signal measurements on recordings.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_tungstenite::tungstenite::Message;

use baton::leg::twilio::signature::AuthToken;
use baton::server::{self, AppState};

pub const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// A config on the embedded mock (scenario path relative to the repository root, or "" for the
/// built-in script), loopback, 1 s drain. `model_extra` is added to `[model]`.
pub fn mock_config(scenario: &str, model_extra: &str) -> String {
    let scenario = if scenario.is_empty() {
        String::new()
    } else {
        format!("scenario = \"../{scenario}\"")
    };
    format!(
        "[server]\nlisten = \"127.0.0.1:0\"\ndrain_timeout_s = 1\n[model]\nbackend = \"mock\"\n{scenario}\n{model_extra}\n[limits]\nmax_calls = 50\n"
    )
}

pub struct Daemon {
    pub addr: SocketAddr,
    pub app: Arc<AppState>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl Daemon {
    pub async fn start(config: &str) -> Daemon {
        Self::start_with_token(config, None).await
    }

    pub async fn start_with_token(config: &str, token: Option<AuthToken>) -> Daemon {
        Self::start_with(config, |st| {
            if token.is_some() {
                st.twilio_token = token;
            }
        })
        .await
    }

    /// Starts a daemon whose state `customize` adjusts first (credentials a test holds itself
    /// rather than in the process environment).
    pub async fn start_with(config: &str, customize: impl FnOnce(&mut AppState)) -> Daemon {
        let mut loaded =
            baton::config::parse(config, &Path::new(ROOT).join("config/test.toml")).unwrap();
        let listener = tokio::net::TcpListener::bind(loaded.listen).await.unwrap();
        let addr = listener.local_addr().unwrap();
        loaded.listen = addr;
        let app = server::state(loaded).unwrap();
        let mut st = Arc::try_unwrap(app).ok().expect("state not shared yet");
        customize(&mut st);
        let app = Arc::new(st);
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn({
            let app = app.clone();
            async move {
                server::serve(app, listener, async {
                    let _ = rx.await;
                })
                .await
                .unwrap();
            }
        });
        Daemon {
            addr,
            app,
            stop: Some(tx),
            task,
        }
    }

    pub fn twilio_url(&self) -> String {
        format!("ws://{}/twilio", self.addr)
    }

    /// `ws://<addr><path>`.
    pub fn url(&self, path: &str) -> String {
        format!("ws://{}{path}", self.addr)
    }

    /// What baton validates signatures against.
    pub fn public_stream_url(&self) -> String {
        self.app.stream_url.clone()
    }

    /// Waits for `bound` to give what `serve` binds after its HTTP listener (the SIP or
    /// AudioSocket listener): at most 20 s, since a loaded machine can take seconds to open the
    /// store and start the shards first. Panics with `what` if it never does, or at once if
    /// `serve` has stopped (its error is on stderr).
    pub async fn bound<T>(&self, what: &str, bound: impl Fn(&AppState) -> Option<T>) -> T {
        let mut got = None;
        eventually(what, || {
            got = bound(&self.app);
            assert!(
                got.is_some() || !self.task.is_finished(),
                "{what}: serve stopped before binding it"
            );
            got.is_some()
        })
        .await;
        got.expect("eventually returns once it holds")
    }

    pub async fn active_calls(&self) -> usize {
        self.app.calls.active()
    }

    /// Waits (at most 10 s) for every call to free its slot: a caller sees its call end a little
    /// before the daemon's handler has collected the leg's figures and let go of the slot.
    pub async fn calls_ended(&self) -> usize {
        self.app
            .calls
            .wait_idle(std::time::Duration::from_secs(10))
            .await;
        self.app.calls.active()
    }

    /// Triggers the drain and waits for the server to stop.
    pub async fn stop(mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        let _ = tokio::time::timeout(Duration::from_secs(15), &mut self.task).await;
    }
}

/// Voiced stretches `(start_s, end_s)` of a track (20 ms blocks above −45 dBFS, gaps < 600 ms
/// bridged).
pub fn voiced_segments(track: &[i16], rate: u32) -> Vec<(f64, f64)> {
    let block = (rate / 50) as usize;
    let mut segs: Vec<(f64, f64)> = Vec::new();
    for (i, b) in track.chunks(block).enumerate() {
        if baton::audio::vad::rms_dbfs(b) > -45.0 {
            let (s, e) = (i as f64 * 0.02, (i + 1) as f64 * 0.02);
            match segs.last_mut() {
                Some(last) if s - last.1 < 0.6 => last.1 = e,
                _ => segs.push((s, e)),
            }
        }
    }
    segs
}

/// The strongest frequency of a track between `lo` and `hi` Hz (Goertzel scan, 5 Hz steps).
pub fn dominant_hz(track: &[i16], rate: u32, lo: f64, hi: f64) -> f64 {
    let voiced: Vec<f64> = track
        .chunks((rate / 50) as usize)
        .filter(|b| baton::audio::vad::rms_dbfs(b) > -45.0)
        .flatten()
        .map(|&s| f64::from(s))
        .collect();
    let mut best = (0.0, 0.0);
    let mut f = lo;
    while f <= hi {
        let w = 2.0 * std::f64::consts::PI * f / f64::from(rate);
        let (mut s1, mut s2) = (0.0f64, 0.0f64);
        for &x in &voiced {
            let s0 = x + 2.0 * w.cos() * s1 - s2;
            s2 = s1;
            s1 = s0;
        }
        let p = s1 * s1 + s2 * s2 - 2.0 * w.cos() * s1 * s2;
        if p > best.1 {
            best = (f, p);
        }
        f += 5.0;
    }
    best.0
}

/// A Live model that answers every audio chunk with the same audio at the rate it was declared
/// at: each caller hears only itself unless calls get mixed up.
pub struct EchoModel {
    pub url: String,
    /// The MIME type of every audio chunk received, in order.
    pub mimes: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl EchoModel {
    pub async fn start() -> EchoModel {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("ws://{}", listener.local_addr().unwrap());
        let mimes = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = mimes.clone();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let seen = seen.clone();
                tokio::spawn(async move {
                    let Ok(mut ws) = tokio_tungstenite::accept_async(tcp).await else {
                        return;
                    };
                    let _setup = ws.next().await;
                    let _ = ws
                        .send(Message::binary(br#"{"setupComplete":{}}"#.to_vec()))
                        .await;
                    while let Some(Ok(msg)) = ws.next().await {
                        let Message::Text(t) = msg else { continue };
                        let Ok(v) = serde_json::from_str::<serde_json::Value>(t.as_str()) else {
                            continue;
                        };
                        let audio = &v["realtimeInput"]["audio"];
                        if let (Some(data), Some(mime)) =
                            (audio["data"].as_str(), audio["mimeType"].as_str())
                        {
                            seen.lock().unwrap().push(mime.to_owned());
                            let reply = serde_json::json!({"serverContent": {"modelTurn": {"parts": [
                                {"inlineData": {"mimeType": mime, "data": data}}]}}});
                            if ws
                                .send(Message::binary(reply.to_string().into_bytes()))
                                .await
                                .is_err()
                            {
                                break;
                            }
                        }
                    }
                });
            }
        });
        EchoModel { url, mimes }
    }
}

/// One step of a hostile client.
#[derive(Clone)]
pub enum Raw {
    Text(String),
    Binary(Vec<u8>),
    /// Drop the TCP connection without a close frame.
    Abort,
}

fn start_json() -> String {
    r#"{"event":"start","sequenceNumber":"2","streamSid":"MZh","start":{"streamSid":"MZh","accountSid":"AC00000000000000000000000000000000","callSid":"CAh","tracks":["inbound"],"customParameters":{},"mediaFormat":{"encoding":"audio/x-mulaw","sampleRate":8000,"channels":1}}}"#.into()
}

fn media_json(seq: u32, payload: &str) -> String {
    format!(
        r#"{{"event":"media","sequenceNumber":"{seq}","streamSid":"MZh","media":{{"track":"inbound","chunk":"{seq}","timestamp":"{}","payload":"{payload}"}}}}"#,
        seq * 20
    )
}

pub fn hostile_scripts() -> Vec<Vec<Raw>> {
    use base64::Engine;
    let b64 = |n: usize| base64::engine::general_purpose::STANDARD.encode(vec![0xFFu8; n]);
    vec![
        vec![
            Raw::Text("this is not json".into()),
            Raw::Text(r#"{"event":"bogus","x":1}"#.into()),
            Raw::Text(media_json(1, &b64(160))),
            Raw::Binary(vec![1, 2, 3]),
            Raw::Abort,
        ],
        vec![
            Raw::Text(r#"{"event":"connected","protocol":"Call","version":"1.0.0"}"#.into()),
            Raw::Text(start_json()),
            Raw::Text(media_json(3, "%%%not base64%%%")),
            Raw::Text(media_json(4, &b64(1))),
            Raw::Text(media_json(5, &b64(159))),
            Raw::Text(media_json(6, &b64(321))),
            Raw::Text(r#"{"event":"media","sequenceNumber":"7","streamSid":"MZh"}"#.into()),
            Raw::Text(format!(
                r#"{{"event":"media","pad":"{}"}}"#,
                "x".repeat(1 << 20)
            )),
            Raw::Abort,
        ],
        vec![
            Raw::Text(r#"{"event":"connected","protocol":"Call","version":"1.0.0"}"#.into()),
            Raw::Text(start_json()),
            Raw::Text(media_json(3, &b64(160))),
            Raw::Abort,
        ],
    ]
}

/// A readiness wait: polls `f` every 10 ms until it holds; panics naming `what` after `limit`.
pub async fn wait_until(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + limit;
    while !f() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {limit:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Runs one hostile script against a Twilio endpoint, ignoring every error.
pub async fn send_raw(url: &str, script: &[Raw]) {
    let Ok((mut ws, _)) = tokio_tungstenite::connect_async(url).await else {
        return;
    };
    for step in script {
        let r = match step {
            Raw::Text(t) => ws.send(Message::text(t.clone())).await,
            Raw::Binary(b) => ws.send(Message::binary(b.clone())).await,
            Raw::Abort => break,
        };
        if r.is_err() {
            break;
        }
        // One message per 20 ms, at a media stream's pace.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(ws);
}

/// A raw HTTP/1.1 exchange; returns the whole response.
pub async fn http(addr: &SocketAddr, request: &str) -> String {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(request.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

/// Best normalised cross-correlation of the first `max_len` samples of `clip` against `track`,
/// over starts within ±`slack` samples of `at`, stepping by `step`.
pub fn best_match(
    track: &[i16],
    clip: &[i16],
    at: usize,
    slack: usize,
    max_len: usize,
    step: usize,
) -> f64 {
    let clip = &clip[..clip.len().min(max_len)];
    let mut best = 0.0f64;
    for lag in (at.saturating_sub(slack)..=at + slack).step_by(step.max(1)) {
        let n = clip.len().min(track.len().saturating_sub(lag));
        if n < clip.len() / 2 {
            continue;
        }
        let (mut xy, mut xx, mut yy) = (0.0f64, 0.0f64, 0.0f64);
        for i in 0..n {
            let (x, y) = (f64::from(track[lag + i]), f64::from(clip[i]));
            xy += x * y;
            xx += x * x;
            yy += y * y;
        }
        if xx > 0.0 && yy > 0.0 {
            best = best.max(xy / (xx * yy).sqrt());
        }
    }
    best
}

/// The next `n` calls to end, within `limit` (panics naming how many came).
pub async fn finished_calls(
    rx: &mut tokio::sync::broadcast::Receiver<baton::server::calls::FinishedCall>,
    n: usize,
    limit: Duration,
) -> Vec<baton::server::calls::FinishedCall> {
    let deadline = tokio::time::Instant::now() + limit;
    let mut out = Vec::new();
    while out.len() < n {
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Ok(call)) => out.push(call),
            Ok(Err(e)) => panic!("finished-call feed: {e}"),
            Err(_) => panic!("only {} of {n} calls ended within {limit:?}", out.len()),
        }
    }
    out
}

/// A call's figures are those of a normal call: it ended because the caller hung up, the agent
/// answered (a first-audio figure), and playout never ran dry more than `max_underruns` ticks.
pub fn assert_normal(call: &baton::server::calls::FinishedCall, max_underruns: u64) {
    let r = match &call.outcome {
        Ok(r) => r,
        Err(e) => panic!("call {} failed: {e}", call.stream_sid),
    };
    let who = &call.stream_sid;
    assert_eq!(r.end_reason, "caller hung up", "call {who}: {r:?}");
    assert!(
        !r.first_audio_ms.is_empty(),
        "call {who}: no first audio: {r:?}"
    );
    assert!(
        r.underruns <= max_underruns,
        "call {who}: {} underruns (at most {max_underruns})",
        r.underruns
    );
    assert!(
        r.protocol_errors.is_empty(),
        "call {who}: {:?}",
        r.protocol_errors
    );
}

/// A Twilio-protocol caller saying the first 1.4 s of `caller_01.wav` after 0.3 s, then silent
/// for 4 s (the answer starts within them, even on a busy machine) and hanging up once the agent has been quiet for
/// 0.8 s (at most `max_tail` after that), with its own stream id. Short, so that many can run at
/// once on a small machine.
pub fn speaking_caller(
    stream_sid: &str,
    max_tail: Duration,
) -> baton::leg::twilio::caller::CallerOptions {
    let clip = baton::audio::wav::read(&Path::new(ROOT).join("audio-fixtures/clips/caller_01.wav"))
        .unwrap();
    let rate = clip.rate as usize;
    let mut pcm = vec![0i16; rate * 3 / 10];
    pcm.extend_from_slice(&clip.samples[..clip.samples.len().min(rate * 14 / 10)]);
    pcm.extend(std::iter::repeat_n(0, rate * 4));
    let mut o =
        baton::leg::twilio::caller::CallerOptions::from_pcm(&pcm, clip.rate, stream_sid).unwrap();
    o.stream_sid = stream_sid.to_owned();
    o.quiet_after = Duration::from_millis(800);
    o.max_tail = max_tail;
    o
}

/// A separate `baton mock-model` process, killed when dropped.
pub struct MockModel(std::process::Child);

impl Drop for MockModel {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `baton mock-model --profile <profile> --scenario <scenario>` on a loopback port: the
/// process and the URL it announced (an OpenAI profile's endpoint is that URL + `/v1`).
pub fn start_mock_model(profile: &str, scenario: &Path) -> (MockModel, String) {
    use std::io::BufRead;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_baton"))
        .args([
            "mock-model",
            "--listen",
            "127.0.0.1:0",
            "--profile",
            profile,
        ])
        .arg("--scenario")
        .arg(scenario)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("cannot start the baton binary");
    let stdout = child.stdout.take().expect("piped stdout");
    let mock = MockModel(child);
    let mut line = String::new();
    std::io::BufReader::new(stdout)
        .read_line(&mut line)
        .unwrap();
    let url = line
        .trim()
        .strip_prefix("baton mock-model listening on ")
        .unwrap_or_else(|| panic!("mock-model did not announce its URL: {line:?}"))
        .to_owned();
    (mock, url)
}

/// Waits (at most 20 s of real time) until `f` holds, asking every 20 ms; panics naming `what`
/// if it never does. For conditions nothing announces (a listener bound, a peer's state).
pub async fn eventually(what: &str, f: impl FnMut() -> bool) {
    assert!(holds_soon(f).await, "timed out waiting for {what}");
}

/// Whether `f` comes to hold within 20 s of real time, asking every 20 ms: [`eventually`] for a
/// caller that says itself what a timeout means.
pub async fn holds_soon(mut f: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        if f() {
            return true;
        }
        if std::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Where pieces of `clip` are heard in `track`, one after another as they are in the clip: the
/// piece starting at `starts[0]` (samples into the clip) anywhere from `from` to `to`, and each
/// later one within `tol` samples of where the clip puts it after the one before. Returns each
/// piece's (start in `track`, score); panics if the clip is too short for a piece. A machine
/// that stalls for a moment, or a jitter buffer that adapts, moves whatever plays after that
/// point by a frame or more either way; one long match loses its score across such a move, while
/// each piece is still heard whole where it landed. Choose voiced pieces: a quiet one matches
/// little of anything.
pub fn pieces_heard(
    track: &[i16],
    clip: &[i16],
    starts: &[usize],
    piece: usize,
    (from, to): (usize, usize),
    tol: usize,
) -> Vec<(usize, f64)> {
    let last = track.len().saturating_sub(piece);
    let mut found: Vec<(usize, f64)> = Vec::with_capacity(starts.len());
    for (k, &start) in starts.iter().enumerate() {
        let part = clip
            .get(start..start + piece)
            .unwrap_or_else(|| panic!("the clip ({} samples) has no piece at {start}", clip.len()));
        let (lo, hi) = match (k, found.last()) {
            (1.., Some(&(prev, _))) => {
                let expected = prev + (start - starts[k - 1]);
                (expected.saturating_sub(tol).max(from), expected + tol)
            }
            _ => (from, to),
        };
        let score = |lag: usize| best_match(track, part, lag, 0, piece, 1);
        // Every other lag, then the lags beside the best of them.
        let mut best = (lo, 0.0f64);
        for lag in (lo..=hi.min(last)).step_by(2) {
            let s = score(lag);
            if s > best.1 {
                best = (lag, s);
            }
        }
        for lag in [best.0.saturating_sub(1), best.0 + 1] {
            let s = if lag <= last { score(lag) } else { 0.0 };
            if s > best.1 {
                best = (lag, s);
            }
        }
        found.push(best);
    }
    found
}
