//! The unit of audio everywhere in baton: 20 ms of mono PCM16 at a known rate, with a media
//! timestamp on the call's timeline.

use std::time::Duration;

/// Every frame is 20 ms long, on every leg and every rate.
pub const FRAME_MS: u32 = 20;

/// Number of samples in one 20 ms frame at `rate` Hz (160 at 8 kHz, 320 at 16 kHz, 480 at 24 kHz).
pub const fn samples_per_frame(rate: u32) -> usize {
    (rate / 1000 * FRAME_MS) as usize
}

/// 20 ms of mono signed 16-bit PCM.
#[derive(Clone, Debug, PartialEq)]
pub struct Frame {
    /// Sample rate in Hz.
    pub rate: u32,
    /// Media timestamp: where the first sample sits on the call's timeline.
    pub ts: Duration,
    /// Exactly `samples_per_frame(rate)` samples.
    pub samples: Vec<i16>,
}

impl Frame {
    /// A frame of digital silence.
    pub fn silence(rate: u32, ts: Duration) -> Self {
        Frame {
            rate,
            ts,
            samples: vec![0; samples_per_frame(rate)],
        }
    }

    /// Duration of the audio this frame holds.
    pub fn duration(&self) -> Duration {
        Duration::from_micros(self.samples.len() as u64 * 1_000_000 / u64::from(self.rate.max(1)))
    }
}
