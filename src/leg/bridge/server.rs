//! baton's side of a bridge media stream: the thin shell that runs a [`MediaStream`] over an
//! axum WebSocket and presents it to a call as a [`LegHandle`], for any [`Dialect`] (fixed by
//! the route, or detected from the first messages).
//!
//! [`accept`] waits for the stream's `start` (Vonage: `websocket:connected`), bounded by a
//! timeout, then hands the call a leg driven **in the call's own task** (a [`LegIo`]): each poll
//! reads what arrived into the core and hands back its next event; the call's [`LegCommand`]s
//! become outbound messages in the core, written as far as the socket takes them with one flush
//! per pass ([`crate::leg::socket::Outbox`]). There is no driver task, writer task or queue, so
//! nothing is dropped here; what a blocked socket has not taken waits in the core, and a bridge
//! that stops reading for [`WRITE_STALL`] ends the leg rather than holding the call. The call
//! already paces playback at 20 ms, so nothing here delays a message (beyond the core's own
//! batching for Exotel).
//!
//! Frames moved are added to live counters ([`FrameCounters`], e.g. the daemon's Prometheus
//! figures), logged under the call's span.
//!
//! The stream ends on the bridge's `stop` (reported as [`LegEvent::Stop`]; the socket closes
//! next), on the call's [`LegCommand::Hangup`] (baton closes the socket, which is how every one of
//! these bridges is ended from the server), when the call drops its handle, or when the socket
//! closes or fails (then the call is sent [`LegEvent::Stop`] too; Vonage ends only this way). On
//! hang-up or drop the socket goes to a small closing task ([`crate::leg::socket::Handover`])
//! that writes what is left and closes; the join handle [`accept`] returned yields [`LegStats`].
//!
//! Authentication belongs to the HTTP upgrade, before this shell runs (Twilio's signature,
//! Telnyx's streaming token); [`configure_upgrade`] sets the socket's message limits. Serve the
//! route with `TCP_NODELAY` on accepted connections: with Nagle's algorithm on, a 20 ms frame can
//! wait for the previous one's delayed ACK and reach the caller 40 ms late.
//!
//! [`LegIo`]: crate::leg::LegIo
//! [`LegCommand`]: crate::leg::LegCommand
//! [`LegCommand::Hangup`]: crate::leg::LegCommand::Hangup

use std::task::{Context, Poll};
use std::time::Duration;

use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade, close_code};
use futures_util::{SinkExt, StreamExt};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio::time::{Instant, timeout, timeout_at};
use tracing::Instrument;

use super::stream::{EndReason, MediaStream, StartInfo, StreamError, StreamOptions, StreamStats};
use super::wire::Outgoing;
use super::{Dialect, DialectChoice};
pub use crate::leg::socket::WRITE_STALL;
use crate::leg::socket::{
    CLOSE_GRACE, Handover, Outbox, SocketIo, SocketLeg, close, close_websocket,
};
use crate::leg::twilio::cadence::{Cadence, SendIntervals};
use crate::leg::{LegEvent, LegHandle, PlayedKind, StopReason};

/// Largest WebSocket message the socket layer accepts: above the parser's own 64 KiB limit, so
/// an oversized message is refused alone (the stream carries on) rather than closing the socket.
pub const MAX_SOCKET_MESSAGE: usize = 2 * 1024 * 1024;
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
            frames: FrameCounters::default(),
        }
    }
}

/// The leg could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum BridgeLegError {
    #[error("no \"start\" from the bridge within {0:?} of the WebSocket opening")]
    StartTimeout(Duration),
    /// How it closed, in words (`closed (code 1000)`, `closed without a close frame`).
    #[error("the WebSocket {0} before the bridge's \"start\"")]
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

impl LegEnd {
    /// How the call records this end: `stop`, baton's own hang-up, or a close frame whose code
    /// says nothing broke
    /// ([`closed_stop_reason`](crate::leg::socket::closed_stop_reason)), is the caller hanging
    /// up; a close with an error code, a connection lost without one, or a socket error is the
    /// caller's side failing.
    pub fn stop_reason(&self) -> StopReason {
        match self {
            LegEnd::SocketClosed { code, .. } => {
                crate::leg::socket::closed_stop_reason(*code, || self.to_string())
            }
            LegEnd::SocketError(_) => StopReason::Failed(self.to_string()),
            _ => StopReason::HungUp,
        }
    }
}

