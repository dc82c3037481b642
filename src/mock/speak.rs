//! The mock model's voice: cuts one reply clip into `modelTurn` audio chunks, spreads the reply's
//! output transcription over them word by word, and models the client's playback (the client plays
//! from the first chunk on, in real time) so the engine knows when the reply has finished playing.
//! Pacing between bursts is the engine's; this module only says what each burst carries.

use std::time::{Duration, Instant};

use crate::b64::STANDARD;
use base64::Engine as _;

use super::clip::{Clip, OUTPUT_RATE};
use super::scenario::Reply;
use crate::model::gemini::wire::{
    Blob, Content, Part, ServerContent, ServerMessage, Transcription,
};

/// MIME type of every audio chunk the model sends.
pub const OUTPUT_MIME: &str = "audio/pcm;rate=24000";

/// Tokens per second of audio (reference §5).
pub const TOKENS_PER_SECOND: f64 = 25.0;

/// Token count for `d` of audio.
pub fn audio_tokens(d: Duration) -> u64 {
    (d.as_secs_f64() * TOKENS_PER_SECOND).ceil() as u64
}

/// Rough token count of a text content (4 characters a token).
pub fn text_tokens(c: &Content) -> u64 {
    let chars: usize = c
        .parts
        .iter()
        .filter_map(|p| p.text.as_deref())
        .map(str::len)
        .sum();
    (chars as u64).div_ceil(4)
}

/// One reply being streamed.
#[derive(Debug)]
pub struct ReplyStream {
    audio: Clip,
    chunk_samples: usize,
    next_chunk: usize,
    chunks: usize,
    /// Output transcription per chunk (empty: none).
    fragments: Vec<String>,
    sent_samples: usize,
    sent_text: String,
    /// Fragments sent so far (alternates where the next one rides).
    fragments_sent: usize,
    play_end: Option<Instant>,
}

impl ReplyStream {
    /// `transcribe`: the session asked for `outputAudioTranscription`.
    pub fn new(reply: &Reply, chunk: Duration, transcribe: bool) -> Self {
        let chunk_samples =
            ((chunk.as_secs_f64() * f64::from(OUTPUT_RATE)).round() as usize).max(1);
        let chunks = reply.audio.len().div_ceil(chunk_samples);
        let fragments = if transcribe {
            split_words(&reply.text, chunks.max(1))
        } else {
            Vec::new()
        };
        ReplyStream {
            audio: reply.audio.clone(),
            chunk_samples,
            next_chunk: 0,
            chunks,
            fragments,
            sent_samples: 0,
            sent_text: String::new(),
            fragments_sent: 0,
            play_end: None,
        }
    }

    /// The client is still playing earlier audio until `until` (a reply that follows another
    /// without a cut): this reply's playback starts after it.
    pub fn after(mut self, until: Option<Instant>) -> Self {
        self.play_end = until;
        self
    }

    /// Every chunk (and every transcription fragment) has been produced.
    pub fn done(&self) -> bool {
        self.next_chunk >= self.chunks.max(1)
    }

    /// Audio produced so far.
    pub fn sent_audio(&self) -> Duration {
        Duration::from_secs_f64(self.sent_samples as f64 / f64::from(OUTPUT_RATE))
    }

    /// Output transcription produced so far.
    pub fn sent_text(&self) -> &str {
        &self.sent_text
    }

    /// When the client will have played everything sent so far (`None` before the first chunk,
    /// unless the reply follows earlier audio).
    pub fn play_end(&self) -> Option<Instant> {
        self.play_end
    }

