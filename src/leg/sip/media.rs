//! The sans-IO core of one SIP call's media: RTP and RTCP datagrams in (with the address they
//! came from and when), the call's 20 ms frames out to the peer, the caller's 20 ms frames to
//! the call on the leg's own clock, keypad tones both ways, and the call's media figures. No
//! sockets, no clock: the shell passes `now` (and the wall clock for RTCP) and carries out
//! [`MediaSession::poll_transmit`].
//!
//! * **Symmetric RTP.** Where packets go and whose are heard is [`super::latch`]'s: the SDP's
//!   own address at once, another source (NAT) after its probation.
//! * **In.** Packets of the negotiated codec are decoded into the [jitter buffer](super::jitter);
//!   at each tick (`start + (n+1)·20 ms`) one frame with `ts = n·20 ms` goes to the call, so the
//!   call sees a continuous timeline whatever the network did. `telephone-event` packets become
//!   one [`LegEvent::Dtmf`] per press and silence (not loss) in the buffer.
//! * **Out.** Each frame the call plays is one packet (20 ms), sequence +1 and timestamp +160 at
//!   8 kHz (+960 for Opus's 48 kHz clock), the marker on the first packet of a spurt; queued
//!   keys replace audio frames with RFC 4733 events (or tones). While the peer holds the call
//!   nothing is sent, but the timestamp keeps running.
//! * **Codecs and rates.** The leg's PCM rate is fixed when the call starts: 8 kHz on G.711,
//!   16 kHz on Opus. Opus decodes to and encodes from that rate (its payloads wait encoded in
//!   the jitter buffer, see [`super::opus`]); G.711 is 8 kHz, resampled when a re-INVITE moved
//!   a 16 kHz call onto it. Keypad events count their durations in the event payload's own
//!   clock (8 kHz beside Opus's 48 kHz) and carry the audio stream's timestamp.
//! * **RTCP.** A compound SR (or RR) with SDES every `rtcp_interval`; the peer's reports give
//!   its view of baton's stream and the round trip.
//! * **Timeout.** No packet at all from a peer that should be sending, for `rtp_timeout`, ends
//!   the call ([`MediaEnd::RtpTimeout`]).

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use super::dtmf::{self, Outgoing, Timing};
use super::jitter::{JitterBuffer, JitterConfig, JitterStats};
use super::latch::{Heard, Peer};
use super::opus::{self, OpusDecoder, OpusOutbound};
use super::rtcp;
use super::rtp::{self, ReceiveStats};
use super::sdp::{Codec, Negotiated};
use crate::audio::resample::StreamResampler;
use crate::audio::{Frame, g711};
use crate::leg::{LegEvent, StopReason};

const TICK: Duration = Duration::from_millis(20);
/// Frames the leg catches up at most after the shell was held up (a longer stall is skipped).
const MAX_CATCH_UP: u32 = 50;
/// RFC 3389 comfort noise: taken as silence.
const PT_CN: u8 = 13;

/// Settings of one call's media.
#[derive(Clone, Debug)]
pub struct MediaConfig {
    pub jitter: JitterConfig,
    /// Latch onto the address the peer's packets come from.
    pub symmetric: bool,
    /// No packet from a sending peer for this long ends the call (zero: never).
    pub rtp_timeout: Duration,
    pub rtcp_interval: Duration,
    /// The SDES CNAME.
    pub cname: String,
    pub dtmf: Timing,
}

impl Default for MediaConfig {
    fn default() -> Self {
        MediaConfig {
            jitter: JitterConfig::default(),
            symmetric: true,
            rtp_timeout: Duration::from_secs(30),
            rtcp_interval: Duration::from_secs(5),
            cname: "baton".into(),
            dtmf: Timing::default(),
        }
    }
}

/// The random starting values of baton's stream (RFC 3550 §5.1), chosen by the shell.
#[derive(Clone, Copy, Debug)]
pub struct StreamStart {
    pub ssrc: u32,
    pub seq: u16,
    pub ts: u32,
}

/// A datagram to send.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transmit {
    pub to: SocketAddr,
    /// RTCP (to the RTCP socket) rather than RTP.
    pub rtcp: bool,
    pub bytes: Vec<u8>,
}

