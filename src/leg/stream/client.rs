//! A `/stream` client that behaves like an app: it sends `start`, then the fixture in real-time
//! chunks (PCM16 of any chunk size, or one 20 ms Opus packet per message), and plays what baton
//! sends through a playback queue consumed at real time (one 20 ms frame per tick). Each `mark`
//! is echoed once the audio queued before it has played; `clear` drops the queued audio and the
//! marks behind it. Transcript fragments and the final `stop` (with the call's summary) are kept.
//!
//! After the fixture, the client waits until the agent has been quiet for `quiet_after` (at most
//! `max_tail`), sends `stop`, and reads until baton closes the socket.

use std::collections::VecDeque;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::Value;
use tokio::time::{Instant, sleep_until, timeout};
use tokio_tungstenite::tungstenite::Message;

use super::codec::AudioCodec;
use super::wire::{self, Format, FromClient};
use crate::audio::{samples_per_frame, vad};
use crate::leg::fixture::Recording;
use crate::leg::twilio::cadence::Cadence;

const TICK: Duration = Duration::from_millis(20);

/// How the client behaves.
#[derive(Clone, Debug)]
pub struct ClientOptions {
    pub format: Format,
    /// The caller's audio at the format's rate.
    pub samples: Vec<i16>,
    /// PCM16 only: bytes per audio message (any size; baton re-frames). Default: 20 ms.
    pub chunk_bytes: Option<usize>,
    pub quiet_after: Duration,
    pub max_tail: Duration,
    pub connect_timeout: Duration,
}

impl ClientOptions {
    pub fn new(format: Format, samples: Vec<i16>) -> Self {
        ClientOptions {
            format,
            samples,
            chunk_bytes: None,
            quiet_after: Duration::from_millis(1500),
            max_tail: Duration::from_secs(20),
            connect_timeout: Duration::from_secs(5),
        }
    }
}

/// The call could not start.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("{url}: cannot connect: {reason}")]
    Connect { url: String, reason: String },
    #[error(
        "refused: the server {}{}",
        crate::leg::socket::closed_words(*code, reason),
        message.as_deref().map(|m| format!("; it said: {m}")).unwrap_or_default()
    )]
    Refused {
        code: Option<u16>,
        reason: String,
        message: Option<String>,
    },
    #[error("connection failed before \"started\": {0}")]
    Start(String),
    #[error("codec: {0}")]
    Codec(String),
}

/// What the client sent, heard and saw.
#[derive(Clone, Debug, Default)]
pub struct ClientReport {
    /// Left: the caller; right: the agent as played; at the format's rate.
    pub recording: Recording,
    pub frames_sent: u64,
    pub audio_received: u64,
    /// Mark names in the order they arrived, and in the order they were echoed.
    pub marks_received: Vec<String>,
    pub marks_echoed: Vec<String>,
    pub clears: u64,
    /// `(role, text)` fragments as they came.
    pub transcripts: Vec<(String, String)>,
    /// The final `stop`: reason and summary.
    pub stop: Option<(String, Value)>,
    pub errors: Vec<String>,
    pub intervals_us: Vec<u32>,
    pub cadence: Cadence,
    /// How the connection ended: "client stop" or the server's close.
    pub end: String,
}

