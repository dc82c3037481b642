//! Playout clock under a virtual clock: steady cadence from bursty input, sample-exact content,
//! underrun accounting, turn boundaries, flush, late ticks and chunk-start reporting.

use std::time::{Duration, Instant};

use baton::audio::playout::{ChunkStart, PlayedKind, Playout, TurnTag};

const RATE: u32 = 8000;
const SPF: usize = 160;
const TICK: Duration = Duration::from_millis(20);

const A: TurnTag = TurnTag { agent: 1, turn: 7 };
const B: TurnTag = TurnTag { agent: 2, turn: 1 };

fn tick(start: Instant, n: u64) -> Instant {
    start + TICK * n as u32
}

/// Distinct, recognisable samples: position `i` of the test stream holds `(i % 30000) + 1`.
fn ramp(from: usize, len: usize) -> Vec<i16> {
    (from..from + len).map(|i| (i % 30000) as i16 + 1).collect()
}

/// Tiny deterministic PRNG so irregular schedules are reproducible.
struct Lcg(u64);
impl Lcg {
    fn next(&mut self, below: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % below
    }
}

/// Polls exactly at tick `n`, checking the clock neither fires early nor twice.
fn poll_at_tick(p: &mut Playout, start: Instant, n: u64) -> baton::audio::playout::Played {
    poll_at(p, start, tick(start, n))
}

/// Polls exactly at `due`, which must be the next tick; the frame's media timestamp is `due`'s
/// time since the playout's `start`.
fn poll_at(p: &mut Playout, start: Instant, due: Instant) -> baton::audio::playout::Played {
    assert_eq!(p.poll_timeout(), due);
    assert!(p.poll_frame(due - Duration::from_nanos(1)).is_none());
    let played = p.poll_frame(due).expect("tick due");
    assert!(p.poll_frame(due).is_none(), "second frame for one tick");
    assert_eq!(played.frame.ts, due - start);
    assert_eq!(played.frame.rate, RATE);
    assert_eq!(played.frame.samples.len(), SPF);
    played
}

#[test]
fn bursts_at_four_times_real_time_leave_at_steady_cadence() {
    let start = Instant::now();
    let mut p = Playout::new(RATE, start);
    let total = 2 * RATE as usize; // 2 s of audio, pushed 80 ms per 20 ms of virtual time
    let burst = 4 * SPF;
    let mut pushed = 0;
    let mut played = Vec::new();
    // Tick 0 falls before any audio: plain silence.
    assert_eq!(poll_at_tick(&mut p, start, 0).kind, PlayedKind::Silence);
    // The first chunk lands 7 ms after tick 0, while the playout is idle: the talkspurt starts
    // then, and every later tick falls 20 ms after it.
    let phase = start + Duration::from_millis(7);
    for n in 0..200u64 {
        // Model chunks land 7 ms after each of the original ticks.
        if pushed < total {
            p.push(
                &ramp(pushed, burst),
                A,
                tick(start, n) + Duration::from_millis(7),
            );
            pushed += burst;
            if pushed == total {
                p.end_turn(A);
            }
        }
        let out = poll_at(&mut p, start, tick(phase, n));
        match out.kind {
            PlayedKind::Voice => {
                assert_eq!(out.tag, Some(A));
                played.extend_from_slice(&out.frame.samples);
            }
            PlayedKind::Silence => assert!(out.frame.samples.iter().all(|&s| s == 0)),
            PlayedKind::Underrun => panic!("underrun at tick {n}"),
        }
    }
    assert_eq!(played, ramp(0, total));
    let st = p.stats();
    assert_eq!(st.voice_frames, (total / SPF) as u64);
    assert_eq!(st.frames, 201);
    assert_eq!(st.silence_frames, 201 - st.voice_frames);
    assert_eq!((st.underruns, st.late_ticks, st.flushed_samples), (0, 0, 0));
    assert_eq!(p.queued(), Duration::ZERO);
    assert_eq!(p.speaking(), None);
}

