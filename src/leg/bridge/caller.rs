//! A bridge-protocol caller: a client that behaves like the bridge's side of a media stream —
//! Twilio, Telnyx, Plivo, Exotel or Vonage ([`CallerOptions::dialect`]) — so tests, `baton dial`
//! and load benchmarks can drive any server that speaks those protocols.
//!
//! It opens the WebSocket (signed with `X-Twilio-Signature` when given an auth token; any extra
//! headers added), sends the dialect's opening (`connected` and `start`; Vonage's
//! `websocket:connected`), then one 20 ms media message per tick at real time (tokio's clock)
//! carrying the fixture in the stream's format, and silence once the fixture has ended. What the
//! server sends back is played **like the bridge plays it**: queued, and consumed at real time
//! (one 20 ms frame per tick); each mark (Plivo checkpoint, Vonage notify) is acknowledged once the
//! audio queued before it has finished playing; a clear drops the unplayed audio and either echoes
//! every pending mark at once (Twilio, Telnyx, Exotel) or acknowledges the clear (Plivo
//! `clearedAudio`, Vonage `websocket:cleared`).
//!
//! What the caller hears is recorded on its own timeline: the stereo [`Recording`] holds the
//! caller's audio on the left and, on the right, the agent's audio at the time it was played.
//! After the fixture, the caller waits until the agent has been quiet for `quiet_after` (at most
//! `max_tail`), sends `stop` (Vonage: none) and closes.
//!
//! One call is one future (no spawned tasks): a tick timer and the socket, selected in a loop.
//! Mark echoes due at a tick leave in the same write as that tick's media. Without a recording
//! ([`CallerOptions::record_audio`] off, as a load client runs) what is heard is decoded into a
//! reused buffer, for the voice detection that decides when to hang up.

use std::collections::VecDeque;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::time::{Instant, sleep_until, timeout};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::{WebSocketStream, connect_async_with_config};

use super::wire::{self, BridgeWriter, CallIds, Outgoing, Reply};
use crate::audio::vad;
use crate::leg::fixture::Recording;
use crate::leg::twilio::cadence::Cadence;
use crate::leg::twilio::signature;

const TICK: Duration = Duration::from_millis(20);

mod options;
pub use options::CallerOptions;

/// The call could not be placed.
#[derive(Debug, thiserror::Error)]
pub enum CallerError {
    #[error("{url}: not a usable WebSocket URL: {reason}")]
    BadUrl { url: String, reason: String },
    #[error(
        "{url}: the server refused the WebSocket upgrade with HTTP {status}{}",
        why(reason)
    )]
    Refused {
        url: String,
        status: u16,
        /// What the server said in the response body (trimmed; empty if nothing).
        reason: String,
    },
    #[error("{url}: cannot connect: {reason}")]
    Connect { url: String, reason: String },
    #[error("{url}: no WebSocket handshake within {after:?}")]
    ConnectTimeout { url: String, after: Duration },
    #[error("{url}: the connection failed while starting the stream: {reason}")]
    Start { url: String, reason: String },
}

fn why(reason: &str) -> String {
    if reason.is_empty() {
        String::new()
    } else {
        format!(": {reason}")
    }
}

/// The first line of a refusal's body, as text, at most 1,000 characters (a server's own
/// sentence whole, not a page).
fn refusal_reason(body: Option<&Vec<u8>>) -> String {
    let text = body
        .map(|b| String::from_utf8_lossy(b).into_owned())
        .unwrap_or_default();
    // baton's own refusals are `{"error": "..."}`: the sentence, not the JSON around it.
    let said = serde_json::from_str::<serde_json::Value>(&text)
        .ok()
        .and_then(|v| v.get("error")?.as_str().map(str::to_owned));
    said.as_deref()
        .unwrap_or(&text)
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or_default()
        .chars()
        .take(1000)
        .collect()
}

/// What a caller tells [`CallerOptions::events`] while the call runs, for live progress. Times
/// are on the caller's timeline (0: the first media frame's slot).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallerEvent {
    /// The stream started (the dialect's opening was sent).
    Started,
    /// Agent audio began playing to the caller after a silence.
    AgentSpeaking { at: Duration },
}