/// Places one call to `url` (`ws://…/stream`) and runs it to the end.
pub async fn dial(url: &str, opts: ClientOptions) -> Result<ClientReport, ClientError> {
    let connect = tokio_tungstenite::connect_async_with_config(url, None, true);
    let (mut ws, _) = match timeout(opts.connect_timeout, connect).await {
        Ok(Ok(x)) => x,
        Ok(Err(e)) => {
            return Err(ClientError::Connect {
                url: url.into(),
                reason: e.to_string(),
            });
        }
        Err(_) => {
            return Err(ClientError::Connect {
                url: url.into(),
                reason: "timed out".into(),
            });
        }
    };
    let start = wire::client_json(&FromClient::Start {
        format: opts.format,
    });
    ws.send(Message::text(start))
        .await
        .map_err(|e| ClientError::Start(e.to_string()))?;
    // Wait for `started` (or the refusal).
    let mut error_message = None;
    loop {
        match timeout(opts.connect_timeout, ws.next()).await {
            Ok(Some(Ok(Message::Text(t)))) => {
                let v: Value = serde_json::from_str(t.as_str()).unwrap_or(Value::Null);
                match v["event"].as_str() {
                    Some("started") => break,
                    Some("error") => error_message = v["message"].as_str().map(str::to_owned),
                    _ => {}
                }
            }
            Ok(Some(Ok(Message::Close(f)))) => {
                return Err(ClientError::Refused {
                    code: f.as_ref().map(|f| u16::from(f.code)),
                    reason: f.map(|f| f.reason.as_str().to_owned()).unwrap_or_default(),
                    message: error_message,
                });
            }
            Ok(Some(Ok(_))) => {}
            Ok(Some(Err(e))) => return Err(ClientError::Start(e.to_string())),
            Ok(None) => return Err(ClientError::Start("closed".into())),
            Err(_) => return Err(ClientError::Start("no \"started\"".into())),
        }
    }
    let rate = opts.format.sample_rate;
    let spf = samples_per_frame(rate);
    let mut tx = AudioCodec::new(opts.format).map_err(|e| ClientError::Codec(e.to_string()))?;
    let mut rx = AudioCodec::new(opts.format).map_err(|e| ClientError::Codec(e.to_string()))?;
    let chunk = match (opts.format.encoding, opts.chunk_bytes) {
        (wire::Encoding::Pcm16, Some(b)) => b.max(1),
        _ => spf * 2,
    };
    let mut pending: Vec<u8> = Vec::new();
    let mut rep = ClientReport {
        recording: Recording {
            rate,
            caller: opts.samples.clone(),
            ..Default::default()
        },
        ..Default::default()
    };
    let mut queue: VecDeque<i16> = VecDeque::new();
    let (mut queued, mut consumed) = (0u64, 0u64);
    let mut marks: VecDeque<(u64, String)> = VecDeque::new();
    let mut decoded = Vec::new();
    let mut last_audio: Option<Instant> = None;
    let mut last_voiced: Option<Instant> = None;
    let t0 = Instant::now();
    let total_ticks = opts.samples.len().div_ceil(spf);
    let fixture_end = t0 + TICK * total_ticks as u32;
    let mut n = 0usize;
    let end = loop {
        let due = t0 + TICK * (n as u32 + 1);
        tokio::select! {
            biased;
            msg = ws.next() => {
                let now = Instant::now();
                match msg {
                    Some(Ok(Message::Binary(b))) => {
                        rep.audio_received += 1;
                        if let Some(prev) = last_audio
                            && now.saturating_duration_since(prev) <= Duration::from_millis(200)
                        {
                            let us = now.saturating_duration_since(prev).as_micros();
                            rep.intervals_us.push(u32::try_from(us).unwrap_or(u32::MAX));
                        }
                        last_audio = Some(now);
                        decoded.clear();
                        if let Err(e) = rx.decode(&b, &mut decoded) {
                            rep.errors.push(e.to_string());
                        }
                        queued += decoded.len() as u64;
                        queue.extend(decoded.iter().copied());
                    }
                    Some(Ok(Message::Text(t))) => {
                        let v: Value = serde_json::from_str(t.as_str()).unwrap_or(Value::Null);
                        match v["event"].as_str() {
                            Some("mark") => {
                                let name = v["name"].as_str().unwrap_or_default().to_owned();
                                rep.marks_received.push(name.clone());
                                marks.push_back((queued, name));
                            }
                            Some("clear") => {
                                rep.clears += 1;
                                consumed += queue.len() as u64;
                                queue.clear();
                                marks.clear();
                            }
                            Some("transcript") => rep.transcripts.push((
                                v["role"].as_str().unwrap_or_default().to_owned(),
                                v["text"].as_str().unwrap_or_default().to_owned(),
                            )),
                            Some("stop") => {
                                rep.stop = Some((
                                    v["reason"].as_str().unwrap_or_default().to_owned(),
                                    v["summary"].clone(),
                                ));
                            }
                            Some("error") => rep.errors.push(t.as_str().to_owned()),
                            _ => {}
                        }
                    }
                    Some(Ok(Message::Close(f))) => {
                        break format!("server closed ({})", f.map_or("no code".into(), |f| format!("{}: {}", f.code, f.reason)));
                    }
                    Some(Ok(_)) => {}
                    Some(Err(e)) => break format!("connection lost: {e}"),
                    None => break "connection lost".to_owned(),
                }
            }
            _ = sleep_until(due) => {
                let now = Instant::now();
                // The audio taken at the previous tick has played: echo the marks behind it.
                while marks.front().is_some_and(|(at, _)| *at <= consumed) {
                    if let Some((_, name)) = marks.pop_front() {
                        let echo = wire::client_json(&FromClient::Mark { name: name.clone() });
                        if ws.send(Message::text(echo)).await.is_err() {
                            break;
                        }
                        rep.marks_echoed.push(name);
                    }
                }
                let take = queue.len().min(spf);
                if take > 0 {
                    let at = (n + 1) * spf;
                    let agent = &mut rep.recording.agent;
                    agent.resize(at, 0);
                    agent.extend(queue.drain(..take));
                    consumed += take as u64;
                    if vad::rms_dbfs(&agent[at..]) > vad::DEFAULT_THRESHOLD_DBFS {
                        last_voiced = Some(now);
                    }
                }
                if n >= total_ticks {
                    let quiet_since = last_voiced.map_or(fixture_end, |t| t.max(fixture_end));
                    if now >= quiet_since + opts.quiet_after || now >= fixture_end + opts.max_tail {
                        let stop = wire::client_json(&FromClient::Stop);
                        let _ = ws.send(Message::text(stop)).await;
                        break "client stop".to_owned();
                    }
                }
                // The audio "spoken" during this tick goes out (silence after the fixture).
                let lo = (n * spf).min(opts.samples.len());
                let hi = ((n + 1) * spf).min(opts.samples.len());
                let mut frame = vec![0i16; spf];
                frame[..hi - lo].copy_from_slice(&opts.samples[lo..hi]);
                let mut msgs = Vec::new();
                match opts.format.encoding {
                    wire::Encoding::Opus => match tx.encode(&frame) {
                        Ok(p) => msgs.push(p),
                        Err(e) => rep.errors.push(e.to_string()),
                    },
                    wire::Encoding::Pcm16 => {
                        pending.extend(frame.iter().flat_map(|s| s.to_le_bytes()));
                        while pending.len() >= chunk {
                            msgs.push(pending.drain(..chunk).collect());
                        }
                    }
                }
                for m in msgs {
                    if ws.send(Message::binary(m)).await.is_err() {
                        break;
                    }
                }
                if n < total_ticks {
                    rep.frames_sent += 1;
                }
                n += 1;
            }
        }
    };
    rep.end = end;
    if rep.end == "client stop" {
        // Read the summary and baton's close.
        let _ = timeout(Duration::from_secs(3), async {
            while let Some(Ok(m)) = ws.next().await {
                match m {
                    Message::Text(t) => {
                        let v: Value = serde_json::from_str(t.as_str()).unwrap_or(Value::Null);
                        if v["event"] == "stop" {
                            rep.stop = Some((
                                v["reason"].as_str().unwrap_or_default().to_owned(),
                                v["summary"].clone(),
                            ));
                        }
                    }
                    Message::Close(_) => break,
                    _ => {}
                }
            }
        })
        .await;
    }
    let _ = ws.close(None).await;
    rep.cadence = Cadence::from_intervals_us(&rep.intervals_us);
    let len = rep.recording.caller.len().max(rep.recording.agent.len());
    rep.recording.caller.resize(len, 0);
    rep.recording.agent.resize(len, 0);
    Ok(rep)
}
