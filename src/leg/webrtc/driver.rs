//! The async shell of a WebRTC leg: presents an answered [`Peer`] to a call as a [`LegHandle`].
//!
//! [`start`] waits (bounded) for the browser's audio track and its first RTP packet: that
//! packet's arrival is the leg's `started_at`, media time zero both ways. Then two tasks run:
//! * **inbound** reads RTP from the remote track, stamps each packet when it is read (so
//!   `uplink_added_ms` includes Opus decoding), decodes it with [`OpusInbound`] and hands the 20 ms
//!   frames to the call over a bounded queue; frames that find it full are dropped and counted.
//! * the **driver** takes the call's commands: each `Play` (one per 20 ms playout tick, silence
//!   included, so the browser receives an unbroken 50 packets/s stream) is Opus-encoded and
//!   written to the outbound track at once; the call's playout clock is the pacing. It also
//!   watches the connection state, the inbound task and the hang-up signal (WHIP `DELETE`).
//!
//! `Clear` needs no message: a browser keeps only its own small jitter buffer, so flushing
//! baton's playout is the whole barge-in. The leg ends on `Hangup` or the hang-up signal (the
//! peer connection is closed), when the connection fails or closes, when the caller's track ends,
//! or when the call drops its handle; in every case but the last two the call is sent
//! [`LegEvent::Stop`].

use std::sync::Arc;
use std::time::Duration;

use rtc::media::Sample;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep_until, timeout};
use webrtc::media_stream::track_remote::{TrackRemote, TrackRemoteEvent};
use webrtc::peer_connection::RTCPeerConnectionState;

use super::codec::{CodecError, InboundStats, OpusInbound, OpusOutbound};
use super::peer::Peer;
use crate::audio::FRAME_MS;
use crate::leg::{LegCommand, LegEvent, LegHandle, StopReason};

/// How long to wait for the call to take the final `Stop`, and for the connection to close.
const GRACE: Duration = Duration::from_secs(2);

/// Settings of one WebRTC leg.
#[derive(Clone, Debug)]
pub struct WebrtcLegOptions {
    /// The PCM rate the leg presents to the call, both ways (see [`super::LEG_RATE`]).
    pub rate: u32,
    /// Opus bitrate toward the browser, bits per second.
    pub bitrate: u32,
    /// How long after the answer the browser's first audio packet must arrive.
    pub connect_timeout: Duration,
    /// How long the connection may stay `disconnected` before the call ends.
    pub disconnect_grace: Duration,
    /// Frames queued toward the call at most.
    pub event_queue: usize,
}

impl Default for WebrtcLegOptions {
    fn default() -> Self {
        WebrtcLegOptions {
            rate: super::LEG_RATE,
            bitrate: 32_000,
            connect_timeout: Duration::from_secs(15),
            disconnect_grace: Duration::from_secs(5),
            event_queue: 100,
        }
    }
}

/// The leg could not start.
#[derive(Debug, thiserror::Error)]
pub enum WebrtcLegError {
    #[error("no audio from the browser within {0:?} of the answer")]
    ConnectTimeout(Duration),
    #[error("the connection ended before any audio arrived ({0})")]
    Closed(String),
    #[error("hung up before any audio arrived")]
    HungUp,
    #[error(transparent)]
    Codec(#[from] CodecError),
}

/// How a leg ended.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LegEnd {
    /// The session was deleted (the caller hung up through the signalling).
    Deleted,
    /// The call sent `Hangup`.
    Hangup,
    /// The call dropped its end of the leg.
    CallGone,
    /// The peer closed the connection, or the caller's track ended.
    PeerClosed(String),
    /// The connection failed or stayed disconnected.
    PeerFailed(String),
}

impl LegEnd {
    /// How the call records this end: a deleted session or a peer that closed is the caller
    /// hanging up; a connection that failed is the caller's side failing.
    pub fn stop_reason(&self) -> StopReason {
        match self {
            LegEnd::PeerFailed(_) => StopReason::Failed(self.to_string()),
            _ => StopReason::HungUp,
        }
    }
}

impl std::fmt::Display for LegEnd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LegEnd::Deleted => f.write_str("the session was deleted"),
            LegEnd::Hangup => f.write_str("baton hung up"),
            LegEnd::CallGone => f.write_str("the call went away"),
            LegEnd::PeerClosed(why) | LegEnd::PeerFailed(why) => {
                write!(f, "the peer went away: {why}")
            }
        }
    }
}

/// What one leg did, for the call's report.
#[derive(Clone, Debug, serde::Serialize)]
pub struct LegStats {
    pub inbound: InboundStats,
    /// Caller frames dropped because the call's queue was full.
    pub frames_dropped: u64,
    /// Opus packets written toward the browser.
    pub packets_out: u64,
    /// Frames that could not be encoded or written.
    pub send_errors: u64,
    /// Barge-ins (`Clear`) received.
    pub clears: u64,
    /// Per outbound frame: its `Play` command taken → its RTP packet handed to the connection
    /// (Opus encoding and packetising), in µs.
    #[serde(skip)]
    pub play_to_wire_us: Vec<u32>,
    pub end: LegEnd,
}

