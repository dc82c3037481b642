//! Symmetric RTP, sans-IO: where one call's RTP and RTCP go and whose packets are heard. Until
//! the peer is known baton sends where the SDP says. The SDP's own address is the peer from its
//! first packet. Another address (a caller behind NAT) is the peer once it has sent
//! [`PROBATION`] packets of one stream in sequence, each source kept on probation apart (a few
//! at a time), so a stray or sprayed packet takes nothing and does not hold back the caller's
//! own stream. The SDP's own address still wins if it sends within [`TAKEOVER`] of such a latch
//! (RTP an earlier call's peer still sends to the port gives way to it), and nothing else is
//! heard after that (RTCP then goes to the SDP's RTCP address). Later, a packet from the SDP's
//! address cannot take a NAT'd caller's media away. RTCP latches on its own port's first packet
//! from the RTP peer's host. Without symmetric RTP, only the SDP's host is heard.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::time::Instant;

/// What symmetric RTP has latched onto.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Latch {
    /// Nothing yet: baton sends where the SDP says (other sources may be on probation).
    None,
    /// Another source than the SDP's address, learned at this instant after its probation (a
    /// peer behind NAT, or a stray stream): the SDP's own address may still take over within
    /// [`TAKEOVER`] of it.
    Learned(Instant),
    /// The SDP's own address: final until a re-INVITE moves it.
    Sdp,
}

/// Packets in sequence a source other than the SDP's address must send before baton takes it
/// for the peer (a caller behind NAT): a stray or forged packet sprayed at the port cannot
/// take the call's media (and with it what the agent says) on its own. As RFC 3550's source
/// probation and Asterisk's `strictrtp` learning do; the first `PROBATION - 1` packets of a
/// NAT'd caller (40 ms) are not heard.
pub const PROBATION: u8 = 3;

/// How long after the first source is learned the SDP's own address may still take over: a
/// caller sends from it within moments of the answer, while a stray stream is there from the
/// start. Later, a packet from the SDP's address cannot take a NAT'd caller's media away.
pub const TAKEOVER: Duration = Duration::from_secs(2);

/// A source on probation: one stream (address and SSRC) that has sent `count` packets in
/// sequence, `next` the sequence number expected of it.
#[derive(Clone, Copy, Debug)]
struct Candidate {
    from: SocketAddr,
    ssrc: u32,
    next: u16,
    count: u8,
    last: Instant,
}

/// Sources kept on probation at once; a new one replaces the one heard from longest ago.
const CANDIDATES: usize = 4;

/// What symmetric RTP makes of one packet.
pub enum Heard {
    /// The peer's: heard.
    Yes,
    /// From a source on probation: not heard yet.
    OnProbation,
    /// From another source than the one latched: dropped.
    OtherSource,
}

/// One address, however a dual-stack socket reported it (an IPv4 peer as `::ffff:a.b.c.d`).
fn same(a: SocketAddr, b: SocketAddr) -> bool {
    a.ip().to_canonical() == b.ip().to_canonical() && a.port() == b.port()
}

/// One call's RTP peer as symmetric RTP sees it.
#[derive(Debug)]
pub struct Peer {
    symmetric: bool,
    /// The addresses the SDP gives, as last negotiated.
    sdp_rtp: SocketAddr,
    sdp_rtcp: SocketAddr,
    rtp_to: SocketAddr,
    rtcp_to: SocketAddr,
    latch: Latch,
    /// Sources on probation while nothing is latched.
    candidates: Vec<Candidate>,
    rtcp_latched: bool,
}

impl Peer {
    /// A peer at the SDP's `rtp` and `rtcp` addresses; `symmetric`: follow where packets come
    /// from (else only the SDP's host is heard, and nothing moves).
    pub fn new(symmetric: bool, rtp: SocketAddr, rtcp: SocketAddr) -> Self {
        Peer {
            symmetric,
            sdp_rtp: rtp,
            sdp_rtcp: rtcp,
            rtp_to: rtp,
            rtcp_to: rtcp,
            latch: Latch::None,
            candidates: Vec::new(),
            rtcp_latched: false,
        }
    }

    /// A re-INVITE's addresses: a new (specified) RTP address unlatches and is sent to.
    pub fn renegotiated(&mut self, rtp: SocketAddr, rtcp: SocketAddr) {
        if rtp != self.sdp_rtp && !rtp.ip().is_unspecified() {
            self.rtp_to = rtp;
            self.rtcp_to = rtcp;
            self.latch = Latch::None;
            self.candidates.clear();
            self.rtcp_latched = false;
        }
        self.sdp_rtp = rtp;
        self.sdp_rtcp = rtcp;
    }

