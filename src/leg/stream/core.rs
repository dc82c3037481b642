//! The sans-IO core of one `/stream` connection. It owns no socket and reads no clock: the shell
//! feeds it each message with the instant it arrived ([`StreamCore::handle_text`],
//! [`StreamCore::handle_binary`]), hands it the call's commands ([`StreamCore::play`],
//! [`StreamCore::clear`], [`StreamCore::finish`]) and drains [`StreamCore::poll_event`] (toward
//! the call) and [`StreamCore::poll_transmit`] (toward the client) after each input.
//!
//! The first message must be `start` naming the format; anything else first, or a format baton
//! does not speak, refuses the stream (an `error` message, then the shell closes the socket).
//! Inbound audio of any size is re-framed into exactly 20 ms per [`LegEvent::Frame`]; `ts`
//! counts the samples received.
//!
//! Outbound, each Voice or Underrun frame is one binary message as the playout clock releases it;
//! idle silence is not sent. When a reply's audio ends (the first idle frame after it), a
//! `mark` named `reply-<n>` follows; the client echoes it once the audio before it has played,
//! which reports [`LegEvent::Heard`]. On barge-in baton sends `clear`; marks pending then count as
//! dropped if the client echoes them.

use std::collections::VecDeque;
use std::fmt;
use std::time::Duration;

use tokio::time::Instant;

use super::codec::{AudioCodec, CodecError};
use super::wire::{self, Format, FromClient, ToClient, WireError};
use crate::audio::playout::PlayedKind;
use crate::audio::{FRAME_MS, Frame, Reframer};
use crate::leg::twilio::cadence::SendIntervals;
use crate::leg::{LegEvent, StopReason};

/// Pending marks kept at most (a client that never echoes must not grow memory).
const MAX_PENDING_MARKS: usize = 1000;

/// Something for the client.
#[derive(Clone, Debug, PartialEq)]
pub enum Transmit {
    Text(String),
    Binary(Vec<u8>),
}

/// Why a stream ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EndReason {
    /// The client sent `stop`.
    Stopped,
    /// baton ended the call.
    Hangup,
    /// The stream was refused: a bad or missing `start` (`format` true when the format was the
    /// problem).
    Refused { message: String, format: bool },
}

impl fmt::Display for EndReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EndReason::Stopped => f.write_str("the client sent stop"),
            EndReason::Hangup => f.write_str("baton ended the call"),
            EndReason::Refused { message, .. } => write!(f, "refused: {message}"),
        }
    }
}

/// A message or command refused. Only [`StreamError::Refused`] ends the stream.
#[derive(Debug, thiserror::Error)]
pub enum StreamError {
    #[error(transparent)]
    Wire(#[from] WireError),
    #[error("stream refused: {0}")]
    Refused(String),
    #[error("a second \"start\" ignored: the format is fixed at the first")]
    DuplicateStart,
    #[error("audio message could not be decoded: {0}")]
    Codec(#[from] CodecError),
    #[error("a {rate} Hz frame cannot be played on a {leg} Hz stream")]
    WrongRate { rate: u32, leg: u32 },
    #[error("nothing can be played before \"start\"")]
    NotStarted,
    #[error("the stream has ended ({0})")]
    Ended(String),
}

/// Running counts for one stream.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StreamStats {
    pub text_in: u64,
    pub binary_in: u64,
    pub frames_in: u64,
    pub frames_out: u64,
    pub silence_skipped: u64,
    /// Messages refused without ending the stream.
    pub bad_messages: u64,
    pub unknown_events: u64,
    pub marks_sent: u64,
    pub marks_played: u64,
    pub marks_dropped: u64,
    pub marks_unknown: u64,
    /// Echoes that arrived before an older pending mark's.
    pub marks_out_of_order: u64,
    pub clears: u64,
}

struct PendingMark {
    name: String,
    up_to: Duration,
    cleared: bool,
}

/// The core of one `/stream` connection.
pub struct StreamCore {
    format: Option<Format>,
    codec: Option<AudioCodec>,
    started_at: Option<Instant>,
    ended: Option<EndReason>,
    reframer: Option<Reframer>,
    decoded: Vec<i16>,
    /// End ts of the last frame of the reply being sent, while one is.
    reply_end: Option<Duration>,
    replies: u64,
    pending: VecDeque<PendingMark>,
    send_intervals: SendIntervals,
    events: VecDeque<LegEvent>,
    transmits: VecDeque<Transmit>,
    stats: StreamStats,
}

impl Default for StreamCore {
    fn default() -> Self {
        Self::new()
    }
}

impl StreamCore {
    pub fn new() -> Self {
        StreamCore {
            format: None,
            codec: None,
            started_at: None,
            ended: None,
            reframer: None,
            decoded: Vec::new(),
            reply_end: None,
            replies: 0,
            pending: VecDeque::new(),
            send_intervals: SendIntervals::default(),
            events: VecDeque::new(),
            transmits: VecDeque::new(),
            stats: StreamStats::default(),
        }
    }

