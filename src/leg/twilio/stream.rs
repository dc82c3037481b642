//! The sans-IO core of one Twilio media stream: the bridge [`MediaStream`] with the Twilio
//! dialect fixed, taking and giving Twilio's own typed messages ([`FromTwilio`], [`ToTwilio`]).
//!
//! Inbound: `media` payloads of any size are decoded from μ-law and re-framed into exactly 160
//! samples (20 ms at 8 kHz) per [`LegEvent::Frame`], whose `ts`
//! follows Twilio's `timestamp` (milliseconds since the stream started). A jump in `timestamp`
//! (or, without one, in `chunk`) beyond [`GAP_TOLERANCE`] is a gap: gaps up to
//! [`StreamOptions::max_filled_gap`] (200 ms by default, ten frames) are filled with silence so the
//! caller's timeline stays continuous for the model; longer ones are not filled (the partial frame
//! is padded and the next frame's `ts` jumps), because seconds of invented silence would only
//! delay the model. Both kinds are counted.
//!
//! Outbound: each Voice or Underrun frame becomes one `media` message (160 μ-law bytes) followed
//! by a `mark` named `b:<ts_ms>` (the frame's playout timestamp in ms). Idle `Silence` frames are
//! not sent: Twilio plays silence by itself when its queue is empty. When Twilio echoes a mark,
//! the caller has heard the frame: [`LegEvent::Heard`] reports its
//! end. `clear` drops Twilio's queue and makes it echo every pending mark at once; marks pending
//! when the clear was sent are therefore counted as dropped, not heard.
//!
//! A refused message is an error for that message only; the stream carries on. The stream ends on
//! `stop`, or at `start` if the account or media format is not the expected one.

use tokio::time::Instant;

use super::wire::{FromTwilio, ToTwilio};
use crate::audio::Frame;
use crate::audio::playout::PlayedKind;
use crate::leg::LegEvent;
use crate::leg::bridge::wire::twilio_adapter;
use crate::leg::bridge::{Dialect, DialectChoice, MediaStream};

pub use crate::leg::bridge::stream::GAP_TOLERANCE;
pub use crate::leg::bridge::{EndReason, StartInfo, StreamError, StreamOptions, StreamStats};

/// Twilio's rate: μ-law 8 kHz.
pub const RATE: u32 = 8000;
/// Samples (and μ-law bytes) in one 20 ms frame.
pub const FRAME_SAMPLES: usize = 160;

/// The core of one Twilio media stream.
pub struct TwilioStream {
    inner: MediaStream,
}

impl TwilioStream {
    pub fn new(opts: StreamOptions) -> Self {
        TwilioStream {
            inner: MediaStream::new(DialectChoice::Fixed(Dialect::Twilio), opts),
        }
    }

    /// The bridge core underneath.
    pub fn inner(&self) -> &MediaStream {
        &self.inner
    }

    /// What `start` said, once it has arrived.
    pub fn start_info(&self) -> Option<&StartInfo> {
        self.inner.start_info()
    }

    /// When `start` arrived: the instant of media timestamp zero.
    pub fn started_at(&self) -> Option<Instant> {
        self.inner.started_at()
    }

    /// Why the stream ended, once it has.
    pub fn ended(&self) -> Option<&EndReason> {
        self.inner.ended()
    }

    pub fn stats(&self) -> &StreamStats {
        self.inner.stats()
    }

    /// Marks sent and not yet echoed.
    pub fn pending_marks(&self) -> usize {
        self.inner.pending_marks()
    }

    /// Intervals between consecutive outbound frames (frames whose timestamps follow each other),
    /// in µs, as seen by the `now` passed to [`play`](Self::play).
    pub fn send_intervals_us(&self) -> &[u32] {
        self.inner.send_intervals_us()
    }

    /// Takes the recorded send intervals (for the final report).
    pub fn take_send_intervals(&mut self) -> super::cadence::SendIntervals {
        self.inner.take_send_intervals()
    }

    /// The next event for the call. Poll until `None` after every input.
    #[must_use]
    pub fn poll_event(&mut self) -> Option<LegEvent> {
        self.inner.poll_event()
    }

    /// The next message for Twilio. Poll until `None` after every input.
    #[must_use]
    pub fn poll_transmit(&mut self) -> Option<ToTwilio> {
        let t = self.inner.poll_transmit()?;
        let sid = self
            .inner
            .start_info()
            .map_or("", |s| s.stream_sid.as_str());
        Some(twilio_adapter::to_twilio(&t, sid))
    }

    /// Parses and handles one text message that arrived at `now`.
    pub fn handle_text(&mut self, text: &str, now: Instant) -> Result<(), StreamError> {
        self.inner.handle_text(text, now)
    }

    /// Handles one parsed message that arrived at `now`.
    pub fn handle(&mut self, msg: FromTwilio, now: Instant) -> Result<(), StreamError> {
        self.inner.handle(twilio_adapter::from_twilio(msg), now)
    }

    /// Queues one frame for the caller. Idle silence is not sent.
    pub fn play(
        &mut self,
        frame: &Frame,
        kind: PlayedKind,
        now: Instant,
    ) -> Result<(), StreamError> {
        self.inner.play(frame, kind, now)
    }

    /// Barge-in: tells Twilio to drop its queued audio. Marks pending now will echo as dropped.
    pub fn clear(&mut self) -> Result<(), StreamError> {
        self.inner.clear()
    }
}
