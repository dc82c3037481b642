//! RTCP on a SIP call (RFC 3550 §6): baton's sender and receiver reports (with an SDES CNAME,
//! as every compound packet must carry), and what the peer's reports say — its sender-report
//! time for baton's LSR/DLSR, and its view of baton's stream (loss, jitter, round trip). The
//! packet layouts are the `rtc` stack's.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use rtc::rtcp::receiver_report::ReceiverReport;
use rtc::rtcp::reception_report::ReceptionReport;
use rtc::rtcp::sender_report::SenderReport;
use rtc::rtcp::source_description::{
    SdesType, SourceDescription, SourceDescriptionChunk, SourceDescriptionItem,
};

/// Largest RTCP datagram read.
pub const MAX_DATAGRAM: usize = 1500;
/// Seconds between 1900 (NTP's epoch) and 1970.
const NTP_UNIX_OFFSET: u64 = 2_208_988_800;

/// A wall-clock time as a 64-bit NTP timestamp.
pub fn ntp(now: SystemTime) -> u64 {
    let d = now.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs() + NTP_UNIX_OFFSET;
    let frac = (u64::from(d.subsec_nanos()) << 32) / 1_000_000_000;
    (secs << 32) | frac
}

/// The middle 32 bits of an NTP timestamp (what LSR carries).
pub fn ntp_middle(ntp: u64) -> u32 {
    (ntp >> 16) as u32
}

/// A reception report about the peer's stream.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Block {
    pub ssrc: u32,
    pub fraction_lost: u8,
    pub cumulative_lost: u32,
    pub extended_max: u32,
    pub jitter: u32,
    /// Middle bits of the peer's last SR time, and the delay since it (1/65536 s).
    pub lsr: u32,
    pub dlsr: u32,
}

impl From<Block> for ReceptionReport {
    fn from(b: Block) -> Self {
        ReceptionReport {
            ssrc: b.ssrc,
            fraction_lost: b.fraction_lost,
            total_lost: b.cumulative_lost.min(0x7f_ffff),
            last_sequence_number: b.extended_max,
            jitter: b.jitter,
            last_sender_report: b.lsr,
            delay: b.dlsr,
        }
    }
}

/// What baton's own stream has sent.
#[derive(Clone, Copy, Debug)]
pub struct SenderInfo {
    pub ntp: u64,
    pub rtp_ts: u32,
    pub packets: u32,
    pub octets: u32,
}

/// baton's compound report: an SR when it has sent since the last report (else an RR), with a
/// block about the peer's stream once it has one, then SDES with `cname`.
pub fn report(ssrc: u32, sender: Option<SenderInfo>, block: Option<Block>, cname: &str) -> Vec<u8> {
    let reports: Vec<ReceptionReport> = block.into_iter().map(Into::into).collect();
    let first: Box<dyn rtc::rtcp::packet::Packet> = match sender {
        Some(s) => Box::new(SenderReport {
            ssrc,
            ntp_time: s.ntp,
            rtp_time: s.rtp_ts,
            packet_count: s.packets,
            octet_count: s.octets,
            reports,
            profile_extensions: Bytes::new(),
        }),
        None => Box::new(ReceiverReport {
            ssrc,
            reports,
            profile_extensions: Bytes::new(),
        }),
    };
    let sdes: Box<dyn rtc::rtcp::packet::Packet> = Box::new(SourceDescription {
        chunks: vec![SourceDescriptionChunk {
            source: ssrc,
            items: vec![SourceDescriptionItem {
                sdes_type: SdesType::SdesCname,
                text: Bytes::copy_from_slice(&cname.as_bytes()[..cname.len().min(255)]),
            }],
        }],
    });
    rtc::rtcp::packet::marshal(&[first, sdes])
        .map(|b| b.to_vec())
        .unwrap_or_default()
}

/// What a peer's compound packet says.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Incoming {
    /// The peer's SR: its SSRC and the middle bits of its NTP time.
    pub sender: Option<(u32, u32)>,
    /// The peer's reception report about baton's stream.
    pub about_us: Option<Block>,
    /// The peer said BYE.
    pub bye: bool,
}

/// A datagram that is not RTCP.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RtcpError {
    #[error("{0} bytes is over the {MAX_DATAGRAM}-byte datagram limit")]
    TooLarge(usize),
    #[error("not an RTCP compound packet: {0}")]
    Malformed(String),
    #[error("packet type {0} is not an RTCP type (RTP sent to the RTCP port?)")]
    NotRtcp(u8),
}

