//! Sample-rate conversion of mono PCM16 between a leg's rate and a model's rate: a streaming
//! resampler that keeps filter state across calls ([`StreamResampler`]) and a whole-clip helper
//! that returns time-aligned output ([`resample_all`]).
//!
//! # Choice of resampler
//!
//! Telephony ratios are fixed and exact (8k↔16k, 24k→8k, 16k→24k, ...), so nothing needs the
//! variable ratio an asynchronous resampler pays for. rubato's synchronous FFT method is used
//! (the `fft-block` crate, bit for bit rubato's `Fft`), with one FFT block of 20 ms of input
//! (rounded up to an even multiple of the ratio's smallest block: 160 in → 320 out for 8k→16k,
//! 480 → 160 for 24k→8k, 882 → 320 for 44.1k→16k) and both block sizes fixed:
//!
//! * **Delay**: half an output block, i.e. 10 ms for every telephony pair (80 samples at 8 kHz out,
//!   160 at 16 kHz, 240 at 24 kHz). Input arrives in 20 ms frames, so a frame in yields its block
//!   out at once and adds no waiting on top. A 64-tap sinc `Async` delays only 1.3–4 ms (half its
//!   sinc), but that saving is immaterial next to a speech model's hundreds of milliseconds, and it
//!   costs 3–10× more CPU per frame. A polynomial `Async` is about as cheap as the FFT and has
//!   almost no delay, but no anti-aliasing filter, which is audible when the model's 24 kHz audio
//!   is folded into an 8 kHz leg.
//! * **Cost**: one real FFT of two blocks in and one inverse FFT of two blocks out per 20 ms, about
//!   1.5 µs per frame for 8k→16k and 24k→8k; no allocation once constructed.
//! * **Memory**: the filter and the FFT plans are shared by every stream of a rate pair
//!   (`fft-block`); a stream holds one input block (i16) and one output block of overlap
//!   (f32), about 1.6 KiB for either direction of an 8 kHz call.
//! * **Quality**: the anti-aliasing cutoff sits at ~92 % of the lower Nyquist frequency (about
//!   3.66 kHz on an 8 kHz leg), above the 3.4 kHz telephone band.
//!
//! The block is always an even multiple of the ratio's smallest exact block, so that half a block
//! is a whole number of samples on both sides and the reported delay is exact (an odd block would
//! put the filter centre half an input sample off). Offline rates therefore may get longer blocks:
//! 22.05k→16k uses 882 → 640 (40 ms, delay 20 ms). Ratios whose block would exceed 100 ms of input
//! are refused.

use std::time::Duration;

use fft_block::BlockConverter;

/// Lowest sample rate accepted, in Hz.
pub const MIN_RATE: u32 = 1_000;
/// Highest sample rate accepted, in Hz.
pub const MAX_RATE: u32 = 192_000;

/// Length of the input block the resampler aims for, in milliseconds.
const BLOCK_MS: u32 = 20;

/// Why a resampler could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ResampleError {
    /// A rate outside [`MIN_RATE`]..=[`MAX_RATE`].
    #[error("unsupported sample rate {hz} Hz (supported: {MIN_RATE}..={MAX_RATE})")]
    UnsupportedRate {
        /// The offending rate.
        hz: u32,
    },
    /// The two rates have so small a common divisor that an exact block would exceed 100 ms (and
    /// the delay 50 ms).
    #[error(
        "ratio {from_hz} Hz -> {to_hz} Hz needs a block of {block} input samples (over 100 ms)"
    )]
    AwkwardRatio {
        /// Input rate.
        from_hz: u32,
        /// Output rate.
        to_hz: u32,
        /// Smallest exact input block for the ratio.
        block: usize,
    },
}

/// One direction of one call: converts a stream of mono PCM16 from `from_hz` to `to_hz`, keeping
/// filter state across [`process`](Self::process) calls.
pub struct StreamResampler {
    from_hz: u32,
    to_hz: u32,
    /// `None` when the rates are equal: samples pass straight through.
    fft: Option<FftStream>,
}

/// The state of a converting (non-passthrough) stream.
struct FftStream {
    /// Converts a block of `pending.len()` samples into `conv.size_out()`.
    conv: BlockConverter,
    /// Input block being filled (one block long).
    pending: Box<[i16]>,
    /// Number of valid samples at the start of `pending`.
    fill: usize,
    /// Input samples taken since construction or the last flush.
    consumed: u64,
    /// Output samples emitted since construction or the last flush.
    emitted: u64,
    /// Drop the filter's delay at the start of every stream (see [`StreamResampler::aligned`]).
    aligned: bool,
    /// Output samples still to drop at the start of this stream.
    skip: usize,
}

