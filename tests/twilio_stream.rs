//! The sans-IO core of one Twilio stream, driven message by message with a hand-held clock:
//! re-framing of any payload size, gaps, ordering errors, DTMF, marks per outbound frame, idle
//! silence not sent, and clear turning pending marks into "dropped" rather than "heard".

use std::time::Duration;

use baton::audio::Frame;
use baton::audio::g711;
use baton::leg::LegEvent;
use baton::leg::PlayedKind;
use baton::leg::twilio::stream::{EndReason, StreamError, StreamOptions, TwilioStream};
use baton::leg::twilio::wire::{FromTwilio, Media, ToTwilio, TwilioEvent};
use tokio::time::Instant;

const START: &str = r#"{"event":"start","sequenceNumber":"1","streamSid":"MZ1",
    "start":{"streamSid":"MZ1","accountSid":"AC1","callSid":"CA1","tracks":["inbound"],
    "customParameters":{"tenant":"acme"},
    "mediaFormat":{"encoding":"audio/x-mulaw","sampleRate":8000,"channels":1}}}"#;

fn started(opts: StreamOptions) -> (TwilioStream, Instant) {
    let t0 = Instant::now();
    let mut s = TwilioStream::new(opts);
    s.handle_text(
        r#"{"event":"connected","protocol":"Call","version":"1.0.0"}"#,
        t0,
    )
    .unwrap();
    s.handle_text(START, t0).unwrap();
    assert_eq!(s.start_info().unwrap().stream_sid, "MZ1");
    assert_eq!(s.start_info().unwrap().custom_parameters["tenant"], "acme");
    assert_eq!(s.started_at(), Some(t0));
    (s, t0)
}

fn media(payload: Vec<u8>, timestamp: Option<u64>, chunk: Option<u64>) -> FromTwilio {
    FromTwilio {
        sequence_number: None,
        stream_sid: Some("MZ1".into()),
        event: TwilioEvent::Media(Media {
            track: Some("inbound".into()),
            chunk,
            timestamp,
            payload,
        }),
    }
}

