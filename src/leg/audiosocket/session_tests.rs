//! Unit tests of the AudioSocket session core.
use bytes::BytesMut;

use super::*;
use crate::leg::audiosocket::wire::{HANGUP, KIND_DTMF, KIND_UUID, encode_audio, encode_raw};

const UUID: [u8; 16] = [
    0x0b, 0x6e, 0x4d, 0x2a, 0x8f, 0x1c, 0x4e, 0x55, 0x9a, 0x3b, 0x2c, 0x7d, 0x1e, 0x0f, 0x9a, 0x88,
];

fn bytes(f: impl FnOnce(&mut BytesMut)) -> Vec<u8> {
    let mut b = BytesMut::new();
    f(&mut b);
    b.to_vec()
}

fn frames(s: &mut AudioSocketSession) -> Vec<Frame> {
    let mut out = Vec::new();
    while let Some(ev) = s.poll_event() {
        if let LegEvent::Frame { frame, .. } = ev {
            out.push(frame);
        }
    }
    out
}

fn started(kind: u8, first: &[i16], now: Instant) -> AudioSocketSession {
    let mut s = AudioSocketSession::new(wire::DEFAULT_MAX_PAYLOAD);
    let b = bytes(|b| {
        encode_raw(KIND_UUID, &UUID, b);
        encode_audio(kind, first, b);
    });
    s.handle_bytes(&b, now).unwrap();
    s
}

#[test]
fn uuid_then_audio_starts_the_call_at_the_first_rate() {
    let now = Instant::now();
    let mut s = AudioSocketSession::new(wire::DEFAULT_MAX_PAYLOAD);
    s.handle_bytes(&bytes(|b| encode_raw(KIND_UUID, &UUID, b)), now)
        .unwrap();
    assert_eq!(s.uuid(), Some("0b6e4d2a-8f1c-4e55-9a3b-2c7d1e0f9a88"));
    assert!(s.start_info().is_none(), "the rate is not known yet");
    let later = now + Duration::from_millis(20);
    s.handle_bytes(&bytes(|b| encode_audio(0x12, &[7; 320], b)), later)
        .unwrap();
    let info = s.start_info().unwrap();
    assert_eq!((info.rate, info.kind), (16_000, 0x12));
    // The first message holds 20 ms that ended when it arrived.
    assert_eq!(s.started_at(), Some(now));
    let f = frames(&mut s);
    assert_eq!(f.len(), 1);
    assert_eq!(
        (f[0].rate, f[0].ts, f[0].samples.len()),
        (16_000, Duration::ZERO, 320)
    );
}

#[test]
fn audio_of_any_size_is_reframed_into_20_ms() {
    let now = Instant::now();
    let mut s = started(0x10, &[1; 100], now);
    // 100 + 60 + 400 + 1 samples = 561 = three whole 160-sample frames and 81 left over.
    for n in [60usize, 400, 1] {
        s.handle_bytes(&bytes(|b| encode_audio(0x10, &vec![1; n], b)), now)
            .unwrap();
    }
    let f = frames(&mut s);
    let ts: Vec<u64> = f.iter().map(|f| f.ts.as_millis() as u64).collect();
    assert_eq!(ts, [0, 20, 40]);
    assert!(f.iter().all(|f| f.samples.len() == 160));
    // The peer hangs up: the partial frame is padded and sent, then Stop.
    s.handle_bytes(&HANGUP, now).unwrap();
    let mut rest = Vec::new();
    while let Some(ev) = s.poll_event() {
        rest.push(ev);
    }
    assert!(
        matches!(&rest[0], LegEvent::Frame { frame, .. } if frame.ts == Duration::from_millis(60))
    );
    assert!(matches!(
        rest[1],
        LegEvent::Stop(crate::leg::StopReason::HungUp)
    ));
    assert_eq!(s.ended(), Some(&EndReason::PeerHangup));
    assert!(
        s.poll_transmit().is_none(),
        "no hang-up is echoed to a peer that hung up"
    );
}

#[test]
fn dtmf_reaches_the_call() {
    let now = Instant::now();
    let mut s = started(0x10, &[0; 160], now);
    s.handle_bytes(&bytes(|b| encode_raw(KIND_DTMF, b"7", b)), now)
        .unwrap();
    let evs: Vec<_> = std::iter::from_fn(|| s.poll_event()).collect();
    assert!(
        matches!(evs.last(), Some(LegEvent::Dtmf { digit: '7' })),
        "{evs:?}"
    );
}

