//! The async shell of one SIP call's media: a [`MediaSession`] over its RTP and RTCP sockets,
//! presented to the call as a [`LegHandle`] and steered by the call's SIP dialog through
//! [`Signal`]s (the peer hung up, a re-INVITE changed the media, a digit came by INFO, keys to
//! press). The leg runs in its call's task, with no task or frame queue of its own: the call's
//! polls read the datagrams that arrived into the core, run the core's one timer (the jitter
//! buffer's 20 ms frames, RTCP, the RTP timeout) and take the dialog's signals; its `Play`
//! commands are packetised at once and sent with the pass's flush (the call's playout clock
//! paces the output, one 20 ms packet per tick, as on the AudioSocket leg).
//!
//! When the call lets the leg go (hang-up, its handle dropped, or after it has taken the leg's
//! `Stop`), a closing task sends what is left and yields the [`LegOutcome`] the dialog awaits.

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicU16, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use tokio::io::ReadBuf;
use tokio::net::UdpSocket;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::{Instant, Sleep, timeout};
use tracing::Instrument;

use super::dtmf::Timing;
use super::media::{MediaConfig, MediaEnd, MediaSession, MediaStats, StreamStart, Transmit};
use super::sdp::Negotiated;
use crate::audio::Frame;
use crate::leg::socket::Handover;
use crate::leg::twilio::cadence::SendIntervals;
use crate::leg::{LegCommand, LegEvent, LegHandle, LegIo, Refused, StopReason};

/// How long the closing task may take to send what the core still has queued.
const CLOSE_GRACE: Duration = Duration::from_secs(1);

/// What the call's SIP dialog tells its media.
#[derive(Debug)]
pub enum Signal {
    /// The dialog ended: the peer hung up (BYE, CANCEL), or the call failed (no ACK for
    /// baton's answer), as the call records it.
    Hangup(StopReason),
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

impl std::fmt::Display for LegEnd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LegEnd::Call => f.write_str("the call hung up"),
            LegEnd::Dialog => f.write_str("the dialog ended (BYE or CANCEL)"),
            LegEnd::Media(m) => m.fmt(f),
        }
    }
}

/// What the leg did, for the call's log and the finished-call record.
#[derive(Clone, Debug)]
pub struct LegOutcome {
    pub stats: MediaStats,
    pub end: LegEnd,
    /// Caller frames dropped on the way to the call: none, as nothing queues between the
    /// sockets and the call (kept for the record's shape).
    pub frames_dropped: u64,
    /// Intervals between consecutive outbound packets as written, in µs.
    pub send_intervals: SendIntervals,
}

/// A running leg: the call's end, the dialog's control, and the closing task yielding the
/// outcome once the call has let the leg go.
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

/// Where the next search for free ports starts (spreads calls over the range). It starts at a
/// random pair, so a restarted daemon, or another one on the host, does not first take the
/// ports the last one freed: RTP from their old peers may still be flowing there, and a stream
/// there in sequence could pass a call's symmetric RTP probation.
static NEXT_PORT: std::sync::OnceLock<AtomicU16> = std::sync::OnceLock::new();

fn next_port() -> &'static AtomicU16 {
    NEXT_PORT.get_or_init(|| {
        let mut b = [0u8; 2];
        // No entropy source: the first pair, as before.
        let _ = getrandom::fill(&mut b);
        AtomicU16::new(u16::from_le_bytes(b))
    })
}

/// The even/odd pairs within `[min, max]`: the first even port and how many pairs fit (both
/// ports of each inside the range).
pub fn port_pairs(min: u16, max: u16) -> (u16, u16) {
    let first = min.saturating_add(min % 2);
    let pairs = if max > first {
        (max - first).div_ceil(2)
    } else {
        0
    };
    (first, pairs)
}