#[test]
fn irregular_chunks_are_played_in_order_and_sample_exact() {
    let start = Instant::now();
    let mut p = Playout::new(RATE, start);
    let mut rng = Lcg(42);
    let total = 5 * RATE as usize;
    // Keep at least 100 ms queued, topping up with chunks of 1..=2000 samples (not frame
    // multiples) at irregular moments between ticks.
    let mut pushed = 0;
    let mut played = Vec::new();
    for n in 0..400u64 {
        while pushed < total && p.queued() < Duration::from_millis(100) {
            let len = (1 + rng.next(2000) as usize).min(total - pushed);
            let at = tick(start, n) + Duration::from_micros(rng.next(19_000));
            p.push(&ramp(pushed, len), A, at);
            pushed += len;
        }
        if pushed == total {
            p.end_turn(A);
        }
        let out = poll_at_tick(&mut p, start, n);
        if out.kind == PlayedKind::Voice {
            played.extend_from_slice(&out.frame.samples);
        }
        assert_ne!(out.kind, PlayedKind::Underrun, "tick {n}");
    }
    // The last frame of the turn was padded with silence.
    let pad = played.len() - total;
    assert!(pad < SPF);
    assert!(played[total..].iter().all(|&s| s == 0));
    played.truncate(total);
    assert_eq!(played, ramp(0, total));
    assert_eq!(p.stats().underruns, 0);
}

#[test]
fn underruns_are_counted_only_inside_a_turn() {
    let start = Instant::now();
    let mut p = Playout::new(RATE, start);
    // Before any turn: silence, not counted.
    assert_eq!(poll_at_tick(&mut p, start, 0).kind, PlayedKind::Silence);
    assert_eq!(p.speaking(), None);

    // Audio arriving exactly at tick 1 (no earlier): the clock keeps its phase.
    p.push(&ramp(0, 2 * SPF), A, tick(start, 1));
    assert_eq!(poll_at_tick(&mut p, start, 1).kind, PlayedKind::Voice);
    assert_eq!(p.speaking(), Some(A));
    assert_eq!(poll_at_tick(&mut p, start, 2).kind, PlayedKind::Voice);
    // Gap inside an unfinished turn: underruns, counted, tagged with the starving turn.
    let u = poll_at_tick(&mut p, start, 3);
    assert_eq!((u.kind, u.tag), (PlayedKind::Underrun, Some(A)));
    assert!(u.frame.samples.iter().all(|&s| s == 0));
    assert_eq!(p.speaking(), None);
    assert_eq!(poll_at_tick(&mut p, start, 4).kind, PlayedKind::Underrun);
    assert_eq!(p.stats().underruns, 2);

    // The turn resumes, then ends; once drained the silence is not counted.
    p.push(&ramp(2 * SPF, SPF), A, tick(start, 4));
    p.end_turn(A);
    let v = poll_at_tick(&mut p, start, 5);
    assert_eq!(v.kind, PlayedKind::Voice);
    assert_eq!(v.frame.samples, ramp(2 * SPF, SPF));
    for n in 6..10 {
        assert_eq!(poll_at_tick(&mut p, start, n).kind, PlayedKind::Silence);
    }
    let st = p.stats();
    assert_eq!(
        (st.frames, st.voice_frames, st.silence_frames, st.underruns),
        (10, 3, 5, 2)
    );
}

#[test]
fn partial_frame_is_held_mid_turn_and_padded_at_turn_end() {
    let start = Instant::now();
    let mut p = Playout::new(RATE, start);
    // 100 samples of an open turn: not a full frame, so the tick waits for more (an underrun).
    p.push(&ramp(0, 100), A, start);
    let u = poll_at_tick(&mut p, start, 0);
    assert_eq!(u.kind, PlayedKind::Underrun);
    assert_eq!(p.queued(), Duration::from_micros(12_500));
    // The rest arrives: one frame assembled across the two chunks, nothing lost.
    p.push(&ramp(100, 150), A, start);
    let v = poll_at_tick(&mut p, start, 1);
    assert_eq!(v.kind, PlayedKind::Voice);
    assert_eq!(v.frame.samples, ramp(0, SPF));
    // 90 samples left; the turn ends: they play, padded with silence.
    p.end_turn(A);
    let last = poll_at_tick(&mut p, start, 2);
    assert_eq!(last.kind, PlayedKind::Voice);
    assert_eq!(&last.frame.samples[..90], &ramp(SPF, 90)[..]);
    assert!(last.frame.samples[90..].iter().all(|&s| s == 0));
    assert_eq!(poll_at_tick(&mut p, start, 3).kind, PlayedKind::Silence);
    assert_eq!(p.stats().underruns, 1);
}

