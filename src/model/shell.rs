//! The one WebSocket shell every model session runs in, whatever its protocol. It has no task
//! of its own: whoever polls the session's handle (the call's task) drives it — each poll
//! writes what the [`ProtocolCore`] has to send as one batch (one flush), reads the frames that
//! arrived, keeps the core's one timer, feeds all of it to the core and returns the core's
//! events. When each caller frame reached the socket is kept for the handle's owner to take
//! (the oldest go beyond [`WRITTEN_KEPT`]). Commands go straight into the core. Reads go on
//! while a write waits for the socket. Once the handle is dropped a task of its own closes the
//! session.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::{Sink, Stream};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::time::{Instant, Sleep};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::{Error as WsError, Message};

use super::protocol::{Frame, ProtocolCore, SetupFailure, SocketEnd};
use super::session::{Dialed, DialedWs, Outbound, SessionEvent, Written};

/// A running session as its handle holds it: the shell with its socket and core, driven by
/// whoever polls the handle (the call's task), or by a task of its own once the handle is
/// dropped, to close the session.
pub(crate) struct Handle<Cmd> {
    shell: Option<Box<dyn Driven<Cmd>>>,
}

/// A shell whatever its socket's transport.
trait Driven<Cmd>: Send {
    fn poll_event(&mut self, cx: &mut Context<'_>) -> Poll<Option<SessionEvent>>;
    fn poll_setup(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), SetupFailure>>;
    fn command(&mut self, cmd: Cmd) -> bool;
    fn take_written(&mut self) -> Option<Written>;
    /// The handle is gone: close the session in a task of its own.
    fn abandon(self: Box<Self>);
}

impl<Cmd> Handle<Cmd> {
    /// Gives the core a command (what it writes goes out on the next poll); false if the
    /// session is over.
    pub fn send(&mut self, cmd: Cmd) -> bool {
        self.shell.as_mut().is_some_and(|s| s.command(cmd))
    }

    /// The session's next event; `None` once it is over. Drives the socket: writes what the
    /// commands produced, reads, keeps the core's timer. Cancel-safe.
    pub fn poll_event(&mut self, cx: &mut Context<'_>) -> Poll<Option<SessionEvent>> {
        match self.shell.as_mut() {
            Some(s) => s.poll_event(cx),
            None => Poll::Ready(None),
        }
    }

    /// The session's next event.
    pub async fn recv(&mut self) -> Option<SessionEvent> {
        std::future::poll_fn(|cx| self.poll_event(cx)).await
    }

    /// The oldest caller frame reported written and not yet taken.
    pub fn take_written(&mut self) -> Option<Written> {
        self.shell.as_mut()?.take_written()
    }

