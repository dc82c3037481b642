//! RTP packets on a SIP call (RFC 3550): reading a datagram into what the leg needs, writing
//! baton's packets (sequence, timestamp, SSRC, marker), and the receive statistics RFC 3550
//! defines (extended highest sequence, expected and lost packets, interarrival jitter). The
//! header layout is the `rtc` stack's; the rules are here.

use bytes::Bytes;
use rtc::shared::marshal::{Marshal, Unmarshal};

/// Largest RTP datagram read (a 20 ms G.711 packet is 172 bytes; Opus at most ~1.3 KB).
pub const MAX_DATAGRAM: usize = 1500;

/// The parts of an RTP packet the leg uses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Packet {
    pub pt: u8,
    pub marker: bool,
    pub seq: u16,
    pub ts: u32,
    pub ssrc: u32,
    /// The payload, padding removed.
    pub payload: Bytes,
}

/// A datagram that is not an RTP packet baton can use.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RtpError {
    #[error("{0} bytes is shorter than an RTP header (12 bytes)")]
    Short(usize),
    #[error("{0} bytes is over the {MAX_DATAGRAM}-byte datagram limit")]
    TooLarge(usize),
    #[error("RTP version {0}, not 2")]
    Version(u8),
    #[error("payload type {0} is an RTCP packet type (RTCP sent to the RTP port)")]
    Rtcp(u8),
    #[error("the RTP header is malformed: {0}")]
    Header(String),
}

/// Reads one RTP datagram.
pub fn parse(datagram: &[u8]) -> Result<Packet, RtpError> {
    if datagram.len() > MAX_DATAGRAM {
        return Err(RtpError::TooLarge(datagram.len()));
    }
    if datagram.len() < 12 {
        return Err(RtpError::Short(datagram.len()));
    }
    let version = datagram[0] >> 6;
    if version != 2 {
        return Err(RtpError::Version(version));
    }
    // RFC 5761 §4: second bytes 192–223 are RTCP packet types (200 SR, 201 RR, …).
    if (192..=223).contains(&datagram[1]) {
        return Err(RtpError::Rtcp(datagram[1]));
    }
    let mut buf = datagram;
    let p = rtc::rtp::packet::Packet::unmarshal(&mut buf)
        .map_err(|e| RtpError::Header(e.to_string()))?;
    Ok(Packet {
        pt: p.header.payload_type,
        marker: p.header.marker,
        seq: p.header.sequence_number,
        ts: p.header.timestamp,
        ssrc: p.header.ssrc,
        payload: p.payload,
    })
}

/// baton's outgoing stream: one SSRC, a sequence number +1 per packet and a timestamp in the
/// codec's clock, both starting at random values.
#[derive(Clone, Debug)]
pub struct Sender {
    pub ssrc: u32,
    seq: u16,
    /// The RTP timestamp of the next audio frame.
    pub ts: u32,
    /// The next audio packet starts a talk spurt.
    marker: bool,
    pub packets: u64,
    pub octets: u64,
}

impl Sender {
    /// A stream with these random starting values.
    pub fn new(ssrc: u32, seq: u16, ts: u32) -> Sender {
        Sender {
            ssrc,
            seq,
            ts,
            marker: true,
            packets: 0,
            octets: 0,
        }
    }

    /// The next packet: `payload` on `pt` at timestamp `ts`; `marker` forced or the talk-spurt
    /// flag.
    pub fn packet(&mut self, pt: u8, ts: u32, marker: bool, payload: &[u8]) -> Vec<u8> {
        let p = rtc::rtp::packet::Packet {
            header: rtc::rtp::header::Header {
                version: 2,
                marker: marker || std::mem::take(&mut self.marker),
                payload_type: pt,
                sequence_number: self.seq,
                timestamp: ts,
                ssrc: self.ssrc,
                ..Default::default()
            },
            payload: Bytes::copy_from_slice(payload),
        };
        self.seq = self.seq.wrapping_add(1);
        self.packets += 1;
        self.octets += payload.len() as u64;
        // A header with no CSRC and no extension always fits.
        p.marshal().map(|b| b.to_vec()).unwrap_or_default()
    }