/// Waits for the browser's audio, then runs the leg. On error the connection is closed.
pub async fn start(
    mut peer: Peer,
    opts: WebrtcLegOptions,
    mut hangup: watch::Receiver<bool>,
) -> Result<(LegHandle, JoinHandle<LegStats>), WebrtcLegError> {
    let first = match first_packet(&mut peer, &opts, &mut hangup).await {
        Ok(x) => x,
        Err(e) => {
            let _ = timeout(GRACE, peer.pc.close()).await;
            return Err(e);
        }
    };
    let (track, packet) = first;
    let started_at = Instant::now();
    let mut inbound = OpusInbound::new(opts.rate)?;
    let outbound = OpusOutbound::new(opts.rate, opts.bitrate)?;
    let (ev_tx, ev_rx) = mpsc::channel(opts.event_queue.max(1));
    let (cmd_tx, cmd_rx) = crate::leg::command_channel();
    let mut frames = Vec::new();
    inbound.push(
        packet.header.sequence_number,
        packet.header.timestamp,
        &packet.payload,
        &mut frames,
    );
    let mut reader = Reader {
        core: inbound,
        events: ev_tx.clone(),
        dropped: 0,
    };
    reader.deliver(&mut frames, started_at);
    let reader = tokio::spawn(reader.run(track));
    let driver = Driver {
        grace: opts.disconnect_grace,
        peer,
        encoder: outbound,
        commands: cmd_rx,
        events: ev_tx,
        hangup,
        packets_out: 0,
        send_errors: 0,
        clears: 0,
        play_to_wire_us: Vec::new(),
    };
    let task = tokio::spawn(driver.run(reader));
    let handle = LegHandle::new(opts.rate, started_at, ev_rx, cmd_tx);
    Ok((handle, task))
}

async fn first_packet(
    peer: &mut Peer,
    opts: &WebrtcLegOptions,
    hangup: &mut watch::Receiver<bool>,
) -> Result<(Arc<dyn TrackRemote>, rtc::rtp::Packet), WebrtcLegError> {
    let deadline = Instant::now() + opts.connect_timeout;
    let mut track: Option<Arc<dyn TrackRemote>> = None;
    loop {
        tokio::select! {
            biased;
            _ = wait_true(hangup) => return Err(WebrtcLegError::HungUp),
            _ = sleep_until(deadline) => return Err(WebrtcLegError::ConnectTimeout(opts.connect_timeout)),
            s = peer.state.changed() => {
                let state = *peer.state.borrow_and_update();
                if s.is_err() || matches!(state, RTCPeerConnectionState::Failed | RTCPeerConnectionState::Closed) {
                    return Err(WebrtcLegError::Closed(format!("connection {state}")));
                }
            }
            t = peer.remote_tracks.recv(), if track.is_none() => match t {
                Some(t) => track = Some(t),
                None => return Err(WebrtcLegError::Closed("no remote track".into())),
            },
            ev = poll(&track) => match ev {
                Some(TrackRemoteEvent::OnRtpPacket(p)) if !p.payload.is_empty() => {
                    if let Some(t) = track.take() {
                        return Ok((t, p));
                    }
                }
                Some(TrackRemoteEvent::OnEnded) | None => {
                    return Err(WebrtcLegError::Closed("the caller's track ended".into()));
                }
                Some(_) => {}
            },
        }
    }
}

async fn poll(track: &Option<Arc<dyn TrackRemote>>) -> Option<TrackRemoteEvent> {
    match track {
        Some(t) => t.poll().await,
        None => std::future::pending().await,
    }
}

/// The inbound task: RTP → frames → the call.
struct Reader {
    core: OpusInbound,
    events: mpsc::Sender<LegEvent>,
    dropped: u64,
}

impl Reader {
    async fn run(mut self, track: Arc<dyn TrackRemote>) -> (InboundStats, u64) {
        let mut frames = Vec::with_capacity(8);
        while let Some(ev) = track.poll().await {
            match ev {
                TrackRemoteEvent::OnRtpPacket(p) => {
                    let at = Instant::now();
                    let h = &p.header;
                    self.core
                        .push(h.sequence_number, h.timestamp, &p.payload, &mut frames);
                    if !self.deliver(&mut frames, at) {
                        break;
                    }
                }
                TrackRemoteEvent::OnEnded => break,
                _ => {}
            }
        }
        (self.core.stats(), self.dropped)
    }

    /// Hands frames to the call; false once the call is gone.
    fn deliver(&mut self, frames: &mut Vec<crate::audio::Frame>, received_at: Instant) -> bool {
        for frame in frames.drain(..) {
            match self.events.try_send(LegEvent::Frame { frame, received_at }) {
                Ok(()) => {}
                Err(mpsc::error::TrySendError::Full(_)) => {
                    self.dropped += 1;
                    if self.dropped.is_power_of_two() {
                        tracing::warn!(
                            dropped = self.dropped,
                            "call is not taking caller frames; dropping"
                        );
                    }
                }
                Err(mpsc::error::TrySendError::Closed(_)) => return false,
            }
        }
        true
    }
}

