//! Energy voice-activity detection: a per-frame voiced/unvoiced decision and a turn detector that
//! turns those decisions into speech start/end events with a hangover (the silence window).
//! Sans-IO: it is fed frames with their media timestamps and never reads a clock.

use std::time::Duration;

/// Default threshold: frames whose RMS is above −45 dBFS count as speech.
pub const DEFAULT_THRESHOLD_DBFS: f32 = -45.0;

/// RMS level of a block of samples in dBFS (−inf for digital silence, clamped to −120).
pub fn rms_dbfs(samples: &[i16]) -> f32 {
    if samples.is_empty() {
        return -120.0;
    }
    // Squares summed as integers (exact, and the loop vectorises); below 2^23 samples the sum
    // is exact in f64 too, so this is the same value a float sum would give.
    let sum: i64 = samples
        .iter()
        .map(|&s| i64::from(i32::from(s) * i32::from(s)))
        .sum();
    let rms = (sum as f64 / samples.len() as f64).sqrt() / 32768.0;
    if rms <= 1e-6 {
        -120.0
    } else {
        (20.0 * rms.log10()) as f32
    }
}

/// A speech boundary found by [`TurnDetector`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VadEvent {
    /// Speech began; the timestamp is the start of the first voiced frame.
    SpeechStart(Duration),
    /// Speech ended; the timestamp is the end of the last voiced frame. Reported once the
    /// silence window has elapsed after it.
    SpeechEnd(Duration),
}

/// Turns per-frame energy decisions into speech start/end with a silence window.
#[derive(Clone, Debug)]
pub struct TurnDetector {
    threshold_dbfs: f32,
    /// Voiced frames in a row needed to start speech (debounces clicks).
    start_frames: u32,
    silence: Duration,
    run: u32,
    run_start: Duration,
    in_speech: bool,
    last_voiced_end: Duration,
}

impl TurnDetector {
    /// `silence`: how long the signal must stay below the threshold before speech is over.
    pub fn new(silence: Duration) -> Self {
        Self::with_threshold(silence, DEFAULT_THRESHOLD_DBFS)
    }

    pub fn with_threshold(silence: Duration, threshold_dbfs: f32) -> Self {
        TurnDetector {
            threshold_dbfs,
            start_frames: 2,
            silence,
            run: 0,
            run_start: Duration::ZERO,
            in_speech: false,
            last_voiced_end: Duration::ZERO,
        }
    }

    pub fn in_speech(&self) -> bool {
        self.in_speech
    }

    /// End of the last voiced frame seen.
    pub fn last_voiced_end(&self) -> Duration {
        self.last_voiced_end
    }

    /// Feeds one block of audio starting at media time `ts` lasting `len`.
    pub fn push(&mut self, samples: &[i16], ts: Duration, len: Duration) -> Option<VadEvent> {
        let voiced = rms_dbfs(samples) > self.threshold_dbfs;
        if voiced {
            if self.run == 0 {
                self.run_start = ts;
            }
            self.run += 1;
            self.last_voiced_end = ts + len;
            if !self.in_speech && self.run >= self.start_frames {
                self.in_speech = true;
                return Some(VadEvent::SpeechStart(self.run_start));
            }
            None
        } else {
            self.run = 0;
            if self.in_speech && ts + len >= self.last_voiced_end + self.silence {
                self.in_speech = false;
                return Some(VadEvent::SpeechEnd(self.last_voiced_end));
            }
            None
        }
    }

    /// Forgets any speech in progress (e.g. when the client marks turns by hand).
    pub fn reset(&mut self) {
        self.run = 0;
        self.in_speech = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tone(n: usize, amp: f64) -> Vec<i16> {
        (0..n)
            .map(|i| (amp * (i as f64 * 0.2).sin()) as i16)
            .collect()
    }

    #[test]
    fn the_level_is_the_float_sum_of_squares_exactly() {
        let reference = |v: &[i16]| {
            let sum: f64 = v.iter().map(|&s| f64::from(s) * f64::from(s)).sum();
            let rms = (sum / v.len() as f64).sqrt() / 32768.0;
            if rms <= 1e-6 {
                -120.0
            } else {
                (20.0 * rms.log10()) as f32
            }
        };
        let mut x: u32 = 12345;
        let noise: Vec<i16> = (0..960)
            .map(|_| {
                x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                (x >> 16) as i16
            })
            .collect();
        for v in [
            vec![i16::MIN; 960],
            vec![i16::MAX; 320],
            vec![0; 160],
            vec![1; 160],
            noise,
            tone(480, 9000.0),
        ] {
            assert_eq!(rms_dbfs(&v).to_bits(), reference(&v).to_bits());
        }
    }

    #[test]
    fn levels() {
        assert_eq!(rms_dbfs(&[0; 160]), -120.0);
        let full = tone(16000, 32767.0);
        assert!((rms_dbfs(&full) + 3.0).abs() < 0.2);
    }

    #[test]
    fn detects_a_turn_with_hangover() {
        let f = Duration::from_millis(20);
        let mut vad = TurnDetector::new(Duration::from_millis(100));
        let mut events = vec![];
        let loud = tone(320, 8000.0);
        let quiet = vec![0i16; 320];
        for i in 0..60u32 {
            let ts = f * i;
            let block = if (10..30).contains(&i) { &loud } else { &quiet };
            if let Some(e) = vad.push(block, ts, f) {
                events.push((i, e));
            }
        }
        assert_eq!(
            events,
            vec![
                (11, VadEvent::SpeechStart(f * 10)),
                (34, VadEvent::SpeechEnd(f * 30)),
            ]
        );
    }

    #[test]
    fn single_click_is_not_speech() {
        let f = Duration::from_millis(20);
        let mut vad = TurnDetector::new(Duration::from_millis(100));
        assert_eq!(vad.push(&tone(320, 8000.0), Duration::ZERO, f), None);
        assert_eq!(vad.push(&[0; 320], f, f), None);
        assert!(!vad.in_speech());
    }
}
