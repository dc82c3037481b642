//! The answering-machine heuristic: from the first seconds of an answered leg, decides whether a
//! person, a machine (voicemail greeting, hold music) or nothing recognisable picked up. Sans-IO:
//! it is fed the leg's audio frame by frame and keeps time by counting samples.
//!
//! How it decides (energy per frame against [`Settings::threshold_dbfs`], as `audio::vad`):
//! - **Human**: speech starts, then stops for [`Settings::end_silence`] before it has lasted
//!   [`Settings::max_greeting`] — a person says "Hello?" or "Priya speaking" and waits.
//! - **Machine**: sound (speech with pauses shorter than `end_silence`, or music) runs on for
//!   `max_greeting` — a recorded greeting talks on — or a steady tone of
//!   [`Settings::min_beep`] is heard (the record beep), found by Goertzel filters over 400 to
//!   2000 Hz in 25 Hz steps holding most of the frame's energy.
//! - **Unknown**: nothing is said within [`Settings::initial_silence`], or no rule has fired by
//!   [`Settings::window`].
//!
//! Its blind spots, by construction: a person who greets at length ("Good afternoon, you are
//! through to the front desk, Priya speaking, how can I help?") sounds like a machine, and a
//! terse greeting followed by a long pause before the beep sounds like a person. The verdicts on
//! the labelled fixtures (`audio-fixtures/answering/`) are asserted by `tests/transfer_amd.rs`.

use std::time::Duration;

use serde::Serialize;

use crate::audio::vad::rms_dbfs;

/// Who answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Human,
    Machine,
    Unknown,
}

/// Which rule decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "rule")]
pub enum Rule {
    /// A greeting of `ms` then silence.
    ShortGreeting { ms: u64 },
    /// Sound ran on past the longest greeting.
    LongGreeting { ms: u64 },
    /// A steady tone near `hz`.
    Beep { hz: u32 },
    /// Nothing said at first.
    InitialSilence,
    /// The window ran out.
    Undecided,
}

/// A verdict, the rule behind it, and when (media time since the answer) it was reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Decision {
    pub verdict: Verdict,
    pub rule: Rule,
    pub at: Duration,
}

/// The heuristic's thresholds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Settings {
    /// Frames louder than this are sound.
    pub threshold_dbfs: f32,
    /// Sound must last this long to count (clicks and pops do not).
    pub min_sound: Duration,
    /// Silence after speech that ends a greeting.
    pub end_silence: Duration,
    /// A greeting longer than this is a recording.
    pub max_greeting: Duration,
    /// No sound for this long after the answer: unknown.
    pub initial_silence: Duration,
    /// A tone held this long is a beep.
    pub min_beep: Duration,
    /// Share of a frame's energy one tone must hold.
    pub tone_share: f32,
    /// The verdict is unknown if no rule has fired by then.
    pub window: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            threshold_dbfs: crate::audio::vad::DEFAULT_THRESHOLD_DBFS,
            min_sound: Duration::from_millis(40),
            end_silence: Duration::from_millis(700),
            max_greeting: Duration::from_millis(2400),
            initial_silence: Duration::from_millis(2500),
            min_beep: Duration::from_millis(200),
            tone_share: 0.6,
            window: Duration::from_secs(5),
        }
    }
}

const BEEP_LOW_HZ: u32 = 400;
const BEEP_HIGH_HZ: u32 = 2000;
const BEEP_STEP_HZ: u32 = 25;
const BEEP_BINS: usize = ((BEEP_HIGH_HZ - BEEP_LOW_HZ) / BEEP_STEP_HZ + 1) as usize;

/// The heuristic over one answered leg.
#[derive(Clone, Debug)]
pub struct Screen {
    settings: Settings,
    rate: u32,
    /// Goertzel coefficients, one per candidate beep frequency.
    coeffs: [f32; BEEP_BINS],
    /// Media time: samples seen.
    samples: u64,
    sound_run: Duration,
    speech_start: Option<Duration>,
    last_sound_end: Duration,
    tone_run: Duration,
    tone_bin: Option<usize>,
    decision: Option<Decision>,
}