    /// Produces up to `n` chunks sent at `now`, as server messages in order. Transcription fragments
    /// alternate between riding in the same message as their chunk and following in their own
    /// message (the real service does both).
    pub fn burst(&mut self, n: u32, now: Instant) -> Vec<ServerMessage> {
        let mut out = Vec::new();
        for _ in 0..n {
            if self.done() {
                break;
            }
            let i = self.next_chunk;
            self.next_chunk += 1;
            let start = (i * self.chunk_samples).min(self.audio.len());
            let end = (start + self.chunk_samples).min(self.audio.len());
            let fragment = self.fragments.get(i).filter(|f| !f.is_empty()).cloned();
            let same_message = self.fragments_sent.is_multiple_of(2);
            if let Some(f) = &fragment {
                self.sent_text.push_str(f);
                self.fragments_sent += 1;
            }
            let transcription = fragment.map(|text| Transcription {
                text: Some(text),
                finished: None,
            });
            if start == end {
                // An empty clip: only the transcription, if any.
                if let Some(t) = transcription {
                    out.push(content(ServerContent {
                        output_transcription: Some(t),
                        ..Default::default()
                    }));
                }
                continue;
            }
            let samples = &self.audio[start..end];
            self.sent_samples += samples.len();
            let dur = Duration::from_secs_f64(samples.len() as f64 / f64::from(OUTPUT_RATE));
            let begin = self.play_end.map_or(now, |e| e.max(now));
            self.play_end = Some(begin + dur);
            let bytes: Vec<u8> = samples.iter().flat_map(|s| s.to_le_bytes()).collect();
            let model_turn = Content {
                role: Some("model".into()),
                parts: vec![Part {
                    inline_data: Some(Blob {
                        mime_type: Some(OUTPUT_MIME.into()),
                        data: Some(STANDARD.encode(bytes)),
                    }),
                    ..Default::default()
                }],
            };
            if same_message {
                out.push(content(ServerContent {
                    model_turn: Some(model_turn),
                    output_transcription: transcription,
                    ..Default::default()
                }));
            } else {
                out.push(content(ServerContent {
                    model_turn: Some(model_turn),
                    ..Default::default()
                }));
                if let Some(t) = transcription {
                    out.push(content(ServerContent {
                        output_transcription: Some(t),
                        ..Default::default()
                    }));
                }
            }
        }
        out
    }
}

/// A server message as the JSON the mock sends. An audio chunk's base64 is written beside the
/// serializer's output rather than through it: it holds no character JSON escapes, so the bytes
/// are the same without the serializer's look at each of its characters. Any other message, or
/// data that would need escaping, goes through the serializer whole.
pub fn to_json(mut m: ServerMessage) -> serde_json::Result<Vec<u8>> {
    let data = m
        .server_content
        .as_mut()
        .and_then(|sc| sc.model_turn.as_mut())
        .filter(|c| c.parts.len() == 1)
        .and_then(|c| c.parts[0].inline_data.as_mut())
        .and_then(|b| b.data.as_mut())
        .filter(|d| super::inbound::verbatim(d))
        .map(std::mem::take);
    let json = serde_json::to_vec(&m)?;
    let Some(data) = data else {
        return Ok(json);
    };
    // The blob's (now empty) data is the first `"data":""` of the message: every key before it
    // is a field name, and a quote inside a string value is escaped.
    const EMPTY: &[u8] = br#""data":"""#;
    let Some(at) = json.windows(EMPTY.len()).position(|w| w == EMPTY) else {
        if let Some(b) = m
            .server_content
            .as_mut()
            .and_then(|sc| sc.model_turn.as_mut())
            .and_then(|c| c.parts[0].inline_data.as_mut())
        {
            b.data = Some(data);
        }
        return serde_json::to_vec(&m);
    };
    let at = at + EMPTY.len() - 1;
    let mut out = Vec::with_capacity(json.len() + data.len());
    out.extend_from_slice(&json[..at]);
    out.extend_from_slice(data.as_bytes());
    out.extend_from_slice(&json[at..]);
    Ok(out)
}

/// A server message carrying only `serverContent`.
pub fn content(sc: ServerContent) -> ServerMessage {
    ServerMessage {
        server_content: Some(sc),
        ..Default::default()
    }
}

