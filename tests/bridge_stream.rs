//! The sans-IO bridge core in each dialect, driven message by message with a hand-held clock: the
//! caller's own opening read (formats included), Telnyx media put back in order, Plivo's epoch
//! timestamps, L16 in both byte orders and A-law, Exotel's batched outbound chunks, each dialect's
//! marks and clear acknowledgements, and detection on a shared path.

use std::time::Duration;

use baton::audio::Frame;
use baton::leg::bridge::audio::{AudioFormat, Encoding};
use baton::leg::bridge::stream::{EndReason, MediaStream, StreamError, StreamOptions};
use baton::leg::bridge::wire::{self, BridgeWriter, CallIds, Outgoing, Reply, Transmit};
use baton::leg::bridge::{Dialect, DialectChoice};
use baton::leg::{LegEvent, PlayedKind};
use tokio::time::Instant;

fn writer(d: Dialect, f: AudioFormat) -> BridgeWriter {
    let ids = CallIds {
        account_sid: "AC1".into(),
        call_sid: "CA1".into(),
        stream_sid: "S1".into(),
        ..Default::default()
    };
    BridgeWriter::new(d, ids, f)
}

fn feed(s: &mut MediaStream, m: Outgoing, now: Instant) -> Result<(), StreamError> {
    match m {
        Outgoing::Text(t) => s.handle_text(&t, now),
        Outgoing::Binary(b) => s.handle_binary(&b, now),
    }
}

/// A stream of `choice` opened by `w`'s caller.
fn opened(choice: DialectChoice, w: &BridgeWriter, opts: StreamOptions) -> (MediaStream, Instant) {
    let t0 = Instant::now();
    let mut s = MediaStream::new(choice, opts);
    let mut seq = 0;
    for m in w.opening(&mut seq) {
        feed(&mut s, m, t0).unwrap();
    }
    let info = s.start_info().expect("started");
    assert_eq!(info.dialect, w.dialect);
    assert_eq!(info.format, w.format);
    (s, t0)
}

/// One 20 ms frame of a ramp, encoded as `w` sends it.
fn ramp(f: AudioFormat, k: i16) -> Vec<u8> {
    let pcm: Vec<i16> = (0..f.frame_samples() as i16)
        .map(|i| (i + k * 7) * 40)
        .collect();
    let mut out = Vec::new();
    f.encode(&pcm, &mut out);
    out
}

fn frames(s: &mut MediaStream) -> (Vec<(Duration, Vec<i16>)>, Vec<LegEvent>) {
    let (mut frames, mut other) = (Vec::new(), Vec::new());
    while let Some(ev) = s.poll_event() {
        match ev {
            LegEvent::Frame { frame, .. } => {
                assert_eq!(frame.samples.len(), frame.rate as usize / 50);
                frames.push((frame.ts, frame.samples));
            }
            e => other.push(e),
        }
    }
    (frames, other)
}

fn transmits(s: &mut MediaStream) -> Vec<Transmit> {
    std::iter::from_fn(|| s.poll_transmit()).collect()
}

fn voice(f: AudioFormat, ts_ms: u64) -> Frame {
    Frame {
        rate: f.rate,
        ts: Duration::from_millis(ts_ms),
        samples: vec![1000; f.frame_samples()],
    }
}