impl std::fmt::Display for LegEnd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LegEnd::Stopped => f.write_str("the bridge sent stop"),
            LegEnd::Hangup => f.write_str("baton hung up"),
            LegEnd::CallGone => f.write_str("the call went away"),
            LegEnd::SocketClosed { code, reason } => write!(
                f,
                "the socket {}",
                crate::leg::socket::closed_words(*code, reason)
            ),
            LegEnd::SocketError(e) => write!(f, "socket error: {e}"),
        }
    }
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
    pub send_intervals: SendIntervals,
    pub end: LegEnd,
}

impl LegStats {
    /// Deviation of outbound frame intervals from 20 ms.
    pub fn send_cadence(&self) -> Cadence {
        self.send_intervals.cadence()
    }
}

/// How long a started stream may go without a message from its bridge before it is given up.
pub const SILENT_BRIDGE: Duration = Duration::from_secs(10);

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
            Ok(None) => {
                return Err(BridgeLegError::ClosedBeforeStart(
                    crate::leg::socket::closed_words(None, ""),
                ));
            }
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
    let (frames_in, frames_out) = opts.frames.of(info.dialect).clone();
    let leg = Leg {
        heard: (core.stats().messages_in, started_at),
        core,
        socket: sink.reunite(stream).map_err(|_| {
            BridgeLegError::Socket("the socket's halves do not belong together".into())
        })?,
        log,
        start: info.clone(),
        frames_in,
        frames_out,
        counted_in: 0,
        counted_out: 0,
        end: None,
        outbox: Outbox::default(),
    };
    let (hold, closed) = Handover::new(leg);
    // It logs under the caller's span (the server's per-call span).
    let task = tokio::spawn(close_when_done(closed, info.clone()).in_current_span());
    let handle = LegHandle::direct(info.format.rate, started_at, Box::new(SocketIo::new(hold)))
        .with_law(info.format.encoding.law());
    Ok((handle, info, task))
}

struct Leg {
    core: MediaStream,
    /// The bridge's messages read so far, and when that count was last seen to move.
    heard: (u64, Instant),
    socket: WebSocket,
    log: BadLog,
    start: StartInfo,
    frames_in: metrics::Counter,
    frames_out: metrics::Counter,
    /// Frames already added to the counters.
    counted_in: u64,
    counted_out: u64,
    /// Why the stream ended, once it has.
    end: Option<LegEnd>,
    outbox: Outbox<Message>,
}

/// A bridge leg as its call drives it ([`SocketIo`]): on `Hangup`, or dropped, it hands the
/// socket to the task that closes it and reports the stats.
impl SocketLeg for Leg {
    fn next_event(&mut self) -> Option<LegEvent> {
        let ev = self.core.poll_event()?;
        self.count_frames();
        Some(ev)
    }

    fn ended(&self) -> bool {
        self.end.is_some()
    }

    fn stop_reason(&self) -> StopReason {
        self.end
            .as_ref()
            .map_or(StopReason::HungUp, LegEnd::stop_reason)
    }

    fn poll_io(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        self.poll_write(cx);
        if self.end.is_some() {
            return Poll::Ready(());
        }
        let msg = std::task::ready!(self.socket.poll_next_unpin(cx));
        self.end = self.inbound(msg);
        Poll::Ready(())
    }

    fn poll_write(&mut self, cx: &mut Context<'_>) {
        if let Err(end) = self.write(cx) {
            self.end = Some(end);
        }
    }

    fn play(&mut self, frame: &crate::audio::Frame, kind: PlayedKind, now: Instant) {
        let r = self.core.play(frame, kind, now);
        self.refused_to_send(r);
    }

    fn clear(&mut self) {
        let r = self.core.clear();
        self.refused_to_send(r);
    }

    fn hang_up(&mut self) {
        let stopped = self.core.ended() == Some(&EndReason::Stopped);
        self.end.get_or_insert(if stopped {
            LegEnd::Stopped
        } else {
            LegEnd::Hangup
        });
    }

