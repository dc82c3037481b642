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

/// Appends `samples` as little-endian PCM16 bytes (the model protocols' audio, L16 legs, the
/// reconnect ring). Written in place over a resized buffer, a loop the compiler vectorises; a
/// push per sample re-checked the capacity 160–480 times a frame.
pub fn push_pcm16le(samples: &[i16], out: &mut Vec<u8>) {
    let start = out.len();
    out.resize(start + 2 * samples.len(), 0);
    for (b, s) in out[start..].chunks_exact_mut(2).zip(samples) {
        b.copy_from_slice(&s.to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pcm16le_appends_each_sample_low_byte_first() {
        let mut out = vec![9];
        push_pcm16le(&[0x0102, -2, i16::MIN], &mut out);
        assert_eq!(out, [9, 0x02, 0x01, 0xFE, 0xFF, 0x00, 0x80]);
        push_pcm16le(&[], &mut out);
        assert_eq!(out.len(), 7);
    }
}
