//! The async shell of one SIP call's media: a [`MediaSession`] over its RTP and RTCP sockets,
//! presented to the call as a [`LegHandle`] and steered by the call's SIP dialog through
//! [`Signal`]s (the peer hung up, a re-INVITE changed the media, a digit came by INFO, keys to
//! press). One task owns the core and both sockets; it reads datagrams as they come, wakes at
//! the core's one timeout, writes what the core queues, and hands the call its frames over a
//! bounded queue (a frame that finds it full is dropped and counted; other events wait).
//!
//! The call's `Play` commands are written at once: the call's playout clock paces the output,
//! one 20 ms packet per tick, as on the AudioSocket leg.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::{Duration, SystemTime};

use tokio::net::UdpSocket;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep_until, timeout};

use super::dtmf::Timing;
use super::media::{MediaConfig, MediaEnd, MediaSession, MediaStats, StreamStart};
use super::sdp::Negotiated;
use crate::leg::twilio::cadence::SendIntervals;
use crate::leg::{LegCommand, LegEvent, LegHandle};

/// How long to wait for the call to take the final `Stop`, or to hang up after it.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// What the call's SIP dialog tells its media.
#[derive(Debug)]
pub enum Signal {
    /// The peer hung up (BYE) or the dialog ended otherwise.
    Hangup,
    /// A re-INVITE (or UPDATE) changed the media: hold, unhold, a new address or codec.
    Update(Negotiated),
    /// A digit the peer sent by SIP INFO.
    Dtmf(char),
    /// Keys to press toward the peer; the reply is the number queued, or the first character
    /// that is not a key.
    SendDtmf {
        digits: String,
        timing: Option<Timing>,
        reply: oneshot::Sender<Result<usize, char>>,
    },
}

/// Signals queued toward the media at most. The dialog waits for room (a peer's flood of INFO
/// or re-INVITEs is answered no faster than the media takes them); keys pressed toward the peer
/// beyond it are refused.
pub const SIGNALS: usize = 32;

/// Who ended the media.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LegEnd {
    /// The call hung up (or went away): the dialog should send BYE.
    Call,
    /// The dialog said so (the peer's BYE, a CANCEL).
    Dialog,
    /// The media itself (no RTP for too long): the dialog should send BYE.
    Media(MediaEnd),
}

/// What the leg did, for the call's log and the finished-call record.
#[derive(Clone, Debug)]
pub struct LegOutcome {
    pub stats: MediaStats,
    pub end: LegEnd,
    /// Frames dropped because the call's queue was full.
    pub frames_dropped: u64,
    /// Intervals between consecutive outbound packets as written, in µs.
    pub send_intervals: SendIntervals,
}

/// A running leg: the call's end, the dialog's control, and the task yielding the outcome.
pub struct SipLeg {
    pub handle: LegHandle,
    pub control: mpsc::Sender<Signal>,
    pub task: JoinHandle<LegOutcome>,
}

/// RTP and RTCP sockets on adjacent ports (RTP even).
pub struct Sockets {
    pub rtp: UdpSocket,
    pub rtcp: UdpSocket,
}

impl Sockets {
    /// The RTP port peers are told.
    pub fn rtp_port(&self) -> u16 {
        self.rtp.local_addr().map(|a| a.port()).unwrap_or(0)
    }
}

/// Where the next search for free ports starts (spreads calls over the range).
static NEXT_PORT: AtomicU16 = AtomicU16::new(0);

/// Binds a free even/odd pair on `ip` within `[min, max]`.
pub async fn bind_pair(ip: IpAddr, min: u16, max: u16) -> std::io::Result<Sockets> {
    let first = min + (min % 2);
    let pairs = (max.saturating_sub(first) / 2).max(1);
    let start = NEXT_PORT.fetch_add(1, Ordering::Relaxed) % pairs;
    for i in 0..pairs {
        let port = first + ((start + i) % pairs) * 2;
        let Ok(rtp) = UdpSocket::bind(SocketAddr::new(ip, port)).await else {
            continue;
        };
        let Ok(rtcp) = UdpSocket::bind(SocketAddr::new(ip, port + 1)).await else {
            continue;
        };
        NEXT_PORT.store(start + i + 1, Ordering::Relaxed);
        return Ok(Sockets { rtp, rtcp });
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::AddrInUse,
        format!("no free RTP port pair on {ip} in {min}–{max}"),
    ))
}

/// A fresh SSRC, sequence and timestamp (RFC 3550 §5.1: random starts).
pub fn random_start() -> StreamStart {
    let mut b = [0u8; 10];
    if getrandom::fill(&mut b).is_err() {
        // No entropy source: still distinct per call, though guessable.
        let n = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos()
            .to_le_bytes();
        b.copy_from_slice(&n[..10]);
    }
    StreamStart {
        ssrc: u32::from_le_bytes([b[0], b[1], b[2], b[3]]),
        seq: u16::from_le_bytes([b[4], b[5]]),
        ts: u32::from_le_bytes([b[6], b[7], b[8], b[9]]),
    }
}

