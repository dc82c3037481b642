//! baton's side of a `/stream` connection: the thin async shell that runs a [`StreamCore`] over
//! an axum WebSocket and presents it to a call as a [`LegHandle`].
//!
//! [`accept`] waits for `start` (bounded by a timeout); a missing or bad one closes the socket with
//! an `error` message and a close reason (1003 for a format baton does not speak, 1008 otherwise).
//! From then on the leg runs in its call's task, as a bridge leg does, with no task or queue of
//! its own: the call's polls read the socket into the core, take the server events for the client
//! (transcript fragments, the final summary) that arrive through [`StreamLeg::notices`], and write
//! what the call's commands and the notices produced with one flush per pass (the call's playout
//! clock paces the audio). A client that reads nothing for [`WRITE_STALL`] ends the leg rather
//! than holding the call.
//!
//! When the call ends (its `Hangup`, or the call dropping its handle) the socket goes to a closing
//! task that waits briefly for [`Notice::Finish`] so the client's last message, `stop`, can carry
//! the call's summary, then closes the socket normally and yields the [`LegStats`].

use std::task::{Context, Poll};
use std::time::Duration;

use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade, close_code};
use futures_util::{Sink, SinkExt, Stream, StreamExt};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::{Instant, timeout, timeout_at};
use tracing::Instrument;

use super::core::{EndReason, StreamCore, StreamError, StreamStats, Transmit};
use super::wire::{Format, ToClient};
use crate::leg::socket::{
    CLOSE_GRACE, Handover, Outbox, SocketIo, SocketLeg, WRITE_STALL, close, close_websocket,
};
use crate::leg::twilio::cadence::{Cadence, SendIntervals};
use crate::leg::{LegEvent, LegHandle, PlayedKind, StopReason};

/// Largest WebSocket message accepted (about 8 s of 16 kHz PCM16); a larger one fails the socket.
pub const MAX_SOCKET_MESSAGE: usize = 256 * 1024;
/// How long the end of a call waits for its summary.
const FINISH_GRACE: Duration = Duration::from_secs(2);
const LOUD_BAD_MESSAGES: u64 = 10;

/// Settings of one `/stream` leg.
#[derive(Clone, Debug)]
pub struct StreamLegOptions {
    /// How long after the socket opens `start` must arrive.
    pub start_timeout: Duration,
}

impl Default for StreamLegOptions {
    fn default() -> Self {
        StreamLegOptions {
            start_timeout: Duration::from_secs(10),
        }
    }
}

/// The leg could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum StreamLegError {
    #[error("no \"start\" within {0:?} of the WebSocket opening")]
    StartTimeout(Duration),
    #[error("the WebSocket closed before \"start\" ({0})")]
    ClosedBeforeStart(String),
    #[error("the WebSocket failed before \"start\": {0}")]
    Socket(String),
    #[error("stream refused: {0}")]
    Refused(String),
}

/// How a leg ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LegEnd {
    /// The client sent `stop`.
    Stopped,
    /// The call hung up; baton closed the socket.
    Hangup,
    /// The socket closed without `stop`.
    SocketClosed { code: Option<u16>, reason: String },
    /// The socket failed (reset, protocol error, write error, a client that stopped reading).
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
            LegEnd::Stopped => f.write_str("the client sent stop"),
            LegEnd::Hangup => f.write_str("baton hung up"),
            LegEnd::SocketClosed { code, reason } => write!(
                f,
                "the socket {}",
                crate::leg::socket::closed_words(*code, reason)
            ),
            LegEnd::SocketError(e) => write!(f, "socket error: {e}"),
        }
    }
}

/// What one leg did.
#[derive(Clone, Debug)]
pub struct LegStats {
    pub format: Format,
    pub stream: StreamStats,
    /// Caller frames dropped on the way to the call: none, as nothing queues between the socket
    /// and the call (kept for the report's shape).
    pub frames_dropped: u64,
    pub send_intervals: SendIntervals,
    pub end: LegEnd,
}

impl LegStats {
    pub fn send_cadence(&self) -> Cadence {
        self.send_intervals.cadence()
    }
}

