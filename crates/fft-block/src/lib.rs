//! The FFT block converter behind baton's streaming resampler (`baton::audio::resample`): one
//! block of PCM16 in, one block out, by rubato's synchronous FFT method (the block's spectrum
//! times a windowed-sinc anti-aliasing filter, truncated or zero-extended to the output block,
//! inverse transformed and overlap-added). What never changes for a rate pair — the filter's
//! spectrum and the two FFT plans — is built once per pair per thread and shared by every stream
//! of that pair; the transforms' work buffers are one set per thread. A stream keeps only its
//! overlap: about 1 KiB, where a private rubato `Fft` kept ~20 KiB (its own plans, filter and
//! buffers) per stream, two streams per call.
//!
//! The output is bit-for-bit rubato's `Fft` with the same blocks and a `BlackmanHarris2` window
//! (baton's `audio::fft_block_tests::matches_rubato_bit_for_bit`).
//!
//! A crate of its own so that it is compiled optimised in every profile: the FFT's generic code
//! is instantiated where its planner is called, and in baton's own (unoptimised) development
//! builds a call's resampling cost several times what it does here. Nothing here is generic, so
//! every transform is compiled with this crate's optimisation level.

use std::cell::RefCell;
use std::ops::Range;
use std::sync::Arc;

use realfft::num_complex::Complex;
use realfft::{ComplexToReal, RealFftPlanner, RealToComplex};
use windowfunctions::{Symmetry, WindowFunction, window};

/// What every stream of one rate pair shares: block sizes, the filter's spectrum, the plans.
struct Plan {
    size_in: usize,
    size_out: usize,
    /// Spectrum of the filter (`size_in` taps, zero-padded to `2 * size_in`).
    filter: Box<[Complex<f32>]>,
    fft: Arc<dyn RealToComplex<f32>>,
    ifft: Arc<dyn ComplexToReal<f32>>,
}

/// The transforms' buffers, overwritten by every block: one set per thread, as large as the
/// largest plan used on it needs (a call's two directions take turns on them every frame, so
/// they only grow; each block uses a prefix).
#[derive(Default)]
struct Work {
    time_in: Vec<f32>,
    freq_in: Vec<Complex<f32>>,
    freq_out: Vec<Complex<f32>>,
    time_out: Vec<f32>,
    scratch_fw: Vec<Complex<f32>>,
    scratch_inv: Vec<Complex<f32>>,
}

thread_local! {
    /// Plans built on this thread (a handful of rate pairs at most).
    static PLANS: RefCell<Vec<Arc<Plan>>> = const { RefCell::new(Vec::new()) };
    static WORK: RefCell<Work> = RefCell::new(Work::default());
}

/// Converts fixed blocks of `size_in` samples into blocks of `size_out`, keeping the overlap
/// between blocks. Delay: half an output block.
pub struct BlockConverter {
    plan: Arc<Plan>,
    /// The second half of the previous block's inverse transform.
    overlap: Box<[f32]>,
}

impl BlockConverter {
    /// A converter of `size_in`-sample blocks into `size_out`-sample blocks (both non-zero).
    pub fn new(size_in: usize, size_out: usize) -> Self {
        let plan = PLANS.with_borrow_mut(|plans| {
            if let Some(p) = plans
                .iter()
                .find(|p| p.size_in == size_in && p.size_out == size_out)
            {
                return Arc::clone(p);
            }
            let p = Arc::new(Plan::new(size_in, size_out));
            plans.push(Arc::clone(&p));
            p
        });
        BlockConverter {
            plan,
            overlap: vec![0.0; size_out].into_boxed_slice(),
        }
    }

    /// Whether `other` uses the same filter and plans (it converts the same rate pair and was
    /// made on the same thread).
    pub fn shares_plan(&self, other: &BlockConverter) -> bool {
        Arc::ptr_eq(&self.plan, &other.plan)
    }

    /// Output samples per block.
    pub fn size_out(&self) -> usize {
        self.plan.size_out
    }

    /// Output samples of delay (half an output block).
    pub fn delay(&self) -> usize {
        self.plan.size_out / 2
    }

    /// Forgets the overlap: the next block starts a new stream.
    pub fn reset(&mut self) {
        self.overlap.fill(0.0);
    }

    /// Converts one input block (`size_in` samples) and appends the samples `keep` of its output
    /// block (`size_out` samples), rounded to PCM16, to `out`.
    pub fn convert_pcm16(&mut self, input: &[i16], keep: Range<usize>, out: &mut Vec<i16>) {
        self.convert(input, &mut |block| {
            out.extend(block[keep.clone()].iter().map(|&v| to_pcm(v)));
        });
    }