/// Reads a peer's compound packet; `ours` is baton's SSRC (the block about it is kept).
pub fn parse(datagram: &[u8], ours: u32) -> Result<Incoming, RtcpError> {
    if datagram.len() > MAX_DATAGRAM {
        return Err(RtcpError::TooLarge(datagram.len()));
    }
    if let Some(&t) = datagram.get(1)
        && !(192..=223).contains(&t)
    {
        return Err(RtcpError::NotRtcp(t));
    }
    let mut buf = datagram;
    let packets =
        rtc::rtcp::packet::unmarshal(&mut buf).map_err(|e| RtcpError::Malformed(e.to_string()))?;
    let mut out = Incoming::default();
    let about = |reports: &[ReceptionReport]| {
        reports.iter().find(|r| r.ssrc == ours).map(|r| Block {
            ssrc: r.ssrc,
            fraction_lost: r.fraction_lost,
            cumulative_lost: r.total_lost,
            extended_max: r.last_sequence_number,
            jitter: r.jitter,
            lsr: r.last_sender_report,
            dlsr: r.delay,
        })
    };
    for p in &packets {
        let any = p.as_any();
        if let Some(sr) = any.downcast_ref::<SenderReport>() {
            out.sender = Some((sr.ssrc, ntp_middle(sr.ntp_time)));
            out.about_us = about(&sr.reports).or(out.about_us);
        } else if let Some(rr) = any.downcast_ref::<ReceiverReport>() {
            out.about_us = about(&rr.reports).or(out.about_us);
        } else if any.downcast_ref::<rtc::rtcp::goodbye::Goodbye>().is_some() {
            out.bye = true;
        }
    }
    Ok(out)
}

/// The round trip a report block shows (RFC 3550 §6.4.1): arrival − LSR − DLSR, when the
/// peer has seen an SR of baton's.
pub fn round_trip(block: &Block, arrived: SystemTime) -> Option<Duration> {
    if block.lsr == 0 {
        return None;
    }
    let a = ntp_middle(ntp(arrived));
    let rtt = a.wrapping_sub(block.lsr).wrapping_sub(block.dlsr);
    // More than a minute is a clock or a bogus block.
    (rtt < 60 << 16).then(|| Duration::from_micros(u64::from(rtt) * 1_000_000 / 65_536))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sender_report_reads_back_with_its_block() {
        let block = Block {
            ssrc: 0xabc,
            fraction_lost: 5,
            cumulative_lost: 12,
            extended_max: 70_000,
            jitter: 40,
            lsr: 0,
            dlsr: 0,
        };
        let now = SystemTime::now();
        let bytes = report(
            7,
            Some(SenderInfo {
                ntp: ntp(now),
                rtp_ts: 1234,
                packets: 50,
                octets: 8000,
            }),
            Some(block),
            "baton@example",
        );
        assert_eq!(bytes.len() % 4, 0);
        // Read as the peer (SSRC 0xabc) would.
        let seen = parse(&bytes, 0xabc).unwrap();
        assert_eq!(seen.sender, Some((7, ntp_middle(ntp(now)))));
        assert_eq!(seen.about_us, Some(block));
        assert!(!seen.bye);
        // Read by someone the block is not about.
        assert_eq!(parse(&bytes, 1).unwrap().about_us, None);
    }

    #[test]
    fn a_receiver_report_and_the_round_trip() {
        let sent = SystemTime::now();
        let back = sent + Duration::from_millis(130);
        let block = Block {
            ssrc: 9,
            lsr: ntp_middle(ntp(sent)),
            // The peer held it 100 ms.
            dlsr: 65_536 / 10,
            ..Block::default()
        };
        let bytes = report(3, None, Some(block), "x");
        let seen = parse(&bytes, 9).unwrap();
        assert_eq!(seen.sender, None);
        let rtt = round_trip(&seen.about_us.unwrap(), back).unwrap();
        assert!((25..=35).contains(&rtt.as_millis()), "{rtt:?}");
    }

    #[test]
    fn garbage_is_refused() {
        assert!(parse(&[0x80, 200, 0, 1], 1).is_err());
        assert!(parse(&[1, 2, 3], 1).is_err());
        assert!(parse(&[0u8; 1501], 1).is_err());
    }
}