    /// The format, once `start` was accepted.
    pub fn format(&self) -> Option<Format> {
        self.format
    }

    /// When `start` arrived: the instant of frame `ts` zero.
    pub fn started_at(&self) -> Option<Instant> {
        self.started_at
    }

    pub fn ended(&self) -> Option<&EndReason> {
        self.ended.as_ref()
    }

    pub fn stats(&self) -> &StreamStats {
        &self.stats
    }

    pub fn take_send_intervals(&mut self) -> SendIntervals {
        std::mem::take(&mut self.send_intervals)
    }

    #[must_use]
    pub fn poll_event(&mut self) -> Option<LegEvent> {
        self.events.pop_front()
    }

    #[must_use]
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        self.transmits.pop_front()
    }

    /// Handles one text message that arrived at `now`.
    pub fn handle_text(&mut self, text: &str, now: Instant) -> Result<(), StreamError> {
        self.stats.text_in += 1;
        if let Some(r) = &self.ended {
            return Err(StreamError::Ended(r.to_string()));
        }
        let msg = match wire::parse(text) {
            Ok(m) => m,
            Err(e) => {
                let format = matches!(e, WireError::UnknownEncoding(_) | WireError::BadRate(_));
                if self.format.is_none() {
                    return Err(self.refuse(e.to_string(), format));
                }
                self.stats.bad_messages += 1;
                return Err(e.into());
            }
        };
        match (msg, self.format) {
            (FromClient::Start { format }, None) => {
                let codec = match AudioCodec::new(format) {
                    Ok(c) => c,
                    Err(e) => return Err(self.refuse(e.to_string(), true)),
                };
                self.codec = Some(codec);
                self.format = Some(format);
                self.reframer = Some(Reframer::new(format.sample_rate));
                self.started_at = Some(now);
                self.transmits.push_back(Transmit::Text(
                    ToClient::Started {
                        format,
                        frame_ms: FRAME_MS,
                    }
                    .to_json(),
                ));
                Ok(())
            }
            (other, None) => {
                let what = match other {
                    FromClient::Mark { .. } => "mark".to_owned(),
                    FromClient::Stop => "stop".to_owned(),
                    FromClient::Unknown { event } => event,
                    FromClient::Start { .. } => "start".to_owned(),
                };
                Err(self.refuse(
                    format!("\"{what}\" before \"start\": the first message must be start"),
                    false,
                ))
            }
            (FromClient::Start { .. }, Some(_)) => {
                self.stats.bad_messages += 1;
                Err(StreamError::DuplicateStart)
            }
            (FromClient::Mark { name }, Some(_)) => {
                self.mark_echo(&name);
                Ok(())
            }
            (FromClient::Stop, Some(_)) => {
                self.emit_partial(now);
                self.ended = Some(EndReason::Stopped);
                self.events.push_back(LegEvent::Stop(StopReason::HungUp));
                Ok(())
            }
            (FromClient::Unknown { .. }, Some(_)) => {
                self.stats.unknown_events += 1;
                Ok(())
            }
        }
    }

    /// Handles one binary (audio) message that arrived at `now`.
    pub fn handle_binary(&mut self, data: &[u8], now: Instant) -> Result<(), StreamError> {
        self.stats.binary_in += 1;
        if let Some(r) = &self.ended {
            return Err(StreamError::Ended(r.to_string()));
        }
        let (Some(codec), Some(reframer)) = (self.codec.as_mut(), self.reframer.as_mut()) else {
            return Err(self.refuse(
                "audio before \"start\": the first message must be start".into(),
                false,
            ));
        };
        self.decoded.clear();
        if let Err(e) = codec.decode(data, &mut self.decoded) {
            self.stats.bad_messages += 1;
            return Err(e.into());
        }
        let (stats, events) = (&mut self.stats, &mut self.events);
        reframer.push(&self.decoded, |frame| {
            stats.frames_in += 1;
            events.push_back(LegEvent::Frame {
                frame,
                received_at: now,
            });
        });
        Ok(())
    }

