//! baton's side of a bridge media stream: the thin async shell that runs a [`MediaStream`] over
//! an axum WebSocket and presents it to a call as a [`LegHandle`], for any [`Dialect`] (fixed by
//! the route, or detected from the first messages).
//!
//! [`accept`] waits for the stream's `start` (Vonage: `websocket:connected`), bounded by a
//! timeout, then spawns two tasks:
//! * the **driver** owns the core and the socket's read half; it feeds each message from the
//!   bridge to the core, turns the call's [`LegCommand`]s into outbound messages, and delivers
//!   events to the call over a bounded queue. Frames that find the queue full are dropped and
//!   counted (a call that cannot keep up must not stall the socket); DTMF, marks and stop always
//!   wait for room.
//! * the **writer** owns the write half and writes each outbound message as soon as it is queued
//!   (bounded queue): the call already paces playback at 20 ms, so nothing here delays a message
//!   (beyond the core's own batching for Exotel); messages already queued together (a frame's
//!   `media` and `mark`) share one write.
//!
//! Both tasks log under the caller's span (the server's per-call span), and the driver adds the
//! frames it moves to live counters ([`FrameCounters`], e.g. the daemon's Prometheus figures).
//!
//! The stream ends on the bridge's `stop` (reported as [`LegEvent::Stop`]; the socket closes
//! next), on the call's [`LegCommand::Hangup`] (baton closes the socket, which is how every one of
//! these bridges is ended from the server), when the call drops its handle, or when the socket
//! closes or fails (then the call is sent [`LegEvent::Stop`] too; Vonage ends only this way). The
//! driver's join handle yields [`LegStats`].
//!
//! Authentication belongs to the HTTP upgrade, before this shell runs (Twilio's signature,
//! Telnyx's streaming token); [`configure_upgrade`] sets the socket's message limits. Serve the
//! route with `TCP_NODELAY` on accepted connections: with Nagle's algorithm on, a 20 ms frame can
//! wait for the previous one's delayed ACK and reach the caller 40 ms late.

use std::time::Duration;

use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade, close_code};
use futures_util::stream::{SplitSink, SplitStream};
use futures_util::{SinkExt, StreamExt};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::{Instant, timeout, timeout_at};
use tracing::Instrument;

use super::stream::{EndReason, MediaStream, StartInfo, StreamError, StreamOptions, StreamStats};
use super::wire::Outgoing;
use super::{Dialect, DialectChoice};
use crate::leg::twilio::cadence::Cadence;
use crate::leg::{LegCommand, LegEvent, LegHandle};

/// Largest WebSocket message the socket layer accepts: above the parser's own 64 KiB limit, so
/// an oversized message is refused alone (the stream carries on) rather than closing the socket.
pub const MAX_SOCKET_MESSAGE: usize = 2 * 1024 * 1024;
/// How long to wait for the peer's close reply after baton closes the socket.
const CLOSE_GRACE: Duration = Duration::from_secs(1);
/// How long to wait for the call to take the final `Stop`.
const STOP_GRACE: Duration = Duration::from_secs(5);
/// Refused messages logged at warn level before the log thins out to one in a hundred.
const LOUD_BAD_MESSAGES: u64 = 10;

/// Settings of one bridge leg.
#[derive(Clone, Debug)]
pub struct BridgeLegOptions {
    /// The route's dialect, or detection from the first messages.
    pub dialect: DialectChoice,
    pub stream: StreamOptions,
    /// How long after the socket opens `start` must arrive.
    pub start_timeout: Duration,
    /// Events (mostly 20 ms frames) queued toward the call at most.
    pub event_queue: usize,
    /// Messages queued toward the socket at most (a frame is two: media and mark).
    pub outbound_queue: usize,
    /// Live counts of 20 ms frames received and sent, per dialect. No-op by default.
    pub frames: FrameCounters,
}

/// Live counts of 20 ms frames received and sent (e.g. the daemon's Prometheus counters), one
/// pair per dialect so a stream detected on the shared path is counted under the dialect it
/// turned out to speak. Each frame is one atomic add; the default counts nothing.
#[derive(Clone, Debug)]
pub struct FrameCounters {
    /// `(in, out)` for each dialect, in the order of [`Dialect::ALL`].
    by_dialect: [(metrics::Counter, metrics::Counter); Dialect::ALL.len()],
}

