//! The sans-IO core of one bridge media stream, whatever its dialect. It owns no socket and reads
//! no clock: the shell feeds it each message with the instant it arrived
//! ([`MediaStream::handle_text`], [`MediaStream::handle_binary`]), hands it the call's commands
//! ([`MediaStream::play`], [`MediaStream::clear`]), and drains [`MediaStream::poll_event`] (toward
//! the call) and [`MediaStream::poll_transmit`] (toward the bridge, written by
//! [`MediaStream::render`]) after each input.
//!
//! Before the dialect is known (a shared route), text messages are held until one reveals it
//! ([`super::detect`]); they are then read in order. The [`MAX_UNDETECTED`]th message without a
//! clue refuses the stream.
//!
//! Inbound: payloads of any size are decoded and re-framed into exactly 20 ms per
//! [`LegEvent::Frame`], whose `ts` follows the bridge's `timestamp` (ms since the stream started;
//! Plivo's epoch ms are taken relative to its first media). A jump in `timestamp` (or, without
//! one, in `chunk`) beyond [`GAP_TOLERANCE`] is a gap: gaps up to
//! [`StreamOptions::max_filled_gap`] are filled with silence so the caller's timeline stays
//! continuous for the model; longer ones are not filled (the next frame's `ts` jumps). Telnyx
//! media is first put back in `media.chunk` order ([`super::reorder`]); media without a chunk
//! is taken in arrival order (`sequence_number` also counts non-media messages, so it cannot
//! tell a lost media message from a mark echo).
//!
//! Outbound: Voice and Underrun frames are encoded in the stream's format and sent one per message
//! (Exotel: [`super::Dialect::frames_per_message`] frames per message, the last one of a turn
//! padded with silence), each followed by a mark named `b:<ts_ms>` (the message's first playout
//! timestamp). Idle `Silence` is not sent: bridges play silence when their queue is empty. An
//! acknowledged mark means the caller has heard the audio: [`LegEvent::Heard`] reports its end.
//! `clear` drops the bridge's queue; marks pending then are dropped, not heard, whether the bridge
//! echoes them (Twilio, Telnyx, Exotel) or acknowledges the clear instead (Plivo, Vonage).
//!
//! A refused message is an error for that message only; the stream carries on. The stream ends on
//! `stop`, or at `start` if the account or the media format cannot be served.

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::time::Duration;

use tokio::time::Instant;

use super::audio::AudioFormat;
use super::reorder::Reorder;
use super::wire::{self, Ctx, Inbound, Media, MediaFormat, Outgoing, Transmit, WireError};
use super::{Dialect, DialectChoice, detect};
use crate::audio::playout::PlayedKind;
use crate::audio::{Frame, Reframer};
use crate::leg::LegEvent;
use crate::leg::twilio::cadence::SendIntervals;

/// `timestamp` is in whole milliseconds; jumps this small are rounding, not a gap.
pub const GAP_TOLERANCE: Duration = Duration::from_millis(2);
/// Messages read without a clue to the dialect before the stream is refused (all but the last
/// are held, to be read once a later one reveals it).
pub const MAX_UNDETECTED: usize = 8;
/// Pending marks kept at most (ten minutes of frames); older ones are forgotten if a bridge
/// never acknowledges them.
const MAX_PENDING_MARKS: usize = 30_000;

/// Per-stream settings.
#[derive(Clone, Debug)]
pub struct StreamOptions {
    /// If set, a Twilio `start` from another account ends the stream.
    pub expected_account_sid: Option<String>,
    /// Gaps in the caller's audio up to this long are filled with silence; longer ones are not.
    pub max_filled_gap: Duration,
    /// The format where the dialect leaves it to the stream URL (Exotel's `?sample-rate=`).
    pub fallback_format: Option<AudioFormat>,
    /// Out-of-order media held at most while waiting for a missing message (Telnyx).
    pub reorder_window: usize,
}

impl Default for StreamOptions {
    fn default() -> Self {
        StreamOptions {
            expected_account_sid: None,
            max_filled_gap: Duration::from_millis(200),
            fallback_format: None,
            reorder_window: 3,
        }
    }
}

/// What `start` said about the stream (Vonage: `websocket:connected`).
#[derive(Clone, Debug, PartialEq)]
pub struct StartInfo {
    pub dialect: Dialect,
    /// The stream's id: Twilio `streamSid`, Telnyx `stream_id`, Plivo `streamId`, Exotel
    /// `stream_sid`, Vonage the call's `uuid` header.
    pub stream_sid: String,
    pub account_sid: Option<String>,
    pub call_sid: Option<String>,
    pub tracks: Vec<String>,
    /// Custom parameters (Vonage: the NCCO headers; Telnyx/Exotel also `from`/`to`).
    pub custom_parameters: BTreeMap<String, String>,
    /// The format as the bridge described it.
    pub media_format: MediaFormat,
    /// The format spoken, both directions.
    pub format: AudioFormat,
}

