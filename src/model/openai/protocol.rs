//! The OpenAI Realtime protocol core, sans-IO: the first `session.update` goes out first and
//! `session.updated` accepts it (an `error` in answer refuses it); every frame after it goes
//! through the [`Decoder`] into [`ModelEvent`]s stamped with its arrival. The core owns the
//! response gate: `response.create` goes out only while no response is in progress or requested,
//! and requests made meanwhile are served by one response once the one in progress is done (the
//! service refuses a second with `conversation_already_has_active_response`). A barge-in is
//! decided here too, from the response and the audio item the decoder tracks. Setup order,
//! keepalive and close are the shared [`Link`]'s.

use tokio::sync::oneshot;
use tokio::time::Instant;

use super::codec::{self, AudioItem, Decoder};
use super::setup::SessionConfig;
use super::wire::{Api, AudioFormat, ClientEvent};
use crate::model::ModelEvent;
use crate::model::protocol::{Frame, Link, ProtocolCore, SetupFailure};
use crate::model::session::Outbound;

/// What the session handle sends the core.
#[derive(Debug)]
pub enum Command {
    /// A frame to write as it is.
    Out(Outbound),
    /// Ask for a response (see [`OpenAiCore::request_response`]).
    Respond,
    /// The caller barged in having heard `heard_ms` of the item being played; `reply` gets
    /// what was sent.
    BargeIn {
        heard_ms: u64,
        reply: Option<oneshot::Sender<Vec<ClientEvent>>>,
    },
    /// The assistant item that carried the latest audio.
    AudioItem(oneshot::Sender<Option<AudioItem>>),
}

/// When `response.create` may go out.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct ResponseGate {
    /// A response was asked for while one was in progress (or requested): send one when done.
    wanted: bool,
    /// `response.create` was sent and its `response.created` has not arrived yet.
    requested: bool,
}

impl ResponseGate {
    /// Asks for a response while `active` is in progress or not: true when `response.create`
    /// may go out now.
    fn request(&mut self, active: bool) -> bool {
        if active || self.requested {
            // Requests made during one response are served by one response after it (the
            // requested one may have been planned before this request's items arrived).
            self.wanted = true;
            false
        } else {
            self.requested = true;
            true
        }
    }

    /// After a frame's events: true when the waiting `response.create` may go out now.
    fn after_frame(&mut self, active: bool, events: &[ModelEvent]) -> bool {
        if active {
            self.requested = false;
        }
        let refused = events.iter().any(|e| {
            matches!(e, ModelEvent::ProtocolError(m)
                if codec::error_code(m) == Some("conversation_already_has_active_response"))
        });
        if refused && self.requested {
            // Raced a response the server started itself: ask again when that one is done.
            self.requested = false;
            self.wanted = true;
        }
        if self.wanted && !self.requested && !active {
            self.wanted = false;
            self.requested = true;
            return true;
        }
        false
    }
}

/// One OpenAI Realtime session's protocol state.
#[derive(Debug)]
pub struct OpenAiCore {
    link: Link,
    decoder: Decoder,
    gate: ResponseGate,
    /// The caller-audio format the setup asks for: the session is refused if the service
    /// confirms another (the call would send audio it reads as something else).
    input_format: AudioFormat,
}

fn response_create() -> Outbound {
    Outbound::Text {
        json: codec::encode(&ClientEvent::ResponseCreate {
            event_id: None,
            response: None,
        }),
        received_at: None,
    }
}

impl OpenAiCore {
    /// A session set up by `config` in `api`'s dialect, starting at `now`.
    pub fn new(config: &SessionConfig, api: Api, now: Instant) -> Self {
        OpenAiCore {
            link: Link::new(
                codec::encode(&config.session_update(api)),
                config.setup_timeout,
                config.keepalive,
                now,
            ),
            decoder: Decoder::new(config.output_format.clone()),
            gate: ResponseGate::default(),
            input_format: config.input_format.clone(),
        }
    }

    /// Asks for a response: `response.create` now if no response is in progress or requested;
    /// else it goes out when the response in progress is done. Any number of requests made
    /// meanwhile are served by that one response.
    pub fn request_response(&mut self, now: Instant) {
        if self.gate.request(self.decoder.active_response().is_some()) {
            self.link.send(response_create(), now);
        }
    }