#[test]
fn handoff_between_turns_joins_sample_to_sample_and_never_flushes() {
    let start = Instant::now();
    let mut p = Playout::new(RATE, start);
    // Agent A's turn leaves 100 samples for its last frame; agent B's turn is queued behind it
    // before A's generation-complete arrives.
    p.push(&ramp(0, SPF + 100), A, start);
    p.push(&ramp(1000, 2 * SPF), B, start);
    let f0 = poll_at_tick(&mut p, start, 0);
    assert_eq!(
        (f0.kind, f0.tag, f0.joined),
        (PlayedKind::Voice, Some(A), None)
    );
    assert_eq!(f0.frame.samples, ramp(0, SPF));
    // A's tail, then B's head at once: no sample of silence between the two agents.
    let f1 = poll_at_tick(&mut p, start, 1);
    assert_eq!((f1.kind, f1.tag), (PlayedKind::Voice, Some(A)));
    assert_eq!(f1.joined, Some((B, 100)));
    assert_eq!(f1.audio, SPF);
    assert_eq!(&f1.frame.samples[..100], &ramp(SPF, 100)[..]);
    assert_eq!(&f1.frame.samples[100..], &ramp(1000, SPF - 100)[..]);
    assert_eq!(p.speaking(), Some(B));
    let f2 = poll_at_tick(&mut p, start, 2);
    assert_eq!((f2.kind, f2.tag), (PlayedKind::Voice, Some(B)));
    assert_eq!(f2.frame.samples, ramp(1000 + SPF - 100, SPF));
    // 100 samples of B are left and B has not ended: held back, an underrun of B. A was
    // superseded, so it no longer counts.
    let u = poll_at_tick(&mut p, start, 3);
    assert_eq!((u.kind, u.tag, u.audio), (PlayedKind::Underrun, Some(B), 0));
    // A's late end_turn changes nothing; B's end plays its tail, padded.
    p.end_turn(A);
    assert_eq!(poll_at_tick(&mut p, start, 4).kind, PlayedKind::Underrun);
    p.end_turn(B);
    let tail = poll_at_tick(&mut p, start, 5);
    assert_eq!(
        (tail.kind, tail.audio, tail.joined),
        (PlayedKind::Voice, 100, None)
    );
    assert!(tail.frame.samples[100..].iter().all(|&s| s == 0));
    assert_eq!(poll_at_tick(&mut p, start, 6).kind, PlayedKind::Silence);
    assert_eq!(p.stats().flushed_samples, 0);
    assert_eq!(p.stats().underruns, 2);
}

#[test]
fn flush_drops_everything_and_next_tick_is_silence() {
    let start = Instant::now();
    let mut p = Playout::new(RATE, start);
    p.push(&ramp(0, RATE as usize), A, start); // 1 s, turn still open
    assert_eq!(poll_at_tick(&mut p, start, 0).kind, PlayedKind::Voice);
    assert_eq!(poll_at_tick(&mut p, start, 1).kind, PlayedKind::Voice);
    assert_eq!(p.queued(), Duration::from_millis(960));
    let dropped = p.flush();
    assert_eq!(dropped, RATE as usize - 2 * SPF);
    assert_eq!(p.queued(), Duration::ZERO);
    assert_eq!(p.speaking(), None);
    let s = poll_at_tick(&mut p, start, 2);
    assert_eq!((s.kind, s.tag), (PlayedKind::Silence, None));
    assert!(s.frame.samples.iter().all(|&v| v == 0));
    let st = p.stats();
    assert_eq!((st.flushed_samples, st.underruns), (dropped as u64, 0));
    assert_eq!(p.flush(), 0);

    // The next turn plays normally after a flush.
    p.push(&ramp(5000, SPF), B, tick(start, 3));
    let v = poll_at_tick(&mut p, start, 3);
    assert_eq!((v.kind, v.tag), (PlayedKind::Voice, Some(B)));
    assert_eq!(v.frame.samples, ramp(5000, SPF));
}

