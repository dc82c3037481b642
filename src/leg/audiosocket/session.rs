//! The sans-IO core of one AudioSocket connection. It owns no socket and reads no clock: the
//! shell feeds it the bytes it read with the instant they arrived ([`AudioSocketSession::handle_bytes`]),
//! the end of the stream ([`AudioSocketSession::handle_eof`]), the call's commands
//! ([`AudioSocketSession::play`], [`AudioSocketSession::clear`], [`AudioSocketSession::hangup`]),
//! and drains [`AudioSocketSession::poll_event`] (toward the call) and
//! [`AudioSocketSession::poll_transmit`] (toward Asterisk) after each input.
//!
//! A connection starts with the UUID (`0x01`); the first audio message fixes the rate (`0x10`
//! 8 kHz, `0x12` 16 kHz, … any slin kind but 44.1 kHz: baton's audio path counts whole samples
//! per millisecond), and the call can begin. Inbound audio of any size is re-framed into exactly 20 ms per
//! [`LegEvent::Frame`]; `ts` counts the samples received. DTMF becomes [`LegEvent::Dtmf`];
//! `0x00`, `0xFF` and the end of the stream become [`LegEvent::Stop`].
//!
//! Outbound: Asterisk writes every audio message to the channel the moment it arrives and has no
//! buffer, no clear and no playback acknowledgement, so the call's playout clock *is* the pacing:
//! each Voice or Underrun frame becomes one audio message as it is played; idle silence is not
//! sent. A barge-in needs nothing here: the call has flushed its playout, so the agent's audio
//! simply stops.
//!
//! Any protocol error (unknown kind, length-0 or odd audio, oversize length, truncated message,
//! UUID not first, rate change) ends the connection: the error is returned for the log, a
//! hang-up (`00 00 00`) is queued, and the call is told [`LegEvent::Stop`].

use std::collections::VecDeque;
use std::fmt;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::time::Instant;

use super::wire::{self, Decoder, Message, WireError};
use crate::audio::playout::PlayedKind;
use crate::audio::{Frame, Reframer, samples_per_frame};
use crate::leg::twilio::cadence::SendIntervals;
use crate::leg::{LegEvent, StopReason};

/// What the start of the connection said.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StartInfo {
    /// The UUID the dialplan gave, `8-4-4-4-12` hex.
    pub uuid: String,
    /// The slin rate of the first audio message.
    pub rate: u32,
    /// Its kind byte (`0x10` for 8 kHz, `0x12` for 16 kHz, …).
    pub kind: u8,
}

/// Why a connection ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EndReason {
    /// The peer sent `0x00`.
    PeerHangup,
    /// The peer sent `0xFF` with these flags, in words.
    PeerError(String),
    /// The stream ended (EOF) between messages.
    Closed,
    /// baton hung up (the call ended).
    Hangup,
    /// The peer broke the protocol.
    Protocol(SessionError),
    /// Writing to the peer failed, or the peer read nothing for too long.
    Unwritable(String),
}

impl fmt::Display for EndReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EndReason::PeerHangup => f.write_str("the peer sent hang-up"),
            EndReason::PeerError(e) => write!(f, "the peer reported an error: {e}"),
            EndReason::Closed => f.write_str("the connection closed"),
            EndReason::Hangup => f.write_str("baton hung up"),
            EndReason::Protocol(e) => write!(f, "protocol error: {e}"),
            EndReason::Unwritable(e) => write!(f, "cannot write to the peer: {e}"),
        }
    }
}

impl EndReason {
    /// How the call records this end: a hang-up, a clean close between messages and baton's
    /// own hang-up are the caller hanging up; the rest is the caller's side failing.
    pub fn stop_reason(&self) -> StopReason {
        match self {
            EndReason::PeerHangup | EndReason::Closed | EndReason::Hangup => StopReason::HungUp,
            EndReason::PeerError(_) | EndReason::Protocol(_) | EndReason::Unwritable(_) => {
                StopReason::Failed(self.to_string())
            }
        }
    }
}

