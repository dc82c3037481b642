//! The mock model's ears: decodes `realtimeInput` audio (base64 in either alphabet, `audio/pcm`
//! with `rate=`), runs the energy VAD on it at its own rate, and applies the client's manual
//! activity markers, producing caller speech-start and turn-end events. Sans-IO: it works on media
//! time (samples received), never on a clock.

use std::time::Duration;

use crate::b64::{STANDARD_PAD_INDIFFERENT, URL_SAFE_PAD_INDIFFERENT};
use base64::Engine as _;

use super::inbound::Rejection;
use crate::audio::vad::{TurnDetector, VadEvent};
use crate::model::gemini::wire::Blob;

/// Input rate when the MIME type has no `rate=`.
pub const DEFAULT_INPUT_RATE: u32 = 16_000;

/// What the listener noticed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Heard {
    /// The caller started speaking (VAD or `activityStart`): a barge-in if the model is talking.
    SpeechStart,
    /// The caller's turn is over. `audio`: the turn contained caller audio (so it gets an input
    /// transcription).
    TurnEnd { audio: bool },
}

/// Decoded PCM16 audio and its rate.
#[derive(Clone, Debug, PartialEq)]
pub struct Audio {
    pub rate: u32,
    pub samples: Vec<i16>,
}

impl Audio {
    pub fn duration(&self) -> Duration {
        Duration::from_secs_f64(self.samples.len() as f64 / f64::from(self.rate))
    }
}

/// Turns caller audio and activity markers into [`Heard`] events.
#[derive(Clone, Debug)]
pub struct Listener {
    auto: bool,
    vad: TurnDetector,
    rate: u32,
    /// Samples of a not yet complete 20 ms block.
    pending: Vec<i16>,
    media: Duration,
    /// Manual mode: between `activityStart` and `activityEnd`.
    active: bool,
    /// The current caller turn has audio in it.
    heard: bool,
}

impl Listener {
    /// `auto`: server VAD on; `silence`: its end-of-speech window.
    pub fn new(auto: bool, silence: Duration) -> Self {
        Listener {
            auto,
            vad: TurnDetector::new(silence),
            rate: DEFAULT_INPUT_RATE,
            pending: Vec::new(),
            media: Duration::ZERO,
            active: false,
            heard: false,
        }
    }

    /// The caller is speaking (VAD) or inside a manual activity.
    pub fn caller_active(&self) -> bool {
        if self.auto {
            self.vad.in_speech()
        } else {
            self.active
        }
    }

    /// Feeds decoded audio; events are appended to `out`.
    pub fn audio(&mut self, audio: &Audio, out: &mut Vec<Heard>) {
        if audio.rate != self.rate {
            self.pending.clear();
            self.rate = audio.rate;
        }
        if !self.auto {
            if self.active && !audio.samples.is_empty() {
                self.heard = true;
            }
            return;
        }
        let block = (self.rate / 50).max(1) as usize;
        let block_len = Duration::from_secs_f64(block as f64 / f64::from(self.rate));
        let mut rest = audio.samples.as_slice();
        while !rest.is_empty() {
            let take = (block - self.pending.len()).min(rest.len());
            self.pending.extend_from_slice(&rest[..take]);
            rest = &rest[take..];
            if self.pending.len() == block {
                let ev = self.vad.push(&self.pending, self.media, block_len);
                self.media += block_len;
                self.pending.clear();
                match ev {
                    Some(VadEvent::SpeechStart(_)) => {
                        self.heard = true;
                        out.push(Heard::SpeechStart);
                    }
                    Some(VadEvent::SpeechEnd(_)) => out.push(self.end_turn()),
                    None => {}
                }
            }
        }
    }

    /// `audioStreamEnd`: the client paused its microphone; a turn in progress ends now.
    pub fn audio_stream_end(&mut self) -> Option<Heard> {
        self.pending.clear();
        if self.auto && self.vad.in_speech() {
            self.vad.reset();
            Some(self.end_turn())
        } else {
            None
        }
    }

