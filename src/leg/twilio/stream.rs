//! The sans-IO core of one Twilio media stream. It owns no socket and reads no clock: the shell
//! feeds it each message from Twilio with the instant it arrived ([`TwilioStream::handle_text`]),
//! hands it the call's commands ([`TwilioStream::play`], [`TwilioStream::clear`]), and drains
//! [`TwilioStream::poll_event`] (toward the call) and [`TwilioStream::poll_transmit`] (toward
//! Twilio) after each input.
//!
//! Inbound: `media` payloads of any size are decoded from μ-law and re-framed into exactly 160
//! samples (20 ms at 8 kHz) per [`LegEvent::Frame`], whose `ts` follows Twilio's `timestamp`
//! (milliseconds since the stream started). A jump in `timestamp` (or, without one, in `chunk`)
//! beyond [`GAP_TOLERANCE`] is a gap: gaps up to [`StreamOptions::max_filled_gap`] (200 ms by
//! default, ten frames) are filled with silence so the caller's timeline stays continuous for the
//! model; longer ones are not filled (the partial frame is padded and the next frame's `ts` jumps),
//! because seconds of invented silence would only delay the model. Both kinds are counted.
//!
//! Outbound: each Voice or Underrun frame becomes one `media` message (160 μ-law bytes) followed
//! by a `mark` named `b:<ts_ms>` (the frame's playout timestamp in ms). Idle `Silence` frames are
//! not sent: Twilio plays silence by itself when its queue is empty. When Twilio echoes a mark,
//! the caller has heard the frame: [`LegEvent::Heard`] reports its end. `clear` drops Twilio's
//! queue and makes it echo every pending mark at once; marks pending when the clear was sent are
//! therefore counted as dropped, not heard.
//!
//! A refused message is an error for that message only; the stream carries on. The stream ends on
//! `stop`, or at `start` if the account or media format is not the expected one.

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::time::Duration;

use tokio::time::Instant;

use super::wire::{self, FromTwilio, MediaFormat, ToTwilio, TwilioEvent, WireError};
use crate::audio::playout::PlayedKind;
use crate::audio::{Frame, g711};
use crate::leg::LegEvent;

/// Twilio's rate: μ-law 8 kHz.
pub const RATE: u32 = 8000;
/// Samples (and μ-law bytes) in one 20 ms frame.
pub const FRAME_SAMPLES: usize = 160;
/// `timestamp` is in whole milliseconds; jumps this small are rounding, not a gap.
pub const GAP_TOLERANCE: Duration = Duration::from_millis(2);
/// Pending marks kept at most (ten minutes of frames, Twilio's own buffer limit); older ones are
/// forgotten if a bridge never echoes them.
const MAX_PENDING_MARKS: usize = 30_000;
/// Outbound send intervals kept at most (30 minutes of continuous speech).
const MAX_INTERVALS: usize = 90_000;
const SAMPLES_PER_MS: u64 = RATE as u64 / 1000;

/// Per-stream settings.
#[derive(Clone, Debug)]
pub struct StreamOptions {
    /// If set, a `start` from another account ends the stream.
    pub expected_account_sid: Option<String>,
    /// Gaps in the caller's audio up to this long are filled with silence; longer ones are not.
    pub max_filled_gap: Duration,
}

impl Default for StreamOptions {
    fn default() -> Self {
        StreamOptions {
            expected_account_sid: None,
            max_filled_gap: Duration::from_millis(200),
        }
    }
}

/// What `start` said about the stream.
#[derive(Clone, Debug, PartialEq)]
pub struct StartInfo {
    pub stream_sid: String,
    pub account_sid: Option<String>,
    pub call_sid: Option<String>,
    pub tracks: Vec<String>,
    pub custom_parameters: BTreeMap<String, String>,
    pub media_format: MediaFormat,
}