impl Default for FrameCounters {
    fn default() -> Self {
        FrameCounters {
            by_dialect: Dialect::ALL.map(|_| (metrics::Counter::noop(), metrics::Counter::noop())),
        }
    }
}

impl FrameCounters {
    /// `make(d)` gives dialect `d`'s `(in, out)` counters.
    pub fn new(make: impl FnMut(Dialect) -> (metrics::Counter, metrics::Counter)) -> Self {
        FrameCounters {
            by_dialect: Dialect::ALL.map(make),
        }
    }

    /// Counters for one dialect only; the others count nothing.
    pub fn only(
        dialect: Dialect,
        frames_in: metrics::Counter,
        frames_out: metrics::Counter,
    ) -> Self {
        let mut c = FrameCounters::default();
        c.by_dialect[dialect as usize] = (frames_in, frames_out);
        c
    }

    /// `(in, out)` of `dialect`.
    pub fn of(&self, dialect: Dialect) -> &(metrics::Counter, metrics::Counter) {
        &self.by_dialect[dialect as usize]
    }
}

impl BridgeLegOptions {
    /// Defaults for a route serving `dialect`.
    pub fn new(dialect: DialectChoice) -> Self {
        BridgeLegOptions {
            dialect,
            stream: StreamOptions::default(),
            start_timeout: Duration::from_secs(10),
            event_queue: 50,
            outbound_queue: 100,
            frames: FrameCounters::default(),
        }
    }
}

/// The leg could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum BridgeLegError {
    #[error("no \"start\" from the bridge within {0:?} of the WebSocket opening")]
    StartTimeout(Duration),
    #[error("the WebSocket closed before the bridge's \"start\" ({0})")]
    ClosedBeforeStart(String),
    #[error("the WebSocket failed before the bridge's \"start\": {0}")]
    Socket(String),
    #[error("stream refused: {0}")]
    Refused(EndReason),
}

/// How a leg ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LegEnd {
    /// The bridge sent `stop`, then closed the socket (or the call hung up after it).
    Stopped,
    /// The call sent `Hangup`; baton closed the socket.
    Hangup,
    /// The call dropped its end of the leg.
    CallGone,
    /// The socket closed without `stop`; `code` is absent without a close frame.
    SocketClosed { code: Option<u16>, reason: String },
    /// The socket failed (reset, protocol error, write error).
    SocketError(String),
}

/// What one leg did, for the call's report.
#[derive(Clone, Debug)]
pub struct LegStats {
    pub start: StartInfo,
    pub stream: StreamStats,
    /// Frames dropped because the call's event queue was full.
    pub frames_dropped: u64,
    /// Binary WebSocket messages ignored (every bridge but Vonage sends only text).
    pub binary_ignored: u64,
    /// Intervals between consecutive outbound frames as they were handed to the writer, in µs.
    pub send_intervals_us: Vec<u32>,
    pub end: LegEnd,
}

impl LegStats {
    /// Deviation of outbound frame intervals from 20 ms.
    pub fn send_cadence(&self) -> Cadence {
        Cadence::from_intervals_us(&self.send_intervals_us)
    }
}

/// Read buffer of a bridge socket. The bridges' messages are a few hundred bytes (Vonage's binary
/// frames 320-960); the WebSocket layer zero-fills its whole read buffer before every read and
/// keeps it resident, so its 128 KiB default cost a 128 KiB memset per message and 128 KiB of RSS
/// per call. Larger messages still arrive whole (the buffer grows to the frame's length).
pub const READ_BUFFER: usize = 4 * 1024;

/// Sets the socket limits a bridge stream needs on the route's upgrade.
pub fn configure_upgrade(ws: WebSocketUpgrade) -> WebSocketUpgrade {
    ws.max_message_size(MAX_SOCKET_MESSAGE)
        .max_frame_size(MAX_SOCKET_MESSAGE)
        .read_buffer_size(READ_BUFFER)
}

