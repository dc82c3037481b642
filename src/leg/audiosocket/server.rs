//! baton's side of an AudioSocket connection: the thin async shell that runs an
//! [`AudioSocketSession`] over a byte stream (a TCP connection from Asterisk, or any
//! `AsyncRead + AsyncWrite`) and presents it to a call as a [`LegHandle`].
//!
//! [`accept`] reads until the UUID and the first audio message (which fixes the rate) have
//! arrived, bounded by a timeout, then spawns two tasks:
//! * the **driver** owns the core and the read half: it feeds the bytes read to the core, turns
//!   the call's [`LegCommand`]s into outbound messages, delivers events to the call over a bounded
//!   queue (frames that find it full are dropped and counted; DTMF and stop wait for room), and
//!   hangs up a peer that leaves a message unfinished for `stall_timeout` or sends nothing for
//!   `idle_timeout`;
//! * the **writer** owns the write half and writes each message as soon as it is queued. Each
//!   `Play` is written at once: the call's playout clock paces the output, one 20 ms frame per tick.
//!
//! Every way a connection ends — a hang-up either way, EOF, a protocol error — sends the call
//! [`LegEvent::Stop`], writes `00 00 00` if baton is the one hanging up, and closes the socket.

use std::time::Duration;

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadHalf, WriteHalf};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep_until, timeout, timeout_at};

use super::session::{AudioSocketSession, EndReason, SessionError, SessionStats, StartInfo};
use super::wire;
use crate::leg::twilio::cadence::Cadence;
use crate::leg::{LegCommand, LegEvent, LegHandle};

/// How long to wait for the writer to finish after the last message.
const CLOSE_GRACE: Duration = Duration::from_secs(1);
/// How long to wait for the call to take the final `Stop`.
const STOP_GRACE: Duration = Duration::from_secs(5);
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
    /// Events (mostly 20 ms frames) queued toward the call at most.
    pub event_queue: usize,
    /// Messages queued toward the socket at most.
    pub outbound_queue: usize,
}

