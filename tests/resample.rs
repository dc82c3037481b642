//! Streaming resampler: frequency and level preserved, anti-aliasing effective, the reported delay
//! equal to the measured one, passthrough bit exact, and offline output time-aligned.
//!
//! Reference signals are analytic functions of time, so the ideal output at any rate is the same
//! function sampled at that rate; no second resampler is needed to judge the first.

use std::f64::consts::PI;

use baton::audio::resample::{StreamResampler, resample_all};

const AMP: f64 = 16384.0; // -6 dBFS

fn sample_at(rate: u32, len: usize, f: impl Fn(f64) -> f64) -> Vec<i16> {
    (0..len)
        .map(|n| f(n as f64 / f64::from(rate)).round() as i16)
        .collect()
}

fn sine(freq: f64) -> impl Fn(f64) -> f64 {
    move |t| AMP * (2.0 * PI * freq * t).sin()
}

/// A Hann-windowed linear chirp, 300 Hz -> 3 kHz over `dur` seconds starting at `t0`: inside
/// every rate's passband, with a single sharp autocorrelation peak.
fn chirp_burst(t0: f64, dur: f64) -> impl Fn(f64) -> f64 {
    move |t| {
        let u = t - t0;
        if !(0.0..=dur).contains(&u) {
            return 0.0;
        }
        let (f0, f1) = (300.0, 3000.0);
        let phase = 2.0 * PI * (f0 * u + (f1 - f0) * u * u / (2.0 * dur));
        let env = 0.5 - 0.5 * (2.0 * PI * u / dur).cos();
        AMP * env * phase.sin()
    }
}

/// Runs `input` through a fresh resampler in `piece`-sample pieces, without flushing.
fn stream(from: u32, to: u32, input: &[i16], piece: usize) -> (Vec<i16>, StreamResampler) {
    let mut r = StreamResampler::new(from, to).unwrap();
    let mut out = Vec::new();
    for p in input.chunks(piece) {
        r.process(p, &mut out);
    }
    (out, r)
}

fn twenty_ms(rate: u32) -> usize {
    rate as usize / 50
}

fn rms(x: &[i16]) -> f64 {
    (x.iter().map(|&v| f64::from(v).powi(2)).sum::<f64>() / x.len() as f64).sqrt()
}

/// Frequency from positive-going zero crossings, linearly interpolated between samples.
fn zero_crossing_freq(x: &[i16], rate: u32) -> f64 {
    let mut crossings = Vec::new();
    for n in 1..x.len() {
        let (a, b) = (f64::from(x[n - 1]), f64::from(x[n]));
        if a < 0.0 && b >= 0.0 {
            crossings.push((n - 1) as f64 + a / (a - b));
        }
    }
    assert!(
        crossings.len() > 10,
        "too few crossings: {}",
        crossings.len()
    );
    let span = crossings[crossings.len() - 1] - crossings[0];
    (crossings.len() - 1) as f64 * f64::from(rate) / span
}

/// Power of `x` at `freq` (Goertzel), normalised so a full-length sine of amplitude A gives A.
fn tone_amplitude(x: &[i16], rate: u32, freq: f64) -> f64 {
    let w = 2.0 * PI * freq / f64::from(rate);
    let (mut s1, mut s2) = (0.0, 0.0);
    // Hann window keeps leakage from the strong components out of a weak bin.
    let n = x.len() as f64;
    for (i, &v) in x.iter().enumerate() {
        let win = 0.5 - 0.5 * (2.0 * PI * i as f64 / n).cos();
        let s0 = f64::from(v) * win + 2.0 * w.cos() * s1 - s2;
        s2 = s1;
        s1 = s0;
    }
    let power = s1 * s1 + s2 * s2 - 2.0 * w.cos() * s1 * s2;
    2.0 * power.sqrt() / (n * 0.5)
}

fn db(ratio: f64) -> f64 {
    20.0 * ratio.log10()
}