/// Notices queued toward a leg at most.
pub const QUEUED_NOTICES: usize = 64;

/// Server events for the client, from whoever runs the call.
#[derive(Debug)]
pub enum Notice {
    /// Sent as it is (e.g. a transcript fragment).
    Event(ToClient),
    /// The call is over: the last `stop` carries this.
    Finish {
        reason: String,
        summary: serde_json::Value,
    },
}

/// A running leg.
pub struct StreamLeg {
    pub handle: LegHandle,
    pub format: Format,
    /// Yields the stats when the leg ends.
    pub task: JoinHandle<LegStats>,
    /// Read by the leg's polls in the call's task (and by its closing task at the end); at most
    /// [`QUEUED_NOTICES`] wait (a sender waits for room, the call never does).
    pub notices: mpsc::Sender<Notice>,
}

/// Sets the socket limits of the route's upgrade.
pub fn configure_upgrade(ws: WebSocketUpgrade) -> WebSocketUpgrade {
    ws.max_message_size(MAX_SOCKET_MESSAGE)
        .max_frame_size(MAX_SOCKET_MESSAGE)
}

/// Takes over an upgraded socket: waits for `start`, then runs the leg.
pub async fn accept(
    socket: WebSocket,
    opts: StreamLegOptions,
) -> Result<StreamLeg, StreamLegError> {
    let mut core = StreamCore::new();
    let (mut sink, mut stream) = socket.split();
    let deadline = Instant::now() + opts.start_timeout;
    let refused = loop {
        let msg = match timeout_at(deadline, stream.next()).await {
            Err(_) => {
                let why = format!("no \"start\" within {:?}", opts.start_timeout);
                close(&mut sink, close_code::POLICY, &why).await;
                return Err(StreamLegError::StartTimeout(opts.start_timeout));
            }
            Ok(None) => return Err(StreamLegError::ClosedBeforeStart("connection lost".into())),
            Ok(Some(Err(e))) => return Err(StreamLegError::Socket(e.to_string())),
            Ok(Some(Ok(msg))) => msg,
        };
        let now = Instant::now();
        let r = match msg {
            Message::Text(t) => core.handle_text(t.as_str(), now),
            Message::Binary(b) => core.handle_binary(&b, now),
            Message::Close(f) => {
                let why = f.map_or("no close code".into(), |f| format!("close code {}", f.code));
                return Err(StreamLegError::ClosedBeforeStart(why));
            }
            Message::Ping(_) | Message::Pong(_) => Ok(()),
        };
        match r {
            Err(StreamError::Refused(m)) => break m,
            Err(e) => tracing::debug!(error = %e, "message before start ignored"),
            Ok(()) => {}
        }
        if let (Some(format), Some(at)) = (core.format(), core.started_at()) {
            let socket = sink.reunite(stream).map_err(|_| {
                StreamLegError::Socket("the socket's halves do not belong together".into())
            })?;
            return Ok(start(core, socket, format, at));
        }
    };
    while let Some(t) = core.poll_transmit() {
        if let Transmit::Text(s) = t {
            let _ = timeout(CLOSE_GRACE, sink.send(Message::Text(s.into()))).await;
        }
    }
    let code = match core.ended() {
        Some(EndReason::Refused { format: true, .. }) => close_code::UNSUPPORTED,
        _ => close_code::POLICY,
    };
    close(&mut sink, code, &refused).await;
    Err(StreamLegError::Refused(refused))
}

/// What a `/stream` leg runs over: an axum WebSocket, or a stand-in in tests.
trait Socket:
    Stream<Item = Result<Message, axum::Error>> + Sink<Message, Error = axum::Error> + Unpin + Send
{
}

impl<S> Socket for S where
    S: Stream<Item = Result<Message, axum::Error>>
        + Sink<Message, Error = axum::Error>
        + Unpin
        + Send
{
}