/// Something the connection refused. Every variant but [`SessionError::NotStarted`] and
/// [`SessionError::Ended`] ends the connection.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SessionError {
    #[error(transparent)]
    Wire(#[from] WireError),
    #[error("{0} message before the UUID: AudioSocket sends the UUID (kind 0x01) first")]
    BeforeUuid(&'static str),
    #[error("a second UUID: a connection carries one call")]
    DuplicateUuid,
    #[error("the audio rate changed from {from} Hz to {to} Hz within the call")]
    RateChanged { from: u32, to: u32 },
    #[error(
        "slin at {rate} Hz (kind 0x{kind:02x}) is not supported; the supported kinds are {}",
        supported_kinds()
    )]
    UnsupportedRate { kind: u8, rate: u32 },
    #[error("a partial message waited {0:?} for the rest of its bytes")]
    Stalled(Duration),
    #[error("no message from the peer for {0:?}")]
    Idle(Duration),
    #[error("a {rate} Hz frame cannot be played on a {leg} Hz connection")]
    WrongRate { rate: u32, leg: u32 },
    #[error("nothing can be played before the first audio message")]
    NotStarted,
    #[error("the connection has ended ({0})")]
    Ended(String),
}

/// Whether a call can run at `rate`: baton's audio path counts whole samples per millisecond,
/// which 44.1 kHz is not.
pub fn supported_rate(rate: u32) -> bool {
    samples_per_frame(rate) * 50 == rate as usize
}