/// How the call ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CallerEnd {
    /// The caller sent `stop` and closed, as Twilio does when a call ends.
    HungUp,
    /// The server closed the socket first.
    ServerClosed { code: Option<u16>, reason: String },
    /// The connection failed.
    ConnectionLost(String),
}

/// What the caller sent, heard and saw.
#[derive(Clone, Debug)]
pub struct CallerReport {
    /// Left: the caller; right: the agent as heard; 8 kHz, sample-aligned on the caller's timeline.
    pub recording: Recording,
    /// Media messages sent (fixture and the silent tail).
    pub frames_sent: u64,
    /// Media messages received.
    pub media_received: u64,
    /// Payload bytes received.
    pub bytes_received: u64,
    /// Audio played to the caller, in ms.
    pub played_ms: u64,
    /// Audio dropped by `clear` before it was played, in ms.
    pub dropped_ms: u64,
    pub marks_received: u64,
    pub marks_echoed: u64,
    pub clears_received: u64,
    /// Messages from the server that could not be used (each one is also in `errors`, up to 20).
    pub bad_messages: u64,
    pub errors: Vec<String>,
    /// Runs of agent `media` separated by pauses longer than `burst_gap`.
    pub bursts: u64,
    /// Intervals between consecutive agent `media` messages within a burst: how far they stray
    /// from `cadence_period_ms`.
    pub cadence: Cadence,
    /// The dialect's interval between agent `media` messages: 20 ms (one frame each), Exotel's
    /// 100 ms chunks.
    pub cadence_period_ms: u16,
    /// The raw intervals behind `cadence`, in µs.
    pub intervals_us: Vec<u32>,
    /// How late the caller's own 20 ms tick timer fired, per tick, in µs: the caller's own
    /// scheduling delay. When it is large, the caller is overloaded and its `cadence` includes
    /// that delay as well as the server's.
    pub tick_late_us: Vec<u32>,
    pub end: CallerEnd,
}

/// Places one call to a Twilio-protocol server at `url` (`ws://` or `wss://`) and runs it to the
/// end. Errors only if the stream cannot be started; a connection lost later ends the report.
pub async fn dial(url: &str, opts: CallerOptions) -> Result<CallerReport, CallerError> {
    let mut request = url.into_client_request().map_err(|e| CallerError::BadUrl {
        url: url.to_owned(),
        reason: e.to_string(),
    })?;
    for (name, value) in &opts.headers {
        let bad = |reason: String| CallerError::BadUrl {
            url: url.to_owned(),
            reason,
        };
        let name = tokio_tungstenite::tungstenite::http::HeaderName::from_bytes(name.as_bytes())
            .map_err(|e| bad(e.to_string()))?;
        let value = HeaderValue::from_str(value).map_err(|e| bad(e.to_string()))?;
        request.headers_mut().insert(name, value);
    }
    if let Some(token) = &opts.auth_token {
        let signed = opts.signed_url.as_deref().unwrap_or(url);
        let sig = signature::sign(signed, &[], token);
        let value = HeaderValue::from_str(&sig).map_err(|e| CallerError::BadUrl {
            url: url.to_owned(),
            reason: e.to_string(),
        })?;
        request
            .headers_mut()
            .insert(signature::SIGNATURE_HEADER, value);
    }
    // A small read buffer: the WebSocket layer zero-fills all of it before each read (see
    // `server::READ_BUFFER`), which dominates a load client's CPU at the 128 KiB default.
    let config = WebSocketConfig::default()
        .max_message_size(Some(wire::MAX_OUTBOUND_MESSAGE))
        .max_frame_size(Some(wire::MAX_OUTBOUND_MESSAGE))
        .read_buffer_size(super::server::READ_BUFFER);
    // Real-time audio: every 20 ms message goes out at once (no Nagle delay).
    let connect = connect_async_with_config(request, Some(config), true);
    let ws = match timeout(opts.connect_timeout, connect).await {
        Err(_) => {
            return Err(CallerError::ConnectTimeout {
                url: url.to_owned(),
                after: opts.connect_timeout,
            });
        }
        Ok(Err(tokio_tungstenite::tungstenite::Error::Http(resp))) => {
            return Err(CallerError::Refused {
                url: url.to_owned(),
                status: resp.status().as_u16(),
                reason: refusal_reason(resp.body().as_ref()),
            });
        }
        Ok(Err(e)) => {
            return Err(CallerError::Connect {
                url: url.to_owned(),
                reason: e.to_string(),
            });
        }
        Ok(Ok((ws, _))) => ws,
    };
    run(ws, opts).await.map_err(|reason| CallerError::Start {
        url: url.to_owned(),
        reason,
    })
}