/// Runs a started stream in the call's task; the `started` acknowledgement (still in the core)
/// goes out first, on the call's first poll.
fn start<S: Socket + 'static>(
    core: StreamCore,
    socket: S,
    format: Format,
    started_at: Instant,
) -> StreamLeg {
    tracing::info!(%format, "stream started");
    let (notice_tx, notices) = mpsc::channel(QUEUED_NOTICES);
    let leg = Leg {
        core,
        socket,
        outbox: Outbox::default(),
        notices,
        notices_open: true,
        finish_early: None,
        bad: 0,
        end: None,
    };
    let (hold, closed) = Handover::new(leg);
    // It logs under the caller's span (the server's per-call span).
    let task = tokio::spawn(close_when_done(closed, format).in_current_span());
    StreamLeg {
        handle: LegHandle::direct(
            format.sample_rate,
            started_at,
            Box::new(SocketIo::new(hold)),
        ),
        format,
        task,
        notices: notice_tx,
    }
}

fn to_message(t: Transmit) -> Message {
    match t {
        Transmit::Text(s) => Message::Text(s.into()),
        Transmit::Binary(b) => Message::Binary(b.into()),
    }
}

struct Leg<S> {
    core: StreamCore,
    socket: S,
    outbox: Outbox<Message>,
    notices: mpsc::Receiver<Notice>,
    /// Whoever sends notices may still send one.
    notices_open: bool,
    /// A summary that arrived before the call's hang-up.
    finish_early: Option<(String, serde_json::Value)>,
    bad: u64,
    /// Why the stream ended, once it has.
    end: Option<LegEnd>,
}

/// A `/stream` leg as its call drives it ([`SocketIo`]).
impl<S: Socket> SocketLeg for Leg<S> {
    fn next_event(&mut self) -> Option<LegEvent> {
        self.core.poll_event()
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
        self.take_notices(cx);
        self.poll_write(cx);
        if self.end.is_some() {
            return Poll::Ready(());
        }
        let msg = std::task::ready!(self.socket.poll_next_unpin(cx));
        self.end = self.inbound(msg);
        Poll::Ready(())
    }

    /// Writes what the core has for the client; a failed write ends the stream.
    fn poll_write(&mut self, cx: &mut Context<'_>) {
        let core = &mut self.core;
        if let Err(e) = self.outbox.poll_write(&mut self.socket, cx, || {
            core.poll_transmit().map(to_message)
        }) {
            self.end = Some(LegEnd::SocketError(e.to_string()));
        }
    }

    fn play(&mut self, frame: &crate::audio::Frame, kind: PlayedKind, now: Instant) {
        let r = self.core.play(frame, kind, now);
        refused_to_send(r);
    }

    fn clear(&mut self) {
        refused_to_send(self.core.clear());
    }

    fn hang_up(&mut self) {
        let end = self.ended_by_call();
        self.end.get_or_insert(end);
    }

    fn give_up_if_stalled(&mut self, now: Instant) {
        if self.outbox.stalled(now) {
            tracing::warn!("the stream client stopped reading; giving the stream up");
            self.end = Some(LegEnd::SocketError(format!(
                "the client read nothing for {} s; giving the stream up",
                WRITE_STALL.as_secs()
            )));
        }
    }
}

/// A play or clear the stream did not take (after its end it takes nothing: not worth a warning).
fn refused_to_send(r: Result<(), StreamError>) {
    if let Err(e) = r
        && !matches!(e, StreamError::Ended(_))
    {
        tracing::warn!(error = %e, "cannot send to the stream client");
    }
}

impl<S: Socket> Leg<S> {
    /// Server events that arrived for the client go to the core (written on this pass).
    fn take_notices(&mut self, cx: &mut Context<'_>) {
        while self.notices_open {
            match self.notices.poll_recv(cx) {
                Poll::Ready(Some(Notice::Event(e))) => self.core.notify(&e),
                Poll::Ready(Some(Notice::Finish { reason, summary })) => {
                    self.finish_early = Some((reason, summary));
                }
                Poll::Ready(None) => self.notices_open = false,
                Poll::Pending => return,
            }
        }
    }

    /// How the call's hang-up ends the stream.
    fn ended_by_call(&self) -> LegEnd {
        if self.core.ended() == Some(&EndReason::Stopped) {
            LegEnd::Stopped
        } else {
            LegEnd::Hangup
        }
    }