#[test]
fn every_dialect_reads_its_callers_opening_media_and_stop_in_every_format() {
    let cases = [
        (Dialect::Twilio, AudioFormat::PCMU_8K),
        (Dialect::Telnyx, AudioFormat::PCMU_8K),
        (Dialect::Telnyx, AudioFormat::new(Encoding::Pcma, 8000)),
        (Dialect::Telnyx, AudioFormat::new(Encoding::L16Be, 16000)),
        (Dialect::Plivo, AudioFormat::PCMU_8K),
        (Dialect::Plivo, AudioFormat::new(Encoding::L16Le, 16000)),
        (Dialect::Exotel, AudioFormat::new(Encoding::L16Le, 8000)),
        (Dialect::Exotel, AudioFormat::PCMU_8K),
        (Dialect::Vonage, AudioFormat::new(Encoding::L16Le, 16000)),
        (Dialect::Vonage, AudioFormat::new(Encoding::L16Le, 24000)),
    ];
    for (d, f) in cases {
        for choice in [DialectChoice::Fixed(d), DialectChoice::Detect] {
            let w = writer(d, f);
            let (mut s, t0) = opened(choice, &w, StreamOptions::default());
            for k in 0..3u64 {
                let m = w.media(10 + k, k + 1, k * 20, &ramp(f, k as i16));
                feed(&mut s, m, t0 + Duration::from_millis(20 * k)).unwrap();
            }
            feed(&mut s, w.dtmf(20, '7'), t0).unwrap();
            let (got, other) = frames(&mut s);
            assert_eq!(got.len(), 3, "{d} {f}");
            for (k, (ts, samples)) in got.iter().enumerate() {
                assert_eq!(*ts, Duration::from_millis(20 * k as u64), "{d} {f}");
                let mut want = Vec::new();
                f.decode(&ramp(f, k as i16), &mut want);
                assert_eq!(samples, &want, "{d} {f}: decoded exactly as encoded");
            }
            assert!(matches!(other[..], [LegEvent::Dtmf { digit: '7' }]), "{d}");
            if let Some(stop) = w.stop(21) {
                feed(&mut s, stop, t0).unwrap();
                assert_eq!(s.ended(), Some(&EndReason::Stopped));
            }
            assert_eq!(s.stats().bad_messages, 0, "{d} {f}");
        }
    }
}

#[test]
fn telnyx_media_out_of_order_is_put_back_in_chunk_order() {
    let f = AudioFormat::PCMU_8K;
    let w = writer(Dialect::Telnyx, f);
    let (mut s, t0) = opened(
        DialectChoice::Fixed(Dialect::Telnyx),
        &w,
        StreamOptions::default(),
    );
    // Chunks 1..=8 arrive as 1 2 4 3 5 7 6 8.
    for k in [1u64, 2, 4, 3, 5, 7, 6, 8] {
        let m = w.media(k + 1, k, (k - 1) * 20, &ramp(f, k as i16));
        feed(&mut s, m, t0).unwrap();
    }
    let (got, _) = frames(&mut s);
    assert_eq!(got.len(), 8);
    for (i, (ts, samples)) in got.iter().enumerate() {
        let k = i as i16 + 1;
        assert_eq!(*ts, Duration::from_millis(20 * i as u64));
        let mut want = Vec::new();
        f.decode(&ramp(f, k), &mut want);
        assert_eq!(samples, &want, "frame {i} carries chunk {k}");
    }
    assert_eq!(s.stats().reordered, 2);
    assert_eq!(s.stats().gaps, 0);

    // A chunk that never comes is given up after the window; the hole is filled with silence and
    // the chunk arriving afterwards is dropped as late.
    let (mut s, t0) = opened(
        DialectChoice::Fixed(Dialect::Telnyx),
        &w,
        StreamOptions::default(),
    );
    for k in [1u64, 3, 4, 5, 6, 2, 7] {
        feed(&mut s, w.media(k + 1, k, (k - 1) * 20, &ramp(f, 1)), t0).unwrap();
    }
    let (got, _) = frames(&mut s);
    assert_eq!(got.len(), 7, "six chunks and one frame of filled silence");
    assert!(
        got[1].1.iter().all(|&x| x == 0),
        "chunk 2's place is silence"
    );
    assert_eq!((s.stats().late, s.stats().gap_filled_ms), (1, 20));

    // Twilio keeps its order as received (TCP delivers in order).
    let tw = writer(Dialect::Twilio, f);
    let (mut s, t0) = opened(
        DialectChoice::Fixed(Dialect::Twilio),
        &tw,
        StreamOptions::default(),
    );
    for k in [1u64, 3, 2] {
        feed(&mut s, tw.media(k + 1, k, (k - 1) * 20, &ramp(f, 1)), t0).unwrap();
    }
    assert_eq!(s.stats().reordered, 0);
}

