//! baton's side of an AudioSocket connection: the thin async shell that runs an
//! [`AudioSocketSession`] over a byte stream (a TCP connection from Asterisk, or any
//! `AsyncRead + AsyncWrite`) and presents it to a call as a [`LegHandle`].
//!
//! [`accept`] reads until the UUID and the first audio message (which fixes the rate) have
//! arrived, bounded by a timeout. From then on the leg runs in its call's task, with no task or
//! queue of its own: the call's polls read the connection into the core, hang up a peer that
//! leaves a message unfinished for `stall_timeout` or sends nothing for `idle_timeout` (one
//! timer, polled with the socket), and write what the call's `Play` commands produced, one
//! write per pass (the call's playout clock paces the output, one 20 ms frame per tick). A peer
//! that reads nothing for [`WRITE_STALL`] ends the leg rather than holding the call.
//!
//! Every way a connection ends — a hang-up either way, EOF, a protocol error — sends the call
//! [`LegEvent::Stop`]. On the call's `Hangup`, or when it drops its handle, the connection goes
//! to a closing task that writes what is left (`00 00 00` if baton is the one hanging up),
//! shuts the socket down and yields the [`LegStats`] through the handle [`accept`] returned.
//!
//! Frames moved are added to live counters as they go ([`AudioSocketLegOptions::frames_in`],
//! e.g. the daemon's Prometheus counters).

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures_util::SinkExt;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::task::JoinHandle;
use tokio::time::{Instant, Sleep, timeout, timeout_at};
use tokio_util::codec::{BytesCodec, FramedWrite};
use tracing::Instrument;

use super::session::{AudioSocketSession, EndReason, SessionError, SessionStats, StartInfo};
use super::wire;
use crate::leg::socket::{Handover, Outbox, SocketIo, SocketLeg, WRITE_STALL};
use crate::leg::twilio::cadence::{Cadence, SendIntervals};
use crate::leg::{LegEvent, LegHandle, PlayedKind, StopReason};

/// How long the closing task waits for the last bytes to be written and the socket shut down.
const CLOSE_GRACE: Duration = Duration::from_secs(1);
const READ_CHUNK: usize = 4096;

/// Settings of one AudioSocket leg.
#[derive(Clone, Debug)]
pub struct AudioSocketLegOptions {
    /// The UUID and the first audio message must arrive within this long of the connection.
    pub start_timeout: Duration,
    /// A message whose header or payload is unfinished this long is a truncated message.
    pub stall_timeout: Duration,
    /// No bytes at all from the peer for this long ends the call (Asterisk sends audio every
    /// 20 ms; its own inactivity limit is 2 s).
    pub idle_timeout: Duration,
    /// Largest message length accepted.
    pub max_payload: usize,
    /// Live counts of the 20 ms frames received and sent (e.g. the daemon's Prometheus
    /// counters): one atomic add each as the leg moves them. No-op by default.
    pub frames_in: metrics::Counter,
    pub frames_out: metrics::Counter,
}

impl Default for AudioSocketLegOptions {
    fn default() -> Self {
        AudioSocketLegOptions {
            start_timeout: Duration::from_secs(5),
            stall_timeout: Duration::from_secs(1),
            idle_timeout: Duration::from_secs(10),
            max_payload: wire::DEFAULT_MAX_PAYLOAD,
            frames_in: metrics::Counter::noop(),
            frames_out: metrics::Counter::noop(),
        }
    }
}

/// The connection could not become a call.
#[derive(Debug, thiserror::Error)]
pub enum AudioSocketLegError {
    #[error("no UUID and first audio message within {0:?} of the connection")]
    StartTimeout(Duration),
    #[error("the connection ended before the call began ({0})")]
    EndedBeforeStart(EndReason),
    #[error("refused: {0}")]
    Protocol(SessionError),
    #[error("reading the connection failed: {0}")]
    Io(String),
}

/// What one leg did, for the call's report.
#[derive(Clone, Debug)]
pub struct LegStats {
    pub start: StartInfo,
    pub session: SessionStats,
    /// Caller frames dropped on the way to the call: none, as nothing queues between the
    /// connection and the call (kept for the report's shape).
    pub frames_dropped: u64,
    /// Intervals between consecutive outbound frames as they were handed to the socket, in µs.
    pub send_intervals: SendIntervals,
    pub end: EndReason,
}

impl LegStats {
    /// Deviation of outbound frame intervals from 20 ms.
    pub fn send_cadence(&self) -> Cadence {
        self.send_intervals.cadence()
    }
}

