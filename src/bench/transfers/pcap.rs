//! The audio SIPp plays (`play_pcap_audio`): 8 kHz speech as a capture file of 20 ms PCMU RTP
//! packets over Ethernet, IPv4 and UDP, in the classic libpcap format. SIPp reads each packet's
//! UDP payload and send time, and rewrites addresses and ports to the call's media, so those are
//! placeholders here.

/// Samples of one 20 ms packet at 8 kHz.
const FRAME: usize = 160;
/// libpcap's link type for Ethernet.
const LINKTYPE_ETHERNET: u32 = 1;
/// RTP payload type of PCMU.
const PT_PCMU: u8 = 0;

/// A capture of `pcm` (8 kHz) as PCMU RTP, one packet every 20 ms (the last one padded with
/// silence), with synchronisation source `ssrc`.
pub fn pcmu_rtp(pcm: &[i16], ssrc: u32) -> Vec<u8> {
    let mut out = Vec::with_capacity(24 + pcm.len().div_ceil(FRAME) * (16 + 42 + 12 + FRAME));
    out.extend_from_slice(&0xa1b2_c3d4u32.to_le_bytes()); // microsecond timestamps
    out.extend_from_slice(&2u16.to_le_bytes());
    out.extend_from_slice(&4u16.to_le_bytes());
    out.extend_from_slice(&0i32.to_le_bytes()); // GMT offset
    out.extend_from_slice(&0u32.to_le_bytes()); // timestamp accuracy
    out.extend_from_slice(&65_535u32.to_le_bytes()); // snapshot length
    out.extend_from_slice(&LINKTYPE_ETHERNET.to_le_bytes());
    let mut ulaw = Vec::with_capacity(FRAME);
    for (i, block) in pcm.chunks(FRAME).enumerate() {
        let mut frame = block.to_vec();
        frame.resize(FRAME, 0);
        ulaw.clear();
        crate::audio::g711::encode_ulaw(&frame, &mut ulaw);
        let mut rtp = Vec::with_capacity(12 + FRAME);
        rtp.push(0x80); // version 2, no padding, extension or CSRC
        rtp.push(if i == 0 { 0x80 | PT_PCMU } else { PT_PCMU }); // marker on the first
        rtp.extend_from_slice(&(i as u16).to_be_bytes());
        rtp.extend_from_slice(&((i * FRAME) as u32).to_be_bytes());
        rtp.extend_from_slice(&ssrc.to_be_bytes());
        rtp.extend_from_slice(&ulaw);
        let packet = udp_packet(&rtp);
        let at_us = i as u64 * 20_000;
        out.extend_from_slice(&((at_us / 1_000_000) as u32).to_le_bytes());
        out.extend_from_slice(&((at_us % 1_000_000) as u32).to_le_bytes());
        out.extend_from_slice(&(packet.len() as u32).to_le_bytes()); // captured
        out.extend_from_slice(&(packet.len() as u32).to_le_bytes()); // on the wire
        out.extend_from_slice(&packet);
    }
    out
}

/// `payload` in a UDP datagram from 127.0.0.1:6000 to 127.0.0.1:6002, in an Ethernet frame.
fn udp_packet(payload: &[u8]) -> Vec<u8> {
    let udp_len = 8 + payload.len();
    let ip_len = 20 + udp_len;
    let mut p = Vec::with_capacity(14 + ip_len);
    p.extend_from_slice(&[0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 1]); // destination, source MAC
    p.extend_from_slice(&0x0800u16.to_be_bytes()); // IPv4
    let mut ip = [0u8; 20];
    ip[0] = 0x45; // version 4, 20-byte header
    ip[2..4].copy_from_slice(&(ip_len as u16).to_be_bytes());
    ip[6] = 0x40; // don't fragment
    ip[8] = 64; // TTL
    ip[9] = 17; // UDP
    ip[12..16].copy_from_slice(&[127, 0, 0, 1]);
    ip[16..20].copy_from_slice(&[127, 0, 0, 1]);
    let sum = ipv4_checksum(&ip);
    ip[10..12].copy_from_slice(&sum.to_be_bytes());
    p.extend_from_slice(&ip);
    p.extend_from_slice(&6000u16.to_be_bytes());
    p.extend_from_slice(&6002u16.to_be_bytes());
    p.extend_from_slice(&(udp_len as u16).to_be_bytes());
    p.extend_from_slice(&0u16.to_be_bytes()); // no checksum: SIPp computes its own
    p.extend_from_slice(payload);
    p
}

fn ipv4_checksum(header: &[u8]) -> u16 {
    let mut sum: u32 = header
        .chunks(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], *w.get(1).unwrap_or(&0)])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packets_are_20_ms_of_pcmu_rtp_in_order() {
        let pcm: Vec<i16> = (0..400).map(|i| ((i % 50) * 300) as i16).collect();
        let cap = pcmu_rtp(&pcm, 0x1234_5678);
        assert_eq!(&cap[..4], &0xa1b2_c3d4u32.to_le_bytes());
        assert_eq!(u32::from_le_bytes(cap[20..24].try_into().unwrap()), 1);
        // 400 samples: three packets, the last padded.
        let mut off = 24;
        let mut seen = 0;
        while off < cap.len() {
            let rec = &cap[off..];
            let ts_us = u32::from_le_bytes(rec[4..8].try_into().unwrap());
            let len = u32::from_le_bytes(rec[8..12].try_into().unwrap()) as usize;
            assert_eq!(ts_us, seen * 20_000);
            let pkt = &rec[16..16 + len];
            assert_eq!(&pkt[12..14], &[0x08, 0x00]);
            assert_eq!(ipv4_checksum(&pkt[14..34]), 0, "the IPv4 checksum verifies");
            let udp_len = u16::from_be_bytes([pkt[38], pkt[39]]) as usize;
            assert_eq!(udp_len, 8 + 12 + 160);
            let rtp = &pkt[42..];
            assert_eq!(rtp[0], 0x80);
            assert_eq!(rtp[1] & 0x7f, 0, "PCMU");
            assert_eq!(
                rtp[1] & 0x80 != 0,
                seen == 0,
                "marker on the first packet only"
            );
            assert_eq!(u16::from_be_bytes([rtp[2], rtp[3]]), seen as u16);
            assert_eq!(
                u32::from_be_bytes(rtp[4..8].try_into().unwrap()),
                seen * 160
            );
            assert_eq!(&rtp[8..12], &0x1234_5678u32.to_be_bytes());
            off += 16 + len;
            seen += 1;
        }
        assert_eq!(seen, 3);
    }
}
