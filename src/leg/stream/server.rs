//! baton's side of a `/stream` connection: the thin async shell that runs a [`StreamCore`] over
//! an axum WebSocket and presents it to a call as a [`LegHandle`].
//!
//! [`accept`] waits for `start` (bounded by a timeout); a missing or bad one closes the socket with
//! an `error` message and a close reason (1003 for a format baton does not speak, 1008 otherwise).
//! Then two tasks run, as for the Twilio leg: the **driver** owns the core and the read half
//! (frames toward the call over a bounded queue, dropped and counted when it is full; control
//! events always wait), and the **writer** writes each outbound message as soon as it is queued,
//! so the call's playout clock paces the audio. Server events for the client (transcript
//! fragments, the final summary) come in through [`StreamLeg::notices`].
//!
//! When the call ends (its `Hangup`, or the call dropping its handle) the driver waits briefly for
//! [`Notice::Finish`] so the client's last message, `stop`, can carry the call's summary, then
//! closes the socket normally.

use std::time::Duration;

use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade, close_code};
use futures_util::stream::{SplitSink, SplitStream};
use futures_util::{SinkExt, StreamExt};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::{Instant, timeout, timeout_at};

use super::core::{EndReason, StreamCore, StreamError, StreamStats, Transmit};
use super::wire::{Format, ToClient};
use crate::leg::twilio::cadence::Cadence;
use crate::leg::{LegCommand, LegEvent, LegHandle};

/// Largest WebSocket message accepted (about 8 s of 16 kHz PCM16); a larger one fails the socket.
pub const MAX_SOCKET_MESSAGE: usize = 256 * 1024;
const CLOSE_GRACE: Duration = Duration::from_secs(1);
const STOP_GRACE: Duration = Duration::from_secs(5);
/// How long the end of a call waits for its summary.
const FINISH_GRACE: Duration = Duration::from_secs(2);
const LOUD_BAD_MESSAGES: u64 = 10;

/// Settings of one `/stream` leg.
#[derive(Clone, Debug)]
pub struct StreamLegOptions {
    /// How long after the socket opens `start` must arrive.
    pub start_timeout: Duration,
    /// Events (mostly 20 ms frames) queued toward the call at most.
    pub event_queue: usize,
    /// Messages queued toward the socket at most.
    pub outbound_queue: usize,
}