/// Takes over a connection: waits for the UUID and the first audio, then runs the leg. Returns
/// the call's end of the leg, the start info, and the closing task yielding the stats. On an
/// error the peer has been sent a hang-up and the connection is closed.
pub async fn accept<S>(
    io: S,
    opts: AudioSocketLegOptions,
) -> Result<(LegHandle, StartInfo, JoinHandle<LegStats>), AudioSocketLegError>
where
    S: AsyncRead + AsyncWrite + Send + 'static,
{
    let mut io = Box::pin(io);
    let mut core = AudioSocketSession::new(opts.max_payload);
    let mut buf = vec![0u8; READ_CHUNK].into_boxed_slice();
    let deadline = Instant::now() + opts.start_timeout;
    let failure = loop {
        let n = match timeout_at(deadline, io.read(&mut buf)).await {
            Err(_) => break AudioSocketLegError::StartTimeout(opts.start_timeout),
            Ok(Err(e)) => return Err(AudioSocketLegError::Io(e.to_string())),
            Ok(Ok(n)) => n,
        };
        let now = Instant::now();
        let r = if n == 0 {
            core.handle_eof(now)
        } else {
            core.handle_bytes(&buf[..n], now)
        };
        if let Err(e) = r {
            break AudioSocketLegError::Protocol(e);
        }
        if let Some(end) = core.ended() {
            break AudioSocketLegError::EndedBeforeStart(end.clone());
        }
        if let (Some(info), Some(at)) = (core.start_info(), core.started_at()) {
            let info = info.clone();
            return Ok(start(core, io, buf, info, at, opts));
        }
    };
    // Tell the peer, unless it is the one that hung up.
    if !matches!(
        failure,
        AudioSocketLegError::EndedBeforeStart(_) | AudioSocketLegError::Io(_)
    ) {
        let _ = timeout(CLOSE_GRACE, async {
            let _ = io.write_all(&wire::HANGUP).await;
            let _ = io.shutdown().await;
        })
        .await;
    }
    Err(failure)
}

fn start<S>(
    core: AudioSocketSession,
    io: Pin<Box<S>>,
    buf: Box<[u8]>,
    info: StartInfo,
    started_at: Instant,
    opts: AudioSocketLegOptions,
) -> (LegHandle, StartInfo, JoinHandle<LegStats>)
where
    S: AsyncRead + AsyncWrite + Send + 'static,
{
    tracing::info!(uuid = %info.uuid, rate = info.rate, "AudioSocket call started");
    let now = Instant::now();
    // A message left unfinished by the first read already runs on the stall timeout.
    let wait = if core.pending_bytes() > 0 {
        opts.stall_timeout
    } else {
        opts.idle_timeout
    };
    let leg = Leg {
        core,
        // Writes go through a buffer: what one pass produced leaves in one write.
        socket: FramedWrite::new(io, BytesCodec::new()),
        outbox: Outbox::default(),
        buf,
        last_read: now,
        timer: Box::pin(tokio::time::sleep_until(now + wait)),
        opts,
        start: info.clone(),
        counted: (0, 0),
    };
    let (hold, closed) = Handover::new(leg);
    // It logs under the caller's span (the server's per-call span).
    let task = tokio::spawn(close_when_done(closed, info.clone()).in_current_span());
    let handle = LegHandle::direct(info.rate, started_at, Box::new(SocketIo::new(hold)));
    (handle, info, task)
}

struct Leg<S> {
    core: AudioSocketSession,
    /// The connection; reads go past the write buffer to the stream itself.
    socket: FramedWrite<Pin<Box<S>>, BytesCodec>,
    outbox: Outbox<Bytes>,
    buf: Box<[u8]>,
    /// When the peer last sent anything.
    last_read: Instant,
    /// Fires at the stall or idle deadline (re-armed lazily: a read only moves `last_read`).
    timer: Pin<Box<Sleep>>,
    opts: AudioSocketLegOptions,
    start: StartInfo,
    /// Frames already added to the live counters, `(in, out)`.
    counted: (u64, u64),
}