    /// The last piece of the caller's audio, padded to a whole frame.
    fn emit_partial(&mut self, now: Instant) {
        if let Some(frame) = self.reframer.as_mut().and_then(Reframer::flush) {
            self.stats.frames_in += 1;
            self.events.push_back(LegEvent::Frame {
                frame,
                received_at: now,
            });
        }
    }

    fn refuse(&mut self, message: String, format: bool) -> StreamError {
        self.transmits.push_back(Transmit::Text(
            ToClient::Error {
                message: message.clone(),
                fatal: true,
            }
            .to_json(),
        ));
        self.ended = Some(EndReason::Refused {
            message: message.clone(),
            format,
        });
        StreamError::Refused(message)
    }

    fn mark_echo(&mut self, name: &str) {
        let Some(i) = self.pending.iter().position(|m| m.name == name) else {
            self.stats.marks_unknown += 1;
            return;
        };
        if i > 0 {
            self.stats.marks_out_of_order += 1;
        }
        let Some(m) = self.pending.remove(i) else {
            return;
        };
        if m.cleared {
            self.stats.marks_dropped += 1;
        } else {
            self.stats.marks_played += 1;
            self.events.push_back(LegEvent::Heard { up_to: m.up_to });
        }
    }

    /// Sends one frame to the client now; a reply's end sends its mark.
    pub fn play(
        &mut self,
        frame: &Frame,
        kind: PlayedKind,
        now: Instant,
    ) -> Result<(), StreamError> {
        if let Some(r) = &self.ended {
            return Err(StreamError::Ended(r.to_string()));
        }
        let (Some(format), Some(codec)) = (self.format, self.codec.as_mut()) else {
            return Err(StreamError::NotStarted);
        };
        if kind == PlayedKind::Silence {
            self.stats.silence_skipped += 1;
            if let Some(up_to) = self.reply_end.take() {
                self.replies += 1;
                let name = format!("reply-{}", self.replies);
                self.transmits.push_back(Transmit::Text(
                    ToClient::Mark { name: name.clone() }.to_json(),
                ));
                if self.pending.len() >= MAX_PENDING_MARKS {
                    self.pending.pop_front();
                }
                self.pending.push_back(PendingMark {
                    name,
                    up_to,
                    cleared: false,
                });
                self.stats.marks_sent += 1;
            }
            return Ok(());
        }
        if frame.rate != format.sample_rate {
            return Err(StreamError::WrongRate {
                rate: frame.rate,
                leg: format.sample_rate,
            });
        }
        let bytes = codec.encode(&frame.samples)?;
        self.transmits.push_back(Transmit::Binary(bytes));
        let end = frame.ts + frame.duration();
        self.send_intervals.sent(frame.ts, end, now);
        self.reply_end = Some(end);
        self.stats.frames_out += 1;
        Ok(())
    }

    /// Barge-in: the client drops its buffered audio; the cut reply gets no mark.
    pub fn clear(&mut self) -> Result<(), StreamError> {
        if let Some(r) = &self.ended {
            return Err(StreamError::Ended(r.to_string()));
        }
        if self.format.is_none() {
            return Err(StreamError::NotStarted);
        }
        for m in &mut self.pending {
            m.cleared = true;
        }
        self.reply_end = None;
        self.send_intervals.break_off();
        self.stats.clears += 1;
        self.transmits
            .push_back(Transmit::Text(ToClient::Clear.to_json()));
        Ok(())
    }

    /// A server event for the client (a transcript fragment), unless the stream has ended.
    pub fn notify(&mut self, msg: &ToClient) {
        if self.ended.is_none() && self.format.is_some() {
            self.transmits.push_back(Transmit::Text(msg.to_json()));
        }
    }

    /// baton ends the call: a last `stop` with the reason and the call's summary.
    pub fn finish(&mut self, reason: String, summary: serde_json::Value) {
        if self.ended.is_none() || self.ended == Some(EndReason::Stopped) {
            self.transmits
                .push_back(Transmit::Text(ToClient::Stop { reason, summary }.to_json()));
        }
        if self.ended.is_none() {
            self.ended = Some(EndReason::Hangup);
        }
    }
}

#[cfg(test)]
#[path = "core_tests.rs"]
mod tests;