fn mark_echo(name: &str) -> String {
    format!(r#"{{"event":"mark","streamSid":"MZ1","mark":{{"name":"{name}"}}}}"#)
}

/// Frames (ts, samples) and other events drained from the core.
fn drain(s: &mut TwilioStream) -> (Vec<(Duration, Vec<i16>)>, Vec<LegEvent>) {
    let (mut frames, mut other) = (Vec::new(), Vec::new());
    while let Some(ev) = s.poll_event() {
        match ev {
            LegEvent::Frame { frame, .. } => {
                assert_eq!(frame.rate, 8000);
                assert_eq!(frame.samples.len(), 160, "every frame is exactly 20 ms");
                frames.push((frame.ts, frame.samples));
            }
            e => other.push(e),
        }
    }
    (frames, other)
}

fn transmits(s: &mut TwilioStream) -> Vec<ToTwilio> {
    std::iter::from_fn(|| s.poll_transmit()).collect()
}

fn voice(ts_ms: u64, level: i16) -> Frame {
    Frame {
        rate: 8000,
        ts: Duration::from_millis(ts_ms),
        samples: vec![level; 160],
    }
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[test]
fn payloads_of_any_size_are_reframed_exactly() {
    let (mut s, t0) = started(StreamOptions::default());
    // Distinct codes, so that any lost, duplicated or reordered byte shows.
    let codes: Vec<u8> = (0..642u32).map(|i| (i * 7 % 256) as u8).collect();
    let mut pos = 0usize;
    for (k, len) in [1usize, 159, 161, 321].into_iter().enumerate() {
        // Whole milliseconds, rounded up or down: the rounding is neither a gap nor an overlap.
        let ts = if k % 2 == 0 { pos / 8 } else { pos.div_ceil(8) } as u64;
        s.handle(
            media(codes[pos..pos + len].to_vec(), Some(ts), Some(k as u64 + 1)),
            t0,
        )
        .unwrap();
        pos += len;
    }
    let (frames, other) = drain(&mut s);
    assert!(other.is_empty());
    assert_eq!(frames.len(), 4, "642 bytes make four whole frames");
    let mut expect = Vec::new();
    g711::decode_ulaw(&codes, &mut expect);
    for (i, (ts, samples)) in frames.iter().enumerate() {
        assert_eq!(*ts, ms(20 * i as u64));
        assert_eq!(samples[..], expect[i * 160..(i + 1) * 160], "frame {i}");
    }
    assert_eq!(s.stats().gaps, 0, "ms rounding of timestamps is not a gap");
    assert_eq!(s.stats().overlaps, 0, "nor an overlap");
    assert_eq!(s.stats().frames_in, 4);

    // stop flushes the last two bytes as a padded frame, then reports Stop.
    s.handle_text(r#"{"event":"stop","streamSid":"MZ1","stop":{}}"#, t0)
        .unwrap();
    let (frames, other) = drain(&mut s);
    assert_eq!(frames.len(), 1);
    assert_eq!(frames[0].0, ms(80));
    assert_eq!(frames[0].1[..2], expect[640..642]);
    assert!(frames[0].1[2..].iter().all(|&x| x == 0));
    assert!(matches!(
        other[..],
        [LegEvent::Stop(baton::leg::StopReason::HungUp)]
    ));
    assert_eq!(s.ended(), Some(&EndReason::Stopped));
    let e = s
        .handle(media(vec![0; 160], Some(100), None), t0)
        .unwrap_err();
    assert!(e.to_string().contains("after the stream ended"), "{e}");
}

#[test]
fn frame_timestamps_follow_twilio_and_short_gaps_are_filled() {
    let (mut s, t0) = started(StreamOptions::default());
    // The first media fixes the origin (Twilio's first timestamp is rarely 0).
    s.handle(media(vec![0x10; 160], Some(5), Some(1)), t0)
        .unwrap();
    s.handle(media(vec![0x10; 160], Some(25), Some(2)), t0)
        .unwrap();
    // 100 ms missing (chunks 3..7): filled with five silent frames.
    s.handle(media(vec![0x10; 160], Some(145), Some(8)), t0)
        .unwrap();
    let (frames, _) = drain(&mut s);
    let ts: Vec<u64> = frames.iter().map(|f| f.0.as_millis() as u64).collect();
    assert_eq!(ts, [5, 25, 45, 65, 85, 105, 125, 145]);
    assert!(frames[2..7].iter().all(|f| f.1.iter().all(|&x| x == 0)));
    assert_eq!((s.stats().gaps, s.stats().gap_filled_ms), (1, 100));

    // One second missing: not filled; the timeline jumps.
    s.handle(media(vec![0x10; 160], Some(1165), Some(59)), t0)
        .unwrap();
    let (frames, _) = drain(&mut s);
    assert_eq!(frames.len(), 1);
    assert_eq!(frames[0].0, ms(1165));
    assert_eq!((s.stats().gaps, s.stats().gaps_unfilled), (2, 1));
    assert_eq!(s.stats().gap_filled_ms, 100);
}

#[test]
fn without_timestamps_chunk_jumps_reveal_gaps() {
    let (mut s, t0) = started(StreamOptions::default());
    s.handle(media(vec![0x10; 160], None, Some(1)), t0).unwrap();
    s.handle(media(vec![0x10; 160], None, Some(4)), t0).unwrap();
    let (frames, _) = drain(&mut s);
    let ts: Vec<u64> = frames.iter().map(|f| f.0.as_millis() as u64).collect();
    assert_eq!(ts, [0, 20, 40, 60]);
    assert_eq!((s.stats().gaps, s.stats().gap_filled_ms), (1, 40));
}

#[test]
fn a_gap_longer_than_the_fill_limit_pads_the_partial_frame() {
    let opts = StreamOptions {
        max_filled_gap: Duration::from_millis(50),
        ..Default::default()
    };
    let (mut s, t0) = started(opts);
    s.handle(media(vec![0x10; 80], Some(0), Some(1)), t0)
        .unwrap();
    s.handle(media(vec![0x10; 160], Some(70), Some(2)), t0)
        .unwrap();
    let (frames, _) = drain(&mut s);
    assert_eq!(frames.len(), 2);
    assert_eq!(frames[0].0, ms(0));
    assert!(frames[0].1[80..].iter().all(|&x| x == 0));
    assert_eq!(frames[1].0, ms(70));
    assert_eq!(s.stats().gaps_unfilled, 1);
}

#[test]
fn messages_out_of_order_are_refused_alone() {
    let t0 = Instant::now();
    let mut s = TwilioStream::new(StreamOptions::default());
    let e = s
        .handle(media(vec![0xFF; 160], Some(0), Some(1)), t0)
        .unwrap_err();
    assert!(matches!(e, StreamError::BeforeStart { event: "media" }));
    assert!(e.to_string().contains("\"media\" before \"start\""), "{e}");
    assert!(s.poll_event().is_none());
    let e = s.play(&voice(0, 100), PlayedKind::Voice, t0).unwrap_err();
    assert_eq!(e, StreamError::NotStarted);

    s.handle_text(START, t0).unwrap();
    let e = s.handle_text(START, t0).unwrap_err();
    assert!(e.to_string().contains("second \"start\""), "{e}");
    // Garbage in between harms nothing.
    assert!(s.handle_text("not json", t0).is_err());
    assert!(
        s.handle_text(r#"{"event":"media","media":{"payload":"@@"}}"#, t0)
            .is_err()
    );
    s.handle_text(r#"{"event":"someday","x":1}"#, t0).unwrap();
    s.handle(media(vec![0xFF; 160], Some(0), Some(1)), t0)
        .unwrap();
    let (frames, _) = drain(&mut s);
    assert_eq!(frames.len(), 1);
    assert_eq!(s.stats().bad_messages, 4);
    assert_eq!(s.stats().unknown_events, 1);
    // A timestamp at the end of u64 is refused as a gap, not a panic.
    s.handle(media(vec![0xFF; 160], Some(u64::MAX), Some(u64::MAX)), t0)
        .unwrap();
}

#[test]
fn wrong_account_or_format_ends_the_stream() {
    let opts = StreamOptions {
        expected_account_sid: Some("AC2".into()),
        ..Default::default()
    };
    let mut s = TwilioStream::new(opts);
    let e = s.handle_text(START, Instant::now()).unwrap_err();
    assert!(matches!(
        e,
        StreamError::Refused(EndReason::AccountMismatch { .. })
    ));
    assert!(
        e.to_string().contains("AC1") && e.to_string().contains("AC2"),
        "{e}"
    );
    assert!(s.ended().is_some() && s.start_info().is_none());

    let mut s = TwilioStream::new(StreamOptions::default());
    let alaw = START.replace("audio/x-mulaw", "audio/x-alaw");
    let e = s.handle_text(&alaw, Instant::now()).unwrap_err();
    assert!(e.to_string().contains("audio/x-alaw"), "{e}");
    assert!(matches!(s.ended(), Some(EndReason::UnsupportedFormat(_))));
}

#[test]
fn dtmf_reaches_the_call() {
    let (mut s, t0) = started(StreamOptions::default());
    s.handle_text(
        r#"{"event":"dtmf","streamSid":"MZ1","dtmf":{"track":"inbound_track","digit":"7"}}"#,
        t0,
    )
    .unwrap();
    let (_, other) = drain(&mut s);
    assert!(matches!(other[..], [LegEvent::Dtmf { digit: '7' }]));
}

#[test]
fn each_outbound_frame_is_media_then_a_mark_and_echoes_are_heard() {
    let (mut s, t0) = started(StreamOptions::default());
    for i in 0..3u64 {
        s.play(
            &voice(20 * i, 1000 * i as i16),
            PlayedKind::Voice,
            t0 + ms(20 * i),
        )
        .unwrap();
    }
    let out = transmits(&mut s);
    assert_eq!(out.len(), 6);
    for (i, pair) in out.chunks(2).enumerate() {
        let ToTwilio::Media {
            stream_sid,
            payload,
        } = &pair[0]
        else {
            panic!("{pair:?}")
        };
        assert_eq!(stream_sid, "MZ1");
        assert_eq!(payload.len(), 160, "20 ms of μ-law");
        assert!(
            payload
                .iter()
                .all(|&c| c == g711::ulaw_encode(1000 * i as i16))
        );
        let ToTwilio::Mark { name, .. } = &pair[1] else {
            panic!("{pair:?}")
        };
        assert_eq!(name, &format!("b:{}", 20 * i));
    }
    assert_eq!(s.pending_marks(), 3);
    for name in ["b:0", "b:20", "b:40"] {
        s.handle_text(&mark_echo(name), t0).unwrap();
    }
    let (_, heard) = drain(&mut s);
    let up_to: Vec<Duration> = heard
        .iter()
        .map(|e| match e {
            LegEvent::Heard { up_to } => *up_to,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(up_to, [ms(20), ms(40), ms(60)]);
    assert_eq!((s.stats().marks_played, s.stats().marks_dropped), (3, 0));
    // An echo of a mark never sent is counted, not reported.
    s.handle_text(&mark_echo("other"), t0).unwrap();
    assert!(s.poll_event().is_none());
    assert_eq!(s.stats().marks_unknown, 1);
}

#[test]
fn idle_silence_is_not_sent_but_underruns_are() {
    let (mut s, t0) = started(StreamOptions::default());
    s.play(&Frame::silence(8000, ms(0)), PlayedKind::Silence, t0)
        .unwrap();
    assert!(s.poll_transmit().is_none());
    s.play(&Frame::silence(8000, ms(20)), PlayedKind::Underrun, t0)
        .unwrap();
    let out = transmits(&mut s);
    assert!(matches!(
        out[..],
        [ToTwilio::Media { .. }, ToTwilio::Mark { .. }]
    ));
    assert_eq!((s.stats().silence_skipped, s.stats().frames_out), (1, 1));
    let e = s
        .play(&Frame::silence(16000, ms(40)), PlayedKind::Voice, t0)
        .unwrap_err();
    assert!(e.to_string().contains("16000 Hz"), "{e}");
}

#[test]
fn clear_turns_pending_marks_into_dropped_not_heard() {
    let (mut s, t0) = started(StreamOptions::default());
    for i in 0..5u64 {
        s.play(&voice(20 * i, 500), PlayedKind::Voice, t0).unwrap();
    }
    let _ = transmits(&mut s);
    s.handle_text(&mark_echo("b:0"), t0).unwrap();
    s.handle_text(&mark_echo("b:20"), t0).unwrap();
    s.clear().unwrap();
    assert!(
        matches!(transmits(&mut s)[..], [ToTwilio::Clear { ref stream_sid }] if stream_sid == "MZ1")
    );
    // Twilio echoes every pending mark once the clear is done.
    for name in ["b:40", "b:60", "b:80"] {
        s.handle_text(&mark_echo(name), t0).unwrap();
    }
    // Audio sent after the clear is heard again.
    s.play(&voice(100, 500), PlayedKind::Voice, t0).unwrap();
    s.handle_text(&mark_echo("b:100"), t0).unwrap();
    let (_, events) = drain(&mut s);
    let heard: Vec<Duration> = events
        .iter()
        .filter_map(|e| match e {
            LegEvent::Heard { up_to } => Some(*up_to),
            _ => None,
        })
        .collect();
    assert_eq!(heard, [ms(20), ms(40), ms(120)]);
    let st = s.stats();
    assert_eq!((st.marks_played, st.marks_dropped, st.clears), (3, 3, 1));
    assert_eq!(s.pending_marks(), 0);
}

#[test]
fn send_intervals_are_kept_within_continuous_runs() {
    let (mut s, t0) = started(StreamOptions::default());
    for (i, at) in [0u64, 20, 41, 60].into_iter().enumerate() {
        s.play(&voice(20 * i as u64, 1), PlayedKind::Voice, t0 + ms(at))
            .unwrap();
    }
    // A later turn after a pause: the pause is not an interval.
    s.play(&voice(1000, 1), PlayedKind::Voice, t0 + ms(1000))
        .unwrap();
    s.play(&voice(1020, 1), PlayedKind::Voice, t0 + ms(1020))
        .unwrap();
    assert_eq!(s.send_intervals_us(), [20_000, 21_000, 19_000, 20_000]);
}