/// An AudioSocket leg as its call drives it ([`SocketIo`]); the closing task writes what is
/// left (a hang-up baton owes the peer).
impl<S: AsyncRead + AsyncWrite + Send + 'static> SocketLeg for Leg<S> {
    fn next_event(&mut self) -> Option<LegEvent> {
        let ev = self.core.poll_event()?;
        self.count_frames();
        Some(ev)
    }

    fn ended(&self) -> bool {
        self.core.ended().is_some()
    }

    fn stop_reason(&self) -> StopReason {
        self.core
            .ended()
            .map_or(StopReason::HungUp, EndReason::stop_reason)
    }

    fn poll_io(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        self.poll_write(cx);
        if self.ended() || self.poll_read(cx).is_ready() {
            return Poll::Ready(());
        }
        self.poll_timer(cx)
    }

    /// Writes what the core has for the peer; a failed write ends the connection.
    fn poll_write(&mut self, cx: &mut Context<'_>) {
        let core = &mut self.core;
        if let Err(e) = self
            .outbox
            .poll_write(&mut self.socket, cx, || core.poll_transmit())
        {
            tracing::info!(uuid = %self.start.uuid, error = %e, "AudioSocket write failed");
            self.core.handle_write_failed(e.to_string(), Instant::now());
        }
    }

    fn play(&mut self, frame: &crate::audio::Frame, kind: PlayedKind, now: Instant) {
        if let Err(e) = self.core.play(frame, kind, now) {
            tracing::warn!(uuid = %self.start.uuid, error = %e, "cannot send to the AudioSocket peer");
        }
    }

    fn clear(&mut self) {
        self.core.clear();
    }

    fn hang_up(&mut self) {
        self.core.hangup();
    }

    fn give_up_if_stalled(&mut self, now: Instant) {
        if !self.ended() && self.outbox.stalled(now) {
            let why = format!("it read nothing for {} s", WRITE_STALL.as_secs());
            tracing::warn!(uuid = %self.start.uuid, "AudioSocket peer stopped reading; giving the call up");
            self.core.handle_write_failed(why, now);
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Send + 'static> Leg<S> {
    /// Adds the frames moved since the last call to the live counters.
    fn count_frames(&mut self) {
        let s = self.core.stats();
        let (counted_in, counted_out) = self.counted;
        if s.frames_in != counted_in {
            self.opts.frames_in.increment(s.frames_in - counted_in);
        }
        if s.frames_out != counted_out {
            self.opts.frames_out.increment(s.frames_out - counted_out);
        }
        self.counted = (s.frames_in, s.frames_out);
    }

    /// Reads what arrived into the core. Ready when something was read (or the stream ended).
    fn poll_read(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let mut rb = ReadBuf::new(&mut self.buf);
        let r = match self.socket.get_mut().as_mut().poll_read(cx, &mut rb) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(r) => r,
        };
        let now = Instant::now();
        self.last_read = now;
        let r = match r {
            Ok(()) if rb.filled().is_empty() => self.core.handle_eof(now),
            Ok(()) => {
                let n = rb.filled().len();
                self.core.handle_bytes(&self.buf[..n], now)
            }
            Err(e) => {
                tracing::info!(uuid = %self.start.uuid, error = %e, "AudioSocket read failed");
                self.core.handle_eof(now)
            }
        };
        if let Err(e) = r {
            tracing::warn!(uuid = %self.start.uuid, error = %e, "AudioSocket peer broke the protocol; hanging up");
        }
        // A partial message must be finished sooner than the idle deadline already armed.
        let due = self.due();
        if due < self.timer.deadline() {
            self.timer.as_mut().reset(due);
        }
        Poll::Ready(())
    }

    /// The stall or idle timeout. Ready when it ran out and ended the connection.
    fn poll_timer(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        loop {
            if self.timer.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            let (now, due) = (Instant::now(), self.due());
            if now < due {
                // The peer sent something since the timer was armed.
                self.timer.as_mut().reset(due);
                continue;
            }
            let e = self.core.handle_timeout(self.wait(), now);
            tracing::warn!(uuid = %self.start.uuid, error = %e, "AudioSocket peer stalled; hanging up");
            return Poll::Ready(());
        }
    }

    fn wait(&self) -> Duration {
        if self.core.pending_bytes() > 0 {
            self.opts.stall_timeout
        } else {
            self.opts.idle_timeout
        }
    }

    fn due(&self) -> Instant {
        self.last_read + self.wait()
    }
}

/// Takes the leg back once the call is done with it: writes what is still queued (the hang-up
/// baton owes the peer), shuts the connection down and reports.
async fn close_when_done<S: AsyncRead + AsyncWrite + Send + 'static>(
    closed: tokio::sync::oneshot::Receiver<Leg<S>>,
    start: StartInfo,
) -> LegStats {
    let Ok(mut leg) = closed.await else {
        return LegStats {
            start,
            session: SessionStats::default(),
            frames_dropped: 0,
            send_intervals: SendIntervals::default(),
            end: EndReason::Hangup,
        };
    };
    // The call let go without a hang-up: baton ends the call all the same.
    leg.core.hangup();
    let writable = !matches!(leg.core.ended(), Some(EndReason::Unwritable(_)));
    if writable {
        let core = &mut leg.core;
        let _ = timeout(
            CLOSE_GRACE,
            leg.outbox.drain(&mut leg.socket, || core.poll_transmit()),
        )
        .await;
        let _ = timeout(CLOSE_GRACE, SinkExt::<Bytes>::close(&mut leg.socket)).await;
    }
    leg.count_frames();
    let end = leg.core.ended().cloned().unwrap_or(EndReason::Hangup);
    let stats = leg.core.stats().clone();
    tracing::info!(
        uuid = %leg.start.uuid,
        end = %end,
        frames_in = stats.frames_in,
        frames_out = stats.frames_out,
        dtmf = stats.dtmf,
        "AudioSocket connection ended"
    );
    LegStats {
        start: leg.start,
        session: stats,
        frames_dropped: 0,
        send_intervals: leg.core.take_send_intervals(),
        end,
    }
}

#[cfg(test)]
#[path = "server_tests.rs"]
mod tests;
