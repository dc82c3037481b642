//! A Twilio-protocol caller: a client that behaves like Twilio's side of a bidirectional media
//! stream, so tests, `baton dial` and load benchmarks can drive any Twilio-protocol server.
//!
//! It opens the WebSocket (signed with `X-Twilio-Signature` when given an auth token), sends
//! `connected` and `start`, then one 20 ms `media` message per tick at real time (tokio's clock)
//! carrying the fixture as μ-law, and silence once the fixture has ended. What the server sends
//! back is played **like Twilio plays it**: queued, and consumed at real time (160 bytes per
//! 20 ms tick, 8 bytes per ms); each `mark` is echoed once the audio queued before it has
//! finished playing; `clear` drops the unplayed audio and echoes every pending mark at once.
//!
//! What the caller hears is recorded on its own timeline: the stereo [`Recording`] holds the
//! caller's audio on the left and, on the right, the agent's audio at the time it was played.
//! After the fixture, the caller waits until the agent has been quiet for `quiet_after` (at most
//! `max_tail`), sends `stop` and closes.
//!
//! One call is one future (no spawned tasks): a tick timer and the socket, selected in a loop.
//! The per-frame path reuses its buffers; the only per-message allocations are the outgoing JSON
//! text (handed to the socket) and the decoded payload of incoming `media`. Mark echoes due at a
//! tick leave in the same write as that tick's `media`.

use std::collections::{BTreeMap, VecDeque};
use std::path::Path;
use std::time::Duration;

use futures_util::stream::{SplitSink, SplitStream};
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

use super::cadence::Cadence;
use super::signature::{self, AuthToken};
use super::stream::{FRAME_SAMPLES, RATE};
use super::wire::{
    self, FromTwilio, InboundWriter, MediaFormat, Start, Stop, ToTwilio, TwilioEvent,
};
use crate::audio::{g711, vad};
use crate::leg::fixture::{FixtureCaller, FixtureError, LegCodec, Recording};

const TICK: Duration = Duration::from_millis(20);
/// μ-law code of digital silence.
const ULAW_SILENCE: u8 = 0xFF;

/// How the caller behaves.
#[derive(Clone, Debug)]
pub struct CallerOptions {
    /// The caller's audio, 8 kHz mono (sent as μ-law).
    pub samples: Vec<i16>,
    /// Sent in `start.customParameters`, like TwiML `<Parameter>`s.
    pub custom_parameters: BTreeMap<String, String>,
    /// Sign the upgrade with `X-Twilio-Signature` using this token.
    pub auth_token: Option<AuthToken>,
    /// The URL to sign: the server's configured public URL, when it differs from the one dialled
    /// (e.g. behind a proxy). Defaults to the dialled URL.
    pub signed_url: Option<String>,
    pub account_sid: String,
    pub call_sid: String,
    pub stream_sid: String,
    /// After the fixture, hang up once the agent has been quiet this long ...
    pub quiet_after: Duration,
    /// ... or this long after the fixture ended, whichever comes first.
    pub max_tail: Duration,
    /// Bound on the WebSocket handshake.
    pub connect_timeout: Duration,
    /// A pause between agent `media` messages longer than this starts a new burst (a new agent
    /// turn); pauses between bursts are not cadence samples.
    pub burst_gap: Duration,
    /// Keep what was said and heard in [`CallerReport::recording`]. Load runs turn it off: a
    /// recording costs 32 KB per call-second.
    pub record_audio: bool,
    /// Incremented once the stream has started (`connected` and `start` sent), so a load client
    /// can tell when its calls are all up.
    pub started: Option<std::sync::Arc<std::sync::atomic::AtomicUsize>>,
}

impl CallerOptions {
    /// A caller saying `samples_8k` (8 kHz mono), with made-up account, call and stream ids.
    pub fn new(samples_8k: Vec<i16>) -> Self {
        CallerOptions {
            samples: samples_8k,
            custom_parameters: BTreeMap::new(),
            auth_token: None,
            signed_url: None,
            account_sid: "AC00000000000000000000000000000000".into(),
            call_sid: "CA00000000000000000000000000000000".into(),
            stream_sid: "MZ00000000000000000000000000000000".into(),
            quiet_after: Duration::from_millis(1500),
            max_tail: Duration::from_secs(20),
            connect_timeout: Duration::from_secs(10),
            burst_gap: Duration::from_millis(200),
            record_audio: true,
            started: None,
        }
    }

    /// Loads a WAV of any rate, resampled to 8 kHz and passed through μ-law, as a phone caller.
    pub fn from_wav(path: &Path) -> Result<Self, FixtureError> {
        let f = FixtureCaller::from_wav(path, LegCodec::Pcmu8k)?;
        Ok(Self::new(f.samples().to_vec()))
    }

