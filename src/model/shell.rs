//! The one WebSocket shell every model session runs in, whatever its protocol: one task per
//! session that reads frames, takes the session handle's messages and keeps the core's clock,
//! feeds all of it to the [`ProtocolCore`], and writes what the core has to send as one batch per
//! wake-up (one flush), reporting when each caller frame reached the socket. Reads go on while a
//! write waits for the socket. The call's per-frame path only ever does a non-blocking channel
//! send to it.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::{Sink, Stream};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{mpsc, oneshot};
use tokio::time::{Instant, Sleep};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::{Error as WsError, Message};

use super::protocol::{Frame, ProtocolCore, SetupFailure, SocketEnd};
use super::session::{Dialed, DialedWs, Outbound, SessionEvent};

/// A session running in its shell: what its handle keeps.
pub(crate) struct Started<C> {
    pub commands: mpsc::UnboundedSender<C>,
    pub events: mpsc::UnboundedReceiver<SessionEvent>,
}

/// Starts `core` on `dialed` in a task of its own and waits until the service accepted the
/// setup (or the core gave up on it: the core keeps the setup deadline).
pub(crate) async fn start<C>(dialed: Dialed, core: C) -> Result<Started<C::Command>, SetupFailure>
where
    C: ProtocolCore + Send + 'static,
    C::Command: Send + 'static,
{
    let (commands, commands_rx) = mpsc::unbounded_channel();
    let (events_tx, events) = mpsc::unbounded_channel();
    let (ready_tx, ready) = oneshot::channel();
    let Dialed { ws, early } = dialed;
    match ws {
        DialedWs::Network(ws) => {
            tokio::spawn(run(*ws, early, core, commands_rx, events_tx, ready_tx));
        }
        DialedWs::InMemory(ws) => {
            tokio::spawn(run(*ws, early, core, commands_rx, events_tx, ready_tx));
        }
    }
    match ready.await {
        Ok(Ok(())) => Ok(Started { commands, events }),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(SetupFailure::Io("the session ended during setup".into())),
    }
}

/// How long a session that is over may take to close its socket.
const LINGER: Duration = Duration::from_secs(1);
/// Inbound frames taken in one wake-up at most (the rest in the next).
const READ_BATCH: usize = 16;

/// What one wake-up brought besides frames and commands (those wait in [`Io`]).
#[derive(Default)]
struct Wakeup {
    /// The stream ended (after the frames).
    ended: bool,
    /// The session handle is gone (after the commands).
    abandoned: bool,
    timer: bool,
    /// The batch was flushed: the caller frames in it reached the socket.
    flushed: bool,
    write_failed: Option<WsError>,
}