    /// `activityStart` (manual mode only).
    pub fn activity_start(&mut self) -> Result<Option<Heard>, Rejection> {
        self.require_manual("activityStart")?;
        if self.active {
            return Ok(None);
        }
        self.active = true;
        self.heard = false;
        Ok(Some(Heard::SpeechStart))
    }

    /// `activityEnd` (manual mode only).
    pub fn activity_end(&mut self) -> Result<Option<Heard>, Rejection> {
        self.require_manual("activityEnd")?;
        if !self.active {
            return Ok(None);
        }
        self.active = false;
        Ok(Some(self.end_turn()))
    }

    fn end_turn(&mut self) -> Heard {
        let audio = std::mem::take(&mut self.heard);
        Heard::TurnEnd { audio }
    }

    fn require_manual(&self, what: &str) -> Result<(), Rejection> {
        if self.auto {
            Err(Rejection::invalid(format!(
                "realtimeInput.{what} needs automaticActivityDetection.disabled = true"
            )))
        } else {
            Ok(())
        }
    }
}

/// Decodes an audio blob: MIME `audio/pcm` (optionally `;rate=N`, default 16000), data base64 in
/// the standard or URL-safe alphabet with or without padding, PCM16 little-endian. `at` names the
/// field in errors.
pub fn decode_audio(blob: &Blob, at: &str) -> Result<Audio, Rejection> {
    let mime = blob.mime_type.as_deref().unwrap_or("");
    let mut params = mime.split(';').map(str::trim);
    let essence = params.next().unwrap_or("");
    let is = |want: &str| essence.eq_ignore_ascii_case(want);
    if !essence
        .get(..6)
        .is_some_and(|t| t.eq_ignore_ascii_case("audio/"))
    {
        return Err(Rejection::invalid(format!(
            "{at}.mimeType {mime:?} is not an audio MIME type (expected audio/pcm;rate=16000)"
        )));
    }
    if !is("audio/pcm") && !is("audio/l16") {
        return Err(Rejection::invalid(format!(
            "{at}.mimeType {mime:?}: only raw PCM16 (audio/pcm) is supported for streaming"
        )));
    }
    let mut rate = DEFAULT_INPUT_RATE;
    for p in params {
        if let Some((k, v)) = p.split_once('=')
            && k.trim().eq_ignore_ascii_case("rate")
        {
            rate = v
                .trim()
                .parse()
                .ok()
                .filter(|r| (1_000..=192_000).contains(r))
                .ok_or_else(|| {
                    Rejection::invalid(format!("{at}.mimeType {mime:?}: bad sample rate {v:?}"))
                })?;
        }
    }
    let data = blob.data.as_deref().unwrap_or("");
    let bytes = decode_base64(data)
        .map_err(|e| Rejection::invalid(format!("{at}.data is not valid base64: {e}")))?;
    if bytes.len() % 2 != 0 {
        return Err(Rejection::invalid(format!(
            "{at}.data has {} bytes; PCM16 needs 2 bytes per sample",
            bytes.len()
        )));
    }
    let samples = bytes
        .chunks_exact(2)
        .map(|b| i16::from_le_bytes([b[0], b[1]]))
        .collect();
    Ok(Audio { rate, samples })
}