/// Why the media ended the call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MediaEnd {
    /// Nothing from the peer for this long.
    RtpTimeout(Duration),
    /// The signalling ended the call (a BYE, a CANCEL, baton's own hang-up).
    Stopped,
}

impl std::fmt::Display for MediaEnd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MediaEnd::RtpTimeout(d) => write!(f, "no RTP from the peer for {} s", d.as_secs()),
            MediaEnd::Stopped => f.write_str("ended by signalling"),
        }
    }
}

/// One call's media figures.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct MediaStats {
    pub codec: String,
    pub packets_in: u64,
    pub bytes_in: u64,
    pub packets_out: u64,
    pub bytes_out: u64,
    /// Packets expected from the peer and lost on the way (RFC 3550 §6.4.1).
    pub expected: u64,
    pub lost: u64,
    /// Interarrival jitter now and at its highest, in ms (RFC 3550 §6.4.1).
    pub jitter_ms: f64,
    pub max_jitter_ms: f64,
    /// Audio concealed, in ms (Opus: by the decoder's PLC or FEC).
    pub concealed_ms: f64,
    /// Frames baton could not encode (sent as nothing; the timestamp still moves on).
    pub encode_errors: u64,
    /// The jitter buffer's own counts (duplicates, reordered, late, trims, target delay).
    pub buffer: JitterStats,
    /// Datagrams that were not RTP, came from another source, or carried another payload type.
    pub bad_packets: u64,
    pub other_source: u64,
    /// Packets from a source other than the SDP's address while it was on probation (before
    /// [`PROBATION`](super::latch::PROBATION) packets in sequence made it the peer), not heard.
    pub on_probation: u64,
    pub other_payload: u64,
    pub ssrc_changes: u64,
    pub dtmf_in: u64,
    pub dtmf_out: u64,
    pub rtcp_in: u64,
    pub rtcp_out: u64,
    pub bad_rtcp: u64,
    /// The peer's view of baton's stream, from its last report.
    pub peer_lost: Option<u64>,
    pub peer_jitter_ms: Option<f64>,
    pub rtt_ms: Option<f64>,
    /// Where baton's RTP went in the end (the latched address, or the SDP's).
    pub sent_to: Option<SocketAddr>,
    pub latched: bool,
}

/// How the current codec's audio becomes the leg's, and back.
enum Path {
    /// G.711 at 8 kHz, with resamplers when the leg runs at another rate.
    G711 {
        up: Option<Box<StreamResampler>>,
        down: Option<Box<StreamResampler>>,
    },
    Opus(Box<OpusOutbound>),
}

impl std::fmt::Debug for Path {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Path::G711 { up, .. } => write!(f, "G711 {{ resampled: {} }}", up.is_some()),
            Path::Opus(_) => f.write_str("Opus"),
        }
    }
}

/// The codec's path and its jitter buffer for a leg at `rate`. libopus takes every rate a leg
/// runs at (8 or 16 kHz); were it to refuse one, the call would hear silence and send nothing
/// on Opus (counted as encode errors) rather than fail.
fn path_for(codec: Codec, rate: u32, jitter: JitterConfig) -> (Path, JitterBuffer) {
    if codec == Codec::Opus
        && let (Ok(dec), Ok(enc)) = (OpusDecoder::new(rate), opus::encoder(rate))
    {
        let buf = JitterBuffer::encoded(
            JitterConfig { rate, ..jitter },
            opus::RTP_CLOCK / rate,
            Box::new(dec),
        );
        return (Path::Opus(Box::new(enc)), buf);
    }
    let buf = JitterBuffer::new(JitterConfig {
        rate: 8000,
        ..jitter
    });
    let (up, down) = if rate == 8000 {
        (None, None)
    } else {
        (
            StreamResampler::new(8000, rate).ok().map(Box::new),
            StreamResampler::new(rate, 8000).ok().map(Box::new),
        )
    };
    (Path::G711 { up, down }, buf)
}