/// Running counts for one stream.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StreamStats {
    /// Messages received (good or bad).
    pub messages_in: u64,
    /// 20 ms frames handed to the call (including gap-filling silence).
    pub frames_in: u64,
    /// `media` messages sent to Twilio (one per Voice/Underrun frame).
    pub frames_out: u64,
    /// Idle silence frames not sent.
    pub silence_skipped: u64,
    /// Gaps detected in the caller's audio.
    pub gaps: u64,
    /// Silence inserted for gaps up to `max_filled_gap`, in ms.
    pub gap_filled_ms: u64,
    /// Gaps longer than `max_filled_gap`, left unfilled (the timeline jumps).
    pub gaps_unfilled: u64,
    /// `media` whose timestamp lies before audio already received (appended anyway).
    pub overlaps: u64,
    /// Messages refused (unparseable, out of order, wrong account, ...).
    pub bad_messages: u64,
    /// Events this code does not know (ignored).
    pub unknown_events: u64,
    /// `media` on a track other than inbound (ignored).
    pub ignored_tracks: u64,
    pub dtmf: u64,
    pub marks_sent: u64,
    /// Echoed marks whose audio was played: reported as heard.
    pub marks_played: u64,
    /// Echoed marks that were pending when a `clear` was sent: not heard.
    pub marks_dropped: u64,
    /// Echoed marks this stream never sent (or had forgotten).
    pub marks_unknown: u64,
    pub clears: u64,
}

/// Why a stream ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EndReason {
    /// Twilio sent `stop`.
    Stopped,
    /// `start.accountSid` was not the expected account.
    AccountMismatch {
        expected: String,
        got: Option<String>,
    },
    /// `start.mediaFormat` was not μ-law 8 kHz mono.
    UnsupportedFormat(String),
}

impl fmt::Display for EndReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EndReason::Stopped => f.write_str("Twilio sent stop"),
            EndReason::AccountMismatch { expected, got } => write!(
                f,
                "start.accountSid {} is not the expected account {expected}",
                got.as_deref().unwrap_or("(missing)")
            ),
            EndReason::UnsupportedFormat(fmt) => write!(
                f,
                "start.mediaFormat is {fmt}; only audio/x-mulaw 8000 Hz mono is spoken here"
            ),
        }
    }
}

/// A message or command the stream refused. The stream carries on unless it says it ended.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StreamError {
    #[error(transparent)]
    Wire(#[from] WireError),
    #[error(
        "\"{event}\" before \"start\" ignored: Twilio sends start first (was it lost, or is this \
         not a Media Streams client?)"
    )]
    BeforeStart { event: &'static str },
    #[error("a second \"start\" (stream {0}) ignored: a stream starts once")]
    DuplicateStart(String),
    #[error("\"{event}\" after the stream ended ({reason}) ignored")]
    AfterEnd {
        event: &'static str,
        reason: EndReason,
    },
    #[error("stream refused: {0}")]
    Refused(EndReason),
    #[error(
        "a {rate} Hz frame cannot be played on a Twilio stream (8000 Hz μ-law): the call must \
         resample to the leg's rate"
    )]
    WrongRate { rate: u32 },
    #[error("nothing can be played before Twilio's \"start\"")]
    NotStarted,
}

struct PendingMark {
    name: String,
    up_to: Duration,
    /// Pending when a `clear` was sent: its echo means dropped, not played.
    cleared: bool,
}

/// The core of one Twilio media stream.
pub struct TwilioStream {
    opts: StreamOptions,
    start: Option<StartInfo>,
    started_at: Option<Instant>,
    ended: Option<EndReason>,
    // Inbound re-framing.
    /// Decoded samples of the frame being filled (fewer than 160).
    partial: Vec<i16>,
    /// Position (in samples since stream start) of `partial[0]`.
    partial_pos: u64,
    /// Position just past the last sample received; `None` before the first media.
    next_pos: Option<u64>,
    last_chunk: Option<u64>,
    last_payload_len: u64,
    // Outbound.
    pending: VecDeque<PendingMark>,
    /// End ts and send instant of the last frame sent, for cadence.
    last_sent: Option<(Duration, Instant)>,
    send_intervals_us: Vec<u32>,
    events: VecDeque<LegEvent>,
    transmits: VecDeque<ToTwilio>,
    stats: StreamStats,
}

