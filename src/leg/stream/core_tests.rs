//! Unit tests of the /stream core.
use super::*;
use crate::leg::stream::wire::Encoding;

const START16: &str = r#"{"event":"start","format":{"encoding":"pcm16","sample_rate":16000}}"#;

fn texts(c: &mut StreamCore) -> Vec<String> {
    std::iter::from_fn(|| c.poll_transmit())
        .filter_map(|t| match t {
            Transmit::Text(s) => Some(s),
            Transmit::Binary(_) => None,
        })
        .collect()
}

fn started(start: &str) -> StreamCore {
    let mut c = StreamCore::new();
    c.handle_text(start, Instant::now()).unwrap();
    c
}

#[test]
fn start_is_acknowledged_with_the_format() {
    let mut c = started(START16);
    assert_eq!(
        c.format(),
        Some(Format {
            encoding: Encoding::Pcm16,
            sample_rate: 16000
        })
    );
    assert_eq!(
        texts(&mut c),
        [r#"{"event":"started","format":{"encoding":"pcm16","sample_rate":16000},"frame_ms":20}"#]
    );
    assert!(matches!(
        c.handle_text(START16, Instant::now()),
        Err(StreamError::DuplicateStart)
    ));
    assert!(c.ended().is_none());
}

#[test]
fn a_bad_or_missing_start_refuses_the_stream() {
    let cases = [
        (
            r#"{"event":"start","format":{"encoding":"mp3","sample_rate":16000}}"#,
            "unknown encoding",
            true,
        ),
        (
            r#"{"event":"start","format":{"encoding":"opus","sample_rate":11025}}"#,
            "sample_rate 11025",
            true,
        ),
        (
            r#"{"event":"mark","name":"x"}"#,
            "\"mark\" before \"start\"",
            false,
        ),
        ("garbage", "not JSON", false),
    ];
    for (text, want, format) in cases {
        let mut c = StreamCore::new();
        let e = c.handle_text(text, Instant::now()).unwrap_err();
        assert!(e.to_string().contains(want), "{want:?} not in {e}");
        assert!(
            matches!(c.ended(), Some(EndReason::Refused { format: f, .. }) if *f == format),
            "{:?}",
            c.ended()
        );
        let t = texts(&mut c);
        assert!(
            t[0].contains(r#""event":"error""#) && t[0].contains(r#""fatal":true"#),
            "{t:?}"
        );
    }
    let mut c = StreamCore::new();
    assert!(matches!(
        c.handle_binary(&[0; 640], Instant::now()),
        Err(StreamError::Refused(_))
    ));
}

#[test]
fn inbound_audio_of_any_size_becomes_20_ms_frames() {
    let now = Instant::now();
    let mut c = started(r#"{"event":"start","format":{"encoding":"pcm16","sample_rate":8000}}"#);
    // 1001 bytes, then 319: 660 samples = four 160-sample frames and 20 left.
    c.handle_binary(&[0; 1001], now).unwrap();
    c.handle_binary(&[0; 319], now).unwrap();
    let frames: Vec<Frame> = std::iter::from_fn(|| c.poll_event())
        .filter_map(|e| match e {
            LegEvent::Frame { frame, .. } => Some(frame),
            _ => None,
        })
        .collect();
    let ts: Vec<u128> = frames.iter().map(|f| f.ts.as_millis()).collect();
    assert_eq!(ts, [0, 20, 40, 60]);
    c.handle_text(r#"{"event":"stop"}"#, now).unwrap();
    let evs: Vec<_> = std::iter::from_fn(|| c.poll_event()).collect();
    assert!(matches!(&evs[0], LegEvent::Frame { frame, .. } if frame.ts.as_millis() == 80));
    assert!(matches!(
        evs[1],
        LegEvent::Stop(crate::leg::StopReason::HungUp)
    ));
}

fn voice(ms: u64) -> Frame {
    Frame {
        rate: 16000,
        ts: Duration::from_millis(ms),
        samples: vec![100; 320],
    }
}

#[test]
fn a_mark_follows_each_reply_and_its_echo_is_heard() {
    let t0 = Instant::now();
    let mut c = started(START16);
    let _ = texts(&mut c);
    for (i, ms) in [0u64, 20, 40].into_iter().enumerate() {
        c.play(
            &voice(ms),
            PlayedKind::Voice,
            t0 + Duration::from_millis(20 * i as u64),
        )
        .unwrap();
    }
    c.play(
        &Frame::silence(16000, Duration::from_millis(60)),
        PlayedKind::Silence,
        t0,
    )
    .unwrap();
    c.play(
        &Frame::silence(16000, Duration::from_millis(80)),
        PlayedKind::Silence,
        t0,
    )
    .unwrap();
    let out: Vec<Transmit> = std::iter::from_fn(|| c.poll_transmit()).collect();
    assert_eq!(out.len(), 4, "three frames, one mark, no idle silence");
    assert!(matches!(&out[0], Transmit::Binary(b) if b.len() == 640));
    assert_eq!(
        out[3],
        Transmit::Text(r#"{"event":"mark","name":"reply-1"}"#.into())
    );
    assert_eq!(c.take_send_intervals().kept(), [20_000, 20_000]);
    c.handle_text(r#"{"event":"mark","name":"reply-1"}"#, t0)
        .unwrap();
    assert!(matches!(
        c.poll_event(),
        Some(LegEvent::Heard { up_to }) if up_to == Duration::from_millis(60)
    ));
    assert_eq!(c.stats().marks_played, 1);
}

#[test]
fn clear_drops_the_reply_and_its_pending_marks() {
    let t0 = Instant::now();
    let mut c = started(START16);
    c.play(&voice(0), PlayedKind::Voice, t0).unwrap();
    c.play(
        &Frame::silence(16000, Duration::from_millis(20)),
        PlayedKind::Silence,
        t0,
    )
    .unwrap();
    c.play(&voice(40), PlayedKind::Voice, t0).unwrap();
    c.clear().unwrap();
    c.play(
        &Frame::silence(16000, Duration::from_millis(60)),
        PlayedKind::Silence,
        t0,
    )
    .unwrap();
    let t = texts(&mut c);
    assert_eq!(
        t[1..],
        [
            r#"{"event":"mark","name":"reply-1"}"#,
            r#"{"event":"clear"}"#
        ],
        "the cut reply gets no mark"
    );
    c.handle_text(r#"{"event":"mark","name":"reply-1"}"#, t0)
        .unwrap();
    assert!(c.poll_event().is_none(), "an echo after clear is not heard");
    assert_eq!(c.stats().marks_dropped, 1);
}

#[test]
fn finish_sends_stop_with_the_summary() {
    let mut c = started(START16);
    let _ = texts(&mut c);
    c.notify(&ToClient::Transcript {
        role: "agent",
        text: "Hello".into(),
        finished: false,
    });
    c.finish("caller hung up".into(), serde_json::json!({"turns": []}));
    let t = texts(&mut c);
    assert_eq!(
        t[0],
        r#"{"event":"transcript","role":"agent","text":"Hello","finished":false}"#
    );
    assert_eq!(
        t[1],
        r#"{"event":"stop","reason":"caller hung up","summary":{"turns":[]}}"#
    );
    assert_eq!(c.ended(), Some(&EndReason::Hangup));
    assert!(
        c.play(&voice(0), PlayedKind::Voice, Instant::now())
            .is_err()
    );
}
