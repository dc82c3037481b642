//! What one response of the OpenAI mock is: the plan decided when it starts (speak a reply, make
//! a function call, or say nothing) and, once it speaks, its audio stream cut into deltas with the
//! transcript spread over them. Pure data and arithmetic; the session (`respond.rs`) decides when
//! each part goes out.

use crate::b64::STANDARD;
use base64::Engine as _;
use serde_json::Value;

use crate::mock::scenario::Reply;
use crate::model::openai::wire::AudioFormat;

/// The response in progress.
#[derive(Debug)]
pub struct Response {
    pub id: String,
    pub(super) stage: Stage,
    /// `conversation: "none"`: nothing is written to the conversation.
    pub(super) oob: bool,
}

#[derive(Debug)]
pub(super) enum Stage {
    /// Waiting for the session's reply timer.
    Pending(Plan),
    Speaking(Speech),
}

#[derive(Clone, Debug)]
pub(super) enum Plan {
    /// Speak `reply` as `persona`, then (a handoff) make `then` call.
    Speak {
        reply: Reply,
        persona: Option<usize>,
        then: Option<(String, Value, usize)>,
    },
    Call {
        name: String,
        args: Value,
        turn: usize,
    },
    /// Nothing to say.
    Nothing,
}

impl Plan {
    pub(super) fn speak(reply: &Reply, persona: Option<usize>) -> Plan {
        Plan::Speak {
            reply: reply.clone(),
            persona,
            then: None,
        }
    }
}

/// An assistant audio item being streamed.
#[derive(Debug)]
pub(super) struct Speech {
    pub(super) item_id: String,
    /// Mono PCM at `rate` (24 kHz, or 8 kHz for G.711 output).
    pub(super) audio: Vec<i16>,
    pub(super) rate: u32,
    pub(super) format: AudioFormat,
    /// Samples per delta.
    pub(super) chunk: usize,
    pub(super) next: usize,
    /// Transcript fragment per delta (empty: none).
    pub(super) fragments: Vec<String>,
    pub(super) sent_samples: usize,
    pub(super) sent_text: String,
    /// The transfer call made once the speech is complete.
    pub(super) then: Option<(String, Value, usize)>,
    /// Samples after which the session's connection closes (a brief's `drop_mid_brief`).
    pub(super) close_after: Option<usize>,
}

/// One delta of a speech: its audio (base64 in the output format) and transcript fragment.
#[derive(Debug, PartialEq)]
pub(super) struct Delta {
    pub(super) audio: Option<String>,
    /// Audio samples it carries (at the speech's rate).
    pub(super) samples: usize,
    pub(super) text: Option<String>,
}

impl Speech {
    pub(super) fn chunks(&self) -> usize {
        self.audio.len().div_ceil(self.chunk).max(1)
    }

    pub(super) fn done(&self) -> bool {
        self.next >= self.chunks()
    }

    pub(super) fn produced_ms(&self) -> u64 {
        self.sent_samples as u64 * 1000 / u64::from(self.rate)
    }

    /// The next delta, counted as produced; `None` once every chunk is out.
    pub(super) fn next_delta(&mut self) -> Option<Delta> {
        if self.done() {
            return None;
        }
        let i = self.next;
        self.next += 1;
        let start = (i * self.chunk).min(self.audio.len());
        let end = (start + self.chunk).min(self.audio.len());
        let audio = (end > start).then(|| encode(&self.format, &self.audio[start..end]));
        self.sent_samples += end - start;
        // Fragments carry their own separating spaces.
        let text = self.fragments.get(i).filter(|f| !f.is_empty()).cloned();
        if let Some(t) = &text {
            self.sent_text.push_str(t);
        }
        Some(Delta {
            audio,
            samples: end - start,
            text,
        })
    }
}

/// `samples` in `format` (G.711 or PCM16 little-endian), base64.
fn encode(format: &AudioFormat, samples: &[i16]) -> String {
    let mut bytes = Vec::with_capacity(samples.len() * 2);
    match format {
        AudioFormat::Pcmu => crate::audio::g711::encode_ulaw(samples, &mut bytes),
        AudioFormat::Pcma => crate::audio::g711::encode_alaw(samples, &mut bytes),
        _ => bytes.extend(samples.iter().flat_map(|s| s.to_le_bytes())),
    }
    STANDARD.encode(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn speech(samples: usize, chunk: usize, fragments: &[&str]) -> Speech {
        Speech {
            item_id: "item_1".into(),
            audio: (0..samples).map(|i| i as i16).collect(),
            rate: 24_000,
            format: AudioFormat::Pcm { rate: None },
            chunk,
            next: 0,
            fragments: fragments.iter().map(|f| (*f).to_owned()).collect(),
            sent_samples: 0,
            sent_text: String::new(),
            then: None,
            close_after: None,
        }
    }

    #[test]
    fn deltas_cover_the_audio_once_with_the_transcript_spread_over_them() {
        let mut s = speech(2_400 * 2 + 100, 2_400, &["Hello ", "", "there."]);
        assert_eq!(s.chunks(), 3);
        let d: Vec<Delta> = std::iter::from_fn(|| s.next_delta()).collect();
        assert_eq!(
            d.iter().map(|d| d.samples).collect::<Vec<_>>(),
            [2_400, 2_400, 100]
        );
        assert_eq!(d[1].text, None);
        let bytes = STANDARD.decode(d[2].audio.as_deref().unwrap()).unwrap();
        assert_eq!(bytes.len(), 200);
        assert_eq!(i16::from_le_bytes([bytes[0], bytes[1]]), 4_800);
        assert_eq!(s.sent_text, "Hello there.");
        assert_eq!(s.produced_ms(), 204);
        assert!(s.done() && s.next_delta().is_none());
    }

    #[test]
    fn an_empty_clip_is_one_delta_without_audio() {
        let mut s = speech(0, 2_400, &["Hi."]);
        let d = s.next_delta().unwrap();
        assert_eq!(
            (d.audio, d.samples, d.text.as_deref()),
            (None, 0, Some("Hi."))
        );
        assert!(s.next_delta().is_none());
    }
}
