//! Per-frame cost of the audio hot paths: G.711, resampling one 20 ms frame, and one playout tick.

use std::hint::black_box;
use std::time::{Duration, Instant};

use baton::audio::g711::{decode_ulaw, encode_ulaw};
use baton::audio::playout::{Playout, TurnTag};
use baton::audio::resample::StreamResampler;
use criterion::{Criterion, criterion_group, criterion_main};

/// One 20 ms frame of a 440 Hz tone at `rate`.
fn tone(rate: u32) -> Vec<i16> {
    (0..rate as usize / 50)
        .map(|n| {
            let t = n as f64 / f64::from(rate);
            (16384.0 * (2.0 * std::f64::consts::PI * 440.0 * t).sin()) as i16
        })
        .collect()
}

fn g711(c: &mut Criterion) {
    let pcm = tone(8000);
    let mut codes = Vec::with_capacity(160);
    encode_ulaw(&pcm, &mut codes);
    let mut out = Vec::with_capacity(160);
    c.bench_function("ulaw_decode_frame_160", |b| {
        b.iter(|| {
            out.clear();
            decode_ulaw(black_box(&codes), &mut out);
            black_box(&out);
        })
    });
    let mut enc = Vec::with_capacity(160);
    c.bench_function("ulaw_encode_frame_160", |b| {
        b.iter(|| {
            enc.clear();
            encode_ulaw(black_box(&pcm), &mut enc);
            black_box(&enc);
        })
    });
}

fn resample_frame(c: &mut Criterion, from: u32, to: u32) {
    let input = tone(from);
    let mut r = StreamResampler::new(from, to).expect("supported pair");
    let mut out = Vec::with_capacity(to as usize / 50);
    c.bench_function(
        &format!("resample_{}k_to_{}k_frame", from / 1000, to / 1000),
        |b| {
            b.iter(|| {
                out.clear();
                r.process(black_box(&input), &mut out);
                black_box(&out);
            })
        },
    );
}

fn resample(c: &mut Criterion) {
    resample_frame(c, 8000, 16000);
    resample_frame(c, 24000, 8000);
}

fn playout(c: &mut Criterion) {
    let start = Instant::now();
    let mut p = Playout::new(8000, start);
    let tag = TurnTag { agent: 1, turn: 1 };
    let frame = tone(8000);
    let mut now = start;
    c.bench_function("playout_push_poll_frame", |b| {
        b.iter(|| {
            p.push(black_box(&frame), tag, now);
            let played = p.poll_frame(now).expect("a tick is due");
            now += Duration::from_millis(20);
            p.recycle(black_box(played).frame);
        })
    });
}

criterion_group!(benches, g711, resample, playout);
criterion_main!(benches);