/// Takes over an upgraded bridge socket: waits for `start`, then runs the leg. Returns the
/// call's end of the leg, what `start` said, and the driver task yielding the stats.
pub async fn accept(
    socket: WebSocket,
    opts: BridgeLegOptions,
) -> Result<(LegHandle, StartInfo, JoinHandle<LegStats>), BridgeLegError> {
    let mut core = MediaStream::new(opts.dialect, opts.stream.clone());
    let (mut sink, mut stream) = socket.split();
    let mut log = BadLog::default();
    let deadline = Instant::now() + opts.start_timeout;
    let (info, started_at) = loop {
        let msg = match timeout_at(deadline, stream.next()).await {
            Err(_) => {
                close(&mut sink, close_code::POLICY, "no start received").await;
                return Err(BridgeLegError::StartTimeout(opts.start_timeout));
            }
            Ok(None) => return Err(BridgeLegError::ClosedBeforeStart("connection lost".into())),
            Ok(Some(Err(e))) => return Err(BridgeLegError::Socket(e.to_string())),
            Ok(Some(Ok(msg))) => msg,
        };
        match msg {
            Message::Text(text) => match core.handle_text(text.as_str(), Instant::now()) {
                Ok(()) => {}
                Err(StreamError::Refused(reason)) => {
                    close(&mut sink, close_code::POLICY, &reason.to_string()).await;
                    return Err(BridgeLegError::Refused(reason));
                }
                Err(e) => log.refused(None, &e),
            },
            Message::Close(frame) => {
                return Err(BridgeLegError::ClosedBeforeStart(describe_close(
                    frame.as_ref(),
                )));
            }
            Message::Binary(bytes) => binary(&mut core, &mut log, None, &bytes),
            Message::Ping(_) | Message::Pong(_) => {}
        }
        if let (Some(info), Some(at)) = (core.start_info(), core.started_at()) {
            break (info.clone(), at);
        }
    };
    tracing::info!(
        dialect = %info.dialect,
        stream_sid = %info.stream_sid,
        call_sid = info.call_sid.as_deref().unwrap_or("-"),
        format = %info.format,
        "media stream started"
    );
    let (ev_tx, ev_rx) = mpsc::channel(opts.event_queue.max(1));
    let (cmd_tx, cmd_rx) = mpsc::unbounded_channel();
    let (out_tx, out_rx) = mpsc::channel(opts.outbound_queue.max(1));
    // Both tasks log under the caller's span (the server's per-call span).
    let writer = tokio::spawn(write_loop(sink, out_rx).in_current_span());
    let (frames_in, frames_out) = opts.frames.of(info.dialect).clone();
    let driver = Driver {
        core,
        socket: stream,
        commands: cmd_rx,
        events: ev_tx,
        out: out_tx,
        log,
        frames_dropped: 0,
        stop_sent: false,
        start: info.clone(),
        frames_in,
        frames_out,
        counted_in: 0,
        counted_out: 0,
    };
    let task = tokio::spawn(driver.run(writer).in_current_span());
    let handle = LegHandle {
        rate: info.format.rate,
        started_at,
        events: ev_rx,
        commands: cmd_tx,
    };
    Ok((handle, info, task))
}

struct Driver {
    core: MediaStream,
    socket: SplitStream<WebSocket>,
    commands: mpsc::UnboundedReceiver<LegCommand>,
    events: mpsc::Sender<LegEvent>,
    out: mpsc::Sender<Message>,
    log: BadLog,
    frames_dropped: u64,
    stop_sent: bool,
    start: StartInfo,
    frames_in: metrics::Counter,
    frames_out: metrics::Counter,
    /// Frames already added to the counters.
    counted_in: u64,
    counted_out: u64,
}