/// Running counts for one stream.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StreamStats {
    /// Messages received (good or bad).
    pub messages_in: u64,
    /// 20 ms frames handed to the call (including gap-filling silence).
    pub frames_in: u64,
    /// 20 ms frames sent to the bridge (Voice and Underrun).
    pub frames_out: u64,
    /// Media messages sent to the bridge.
    pub messages_out: u64,
    /// Idle silence frames not sent.
    pub silence_skipped: u64,
    pub gaps: u64,
    pub gap_filled_ms: u64,
    pub gaps_unfilled: u64,
    /// Media whose timestamp lies before audio already received (appended anyway).
    pub overlaps: u64,
    /// Media held to be put back in order.
    pub reordered: u64,
    /// Media that arrived after its place had been given up (dropped).
    pub late: u64,
    /// Messages refused (unparseable, out of order, wrong account, ...).
    pub bad_messages: u64,
    pub unknown_events: u64,
    /// Errors the bridge reported (Telnyx `error`).
    pub bridge_errors: u64,
    pub ignored_tracks: u64,
    pub dtmf: u64,
    pub marks_sent: u64,
    pub marks_played: u64,
    pub marks_dropped: u64,
    pub marks_unknown: u64,
    pub clears: u64,
}

/// Why a stream ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EndReason {
    /// The bridge sent `stop`.
    Stopped,
    /// `start.accountSid` was not the expected account.
    AccountMismatch {
        expected: String,
        got: Option<String>,
    },
    /// The media format cannot be spoken; the text says what was asked and what is spoken.
    UnsupportedFormat(String),
    /// No message revealed which bridge this is.
    Undetected,
    /// Another bridge's `start` came on this bridge's own path.
    WrongPath { path: Dialect, spoken: Dialect },
}

impl fmt::Display for EndReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EndReason::Stopped => f.write_str("the bridge sent stop"),
            EndReason::AccountMismatch { expected, got } => write!(
                f,
                "start.accountSid {} is not the expected account {expected}",
                got.as_deref().unwrap_or("(missing)")
            ),
            EndReason::UnsupportedFormat(why) => f.write_str(why),
            EndReason::Undetected => write!(
                f,
                "no Twilio, Telnyx, Plivo, Exotel or Vonage opening in the first {MAX_UNDETECTED} \
                 messages; use the bridge's own path"
            ),
            // Short enough for a close frame's reason (123 bytes).
            EndReason::WrongPath { path, spoken } => write!(
                f,
                "a {} stream on {}'s path {}: send it to {} or /media-stream",
                spoken.label(),
                path.label(),
                path.path(),
                spoken.path()
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
        "\"{event}\" before \"start\" ignored: the bridge sends start first (was it lost, or is \
         this not a media-stream client?)"
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
        "a {rate} Hz frame cannot be played on this stream ({format}): the call must resample to \
         the leg's rate"
    )]
    WrongRate { rate: u32, format: AudioFormat },
    #[error("nothing can be played before the bridge's \"start\"")]
    NotStarted,
    #[error("a media payload of {len} bytes is not whole 16-bit samples")]
    OddPayload { len: usize },
    #[error("binary message ignored: {0} sends JSON text")]
    Binary(&'static str),
}

struct PendingMark {
    name: String,
    up_to: Duration,
    /// Pending when a `clear` was sent: its acknowledgement means dropped, not played.
    cleared: bool,
}

/// The core of one bridge media stream.
pub struct MediaStream {
    choice: DialectChoice,
    dialect: Option<Dialect>,
    opts: StreamOptions,
    /// Texts held while the dialect is undetected.
    undetected: Vec<String>,
    start: Option<StartInfo>,
    started_at: Option<Instant>,
    ended: Option<EndReason>,
    format: AudioFormat,
    // Inbound re-framing (the timeline starts at the first media message).
    reframer: Reframer,
    media_started: bool,
    last_chunk: Option<u64>,
    last_payload_len: u64,
    /// Epoch ms of the first media (Plivo).
    ts_base: Option<u64>,
    reorder: Reorder<Media>,
    released: Vec<Media>,
    // Outbound.
    batch: Vec<u8>,
    batch_frames: usize,
    batch_ts: Duration,
    batch_end: Duration,
    pending: VecDeque<PendingMark>,
    send_intervals: SendIntervals,
    events: VecDeque<LegEvent>,
    transmits: VecDeque<Transmit>,
    stats: StreamStats,
}

mod inbound;