/// The session's task: runs `core` on `ws` until it is over.
async fn run<S, C>(
    mut ws: WebSocketStream<S>,
    early: Vec<Message>,
    mut core: C,
    mut commands: mpsc::UnboundedReceiver<C::Command>,
    events: mpsc::UnboundedSender<SessionEvent>,
    ready: oneshot::Sender<Result<(), SetupFailure>>,
) where
    S: AsyncRead + AsyncWrite + Unpin,
    C: ProtocolCore,
{
    let mut ready = Some(ready);
    let now = Instant::now();
    for m in early {
        feed(&mut core, Ok(m), now);
    }
    let mut io = Io {
        frames: Vec::new(),
        commands: Vec::new(),
        pending: None,
        unflushed: Vec::new(),
        flushing: false,
        abandoned: false,
        timer: Box::pin(tokio::time::sleep_until(now)),
        timer_at: None,
        slept: false,
    };
    loop {
        while let Some(ev) = core.poll_event() {
            let _ = events.send(ev);
        }
        if let Some(r) = core.poll_setup()
            && let Some(tx) = ready.take()
        {
            let _ = tx.send(r);
        }
        if core.is_over() {
            break;
        }
        let wake = std::future::poll_fn(|cx| io.poll(cx, &mut ws, &mut core, &mut commands)).await;
        // A pass that found its input (or its flush done) without sleeping is not a wake-up.
        if std::mem::take(&mut io.slept) {
            crate::wakeups::note();
        }
        let now = Instant::now();
        if wake.flushed {
            for received_at in io.unflushed.drain(..) {
                let _ = events.send(SessionEvent::Written {
                    received_at,
                    written_at: now,
                });
            }
        }
        if let Some(e) = wake.write_failed {
            core.handle_end(SocketEnd::Failed(e.to_string()), now);
        }
        for m in io.frames.drain(..) {
            feed(&mut core, m, now);
        }
        if wake.ended {
            core.handle_end(SocketEnd::Ended, now);
        }
        for c in io.commands.drain(..) {
            core.handle_outbound(c, now);
        }
        if wake.abandoned {
            core.handle_abandoned(now);
        }
        if wake.timer {
            core.handle_timeout(now);
        }
    }
    // Let go of the socket: answer or send the close (bounded: the socket may be dead).
    let _ = tokio::time::timeout(LINGER, futures_util::SinkExt::close(&mut ws)).await;
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

/// The shell's side of the socket between wake-ups.
struct Io<C> {
    /// Frames read in this wake-up (the buffer is kept).
    frames: Vec<Result<Message, WsError>>,
    /// Commands taken in this wake-up (the buffer is kept).
    commands: Vec<C>,
    /// A frame the sink had no room for yet.
    pending: Option<Outbound>,
    /// `received_at` of the caller frames written since the last flush.
    unflushed: Vec<Instant>,
    /// Frames were written and not flushed yet.
    flushing: bool,
    abandoned: bool,
    /// One timer, re-armed only when the core's deadline moves.
    timer: Pin<Box<Sleep>>,
    timer_at: Option<Instant>,
    /// The task slept since the last pass (the next pass is a wake-up).
    slept: bool,
}

impl<Cmd> Io<Cmd> {
    /// Writes what the core has (one batch, one flush) and waits for the next input.
    fn poll<S, C>(
        &mut self,
        cx: &mut Context<'_>,
        ws: &mut WebSocketStream<S>,
        core: &mut C,
        commands: &mut mpsc::UnboundedReceiver<Cmd>,
    ) -> Poll<Wakeup>
    where
        S: AsyncRead + AsyncWrite + Unpin,
        C: ProtocolCore<Command = Cmd>,
    {
        let mut wake = Wakeup::default();
        let mut ready = false;
        if let Err(e) = self.write(cx, ws, core) {
            wake.write_failed = Some(e);
            return Poll::Ready(wake);
        }
        if self.flushing {
            match Pin::new(&mut *ws).poll_flush(cx) {
                Poll::Ready(Ok(())) => {
                    self.flushing = false;
                    if !self.unflushed.is_empty() {
                        wake.flushed = true;
                        ready = true;
                    }
                }
                Poll::Ready(Err(e)) => {
                    wake.write_failed = Some(e);
                    return Poll::Ready(wake);
                }
                Poll::Pending => {}
            }
        }
        while self.frames.len() < READ_BATCH {
            match Pin::new(&mut *ws).poll_next(cx) {
                Poll::Ready(Some(m)) => self.frames.push(m),
                Poll::Ready(None) => {
                    wake.ended = true;
                    break;
                }
                Poll::Pending => break,
            }
        }
        ready |= !self.frames.is_empty() || wake.ended;
        while !self.abandoned {
            match commands.poll_recv(cx) {
                Poll::Ready(Some(c)) => self.commands.push(c),
                Poll::Ready(None) => {
                    self.abandoned = true;
                    wake.abandoned = true;
                }
                Poll::Pending => break,
            }
        }
        ready |= !self.commands.is_empty() || wake.abandoned;
        if let Some((at, _reason)) = core.poll_timeout() {
            if self.timer_at != Some(at) {
                self.timer.as_mut().reset(at);
                self.timer_at = Some(at);
            }
            if self.timer.as_mut().poll(cx).is_ready() {
                self.timer_at = None;
                wake.timer = true;
                ready = true;
            }
        }
        if ready {
            Poll::Ready(wake)
        } else {
            self.slept = true;
            Poll::Pending
        }
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