impl StreamResampler {
    /// A resampler from `from_hz` to `to_hz`. Equal rates give a zero-delay passthrough.
    pub fn new(from_hz: u32, to_hz: u32) -> Result<Self, ResampleError> {
        for hz in [from_hz, to_hz] {
            if !(MIN_RATE..=MAX_RATE).contains(&hz) {
                return Err(ResampleError::UnsupportedRate { hz });
            }
        }
        if from_hz == to_hz {
            return Ok(Self {
                from_hz,
                to_hz,
                fft: None,
            });
        }
        let from = from_hz as usize;
        let to = to_hz as usize;
        let min_block = from / gcd(from, to);
        let wanted = from * BLOCK_MS as usize / 1000;
        // An even number of minimal blocks makes both block sizes even, so the filter's centre
        // (half a block) falls on a whole sample on both sides and the delay is exact.
        let block = wanted.div_ceil(2 * min_block).max(1) * 2 * min_block;
        if block > from / 10 {
            return Err(ResampleError::AwkwardRatio {
                from_hz,
                to_hz,
                block,
            });
        }
        Ok(Self {
            from_hz,
            to_hz,
            fft: Some(FftStream {
                conv: BlockConverter::new(block, block * to / from),
                pending: vec![0; block].into_boxed_slice(),
                fill: 0,
                consumed: 0,
                emitted: 0,
                aligned: false,
                skip: 0,
            }),
        })
    }

    /// A resampler whose every stream (from construction, and after each [`flush`](Self::flush))
    /// is time-aligned with its input: the filter's leading delay is dropped, so a stream of `n`
    /// input samples gives exactly `round(n * to / from)` output samples, the first of them for
    /// the first input sample. Consecutive streams then join without the delay's silence between
    /// them (the model's replies, back to back). The delay still holds back the last
    /// [`delay`](Self::delay) of output until more input or the flush comes.
    pub fn aligned(from_hz: u32, to_hz: u32) -> Result<Self, ResampleError> {
        let mut r = Self::new(from_hz, to_hz)?;
        if let Some(s) = r.fft.as_mut() {
            s.aligned = true;
            s.skip = s.conv.delay();
        }
        Ok(r)
    }

    /// Feeds any number of input samples and appends every output sample that is ready to `out`.
    /// Input that does not complete a block is kept for the next call.
    pub fn process(&mut self, input: &[i16], out: &mut Vec<i16>) {
        let Some(s) = self.fft.as_mut() else {
            out.extend_from_slice(input);
            return;
        };
        let mut rest = input;
        while !rest.is_empty() {
            let take = (s.pending.len() - s.fill).min(rest.len());
            let (head, tail) = rest.split_at(take);
            s.pending[s.fill..s.fill + take].copy_from_slice(head);
            s.fill += take;
            s.consumed += take as u64;
            rest = tail;
            if s.fill == s.pending.len() {
                s.convert_block(out, s.conv.size_out());
            }
        }
    }

    /// End of stream: pads what is buffered with silence and emits the rest of the output, so that
    /// the stream's total output is `delay_samples() + round(total_input * to / from)` samples.
    /// The resampler is then back in its initial state, ready for a new stream.
    pub fn flush(&mut self, out: &mut Vec<i16>) {
        let Some(s) = self.fft.as_mut() else {
            return;
        };
        if s.consumed > 0 {
            let target = output_len(s.consumed, self.from_hz, self.to_hz) + s.conv.delay() as u64;
            while s.emitted < target {
                s.pending[s.fill..].fill(0);
                s.fill = s.pending.len();
                let want = (target - s.emitted).min(s.conv.size_out() as u64) as usize;
                s.convert_block(out, want);
            }
        }
        s.conv.reset();
        s.fill = 0;
        s.consumed = 0;
        s.emitted = 0;
        s.skip = if s.aligned { s.conv.delay() } else { 0 };
    }

    /// The algorithmic delay in output samples: output sample `n` corresponds to input time
    /// `(n - delay_samples()) / to_hz`. Zero for a passthrough.
    pub fn delay_samples(&self) -> usize {
        self.fft.as_ref().map_or(0, |s| s.conv.delay())
    }

    /// The algorithmic delay as a duration.
    pub fn delay(&self) -> Duration {
        Duration::from_nanos(self.delay_samples() as u64 * 1_000_000_000 / u64::from(self.to_hz))
    }