impl Driver {
    async fn run(mut self, writer: JoinHandle<Result<(), String>>) -> LegStats {
        let sid = self.start.stream_sid.clone();
        let end = loop {
            let step = tokio::select! {
                biased;
                cmd = self.commands.recv() => self.command(cmd),
                msg = self.socket.next() => self.inbound(msg),
            };
            crate::wakeups::note();
            if let Err(e) = self.flush_transmits().await {
                break e;
            }
            self.deliver_events().await;
            self.count_frames();
            if let Some(end) = step {
                break end;
            }
        };
        if matches!(end, LegEnd::Hangup | LegEnd::CallGone) {
            let frame = CloseFrame {
                code: close_code::NORMAL,
                reason: "call ended".into(),
            };
            if self.out.send(Message::Close(Some(frame))).await.is_ok() {
                // Let the peer answer the close before the connection is dropped.
                let _ = timeout(CLOSE_GRACE, async {
                    while let Some(Ok(m)) = self.socket.next().await {
                        if matches!(m, Message::Close(_)) {
                            break;
                        }
                    }
                })
                .await;
            }
        }
        drop(self.out);
        let _ = timeout(CLOSE_GRACE, writer).await;
        if !self.stop_sent && end != LegEnd::CallGone {
            let _ = timeout(STOP_GRACE, self.events.send(LegEvent::Stop)).await;
        }
        let stats = self.core.stats().clone();
        tracing::info!(
            stream_sid = %sid,
            end = ?end,
            frames_in = stats.frames_in,
            frames_out = stats.frames_out,
            bad_messages = stats.bad_messages,
            "media stream ended"
        );
        LegStats {
            start: self.start,
            stream: stats,
            frames_dropped: self.frames_dropped,
            binary_ignored: self.log.binary,
            send_intervals_us: self.core.take_send_intervals(),
            end,
        }
    }

    /// Adds the frames moved since the last call to the live counters.
    fn count_frames(&mut self) {
        let s = self.core.stats();
        if s.frames_in != self.counted_in {
            self.frames_in.increment(s.frames_in - self.counted_in);
            self.counted_in = s.frames_in;
        }
        if s.frames_out != self.counted_out {
            self.frames_out.increment(s.frames_out - self.counted_out);
            self.counted_out = s.frames_out;
        }
    }

    fn command(&mut self, cmd: Option<LegCommand>) -> Option<LegEnd> {
        let result = match cmd {
            Some(LegCommand::Play { frame, kind }) => self.core.play(&frame, kind, Instant::now()),
            Some(LegCommand::Clear) => self.core.clear(),
            Some(LegCommand::Hangup) => {
                return Some(if self.core.ended() == Some(&EndReason::Stopped) {
                    LegEnd::Stopped
                } else {
                    LegEnd::Hangup
                });
            }
            None => return Some(LegEnd::CallGone),
        };
        if let Err(e) = result {
            // After `stop` the bridge takes nothing more; that is not worth a warning.
            if !matches!(e, StreamError::AfterEnd { .. }) {
                tracing::warn!(stream_sid = %self.start.stream_sid, error = %e, "cannot send to the bridge");
            }
        }
        None
    }

    fn inbound(&mut self, msg: Option<Result<Message, axum::Error>>) -> Option<LegEnd> {
        match msg {
            None => Some(self.closed(None, "connection lost without a close frame".into())),
            Some(Err(e)) => Some(LegEnd::SocketError(e.to_string())),
            Some(Ok(Message::Text(text))) => {
                if let Err(e) = self.core.handle_text(text.as_str(), Instant::now()) {
                    self.log.refused(Some(&self.start.stream_sid), &e);
                }
                None
            }
            Some(Ok(Message::Close(frame))) => {
                let (code, reason) = match frame {
                    Some(f) => (Some(f.code), f.reason.as_str().to_owned()),
                    None => (None, String::new()),
                };
                Some(self.closed(code, reason))
            }
            Some(Ok(Message::Binary(bytes))) => {
                binary(
                    &mut self.core,
                    &mut self.log,
                    Some(&self.start.stream_sid),
                    &bytes,
                );
                None
            }
            Some(Ok(Message::Ping(_) | Message::Pong(_))) => None,
        }
    }

    fn closed(&self, code: Option<u16>, reason: String) -> LegEnd {
        if self.core.ended() == Some(&EndReason::Stopped) {
            LegEnd::Stopped
        } else {
            LegEnd::SocketClosed { code, reason }
        }
    }

    async fn flush_transmits(&mut self) -> Result<(), LegEnd> {
        while let Some(t) = self.core.poll_transmit() {
            let msg = match self.core.render(&t) {
                Outgoing::Text(text) => Message::Text(text.into()),
                Outgoing::Binary(bytes) => Message::Binary(bytes.into()),
            };
            if self.out.send(msg).await.is_err() {
                return Err(LegEnd::SocketError("the socket writer stopped".into()));
            }
        }
        Ok(())
    }