impl TwilioStream {
    pub fn new(opts: StreamOptions) -> Self {
        TwilioStream {
            opts,
            start: None,
            started_at: None,
            ended: None,
            partial: Vec::with_capacity(FRAME_SAMPLES),
            partial_pos: 0,
            next_pos: None,
            last_chunk: None,
            last_payload_len: FRAME_SAMPLES as u64,
            pending: VecDeque::new(),
            last_sent: None,
            send_intervals_us: Vec::new(),
            events: VecDeque::new(),
            transmits: VecDeque::new(),
            stats: StreamStats::default(),
        }
    }

    /// What `start` said, once it has arrived.
    pub fn start_info(&self) -> Option<&StartInfo> {
        self.start.as_ref()
    }

    /// When `start` arrived: the instant of media timestamp zero.
    pub fn started_at(&self) -> Option<Instant> {
        self.started_at
    }

    /// Why the stream ended, once it has.
    pub fn ended(&self) -> Option<&EndReason> {
        self.ended.as_ref()
    }

    pub fn stats(&self) -> &StreamStats {
        &self.stats
    }

    /// Marks sent and not yet echoed.
    pub fn pending_marks(&self) -> usize {
        self.pending.len()
    }

    /// Intervals between consecutive outbound frames (frames whose timestamps follow each other),
    /// in µs, as seen by the `now` passed to [`play`](Self::play).
    pub fn send_intervals_us(&self) -> &[u32] {
        &self.send_intervals_us
    }

    /// Takes the recorded send intervals (for the final report).
    pub fn take_send_intervals(&mut self) -> Vec<u32> {
        std::mem::take(&mut self.send_intervals_us)
    }

    /// The next event for the call. Poll until `None` after every input.
    #[must_use]
    pub fn poll_event(&mut self) -> Option<LegEvent> {
        self.events.pop_front()
    }

    /// The next message for Twilio. Poll until `None` after every input.
    #[must_use]
    pub fn poll_transmit(&mut self) -> Option<ToTwilio> {
        self.transmits.pop_front()
    }

    /// Parses and handles one text message that arrived at `now`.
    pub fn handle_text(&mut self, text: &str, now: Instant) -> Result<(), StreamError> {
        match wire::parse_from_twilio(text) {
            Ok(msg) => self.handle(msg, now),
            Err(e) => {
                self.stats.messages_in += 1;
                self.stats.bad_messages += 1;
                Err(e.into())
            }
        }
    }

    /// Handles one parsed message that arrived at `now`.
    pub fn handle(&mut self, msg: FromTwilio, now: Instant) -> Result<(), StreamError> {
        self.stats.messages_in += 1;
        let r = self.dispatch(msg, now);
        if r.is_err() {
            self.stats.bad_messages += 1;
        }
        r
    }

