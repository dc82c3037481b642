//! Tests of one call's RTP media core (`MediaSession`): the peer heard frame by frame, packets
//! to the latched address, hold, keypad events, loss and reorder, timeouts and RTCP.

use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use super::*;
use crate::leg::sip::latch::PROBATION;
use crate::leg::sip::sdp::Direction;

fn sa(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

fn neg(dtmf: bool) -> Negotiated {
    Negotiated {
        codec: Codec::Pcmu,
        pt: 0,
        dtmf_pt: dtmf.then_some(101),
        dtmf_rate: 8000,
        remote_rtp: "127.0.0.1:6000".parse().unwrap(),
        remote_rtcp: "127.0.0.1:6001".parse().unwrap(),
        direction: Direction::SendRecv,
    }
}

const START: StreamStart = StreamStart {
    ssrc: 0x1234,
    seq: 100,
    ts: 5000,
};

/// A peer's stream: PCMU packets of a constant value.
struct Peer {
    seq: rtp::Sender,
    ts: u32,
}

impl Peer {
    fn new() -> Peer {
        Peer {
            seq: rtp::Sender::new(0xbeef, 1, 0),
            ts: 0,
        }
    }

    fn audio(&mut self, value: i16) -> Vec<u8> {
        let mut code = Vec::new();
        g711::encode_ulaw(&[value; 160], &mut code);
        let p = self.seq.packet(0, self.ts, false, &code);
        self.ts += 160;
        p
    }
}

fn frames(m: &mut MediaSession) -> Vec<Frame> {
    let mut out = Vec::new();
    while let Some(e) = m.poll_event() {
        if let LegEvent::Frame { frame, .. } = e {
            out.push(frame);
        }
    }
    out
}

/// A 20 ms frame at 8 kHz for baton to play.
fn voiced() -> Frame {
    Frame {
        rate: 8000,
        ts: Duration::ZERO,
        samples: vec![500; 160],
    }
}

fn level(f: &Frame) -> i16 {
    f.samples[80]
}

#[test]
fn the_peer_is_heard_one_frame_per_tick_on_a_continuous_timeline() {
    let t0 = Instant::now();
    let mut m = MediaSession::new(MediaConfig::default(), neg(false), START, t0);
    let from: SocketAddr = "127.0.0.1:6000".parse().unwrap();
    let mut peer = Peer::new();
    let wall = SystemTime::now();
    for i in 0..10u32 {
        let now = t0 + Duration::from_millis(u64::from(i) * 20 + 5);
        m.handle_rtp(&peer.audio(1000), from, now);
        m.handle_timeout(t0 + Duration::from_millis(u64::from(i + 1) * 20), wall);
    }
    let f = frames(&mut m);
    assert_eq!(f.len(), 10);
    for (i, fr) in f.iter().enumerate() {
        assert_eq!(fr.ts, Duration::from_millis(20 * i as u64));
        assert_eq!(fr.samples.len(), 160);
    }
    // The first frame waited for the 40 ms target; the rest carry the peer's level.
    assert_eq!(level(&f[0]), 0);
    assert!((900..=1100).contains(&level(&f[3])), "{}", level(&f[3]));
    let s = m.stats();
    assert_eq!((s.packets_in, s.lost, s.expected), (10, 0, 10));
    assert!(s.latched);
    assert_eq!(
        s.sent_to,
        Some(from),
        "symmetric RTP: latched onto the SDP's address"
    );
}

#[test]
fn frames_played_go_out_as_packets_to_the_latched_address() {
    let t0 = Instant::now();
    let mut m = MediaSession::new(MediaConfig::default(), neg(false), START, t0);
    let f = voiced();
    m.play(&f);
    let first = m.poll_transmit().unwrap();
    assert_eq!(first.to, sa("127.0.0.1:6000"), "the SDP's address first");
    let p = rtp::parse(&first.bytes).unwrap();
    assert_eq!(
        (p.pt, p.seq, p.ts, p.ssrc, p.marker),
        (0, 100, 5000, 0x1234, true)
    );
    // The peer's packets come from elsewhere (NAT): baton follows them once three have come
    // in sequence.
    let nat: SocketAddr = "127.0.0.1:7777".parse().unwrap();
    let mut peer = Peer::new();
    for _ in 0..PROBATION - 1 {
        m.handle_rtp(&peer.audio(1), nat, t0);
    }
    m.play(&f);
    assert_eq!(m.poll_transmit().unwrap().to, sa("127.0.0.1:6000"));
    m.handle_rtp(&peer.audio(1), nat, t0);
    m.play(&f);
    let third = m.poll_transmit().unwrap();
    assert_eq!(third.to, nat);
    let p = rtp::parse(&third.bytes).unwrap();
    assert_eq!((p.seq, p.ts, p.marker), (102, 5320, false));
    assert_eq!(m.stats().on_probation, u64::from(PROBATION - 1));
    // Another source after the latch is ignored.
    m.handle_rtp(&Peer::new().audio(1), "127.0.0.1:9".parse().unwrap(), t0);
    assert_eq!(m.stats().other_source, 1);
}

/// RTP an earlier call's peer still sends to the port is taken first (it could be the peer
/// behind NAT), but the moment the SDP's own address sends, baton follows it for good: the
/// stray stream is no longer heard, and the caller's audio is.
#[test]
fn the_sdps_own_address_takes_over_from_a_stray_stream_for_good() {
    let t0 = Instant::now();
    let mut m = MediaSession::new(MediaConfig::default(), neg(false), START, t0);
    let wall = SystemTime::now();
    let stray: SocketAddr = sa("127.0.0.1:7777");
    let sdp = sa("127.0.0.1:6000");
    let (mut old, mut caller) = (Peer::new(), Peer::new());
    caller.seq = rtp::Sender::new(0xcafe, 500, 0);
    let f = voiced();
    let mut heard = Vec::new();
    for i in 0..30u32 {
        let now = t0 + Duration::from_millis(u64::from(i) * 20 + 5);
        m.handle_rtp(&old.audio(-3000), stray, now);
        if i >= 3 {
            m.handle_rtp(&caller.audio(1000), sdp, now);
        }
        m.play(&f);
        while let Some(t) = m.poll_transmit() {
            if rtp::parse(&t.bytes).is_ok() {
                heard.push((i, t.to));
            }
        }
        m.handle_timeout(t0 + Duration::from_millis(u64::from(i + 1) * 20), wall);
    }
    assert_eq!(heard[1], (1, sdp), "the stray stream is on probation");
    assert_eq!(
        heard[2],
        (2, stray),
        "three packets in sequence: taken meanwhile"
    );
    assert!(
        heard
            .iter()
            .filter(|(i, _)| *i >= 3)
            .all(|(_, to)| *to == sdp),
        "{heard:?}"
    );
    let s = m.stats();
    assert_eq!(s.sent_to, Some(sdp));
    assert_eq!(
        s.other_source, 26,
        "every stray packet after the switch (frames 4 to 29) is dropped"
    );
    assert_eq!(s.on_probation, u64::from(PROBATION - 1));
    let f = frames(&mut m);
    assert!(
        f[f.len() - 10..]
            .iter()
            .all(|fr| (900..=1100).contains(&level(fr))),
        "the caller is heard, not the stray stream: {:?}",
        f.iter().map(level).collect::<Vec<_>>()
    );
}

/// Packets sprayed at the port — one from each of many addresses, or a stream out of
/// sequence — take nothing while a caller behind NAT has not sent yet: baton keeps sending to
/// the SDP's address (none of the agent's audio leaks to them) and hears none of it. The
/// caller's own stream, three packets in sequence, is then taken, and the sprayer dropped.
#[test]
fn sprayed_packets_cannot_take_the_media_before_a_natd_caller_sends() {
    let t0 = Instant::now();
    let mut m = MediaSession::new(MediaConfig::default(), neg(false), START, t0);
    let f = voiced();
    let mut sent_to = Vec::new();
    let mut spray = rtp::Sender::new(0xbad, 1, 0);
    for i in 0..50u16 {
        let now = t0 + Duration::from_millis(u64::from(i) * 20);
        // One packet from each of many ports, and a stream from one port jumping its sequence.
        let one = spray.packet(0, 0, false, &[0xff; 160]);
        m.handle_rtp(&one, sa(&format!("198.51.100.7:{}", 20_000 + i)), now);
        let mut skipping = rtp::Sender::new(0xbad2, i.wrapping_mul(7), 0);
        m.handle_rtp(
            &skipping.packet(0, 0, false, &[0xff; 160]),
            sa("198.51.100.8:5004"),
            now,
        );
        m.play(&f);
        while let Some(t) = m.poll_transmit() {
            sent_to.push(t.to);
        }
    }
    assert!(
        sent_to.iter().all(|a| *a == sa("127.0.0.1:6000")),
        "only the SDP's address: {sent_to:?}"
    );
    let s = m.stats();
    assert!(!s.latched);
    assert_eq!((s.packets_in, s.on_probation), (0, 100));
    // The caller behind NAT sends: its third packet in sequence makes it the peer.
    let nat = sa("203.0.113.9:40000");
    let mut caller = Peer::new();
    for _ in 0..PROBATION {
        m.handle_rtp(&caller.audio(1000), nat, t0 + Duration::from_secs(1));
    }
    m.handle_rtp(
        &spray.packet(0, 0, false, &[0xff; 160]),
        sa("198.51.100.7:20000"),
        t0 + Duration::from_secs(1),
    );
    m.play(&f);
    assert_eq!(m.poll_transmit().unwrap().to, nat);
    let s = m.stats();
    assert!(s.latched);
    assert_eq!((s.packets_in, s.other_source), (1, 1));
}

/// Probation counts one stream's packets in sequence, each source apart: a sprayer's packet
/// between the caller's does not hold the caller back; a new SSRC, a skipped or repeated
/// sequence number starts the count over; the sequence may wrap.
#[test]
fn probation_counts_each_streams_packets_in_sequence() {
    let t0 = Instant::now();
    let nat = sa("203.0.113.9:40000");
    let pkt =
        |ssrc: u32, seq: u16| rtp::Sender::new(ssrc, seq, 0).packet(0, 0, false, &[0xff; 160]);
    // Feeds (ssrc, seq) from the NAT'd address, a sprayed packet from a new port after each;
    // returns after how many of them the caller was latched.
    let latched_after = |stream: &[(u32, u16)]| {
        let mut m = MediaSession::new(MediaConfig::default(), neg(false), START, t0);
        for (n, &(ssrc, seq)) in stream.iter().enumerate() {
            let now = t0 + Duration::from_millis(20 * n as u64);
            m.handle_rtp(&pkt(ssrc, seq), nat, now);
            if m.stats().latched {
                assert_eq!(m.stats().sent_to, Some(nat));
                return Some(n + 1);
            }
            let spray = sa(&format!("198.51.100.7:{}", 20_000 + n));
            m.handle_rtp(&pkt(0xbad, seq), spray, now);
        }
        None
    };
    assert_eq!(latched_after(&[(1, 10), (1, 11), (1, 12)]), Some(3));
    assert_eq!(latched_after(&[(1, 65534), (1, 65535), (1, 0)]), Some(3));
    assert_eq!(
        latched_after(&[(1, 10), (1, 11), (2, 12), (2, 13), (2, 14)]),
        Some(5),
        "a new SSRC starts over"
    );
    assert_eq!(
        latched_after(&[(1, 10), (1, 11), (1, 13), (1, 14), (1, 15)]),
        Some(5),
        "a skipped number starts over"
    );
    assert_eq!(
        latched_after(&[(1, 10), (1, 11), (1, 11), (1, 12), (1, 13)]),
        Some(5),
        "a repeat starts over"
    );
    assert_eq!(latched_after(&[(1, 10), (1, 12), (1, 14), (1, 16)]), None);
}

/// A caller behind NAT, latched for a while, keeps its media: a later packet from the address
/// its SDP names (a host on baton's side with the same private address, or a forged one)
/// takes nothing.
#[test]
fn a_late_packet_from_the_sdps_address_cannot_take_a_natd_callers_media() {
    let t0 = Instant::now();
    let mut m = MediaSession::new(MediaConfig::default(), neg(false), START, t0);
    let nat = sa("203.0.113.9:40000");
    let mut caller = Peer::new();
    let mut other = Peer::new();
    other.seq = rtp::Sender::new(0xbad, 7, 0);
    for i in 0..200u64 {
        let now = t0 + Duration::from_millis(i * 20 + 5);
        m.handle_rtp(&caller.audio(1000), nat, now);
        if i >= 150 {
            m.handle_rtp(&other.audio(-3000), sa("127.0.0.1:6000"), now);
        }
    }
    let s = m.stats();
    assert_eq!(s.sent_to, Some(nat), "3 s after the caller was learned");
    assert_eq!(s.other_source, 50);
    assert_eq!(s.ssrc_changes, 0);
}

#[test]
fn hold_stops_sending_and_unhold_resumes_with_the_marker() {
    let t0 = Instant::now();
    let mut m = MediaSession::new(MediaConfig::default(), neg(false), START, t0);
    let f = Frame::silence(8000, Duration::ZERO);
    m.play(&f);
    m.poll_transmit();
    let mut held = neg(false);
    held.direction = Direction::RecvOnly;
    m.update(held, t0);
    m.play(&f);
    assert!(m.poll_transmit().is_none(), "nothing while held");
    m.update(neg(false), t0);
    m.play(&f);
    let p = rtp::parse(&m.poll_transmit().unwrap().bytes).unwrap();
    assert!(p.marker);
    assert_eq!(p.ts, 5000 + 2 * 160, "time ran on while held");
    assert_eq!(p.seq, 101, "no packet was skipped");
}

#[test]
fn keypad_events_both_ways() {
    let t0 = Instant::now();
    let mut m = MediaSession::new(MediaConfig::default(), neg(true), START, t0);
    let from: SocketAddr = "127.0.0.1:7000".parse().unwrap();
    let mut tx = rtp::Sender::new(9, 1, 8000);
    for end in [false, false, true, true, true] {
        let e = dtmf::Event {
            code: 9,
            end,
            volume: 10,
            duration: 400,
        };
        m.handle_rtp(
            &tx.packet(101, 8000, false, &dtmf::event_payload(e)),
            from,
            t0,
        );
    }
    let digits: Vec<char> = std::iter::from_fn(|| m.poll_event())
        .filter_map(|e| match e {
            LegEvent::Dtmf { digit } => Some(digit),
            _ => None,
        })
        .collect();
    assert_eq!(digits, ['9']);
    assert_eq!(m.send_dtmf("5", None), Ok(1));
    let f = Frame::silence(8000, Duration::ZERO);
    let mut sent = Vec::new();
    for _ in 0..9 {
        m.play(&f);
        sent.push(rtp::parse(&m.poll_transmit().unwrap().bytes).unwrap());
    }
    assert!(
        sent[..8].iter().all(|p| p.pt == 101 && p.ts == 5000),
        "{sent:?}"
    );
    assert!(sent[0].marker);
    assert_eq!(sent[8].pt, 0);
    assert_eq!(sent[8].ts, 5000 + 8 * 160);
    assert_eq!(m.stats().dtmf_out, 1);
    assert_eq!(m.stats().lost, 0);
}

#[test]
fn a_silent_peer_times_out_and_a_report_goes_out() {
    let cfg = MediaConfig {
        rtp_timeout: Duration::from_secs(2),
        rtcp_interval: Duration::from_secs(1),
        ..MediaConfig::default()
    };
    let t0 = Instant::now();
    let mut m = MediaSession::new(cfg, neg(false), START, t0);
    m.play(&Frame::silence(8000, Duration::ZERO));
    m.poll_transmit();
    let wall = SystemTime::now();
    m.handle_timeout(t0 + Duration::from_secs(1), wall);
    let report = std::iter::from_fn(|| m.poll_transmit())
        .find(|t| t.rtcp)
        .expect("an RTCP report");
    assert_eq!(report.to, sa("127.0.0.1:6001"));
    let seen = rtcp::parse(&report.bytes, 1).unwrap();
    assert_eq!(
        seen.sender.map(|s| s.0),
        Some(0x1234),
        "an SR: baton has sent"
    );
    assert!(m.ended().is_none());
    m.handle_timeout(t0 + Duration::from_secs(2), wall);
    assert_eq!(
        m.ended(),
        Some(&MediaEnd::RtpTimeout(Duration::from_secs(2)))
    );
    assert!(std::iter::from_fn(|| m.poll_event()).any(|e| matches!(
        &e,
        LegEvent::Stop(crate::leg::StopReason::Failed(why)) if why == "no RTP from the peer for 2 s"
    )));
}

#[test]
fn loss_and_reorder_are_counted_and_concealed() {
    let t0 = Instant::now();
    let mut m = MediaSession::new(MediaConfig::default(), neg(false), START, t0);
    let from: SocketAddr = "127.0.0.1:7000".parse().unwrap();
    let mut peer = Peer::new();
    let packets: Vec<Vec<u8>> = (0..50).map(|_| peer.audio(800)).collect();
    let wall = SystemTime::now();
    for i in 0..50usize {
        // Drop every 10th; swap each 7th with the next.
        let idx = if i % 7 == 0 && i > 0 && i + 1 < 50 {
            i + 1
        } else if i % 7 == 1 && i > 1 {
            i - 1
        } else {
            i
        };
        if idx % 10 != 5 {
            m.handle_rtp(
                &packets[idx],
                from,
                t0 + Duration::from_millis(i as u64 * 20),
            );
        }
        m.handle_timeout(t0 + Duration::from_millis(i as u64 * 20 + 20), wall);
    }
    let s = m.stats();
    assert_eq!(s.lost, 5, "{s:?}");
    assert!(s.buffer.reordered >= 4, "{s:?}");
    assert_eq!(s.buffer.late, 0, "{s:?}");
    assert!(s.concealed_ms >= 100.0 && s.concealed_ms <= 120.0, "{s:?}");
}

fn opus_neg() -> Negotiated {
    Negotiated {
        codec: Codec::Opus,
        pt: 96,
        dtmf_pt: Some(101),
        dtmf_rate: 8000,
        ..neg(true)
    }
}

fn sine(n: usize, rate: u32, from: usize) -> Vec<i16> {
    (from..from + n)
        .map(|i| {
            let t = i as f64 / f64::from(rate);
            (6000.0 * (2.0 * std::f64::consts::PI * 300.0 * t).sin()) as i16
        })
        .collect()
}

#[test]
fn an_opus_call_runs_at_16_khz_on_a_48_khz_clock_with_8_khz_keypad_events() {
    let t0 = Instant::now();
    let wall = SystemTime::now();
    let mut m = MediaSession::new(MediaConfig::default(), opus_neg(), START, t0);
    assert_eq!(m.rate(), 16_000);
    // The peer's Opus (encoded at 48 kHz, as a softphone does), 20 ms per packet.
    let mut enc = crate::leg::webrtc::codec::OpusOutbound::new(48_000, 32_000).unwrap();
    let mut tx = rtp::Sender::new(0xbeef, 1, 0);
    let from = sa("127.0.0.1:7000");
    for i in 0..30u32 {
        let payload = enc.encode(&sine(960, 48_000, 960 * i as usize)).unwrap();
        if i != 12 {
            let p = tx.packet(96, i * 960, false, &payload);
            m.handle_rtp(&p, from, t0 + Duration::from_millis(u64::from(i) * 20 + 5));
        } else {
            tx.packet(96, i * 960, false, &payload); // lost on the way
        }
        m.handle_timeout(t0 + Duration::from_millis(u64::from(i + 1) * 20), wall);
    }
    let f = frames(&mut m);
    assert_eq!(f.len(), 30);
    assert!(f.iter().all(|f| f.rate == 16_000 && f.samples.len() == 320));
    assert!(crate::audio::vad::rms_dbfs(&f[20].samples) > -20.0);
    // A key: event packets on the 8 kHz event clock.
    for (k, d) in [(0u32, 160u16), (1, 320), (2, 480)] {
        let ev = dtmf::event_payload(dtmf::Event {
            code: 5,
            end: k == 2,
            volume: 10,
            duration: d,
        });
        let p = tx.packet(101, 30 * 960, k == 0, &ev);
        m.handle_rtp(
            &p,
            from,
            t0 + Duration::from_millis(620 + 20 * u64::from(k)),
        );
    }
    let s = m.stats();
    assert_eq!(
        (s.codec.as_str(), s.lost, s.dtmf_in),
        ("opus", 1, 1),
        "{s:?}"
    );
    assert_eq!(
        s.buffer.fec_frames, 1,
        "the lost frame came from FEC: {s:?}"
    );
    assert!(s.concealed_ms >= 20.0, "{s:?}");
    assert!(s.jitter_ms < 1.0, "{s:?}");
    // baton's side: one Opus packet per frame, +960 on the clock; keys as events whose
    // timestamps stay on that clock.
    let frame = Frame {
        rate: 16_000,
        ts: Duration::ZERO,
        samples: sine(320, 16_000, 0),
    };
    m.play(&frame);
    m.play(&frame);
    m.send_dtmf("1", None).unwrap();
    m.play(&frame);
    m.play(&frame);
    let sent: Vec<rtp::Packet> = std::iter::from_fn(|| m.poll_transmit())
        .map(|t| rtp::parse(&t.bytes).unwrap())
        .collect();
    assert_eq!(sent[0].pt, 96);
    assert_eq!(sent[1].ts.wrapping_sub(sent[0].ts), 960);
    assert!(sent[0].payload.len() > 10 && sent[0].payload.len() < 200);
    let ev: Vec<_> = sent.iter().filter(|p| p.pt == 101).collect();
    assert_eq!(ev.len(), 2);
    assert_eq!(
        ev[0].ts,
        sent[1].ts.wrapping_add(960),
        "the event starts on the audio clock"
    );
    assert_eq!(ev[1].ts, ev[0].ts, "one event, one timestamp");
    let d = dtmf::parse_event(&ev[1].payload).unwrap().duration;
    assert_eq!(d, 320, "two frames in the event's 8 kHz clock");
}

#[test]
fn a_re_invite_moves_an_opus_call_to_pcmu_and_the_leg_keeps_its_rate() {
    let t0 = Instant::now();
    let wall = SystemTime::now();
    let mut m = MediaSession::new(MediaConfig::default(), opus_neg(), START, t0);
    m.update(neg(true), t0);
    assert_eq!(m.rate(), 16_000);
    let mut peer = Peer::new();
    let from = sa("127.0.0.1:7000");
    for i in 0..10u32 {
        m.handle_rtp(
            &peer.audio(1000),
            from,
            t0 + Duration::from_millis(u64::from(i) * 20 + 5),
        );
        m.handle_timeout(t0 + Duration::from_millis(u64::from(i + 1) * 20), wall);
    }
    let f = frames(&mut m);
    assert!(
        f.iter().all(|f| f.samples.len() == 320),
        "resampled to the leg's rate"
    );
    let heard = &f[8].samples;
    assert!(heard.iter().all(|s| (850..=1150).contains(s)), "{heard:?}");
    let frame = Frame {
        rate: 16_000,
        ts: Duration::ZERO,
        samples: vec![0; 320],
    };
    m.play(&frame);
    m.play(&frame);
    let a = rtp::parse(&m.poll_transmit().unwrap().bytes).unwrap();
    let b = rtp::parse(&m.poll_transmit().unwrap().bytes).unwrap();
    assert_eq!(
        (a.pt, a.payload.len(), b.ts.wrapping_sub(a.ts)),
        (0, 160, 160)
    );
    assert_eq!(m.stats().codec, "PCMU");
}