/// The core.
#[derive(Debug)]
pub struct MediaSession {
    cfg: MediaConfig,
    neg: Negotiated,
    /// The leg's PCM rate (fixed for the call).
    rate: u32,
    frame: usize,
    path: Path,
    /// The jitter figures and concealed ms of the buffers of earlier codecs of this call.
    earlier_buffers: JitterStats,
    earlier_concealed_ms: f64,
    /// Where RTP and RTCP go, and whose packets are heard (symmetric RTP).
    peer: Peer,
    remote_ssrc: Option<u32>,
    recv: ReceiveStats,
    jitter: JitterBuffer,
    dtmf_in: dtmf::Receiver,
    out: rtp::Sender,
    dtmf_out: dtmf::Sender,
    started_at: Instant,
    ticks: u64,
    next_tick: Instant,
    next_rtcp: Instant,
    last_rx: Instant,
    last_sr: Option<(u32, Instant)>,
    packets_at_report: u64,
    was_sending: bool,
    transmits: VecDeque<Transmit>,
    events: VecDeque<LegEvent>,
    stats: MediaStats,
    ended: Option<MediaEnd>,
    pcm: Vec<i16>,
    encoded: Vec<u8>,
}

impl MediaSession {
    /// A session starting its timeline at `now` (the answer).
    pub fn new(cfg: MediaConfig, neg: Negotiated, start: StreamStart, now: Instant) -> Self {
        let rate = neg.codec.leg_rate();
        let (path, jitter) = path_for(neg.codec, rate, cfg.jitter);
        let stats = MediaStats {
            codec: neg.codec.name().to_owned(),
            ..MediaStats::default()
        };
        MediaSession {
            rate,
            frame: crate::audio::frame::samples_per_frame(rate),
            path,
            earlier_buffers: JitterStats::default(),
            earlier_concealed_ms: 0.0,
            peer: Peer::new(cfg.symmetric, neg.remote_rtp, neg.remote_rtcp),
            remote_ssrc: None,
            recv: ReceiveStats::default(),
            jitter,
            dtmf_in: dtmf::Receiver::default(),
            out: rtp::Sender::new(start.ssrc, start.seq, start.ts),
            dtmf_out: dtmf::Sender::new(dtmf_clock(&neg, rate)),
            started_at: now,
            ticks: 0,
            next_tick: now + TICK,
            next_rtcp: now + cfg.rtcp_interval,
            last_rx: now,
            last_sr: None,
            packets_at_report: 0,
            was_sending: neg.sends(),
            transmits: VecDeque::new(),
            events: VecDeque::new(),
            stats,
            ended: None,
            pcm: Vec::with_capacity(960),
            encoded: Vec::with_capacity(960),
            cfg,
            neg,
        }
    }

    /// The leg's PCM rate.
    pub fn rate(&self) -> u32 {
        self.rate
    }

    /// The media as now negotiated.
    pub fn negotiated(&self) -> &Negotiated {
        &self.neg
    }

    /// A re-INVITE changed the media: a new address unlatches, a new codec or payload type
    /// restarts the receive side, hold stops (and unhold resumes) sending.
    pub fn update(&mut self, neg: Negotiated, now: Instant) {
        self.peer.renegotiated(neg.remote_rtp, neg.remote_rtcp);
        if neg.codec != self.neg.codec {
            let (path, jitter) = path_for(neg.codec, self.rate, self.cfg.jitter);
            let old = std::mem::replace(&mut self.jitter, jitter);
            self.earlier_buffers.absorb(old.stats());
            self.earlier_concealed_ms += concealed_ms(&old);
            self.path = path;
            self.recv.new_clock();
            self.out.new_spurt();
            self.stats.codec = neg.codec.name().to_owned();
        } else if neg.pt != self.neg.pt {
            self.jitter.restart();
        }
        self.dtmf_out.set_rate(dtmf_clock(&neg, self.rate));
        if neg.sends() && !self.was_sending {
            self.out.new_spurt();
        }
        self.was_sending = neg.sends();
        self.last_rx = now;
        self.neg = neg;
    }