struct Driver {
    grace: Duration,
    peer: Peer,
    encoder: OpusOutbound,
    commands: mpsc::Receiver<LegCommand>,
    events: mpsc::Sender<LegEvent>,
    hangup: watch::Receiver<bool>,
    packets_out: u64,
    send_errors: u64,
    clears: u64,
    play_to_wire_us: Vec<u32>,
}

impl Driver {
    async fn run(mut self, mut reader: JoinHandle<(InboundStats, u64)>) -> LegStats {
        let mut disconnected_at: Option<Instant> = None;
        let mut watch_state = true;
        let mut inbound = None;
        let grace = self.grace;
        let end = loop {
            tokio::select! {
                biased;
                _ = wait_true(&mut self.hangup) => break LegEnd::Deleted,
                cmd = self.commands.recv() => match cmd {
                    Some(LegCommand::Play { frame, .. }) => self.play(&frame).await,
                    Some(LegCommand::Clear) => self.clears += 1,
                    Some(LegCommand::Hangup) => break LegEnd::Hangup,
                    None => break LegEnd::CallGone,
                },
                changed = self.peer.state.changed(), if watch_state => {
                    if changed.is_err() {
                        watch_state = false;
                        continue;
                    }
                    match *self.peer.state.borrow_and_update() {
                        RTCPeerConnectionState::Failed => {
                            break LegEnd::PeerFailed("the connection failed".into());
                        }
                        RTCPeerConnectionState::Closed => {
                            break LegEnd::PeerClosed("the connection closed".into());
                        }
                        RTCPeerConnectionState::Disconnected => {
                            disconnected_at.get_or_insert(Instant::now());
                        }
                        _ => disconnected_at = None,
                    }
                }
                _ = sleep_until_opt(disconnected_at.map(|t| t + grace)) => {
                    break LegEnd::PeerFailed(format!("disconnected for {grace:?}"));
                }
                r = &mut reader, if inbound.is_none() => match r {
                    Ok(x) => {
                        inbound = Some(x);
                        break LegEnd::PeerClosed("the caller's audio track ended".into());
                    }
                    Err(e) => {
                        inbound = Some(Default::default());
                        break LegEnd::PeerFailed(format!("reading the caller's audio broke: {e}"));
                    }
                },
            }
        };
        let _ = timeout(GRACE, self.peer.pc.close()).await;
        if !matches!(end, LegEnd::Hangup | LegEnd::CallGone) {
            let _ = timeout(GRACE, self.events.send(LegEvent::Stop(end.stop_reason()))).await;
        }
        let (stats, dropped) = match inbound {
            Some(x) => x,
            None => {
                let abort = reader.abort_handle();
                match timeout(GRACE, reader).await {
                    Ok(Ok(x)) => x,
                    _ => {
                        abort.abort();
                        Default::default()
                    }
                }
            }
        };
        tracing::info!(
            end = %end,
            packets_in = stats.packets,
            lost = stats.lost,
            plc_ms = stats.plc_ms,
            fec_ms = stats.fec_ms,
            packets_out = self.packets_out,
            "WebRTC leg ended"
        );
        LegStats {
            inbound: stats,
            frames_dropped: dropped,
            packets_out: self.packets_out,
            send_errors: self.send_errors,
            clears: self.clears,
            play_to_wire_us: self.play_to_wire_us,
            end,
        }
    }

    async fn play(&mut self, frame: &crate::audio::Frame) {
        let taken = std::time::Instant::now();
        let data = match self.encoder.encode(&frame.samples) {
            Ok(d) => d,
            Err(e) => return self.send_failed(&e.to_string()),
        };
        let mut sample = Sample::new(taken);
        sample.data = data.into();
        sample.duration = Duration::from_millis(u64::from(FRAME_MS));
        let written = self
            .peer
            .track
            .sample_writer(self.peer.ssrc, self.peer.payload_type)
            .write_sample(&sample)
            .await;
        match written {
            Ok(()) => {
                self.packets_out += 1;
                let us = taken.elapsed().as_micros().min(u128::from(u32::MAX)) as u32;
                self.play_to_wire_us.push(us);
            }
            Err(e) => self.send_failed(&e.to_string()),
        }
    }

    fn send_failed(&mut self, why: &str) {
        self.send_errors += 1;
        if self.send_errors <= 10 || self.send_errors.is_multiple_of(500) {
            tracing::warn!(errors = self.send_errors, error = %why, "cannot send agent audio to the browser");
        }
    }
}

async fn sleep_until_opt(at: Option<Instant>) {
    match at {
        Some(at) => sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Resolves when the flag is (or becomes) true; never if its sender is gone while false.
async fn wait_true(w: &mut watch::Receiver<bool>) {
    if w.wait_for(|v| *v).await.is_err() {
        std::future::pending::<()>().await;
    }
}