impl Screen {
    /// A screen for audio at `rate` Hz (8000 on a phone leg).
    pub fn new(rate: u32, settings: Settings) -> Screen {
        let mut coeffs = [0f32; BEEP_BINS];
        for (i, c) in coeffs.iter_mut().enumerate() {
            let hz = (BEEP_LOW_HZ + i as u32 * BEEP_STEP_HZ) as f32;
            *c = 2.0 * (2.0 * std::f32::consts::PI * hz / rate.max(1) as f32).cos();
        }
        Screen {
            settings,
            rate: rate.max(1),
            coeffs,
            samples: 0,
            sound_run: Duration::ZERO,
            speech_start: None,
            last_sound_end: Duration::ZERO,
            tone_run: Duration::ZERO,
            tone_bin: None,
            decision: None,
        }
    }

    /// The decision, once reached.
    pub fn decision(&self) -> Option<Decision> {
        self.decision
    }

    fn now(&self) -> Duration {
        Duration::from_micros(self.samples * 1_000_000 / u64::from(self.rate))
    }

    /// Feeds one frame (20 ms is usual; any length works). Returns the decision when this
    /// frame reached it; later frames are ignored.
    pub fn push(&mut self, frame: &[i16]) -> Option<Decision> {
        if self.decision.is_some() || frame.is_empty() {
            return None;
        }
        let start = self.now();
        self.samples += frame.len() as u64;
        let end = self.now();
        let len = end - start;
        let s = self.settings;
        let loud = rms_dbfs(frame) > s.threshold_dbfs;
        if loud {
            self.sound_run += len;
            if self.sound_run >= s.min_sound && self.speech_start.is_none() {
                self.speech_start = Some(end - self.sound_run);
            }
            self.last_sound_end = end;
            if let Some(hz) = self.beep(frame, len) {
                return self.decide(Verdict::Machine, Rule::Beep { hz }, end);
            }
        } else {
            self.sound_run = Duration::ZERO;
            self.tone_run = Duration::ZERO;
            self.tone_bin = None;
        }
        match self.speech_start {
            None => {
                if end >= s.initial_silence {
                    return self.decide(Verdict::Unknown, Rule::InitialSilence, end);
                }
            }
            Some(began) => {
                let ms = (self.last_sound_end - began).as_millis() as u64;
                if self.last_sound_end - began >= s.max_greeting {
                    return self.decide(Verdict::Machine, Rule::LongGreeting { ms }, end);
                }
                if end - self.last_sound_end >= s.end_silence {
                    return self.decide(Verdict::Human, Rule::ShortGreeting { ms }, end);
                }
            }
        }
        if end >= s.window {
            return self.decide(Verdict::Unknown, Rule::Undecided, end);
        }
        None
    }

    /// Tracks a steady tone; its frequency once it has lasted `min_beep`.
    fn beep(&mut self, frame: &[i16], len: Duration) -> Option<u32> {
        let n = frame.len() as f32;
        let energy: f32 = frame.iter().map(|&x| f32::from(x) * f32::from(x)).sum();
        if energy <= 0.0 {
            return None;
        }
        let mut best = (0usize, 0f32);
        for (i, &c) in self.coeffs.iter().enumerate() {
            let (mut s1, mut s2) = (0f32, 0f32);
            for &x in frame {
                let s0 = f32::from(x) + c * s1 - s2;
                s2 = s1;
                s1 = s0;
            }
            let power = s1 * s1 + s2 * s2 - c * s1 * s2;
            if power > best.1 {
                best = (i, power);
            }
        }
        let share = 2.0 * best.1 / (n * energy);
        let steady = self.tone_bin.is_none_or(|b| b.abs_diff(best.0) <= 2);
        if share >= self.settings.tone_share && steady {
            self.tone_run += len;
            self.tone_bin = Some(best.0);
        } else {
            self.tone_run = Duration::ZERO;
            self.tone_bin = (share >= self.settings.tone_share).then_some(best.0);
            if self.tone_bin.is_some() {
                self.tone_run = len;
            }
        }
        (self.tone_run >= self.settings.min_beep)
            .then(|| BEEP_LOW_HZ + best.0 as u32 * BEEP_STEP_HZ)
    }