    /// One RTP datagram from `from`.
    pub fn handle_rtp(&mut self, datagram: &[u8], from: SocketAddr, now: Instant) {
        let p = match rtp::parse(datagram) {
            Ok(p) => p,
            Err(_) => {
                self.stats.bad_packets += 1;
                return;
            }
        };
        match self.peer.on_rtp(from, p.ssrc, p.seq, now) {
            Heard::Yes => {}
            Heard::OnProbation => {
                self.stats.on_probation += 1;
                return;
            }
            Heard::OtherSource => {
                self.stats.other_source += 1;
                return;
            }
        }
        self.last_rx = now;
        if self.remote_ssrc != Some(p.ssrc) {
            if self.remote_ssrc.is_some() {
                self.stats.ssrc_changes += 1;
                self.recv = ReceiveStats::default();
                self.jitter.restart();
            }
            self.remote_ssrc = Some(p.ssrc);
        }
        if !self.recv.on_packet(p.seq) {
            return;
        }
        self.stats.packets_in += 1;
        self.stats.bytes_in += p.payload.len() as u64;
        if p.pt == self.neg.pt {
            let clock = self.neg.codec.clock_rate();
            let arrival = (now - self.started_at).as_micros() as i64 * i64::from(clock) / 1_000_000;
            self.recv.on_transit(arrival, p.ts);
            let j = self.recv.jitter();
            self.jitter.set_jitter(j);
            let ms = f64::from(j) * 1000.0 / f64::from(clock);
            self.stats.jitter_ms = ms;
            self.stats.max_jitter_ms = self.stats.max_jitter_ms.max(ms);
            match self.neg.codec {
                Codec::Pcmu | Codec::Pcma => {
                    self.pcm.clear();
                    if self.neg.codec == Codec::Pcmu {
                        g711::decode_ulaw(&p.payload, &mut self.pcm);
                    } else {
                        g711::decode_alaw(&p.payload, &mut self.pcm);
                    }
                    self.jitter.push(p.ts, std::mem::take(&mut self.pcm), now);
                }
                Codec::Opus => self.jitter.push_encoded(p.ts, p.payload, now),
            }
        } else if Some(p.pt) == self.neg.dtmf_pt {
            match dtmf::parse_event(&p.payload) {
                Ok(e) => {
                    // The event's duration is in its own clock; the buffer counts its samples.
                    let buf_rate = u64::from(self.jitter.rate());
                    let frame = (buf_rate / 50) as u32;
                    let held =
                        u64::from(e.duration) * buf_rate / u64::from(self.neg.dtmf_rate.max(1));
                    let held = u32::try_from(held).unwrap_or(u32::MAX);
                    self.jitter.silent(p.ts, held.max(frame) + frame);
                    if let Some(digit) = self.dtmf_in.on_packet(p.ts, &e) {
                        self.stats.dtmf_in += 1;
                        self.events.push_back(LegEvent::Dtmf { digit });
                    }
                }
                Err(_) => self.stats.bad_packets += 1,
            }
        } else if p.pt != PT_CN {
            self.stats.other_payload += 1;
        }
    }

    /// One RTCP datagram from `from`; `wall` is the wall clock now (for the round trip).
    pub fn handle_rtcp(
        &mut self,
        datagram: &[u8],
        from: SocketAddr,
        now: Instant,
        wall: SystemTime,
    ) {
        let Ok(inc) = rtcp::parse(datagram, self.out.ssrc) else {
            self.stats.bad_rtcp += 1;
            return;
        };
        self.peer.on_rtcp(from);
        self.stats.rtcp_in += 1;
        if let Some((_, mid)) = inc.sender {
            self.last_sr = Some((mid, now));
        }
        if let Some(b) = inc.about_us {
            self.stats.peer_lost = Some(u64::from(b.cumulative_lost));
            self.stats.peer_jitter_ms =
                Some(f64::from(b.jitter) * 1000.0 / f64::from(self.neg.codec.clock_rate()));
            if let Some(rtt) = rtcp::round_trip(&b, wall) {
                self.stats.rtt_ms = Some(rtt.as_secs_f64() * 1000.0);
            }
        }
    }