/// Binds a free even/odd pair on `ip` within `[min, max]`.
pub async fn bind_pair(ip: IpAddr, min: u16, max: u16) -> std::io::Result<Sockets> {
    let (first, pairs) = port_pairs(min, max);
    if pairs == 0 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("the RTP ports {min}–{max} hold no even/odd pair (RTP and RTCP)"),
        ));
    }
    let next = next_port();
    let start = next.fetch_add(1, Ordering::Relaxed) % pairs;
    for i in 0..pairs {
        let port = first + ((start + i) % pairs) * 2;
        let Ok(rtp) = UdpSocket::bind(SocketAddr::new(ip, port)).await else {
            continue;
        };
        let Ok(rtcp) = UdpSocket::bind(SocketAddr::new(ip, port + 1)).await else {
            continue;
        };
        next.store(start + i + 1, Ordering::Relaxed);
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

/// Starts the media of an answered call: the timeline starts now. The leg runs when its handle
/// is polled (by the call's task).
pub fn start(cfg: MediaConfig, neg: Negotiated, sockets: Sockets) -> SipLeg {
    let now = Instant::now();
    let core = MediaSession::new(cfg, neg, random_start(), now);
    let (sig_tx, sig_rx) = mpsc::channel(SIGNALS);
    let (rate, started_at) = (core.rate(), core.started_at());
    let timer = Box::pin(tokio::time::sleep_until(core.poll_timeout()));
    let media = Media {
        core,
        sockets,
        signals: sig_rx,
        signals_open: true,
        timer,
        rtp_buf: vec![0u8; super::rtp::MAX_DATAGRAM + 1].into_boxed_slice(),
        rtcp_buf: vec![0u8; super::rtcp::MAX_DATAGRAM + 1].into_boxed_slice(),
        held: None,
        stop_sent: false,
        last_send: None,
        send_intervals: SendIntervals::default(),
    };
    let (hold, closed) = Handover::new(media);
    // It logs under the caller's span (the server's per-call span).
    let task = tokio::spawn(close_when_done(closed).in_current_span());
    SipLeg {
        handle: LegHandle::direct(rate, started_at, Box::new(SipIo(hold))),
        control: sig_tx,
        task,
    }
}

/// The call's end of a SIP leg, driven from the call's task.
struct SipIo(Handover<Media>);

struct Media {
    core: MediaSession,
    sockets: Sockets,
    signals: mpsc::Receiver<Signal>,
    signals_open: bool,
    /// Armed at the core's `poll_timeout`.
    timer: Pin<Box<Sleep>>,
    rtp_buf: Box<[u8]>,
    rtcp_buf: Box<[u8]>,
    /// A datagram its socket could not take yet, sent first on the next poll.
    held: Option<Transmit>,
    /// The call has been given the leg's `Stop`.
    stop_sent: bool,
    last_send: Option<Instant>,
    send_intervals: SendIntervals,
}

impl LegIo for SipIo {
    fn poll_event(&mut self, cx: &mut Context<'_>) -> Poll<Option<LegEvent>> {
        let Some(m) = self.0.leg() else {
            return Poll::Ready(None);
        };
        loop {
            if let Some(ev) = m.core.poll_event() {
                if matches!(ev, LegEvent::Stop(_)) {
                    m.stop_sent = true;
                }
                return Poll::Ready(Some(ev));
            }
            if m.stop_sent {
                // The call has heard `Stop`: nothing more comes through this end.
                m.poll_send(cx);
                self.0.hand_over();
                return Poll::Ready(None);
            }
            let progressed = m.poll_signal(cx).is_ready()
                || m.poll_socket(cx, false).is_ready()
                || m.poll_socket(cx, true).is_ready()
                || m.poll_timer(cx).is_ready();
            m.poll_send(cx);
            if !progressed {
                return Poll::Pending;
            }
        }
    }

    fn command(&mut self, cmd: LegCommand) -> Result<Option<Frame>, Refused> {
        let Some(m) = self.0.leg() else {
            return Err(Refused::Gone(cmd));
        };
        match cmd {
            LegCommand::Play { frame, .. } => {
                if m.core.ended().is_none() {
                    m.core.play(&frame);
                }
                return Ok(Some(frame));
            }
            // RTP has no far-end buffer to drop: stopping the frames is the barge-in.
            LegCommand::Clear => {}
            // Nothing more goes through this end: the closing starts now.
            LegCommand::Hangup => self.0.hand_over(),
        }
        Ok(None)
    }

    fn poll_flush(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if let Some(m) = self.0.leg() {
            m.poll_send(cx);
        }
        Poll::Ready(())
    }
}

impl Media {
    /// Takes one signal from the dialog. Ready when one was taken (or the dialog went away).
    fn poll_signal(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if !self.signals_open {
            return Poll::Pending;
        }
        let sig = match self.signals.poll_recv(cx) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(sig) => sig,
        };
        match sig {
            Some(Signal::Hangup(why)) => {
                self.signals_open = false;
                self.core.stop(why);
            }
            None => {
                self.signals_open = false;
                self.core.stop(StopReason::HungUp);
            }
            Some(Signal::Update(n)) => self.core.update(n, Instant::now()),
            Some(Signal::Dtmf(d)) => self.core.dtmf_from_signalling(d),
            Some(Signal::SendDtmf {
                digits,
                timing,
                reply,
            }) => {
                let _ = reply.send(self.core.send_dtmf(&digits, timing));
            }
        }
        Poll::Ready(())
    }

    /// Reads one datagram from the RTP (or RTCP) socket into the core. Ready when one was read.
    fn poll_socket(&mut self, cx: &mut Context<'_>, rtcp: bool) -> Poll<()> {
        let (sock, buf) = if rtcp {
            (&self.sockets.rtcp, &mut self.rtcp_buf)
        } else {
            (&self.sockets.rtp, &mut self.rtp_buf)
        };
        let mut rb = ReadBuf::new(buf);
        let from = match sock.poll_recv_from(cx, &mut rb) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(Ok(from)) => from,
            // An ICMP error for an earlier send (the peer's port closed): nothing to read.
            Poll::Ready(Err(e)) => {
                tracing::debug!(error = %e, rtcp, "RTP socket read failed");
                return Poll::Ready(());
            }
        };
        let n = rb.filled().len();
        if rtcp {
            let (now, wall) = (Instant::now(), SystemTime::now());
            self.core.handle_rtcp(&self.rtcp_buf[..n], from, now, wall);
        } else {
            self.core
                .handle_rtp(&self.rtp_buf[..n], from, Instant::now());
        }
        Poll::Ready(())
    }

    /// The core's timer. Ready when it ran out and the core ran what was due.
    fn poll_timer(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if self.core.ended().is_some() {
            return Poll::Pending;
        }
        let due = self.core.poll_timeout();
        if self.timer.deadline() != due {
            self.timer.as_mut().reset(due);
        }
        if self.timer.as_mut().poll(cx).is_pending() {
            return Poll::Pending;
        }
        self.core.handle_timeout(Instant::now(), SystemTime::now());
        Poll::Ready(())
    }

    /// Sends what the core has queued as far as the sockets take it.
    fn poll_send(&mut self, cx: &mut Context<'_>) {
        loop {
            let Some(t) = self.held.take().or_else(|| self.core.poll_transmit()) else {
                return;
            };
            let sock = if t.rtcp {
                &self.sockets.rtcp
            } else {
                &self.sockets.rtp
            };
            match sock.poll_send_to(cx, &t.bytes, t.to) {
                Poll::Pending => {
                    self.held = Some(t);
                    return;
                }
                Poll::Ready(r) => {
                    if let Err(e) = r {
                        tracing::debug!(to = %t.to, error = %e, "RTP send failed");
                    }
                    if !t.rtcp {
                        self.sent_rtp();
                    }
                }
            }
        }
    }

    fn sent_rtp(&mut self) {
        let now = Instant::now();
        if let Some(prev) = self.last_send {
            let us = (now - prev).as_micros().min(u128::from(u32::MAX)) as u32;
            self.send_intervals.push(us);
        }
        self.last_send = Some(now);
    }
}