    fn dispatch(&mut self, msg: FromTwilio, now: Instant) -> Result<(), StreamError> {
        let name = event_name(&msg.event);
        if let Some(reason) = &self.ended {
            return Err(StreamError::AfterEnd {
                event: name,
                reason: reason.clone(),
            });
        }
        let started = self.start.is_some();
        match msg.event {
            TwilioEvent::Connected { .. } => Ok(()),
            TwilioEvent::Unknown { .. } => {
                self.stats.unknown_events += 1;
                Ok(())
            }
            TwilioEvent::Start(s) => {
                if let Some(info) = &self.start {
                    return Err(StreamError::DuplicateStart(info.stream_sid.clone()));
                }
                let format = s.media_format.unwrap_or_else(MediaFormat::mulaw_8k);
                if !format.is_mulaw_8k_mono() {
                    return Err(self.refuse(EndReason::UnsupportedFormat(format.to_string())));
                }
                if let Some(expected) = &self.opts.expected_account_sid
                    && s.account_sid.as_deref() != Some(expected.as_str())
                {
                    let reason = EndReason::AccountMismatch {
                        expected: expected.clone(),
                        got: s.account_sid,
                    };
                    return Err(self.refuse(reason));
                }
                self.start = Some(StartInfo {
                    // The parser refuses a start without any stream id.
                    stream_sid: s.stream_sid.or(msg.stream_sid).unwrap_or_default(),
                    account_sid: s.account_sid,
                    call_sid: s.call_sid,
                    tracks: s.tracks,
                    custom_parameters: s.custom_parameters,
                    media_format: format,
                });
                self.started_at = Some(now);
                Ok(())
            }
            _ if !started => Err(StreamError::BeforeStart { event: name }),
            TwilioEvent::Media(m) => {
                if m.track
                    .as_deref()
                    .is_some_and(|t| !t.starts_with("inbound"))
                {
                    self.stats.ignored_tracks += 1;
                    return Ok(());
                }
                self.media(&m.payload, m.timestamp, m.chunk, now);
                Ok(())
            }
            TwilioEvent::Dtmf(d) => {
                self.stats.dtmf += 1;
                self.events.push_back(LegEvent::Dtmf { digit: d.digit });
                Ok(())
            }
            TwilioEvent::Mark(m) => {
                self.mark_echo(&m.name);
                Ok(())
            }
            TwilioEvent::Stop(_) => {
                if !self.partial.is_empty() {
                    self.emit_partial(now);
                }
                self.events.push_back(LegEvent::Stop);
                self.ended = Some(EndReason::Stopped);
                Ok(())
            }
        }
    }

    fn refuse(&mut self, reason: EndReason) -> StreamError {
        self.ended = Some(reason.clone());
        StreamError::Refused(reason)
    }

    /// Queues one frame for the caller. Idle silence is not sent.
    pub fn play(
        &mut self,
        frame: &Frame,
        kind: PlayedKind,
        now: Instant,
    ) -> Result<(), StreamError> {
        let stream_sid = self.outbound_sid("media")?;
        if kind == PlayedKind::Silence {
            self.stats.silence_skipped += 1;
            return Ok(());
        }
        if frame.rate != RATE {
            return Err(StreamError::WrongRate { rate: frame.rate });
        }
        let mut payload = Vec::with_capacity(frame.samples.len());
        g711::encode_ulaw(&frame.samples, &mut payload);
        let end = frame.ts + frame.duration();
        let name = format!("b:{}", frame.ts.as_millis());
        self.transmits.push_back(ToTwilio::Media {
            stream_sid: stream_sid.clone(),
            payload,
        });
        self.transmits.push_back(ToTwilio::Mark {
            stream_sid,
            name: name.clone(),
        });
        if self.pending.len() >= MAX_PENDING_MARKS {
            self.pending.pop_front();
        }
        self.pending.push_back(PendingMark {
            name,
            up_to: end,
            cleared: false,
        });
        if let Some((prev_end, prev_at)) = self.last_sent
            && prev_end == frame.ts
            && self.send_intervals_us.len() < MAX_INTERVALS
        {
            let us = now.saturating_duration_since(prev_at).as_micros();
            self.send_intervals_us
                .push(u32::try_from(us).unwrap_or(u32::MAX));
        }
        self.last_sent = Some((end, now));
        self.stats.frames_out += 1;
        self.stats.marks_sent += 1;
        Ok(())
    }

    /// Barge-in: tells Twilio to drop its queued audio. Marks pending now will echo as dropped.
    pub fn clear(&mut self) -> Result<(), StreamError> {
        let stream_sid = self.outbound_sid("clear")?;
        for m in &mut self.pending {
            m.cleared = true;
        }
        self.last_sent = None;
        self.stats.clears += 1;
        self.transmits.push_back(ToTwilio::Clear { stream_sid });
        Ok(())
    }

    fn outbound_sid(&self, event: &'static str) -> Result<String, StreamError> {
        if let Some(reason) = &self.ended {
            return Err(StreamError::AfterEnd {
                event,
                reason: reason.clone(),
            });
        }
        self.start
            .as_ref()
            .map(|s| s.stream_sid.clone())
            .ok_or(StreamError::NotStarted)
    }