#[test]
fn late_now_releases_one_frame_per_call() {
    let start = Instant::now();
    let mut p = Playout::new(RATE, start);
    p.push(&ramp(0, 10 * SPF), A, start);
    let now = start + Duration::from_millis(65); // ticks 0, 1, 2, 3 are due
    let mut got = Vec::new();
    while let Some(f) = p.poll_frame(now) {
        got.push(f);
        assert!(got.len() <= 4, "released more frames than ticks due");
    }
    assert_eq!(got.len(), 4);
    for (k, f) in got.iter().enumerate() {
        assert_eq!(f.frame.ts, TICK * k as u32);
        assert_eq!(f.frame.samples, ramp(k * SPF, SPF));
    }
    // Ticks 0-2 went out a full tick or more late; tick 3 (due at 60 ms) did not.
    assert_eq!(p.stats().late_ticks, 3);
    assert_eq!(p.poll_timeout(), start + Duration::from_millis(80));
    assert_eq!(poll_at_tick(&mut p, start, 4).frame.ts, TICK * 4);
    assert_eq!(p.stats().late_ticks, 3);
}

#[test]
fn chunk_start_reports_arrival_and_audio_ahead() {
    let start = Instant::now();
    let mut p = Playout::new(RATE, start);
    assert_eq!(poll_at_tick(&mut p, start, 0).chunk_start, None);
    let r1 = start + Duration::from_millis(3);
    let r2 = start + Duration::from_millis(4);
    let r3 = start + Duration::from_millis(5);
    let r4 = start + Duration::from_millis(6);
    p.push(&ramp(0, 200), A, r1); // [0, 200), nothing ahead
    p.push(&ramp(200, 300), A, r2); // [200, 500), 200 samples = 25 ms ahead
    p.push(&ramp(500, 10), A, r3); // [500, 510), 62.5 ms ahead
    p.push(&ramp(510, 170), A, r4); // [510, 680), 63.75 ms ahead
    let cs = |r, us| {
        Some(ChunkStart {
            received_at: r,
            ahead: Duration::from_micros(us),
        })
    };
    // The playout was idle: the talkspurt starts when its first chunk arrived.
    let t = |n: u32| r1 + TICK * n;
    assert_eq!(poll_at(&mut p, start, t(0)).chunk_start, cs(r1, 0)); // [0, 160)
    assert_eq!(poll_at(&mut p, start, t(1)).chunk_start, cs(r2, 25_000)); // [160, 320)
    assert_eq!(poll_at(&mut p, start, t(2)).chunk_start, None); // [320, 480)
    // [480, 640) holds the starts of chunks 3 and 4: the earliest is reported.
    assert_eq!(poll_at(&mut p, start, t(3)).chunk_start, cs(r3, 62_500));
    // [640, 680) + padding after end_turn: no chunk starts here.
    p.end_turn(A);
    let last = poll_at(&mut p, start, t(4));
    assert_eq!((last.kind, last.chunk_start), (PlayedKind::Voice, None));
}

#[test]
fn recycled_buffers_are_reused() {
    let start = Instant::now();
    let mut p = Playout::new(RATE, start);
    p.push(&ramp(0, 4 * SPF), A, start);
    let f = poll_at_tick(&mut p, start, 0);
    let ptr = f.frame.samples.as_ptr();
    p.recycle(f.frame);
    let g = poll_at_tick(&mut p, start, 1);
    assert_eq!(g.frame.samples.as_ptr(), ptr);
    assert_eq!(g.frame.samples, ramp(SPF, SPF));
}