    /// The caller barged in having heard `heard_ms` of the item being played: queues
    /// `response.cancel` (if a response is in progress) and `conversation.item.truncate`.
    /// Returns what was queued.
    pub fn barge_in(&mut self, heard_ms: u64, now: Instant) -> Vec<ClientEvent> {
        let events = self.decoder.barge_in(heard_ms);
        for e in &events {
            self.link.send(
                Outbound::Text {
                    json: codec::encode(e),
                    received_at: None,
                },
                now,
            );
        }
        tracing::debug!(
            heard_ms,
            events = events.len(),
            "barge-in sent to the model"
        );
        events
    }

    /// The assistant item that carried the latest audio and how much of it arrived.
    pub fn audio_item(&self) -> Option<&AudioItem> {
        self.decoder.audio_item()
    }
}

impl ProtocolCore for OpenAiCore {
    type Command = Command;

    fn link(&self) -> &Link {
        &self.link
    }

    fn link_mut(&mut self) -> &mut Link {
        &mut self.link
    }

    fn handle_frame(&mut self, frame: Frame<'_>, now: Instant) {
        let decoder = &mut self.decoder;
        let Some(mut events) =
            self.link
                .receive(frame, now, |bytes, out| match codec::decode(bytes) {
                    Ok(ev) => decoder.into_events(ev, out),
                    Err(e) => out.push(ModelEvent::ProtocolError(e.to_string())),
                })
        else {
            return;
        };
        if self.link.in_setup()
            && let Some(ModelEvent::ProtocolError(e)) = events.iter().find(
                |e| matches!(e, ModelEvent::ProtocolError(m) if codec::error_code(m).is_some()),
            )
        {
            self.link.setup_failed(SetupFailure::Rejected(e.clone()));
            events.clear();
        }
        if self.link.in_setup()
            && events.contains(&ModelEvent::SetupComplete)
            && let Some(stated) = self.decoder.confirmed_input()
            && !same_audio(stated, &self.input_format)
        {
            let fix = if self.input_format.law().is_some() {
                " (with [model] resample_input = true a phone caller's audio goes as 24 kHz PCM, \
                 which every Realtime model takes)"
            } else {
                ""
            };
            self.link.setup_failed(SetupFailure::Rejected(format!(
                "the service set the caller's audio to {} where baton asked for {}: it would \
                 read every frame as something else{fix}",
                format_name(stated),
                format_name(&self.input_format)
            )));
            events.clear();
        }
        let active = self.decoder.active_response().is_some();
        if self.gate.after_frame(active, &events) {
            self.link.send(response_create(), now);
        }
        self.link.deliver(events, now);
    }

    fn handle_outbound(&mut self, cmd: Command, now: Instant) {
        match cmd {
            Command::Out(out) => self.link.send(out, now),
            Command::Respond => self.request_response(now),
            Command::BargeIn { heard_ms, reply } => {
                let sent = self.barge_in(heard_ms, now);
                if let Some(reply) = reply {
                    let _ = reply.send(sent);
                }
            }
            Command::AudioItem(reply) => {
                let _ = reply.send(self.audio_item().cloned());
            }
        }
    }
}

/// PCM's rate as stated, or the only one the protocol defines when it is not.
fn pcm_rate(rate: Option<u32>) -> u32 {
    rate.unwrap_or(super::PCM_RATE)
}

/// Two formats carry caller audio the same way.
fn same_audio(a: &AudioFormat, b: &AudioFormat) -> bool {
    match (a, b) {
        (AudioFormat::Pcm { rate: x }, AudioFormat::Pcm { rate: y }) => {
            pcm_rate(*x) == pcm_rate(*y)
        }
        (AudioFormat::Other, _) | (_, AudioFormat::Other) => false,
        _ => a.law() == b.law(),
    }
}

/// A format as the GA protocol names it.
fn format_name(f: &AudioFormat) -> String {
    match f {
        AudioFormat::Pcm { rate } => format!("audio/pcm at {} Hz", pcm_rate(*rate)),
        AudioFormat::Pcmu => "audio/pcmu".into(),
        AudioFormat::Pcma => "audio/pcma".into(),
        AudioFormat::Other => "a format baton does not know".into(),
    }
}

#[cfg(test)]
#[path = "protocol_tests.rs"]
mod tests;