impl Default for StreamLegOptions {
    fn default() -> Self {
        StreamLegOptions {
            start_timeout: Duration::from_secs(10),
            event_queue: 50,
            outbound_queue: 100,
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
    SocketClosed {
        code: Option<u16>,
        reason: String,
    },
    SocketError(String),
}

/// What one leg did.
#[derive(Clone, Debug)]
pub struct LegStats {
    pub format: Format,
    pub stream: StreamStats,
    pub frames_dropped: u64,
    pub send_intervals_us: Vec<u32>,
    pub end: LegEnd,
}

impl LegStats {
    pub fn send_cadence(&self) -> Cadence {
        Cadence::from_intervals_us(&self.send_intervals_us)
    }
}

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
    pub notices: mpsc::UnboundedSender<Notice>,
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
            return Ok(start(core, sink, stream, format, at, opts).await);
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

async fn start(
    mut core: StreamCore,
    mut sink: SplitSink<WebSocket, Message>,
    stream: SplitStream<WebSocket>,
    format: Format,
    started_at: Instant,
    opts: StreamLegOptions,
) -> StreamLeg {
    tracing::info!(%format, "stream started");
    // The `started` acknowledgement goes out before any audio.
    while let Some(t) = core.poll_transmit() {
        let _ = timeout(CLOSE_GRACE, sink.send(to_message(t))).await;
    }
    let (ev_tx, ev_rx) = mpsc::channel(opts.event_queue.max(1));
    let (cmd_tx, cmd_rx) = crate::leg::command_channel();
    let (out_tx, out_rx) = mpsc::channel(opts.outbound_queue.max(1));
    let (notice_tx, notice_rx) = mpsc::unbounded_channel();
    let writer = tokio::spawn(write_loop(sink, out_rx));
    let driver = Driver {
        core,
        socket: stream,
        commands: cmd_rx,
        notices: notice_rx,
        events: ev_tx,
        out: out_tx,
        frames_dropped: 0,
        bad: 0,
        stop_sent: false,
        finish_early: None,
    };
    let task = tokio::spawn(driver.run(writer, format));
    StreamLeg {
        handle: LegHandle::new(format.sample_rate, started_at, ev_rx, cmd_tx),
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

struct Driver {
    core: StreamCore,
    socket: SplitStream<WebSocket>,
    commands: mpsc::Receiver<LegCommand>,
    notices: mpsc::UnboundedReceiver<Notice>,
    events: mpsc::Sender<LegEvent>,
    out: mpsc::Sender<Message>,
    frames_dropped: u64,
    bad: u64,
    stop_sent: bool,
    /// A summary that arrived before the call's hang-up.
    finish_early: Option<(String, serde_json::Value)>,
}

impl Driver {
    async fn run(mut self, writer: JoinHandle<()>, format: Format) -> LegStats {
        let end = loop {
            let step = tokio::select! {
                biased;
                cmd = self.commands.recv() => self.command(cmd),
                Some(n) = self.notices.recv() => {
                    match n {
                        Notice::Event(e) => self.core.notify(&e),
                        Notice::Finish { reason, summary } => self.finish_early = Some((reason, summary)),
                    }
                    None
                }
                msg = self.socket.next() => self.inbound(msg),
            };
            if self.flush().await.is_err() {
                break LegEnd::SocketError("the socket writer stopped".into());
            }
            self.deliver_events().await;
            if let Some(end) = step {
                break end;
            }
        };
        if end == LegEnd::Hangup || self.core.ended() == Some(&EndReason::Stopped) {
            self.finish().await;
        }
        drop(self.out);
        let _ = timeout(CLOSE_GRACE, writer).await;
        if !self.stop_sent {
            let _ = timeout(STOP_GRACE, self.events.send(LegEvent::Stop)).await;
        }
        let stats = self.core.stats().clone();
        tracing::info!(
            %format,
            end = ?end,
            frames_in = stats.frames_in,
            frames_out = stats.frames_out,
            marks_played = stats.marks_played,
            bad_messages = stats.bad_messages,
            "stream ended"
        );
        LegStats {
            format,
            stream: stats,
            frames_dropped: self.frames_dropped,
            send_intervals_us: self.core.take_send_intervals(),
            end,
        }
    }

    /// The call is over: waits (briefly) for its summary, sends `stop`, closes normally.
    async fn finish(&mut self) {
        let early = self.finish_early.take();
        let (reason, summary) = match timeout(FINISH_GRACE, async {
            if early.is_some() {
                return early;
            }
            loop {
                match self.notices.recv().await {
                    Some(Notice::Finish { reason, summary }) => break Some((reason, summary)),
                    Some(Notice::Event(e)) => self.core.notify(&e),
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
        let _ = self.flush().await;
        let frame = CloseFrame {
            code: close_code::NORMAL,
            reason: "call ended".into(),
        };
        if self.out.send(Message::Close(Some(frame))).await.is_ok() {
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

    fn command(&mut self, cmd: Option<LegCommand>) -> Option<LegEnd> {
        let r = match cmd {
            Some(LegCommand::Play { frame, kind }) => self.core.play(&frame, kind, Instant::now()),
            Some(LegCommand::Clear) => self.core.clear(),
            Some(LegCommand::Hangup) | None => {
                return Some(if self.core.ended() == Some(&EndReason::Stopped) {
                    LegEnd::Stopped
                } else {
                    LegEnd::Hangup
                });
            }
        };
        if let Err(e) = r
            && !matches!(e, StreamError::Ended(_))
        {
            tracing::warn!(error = %e, "cannot send to the stream client");
        }
        None
    }

    fn inbound(&mut self, msg: Option<Result<Message, axum::Error>>) -> Option<LegEnd> {
        let now = Instant::now();
        let r = match msg {
            None => return Some(self.closed(None, "connection lost without a close frame".into())),
            Some(Err(e)) => return Some(LegEnd::SocketError(e.to_string())),
            Some(Ok(Message::Close(f))) => {
                let (code, reason) = match f {
                    Some(f) => (Some(f.code), f.reason.as_str().to_owned()),
                    None => (None, String::new()),
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

    async fn flush(&mut self) -> Result<(), ()> {
        while let Some(t) = self.core.poll_transmit() {
            self.out.send(to_message(t)).await.map_err(|_| ())?;
        }
        Ok(())
    }

    async fn deliver_events(&mut self) {
        while let Some(ev) = self.core.poll_event() {
            match ev {
                LegEvent::Frame { .. } => match self.events.try_send(ev) {
                    Ok(()) | Err(mpsc::error::TrySendError::Closed(_)) => {}
                    Err(mpsc::error::TrySendError::Full(_)) => {
                        self.frames_dropped += 1;
                        if self.frames_dropped.is_power_of_two() {
                            tracing::warn!(
                                dropped = self.frames_dropped,
                                "call is not taking caller frames (is the client sending faster than real time?); dropping"
                            );
                        }
                    }
                },
                other => {
                    if matches!(other, LegEvent::Stop) {
                        self.stop_sent = true;
                    }
                    let _ = timeout(STOP_GRACE, self.events.send(other)).await;
                }
            }
        }
    }
}

async fn write_loop(mut sink: SplitSink<WebSocket, Message>, mut out: mpsc::Receiver<Message>) {
    while let Some(msg) = out.recv().await {
        let closing = matches!(msg, Message::Close(_));
        if sink.send(msg).await.is_err() || closing {
            return;
        }
    }
    let _ = sink.close().await;
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