    /// Plays one of the call's frames to the peer.
    pub fn play(&mut self, frame: &Frame) {
        let events = self.neg.dtmf_pt.is_some();
        // Event timestamps run on the audio's RTP clock; their offsets come in the event's.
        let clock = u64::from(self.neg.codec.clock_rate());
        let event_clock = u64::from(dtmf_clock(&self.neg, self.rate));
        let to_rtp = |offset: u32| (u64::from(offset) * clock / event_clock.max(1)) as u32;
        let to_leg =
            |offset: u32| (u64::from(offset) * u64::from(self.rate) / event_clock.max(1)) as u32;
        let (pt, ts, marker) = match self.dtmf_out.next_frame(events) {
            Outgoing::Audio => {
                self.encode(&frame.samples);
                (self.neg.pt, self.out.ts, false)
            }
            Outgoing::Silence => {
                let quiet = vec![0i16; self.frame];
                self.encode(&quiet);
                (self.neg.pt, self.out.ts, false)
            }
            Outgoing::Tone { code, offset } => {
                let mut pcm = vec![0i16; self.frame];
                dtmf::tone(code, self.rate, to_leg(offset), &mut pcm);
                self.encode(&pcm);
                (self.neg.pt, self.out.ts, false)
            }
            Outgoing::Event {
                event,
                start,
                ts_offset,
            } => {
                self.encoded.clear();
                self.encoded.extend_from_slice(&dtmf::event_payload(event));
                (
                    self.neg.dtmf_pt.unwrap_or(self.neg.pt),
                    self.out.ts.wrapping_sub(to_rtp(ts_offset)),
                    start,
                )
            }
        };
        self.stats.dtmf_out = self.dtmf_out.sent;
        if self.neg.sends() && !self.encoded.is_empty() {
            let bytes = self.out.packet(pt, ts, marker, &self.encoded);
            self.stats.packets_out += 1;
            self.stats.bytes_out += self.encoded.len() as u64;
            self.transmits.push_back(Transmit {
                to: self.peer.rtp_to(),
                rtcp: false,
                bytes,
            });
        }
        self.out.ts = self.out.ts.wrapping_add(self.neg.codec.clock_rate() / 50);
    }

    fn encode(&mut self, pcm: &[i16]) {
        self.encoded.clear();
        match (&mut self.path, self.neg.codec) {
            (Path::Opus(enc), Codec::Opus) => match enc.encode(pcm) {
                Ok(bytes) => self.encoded = bytes,
                Err(_) => self.stats.encode_errors += 1,
            },
            (Path::Opus(_), _) | (Path::G711 { .. }, Codec::Opus) => {
                self.stats.encode_errors += 1;
            }
            (Path::G711 { down, .. }, _) => {
                let narrow;
                let pcm = match down {
                    Some(r) => {
                        let mut out = Vec::with_capacity(160);
                        r.process(pcm, &mut out);
                        out.resize(160, 0);
                        narrow = out;
                        &narrow[..]
                    }
                    None => pcm,
                };
                if self.neg.codec == Codec::Pcma {
                    g711::encode_alaw(pcm, &mut self.encoded);
                } else {
                    g711::encode_ulaw(pcm, &mut self.encoded);
                }
            }
        }
    }

    /// Queues keys to press (`0-9 * # A-D`, `,` a 500 ms pause, `w` a 1 s wait); the number of
    /// keys, or the first character that is not one.
    pub fn send_dtmf(&mut self, digits: &str, timing: Option<Timing>) -> Result<usize, char> {
        self.dtmf_out.queue(digits, timing.unwrap_or(self.cfg.dtmf))
    }

    /// Whether keys are still being sent.
    pub fn sending_dtmf(&self) -> bool {
        self.dtmf_out.busy()
    }

    /// The signalling ended the call, for this reason.
    pub fn stop(&mut self, why: StopReason) {
        if self.ended.is_none() {
            self.ended = Some(MediaEnd::Stopped);
            self.events.push_back(LegEvent::Stop(why));
        }
    }

    /// A digit that came by SIP INFO.
    pub fn dtmf_from_signalling(&mut self, digit: char) {
        self.stats.dtmf_in += 1;
        self.events.push_back(LegEvent::Dtmf { digit });
    }

    /// When [`handle_timeout`](Self::handle_timeout) is next due.
    pub fn poll_timeout(&self) -> Instant {
        let mut t = self.next_tick.min(self.next_rtcp);
        if let Some(d) = self.rtp_deadline() {
            t = t.min(d);
        }
        t
    }

    fn rtp_deadline(&self) -> Option<Instant> {
        let expecting = self.neg.direction.receives() && self.ended.is_none();
        (expecting && !self.cfg.rtp_timeout.is_zero()).then(|| self.last_rx + self.cfg.rtp_timeout)
    }