    /// An event that is ready now, if any (the socket is read but nothing is waited for).
    pub fn try_event(&mut self) -> Option<SessionEvent> {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        match self.poll_event(&mut cx) {
            Poll::Ready(ev) => ev,
            Poll::Pending => None,
        }
    }
}

impl<Cmd> Drop for Handle<Cmd> {
    fn drop(&mut self) {
        if let Some(s) = self.shell.take() {
            s.abandon();
        }
    }
}

/// Runs `core` on `dialed` and waits until the service accepted the setup (or the core gave up
/// on it: the core keeps the setup deadline). No task is spawned: the session is driven by
/// the polls of the handle it returns.
pub(crate) async fn start<C>(dialed: Dialed, core: C) -> Result<Handle<C::Command>, SetupFailure>
where
    C: ProtocolCore + Send + 'static,
    C::Command: Send + 'static,
{
    let Dialed { ws, early } = dialed;
    let mut shell: Box<dyn Driven<C::Command>> = match ws {
        DialedWs::Network(ws) => Box::new(Shell::new(*ws, early, core)),
        DialedWs::InMemory(ws) => Box::new(Shell::new(*ws, early, core)),
    };
    match std::future::poll_fn(|cx| shell.poll_setup(cx)).await {
        Ok(()) => Ok(Handle { shell: Some(shell) }),
        Err(e) => {
            shell.abandon();
            Err(e)
        }
    }
}

/// How long a session that is over may take to close its socket.
const LINGER: Duration = Duration::from_secs(1);
/// Inbound frames taken in one pass at most (the rest in the next).
const READ_BATCH: usize = 16;
/// Write reports kept for the handle's owner to take; beyond it the oldest go. The call takes
/// them every pass, so they pile up only behind a stalled socket, whose flush then reports
/// every frame queued meanwhile at once: half a minute of frames is kept (32 bytes each), so
/// a stall's slowest frames still reach `uplink_added_ms`. An owner that never takes them holds
/// this many at most.
pub const WRITTEN_KEPT: usize = 1_500;

/// What one pass brought besides frames (those wait in [`Io`]).
#[derive(Default)]
struct Pass {
    /// Something for the core: frames, the end, the timer, a failed write.
    ready: bool,
    /// The stream ended (after the frames).
    ended: bool,
    timer: bool,
    /// The batch was flushed: the caller frames in it reached the socket.
    flushed: bool,
    write_failed: Option<WsError>,
}

/// The socket, the core and what lies between them.
struct Shell<S, C> {
    ws: WebSocketStream<S>,
    core: C,
    io: Io,
    /// Caller frames written, for the handle's owner to take.
    written: VecDeque<Written>,
}

impl<S, C> Shell<S, C>
where
    S: AsyncRead + AsyncWrite + Unpin,
    C: ProtocolCore,
{
    fn new(ws: WebSocketStream<S>, early: Vec<Message>, mut core: C) -> Self {
        let now = Instant::now();
        for m in early {
            feed(&mut core, Ok(m), now);
        }
        Shell {
            ws,
            core,
            io: Io {
                frames: Vec::new(),
                pending: None,
                unflushed: Vec::new(),
                flushing: false,
                timer: Box::pin(tokio::time::sleep_until(now)),
                timer_at: None,
            },
            written: VecDeque::new(),
        }
    }

    /// One pass over the socket and the timer, fed to the core. Ready when the core was fed
    /// (it may have something to report); pending when it was not, also after a pass that only
    /// completed a flush (its `Written` stamps are kept all the same).
    fn step(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let pass = self.io.poll(cx, &mut self.ws, &mut self.core);
        if !pass.ready && !pass.flushed {
            return Poll::Pending;
        }
        let now = Instant::now();
        if pass.flushed {
            self.stamp_written(now);
        }
        if !pass.ready {
            // Only a flush: its stamps are kept without another pass over the socket.
            return Poll::Pending;
        }
        if let Some(e) = pass.write_failed {
            self.core.handle_end(SocketEnd::Failed(e.to_string()), now);
        }
        for m in self.io.frames.drain(..) {
            feed(&mut self.core, m, now);
        }
        if pass.ended {
            self.core.handle_end(SocketEnd::Ended, now);
        }
        if pass.timer {
            self.core.handle_timeout(now);
        }
        Poll::Ready(())
    }

    /// The caller frames of the batch just flushed reached the socket at `now`.
    fn stamp_written(&mut self, now: Instant) {
        for received_at in self.io.unflushed.drain(..) {
            if self.written.len() == WRITTEN_KEPT {
                self.written.pop_front();
            }
            self.written.push_back(Written {
                received_at,
                written_at: now,
            });
        }
    }
}

impl<S, C> Driven<C::Command> for Shell<S, C>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    C: ProtocolCore + Send + 'static,
{
    fn poll_event(&mut self, cx: &mut Context<'_>) -> Poll<Option<SessionEvent>> {
        loop {
            if let Some(ev) = self.core.poll_event() {
                return Poll::Ready(Some(ev));
            }
            if self.core.is_over() {
                return Poll::Ready(None);
            }
            if self.step(cx).is_pending() {
                return Poll::Pending;
            }
        }
    }

    fn poll_setup(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), SetupFailure>> {
        loop {
            if let Some(r) = self.core.poll_setup() {
                return Poll::Ready(r);
            }
            if self.core.is_over() {
                return Poll::Ready(Err(SetupFailure::Io(
                    "the session ended during setup".into(),
                )));
            }
            if self.step(cx).is_pending() {
                return Poll::Pending;
            }
        }
    }

    fn command(&mut self, cmd: C::Command) -> bool {
        if self.core.is_over() {
            return false;
        }
        self.core.handle_outbound(cmd, Instant::now());
        true
    }

    fn take_written(&mut self) -> Option<Written> {
        self.written.pop_front()
    }