    /// The next audio packet starts a new talk spurt (after hold, or a DTMF event).
    pub fn new_spurt(&mut self) {
        self.marker = true;
    }
}

/// RFC 3550 receive statistics of one source (appendix A.1, A.3, A.8).
#[derive(Clone, Debug, Default)]
pub struct ReceiveStats {
    started: bool,
    base_seq: u32,
    max_seq: u16,
    cycles: u32,
    /// Packets received (duplicates included, as RFC 3550 counts them).
    pub received: u64,
    expected_prior: u64,
    received_prior: u64,
    /// Interarrival jitter in timestamp units, scaled by 16 (RFC 3550 A.8).
    jitter_q4: u64,
    last_transit: Option<i64>,
    /// After a jump, the sequence number that would confirm the source restarted.
    bad_seq: Option<u16>,
}

impl ReceiveStats {
    /// Counts a packet with sequence `seq`; returns `false` when it is far from the others and
    /// not counted. A second packet right after such a jump confirms the source restarted its
    /// sequence, and the statistics start again there (RFC 3550 A.1).
    pub fn on_packet(&mut self, seq: u16) -> bool {
        const MAX_DROPOUT: u16 = 3000;
        const MAX_MISORDER: u16 = 100;
        self.received += 1;
        if !self.started {
            self.started = true;
            self.base_seq = u32::from(seq);
            self.max_seq = seq;
            return true;
        }
        let udelta = seq.wrapping_sub(self.max_seq);
        if udelta < MAX_DROPOUT {
            if seq < self.max_seq {
                self.cycles += 1 << 16;
            }
            self.max_seq = seq;
            true
        } else if udelta <= u16::MAX - MAX_MISORDER {
            if self.bad_seq == Some(seq) {
                *self = ReceiveStats {
                    jitter_q4: self.jitter_q4,
                    ..ReceiveStats::default()
                };
                self.on_packet(seq)
            } else {
                self.received -= 1;
                self.bad_seq = Some(seq.wrapping_add(1));
                false
            }
        } else {
            // Late or duplicate within the misorder window.
            true
        }
    }

    /// Folds one packet's transit time into the jitter: `arrival` and `ts` both in timestamp
    /// units.
    pub fn on_transit(&mut self, arrival: i64, ts: u32) {
        let transit = arrival.wrapping_sub(i64::from(ts));
        if let Some(last) = self.last_transit {
            let d = (transit - last).unsigned_abs();
            // J += (|D| - J) / 16, in Q4 as appendix A.8 does it.
            self.jitter_q4 = self.jitter_q4 + d - ((self.jitter_q4 + 8) >> 4);
        }
        self.last_transit = Some(transit);
    }

    /// The stream moved to a codec with another RTP clock: transit times start again (the
    /// jitter estimate is not carried across clocks).
    pub fn new_clock(&mut self) {
        self.last_transit = None;
        self.jitter_q4 = 0;
    }

    /// The extended highest sequence number received.
    pub fn extended_max(&self) -> u32 {
        self.cycles.wrapping_add(u32::from(self.max_seq))
    }

    /// Packets expected so far.
    pub fn expected(&self) -> u64 {
        if !self.started {
            return 0;
        }
        u64::from(self.extended_max().wrapping_sub(self.base_seq)) + 1
    }

    /// Cumulative packets lost (may be negative with duplicates; clamped at 0).
    pub fn lost(&self) -> u64 {
        self.expected().saturating_sub(self.received)
    }

    /// Interarrival jitter in timestamp units.
    pub fn jitter(&self) -> u32 {
        u32::try_from(self.jitter_q4 >> 4).unwrap_or(u32::MAX)
    }