/// Every protocol error hangs up: the error for the log, `00 00 00` to the peer, Stop to the call.
fn assert_hung_up(s: &mut AudioSocketSession, e: &SessionError) {
    assert!(
        matches!(s.ended(), Some(EndReason::Protocol(x)) if x == e),
        "{:?}",
        s.ended()
    );
    assert_eq!(s.poll_transmit().as_deref(), Some(&HANGUP[..]));
    let evs: Vec<_> = std::iter::from_fn(|| s.poll_event()).collect();
    assert!(
        matches!(evs.last(), Some(LegEvent::Stop(crate::leg::StopReason::Failed(why))) if why == &format!("protocol error: {e}")),
        "{evs:?}"
    );
}

#[test]
fn protocol_errors_hang_up_cleanly() {
    let now = Instant::now();
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (vec![0x10, 0, 2, 0, 0], "before the UUID"),
        (
            bytes(|b| {
                encode_raw(KIND_UUID, &UUID, b);
                b.extend_from_slice(&[0x42, 0, 0]);
            }),
            "unknown message kind 0x42",
        ),
        (
            bytes(|b| {
                encode_raw(KIND_UUID, &UUID, b);
                b.extend_from_slice(&[0x10, 0, 0]);
            }),
            "length 0",
        ),
        (
            bytes(|b| {
                encode_raw(KIND_UUID, &UUID, b);
                b.extend_from_slice(&[0x10, 0xFF, 0xFF]);
            }),
            "above the 8192-byte limit",
        ),
        (
            bytes(|b| {
                encode_raw(KIND_UUID, &UUID, b);
                encode_raw(KIND_UUID, &UUID, b);
            }),
            "a second UUID",
        ),
        (
            bytes(|b| {
                encode_raw(KIND_UUID, &UUID, b);
                encode_audio(0x10, &[0; 160], b);
                encode_audio(0x12, &[0; 320], b);
            }),
            "changed from 8000 Hz to 16000 Hz",
        ),
        (
            bytes(|b| {
                encode_raw(KIND_UUID, &UUID, b);
                encode_audio(0x15, &[0; 882], b);
            }),
            "44100 Hz",
        ),
    ];
    for (input, want) in cases {
        let mut s = AudioSocketSession::new(wire::DEFAULT_MAX_PAYLOAD);
        let e = s.handle_bytes(&input, now).unwrap_err();
        assert!(e.to_string().contains(want), "{want:?} not in {e}");
        assert_hung_up(&mut s, &e);
        // Nothing more is taken from a connection that broke the protocol.
        s.handle_bytes(&[0x10, 0, 2, 1, 1], now).unwrap();
        assert!(s.poll_event().is_none());
    }
}

/// 44.1 kHz is refused as a rate baton does not support (882 samples is a whole 20 ms frame), and
/// the refusal names the kinds that are.
#[test]
fn an_unsupported_rate_names_the_supported_kinds() {
    let now = Instant::now();
    let mut s = AudioSocketSession::new(wire::DEFAULT_MAX_PAYLOAD);
    let input = bytes(|b| {
        encode_raw(KIND_UUID, &UUID, b);
        encode_audio(0x15, &[0; 882], b);
    });
    let e = s.handle_bytes(&input, now).unwrap_err();
    assert_eq!(
        e.to_string(),
        "slin at 44100 Hz (kind 0x15) is not supported; the supported kinds are \
         slin (0x10, 8000 Hz), slin12 (0x11, 12000 Hz), slin16 (0x12, 16000 Hz), \
         slin24 (0x13, 24000 Hz), slin32 (0x14, 32000 Hz), slin48 (0x16, 48000 Hz), \
         slin96 (0x17, 96000 Hz), slin192 (0x18, 192000 Hz)"
    );
    assert_hung_up(&mut s, &e);
    // Every kind it names starts a call.
    for (kind, rate) in wire::SLIN_RATES.into_iter().filter(|(k, _)| *k != 0x15) {
        let frame = vec![0i16; rate as usize / 50];
        let s = started(kind, &frame, now);
        assert_eq!(s.start_info().map(|i| i.rate), Some(rate));
    }
}