#[test]
fn sines_keep_frequency_and_level() {
    // Tolerances: frequency within 0.1 %, level within 0.1 dB. Both tones sit far inside the
    // passband (cutoff ~3.66 kHz on an 8 kHz side), where the FFT filter is flat.
    for (from, to) in [(8000, 16000), (24000, 8000), (16000, 24000)] {
        for freq in [440.0, 1000.0] {
            let input = sample_at(from, from as usize, sine(freq)); // 1 s
            let (out, r) = stream(from, to, &input, twenty_ms(from));
            // Skip the start-up transient (delay + 50 ms) and look at 0.5 s of steady output.
            let skip = r.delay_samples() + to as usize / 20;
            let steady = &out[skip..skip + to as usize / 2];
            let f = zero_crossing_freq(steady, to);
            assert!(
                (f / freq - 1.0).abs() < 1e-3,
                "{from}->{to} {freq} Hz: measured {f} Hz"
            );
            let level = db(rms(steady) / (AMP / 2f64.sqrt()));
            assert!(
                level.abs() < 0.1,
                "{from}->{to} {freq} Hz: level off by {level:.3} dB"
            );
        }
    }
}

#[test]
fn downsampling_suppresses_aliases() {
    // 6 kHz at 24 kHz would fold to 2 kHz on an 8 kHz leg without the anti-aliasing filter.
    let input = sample_at(24000, 24000, sine(6000.0));
    let (out, r) = stream(24000, 8000, &input, 480);
    let steady = &out[r.delay_samples() + 400..r.delay_samples() + 400 + 4000];
    let alias = tone_amplitude(steady, 8000, 2000.0);
    assert!(
        db(alias / AMP) < -60.0,
        "alias at {:.1} dB",
        db(alias / AMP)
    );
}

#[test]
fn upsampling_suppresses_images() {
    // 1 kHz at 8 kHz has an image at 7 kHz once zero-stuffed to 16 kHz.
    let input = sample_at(8000, 8000, sine(1000.0));
    let (out, r) = stream(8000, 16000, &input, 160);
    let steady = &out[r.delay_samples() + 800..r.delay_samples() + 800 + 8000];
    let wanted = tone_amplitude(steady, 16000, 1000.0);
    let image = tone_amplitude(steady, 16000, 7000.0);
    assert!(
        db(wanted / AMP).abs() < 0.1,
        "wanted {:.2} dB",
        db(wanted / AMP)
    );
    assert!(
        db(image / AMP) < -60.0,
        "image at {:.1} dB",
        db(image / AMP)
    );
}

/// Lag (in output samples, sub-sample by parabolic interpolation) at which `out` best matches
/// `ideal`.
fn xcorr_lag(out: &[i16], ideal: &[i16], max_lag: usize) -> f64 {
    let score = |lag: usize| -> f64 {
        ideal
            .iter()
            .zip(&out[lag..])
            .map(|(&a, &b)| f64::from(a) * f64::from(b))
            .sum()
    };
    let scores: Vec<f64> = (0..=max_lag).map(score).collect();
    let (best, _) = scores
        .iter()
        .enumerate()
        .max_by(|a, b| a.1.total_cmp(b.1))
        .unwrap();
    if best == 0 || best == max_lag {
        return best as f64;
    }
    let (l, c, r) = (scores[best - 1], scores[best], scores[best + 1]);
    best as f64 + 0.5 * (l - r) / (l - 2.0 * c + r)
}

#[test]
fn reported_delay_matches_cross_correlation() {
    let pairs = [
        (8000, 16000),
        (16000, 8000),
        (24000, 8000),
        (8000, 24000),
        (16000, 24000),
        (24000, 16000),
        (48000, 8000),
        (8000, 48000),
        (44100, 16000),
        (22050, 8000),
    ];
    for (from, to) in pairs {
        let burst = chirp_burst(0.05, 0.2);
        let input = sample_at(from, from as usize / 2, &burst);
        let (mut out, mut r) = stream(from, to, &input, twenty_ms(from));
        let reported = r.delay_samples();
        r.flush(&mut out);
        let ideal = sample_at(to, to as usize / 2, &burst);
        let measured = xcorr_lag(&out, &ideal, reported * 2 + 10);
        eprintln!("{from}->{to}: reported {reported}, measured {measured:.2}");
        assert!(
            (measured - reported as f64).abs() <= 1.0,
            "{from}->{to}: reported {reported}, measured {measured:.2}"
        );
        assert_eq!(
            r.delay().as_nanos(),
            reported as u128 * 1_000_000_000 / u128::from(to)
        );
    }
}