    /// Where RTP goes.
    pub fn rtp_to(&self) -> SocketAddr {
        self.rtp_to
    }

    /// Where RTCP goes.
    pub fn rtcp_to(&self) -> SocketAddr {
        self.rtcp_to
    }

    /// The peer is known (the SDP's address sent, or another source passed its probation).
    pub fn latched(&self) -> bool {
        self.latch != Latch::None
    }

    /// Whether an RTP packet (`ssrc`, `seq`) from `from` is the peer's, latching as it goes.
    pub fn on_rtp(&mut self, from: SocketAddr, ssrc: u32, seq: u16, now: Instant) -> Heard {
        if self.symmetric {
            self.latch(from, ssrc, seq, now)
        } else if from.ip() != self.rtp_to.ip() {
            Heard::OtherSource
        } else {
            Heard::Yes
        }
    }

    /// An RTCP packet from `from`: RTCP follows the RTP peer's host — the SDP's own before
    /// anything is latched, the learned source's after (RTCP from anywhere else is read, not
    /// answered to).
    pub fn on_rtcp(&mut self, from: SocketAddr) {
        if self.symmetric && !self.rtcp_latched {
            let peer = match self.latch {
                Latch::None => self.sdp_rtp,
                Latch::Learned(_) | Latch::Sdp => self.rtp_to,
            };
            if from.ip().to_canonical() == peer.ip().to_canonical() {
                self.rtcp_to = from;
                self.rtcp_latched = true;
            }
        }
    }

    /// Symmetric RTP: whether a packet (`ssrc`, `seq`) from `from` is the peer's, latching as
    /// it goes. The SDP's own address is taken at its first packet. Another source (a caller
    /// behind NAT) is taken once its stream has sent [`PROBATION`] packets in sequence before
    /// the SDP's address sent anything; the SDP's address still takes over from it for good if
    /// it sends within [`TAKEOVER`] of that (a stray stream from an earlier call on the port).
    fn latch(&mut self, from: SocketAddr, ssrc: u32, seq: u16, now: Instant) -> Heard {
        let sdp = self.sdp_rtp;
        match self.latch {
            Latch::Sdp | Latch::Learned(_) if same(from, self.rtp_to) => Heard::Yes,
            Latch::Sdp => Heard::OtherSource,
            Latch::Learned(at)
                if same(from, sdp) && now.saturating_duration_since(at) <= TAKEOVER =>
            {
                tracing::debug!(was = %self.rtp_to, now = %sdp, "RTP from the SDP's address: latched onto it");
                self.take_sdp();
                Heard::Yes
            }
            Latch::Learned(_) => Heard::OtherSource,
            Latch::None if same(from, sdp) => {
                self.candidates.clear();
                self.take_sdp();
                Heard::Yes
            }
            Latch::None => {
                if self.on_probation(from, ssrc, seq, now) < PROBATION {
                    return Heard::OnProbation;
                }
                tracing::debug!(sdp = %sdp, now = %from, "RTP from another address than the SDP's: latched onto it");
                self.candidates.clear();
                self.rtp_to = from;
                self.latch = Latch::Learned(now);
                if !self.rtcp_latched {
                    self.rtcp_to = SocketAddr::new(from.ip(), self.rtcp_to.port());
                }
                Heard::Yes
            }
        }
    }

    /// Counts a packet of a source on probation: how many packets its stream has now sent in
    /// sequence (1 for a new stream, or one that broke its sequence).
    fn on_probation(&mut self, from: SocketAddr, ssrc: u32, seq: u16, now: Instant) -> u8 {
        let fresh = Candidate {
            from,
            ssrc,
            next: seq.wrapping_add(1),
            count: 1,
            last: now,
        };
        if let Some(c) = self
            .candidates
            .iter_mut()
            .find(|c| same(c.from, from) && c.ssrc == ssrc)
        {
            let count = if seq == c.next { c.count + 1 } else { 1 };
            *c = Candidate { count, ..fresh };
            return count;
        }
        if self.candidates.len() < CANDIDATES {
            self.candidates.push(fresh);
        } else if let Some(oldest) = self.candidates.iter_mut().min_by_key(|c| c.last) {
            *oldest = fresh;
        }
        1
    }

    /// Latches for good onto the SDP's own address; RTCP goes to the SDP's RTCP address too
    /// (whatever RTCP latched onto before came from elsewhere).
    fn take_sdp(&mut self) {
        self.rtp_to = self.sdp_rtp;
        self.latch = Latch::Sdp;
        if !self.rtcp_latched || self.rtcp_to.ip() != self.rtp_to.ip() {
            self.rtcp_to = self.sdp_rtcp;
            self.rtcp_latched = true;
        }
    }
}