    fn decide(&mut self, verdict: Verdict, rule: Rule, at: Duration) -> Option<Decision> {
        let d = Decision { verdict, rule, at };
        self.decision = Some(d);
        Some(d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RATE: u32 = 8000;
    const FRAME: usize = 160;

    fn tone(hz: f32, ms: u64, amp: f32) -> Vec<i16> {
        (0..(RATE as u64 * ms / 1000))
            .map(|i| {
                (amp * (2.0 * std::f32::consts::PI * hz * i as f32 / RATE as f32).sin()) as i16
            })
            .collect()
    }

    /// Speech-like: a 150 Hz buzz with harmonics, amplitude-modulated at 4 Hz (syllables).
    fn babble(ms: u64) -> Vec<i16> {
        (0..(RATE as u64 * ms / 1000))
            .map(|i| {
                let t = i as f32 / RATE as f32;
                let env = 0.6 + 0.4 * (2.0 * std::f32::consts::PI * 4.0 * t).sin();
                let v: f32 = (1..=12)
                    .map(|h| (2.0 * std::f32::consts::PI * 150.0 * h as f32 * t).sin() / h as f32)
                    .sum();
                (3000.0 * env * v) as i16
            })
            .collect()
    }

    fn silence(ms: u64) -> Vec<i16> {
        vec![0; (RATE as u64 * ms / 1000) as usize]
    }

    fn run(audio: &[i16]) -> Decision {
        let mut s = Screen::new(RATE, Settings::default());
        for f in audio.chunks(FRAME) {
            if let Some(d) = s.push(f) {
                return d;
            }
        }
        panic!(
            "no decision in {} ms",
            audio.len() as u64 * 1000 / RATE as u64
        )
    }

    #[test]
    fn a_short_greeting_then_silence_is_a_person() {
        let audio = [silence(300), babble(800), silence(2000)].concat();
        let d = run(&audio);
        assert_eq!(d.verdict, Verdict::Human);
        assert_eq!(d.rule, Rule::ShortGreeting { ms: 800 });
        assert_eq!(d.at, Duration::from_millis(1800));
    }

    #[test]
    fn a_long_greeting_is_a_machine() {
        let audio = [silence(300), babble(1500), silence(300), babble(3000)].concat();
        let d = run(&audio);
        assert_eq!(d.verdict, Verdict::Machine);
        assert!(matches!(d.rule, Rule::LongGreeting { .. }), "{d:?}");
        assert_eq!(d.at, Duration::from_millis(2700));
    }

    #[test]
    fn a_beep_is_a_machine_and_speech_is_no_beep() {
        let audio = [
            silence(300),
            babble(600),
            silence(300),
            tone(1000.0, 500, 8000.0),
        ]
        .concat();
        let d = run(&audio);
        assert_eq!(d.verdict, Verdict::Machine);
        assert_eq!(d.rule, Rule::Beep { hz: 1000 });
        // Off the 25 Hz grid too.
        let d = run(&[tone(1412.0, 400, 8000.0), silence(1000)].concat());
        assert!(matches!(d.rule, Rule::Beep { hz: 1400..=1425 }), "{d:?}");
        // Babble alone never trips the tone detector.
        let mut s = Screen::new(RATE, Settings::default());
        for f in babble(2000).chunks(FRAME) {
            s.push(f);
        }
        assert!(!matches!(
            s.decision().map(|d| d.rule),
            Some(Rule::Beep { .. })
        ));
    }

    #[test]
    fn silence_and_clicks_are_unknown() {
        let mut audio = silence(3000);
        audio[8000] = 30000; // a click
        let d = run(&audio);
        assert_eq!(d.verdict, Verdict::Unknown);
        assert_eq!(d.rule, Rule::InitialSilence);
        assert_eq!(d.at, Duration::from_millis(2500));
    }

    #[test]
    fn decided_once() {
        let mut s = Screen::new(RATE, Settings::default());
        let audio = [babble(400), silence(1000), babble(3000)].concat();
        let decisions: Vec<_> = audio.chunks(FRAME).filter_map(|f| s.push(f)).collect();
        assert_eq!(decisions.len(), 1);
        assert_eq!(decisions[0].verdict, Verdict::Human);
        assert_eq!(s.decision(), Some(decisions[0]));
    }
}