impl MediaStream {
    pub fn new(choice: DialectChoice, opts: StreamOptions) -> Self {
        let format = opts.fallback_format.unwrap_or(AudioFormat::PCMU_8K);
        let window = opts.reorder_window;
        MediaStream {
            choice,
            dialect: match choice {
                DialectChoice::Fixed(d) => Some(d),
                DialectChoice::Detect => None,
            },
            opts,
            undetected: Vec::new(),
            start: None,
            started_at: None,
            ended: None,
            format,
            reframer: Reframer::new(format.rate),
            media_started: false,
            last_chunk: None,
            last_payload_len: format.frame_samples() as u64,
            ts_base: None,
            reorder: Reorder::new(window),
            released: Vec::new(),
            batch: Vec::new(),
            batch_frames: 0,
            batch_ts: Duration::ZERO,
            batch_end: Duration::ZERO,
            pending: VecDeque::new(),
            send_intervals: SendIntervals::default(),
            events: VecDeque::new(),
            transmits: VecDeque::new(),
            stats: StreamStats::default(),
        }
    }

    /// The dialect, once fixed or detected.
    pub fn dialect(&self) -> Option<Dialect> {
        self.dialect
    }

    /// How the stream was set up to find its dialect.
    pub fn choice(&self) -> DialectChoice {
        self.choice
    }

    pub fn start_info(&self) -> Option<&StartInfo> {
        self.start.as_ref()
    }

    /// When `start` arrived: the instant of media timestamp zero.
    pub fn started_at(&self) -> Option<Instant> {
        self.started_at
    }

    pub fn ended(&self) -> Option<&EndReason> {
        self.ended.as_ref()
    }

    pub fn stats(&self) -> &StreamStats {
        &self.stats
    }

    /// The format spoken (the fallback until `start`).
    pub fn format(&self) -> AudioFormat {
        self.format
    }

    /// Marks sent and not yet acknowledged.
    pub fn pending_marks(&self) -> usize {
        self.pending.len()
    }