    /// Input rate in Hz.
    pub fn from_hz(&self) -> u32 {
        self.from_hz
    }

    /// Output rate in Hz.
    pub fn to_hz(&self) -> u32 {
        self.to_hz
    }
}

impl FftStream {
    /// Converts the full `pending` block and appends the first `keep` output samples to `out`.
    fn convert_block(&mut self, out: &mut Vec<i16>, keep: usize) {
        debug_assert_eq!(self.fill, self.pending.len());
        let dropped = self.skip.min(keep);
        self.conv.convert_pcm16(&self.pending, dropped..keep, out);
        self.skip -= dropped;
        self.fill = 0;
        self.emitted += keep as u64;
    }
}

/// Resamples a whole clip offline. The resampler's delay is trimmed, so the output is
/// time-aligned with the input, and its length is `round(input.len() * to_hz / from_hz)`.
pub fn resample_all(input: &[i16], from_hz: u32, to_hz: u32) -> Result<Vec<i16>, ResampleError> {
    let mut r = StreamResampler::new(from_hz, to_hz)?;
    let delay = r.delay_samples();
    let len = output_len(input.len() as u64, from_hz, to_hz) as usize;
    let mut out = Vec::with_capacity(len + delay + r.fft.as_ref().map_or(0, |s| s.conv.size_out()));
    r.process(input, &mut out);
    r.flush(&mut out);
    out.drain(..delay);
    debug_assert_eq!(out.len(), len);
    Ok(out)
}

/// `round(n * to / from)` in integer arithmetic.
fn output_len(n: u64, from_hz: u32, to_hz: u32) -> u64 {
    (n * u64::from(to_hz) + u64::from(from_hz) / 2) / u64::from(from_hz)
}

fn gcd(mut a: usize, mut b: usize) -> usize {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_bad_rates() {
        assert!(matches!(
            StreamResampler::new(0, 8000),
            Err(ResampleError::UnsupportedRate { hz: 0 })
        ));
        assert!(matches!(
            StreamResampler::new(8000, 1_000_000),
            Err(ResampleError::UnsupportedRate { hz: 1_000_000 })
        ));
        // gcd(44101, 48000) = 1: the exact even block would be 2 x 44101 samples, two seconds.
        assert!(matches!(
            StreamResampler::new(44101, 48000),
            Err(ResampleError::AwkwardRatio { block: 88202, .. })
        ));
        // 11025 -> 16000 needs 2 x 441-sample (80 ms) blocks: accepted, with a 40 ms delay.
        let r = StreamResampler::new(11025, 16000).unwrap();
        assert_eq!(r.delay(), Duration::from_millis(40));
    }

    #[test]
    fn block_sizes_for_telephony_pairs() {
        for (from, to, bin, bout) in [
            (8000, 16000, 160, 320),
            (24000, 8000, 480, 160),
            (16000, 24000, 320, 480),
            (44100, 16000, 882, 320),
            (48000, 8000, 960, 160),
        ] {
            let r = StreamResampler::new(from, to).unwrap();
            let s = r.fft.as_ref().unwrap();
            assert_eq!(
                (s.pending.len(), s.conv.size_out()),
                (bin, bout),
                "{from}->{to}"
            );
            assert_eq!(r.delay_samples(), bout / 2);
            assert_eq!(r.delay(), Duration::from_millis(10));
        }
        // The smallest exact block of 22.05k -> 16k is 441 -> 320; it is doubled to be even.
        let r = StreamResampler::new(22050, 16000).unwrap();
        let s = r.fft.as_ref().unwrap();
        assert_eq!((s.pending.len(), s.conv.size_out()), (882, 640));
        assert_eq!(r.delay_samples(), 320);
    }

    #[test]
    fn output_count_follows_ratio_for_any_chunking() {
        let input: Vec<i16> = (0..4000).map(|i| ((i * 37) % 2000 - 1000) as i16).collect();
        let mut whole = Vec::new();
        let mut r = StreamResampler::new(24000, 8000).unwrap();
        r.process(&input, &mut whole);
        let mut pieces = Vec::new();
        let mut r2 = StreamResampler::new(24000, 8000).unwrap();
        for chunk in input.chunks(37) {
            r2.process(chunk, &mut pieces);
        }
        assert_eq!(whole, pieces);
        assert_eq!(whole.len(), 4000 / 480 * 160);
        r.flush(&mut whole);
        assert_eq!(whole.len(), 80 + (4000 * 8000 + 12000) / 24000);
    }
}