    fn give_up_if_stalled(&mut self, now: Instant) {
        if self.outbox.stalled(now) {
            self.end = Some(LegEnd::SocketError(format!(
                "the bridge read nothing for {} s; giving the stream up",
                WRITE_STALL.as_secs()
            )));
        }
        // A bridge streams the caller's audio all call long (silence too): one that has sent
        // nothing for this long is gone (a half-open connection), and its call is given up
        // rather than held with its model session.
        let heard = self.core.stats().messages_in;
        if heard != self.heard.0 {
            self.heard = (heard, now);
        } else if self.end.is_none() && now.saturating_duration_since(self.heard.1) >= SILENT_BRIDGE
        {
            self.end = Some(LegEnd::SocketError(format!(
                "the bridge sent nothing for {} s; giving the stream up",
                SILENT_BRIDGE.as_secs()
            )));
        }
    }
}

/// Takes the leg back once the call is done with it: writes what is still queued, closes the
/// socket (waiting briefly for the peer's answer when baton ends the stream) and reports.
async fn close_when_done(closed: oneshot::Receiver<Leg>, start: StartInfo) -> LegStats {
    let Ok(mut leg) = closed.await else {
        return LegStats {
            start,
            stream: StreamStats::default(),
            frames_dropped: 0,
            binary_ignored: 0,
            send_intervals: SendIntervals::default(),
            end: LegEnd::CallGone,
        };
    };
    let end = leg.end.take().unwrap_or(LegEnd::CallGone);
    let open = !matches!(end, LegEnd::SocketClosed { .. } | LegEnd::SocketError(_));
    if open {
        // The last frames the call played go out before the close.
        let (outbox, core) = (&mut leg.outbox, &mut leg.core);
        let _ = timeout(
            CLOSE_GRACE,
            outbox.drain(&mut leg.socket, || next_message(core)),
        )
        .await;
    }
    if matches!(end, LegEnd::Hangup | LegEnd::CallGone) {
        close_websocket(&mut leg.socket).await;
    }
    if open {
        let _ = timeout(CLOSE_GRACE, leg.socket.close()).await;
    }
    leg.count_frames();
    let stats = leg.core.stats().clone();
    tracing::info!(
        stream_sid = %leg.start.stream_sid,
        end = %end,
        frames_in = stats.frames_in,
        frames_out = stats.frames_out,
        bad_messages = stats.bad_messages,
        "media stream ended"
    );
    LegStats {
        start: leg.start,
        stream: stats,
        frames_dropped: 0,
        binary_ignored: leg.log.binary,
        send_intervals: leg.core.take_send_intervals(),
        end,
    }
}

impl Leg {
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
                    // A close frame without a body: no status, but still a close.
                    None => (Some(crate::leg::socket::NO_STATUS), String::new()),
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

    /// A play or clear the stream did not take (after `stop` it takes nothing more: not worth a
    /// warning).
    fn refused_to_send(&self, r: Result<(), StreamError>) {
        if let Err(e) = r
            && !matches!(e, StreamError::AfterEnd { .. })
        {
            tracing::warn!(stream_sid = %self.start.stream_sid, error = %e, "cannot send to the bridge");
        }
    }

    fn closed(&self, code: Option<u16>, reason: String) -> LegEnd {
        if self.core.ended() == Some(&EndReason::Stopped) {
            LegEnd::Stopped
        } else {
            LegEnd::SocketClosed { code, reason }
        }
    }

    /// Writes what the core has to send as far as the socket takes it, then flushes once
    /// ([`Outbox::poll_write`]).
    fn write(&mut self, cx: &mut Context<'_>) -> Result<(), LegEnd> {
        let core = &mut self.core;
        self.outbox
            .poll_write(&mut self.socket, cx, || next_message(core))
            .map_err(|e| LegEnd::SocketError(e.to_string()))
    }
}

/// The core's next message for the bridge, rendered.
fn next_message(core: &mut MediaStream) -> Option<Message> {
    core.poll_transmit().map(|t| match core.render(&t) {
        Outgoing::Text(text) => Message::Text(text.into()),
        Outgoing::Binary(bytes) => Message::Binary(bytes.into()),
    })
}

/// A close before `start`, in words (the peer's reason without control characters: it is
/// logged).
fn describe_close(frame: Option<&CloseFrame>) -> String {
    match frame {
        Some(f) => crate::leg::socket::closed_words(Some(f.code), f.reason.as_str()),
        None => crate::leg::socket::closed_words(Some(crate::leg::socket::NO_STATUS), ""),
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