#[test]
fn plivo_epoch_timestamps_start_the_timeline_at_zero() {
    let f = AudioFormat::PCMU_8K;
    let w = writer(Dialect::Plivo, f);
    let (mut s, t0) = opened(
        DialectChoice::Fixed(Dialect::Plivo),
        &w,
        StreamOptions::default(),
    );
    feed(&mut s, w.media(2, 1, 0, &ramp(f, 0)), t0).unwrap();
    // 60 ms of wall clock skipped: a gap of two frames, filled.
    feed(&mut s, w.media(3, 2, 60, &ramp(f, 0)), t0).unwrap();
    let (got, _) = frames(&mut s);
    let ts: Vec<u64> = got.iter().map(|(t, _)| t.as_millis() as u64).collect();
    assert_eq!(ts, [0, 20, 40, 60]);
    assert_eq!(s.stats().gap_filled_ms, 40);
}

#[test]
fn unspoken_formats_end_the_stream_with_a_reason() {
    let cases = [
        (
            Dialect::Telnyx,
            r#"{"event":"start","stream_id":"s","start":{"call_control_id":"c","media_format":{"encoding":"G722","sample_rate":16000,"channels":1}}}"#,
            "G722",
        ),
        (
            Dialect::Telnyx,
            r#"{"event":"start","stream_id":"s","start":{"media_format":{"encoding":"PCMU","sample_rate":16000}}}"#,
            "8000",
        ),
        (
            Dialect::Plivo,
            r#"{"event":"start","start":{"streamId":"s","mediaFormat":{"encoding":"audio/x-l16","sampleRate":44100}}}"#,
            "44100",
        ),
        (
            Dialect::Vonage,
            r#"{"event":"websocket:connected","content-type":"audio/ogg"}"#,
            "audio/ogg",
        ),
        (
            Dialect::Exotel,
            r#"{"event":"start","stream_sid":"s","start":{"stream_sid":"s","media_format":{"encoding":"audio/x-mulaw","sample_rate":"16000"}}}"#,
            "16000",
        ),
    ];
    for (d, start, mention) in cases {
        let mut s = MediaStream::new(DialectChoice::Fixed(d), StreamOptions::default());
        let e = s.handle_text(start, Instant::now()).unwrap_err();
        assert!(
            matches!(e, StreamError::Refused(EndReason::UnsupportedFormat(_))),
            "{d}: {e}"
        );
        assert!(e.to_string().contains(mention), "{d}: {e}");
        assert!(s.ended().is_some());
    }
}