    /// Same, from PCM at `rate`; `name` labels errors.
    pub fn from_pcm(samples: &[i16], rate: u32, name: &str) -> Result<Self, FixtureError> {
        let f = FixtureCaller::from_pcm(samples, rate, LegCodec::Pcmu8k, name)?;
        Ok(Self::new(f.samples().to_vec()))
    }
}

/// The call could not be placed.
#[derive(Debug, thiserror::Error)]
pub enum CallerError {
    #[error("{url}: not a usable WebSocket URL: {reason}")]
    BadUrl { url: String, reason: String },
    #[error("{url}: the server refused the WebSocket upgrade with HTTP {status}")]
    Refused { url: String, status: u16 },
    #[error("{url}: cannot connect: {reason}")]
    Connect { url: String, reason: String },
    #[error("{url}: no WebSocket handshake within {after:?}")]
    ConnectTimeout { url: String, after: Duration },
    #[error("{url}: the connection failed while starting the stream: {reason}")]
    Start { url: String, reason: String },
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
    /// `media` messages sent (fixture and the silent tail).
    pub frames_sent: u64,
    /// `media` messages received.
    pub media_received: u64,
    /// μ-law bytes received (8 per ms).
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
    /// from 20 ms.
    pub cadence: Cadence,
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
    sink: SplitSink<WebSocketStream<S>, Message>,
    writer: InboundWriter,
    seq: u64,
    report: CallerReport,
    play: Playback,
    last_media_at: Option<Instant>,
    last_voiced_heard: Option<Instant>,
    /// Decoded agent audio of one tick when nothing is recorded.
    scratch: Vec<i16>,
    /// Messages fed but not yet written.
    unflushed: bool,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Call<S> {
    /// Sends `text` and everything fed before it, in one write.
    async fn send(&mut self, text: String) -> Result<(), String> {
        self.unflushed = false;
        self.sink
            .send(Message::Text(text.into()))
            .await
            .map_err(|e| e.to_string())
    }

    /// Queues `text` for the next write (a mark echo goes out with the tick's `media`).
    async fn feed(&mut self, text: String) -> Result<(), String> {
        self.unflushed = true;
        self.sink
            .feed(Message::Text(text.into()))
            .await
            .map_err(|e| e.to_string())
    }

    /// Writes whatever was fed.
    async fn flush(&mut self) -> Result<(), String> {
        if !self.unflushed {
            return Ok(());
        }
        self.unflushed = false;
        self.sink.flush().await.map_err(|e| e.to_string())
    }

    fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    async fn echo_mark(&mut self, name: &str) -> Result<(), String> {
        let seq = self.next_seq();
        let mut text = String::new();
        self.writer.mark(seq, name, &mut text);
        self.report.marks_echoed += 1;
        self.feed(text).await
    }

    /// Handles one message from the server; `Err` ends the call with that reason.
    async fn inbound(
        &mut self,
        msg: Option<Result<Message, tokio_tungstenite::tungstenite::Error>>,
        now: Instant,
        burst_gap: Duration,
    ) -> Result<(), CallerEnd> {
        let text = match msg {
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
            Some(Ok(Message::Text(text))) => text,
            Some(Ok(Message::Binary(_))) => {
                self.bad("binary message ignored: the protocol is JSON text".into());
                return Ok(());
            }
            Some(Ok(_)) => return Ok(()),
        };
        match wire::parse_to_twilio(text.as_str()) {
            Err(e) => self.bad(e.to_string()),
            Ok(ToTwilio::Media { payload, .. }) => {
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
            Ok(ToTwilio::Mark { name, .. }) => {
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
            Ok(ToTwilio::Clear { .. }) => {
                self.report.clears_received += 1;
                let dropped = self.play.queue.len() as u64;
                self.report.dropped_ms += dropped / 8;
                self.play.queue.clear();
                self.play.consumed_total = self.play.queued_total;
                self.play.completed_total = self.play.queued_total;
                while let Some(m) = self.play.marks.pop_front() {
                    self.echo_mark(&m.name)
                        .await
                        .map_err(CallerEnd::ConnectionLost)?;
                }
            }
            Ok(ToTwilio::Unknown { event }) => {
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
        let n = self.play.queue.len().min(FRAME_SAMPLES);
        if n > 0 {
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
            let (a, b) = self.play.queue.as_slices();
            let first = n.min(a.len());
            g711::decode_ulaw(&a[..first], agent);
            g711::decode_ulaw(&b[..n - first], agent);
            self.play.queue.drain(..n);
            self.play.consumed_total += n as u64;
            self.report.played_ms += n as u64 / 8;
            let played = &agent[at..];
            if vad::rms_dbfs(played) > vad::DEFAULT_THRESHOLD_DBFS {
                self.last_voiced_heard = Some(now);
            }
        }
        Ok(())
    }
}

async fn run<S: AsyncRead + AsyncWrite + Unpin>(
    ws: WebSocketStream<S>,
    opts: CallerOptions,
) -> Result<CallerReport, String> {
    let (sink, mut stream): (_, SplitStream<_>) = ws.split();
    let fixture_frames = opts.samples.len().div_ceil(FRAME_SAMPLES);
    let expected_frames = fixture_frames + opts.max_tail.as_millis() as usize / 20;
    let record = opts.record_audio;
    let recorded = if record {
        fixture_frames * FRAME_SAMPLES
    } else {
        0
    };
    let mut call = Call {
        sink,
        writer: InboundWriter::new(&opts.stream_sid),
        seq: 0,
        report: CallerReport {
            recording: Recording {
                rate: RATE,
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
            intervals_us: Vec::with_capacity(expected_frames.min(1 << 16)),
            tick_late_us: Vec::with_capacity(expected_frames.min(1 << 16)),
            end: CallerEnd::HungUp,
        },
        play: Playback {
            queue: VecDeque::with_capacity(FRAME_SAMPLES * 50),
            queued_total: 0,
            consumed_total: 0,
            completed_total: 0,
            marks: VecDeque::new(),
        },
        last_media_at: None,
        last_voiced_heard: None,
        scratch: Vec::with_capacity(FRAME_SAMPLES),
        unflushed: false,
    };

    let connected = FromTwilio {
        sequence_number: None,
        stream_sid: None,
        event: TwilioEvent::Connected {
            protocol: Some("Call".into()),
            version: Some("1.0.0".into()),
        },
    };
    call.send(connected.to_json()).await?;
    let start = FromTwilio {
        sequence_number: Some(call.next_seq()),
        stream_sid: Some(opts.stream_sid.clone()),
        event: TwilioEvent::Start(Start {
            stream_sid: Some(opts.stream_sid.clone()),
            account_sid: Some(opts.account_sid.clone()),
            call_sid: Some(opts.call_sid.clone()),
            tracks: vec!["inbound".into()],
            custom_parameters: opts.custom_parameters.clone(),
            media_format: Some(MediaFormat::mulaw_8k()),
        }),
    };
    call.send(start.to_json()).await?;
    if let Some(started) = &opts.started {
        started.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
    }

    let t0 = Instant::now();
    let fixture_end = t0 + TICK * fixture_frames as u32;
    let mut codes = [ULAW_SILENCE; FRAME_SAMPLES];
    let mut n: usize = 0;
    let end = loop {
        let due = t0 + TICK * (n as u32 + 1);
        tokio::select! {
            biased;
            msg = stream.next() => {
                if let Err(end) = call.inbound(msg, Instant::now(), opts.burst_gap).await {
                    break end;
                }
                // Marks echoed at once (nothing queued ahead of them, or a clear).
                if let Err(e) = call.flush().await {
                    break CallerEnd::ConnectionLost(e);
                }
            }
            _ = sleep_until(due) => {
                let now = Instant::now();
                let late = now.saturating_duration_since(due).as_micros();
                call.report.tick_late_us.push(u32::try_from(late).unwrap_or(u32::MAX));
                // Audio played from this tick on sits at the start of the next frame slot.
                if let Err(e) = call.play_tick((n + 1) * FRAME_SAMPLES, now, record).await {
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
                let lo = (n * FRAME_SAMPLES).min(opts.samples.len());
                let hi = ((n + 1) * FRAME_SAMPLES).min(opts.samples.len());
                codes.fill(ULAW_SILENCE);
                for (c, &s) in codes.iter_mut().zip(&opts.samples[lo..hi]) {
                    *c = g711::ulaw_encode(s);
                }
                if record {
                    let caller = &mut call.report.recording.caller;
                    caller.extend(codes.iter().map(|&c| g711::ulaw_decode(c)));
                }
                let seq = call.next_seq();
                let mut text = String::new();
                call.writer.media(seq, n as u64 + 1, (n * 20) as u64, &codes, &mut text);
                if let Err(e) = call.send(text).await {
                    break CallerEnd::ConnectionLost(e);
                }
                call.report.frames_sent += 1;
                n += 1;
            }
        }
    };

    if end == CallerEnd::HungUp {
        let stop = FromTwilio {
            sequence_number: Some(call.next_seq()),
            stream_sid: Some(opts.stream_sid.clone()),
            event: TwilioEvent::Stop(Stop {
                account_sid: Some(opts.account_sid.clone()),
                call_sid: Some(opts.call_sid.clone()),
            }),
        };
        let _ = call.send(stop.to_json()).await;
        let close = CloseFrame {
            code: CloseCode::Normal,
            reason: "call ended".into(),
        };
        let _ = call.sink.send(Message::Close(Some(close))).await;
        // Wait (briefly) for the server's close reply.
        let _ = timeout(Duration::from_secs(1), async {
            while let Some(Ok(m)) = stream.next().await {
                if matches!(m, Message::Close(_)) {
                    break;
                }
            }
        })
        .await;
    }

    let mut report = call.report;
    report.end = end;
    report.cadence = Cadence::from_intervals_us(&report.intervals_us);
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