    /// Converts one input block (`size_in` samples) and hands its output block (`size_out`
    /// samples) to `emit`.
    pub fn convert(&mut self, input: &[i16], emit: &mut dyn FnMut(&[f32])) {
        let plan = &*self.plan;
        let (n_in, n_out) = (plan.size_in, plan.size_out);
        debug_assert_eq!(input.len(), n_in);
        WORK.with_borrow_mut(|w| {
            grow(&mut w.time_in, 2 * n_in);
            grow(&mut w.freq_in, n_in + 1);
            grow(&mut w.freq_out, n_out + 1);
            grow(&mut w.time_out, 2 * n_out);
            grow(&mut w.scratch_fw, plan.fft.get_scratch_len());
            grow(&mut w.scratch_inv, plan.ifft.get_scratch_len());
            let time_in = &mut w.time_in[..2 * n_in];
            let freq_in = &mut w.freq_in[..n_in + 1];
            let freq_out = &mut w.freq_out[..n_out + 1];
            let time_out = &mut w.time_out[..2 * n_out];

            for (t, &s) in time_in.iter_mut().zip(input) {
                *t = f32::from(s);
            }
            time_in[n_in..].fill(0.0);
            // Lengths are the plans' own, so neither transform can refuse them; the inverse only
            // reports (and ignores) a non-zero imaginary part at DC or Nyquist.
            let fw = plan
                .fft
                .process_with_scratch(time_in, freq_in, &mut w.scratch_fw);
            debug_assert!(fw.is_ok());
            let kept = if n_in < n_out { n_in + 1 } else { n_out };
            for ((o, i), f) in freq_out.iter_mut().zip(&freq_in[..kept]).zip(&*plan.filter) {
                *o = *i * *f;
            }
            freq_out[kept..].fill(Complex::default());
            let inv = plan
                .ifft
                .process_with_scratch(freq_out, time_out, &mut w.scratch_inv);
            debug_assert!(inv.is_ok());
            let (head, tail) = time_out.split_at_mut(n_out);
            for (h, o) in head.iter_mut().zip(self.overlap.iter_mut()) {
                *h += *o;
            }
            self.overlap.copy_from_slice(tail);
            emit(head);
        });
    }
}

/// `v.round() as i16` (half away from zero, clipped to the i16 range, NaN as 0) without the
/// libm call `round` is on x86-64's baseline: the conversion runs for every output sample.
#[inline]
pub fn to_pcm(v: f32) -> i16 {
    // Within ±40000 every float's integer part converts exactly and `v - i` is exact.
    let v = v.clamp(-40_000.0, 40_000.0);
    let i = v as i32;
    let frac = v - i as f32;
    let r = if frac >= 0.5 {
        i + 1
    } else if frac <= -0.5 {
        i - 1
    } else {
        i
    };
    r.clamp(i32::from(i16::MIN), i32::from(i16::MAX)) as i16
}

/// Lengthens `v` to `n` if it is shorter; a longer one stays as it is.
fn grow<T: Clone + Default>(v: &mut Vec<T>, n: usize) {
    if v.len() < n {
        v.resize(n, T::default());
    }
}

impl Plan {
    fn new(size_in: usize, size_out: usize) -> Plan {
        // The anti-aliasing cutoff, relative to the input's Nyquist frequency; downsampling
        // scales it below the output's.
        let cutoff = if size_in > size_out {
            cutoff(size_out) * size_out as f32 / size_in as f32
        } else {
            cutoff(size_in)
        };
        let mut taps = vec![0.0f32; 2 * size_in];
        let sinc = windowed_sinc(size_in, cutoff);
        let scale = (2 * size_in) as f32;
        for (t, s) in taps.iter_mut().zip(&sinc) {
            *t = s / scale;
        }
        let mut planner = RealFftPlanner::<f32>::new();
        let fft = planner.plan_fft_forward(2 * size_in);
        let ifft = planner.plan_fft_inverse(2 * size_out);
        let mut filter = vec![Complex::default(); size_in + 1];
        let done = fft.process(&mut taps, &mut filter);
        debug_assert!(done.is_ok());
        Plan {
            size_in,
            size_out,
            filter: filter.into_boxed_slice(),
            fft,
            ifft,
        }
    }
}

/// A cutoff for an `n`-tap sinc under a squared Blackman-Harris window: rubato's cubic fit
/// (`calculate_cutoff`), which places it where that window's transition band begins.
fn cutoff(n: usize) -> f32 {
    let (k1, k2, k3) = (
        13.745_202_940_783_823_f64 as f32,
        121.735_325_863_749_34_f64 as f32,
        5_964.163_279_612_051_f64 as f32,
    );
    let n = n as f32;
    1.0 / (k1 / n + k2 / (n * n) + k3 / (n * n * n) + 1.0)
}

/// `n` taps of a sinc with the given relative cutoff centred on tap `n / 2`, under a squared
/// periodic Blackman-Harris window, normalised to unit DC gain.
fn windowed_sinc(n: usize, cutoff: f32) -> Vec<f32> {
    let mut taps: Vec<f32> = window::<f64>(n, WindowFunction::BlackmanHarris, Symmetry::Periodic)
        .enumerate()
        .map(|(x, w)| {
            let w = w as f32;
            w * w * sinc((x as f32 - (n / 2) as f32) * cutoff)
        })
        .collect();
    let sum: f32 = taps.iter().sum();
    for t in &mut taps {
        *t /= sum;
    }
    taps
}

fn sinc(x: f32) -> f32 {
    if x == 0.0 {
        1.0
    } else {
        (x * std::f32::consts::PI).sin() / (x * std::f32::consts::PI)
    }
}