    fn abandon(self: Box<Self>) {
        // Outside a runtime (the process is ending) the socket is simply dropped.
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let mut shell = self;
        rt.spawn(async move {
            shell.core.handle_abandoned(Instant::now());
            // Until the core is done (its close answered, or its close wait over).
            std::future::poll_fn(|cx| {
                loop {
                    while shell.core.poll_event().is_some() {}
                    shell.written.clear();
                    if shell.core.is_over() {
                        return Poll::Ready(());
                    }
                    if shell.step(cx).is_pending() {
                        return Poll::Pending;
                    }
                }
            })
            .await;
            // Let go of the socket: answer or send the close (bounded: the socket may be dead).
            let _ = tokio::time::timeout(LINGER, futures_util::SinkExt::close(&mut shell.ws)).await;
        });
    }
}

/// One inbound frame (or read failure) into the core.
fn feed<C: ProtocolCore>(core: &mut C, m: Result<Message, WsError>, now: Instant) {
    match m {
        Ok(Message::Text(t)) => core.handle_frame(Frame::Text(t.as_str()), now),
        Ok(Message::Binary(b)) => core.handle_frame(Frame::Binary(&b), now),
        Ok(Message::Ping(_) | Message::Pong(_) | Message::Frame(_)) => {
            core.handle_frame(Frame::Control, now)
        }
        Ok(Message::Close(frame)) => {
            let (code, reason) = match frame {
                Some(f) => (Some(u16::from(f.code)), f.reason.to_string()),
                None => (None, String::new()),
            };
            core.handle_end(SocketEnd::Closed { code, reason }, now);
        }
        Err(e) => core.handle_end(SocketEnd::Failed(e.to_string()), now),
    }
}

/// The shell's side of the socket between passes.
struct Io {
    /// Frames read in this pass (the buffer is kept).
    frames: Vec<Result<Message, WsError>>,
    /// A frame the sink had no room for yet.
    pending: Option<Outbound>,
    /// `received_at` of the caller frames written since the last flush.
    unflushed: Vec<Instant>,
    /// Frames were written and not flushed yet.
    flushing: bool,
    /// One timer, re-armed only when the core's deadline moves.
    timer: Pin<Box<Sleep>>,
    timer_at: Option<Instant>,
}

impl Io {
    /// Writes what the core has (one batch, one flush) and looks for the next input. Not
    /// `ready`: every waker is registered (the socket's read, the timer; the write's while
    /// it waits).
    fn poll<S, C>(
        &mut self,
        cx: &mut Context<'_>,
        ws: &mut WebSocketStream<S>,
        core: &mut C,
    ) -> Pass
    where
        S: AsyncRead + AsyncWrite + Unpin,
        C: ProtocolCore,
    {
        let mut pass = Pass::default();
        if let Err(e) = self.write(cx, ws, core) {
            pass.write_failed = Some(e);
            pass.ready = true;
            return pass;
        }
        if self.flushing {
            match Pin::new(&mut *ws).poll_flush(cx) {
                Poll::Ready(Ok(())) => {
                    self.flushing = false;
                    pass.flushed = !self.unflushed.is_empty();
                }
                Poll::Ready(Err(e)) => {
                    pass.write_failed = Some(e);
                    pass.ready = true;
                    return pass;
                }
                Poll::Pending => {}
            }
        }
        while self.frames.len() < READ_BATCH {
            match Pin::new(&mut *ws).poll_next(cx) {
                Poll::Ready(Some(m)) => self.frames.push(m),
                Poll::Ready(None) => {
                    pass.ended = true;
                    break;
                }
                Poll::Pending => break,
            }
        }
        pass.ready = !self.frames.is_empty() || pass.ended;
        if let Some((at, _reason)) = core.poll_timeout() {
            if self.timer_at != Some(at) {
                self.timer.as_mut().reset(at);
                self.timer_at = Some(at);
            }
            if self.timer.as_mut().poll(cx).is_ready() {
                self.timer_at = None;
                pass.timer = true;
                pass.ready = true;
            }
        }
        pass
    }

    /// Hands the sink every frame the core has, as far as it takes them.
    fn write<S, C>(
        &mut self,
        cx: &mut Context<'_>,
        ws: &mut WebSocketStream<S>,
        core: &mut C,
    ) -> Result<(), WsError>
    where
        S: AsyncRead + AsyncWrite + Unpin,
        C: ProtocolCore,
    {
        loop {
            let Some(out) = self.pending.take().or_else(|| core.poll_transmit()) else {
                return Ok(());
            };
            match Pin::new(&mut *ws).poll_ready(cx) {
                Poll::Ready(Ok(())) => {}
                Poll::Ready(Err(e)) => return Err(e),
                Poll::Pending => {
                    self.pending = Some(out);
                    return Ok(());
                }
            }
            let (message, received_at) = message(out);
            Pin::new(&mut *ws).start_send(message)?;
            self.unflushed.extend(received_at);
            self.flushing = true;
        }
    }
}

/// The WebSocket message for a frame the core wants written, and the arrival of the caller
/// audio it carries.
fn message(out: Outbound) -> (Message, Option<Instant>) {
    match out {
        Outbound::Text { json, received_at } => {
            if received_at.is_none() && !is_audio(&json) {
                // A control message (no credential travels in a message: they go in headers).
                tracing::trace!(target: "baton::wire", "sent {}", clip_for_log(&json));
            }
            (Message::text(json), received_at)
        }
        Outbound::Ping => (Message::Ping(Default::default()), None),
        Outbound::Close => (
            Message::Close(Some(CloseFrame {
                code: CloseCode::Normal,
                reason: "call ended".into(),
            })),
            None,
        ),
    }
}

/// Caller audio, in either protocol (not worth a log line).
fn is_audio(json: &str) -> bool {
    json.starts_with(r#"{"realtimeInput":{"audio""#)
        || json.starts_with(r#"{"type":"input_audio_buffer.append""#)
}

/// A message cut to a length fit for one log line.
fn clip_for_log(json: &str) -> &str {
    const MAX: usize = 600;
    match json.char_indices().nth(MAX) {
        Some((i, _)) => &json[..i],
        None => json,
    }
}
