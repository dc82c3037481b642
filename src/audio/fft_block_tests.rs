//! Tests of the resampler's FFT block converter (`crates/fft-block`), kept here so that the crate
//! itself is compiled once, optimised, and never again as a test harness: bit for bit against
//! rubato's `Fft`, plans shared per rate pair, PCM16 rounding.

use fft_block::{BlockConverter, to_pcm};
use rubato::audioadapter_buffers::direct::InterleavedSlice;
use rubato::{Fft, FixedSync, Resampler};

/// Deterministic noise and tones, loud enough to reach both ends of the i16 range.
fn signal(n: usize) -> Vec<i16> {
    let mut x: u32 = 0x9e37_79b9;
    (0..n)
        .map(|i| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            let tone = (i as f32 * 0.07).sin() * 20_000.0;
            (tone + (x % 25_000) as f32 - 12_500.0).clamp(-32_768.0, 32_767.0) as i16
        })
        .collect()
}

#[test]
fn matches_rubato_bit_for_bit() {
    for (from, to, block) in [
        (8000, 16000, 160),
        (24000, 8000, 480),
        (16000, 24000, 320),
        (16000, 8000, 320),
        (8000, 24000, 160),
        (44100, 16000, 882),
        (22050, 16000, 882),
        (48000, 8000, 960),
    ] {
        let mut theirs = Fft::<f32>::new_custom(
            from,
            to,
            block,
            1,
            1,
            rubato::WindowFunction::BlackmanHarris2,
            FixedSync::Both,
        )
        .unwrap();
        let (n_in, n_out) = (theirs.input_frames_next(), theirs.output_frames_next());
        let mut ours = BlockConverter::new(n_in, n_out);
        assert_eq!(ours.delay(), theirs.output_delay());
        let input = signal(n_in * 12);
        let mut expected = vec![0.0f32; n_out];
        for (k, block) in input.chunks(n_in).enumerate() {
            if k == 7 {
                // A new stream on both sides.
                theirs.reset();
                ours.reset();
            }
            let floats: Vec<f32> = block.iter().map(|&s| f32::from(s)).collect();
            let i = InterleavedSlice::new(&floats[..], 1, n_in).unwrap();
            let mut o = InterleavedSlice::new_mut(&mut expected[..], 1, n_out).unwrap();
            theirs.process_into_buffer(&i, &mut o, None).unwrap();
            let mut got = Vec::new();
            ours.convert(block, &mut |b| got.extend_from_slice(b));
            let same = got
                .iter()
                .zip(&expected)
                .all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(same, "{from}->{to}, block {k}");
        }
    }
}

#[test]
fn streams_of_one_pair_share_a_plan() {
    let a = BlockConverter::new(160, 320);
    let b = BlockConverter::new(160, 320);
    let c = BlockConverter::new(480, 160);
    assert!(a.shares_plan(&b));
    assert!(!a.shares_plan(&c));
}

#[test]
fn sample_conversion_matches_round_then_saturate() {
    let mut values = vec![
        0.0f32,
        -0.0,
        0.5,
        -0.5,
        1.5,
        -1.5,
        2.5,
        -2.5,
        0.499_999_97,
        -0.499_999_97,
        32_766.5,
        32_767.4,
        32_767.5,
        -32_768.4,
        -32_768.5,
        -32_769.0,
        1e9,
        -1e9,
        f32::MAX,
        f32::MIN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
    ];
    values.extend((-70_000..70_000).map(|k| k as f32 * 0.51));
    values.extend((-1000..1000).map(|k| k as f32 * 0.5));
    for v in values {
        assert_eq!(to_pcm(v), v.round() as i16, "{v}");
    }
}

#[test]
fn pcm16_output_is_the_rounded_block() {
    let input = signal(480 * 3);
    let mut a = BlockConverter::new(480, 160);
    let mut b = BlockConverter::new(480, 160);
    for block in input.chunks(480) {
        let mut floats = Vec::new();
        a.convert(block, &mut |o| floats.extend_from_slice(o));
        let mut pcm = Vec::new();
        b.convert_pcm16(block, 30..160, &mut pcm);
        let rounded: Vec<i16> = floats[30..].iter().map(|&v| to_pcm(v)).collect();
        assert_eq!(pcm, rounded);
    }
}