    fn inbound(&mut self, msg: Option<Result<Message, axum::Error>>) -> Option<LegEnd> {
        let now = Instant::now();
        let r = match msg {
            None => return Some(self.closed(None, "connection lost without a close frame".into())),
            Some(Err(e)) => return Some(LegEnd::SocketError(e.to_string())),
            Some(Ok(Message::Close(f))) => {
                let (code, reason) = match f {
                    Some(f) => (Some(f.code), f.reason.as_str().to_owned()),
                    // A close frame without a body: no status, but still a close.
                    None => (Some(crate::leg::socket::NO_STATUS), String::new()),
                };
                return Some(self.closed(code, reason));
            }
            Some(Ok(Message::Text(t))) => self.core.handle_text(t.as_str(), now),
            Some(Ok(Message::Binary(b))) => self.core.handle_binary(&b, now),
            Some(Ok(Message::Ping(_) | Message::Pong(_))) => Ok(()),
        };
        if let Err(e) = r
            && !matches!(e, StreamError::Ended(_))
        {
            self.bad += 1;
            if self.bad <= LOUD_BAD_MESSAGES || self.bad.is_multiple_of(100) {
                tracing::warn!(refused = self.bad, error = %e, "stream message refused; the stream carries on");
            }
        }
        None
    }

    fn closed(&self, code: Option<u16>, reason: String) -> LegEnd {
        if self.core.ended() == Some(&EndReason::Stopped) {
            LegEnd::Stopped
        } else {
            LegEnd::SocketClosed { code, reason }
        }
    }

    /// The call is over: waits (briefly) for its summary, sends `stop`, closes normally.
    async fn finish(&mut self) {
        let early = self.finish_early.take();
        let (notices, core) = (&mut self.notices, &mut self.core);
        let (reason, summary) = match timeout(FINISH_GRACE, async {
            if early.is_some() {
                return early;
            }
            loop {
                match notices.recv().await {
                    Some(Notice::Finish { reason, summary }) => break Some((reason, summary)),
                    Some(Notice::Event(e)) => core.notify(&e),
                    None => break None,
                }
            }
        })
        .await
        {
            Ok(Some(x)) => x,
            _ => ("call ended".to_owned(), serde_json::Value::Null),
        };
        self.core.finish(reason, summary);
        let core = &mut self.core;
        let drained = timeout(
            CLOSE_GRACE,
            self.outbox
                .drain(&mut self.socket, || core.poll_transmit().map(to_message)),
        )
        .await;
        if !matches!(drained, Ok(Ok(()))) {
            return;
        }
        close_websocket(&mut self.socket).await;
    }
}

/// Takes the leg back once the call is done with it: on the call's hang-up (or after the client's
/// `stop`) sends the last `stop` with the summary, closes the socket and reports.
async fn close_when_done<S: Socket>(closed: oneshot::Receiver<Leg<S>>, format: Format) -> LegStats {
    let Ok(mut leg) = closed.await else {
        return LegStats {
            format,
            stream: StreamStats::default(),
            frames_dropped: 0,
            send_intervals: SendIntervals::default(),
            end: LegEnd::Hangup,
        };
    };
    // The call let go without a hang-up: it is over all the same.
    let end = match leg.end.take() {
        Some(end) => end,
        None => leg.ended_by_call(),
    };
    if end == LegEnd::Hangup || leg.core.ended() == Some(&EndReason::Stopped) {
        leg.finish().await;
    }
    let _ = timeout(CLOSE_GRACE, leg.socket.close()).await;
    let stats = leg.core.stats().clone();
    tracing::info!(
        %format,
        end = %end,
        frames_in = stats.frames_in,
        frames_out = stats.frames_out,
        marks_played = stats.marks_played,
        bad_messages = stats.bad_messages,
        "stream ended"
    );
    LegStats {
        format,
        stream: stats,
        frames_dropped: 0,
        send_intervals: leg.core.take_send_intervals(),
        end,
    }
}

#[cfg(test)]
#[path = "server_tests.rs"]
mod tests;
