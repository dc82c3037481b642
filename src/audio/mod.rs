//! Audio primitives shared by every leg and model: 20 ms frames, G.711, streaming resampling,
//! WAV files, an energy VAD, the playout clock and the reframer that cuts a leg's packets into
//! frames.

#[cfg(test)]
mod fft_block_tests;
pub mod frame;
pub mod g711;
pub mod playout;
pub mod reframe;
pub mod resample;
pub mod vad;
pub mod wav;

pub use frame::{FRAME_MS, Frame, push_pcm16le, samples_per_frame};
pub use reframe::Reframer;