#[test]
fn truncated_messages_are_errors_at_eof_and_on_a_stall() {
    let now = Instant::now();
    let mut s = started(0x10, &[0; 160], now);
    s.handle_bytes(&[0x10, 0x01], now).unwrap();
    assert_eq!(s.pending_bytes(), 2);
    let e = s.handle_eof(now).unwrap_err();
    assert_eq!(
        e,
        SessionError::Wire(WireError::TruncatedHeader { have: 2 })
    );
    assert_hung_up(&mut s, &e);

    let mut s = started(0x10, &[0; 160], now);
    s.handle_bytes(&[0x10, 0x01, 0x40, 1, 2, 3], now).unwrap();
    let e = s.handle_timeout(Duration::from_secs(1), now);
    assert_eq!(e, SessionError::Stalled(Duration::from_secs(1)));
    assert_hung_up(&mut s, &e);

    let mut s = started(0x10, &[0; 160], now);
    assert!(
        s.handle_eof(now).is_ok(),
        "EOF between messages is a plain hang-up"
    );
    assert_eq!(s.ended(), Some(&EndReason::Closed));
}

#[test]
fn peer_error_flags_end_the_call() {
    let now = Instant::now();
    let mut s = started(0x10, &[0; 160], now);
    s.handle_bytes(&[0xFF, 0, 1, 0x02], now).unwrap();
    assert_eq!(
        s.ended(),
        Some(&EndReason::PeerError(
            "frame forwarding error (0x02)".into()
        ))
    );
    let evs: Vec<_> = std::iter::from_fn(|| s.poll_event()).collect();
    assert!(
        matches!(evs.last(), Some(LegEvent::Stop(crate::leg::StopReason::Failed(why)))
            if why == "the peer reported an error: frame forwarding error (0x02)"),
        "{evs:?}"
    );
}

/// Asterisk's error flag 0x01 alone says the calling party hung up: a hang-up, not a failure;
/// with another flag beside it, something broke.
#[test]
fn the_caller_hung_up_error_flag_is_a_hang_up() {
    let now = Instant::now();
    let mut s = started(0x10, &[0; 160], now);
    s.handle_bytes(&[0xFF, 0, 1, 0x01], now).unwrap();
    assert_eq!(s.ended(), Some(&EndReason::PeerHangup));
    let evs: Vec<_> = std::iter::from_fn(|| s.poll_event()).collect();
    assert!(
        matches!(
            evs.last(),
            Some(LegEvent::Stop(crate::leg::StopReason::HungUp))
        ),
        "{evs:?}"
    );
    let mut s = started(0x10, &[0; 160], now);
    s.handle_bytes(&[0xFF, 0, 1, 0x03], now).unwrap();
    assert!(matches!(s.ended(), Some(EndReason::PeerError(_))));
}

#[test]
fn outbound_frames_go_out_as_played_and_idle_silence_is_skipped() {
    let t0 = Instant::now();
    let mut s = started(0x12, &[0; 320], t0);
    let frame = |ms: u64| Frame {
        rate: 16_000,
        ts: Duration::from_millis(ms),
        samples: vec![0x0102; 320],
    };
    s.play(&frame(0), PlayedKind::Voice, t0).unwrap();
    let msg = s.poll_transmit().unwrap();
    assert_eq!(&msg[..5], &[0x12, 0x02, 0x80, 0x02, 0x01]);
    assert_eq!(msg.len(), 3 + 640);
    s.play(
        &frame(20),
        PlayedKind::Underrun,
        t0 + Duration::from_millis(20),
    )
    .unwrap();
    s.play(
        &frame(40),
        PlayedKind::Silence,
        t0 + Duration::from_millis(40),
    )
    .unwrap();
    assert!(s.poll_transmit().is_some());
    assert!(s.poll_transmit().is_none(), "idle silence is not sent");
    assert_eq!(s.stats().silence_skipped, 1);
    assert_eq!(s.take_send_intervals().kept(), [20_000]);
    let wrong = Frame::silence(8000, Duration::ZERO);
    assert!(matches!(
        s.play(&wrong, PlayedKind::Voice, t0),
        Err(SessionError::WrongRate {
            rate: 8000,
            leg: 16_000
        })
    ));
    s.hangup();
    assert_eq!(s.poll_transmit().as_deref(), Some(&HANGUP[..]));
    assert!(s.play(&frame(60), PlayedKind::Voice, t0).is_err());
}

#[test]
fn nothing_plays_before_the_rate_is_known() {
    let mut s = AudioSocketSession::new(wire::DEFAULT_MAX_PAYLOAD);
    let f = Frame::silence(8000, Duration::ZERO);
    assert_eq!(
        s.play(&f, PlayedKind::Voice, Instant::now()),
        Err(SessionError::NotStarted)
    );
}