/// Starts the media of an answered call: the timeline starts now.
pub fn start(cfg: MediaConfig, neg: Negotiated, sockets: Sockets, event_queue: usize) -> SipLeg {
    let core = MediaSession::new(cfg, neg, random_start(), Instant::now());
    let (ev_tx, ev_rx) = mpsc::channel(event_queue.max(1));
    let (cmd_tx, cmd_rx) = crate::leg::command_channel();
    let (sig_tx, sig_rx) = mpsc::channel(SIGNALS);
    let handle = LegHandle::new(core.rate(), core.started_at(), ev_rx, cmd_tx);
    let driver = Driver {
        core,
        sockets,
        commands: cmd_rx,
        signals: sig_rx,
        events: ev_tx,
        frames_dropped: 0,
        stop_sent: false,
        last_send: None,
        send_intervals: SendIntervals::default(),
    };
    SipLeg {
        handle,
        control: sig_tx,
        task: tokio::spawn(driver.run()),
    }
}

struct Driver {
    core: MediaSession,
    sockets: Sockets,
    commands: mpsc::Receiver<LegCommand>,
    signals: mpsc::Receiver<Signal>,
    events: mpsc::Sender<LegEvent>,
    frames_dropped: u64,
    stop_sent: bool,
    last_send: Option<Instant>,
    send_intervals: SendIntervals,
}

impl Driver {
    async fn run(mut self) -> LegOutcome {
        let mut rtp_buf = vec![0u8; super::rtp::MAX_DATAGRAM + 1];
        let mut rtcp_buf = vec![0u8; super::rtcp::MAX_DATAGRAM + 1];
        let mut signals_open = true;
        let end = loop {
            let deadline = self.core.poll_timeout();
            let mut done = None;
            tokio::select! {
                biased;
                cmd = self.commands.recv() => match cmd {
                    Some(LegCommand::Play { frame, .. }) => {
                        if self.core.ended().is_none() {
                            self.core.play(&frame);
                        }
                    }
                    // RTP has no far-end buffer to drop: stopping the frames is the barge-in.
                    Some(LegCommand::Clear) => {}
                    Some(LegCommand::Hangup) | None => done = Some(LegEnd::Call),
                },
                sig = self.signals.recv(), if signals_open => match sig {
                    Some(Signal::Hangup) | None => {
                        signals_open = false;
                        self.core.stop();
                    }
                    Some(Signal::Update(n)) => self.core.update(n, Instant::now()),
                    Some(Signal::Dtmf(d)) => self.core.dtmf_from_signalling(d),
                    Some(Signal::SendDtmf { digits, timing, reply }) => {
                        let _ = reply.send(self.core.send_dtmf(&digits, timing));
                    }
                },
                r = self.sockets.rtp.recv_from(&mut rtp_buf) => {
                    if let Ok((n, from)) = r {
                        self.core.handle_rtp(&rtp_buf[..n], from, Instant::now());
                    }
                }
                r = self.sockets.rtcp.recv_from(&mut rtcp_buf) => {
                    if let Ok((n, from)) = r {
                        self.core.handle_rtcp(&rtcp_buf[..n], from, Instant::now(), SystemTime::now());
                    }
                }
                _ = sleep_until(deadline) => {
                    self.core.handle_timeout(Instant::now(), SystemTime::now());
                }
            }
            self.flush().await;
            self.deliver().await;
            if let Some(end) = done {
                break end;
            }
            if self.stop_sent {
                // The call has been told; take its last commands until it hangs up (bounded).
                let _ = timeout(STOP_GRACE, async {
                    while let Some(cmd) = self.commands.recv().await {
                        if matches!(cmd, LegCommand::Hangup) {
                            break;
                        }
                    }
                })
                .await;
                break match self.core.ended() {
                    Some(MediaEnd::Stopped) | None => LegEnd::Dialog,
                    Some(e) => LegEnd::Media(e.clone()),
                };
            }
        };
        if !self.stop_sent {
            let _ = timeout(STOP_GRACE, self.events.send(LegEvent::Stop)).await;
        }
        let stats = self.core.stats();
        tracing::info!(
            end = ?end,
            packets_in = stats.packets_in,
            lost = stats.lost,
            late = stats.buffer.late,
            jitter_ms = stats.jitter_ms,
            concealed_ms = stats.concealed_ms,
            packets_out = stats.packets_out,
            "SIP media ended"
        );
        LegOutcome {
            stats,
            end,
            frames_dropped: self.frames_dropped,
            send_intervals: self.send_intervals,
        }
    }

    async fn flush(&mut self) {
        while let Some(t) = self.core.poll_transmit() {
            let sock = if t.rtcp {
                &self.sockets.rtcp
            } else {
                let now = Instant::now();
                if let Some(prev) = self.last_send {
                    let us = (now - prev).as_micros().min(u128::from(u32::MAX)) as u32;
                    self.send_intervals.push(us);
                }
                self.last_send = Some(now);
                &self.sockets.rtp
            };
            if let Err(e) = sock.send_to(&t.bytes, t.to).await {
                tracing::debug!(to = %t.to, error = %e, "RTP send failed");
            }
        }
    }

    async fn deliver(&mut self) {
        while let Some(ev) = self.core.poll_event() {
            match ev {
                LegEvent::Frame { .. } => match self.events.try_send(ev) {
                    Ok(()) => {}
                    Err(mpsc::error::TrySendError::Full(_)) => {
                        self.frames_dropped += 1;
                        if self.frames_dropped.is_power_of_two() {
                            tracing::warn!(
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
