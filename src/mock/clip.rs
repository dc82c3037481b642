//! Reply clips: what the mock model says. Loads WAV clips, brings them to the 24 kHz the Gemini
//! Live API always speaks (once, at load time, with the streaming resampler), and provides the built-in default reply so the mock
//! works with no files at all.

use std::io::Cursor;
use std::path::Path;
use std::sync::Arc;

use crate::audio::resample::resample_all;
use crate::audio::wav::{self, WavError};

/// The model's output rate: `audio/pcm;rate=24000`.
pub const OUTPUT_RATE: u32 = 24_000;

/// The spoken text of the built-in default reply.
pub const BUILTIN_DEFAULT_TEXT: &str = "Sorry, could you say that again?";

/// The advisor's "could you say that again" clip, compiled in so the mock needs no files.
const BUILTIN_DEFAULT_WAV: &[u8] = include_bytes!("../../audio-fixtures/clips/advisor_default.wav");

/// Mono PCM16 at [`OUTPUT_RATE`], shared between sessions.
pub type Clip = Arc<[i16]>;

/// A clip could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ClipError {
    #[error(transparent)]
    Wav(#[from] WavError),
    #[error("{path}: cannot convert {rate} Hz to {OUTPUT_RATE} Hz: {what}")]
    Resample {
        path: std::path::PathBuf,
        rate: u32,
        what: String,
    },
}

/// Reads a WAV clip of any rate and converts it to [`OUTPUT_RATE`].
pub fn load(path: &Path) -> Result<Clip, ClipError> {
    let pcm = wav::read(path)?;
    let samples = to_output_rate(&pcm.samples, pcm.rate).map_err(|what| ClipError::Resample {
        path: path.to_path_buf(),
        rate: pcm.rate,
        what,
    })?;
    Ok(samples.into())
}

/// The built-in default reply: the compiled-in advisor clip, or (should it ever fail to decode) a
/// synthesised tone-burst "utterance".
pub fn builtin_default() -> Clip {
    decode_embedded(BUILTIN_DEFAULT_WAV)
        .unwrap_or_else(synthetic_utterance)
        .into()
}

fn decode_embedded(bytes: &[u8]) -> Option<Vec<i16>> {
    let reader = hound::WavReader::new(Cursor::new(bytes)).ok()?;
    let spec = reader.spec();
    if spec.channels != 1
        || spec.bits_per_sample != 16
        || spec.sample_format != hound::SampleFormat::Int
    {
        return None;
    }
    let samples: Vec<i16> = reader
        .into_samples::<i16>()
        .collect::<Result<_, _>>()
        .ok()?;
    to_output_rate(&samples, spec.sample_rate).ok()
}

/// About 1.2 s of speech-like sound at 24 kHz: five tone bursts ("syllables") with short gaps,
/// each with a smooth envelope, loud enough for any energy VAD.
pub fn synthetic_utterance() -> Vec<i16> {
    let rate = OUTPUT_RATE as usize;
    let syllable = rate * 180 / 1000;
    let gap = rate * 60 / 1000;
    let pitches = [180.0_f64, 210.0, 195.0, 170.0, 150.0];
    let mut out = Vec::with_capacity(pitches.len() * (syllable + gap));
    for f0 in pitches {
        for i in 0..syllable {
            let t = i as f64 / rate as f64;
            let env = (std::f64::consts::PI * i as f64 / syllable as f64).sin();
            let voice = (2.0 * std::f64::consts::PI * f0 * t).sin()
                + 0.5 * (2.0 * std::f64::consts::PI * 2.0 * f0 * t).sin()
                + 0.25 * (2.0 * std::f64::consts::PI * 3.0 * f0 * t).sin();
            out.push((voice * env * 6000.0) as i16);
        }
        out.extend(std::iter::repeat_n(0, gap));
    }
    out
}

/// Converts mono PCM16 from `rate` to [`OUTPUT_RATE`] (whole clip, time-aligned).
pub fn to_output_rate(samples: &[i16], rate: u32) -> Result<Vec<i16>, String> {
    if rate == OUTPUT_RATE {
        return Ok(samples.to_vec());
    }
    resample_all(samples, rate, OUTPUT_RATE).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audio::vad::rms_dbfs;

    #[test]
    fn builtin_default_is_the_advisor_clip_at_24k() {
        let clip = builtin_default();
        // advisor_default.wav is 1.64 s at 16 kHz.
        let secs = clip.len() as f64 / f64::from(OUTPUT_RATE);
        assert!((1.5..1.8).contains(&secs), "{secs} s");
        assert!(rms_dbfs(&clip) > -40.0);
    }

    #[test]
    fn synthetic_utterance_is_voiced() {
        let s = synthetic_utterance();
        assert!(s.len() > OUTPUT_RATE as usize);
        assert!(rms_dbfs(&s[..4800]) > -30.0);
    }

    #[test]
    fn resampling_keeps_duration() {
        let x: Vec<i16> = (0..16000).map(|i| (i % 100) as i16).collect();
        assert_eq!(to_output_rate(&x, 16000).unwrap().len(), 24000);
        assert_eq!(to_output_rate(&x, 24000).unwrap(), x);
        assert!(to_output_rate(&x, 0).is_err());
    }
}