/// Takes the media back once the call is done with it: sends what the core still has queued
/// and reports who ended it.
async fn close_when_done(closed: oneshot::Receiver<Media>) -> LegOutcome {
    let Ok(mut m) = closed.await else {
        return LegOutcome {
            stats: MediaStats::default(),
            end: LegEnd::Call,
            frames_dropped: 0,
            send_intervals: SendIntervals::default(),
        };
    };
    let _ = timeout(
        CLOSE_GRACE,
        std::future::poll_fn(|cx| {
            m.poll_send(cx);
            if m.held.is_some() {
                Poll::Pending
            } else {
                Poll::Ready(())
            }
        }),
    )
    .await;
    // The leg's own `Stop` (the dialog's word, or the media's) came first; else the call ended it.
    let end = if m.stop_sent {
        match m.core.ended() {
            Some(MediaEnd::Stopped) | None => LegEnd::Dialog,
            Some(e) => LegEnd::Media(e.clone()),
        }
    } else {
        LegEnd::Call
    };
    let stats = m.core.stats();
    tracing::info!(
        end = %end,
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
        frames_dropped: 0,
        send_intervals: m.send_intervals,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_pair_inside_the_range_is_counted_and_none_outside() {
        // (min, max) → (first, pairs)
        assert_eq!(
            port_pairs(20_000, 29_999),
            (20_000, 5_000),
            "the top pair 29998/29999"
        );
        assert_eq!(
            port_pairs(20_000, 29_998),
            (20_000, 4_999),
            "29998 has no 29999"
        );
        assert_eq!(port_pairs(20_001, 20_003), (20_002, 1));
        assert_eq!(
            port_pairs(20_000, 20_000),
            (20_000, 0),
            "one port is no pair"
        );
        assert_eq!(port_pairs(20_001, 20_002), (20_002, 0));
        assert_eq!(port_pairs(65_535, 65_535), (65_535, 0));
    }

    #[tokio::test]
    async fn the_pairs_of_a_small_range_are_all_used_and_nothing_beyond_it() {
        let ip = IpAddr::from([127, 0, 0, 1]);
        // Below Linux's ephemeral ports (32768–60999) and above the SIP tests' RTP range, so
        // no other socket is handed these.
        let (min, max) = (31_100, 31_103);
        let a = bind_pair(ip, min, max).await.unwrap();
        let b = bind_pair(ip, min, max).await.unwrap();
        let mut ports = [a.rtp_port(), b.rtp_port()];
        ports.sort_unstable();
        assert_eq!(ports, [31_100, 31_102]);
        for s in [&a, &b] {
            assert_eq!(s.rtcp.local_addr().unwrap().port(), s.rtp_port() + 1);
        }
        let full = bind_pair(ip, min, max).await.err().unwrap();
        assert_eq!(full.kind(), std::io::ErrorKind::AddrInUse, "{full}");
        let none = bind_pair(ip, 31_110, 31_110).await.err().unwrap();
        assert_eq!(none.kind(), std::io::ErrorKind::InvalidInput, "{none}");
        assert!(none.to_string().contains("no even/odd pair"), "{none}");
    }
}