    async fn deliver_events(&mut self) {
        while let Some(ev) = self.core.poll_event() {
            match ev {
                LegEvent::Frame { .. } => match self.events.try_send(ev) {
                    Ok(()) => {}
                    Err(mpsc::error::TrySendError::Full(_)) => {
                        self.frames_dropped += 1;
                        if self.frames_dropped.is_power_of_two() {
                            tracing::warn!(
                                stream_sid = %self.start.stream_sid,
                                dropped = self.frames_dropped,
                                "call is not taking caller frames; dropping"
                            );
                        }
                    }
                    Err(mpsc::error::TrySendError::Closed(_)) => {}
                },
                other => {
                    if matches!(other, LegEvent::Stop) {
                        self.stop_sent = true;
                    }
                    let _ = self.events.send(other).await;
                }
            }
        }
    }
}

/// Messages written in one go at most.
const WRITE_BATCH: usize = 32;

async fn write_loop(
    mut sink: SplitSink<WebSocket, Message>,
    mut out: mpsc::Receiver<Message>,
) -> Result<(), String> {
    let err = |e: axum::Error| e.to_string();
    while let Some(msg) = out.recv().await {
        crate::wakeups::note();
        let mut closing = matches!(msg, Message::Close(_));
        sink.feed(msg).await.map_err(err)?;
        // What is already queued (a frame's `media` and its `mark`) leaves in the same write:
        // one syscall and one TCP segment instead of one per message.
        let mut n = 1;
        while !closing && n < WRITE_BATCH {
            let Ok(m) = out.try_recv() else { break };
            closing = matches!(m, Message::Close(_));
            sink.feed(m).await.map_err(err)?;
            n += 1;
        }
        sink.flush().await.map_err(err)?;
        if closing {
            return Ok(());
        }
    }
    sink.close().await.map_err(err)
}

async fn close(sink: &mut SplitSink<WebSocket, Message>, code: u16, reason: &str) {
    // A close reason must fit a control frame (125 bytes).
    let mut end = reason.len().min(120);
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    let frame = CloseFrame {
        code,
        reason: reason[..end].to_owned().into(),
    };
    let _ = timeout(CLOSE_GRACE, sink.send(Message::Close(Some(frame)))).await;
}

fn describe_close(frame: Option<&CloseFrame>) -> String {
    match frame {
        Some(f) if f.reason.as_str().is_empty() => format!("close code {}", f.code),
        Some(f) => format!("close code {}: {}", f.code, f.reason.as_str()),
        None => "close without a code".into(),
    }
}

/// Logs refused messages: the first few loudly, then one in a hundred, so a peer sending
/// garbage cannot flood the log.
#[derive(Default)]
struct BadLog {
    count: u64,
    binary: u64,
}

impl BadLog {
    fn refused(&mut self, stream_sid: Option<&str>, e: &StreamError) {
        self.count += 1;
        if self.count <= LOUD_BAD_MESSAGES || self.count.is_multiple_of(100) {
            tracing::warn!(
                stream_sid = stream_sid.unwrap_or("-"),
                refused = self.count,
                error = %e,
                "bridge message refused; the stream carries on"
            );
        } else {
            tracing::debug!(error = %e, "bridge message refused");
        }
    }

    fn binary(&mut self, stream_sid: Option<&str>) {
        self.count += 1;
        self.binary += 1;
        if self.count <= LOUD_BAD_MESSAGES || self.count.is_multiple_of(100) {
            tracing::warn!(
                stream_sid = stream_sid.unwrap_or("-"),
                "binary WebSocket message ignored: this bridge sends JSON text"
            );
        }
    }
}

/// A binary message: audio where the dialect sends it so (Vonage), otherwise ignored and counted.
fn binary(core: &mut MediaStream, log: &mut BadLog, stream_sid: Option<&str>, bytes: &[u8]) {
    if core.dialect().is_some_and(Dialect::binary_audio) {
        if let Err(e) = core.handle_binary(bytes, Instant::now()) {
            log.refused(stream_sid, &e);
        }
    } else {
        log.binary(stream_sid);
    }
}
