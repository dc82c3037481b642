//! The inbound half of [`MediaStream`]: dispatch of each message, `start`, and the re-framing of
//! caller audio into 20 ms frames with gap detection (short gaps filled with silence, long ones
//! jumped).

use std::collections::VecDeque;

use tokio::time::Instant;

use super::{EndReason, MediaStream, StartInfo, StreamError, StreamStats};
use crate::audio::{Frame, Reframer};
use crate::leg::bridge::Dialect;
use crate::leg::bridge::audio::AudioFormat;
use crate::leg::bridge::wire::{self, Inbound, Media, MediaFormat, Start};
use crate::leg::{LegEvent, StopReason};

impl MediaStream {
    pub(super) fn dispatch(&mut self, msg: Inbound, now: Instant) -> Result<(), StreamError> {
        let name = msg.name();
        if let Some(reason) = &self.ended {
            return Err(StreamError::AfterEnd {
                event: name,
                reason: reason.clone(),
            });
        }
        let started = self.start.is_some();
        match msg {
            Inbound::Connected => Ok(()),
            Inbound::Unknown(_) => {
                self.stats.unknown_events += 1;
                Ok(())
            }
            Inbound::Error(e) => {
                self.stats.bridge_errors += 1;
                tracing::warn!(error = %e, "the bridge reported an error");
                Ok(())
            }
            Inbound::Start(s) => self.on_start(s, now),
            _ if !started => Err(StreamError::BeforeStart { event: name }),
            Inbound::Media { media, .. } => self.on_media(media, now),
            Inbound::Dtmf(digit) => {
                self.stats.dtmf += 1;
                self.events.push_back(LegEvent::Dtmf { digit });
                Ok(())
            }
            Inbound::Mark(name) => {
                self.mark_ack(&name);
                Ok(())
            }
            Inbound::Cleared => {
                self.cleared_ack();
                Ok(())
            }
            Inbound::Stop => {
                let mut out = std::mem::take(&mut self.released);
                self.reorder.flush(&mut out);
                for m in out.drain(..) {
                    self.media(&m, now);
                }
                self.released = out;
                self.emit_partial(now);
                self.events.push_back(LegEvent::Stop(StopReason::HungUp));
                self.ended = Some(EndReason::Stopped);
                Ok(())
            }
        }
    }

    fn on_start(&mut self, s: Start, now: Instant) -> Result<(), StreamError> {
        if let Some(info) = &self.start {
            return Err(StreamError::DuplicateStart(info.stream_sid.clone()));
        }
        let dialect = self.dialect.unwrap_or(Dialect::Twilio);
        let format = match wire::format(dialect, &s, self.opts.fallback_format) {
            Ok(f) => f,
            Err(why) => return Err(self.refuse(EndReason::UnsupportedFormat(why))),
        };
        if dialect == Dialect::Twilio
            && let Some(expected) = &self.opts.expected_account_sid
            && s.account_sid.as_deref() != Some(expected.as_str())
        {
            let reason = EndReason::AccountMismatch {
                expected: expected.clone(),
                got: s.account_sid,
            };
            return Err(self.refuse(reason));
        }
        let media_format = s.media_format.unwrap_or_else(|| describe(dialect, format));
        self.format = format;
        self.reframer = Reframer::new(format.rate);
        self.last_payload_len = format.frame_samples() as u64;
        self.start = Some(StartInfo {
            dialect,
            // Every dialect's parser refuses a start without a stream id.
            stream_sid: s.stream_sid.unwrap_or_default(),
            account_sid: s.account_sid,
            call_sid: s.call_sid,
            tracks: s.tracks,
            custom_parameters: s.custom_parameters,
            media_format,
            format,
        });
        self.started_at = Some(now);
        Ok(())
    }