/// Standard or URL-safe alphabet, padding optional.
pub fn decode_base64(data: &str) -> Result<Vec<u8>, base64::DecodeError> {
    // The standard alphabet first: what clients send 50 times a second decodes without a scan
    // of the text for the URL-safe letters.
    match STANDARD_PAD_INDIFFERENT.decode(data) {
        Err(_) if data.contains(['-', '_']) => URL_SAFE_PAD_INDIFFERENT.decode(data),
        decoded => decoded,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};

    fn blob(mime: &str, data: String) -> Blob {
        Blob {
            mime_type: Some(mime.into()),
            data: Some(data),
        }
    }

    fn pcm(samples: &[i16]) -> Vec<u8> {
        samples.iter().flat_map(|s| s.to_le_bytes()).collect()
    }

    #[test]
    fn decodes_both_alphabets_and_rates() {
        // 0xFBFF / 0xFFFE produce '+' '/' or '-' '_' in base64.
        let samples = [-1i16, -1025, 0x3ffb, 7];
        let bytes = pcm(&samples);
        assert!(URL_SAFE_NO_PAD.encode(&bytes).contains(['-', '_']));
        for data in [STANDARD.encode(&bytes), URL_SAFE_NO_PAD.encode(&bytes)] {
            let a = decode_audio(&blob("audio/pcm;rate=8000", data), "audio").unwrap();
            assert_eq!(
                a,
                Audio {
                    rate: 8000,
                    samples: samples.to_vec()
                }
            );
        }
        let a = decode_audio(&blob("audio/pcm", STANDARD.encode(&bytes)), "audio").unwrap();
        assert_eq!(a.rate, 16000);
    }

    #[test]
    fn bad_audio_is_named() {
        let ok = STANDARD.encode(pcm(&[1, 2]));
        let cases = [
            (blob("image/jpeg", ok.clone()), "not an audio MIME type"),
            (blob("audio/pcm;rate=abc", ok.clone()), "bad sample rate"),
            (blob("audio/pcm", "!!!".into()), "not valid base64"),
            (
                blob("audio/pcm", STANDARD.encode([1u8, 2, 3])),
                "2 bytes per sample",
            ),
            (blob("audio/mp3", ok), "only raw PCM16"),
        ];
        for (b, want) in cases {
            let e = decode_audio(&b, "realtimeInput.audio").unwrap_err();
            assert_eq!(e.code, 1007);
            assert!(e.reason.contains(want), "{want}: {e}");
            assert!(e.reason.contains("realtimeInput.audio"), "{e}");
        }
    }

    fn tone(n: usize) -> Vec<i16> {
        (0..n)
            .map(|i| ((i as f64 * 0.3).sin() * 8000.0) as i16)
            .collect()
    }

    #[test]
    fn vad_turn_from_audio_in_odd_sized_chunks() {
        let mut l = Listener::new(true, Duration::from_millis(200));
        let mut out = vec![];
        let mut signal = tone(16000 / 2);
        signal.extend(vec![0; 16000 / 2]);
        for chunk in signal.chunks(777) {
            l.audio(
                &Audio {
                    rate: 16000,
                    samples: chunk.to_vec(),
                },
                &mut out,
            );
        }
        assert_eq!(
            out,
            vec![Heard::SpeechStart, Heard::TurnEnd { audio: true }]
        );
    }

    #[test]
    fn audio_stream_end_ends_a_turn_in_progress() {
        let mut l = Listener::new(true, Duration::from_millis(500));
        let mut out = vec![];
        l.audio(
            &Audio {
                rate: 24000,
                samples: tone(4800),
            },
            &mut out,
        );
        assert_eq!(out, vec![Heard::SpeechStart]);
        assert_eq!(l.audio_stream_end(), Some(Heard::TurnEnd { audio: true }));
        assert_eq!(l.audio_stream_end(), None);
    }

    #[test]
    fn manual_activity() {
        let mut auto = Listener::new(true, Duration::from_millis(500));
        assert_eq!(auto.activity_start().unwrap_err().code, 1007);
        let mut l = Listener::new(false, Duration::from_millis(500));
        let mut out = vec![];
        assert_eq!(l.activity_end().unwrap(), None);
        assert_eq!(l.activity_start().unwrap(), Some(Heard::SpeechStart));
        l.audio(
            &Audio {
                rate: 16000,
                samples: vec![0; 320],
            },
            &mut out,
        );
        assert!(out.is_empty(), "no VAD in manual mode");
        assert_eq!(
            l.activity_end().unwrap(),
            Some(Heard::TurnEnd { audio: true })
        );
        l.activity_start().unwrap();
        assert_eq!(
            l.activity_end().unwrap(),
            Some(Heard::TurnEnd { audio: false })
        );
    }
}