#[test]
fn chunking_does_not_change_output() {
    // Model audio arrives in 40-200 ms chunks of odd sizes; frames arrive 20 ms at a time.
    let input = sample_at(24000, 24000, chirp_burst(0.1, 0.6));
    let (by_frame, _) = stream(24000, 8000, &input, 480);
    let mut r = StreamResampler::new(24000, 8000).unwrap();
    let mut odd = Vec::new();
    let mut rest = &input[..];
    for size in [960, 4800, 1, 2399, 3600, 7, 480].iter().cycle() {
        if rest.is_empty() {
            break;
        }
        let (p, tail) = rest.split_at((*size).min(rest.len()));
        r.process(p, &mut odd);
        rest = tail;
    }
    assert_eq!(by_frame, odd);
}

#[test]
fn passthrough_is_bit_exact() {
    let input: Vec<i16> = (0..10_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 16) as i16)
        .collect();
    let mut r = StreamResampler::new(16000, 16000).unwrap();
    assert_eq!(r.delay_samples(), 0);
    assert_eq!(r.delay().as_nanos(), 0);
    let mut out = Vec::new();
    for p in input.chunks(333) {
        r.process(p, &mut out);
    }
    r.flush(&mut out);
    assert_eq!(out, input);
    assert_eq!(resample_all(&input, 16000, 16000).unwrap(), input);
}

#[test]
fn flush_emits_tail_and_resets() {
    let input = sample_at(8000, 1234, sine(440.0));
    let (mut out, mut r) = stream(8000, 16000, &input, 160);
    r.flush(&mut out);
    assert_eq!(out.len(), r.delay_samples() + 2468);
    // Flushed state equals a fresh one: the same input gives the same output again.
    let mut again = Vec::new();
    r.process(&input, &mut again);
    r.flush(&mut again);
    assert_eq!(again, out);
    // Flushing an idle stream emits nothing.
    let mut none = Vec::new();
    r.flush(&mut none);
    assert!(none.is_empty());
}

#[test]
fn resample_all_is_time_aligned_with_rounded_length() {
    for (from, to, len) in [
        (8000, 16000, 8000),
        (24000, 8000, 24001),
        (16000, 24000, 15999),
        (44100, 16000, 44100),
        (22050, 16000, 11025),
    ] {
        let freq = 1000.0;
        let input = sample_at(from, len, sine(freq));
        let out = resample_all(&input, from, to).unwrap();
        let expect_len = (len as u64 * u64::from(to) + u64::from(from) / 2) / u64::from(from);
        assert_eq!(out.len() as u64, expect_len, "{from}->{to} len {len}");
        // Away from the clip's edges the output is the same sine sampled at the new rate.
        let ideal = sample_at(to, out.len(), sine(freq));
        let margin = to as usize / 20;
        let worst = out[margin..out.len() - margin]
            .iter()
            .zip(&ideal[margin..])
            .map(|(&a, &b)| (i32::from(a) - i32::from(b)).abs())
            .max()
            .unwrap();
        // 1 % of the amplitude; a one-sample misalignment at 1 kHz would be ~20-40 %.
        assert!(worst < 164, "{from}->{to}: worst error {worst}");
    }
}

/// The downlink's resampler: every reply (a stream ended by `flush`) comes out time-aligned and
/// exactly as long as its input says, as `resample_all` does offline, whatever the chunking, so
/// two replies played back to back join without the filter's delay of silence between them.
#[test]
fn an_aligned_stream_matches_the_offline_clip_reply_after_reply() {
    for (from, to) in [(24_000, 8_000), (24_000, 16_000), (16_000, 24_000)] {
        let clip = sample_at(from, from as usize * 3 / 2 + 37, sine(440.0));
        let offline = resample_all(&clip, from, to).unwrap();
        let mut r = StreamResampler::aligned(from, to).unwrap();
        for piece in [960, 1234] {
            let mut out = Vec::new();
            for chunk in clip.chunks(piece) {
                r.process(chunk, &mut out);
            }
            r.flush(&mut out);
            assert_eq!(out.len(), offline.len(), "{from}->{to} in {piece}s");
            assert_eq!(out, offline, "{from}->{to} in {piece}s");
        }
    }
}