    /// The fraction lost since the last call, in 1/256 (for a reception report), and moves the
    /// interval on.
    pub fn fraction_lost(&mut self) -> u8 {
        let expected = self.expected();
        let interval_expected = expected.saturating_sub(self.expected_prior);
        let interval_received = self.received.saturating_sub(self.received_prior);
        self.expected_prior = expected;
        self.received_prior = self.received;
        let lost = interval_expected.saturating_sub(interval_received);
        if interval_expected == 0 || lost == 0 {
            0
        } else {
            u8::try_from((lost << 8) / interval_expected).unwrap_or(u8::MAX)
        }
    }

    /// Whether any packet has been counted.
    pub fn started(&self) -> bool {
        self.started
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_packet_round_trips() {
        let mut s = Sender::new(0xdead_beef, 65535, 1000);
        let a = s.packet(0, 1000, false, &[0xff; 160]);
        let b = s.packet(0, 1160, false, &[0x7f; 160]);
        assert_eq!(a.len(), 172);
        let pa = parse(&a).unwrap();
        let pb = parse(&b).unwrap();
        assert!(pa.marker, "the first packet starts a talk spurt");
        assert!(!pb.marker);
        assert_eq!((pa.seq, pb.seq), (65535, 0));
        assert_eq!((pa.ts, pb.ts, pb.ssrc), (1000, 1160, 0xdead_beef));
        assert_eq!(pb.payload.len(), 160);
        assert_eq!((s.packets, s.octets), (2, 320));
    }

    #[test]
    fn garbage_is_refused_with_a_reason() {
        assert_eq!(parse(&[0x80; 5]), Err(RtpError::Short(5)));
        assert_eq!(parse(&[0x40; 20]), Err(RtpError::Version(1)));
        let mut rr = vec![0x81, 201, 0, 7];
        rr.extend([0; 28]);
        assert_eq!(parse(&rr), Err(RtpError::Rtcp(201)));
        // Padding longer than the payload.
        let mut p = Sender::new(1, 1, 1).packet(0, 0, false, &[1, 2]);
        p[0] |= 0x20;
        *p.last_mut().unwrap() = 9;
        assert!(matches!(parse(&p), Err(RtpError::Header(_))));
        // CSRC count beyond the datagram.
        let mut p = Sender::new(1, 1, 1).packet(0, 0, false, &[]);
        p[0] |= 0x0f;
        assert!(matches!(parse(&p), Err(RtpError::Header(_))));
    }

    #[test]
    fn loss_wrap_and_reorder_are_counted_as_rfc_3550_does() {
        let mut r = ReceiveStats::default();
        for seq in [65533u16, 65534, 0, 2, 1, 5] {
            assert!(r.on_packet(seq));
        }
        // 65533 ..= 65541 (5 after the wrap): 9 expected, 6 received.
        assert_eq!(r.extended_max(), 65536 + 5);
        assert_eq!(r.expected(), 9);
        assert_eq!(r.lost(), 3);
        assert_eq!(r.fraction_lost(), 85, "3 of 9 in 1/256");
        assert_eq!(r.fraction_lost(), 0, "nothing new since");
        // One packet far away is not counted; a second right after it is a restart.
        assert!(!r.on_packet(30_000));
        assert_eq!(r.expected(), 9);
        assert!(r.on_packet(30_001));
        assert_eq!((r.expected(), r.lost()), (1, 0));
    }

    #[test]
    fn steady_arrivals_have_no_jitter_and_a_late_one_shows() {
        let mut r = ReceiveStats::default();
        for i in 0..50i64 {
            r.on_transit(5000 + i * 160, (i * 160) as u32);
        }
        assert_eq!(r.jitter(), 0);
        r.on_transit(5000 + 50 * 160 + 80, 50 * 160);
        assert_eq!(r.jitter(), 5, "80 / 16");
    }
}