    fn mark_echo(&mut self, name: &str) {
        let Some(i) = self.pending.iter().position(|m| m.name == name) else {
            self.stats.marks_unknown += 1;
            return;
        };
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

    fn media(&mut self, payload: &[u8], timestamp: Option<u64>, chunk: Option<u64>, now: Instant) {
        let len = payload.len() as u64;
        match self.next_pos {
            None => {
                let pos = timestamp.map_or(0, |t| t.saturating_mul(SAMPLES_PER_MS));
                self.partial_pos = pos;
                self.next_pos = Some(pos);
            }
            Some(expected) => {
                let at = match (timestamp, chunk, self.last_chunk) {
                    (Some(t), _, _) => t.saturating_mul(SAMPLES_PER_MS),
                    (None, Some(c), Some(last)) if c > last.saturating_add(1) => expected
                        .saturating_add((c - last - 1).saturating_mul(self.last_payload_len)),
                    _ => expected,
                };
                let tolerance = GAP_TOLERANCE.as_millis() as u64 * SAMPLES_PER_MS;
                if at > expected.saturating_add(tolerance) {
                    self.gap(expected, at, now);
                } else if at.saturating_add(tolerance) < expected {
                    self.stats.overlaps += 1;
                }
            }
        }
        if chunk.is_some() {
            self.last_chunk = chunk;
        }
        if len > 0 {
            self.last_payload_len = len;
        }
        self.push_codes(payload, now);
    }

    fn gap(&mut self, expected: u64, at: u64, now: Instant) {
        self.stats.gaps += 1;
        let missing = at - expected;
        let max_fill = self.opts.max_filled_gap.as_millis() as u64 * SAMPLES_PER_MS;
        if missing <= max_fill {
            self.stats.gap_filled_ms += missing / SAMPLES_PER_MS;
            let mut left = missing as usize;
            while left > 0 {
                let n = left.min(FRAME_SAMPLES - self.partial.len());
                self.partial.resize(self.partial.len() + n, 0);
                left -= n;
                self.next_pos = Some(self.next_pos.unwrap_or(0).saturating_add(n as u64));
                if self.partial.len() == FRAME_SAMPLES {
                    self.emit_partial(now);
                }
            }
        } else {
            self.stats.gaps_unfilled += 1;
            if !self.partial.is_empty() {
                self.emit_partial(now);
            }
            self.partial_pos = at;
            self.next_pos = Some(at);
        }
    }

    fn push_codes(&mut self, mut codes: &[u8], now: Instant) {
        while !codes.is_empty() {
            let n = codes.len().min(FRAME_SAMPLES - self.partial.len());
            g711::decode_ulaw(&codes[..n], &mut self.partial);
            codes = &codes[n..];
            self.next_pos = Some(self.next_pos.unwrap_or(0).saturating_add(n as u64));
            if self.partial.len() == FRAME_SAMPLES {
                self.emit_partial(now);
            }
        }
    }

    /// Emits the frame being filled, padded with silence to 20 ms.
    fn emit_partial(&mut self, now: Instant) {
        let mut samples = std::mem::replace(&mut self.partial, Vec::with_capacity(FRAME_SAMPLES));
        samples.resize(FRAME_SAMPLES, 0);
        let frame = Frame {
            rate: RATE,
            ts: Duration::from_micros(self.partial_pos.saturating_mul(1_000_000 / u64::from(RATE))),
            samples,
        };
        self.partial_pos = self.partial_pos.saturating_add(FRAME_SAMPLES as u64);
        self.stats.frames_in += 1;
        self.events.push_back(LegEvent::Frame {
            frame,
            received_at: now,
        });
    }
}

fn event_name(e: &TwilioEvent) -> &'static str {
    match e {
        TwilioEvent::Connected { .. } => "connected",
        TwilioEvent::Start(_) => "start",
        TwilioEvent::Media(_) => "media",
        TwilioEvent::Dtmf(_) => "dtmf",
        TwilioEvent::Mark(_) => "mark",
        TwilioEvent::Stop(_) => "stop",
        TwilioEvent::Unknown { .. } => "unknown",
    }
}