/// A mark waiting for the audio queued before it to play.
struct PendingMark {
    /// Byte position (since the call began) the audio must be consumed up to.
    at: u64,
    name: String,
}

/// Twilio's playback queue as the caller models it.
struct Playback {
    queue: VecDeque<u8>,
    /// Bytes ever queued.
    queued_total: u64,
    /// Bytes taken for playing (or dropped).
    consumed_total: u64,
    /// Bytes whose playing has finished (or that were dropped): taken before the current tick.
    completed_total: u64,
    marks: VecDeque<PendingMark>,
}

struct Call<S> {
    /// One socket both ways: a tick's handler writes once the read it raced is dropped (no
    /// split halves and the lock between them).
    ws: WebSocketStream<S>,
    writer: BridgeWriter,
    seq: u64,
    report: CallerReport,
    play: Playback,
    last_media_at: Option<Instant>,
    last_voiced_heard: Option<Instant>,
    /// The last played frame was voiced.
    agent_voiced: bool,
    events: Option<tokio::sync::mpsc::UnboundedSender<CallerEvent>>,
    /// Decoded agent audio of one tick when nothing is recorded.
    scratch: Vec<i16>,
    /// Messages fed but not yet written.
    unflushed: bool,
}

fn message(out: Outgoing) -> Message {
    match out {
        Outgoing::Text(t) => Message::Text(t.into()),
        Outgoing::Binary(b) => Message::Binary(b.into()),
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> Call<S> {
    /// Sends `out` and everything fed before it, in one write.
    async fn send(&mut self, out: Outgoing) -> Result<(), String> {
        self.unflushed = false;
        self.ws.send(message(out)).await.map_err(|e| e.to_string())
    }

    /// Queues `out` for the next write (a mark echo goes out with the tick's media).
    async fn feed(&mut self, out: Outgoing) -> Result<(), String> {
        self.unflushed = true;
        self.ws.feed(message(out)).await.map_err(|e| e.to_string())
    }

    /// Writes whatever was fed.
    async fn flush(&mut self) -> Result<(), String> {
        if !self.unflushed {
            return Ok(());
        }
        self.unflushed = false;
        self.ws.flush().await.map_err(|e| e.to_string())
    }

    /// Bytes per ms of the stream's format.
    fn bytes_per_ms(&self) -> u64 {
        (self.writer.format.frame_bytes() / 20) as u64
    }

    fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    async fn echo_mark(&mut self, name: &str) -> Result<(), String> {
        let seq = self.next_seq();
        let msg = self.writer.mark_echo(seq, name);
        self.report.marks_echoed += 1;
        self.feed(msg).await
    }

    /// Handles one message from the server; `Err` ends the call with that reason.
    async fn inbound(
        &mut self,
        msg: Option<Result<Message, tokio_tungstenite::tungstenite::Error>>,
        now: Instant,
        burst_gap: Duration,
    ) -> Result<(), CallerEnd> {
        let reply = match msg {
            None => {
                return Err(CallerEnd::ConnectionLost(
                    "closed without a close frame".into(),
                ));
            }
            Some(Err(e)) => return Err(CallerEnd::ConnectionLost(e.to_string())),
            Some(Ok(Message::Close(frame))) => {
                return Err(CallerEnd::ServerClosed {
                    code: frame.as_ref().map(|f| u16::from(f.code)),
                    reason: frame
                        .map(|f| f.reason.as_str().to_owned())
                        .unwrap_or_default(),
                });
            }
            Some(Ok(Message::Text(text))) => wire::parse_reply(self.writer.dialect, text.as_str()),
            Some(Ok(Message::Binary(bytes))) if self.writer.dialect.binary_audio() => {
                Ok(Reply::Media(bytes.to_vec()))
            }
            Some(Ok(Message::Binary(_))) => {
                self.bad("binary message ignored: the protocol is JSON text".into());
                return Ok(());
            }
            Some(Ok(_)) => return Ok(()),
        };
        match reply {
            Err(e) => self.bad(e.to_string()),
            Ok(Reply::Media(payload)) => {
                self.report.media_received += 1;
                self.report.bytes_received += payload.len() as u64;
                if let Some(prev) = self.last_media_at {
                    let gap = now.saturating_duration_since(prev);
                    if gap > burst_gap {
                        self.report.bursts += 1;
                    } else {
                        let us = u32::try_from(gap.as_micros()).unwrap_or(u32::MAX);
                        self.report.intervals_us.push(us);
                    }
                } else {
                    self.report.bursts += 1;
                }
                self.last_media_at = Some(now);
                self.play.queued_total += payload.len() as u64;
                self.play.queue.extend(payload);
            }
            Ok(Reply::Mark(name)) => {
                self.report.marks_received += 1;
                if self.play.completed_total >= self.play.queued_total {
                    // Nothing queued or playing ahead of it: Twilio echoes it straight away.
                    self.echo_mark(&name)
                        .await
                        .map_err(CallerEnd::ConnectionLost)?;
                } else {
                    let at = self.play.queued_total;
                    self.play.marks.push_back(PendingMark { at, name });
                }
            }
            Ok(Reply::Clear) => {
                self.report.clears_received += 1;
                let dropped = self.play.queue.len() as u64;
                self.report.dropped_ms += dropped / self.bytes_per_ms();
                self.play.queue.clear();
                self.play.consumed_total = self.play.queued_total;
                self.play.completed_total = self.play.queued_total;
                let seq = self.next_seq();
                if let Some(ack) = self.writer.cleared(seq) {
                    // Bridges that acknowledge a clear do not echo the marks it dropped.
                    self.play.marks.clear();
                    self.send(ack).await.map_err(CallerEnd::ConnectionLost)?;
                }
                while let Some(m) = self.play.marks.pop_front() {
                    self.echo_mark(&m.name)
                        .await
                        .map_err(CallerEnd::ConnectionLost)?;
                }
            }
            Ok(Reply::Unknown(event)) => {
                tracing::debug!(%event, "unknown event from the server ignored");
            }
        }
        Ok(())
    }

    fn bad(&mut self, e: String) {
        self.report.bad_messages += 1;
        if self.report.errors.len() < 20 {
            self.report.errors.push(e);
        }
    }

    /// A tick: the audio taken at the previous tick has finished playing, so the marks behind it
    /// are echoed; then the next 20 ms of queued audio starts playing at recording position `at`.
    async fn play_tick(&mut self, at: usize, now: Instant, record: bool) -> Result<(), String> {
        let slot = at;
        self.play.completed_total = self.play.consumed_total;
        while self
            .play
            .marks
            .front()
            .is_some_and(|m| m.at <= self.play.completed_total)
        {
            if let Some(m) = self.play.marks.pop_front() {
                self.echo_mark(&m.name).await?;
            }
        }
        let format = self.writer.format;
        let n = self.play.queue.len().min(format.frame_bytes());
        let n = n - n % format.encoding.bytes_per_sample();
        if n > 0 {
            let bytes_per_ms = self.bytes_per_ms();
            // Without a recording the frame is decoded into a reused buffer, for the VAD only.
            let (agent, at) = if record {
                let agent = &mut self.report.recording.agent;
                if agent.len() < at {
                    agent.resize(at, 0);
                }
                agent.truncate(at);
                (agent, at)
            } else {
                self.scratch.clear();
                (&mut self.scratch, 0)
            };
            let frame: Vec<u8> = self.play.queue.drain(..n).collect();
            format.decode(&frame, agent);
            self.play.consumed_total += n as u64;
            self.report.played_ms += n as u64 / bytes_per_ms;
            let played = &agent[at..];
            let voiced = vad::rms_dbfs(played) > vad::DEFAULT_THRESHOLD_DBFS;
            if voiced {
                self.last_voiced_heard = Some(now);
            }
            if let Some(tx) = self
                .events
                .as_ref()
                .filter(|_| voiced && !self.agent_voiced)
            {
                // The frame starts playing in the slot that begins at recording sample `slot`.
                let ms = slot as u64 * 1000 / u64::from(format.rate.max(1));
                let _ = tx.send(CallerEvent::AgentSpeaking {
                    at: Duration::from_millis(ms),
                });
            }
            self.agent_voiced = voiced;
        } else {
            self.agent_voiced = false;
        }
        Ok(())
    }
}

async fn run<S: AsyncRead + AsyncWrite + Unpin>(
    ws: WebSocketStream<S>,
    opts: CallerOptions,
) -> Result<CallerReport, String> {
    let format = opts.format;
    let dialect = opts.dialect;
    let frame = format.frame_samples();
    let said = opts.said();
    let fixture_frames = said.len().div_ceil(frame);
    let expected_frames = fixture_frames + opts.max_tail.as_millis() as usize / 20;
    let record = opts.record_audio;
    let recorded = if record { fixture_frames * frame } else { 0 };
    let mut call = Call {
        ws,
        writer: BridgeWriter::new(
            opts.dialect,
            CallIds {
                account_sid: opts.account_sid.clone(),
                call_sid: opts.call_sid.clone(),
                stream_sid: opts.stream_sid.clone(),
                custom_parameters: opts.custom_parameters.clone(),
            },
            format,
        ),
        seq: 0,
        report: CallerReport {
            recording: Recording {
                rate: format.rate,
                caller: Vec::with_capacity(recorded),
                agent: Vec::with_capacity(recorded),
                ..Default::default()
            },
            frames_sent: 0,
            media_received: 0,
            bytes_received: 0,
            played_ms: 0,
            dropped_ms: 0,
            marks_received: 0,
            marks_echoed: 0,
            clears_received: 0,
            bad_messages: 0,
            errors: Vec::new(),
            bursts: 0,
            cadence: Cadence::default(),
            cadence_period_ms: crate::audio::FRAME_MS as u16,
            intervals_us: Vec::with_capacity(expected_frames.min(1 << 16)),
            tick_late_us: Vec::with_capacity(expected_frames.min(1 << 16)),
            end: CallerEnd::HungUp,
        },
        play: Playback {
            queue: VecDeque::with_capacity(format.frame_bytes() * 50),
            queued_total: 0,
            consumed_total: 0,
            completed_total: 0,
            marks: VecDeque::new(),
        },
        last_media_at: None,
        last_voiced_heard: None,
        agent_voiced: false,
        events: opts.events.clone(),
        scratch: Vec::with_capacity(frame),
        unflushed: false,
    };

    let mut seq = 0;
    for msg in call.writer.opening(&mut seq) {
        call.send(msg).await?;
    }
    call.seq = seq;
    if let Some(started) = &opts.started {
        started.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
    }
    if let Some(tx) = &opts.events {
        let _ = tx.send(CallerEvent::Started);
    }

    let t0 = Instant::now();
    let fixture_end = t0 + TICK * fixture_frames as u32;
    let mut pcm = vec![0i16; frame];
    let mut codes = Vec::with_capacity(format.frame_bytes());
    // A media message held back to be sent after the next one (swap_every).
    let mut held: Option<Outgoing> = None;
    let mut n: usize = 0;
    // One timer for the call, re-armed per frame (a sleep made anew on every message would
    // register with the timer wheel each time).
    let tick = sleep_until(t0 + TICK);
    tokio::pin!(tick);
    let end = loop {
        let due = t0 + TICK * (n as u32 + 1);
        if tick.deadline() != due {
            tick.as_mut().reset(due);
        }
        tokio::select! {
            biased;
            msg = call.ws.next() => {
                if let Err(end) = call.inbound(msg, Instant::now(), opts.burst_gap).await {
                    break end;
                }
                // Marks echoed at once (nothing queued ahead of them, or a clear).
                if let Err(e) = call.flush().await {
                    break CallerEnd::ConnectionLost(e);
                }
            }
            () = &mut tick => {
                let now = Instant::now();
                let late = now.saturating_duration_since(due).as_micros();
                call.report.tick_late_us.push(u32::try_from(late).unwrap_or(u32::MAX));
                // Audio played from this tick on sits at the start of the next frame slot.
                if let Err(e) = call.play_tick((n + 1) * frame, now, record).await {
                    break CallerEnd::ConnectionLost(e);
                }
                if n >= fixture_frames {
                    // Quiet means nothing voiced heard lately; queued silence is quiet too.
                    let quiet_since = call.last_voiced_heard.map_or(fixture_end, |t| t.max(fixture_end));
                    if now >= quiet_since + opts.quiet_after || now >= fixture_end + opts.max_tail {
                        break CallerEnd::HungUp;
                    }
                }
                // Frame n has just been "spoken": send it.
                let lo = (n * frame).min(said.len());
                let hi = ((n + 1) * frame).min(said.len());
                pcm.fill(0);
                pcm[..hi - lo].copy_from_slice(&said[lo..hi]);
                codes.clear();
                format.encode(&pcm, &mut codes);
                if record {
                    format.decode(&codes, &mut call.report.recording.caller);
                }
                let seq = call.next_seq();
                let msg = call.writer.media(seq, n as u64 + 1, (n * 20) as u64, &codes);
                let swap = opts.swap_every > 0 && n % opts.swap_every == opts.swap_every - 1;
                let r = match held.take() {
                    Some(first) => match call.send(msg).await {
                        Ok(()) => call.send(first).await,
                        Err(e) => Err(e),
                    },
                    None if swap => {
                        held = Some(msg);
                        // Mark echoes fed at this tick still leave now.
                        call.flush().await
                    }
                    None => call.send(msg).await,
                };
                if let Err(e) = r {
                    break CallerEnd::ConnectionLost(e);
                }
                call.report.frames_sent += 1;
                n += 1;
            }
        }
    };

    if end == CallerEnd::HungUp {
        if let Some(last) = held.take() {
            let _ = call.send(last).await;
        }
        let seq = call.next_seq();
        if let Some(stop) = call.writer.stop(seq) {
            let _ = call.send(stop).await;
        }
        let close = CloseFrame {
            code: CloseCode::Normal,
            reason: "call ended".into(),
        };
        let _ = call.ws.send(Message::Close(Some(close))).await;
        // Wait (briefly) for the server's close reply.
        let _ = timeout(Duration::from_secs(1), async {
            while let Some(Ok(m)) = call.ws.next().await {
                if matches!(m, Message::Close(_)) {
                    break;
                }
            }
        })
        .await;
    }

    let mut report = call.report;
    report.end = end;
    report.cadence_period_ms = (crate::audio::FRAME_MS as usize * dialect.frames_per_message())
        .try_into()
        .unwrap_or(u16::MAX);
    report.cadence = Cadence::around(
        &report.intervals_us,
        u32::from(report.cadence_period_ms) * 1000,
    );
    report.recording.frames_heard = report.media_received;
    report.recording.clears = report.clears_received;
    let len = report
        .recording
        .caller
        .len()
        .max(report.recording.agent.len());
    report.recording.caller.resize(len, 0);
    report.recording.agent.resize(len, 0);
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::refusal_reason;

    #[test]
    fn a_refusal_says_the_servers_sentence() {
        let json = br#"{"error":"the bearer token is not one of baton's API tokens"}"#.to_vec();
        assert_eq!(
            refusal_reason(Some(&json)),
            "the bearer token is not one of baton's API tokens"
        );
        let text = b"\n  invalid X-Twilio-Signature\nmore\n".to_vec();
        assert_eq!(refusal_reason(Some(&text)), "invalid X-Twilio-Signature");
        assert_eq!(refusal_reason(None), "");
    }
}