    fn on_media(&mut self, m: Media, now: Instant) -> Result<(), StreamError> {
        if m.track
            .as_deref()
            .is_some_and(|t| !t.starts_with("inbound"))
        {
            self.stats.ignored_tracks += 1;
            return Ok(());
        }
        if self.format.encoding.bytes_per_sample() == 2 && m.payload.len() % 2 == 1 {
            return Err(StreamError::OddPayload {
                len: m.payload.len(),
            });
        }
        match m.chunk {
            Some(key) if self.dialect.is_some_and(Dialect::reorders) => {
                let mut out = std::mem::take(&mut self.released);
                self.reorder.push(key, m, &mut out);
                self.stats.reordered = self.reorder.reordered;
                self.stats.late = self.reorder.late;
                for m in out.drain(..) {
                    self.media(&m, now);
                }
                self.released = out;
            }
            _ => self.media(&m, now),
        }
        Ok(())
    }

    fn samples_per_ms(&self) -> u64 {
        u64::from(self.format.rate / 1000)
    }

    fn media(&mut self, m: &Media, now: Instant) {
        let timestamp = match m.timestamp {
            Some(t) if self.dialect.is_some_and(Dialect::epoch_timestamps) => {
                Some(t.saturating_sub(*self.ts_base.get_or_insert(t)))
            }
            t => t,
        };
        let chunk = m.chunk;
        let per_ms = self.samples_per_ms();
        let len = self.format.samples_in(m.payload.len()) as u64;
        match self.media_started.then(|| self.reframer.position()) {
            None => {
                let pos = timestamp.map_or(0, |t| t.saturating_mul(per_ms));
                self.media_started = true;
                // Nothing is held before the first media message.
                let _ = self.reframer.jump_to(pos);
            }
            Some(expected) => {
                let at = match (timestamp, chunk, self.last_chunk) {
                    (Some(t), _, _) => t.saturating_mul(per_ms),
                    (None, Some(c), Some(last)) if c > last.saturating_add(1) => expected
                        .saturating_add((c - last - 1).saturating_mul(self.last_payload_len)),
                    _ => expected,
                };
                let tolerance = super::GAP_TOLERANCE.as_millis() as u64 * per_ms;
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
        self.push_payload(&m.payload, now);
    }

    fn gap(&mut self, expected: u64, at: u64, now: Instant) {
        self.stats.gaps += 1;
        let per_ms = self.samples_per_ms();
        let missing = at - expected;
        let max_fill = self.opts.max_filled_gap.as_millis() as u64 * per_ms;
        if missing <= max_fill {
            self.stats.gap_filled_ms += missing / per_ms;
            let (stats, events) = (&mut self.stats, &mut self.events);
            self.reframer.push_silence(missing as usize, |frame| {
                frame_in(stats, events, frame, now)
            });
        } else {
            self.stats.gaps_unfilled += 1;
            if let Some(frame) = self.reframer.jump_to(at) {
                frame_in(&mut self.stats, &mut self.events, frame, now);
            }
        }
    }

    fn push_payload(&mut self, bytes: &[u8], now: Instant) {
        let bps = self.format.encoding.bytes_per_sample();
        let format = self.format;
        let (stats, events) = (&mut self.stats, &mut self.events);
        self.reframer.push_with(
            bytes.len() / bps,
            |r, out| format.decode(&bytes[r.start * bps..r.end * bps], out),
            |frame| frame_in(stats, events, frame, now),
        );
    }

    /// Emits the frame being filled, padded with silence to 20 ms.
    pub(super) fn emit_partial(&mut self, now: Instant) {
        if let Some(frame) = self.reframer.flush() {
            frame_in(&mut self.stats, &mut self.events, frame, now);
        }
    }
}

/// The format a bridge did not describe, as `start` would have.
fn describe(dialect: Dialect, f: AudioFormat) -> MediaFormat {
    if dialect == Dialect::Twilio {
        return MediaFormat::mulaw_8k();
    }
    MediaFormat {
        encoding: Some(f.encoding.name().to_owned()),
        sample_rate: Some(u64::from(f.rate)),
        channels: Some(1),
    }
}

/// One caller frame out of the reframer, counted.
fn frame_in(stats: &mut StreamStats, events: &mut VecDeque<LegEvent>, frame: Frame, now: Instant) {
    stats.frames_in += 1;
    events.push_back(LegEvent::Frame {
        frame,
        received_at: now,
    });
}