    /// Intervals between consecutive outbound frames (frames whose timestamps follow each other),
    /// in µs, as seen by the `now` passed to [`play`](Self::play).
    pub fn send_intervals_us(&self) -> &[u32] {
        self.send_intervals.kept()
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

    /// Writes a transmit in the stream's dialect.
    pub fn render(&self, t: &Transmit) -> Outgoing {
        let ctx = Ctx {
            stream_sid: self.start.as_ref().map_or("", |s| s.stream_sid.as_str()),
            format: self.format,
        };
        wire::render(self.dialect.unwrap_or(Dialect::Twilio), t, ctx)
    }

    /// Parses and handles one text message that arrived at `now`.
    pub fn handle_text(&mut self, text: &str, now: Instant) -> Result<(), StreamError> {
        let Some(dialect) = self.dialect else {
            return self.undetected_text(text, now);
        };
        let r = match wire::parse(dialect, text) {
            Ok(msg) => self.handle(msg, now),
            Err(e) => {
                self.stats.messages_in += 1;
                self.stats.bad_messages += 1;
                Err(e.into())
            }
        };
        // Before `start`, another bridge's opening on this one's path (which this dialect's
        // parser refuses or passes over) can never start the stream: say so at once rather than
        // wait out the start timeout.
        if self.start.is_none()
            && self.ended.is_none()
            && let Some(spoken) = detect::detect(text).filter(|&d| d != dialect)
        {
            if r.is_ok() {
                self.stats.bad_messages += 1;
            }
            return Err(self.refuse(EndReason::WrongPath {
                path: dialect,
                spoken,
            }));
        }
        r
    }

    fn undetected_text(&mut self, text: &str, now: Instant) -> Result<(), StreamError> {
        if let Some(reason) = &self.ended {
            self.stats.messages_in += 1;
            self.stats.bad_messages += 1;
            return Err(StreamError::AfterEnd {
                event: "message",
                reason: reason.clone(),
            });
        }
        if text.len() > wire::MAX_INBOUND_MESSAGE {
            // Not held: no dialect's parser would take it anyway.
            self.stats.messages_in += 1;
            self.stats.bad_messages += 1;
            return Err(WireError::TooLarge {
                len: text.len(),
                limit: wire::MAX_INBOUND_MESSAGE,
            }
            .into());
        }
        match detect::detect(text) {
            Some(d) => {
                self.dialect = Some(d);
                // Messages before the clue are read now, in order; their errors are counted but
                // only this message's result is returned.
                for held in std::mem::take(&mut self.undetected) {
                    let _ = self.handle_text(&held, now);
                }
                self.handle_text(text, now)
            }
            None if self.undetected.len() + 1 < MAX_UNDETECTED => {
                self.undetected.push(text.to_owned());
                Ok(())
            }
            // The last of MAX_UNDETECTED messages revealed nothing either.
            None => {
                self.stats.messages_in += self.undetected.len() as u64 + 1;
                self.stats.bad_messages += self.undetected.len() as u64 + 1;
                self.undetected.clear();
                Err(self.refuse(EndReason::Undetected))
            }
        }
    }

    /// Handles one binary message (Vonage audio) that arrived at `now`.
    pub fn handle_binary(&mut self, bytes: &[u8], now: Instant) -> Result<(), StreamError> {
        match self.dialect {
            Some(d) if d.binary_audio() => {
                let media = Media {
                    payload: bytes.to_vec(),
                    ..Default::default()
                };
                self.handle(Inbound::Media { media, seq: None }, now)
            }
            d => Err(StreamError::Binary(d.map_or("this bridge", Dialect::label))),
        }
    }

    /// Handles one parsed message that arrived at `now`.
    pub fn handle(&mut self, msg: Inbound, now: Instant) -> Result<(), StreamError> {
        self.stats.messages_in += 1;
        let r = self.dispatch(msg, now);
        if r.is_err() {
            self.stats.bad_messages += 1;
        }
        r
    }

    fn refuse(&mut self, reason: EndReason) -> StreamError {
        self.ended = Some(reason.clone());
        StreamError::Refused(reason)
    }

    /// Queues one frame for the caller. Idle silence is not sent (and ends an Exotel batch).
    pub fn play(
        &mut self,
        frame: &Frame,
        kind: PlayedKind,
        now: Instant,
    ) -> Result<(), StreamError> {
        self.outbound_ready("media")?;
        if kind == PlayedKind::Silence {
            self.stats.silence_skipped += 1;
            self.flush_batch(true);
            return Ok(());
        }
        if frame.rate != self.format.rate {
            return Err(StreamError::WrongRate {
                rate: frame.rate,
                format: self.format,
            });
        }
        if self.batch_frames == 0 {
            self.batch_ts = frame.ts;
        }
        self.format.encode(&frame.samples, &mut self.batch);
        self.batch_frames += 1;
        let end = frame.ts + frame.duration();
        self.batch_end = end;
        self.send_intervals.sent(frame.ts, end, now);
        self.stats.frames_out += 1;
        if self.batch_frames >= self.per_message() {
            self.flush_batch(false);
        }
        Ok(())
    }

    fn per_message(&self) -> usize {
        self.dialect.map_or(1, Dialect::frames_per_message)
    }

    /// Sends the frames batched so far as one media message and its mark; `pad` fills a short
    /// batch with silence to the full message size (Exotel plays a short tail with a gap).
    fn flush_batch(&mut self, pad: bool) {
        if self.batch_frames == 0 {
            return;
        }
        let mut payload = std::mem::take(&mut self.batch);
        if pad {
            let want = self.per_message() * self.format.frame_bytes();
            let silence = self.format.silence();
            while payload.len() < want {
                payload.extend_from_slice(silence);
            }
        }
        self.batch_frames = 0;
        let name = format!("b:{}", self.batch_ts.as_millis());
        self.transmits.push_back(Transmit::Media(payload));
        self.transmits.push_back(Transmit::Mark(name.clone()));
        if self.pending.len() >= MAX_PENDING_MARKS {
            self.pending.pop_front();
        }
        self.pending.push_back(PendingMark {
            name,
            up_to: self.batch_end,
            cleared: false,
        });
        self.stats.messages_out += 1;
        self.stats.marks_sent += 1;
    }

    /// Barge-in: tells the bridge to drop its queued audio (and drops any unsent batch). Marks
    /// pending now will be acknowledged as dropped.
    pub fn clear(&mut self) -> Result<(), StreamError> {
        self.outbound_ready("clear")?;
        self.batch.clear();
        self.batch_frames = 0;
        for m in &mut self.pending {
            m.cleared = true;
        }
        self.send_intervals.break_off();
        self.stats.clears += 1;
        self.transmits.push_back(Transmit::Clear);
        Ok(())
    }

    fn outbound_ready(&self, event: &'static str) -> Result<(), StreamError> {
        if let Some(reason) = &self.ended {
            return Err(StreamError::AfterEnd {
                event,
                reason: reason.clone(),
            });
        }
        if self.start.is_none() {
            return Err(StreamError::NotStarted);
        }
        Ok(())
    }

    fn mark_ack(&mut self, name: &str) {
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

    /// The bridge acknowledged a clear: marks pending at the clear will not be acknowledged.
    fn cleared_ack(&mut self) {
        let before = self.pending.len();
        self.pending.retain(|m| !m.cleared);
        self.stats.marks_dropped += (before - self.pending.len()) as u64;
    }
}