/// Splits `text` into `n` fragments by words (some may be empty) whose concatenation is the words
/// joined by single spaces.
pub fn split_words(text: &str, n: usize) -> Vec<String> {
    let words: Vec<&str> = text.split_whitespace().collect();
    let mut out = vec![String::new(); n];
    if n == 0 {
        return out;
    }
    for (w, word) in words.iter().enumerate() {
        let slot = w * n / words.len();
        if w > 0 {
            out[slot].push(' ');
        }
        out[slot].push_str(word);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(samples: usize, text: &str) -> Reply {
        Reply {
            audio: vec![1000i16; samples].into(),
            text: text.into(),
        }
    }

    #[test]
    fn fragments_concatenate_to_the_text() {
        for n in [1, 2, 3, 7, 20] {
            let f = split_words("Your balance is  five dollars.", n);
            assert_eq!(f.len(), n);
            assert_eq!(f.concat(), "Your balance is five dollars.");
        }
        assert_eq!(split_words("", 3).concat(), "");
    }

    #[test]
    fn bursts_cover_the_clip_and_model_playback() {
        // 100 ms at 24 kHz in 40 ms chunks: 3 chunks (40 + 40 + 20).
        let mut s = ReplyStream::new(
            &reply(2400, "one two three"),
            Duration::from_millis(40),
            true,
        );
        let t0 = Instant::now();
        let first = s.burst(2, t0);
        assert!(!s.done());
        // The first fragment rides with chunk 0; the second follows chunk 1 in its own message.
        assert_eq!(first.len(), 3);
        let sc0 = first[0].server_content.as_ref().unwrap();
        assert!(sc0.model_turn.is_some() && sc0.output_transcription.is_some());
        let sc2 = first[2].server_content.as_ref().unwrap();
        assert!(sc2.model_turn.is_none() && sc2.output_transcription.is_some());
        assert_eq!(s.play_end(), Some(t0 + Duration::from_millis(80)));
        // Sent late: playback had run dry, so it restarts from `now`.
        let t1 = t0 + Duration::from_millis(200);
        s.burst(5, t1);
        assert!(s.done());
        assert_eq!(s.play_end(), Some(t1 + Duration::from_millis(20)));
        assert_eq!(s.sent_audio(), Duration::from_millis(100));
        assert_eq!(s.sent_text(), "one two three");
    }

    #[test]
    fn no_transcription_unless_asked() {
        let mut s = ReplyStream::new(&reply(960, "hello"), Duration::from_millis(40), false);
        let m = s.burst(1, Instant::now());
        assert_eq!(m.len(), 1);
        assert!(
            m[0].server_content
                .as_ref()
                .unwrap()
                .output_transcription
                .is_none()
        );
    }

    #[test]
    fn audio_chunks_are_written_as_the_serializer_writes_them() {
        let mut stream = ReplyStream::new(
            &reply(4800, "Your balance is five dollars."),
            Duration::from_millis(40),
            true,
        );
        let mut messages = stream.burst(10, Instant::now());
        assert!(messages.len() > 5, "{messages:?}");
        // Other messages and parts, and a blob whose data would need escaping, go the slow way.
        messages.push(content(ServerContent {
            turn_complete: Some(true),
            ..Default::default()
        }));
        let part = |data: &str| Part {
            inline_data: Some(Blob {
                mime_type: Some("a\"b".into()),
                data: Some(data.into()),
            }),
            ..Default::default()
        };
        let turn = |parts: Vec<Part>| {
            content(ServerContent {
                model_turn: Some(Content {
                    role: Some("model".into()),
                    parts,
                }),
                output_transcription: Some(Transcription {
                    text: Some(r#"say "data":"" twice"#.into()),
                    finished: None,
                }),
                ..Default::default()
            })
        };
        messages.push(turn(vec![part("AAAA")]));
        messages.push(turn(vec![part("A\"B\n")]));
        messages.push(turn(vec![part("AAAA"), part("BBBB")]));
        messages.push(turn(vec![part("")]));
        for m in messages {
            let want = serde_json::to_vec(&m).unwrap();
            assert_eq!(
                String::from_utf8(to_json(m).unwrap()).unwrap(),
                String::from_utf8(want).unwrap()
            );
        }
    }
}