impl Default for AudioSocketLegOptions {
    fn default() -> Self {
        AudioSocketLegOptions {
            start_timeout: Duration::from_secs(5),
            stall_timeout: Duration::from_secs(1),
            idle_timeout: Duration::from_secs(10),
            max_payload: wire::DEFAULT_MAX_PAYLOAD,
            event_queue: 50,
            outbound_queue: 100,
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
    /// Frames dropped because the call's event queue was full.
    pub frames_dropped: u64,
    /// Intervals between consecutive outbound frames as they were handed to the writer, in µs.
    pub send_intervals_us: Vec<u32>,
    pub end: EndReason,
}

impl LegStats {
    /// Deviation of outbound frame intervals from 20 ms.
    pub fn send_cadence(&self) -> Cadence {
        Cadence::from_intervals_us(&self.send_intervals_us)
    }
}

/// Takes over a connection: waits for the UUID and the first audio, then runs the leg. Returns
/// the call's end of the leg, the start info, and the driver task yielding the stats. On an
/// error the peer has been sent a hang-up and the connection is closed.
pub async fn accept<S>(
    io: S,
    opts: AudioSocketLegOptions,
) -> Result<(LegHandle, StartInfo, JoinHandle<LegStats>), AudioSocketLegError>
where
    S: AsyncRead + AsyncWrite + Send + 'static,
{
    let (mut reader, mut writer) = tokio::io::split(io);
    let mut core = AudioSocketSession::new(opts.max_payload);
    let mut buf = vec![0u8; READ_CHUNK];
    let deadline = Instant::now() + opts.start_timeout;
    let failure = loop {
        let n = match timeout_at(deadline, reader.read(&mut buf)).await {
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
            return Ok(start(core, reader, writer, info, at, opts));
        }
    };
    // Tell the peer, unless it is the one that hung up.
    if !matches!(
        failure,
        AudioSocketLegError::EndedBeforeStart(_) | AudioSocketLegError::Io(_)
    ) {
        let _ = timeout(CLOSE_GRACE, async {
            let _ = writer.write_all(&wire::HANGUP).await;
            let _ = writer.shutdown().await;
        })
        .await;
    }
    Err(failure)
}

fn start<S>(
    core: AudioSocketSession,
    reader: ReadHalf<S>,
    writer: WriteHalf<S>,
    info: StartInfo,
    started_at: Instant,
    opts: AudioSocketLegOptions,
) -> (LegHandle, StartInfo, JoinHandle<LegStats>)
where
    S: AsyncRead + AsyncWrite + Send + 'static,
{
    tracing::info!(uuid = %info.uuid, rate = info.rate, "AudioSocket call started");
    let (ev_tx, ev_rx) = mpsc::channel(opts.event_queue.max(1));
    let (cmd_tx, cmd_rx) = crate::leg::command_channel();
    let (out_tx, out_rx) = mpsc::channel(opts.outbound_queue.max(1));
    let writer = tokio::spawn(write_loop(writer, out_rx));
    let driver = Driver {
        core,
        reader,
        commands: cmd_rx,
        events: ev_tx,
        out: out_tx,
        frames_dropped: 0,
        stop_sent: false,
        last_read: Instant::now(),
        opts,
        start: info.clone(),
    };
    let task = tokio::spawn(driver.run(writer));
    let handle = LegHandle::new(info.rate, started_at, ev_rx, cmd_tx);
    (handle, info, task)
}

struct Driver<S> {
    core: AudioSocketSession,
    reader: ReadHalf<S>,
    commands: mpsc::Receiver<LegCommand>,
    events: mpsc::Sender<LegEvent>,
    out: mpsc::Sender<Bytes>,
    frames_dropped: u64,
    stop_sent: bool,
    last_read: Instant,
    opts: AudioSocketLegOptions,
    start: StartInfo,
}

/// What ended the driver's loop.
enum Step {
    Continue,
    /// The call is gone or told the leg to hang up.
    CallDone,
}

impl<S: AsyncRead + AsyncWrite + Send + 'static> Driver<S> {
    async fn run(mut self, writer: JoinHandle<()>) -> LegStats {
        let mut buf = vec![0u8; READ_CHUNK];
        // Frames decoded with the first audio message are still in the core.
        self.deliver_events().await;
        loop {
            let wait = if self.core.pending_bytes() > 0 {
                self.opts.stall_timeout
            } else {
                self.opts.idle_timeout
            };
            let step = tokio::select! {
                biased;
                cmd = self.commands.recv() => self.command(cmd),
                r = self.reader.read(&mut buf), if self.core.ended().is_none() => {
                    let now = Instant::now();
                    self.last_read = now;
                    let r = match r {
                        Ok(0) => self.core.handle_eof(now),
                        Ok(n) => self.core.handle_bytes(&buf[..n], now),
                        Err(e) => {
                            tracing::info!(uuid = %self.start.uuid, error = %e, "AudioSocket read failed");
                            self.core.handle_eof(now)
                        }
                    };
                    if let Err(e) = r {
                        tracing::warn!(uuid = %self.start.uuid, error = %e, "AudioSocket peer broke the protocol; hanging up");
                    }
                    Step::Continue
                }
                _ = sleep_until(self.last_read + wait), if self.core.ended().is_none() => {
                    let e = self.core.handle_timeout(wait, Instant::now());
                    tracing::warn!(uuid = %self.start.uuid, error = %e, "AudioSocket peer stalled; hanging up");
                    Step::Continue
                }
            };
            let write_failed = self.flush_transmits().await.is_err();
            self.deliver_events().await;
            if matches!(step, Step::CallDone) || write_failed {
                break;
            }
            if self.core.ended().is_some() && self.stop_sent {
                // The peer is gone or refused: wait for the call to hang up (bounded), taking
                // its last commands so it never blocks on the leg.
                let _ = timeout(STOP_GRACE, async {
                    while let Some(cmd) = self.commands.recv().await {
                        if matches!(cmd, LegCommand::Hangup) {
                            break;
                        }
                    }
                })
                .await;
                break;
            }
        }
        drop(self.out);
        let _ = timeout(CLOSE_GRACE, writer).await;
        if !self.stop_sent {
            let _ = timeout(STOP_GRACE, self.events.send(LegEvent::Stop)).await;
        }
        let end = self.core.ended().cloned().unwrap_or(EndReason::Hangup);
        let stats = self.core.stats().clone();
        tracing::info!(
            uuid = %self.start.uuid,
            end = %end,
            frames_in = stats.frames_in,
            frames_out = stats.frames_out,
            dtmf = stats.dtmf,
            "AudioSocket connection ended"
        );
        LegStats {
            start: self.start,
            session: stats,
            frames_dropped: self.frames_dropped,
            send_intervals_us: self.core.take_send_intervals(),
            end,
        }
    }

    fn command(&mut self, cmd: Option<LegCommand>) -> Step {
        let r = match cmd {
            Some(LegCommand::Play { frame, kind }) => {
                if self.core.ended().is_some() {
                    return Step::Continue;
                }
                self.core.play(&frame, kind, Instant::now())
            }
            Some(LegCommand::Clear) => {
                self.core.clear();
                Ok(())
            }
            Some(LegCommand::Hangup) | None => {
                self.core.hangup();
                return Step::CallDone;
            }
        };
        if let Err(e) = r {
            tracing::warn!(uuid = %self.start.uuid, error = %e, "cannot send to the AudioSocket peer");
        }
        Step::Continue
    }

    async fn flush_transmits(&mut self) -> Result<(), ()> {
        while let Some(b) = self.core.poll_transmit() {
            if self.out.send(b).await.is_err() {
                return Err(());
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
                                uuid = %self.start.uuid,
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
                    let _ = timeout(STOP_GRACE, self.events.send(other)).await;
                }
            }
        }
    }
}

/// Writes each queued message at once; ends (and shuts the socket down) when the queue closes.
async fn write_loop<S: AsyncWrite>(mut writer: WriteHalf<S>, mut out: mpsc::Receiver<Bytes>) {
    while let Some(b) = out.recv().await {
        if writer.write_all(&b).await.is_err() {
            return;
        }
    }
    let _ = writer.shutdown().await;
}