#[test]
fn bad_messages_are_refused_alone_with_the_field_named() {
    let f = AudioFormat::new(Encoding::L16Le, 16000);
    let w = writer(Dialect::Plivo, f);
    let (mut s, t0) = opened(
        DialectChoice::Fixed(Dialect::Plivo),
        &w,
        StreamOptions::default(),
    );
    let e = feed(&mut s, w.media(2, 1, 0, &[1, 2, 3]), t0).unwrap_err();
    assert_eq!(e, StreamError::OddPayload { len: 3 });
    let e = s
        .handle_text(r#"{"event":"media","media":{"payload":"%%%"}}"#, t0)
        .unwrap_err();
    assert!(e.to_string().contains("media.payload"), "{e}");
    let e = s
        .handle_text(r#"{"event":"dtmf","dtmf":{"digit":"12"}}"#, t0)
        .unwrap_err();
    assert!(e.to_string().contains("dtmf.digit"), "{e}");
    let e = s
        .handle_text(r#"{"event":"playedStream"}"#, t0)
        .unwrap_err();
    assert!(e.to_string().contains("name"), "{e}");
    feed(&mut s, w.media(3, 2, 20, &ramp(f, 0)), t0).unwrap();
    assert_eq!(frames(&mut s).0.len(), 1, "the stream carries on");
    assert_eq!(s.stats().bad_messages, 4);

    let mut t = MediaStream::new(
        DialectChoice::Fixed(Dialect::Telnyx),
        StreamOptions::default(),
    );
    let e = t
        .handle_text(r#"{"event":"start","start":{}}"#, t0)
        .unwrap_err();
    assert!(e.to_string().contains("stream_id"), "{e}");
    let e = t.handle_binary(&[0, 0], t0).unwrap_err();
    assert!(matches!(e, StreamError::Binary("Telnyx")), "{e}");
}

#[test]
fn detection_holds_the_opening_and_gives_up_with_a_reason() {
    let mut s = MediaStream::new(DialectChoice::Detect, StreamOptions::default());
    let t0 = Instant::now();
    for _ in 0..7 {
        s.handle_text(r#"{"event":"connected"}"#, t0).unwrap();
    }
    assert_eq!(s.dialect(), None);
    // The eighth message without a clue ends it (the README's "eight messages").
    let e = s.handle_text("garbage", t0).unwrap_err();
    assert_eq!(e, StreamError::Refused(EndReason::Undetected));
    assert!(e.to_string().contains("own path"), "{e}");
}

/// Another bridge's opening on a bridge's own path is refused at its `start`, naming the path
/// to use, instead of waiting out the start timeout.
#[test]
fn another_bridges_start_on_a_bridges_own_path_is_refused_naming_the_right_one() {
    for path in Dialect::ALL {
        for spoken in Dialect::ALL.into_iter().filter(|&d| d != path) {
            let mut s = MediaStream::new(DialectChoice::Fixed(path), StreamOptions::default());
            let t0 = Instant::now();
            let w = writer(spoken, AudioFormat::PCMU_8K);
            let mut seq = 0;
            let results: Vec<_> = w
                .opening(&mut seq)
                .into_iter()
                .map(|m| feed(&mut s, m, t0))
                .collect();
            let last = results.last().unwrap().clone();
            assert_eq!(
                last,
                Err(StreamError::Refused(EndReason::WrongPath { path, spoken })),
                "{spoken} on {path}'s path: {results:?}"
            );
            assert!(s.start_info().is_none());
            let reason = EndReason::WrongPath { path, spoken }.to_string();
            assert!(reason.len() <= 120, "fits a close frame's reason: {reason}");
            let e = last.unwrap_err().to_string();
            assert!(e.contains(&format!("send it to {}", spoken.path())), "{e}");
        }
    }
}

/// Plays `n` voice frames and returns the media payload sizes and mark names sent.
fn play(
    s: &mut MediaStream,
    f: AudioFormat,
    from_ms: u64,
    n: u64,
    t0: Instant,
) -> (Vec<usize>, Vec<String>) {
    for k in 0..n {
        s.play(&voice(f, from_ms + 20 * k), PlayedKind::Voice, t0)
            .unwrap();
    }
    let (mut media, mut marks) = (Vec::new(), Vec::new());
    for t in transmits(s) {
        match t {
            Transmit::Media(p) => media.push(p.len()),
            Transmit::Mark(m) => marks.push(m),
            Transmit::Clear => {}
        }
    }
    (media, marks)
}

#[test]
fn exotel_outbound_goes_in_100_ms_chunks_and_a_turn_ends_with_a_padded_one() {
    let f = AudioFormat::new(Encoding::L16Le, 8000);
    let w = writer(Dialect::Exotel, f);
    let (mut s, t0) = opened(
        DialectChoice::Fixed(Dialect::Exotel),
        &w,
        StreamOptions::default(),
    );
    let (media, marks) = play(&mut s, f, 0, 12, t0);
    assert_eq!(
        media,
        [1600, 1600],
        "two full 100 ms chunks, the rest waits"
    );
    assert_eq!(marks, ["b:0", "b:100"]);
    s.play(
        &Frame::silence(8000, Duration::from_millis(240)),
        PlayedKind::Silence,
        t0,
    )
    .unwrap();
    let tail: Vec<Transmit> = transmits(&mut s);
    assert!(
        matches!(&tail[..], [Transmit::Media(p), Transmit::Mark(m)] if p.len() == 1600 && m == "b:200")
    );
    assert!(media.iter().all(|n| n % 320 == 0));
    // Each chunk is acknowledged as heard up to its end.
    s.handle_text(&text(w.mark_echo(9, "b:100")), t0).unwrap();
    assert!(
        matches!(frames(&mut s).1[..], [LegEvent::Heard { up_to }] if up_to == Duration::from_millis(200))
    );
}

fn text(m: Outgoing) -> String {
    match m {
        Outgoing::Text(t) => t,
        Outgoing::Binary(_) => panic!("binary"),
    }
}

#[test]
fn marks_and_clears_in_each_dialect() {
    for d in Dialect::ALL {
        let f = match d {
            Dialect::Vonage => AudioFormat::new(Encoding::L16Le, 16000),
            _ => AudioFormat::PCMU_8K,
        };
        let w = writer(d, f);
        let (mut s, t0) = opened(DialectChoice::Fixed(d), &w, StreamOptions::default());
        let per = d.frames_per_message() as u64;
        let (_, marks) = play(&mut s, f, 0, 3 * per, t0);
        assert_eq!(marks.len(), 3, "{d}");
        // The first mark is acknowledged: heard.
        s.handle_text(&text(w.mark_echo(5, &marks[0])), t0).unwrap();
        assert_eq!(s.stats().marks_played, 1, "{d}");
        s.clear().unwrap();
        let rendered: Vec<Outgoing> = transmits(&mut s).iter().map(|t| s.render(t)).collect();
        // What baton wrote reads back, on the caller's side, as a clear.
        let [Outgoing::Text(clear)] = &rendered[..] else {
            panic!("{d}: {rendered:?}")
        };
        assert_eq!(wire::parse_reply(d, clear).unwrap(), Reply::Clear, "{d}");
        match w.cleared(6) {
            Some(ack) => s.handle_text(&text(ack), t0).unwrap(),
            None => {
                for m in &marks[1..] {
                    s.handle_text(&text(w.mark_echo(7, m)), t0).unwrap();
                }
            }
        }
        let st = s.stats();
        assert_eq!(
            (st.marks_played, st.marks_dropped, st.clears),
            (1, 2, 1),
            "{d}"
        );
        assert_eq!(s.pending_marks(), 0, "{d}");
        // Media and marks as written read back on the caller's side.
        s.play(&voice(f, 1000), PlayedKind::Voice, t0).unwrap();
        s.play(
            &Frame::silence(f.rate, Duration::from_millis(1020)),
            PlayedKind::Silence,
            t0,
        )
        .unwrap();
        for t in transmits(&mut s) {
            let back = match s.render(&t) {
                Outgoing::Text(x) => wire::parse_reply(d, &x).unwrap(),
                Outgoing::Binary(b) => Reply::Media(b),
            };
            match (t, back) {
                (Transmit::Media(a), Reply::Media(b)) => assert_eq!(a, b, "{d}"),
                (Transmit::Mark(a), Reply::Mark(b)) => assert_eq!(a, b, "{d}"),
                (t, b) => panic!("{d}: {t:?} read back as {b:?}"),
            }
        }
    }
}

#[test]
fn detection_does_not_hold_oversized_messages() {
    let mut s = MediaStream::new(DialectChoice::Detect, StreamOptions::default());
    let big = format!(r#"{{"event":"connected","pad":"{}"}}"#, "x".repeat(1 << 20));
    let e = s.handle_text(&big, Instant::now()).unwrap_err();
    assert!(e.to_string().contains("refused"), "{e}");
    assert_eq!(s.stats().bad_messages, 1);
    // The stream can still be detected afterwards.
    let w = writer(Dialect::Exotel, AudioFormat::new(Encoding::L16Le, 8000));
    let mut seq = 0;
    for m in w.opening(&mut seq) {
        feed(&mut s, m, Instant::now()).unwrap();
    }
    assert_eq!(s.dialect(), Some(Dialect::Exotel));
}