    /// Runs whatever is due at `now`: the frame ticks, the RTCP report, the RTP timeout.
    pub fn handle_timeout(&mut self, now: Instant, wall: SystemTime) {
        if self.ended.is_some() {
            return;
        }
        let mut caught_up = 0;
        while self.next_tick <= now {
            if caught_up == MAX_CATCH_UP {
                // Held up for over a second: skip ahead rather than flood the call.
                let behind = (now - self.next_tick).as_millis() / TICK.as_millis();
                self.ticks += behind as u64;
                self.next_tick += TICK * behind as u32;
            }
            self.tick();
            caught_up += 1;
        }
        if now >= self.next_rtcp {
            self.report(now, wall);
            self.next_rtcp = now + self.cfg.rtcp_interval;
        }
        if let Some(d) = self.rtp_deadline()
            && now >= d
        {
            let end = MediaEnd::RtpTimeout(self.cfg.rtp_timeout);
            self.events
                .push_back(LegEvent::Stop(StopReason::Failed(end.to_string())));
            self.ended = Some(end);
        }
    }

    fn tick(&mut self) {
        let mut p = self.jitter.pop();
        if let Path::G711 { up: Some(r), .. } = &mut self.path {
            let mut wide = Vec::with_capacity(self.frame);
            r.process(&p.samples, &mut wide);
            wide.resize(self.frame, 0);
            p.samples = wide;
        }
        let ts = TICK * self.ticks as u32;
        let received_at = p.arrived.unwrap_or(self.next_tick);
        self.ticks += 1;
        self.next_tick += TICK;
        self.events.push_back(LegEvent::Frame {
            frame: Frame {
                rate: self.rate,
                ts,
                samples: p.samples,
            },
            received_at,
        });
    }

    fn report(&mut self, now: Instant, wall: SystemTime) {
        let sender = (self.out.packets > self.packets_at_report).then(|| rtcp::SenderInfo {
            ntp: rtcp::ntp(wall),
            rtp_ts: self.out.ts,
            packets: self.out.packets as u32,
            octets: self.out.octets as u32,
        });
        self.packets_at_report = self.out.packets;
        let block = match (self.remote_ssrc, self.recv.started()) {
            (Some(ssrc), true) => {
                let (lsr, dlsr) = match self.last_sr {
                    Some((mid, at)) => {
                        let d = now.saturating_duration_since(at);
                        (mid, (d.as_micros() * 65_536 / 1_000_000) as u32)
                    }
                    None => (0, 0),
                };
                Some(rtcp::Block {
                    ssrc,
                    fraction_lost: self.recv.fraction_lost(),
                    cumulative_lost: u32::try_from(self.recv.lost()).unwrap_or(u32::MAX),
                    extended_max: self.recv.extended_max(),
                    jitter: self.recv.jitter(),
                    lsr,
                    dlsr,
                })
            }
            _ => None,
        };
        if !self.neg.sends() && self.neg.remote_rtp.ip().is_unspecified() {
            return;
        }
        let bytes = rtcp::report(self.out.ssrc, sender, block, &self.cfg.cname);
        self.stats.rtcp_out += 1;
        self.transmits.push_back(Transmit {
            to: self.peer.rtcp_to(),
            rtcp: true,
            bytes,
        });
    }

    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        self.transmits.pop_front()
    }

    pub fn poll_event(&mut self) -> Option<LegEvent> {
        self.events.pop_front()
    }

    pub fn ended(&self) -> Option<&MediaEnd> {
        self.ended.as_ref()
    }

    /// When the timeline started (frame `ts` zero).
    pub fn started_at(&self) -> Instant {
        self.started_at
    }

    /// The call's media figures so far.
    pub fn stats(&self) -> MediaStats {
        let mut s = self.stats.clone();
        s.expected = self.recv.expected();
        s.lost = self.recv.lost();
        s.buffer = self.jitter.stats().clone();
        s.buffer.absorb(&self.earlier_buffers);
        s.concealed_ms = self.earlier_concealed_ms + concealed_ms(&self.jitter);
        s.sent_to = Some(self.peer.rtp_to());
        s.latched = self.peer.latched();
        s
    }
}

fn concealed_ms(buffer: &JitterBuffer) -> f64 {
    buffer.stats().concealed_samples as f64 * 1000.0 / f64::from(buffer.rate())
}

/// The clock keypad durations count in: the event payload's, or the leg's for tones.
fn dtmf_clock(neg: &Negotiated, leg_rate: u32) -> u32 {
    if neg.dtmf_pt.is_some() {
        neg.dtmf_rate
    } else {
        leg_rate
    }
}

#[cfg(test)]
#[path = "media_tests.rs"]
mod tests;