/// The slin kinds a call can start with, by Asterisk's names:
/// `slin (0x10, 8000 Hz), slin12 (0x11, 12000 Hz), …`.
pub fn supported_kinds() -> String {
    wire::SLIN_RATES
        .iter()
        .filter(|(_, rate)| supported_rate(*rate))
        .map(|(kind, rate)| {
            let name = match rate {
                8_000 => "slin".to_owned(),
                r => format!("slin{}", r / 1000),
            };
            format!("{name} (0x{kind:02x}, {rate} Hz)")
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Running counts for one connection.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SessionStats {
    pub messages_in: u64,
    pub audio_messages_in: u64,
    /// 20 ms frames handed to the call.
    pub frames_in: u64,
    /// Audio messages sent (one per Voice/Underrun frame).
    pub frames_out: u64,
    /// Idle silence frames not sent.
    pub silence_skipped: u64,
    pub dtmf: u64,
    /// Barge-ins (nothing to send: playback stops with the flushed playout).
    pub clears: u64,
}

enum State {
    AwaitingUuid,
    AwaitingAudio { uuid: String },
    Streaming(StartInfo),
}

/// The core of one AudioSocket connection.
pub struct AudioSocketSession {
    decoder: Decoder,
    state: State,
    ended: Option<EndReason>,
    started_at: Option<Instant>,
    /// Frames the caller's audio (set at the first audio message, when the rate is known).
    reframer: Option<Reframer>,
    send_intervals: SendIntervals,
    events: VecDeque<LegEvent>,
    transmits: VecDeque<Bytes>,
    out: BytesMut,
    stats: SessionStats,
}

impl AudioSocketSession {
    /// `max_payload`: the largest message length accepted (see [`wire::DEFAULT_MAX_PAYLOAD`]).
    pub fn new(max_payload: usize) -> Self {
        AudioSocketSession {
            decoder: Decoder::new(max_payload),
            state: State::AwaitingUuid,
            ended: None,
            started_at: None,
            reframer: None,
            send_intervals: SendIntervals::default(),
            events: VecDeque::new(),
            transmits: VecDeque::new(),
            out: BytesMut::new(),
            stats: SessionStats::default(),
        }
    }

    /// The UUID and rate, once the first audio message has arrived.
    pub fn start_info(&self) -> Option<&StartInfo> {
        match &self.state {
            State::Streaming(s) => Some(s),
            _ => None,
        }
    }

    /// The UUID, once it has arrived.
    pub fn uuid(&self) -> Option<&str> {
        match &self.state {
            State::AwaitingUuid => None,
            State::AwaitingAudio { uuid } => Some(uuid),
            State::Streaming(s) => Some(&s.uuid),
        }
    }

    /// The instant of the first inbound sample (frame `ts` zero).
    pub fn started_at(&self) -> Option<Instant> {
        self.started_at
    }

    pub fn ended(&self) -> Option<&EndReason> {
        self.ended.as_ref()
    }

    pub fn stats(&self) -> &SessionStats {
        &self.stats
    }

    /// Bytes of an inbound message not yet complete (a stalled peer if this stays above 0).
    pub fn pending_bytes(&self) -> usize {
        self.decoder.pending()
    }

    /// Takes the intervals between consecutive outbound frames, in µs.
    pub fn take_send_intervals(&mut self) -> SendIntervals {
        std::mem::take(&mut self.send_intervals)
    }

    #[must_use]
    pub fn poll_event(&mut self) -> Option<LegEvent> {
        self.events.pop_front()
    }

    /// The next bytes for the peer.
    #[must_use]
    pub fn poll_transmit(&mut self) -> Option<Bytes> {
        self.transmits.pop_front()
    }

    /// Handles bytes read at `now`. An error has ended the connection.
    pub fn handle_bytes(&mut self, bytes: &[u8], now: Instant) -> Result<(), SessionError> {
        if self.ended.is_some() {
            return Ok(());
        }
        self.decoder.push(bytes);
        loop {
            let msg = match self.decoder.next_message() {
                Ok(Some(m)) => m,
                Ok(None) => return Ok(()),
                Err(e) => return Err(self.fail(e.into(), now)),
            };
            self.stats.messages_in += 1;
            if let Err(e) = self.message(msg, now) {
                return Err(self.fail(e, now));
            }
            if self.ended.is_some() {
                return Ok(());
            }
        }
    }

    /// The peer closed its side. A message left incomplete is an error.
    pub fn handle_eof(&mut self, now: Instant) -> Result<(), SessionError> {
        if self.ended.is_some() {
            return Ok(());
        }
        if let Err(e) = self.decoder.finish() {
            return Err(self.fail(e.into(), now));
        }
        self.end(EndReason::Closed, now);
        Ok(())
    }

    /// The shell's timer ran out: a message left incomplete for `waited`, or nothing at all.
    pub fn handle_timeout(&mut self, waited: Duration, now: Instant) -> SessionError {
        let e = if self.decoder.pending() > 0 {
            SessionError::Stalled(waited)
        } else {
            SessionError::Idle(waited)
        };
        self.fail(e, now)
    }

    /// The shell cannot write to the peer (`why`): the connection is over, with nothing more
    /// to send.
    pub fn handle_write_failed(&mut self, why: String, now: Instant) {
        if self.ended.is_none() {
            self.end(EndReason::Unwritable(why), now);
        }
        self.transmits.clear();
    }

    fn message(&mut self, msg: Message, now: Instant) -> Result<(), SessionError> {
        match (&self.state, msg) {
            (_, Message::Hangup) => self.end(EndReason::PeerHangup, now),
            // An error whose only flag is 0x01, "the calling party hung up": a hang-up.
            (_, Message::Error(flags)) if flags.first() == Some(&wire::ERROR_CALLER_HUNG_UP) => {
                self.end(EndReason::PeerHangup, now)
            }
            (_, Message::Error(flags)) => {
                self.end(EndReason::PeerError(wire::describe_error(&flags)), now)
            }
            (State::AwaitingUuid, Message::Uuid(id)) => {
                self.state = State::AwaitingAudio {
                    uuid: wire::uuid_string(&id),
                };
            }
            (State::AwaitingUuid, m) => return Err(SessionError::BeforeUuid(m.name())),
            (_, Message::Uuid(_)) => return Err(SessionError::DuplicateUuid),
            (_, Message::Dtmf(digit)) => {
                self.stats.dtmf += 1;
                self.events.push_back(LegEvent::Dtmf { digit });
            }
            (
                State::AwaitingAudio { uuid },
                Message::Audio {
                    kind,
                    rate,
                    payload,
                },
            ) => {
                if !supported_rate(rate) {
                    return Err(SessionError::UnsupportedRate { kind, rate });
                }
                let info = StartInfo {
                    uuid: uuid.clone(),
                    rate,
                    kind,
                };
                self.state = State::Streaming(info);
                self.reframer = Some(Reframer::new(rate));
                // The message's last sample arrived now: its first one started its duration ago.
                let dur =
                    Duration::from_micros(payload.len() as u64 / 2 * 1_000_000 / u64::from(rate));
                self.started_at = Some(now.checked_sub(dur).unwrap_or(now));
                self.audio(&payload, now);
            }
            (State::Streaming(s), Message::Audio { rate, payload, .. }) => {
                if rate != s.rate {
                    return Err(SessionError::RateChanged {
                        from: s.rate,
                        to: rate,
                    });
                }
                self.audio(&payload, now);
            }
        }
        Ok(())
    }

    fn audio(&mut self, payload: &[u8], now: Instant) {
        self.stats.audio_messages_in += 1;
        let Some(reframer) = self.reframer.as_mut() else {
            return;
        };
        let (stats, events) = (&mut self.stats, &mut self.events);
        reframer.push_with(
            payload.len() / 2,
            |r, out| wire::decode_samples(&payload[r.start * 2..r.end * 2], out),
            |frame| {
                stats.frames_in += 1;
                events.push_back(LegEvent::Frame {
                    frame,
                    received_at: now,
                });
            },
        );
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

    fn end(&mut self, reason: EndReason, now: Instant) {
        self.emit_partial(now);
        self.events.push_back(LegEvent::Stop(reason.stop_reason()));
        self.ended = Some(reason);
    }

    fn fail(&mut self, e: SessionError, now: Instant) -> SessionError {
        self.end(EndReason::Protocol(e.clone()), now);
        self.transmits.push_back(Bytes::from_static(&wire::HANGUP));
        e
    }

    /// Sends one frame to the peer now. Idle silence is not sent.
    pub fn play(
        &mut self,
        frame: &Frame,
        kind: PlayedKind,
        now: Instant,
    ) -> Result<(), SessionError> {
        if let Some(r) = &self.ended {
            return Err(SessionError::Ended(r.to_string()));
        }
        let Some(info) = self.start_info() else {
            return Err(SessionError::NotStarted);
        };
        if kind == PlayedKind::Silence {
            self.stats.silence_skipped += 1;
            return Ok(());
        }
        if frame.rate != info.rate {
            return Err(SessionError::WrongRate {
                rate: frame.rate,
                leg: info.rate,
            });
        }
        wire::encode_audio(info.kind, &frame.samples, &mut self.out);
        self.transmits.push_back(self.out.split().freeze());
        let end = frame.ts + frame.duration();
        self.send_intervals.sent(frame.ts, end, now);
        self.stats.frames_out += 1;
        Ok(())
    }

    /// Barge-in. Asterisk holds no audio of baton's, so there is nothing to drop: the call's
    /// flushed playout stops the agent's audio at the next tick.
    pub fn clear(&mut self) {
        self.stats.clears += 1;
        self.send_intervals.break_off();
    }

    /// baton ends the call: queues `00 00 00`.
    pub fn hangup(&mut self) {
        if self.ended.is_none() {
            self.ended = Some(EndReason::Hangup);
            self.transmits.push_back(Bytes::from_static(&wire::HANGUP));
        }
    }
}

#[cfg(test)]
#[path = "session_tests.rs"]
mod tests;