#[test]
fn a_talkspurt_starts_when_its_audio_arrives_but_never_over_audio_already_sent() {
    let start = Instant::now();
    let mut p = Playout::new(RATE, start);
    assert_eq!(poll_at_tick(&mut p, start, 0).kind, PlayedKind::Silence);
    // Idle: audio arriving 13 ms after tick 0 plays at once, not 7 ms later at tick 1.
    let t = start + Duration::from_millis(13);
    p.push(&ramp(0, SPF + 40), A, t);
    p.end_turn(A);
    let v = poll_at(&mut p, start, t);
    assert_eq!(
        (v.kind, v.frame.ts),
        (PlayedKind::Voice, Duration::from_millis(13))
    );
    // The turn's padded last frame goes out 20 ms later and is on the wire: the next turn,
    // arriving while it plays, waits for its end (the clock keeps its phase).
    let last = poll_at(&mut p, start, t + TICK);
    assert_eq!((last.kind, last.audio), (PlayedKind::Voice, 40));
    p.push(&ramp(500, SPF), B, t + TICK + Duration::from_millis(5));
    p.end_turn(B);
    let b = poll_at(&mut p, start, t + 2 * TICK);
    assert_eq!((b.kind, b.tag), (PlayedKind::Voice, Some(B)));
    // After a tick of plain silence the clock may move again, never back before that tick.
    assert_eq!(
        poll_at(&mut p, start, t + 3 * TICK).kind,
        PlayedKind::Silence
    );
    p.push(&ramp(900, SPF), A, start);
    let again = poll_at(&mut p, start, t + 3 * TICK);
    assert_eq!(again.kind, PlayedKind::Voice);
    assert_eq!(again.frame.samples, ramp(900, SPF));
}

#[test]
fn unheard_counts_the_queue_and_the_rest_of_the_frame_on_the_wire() {
    let start = Instant::now();
    let mut p = Playout::new(RATE, start);
    p.push(&ramp(0, SPF + 80), A, start);
    p.end_turn(A);
    assert_eq!(p.unheard(start), Duration::from_millis(30));
    poll_at_tick(&mut p, start, 0);
    // 5 ms into frame 0: 15 ms of it and 10 ms queued are still to be heard.
    assert_eq!(
        p.unheard(start + Duration::from_millis(5)),
        Duration::from_millis(25)
    );
    // The last frame holds 10 ms of audio, then padding: 4 ms into it, 6 ms are left.
    poll_at_tick(&mut p, start, 1);
    assert_eq!(
        p.unheard(tick(start, 1) + Duration::from_millis(4)),
        Duration::from_millis(6)
    );
    assert_eq!(
        p.unheard(tick(start, 1) + Duration::from_millis(15)),
        Duration::ZERO
    );
}

#[test]
fn idle_silence_run_late_is_not_counted_and_new_audio_still_moves_the_clock() {
    let start = Instant::now();
    let mut p = Playout::new(RATE, start);
    assert!(p.is_idle(), "nothing queued yet");
    p.push(&ramp(0, SPF), A, start);
    p.end_turn(A);
    assert!(!p.is_idle(), "audio queued");
    assert_eq!(poll_at_tick(&mut p, start, 0).kind, PlayedKind::Voice);
    assert!(!p.is_idle(), "the last frame released was voice");
    // The first silence after a turn is heard as its end: released on time.
    assert_eq!(poll_at_tick(&mut p, start, 1).kind, PlayedKind::Silence);
    assert!(p.is_idle());
    // Ticks 2-4 (40, 60, 80 ms) run together at 85 ms: idle silence, none counted late.
    let now = start + Duration::from_millis(85);
    let mut late = Vec::new();
    while let Some(f) = p.poll_frame(now) {
        assert_eq!(f.kind, PlayedKind::Silence);
        late.push(f.frame.ts);
    }
    assert_eq!(late, [TICK * 2, TICK * 3, TICK * 4]);
    assert_eq!(p.stats().late_ticks, 0);
    // Audio arriving at 90 ms starts its talkspurt at its arrival, not on the old grid.
    let at = start + Duration::from_millis(90);
    p.push(&ramp(0, SPF), B, at);
    assert_eq!(p.poll_timeout(), at);
    // A voiced frame released a full tick late still counts.
    let f = p.poll_frame(at + TICK).unwrap();
    assert_eq!(f.kind, PlayedKind::Voice);
    assert_eq!(p.stats().late_ticks, 1);
}
