//! The model session as the call sees it, whatever the protocol behind it. The call and the
//! orchestrator speak one vocabulary — the Gemini Live client messages ([`ClientMessage`]) — and a
//! [`ModelSession`] carries each message on its own wire: unchanged for Gemini Live, translated
//! into OpenAI Realtime client events ([`crate::model::openai::translate`]) for OpenAI. Caller
//! audio is encoded on the session's [`Wire`] at its input rate, into buffers the call reuses
//! (the audio path is hot), and goes through the call's reconnect machinery as ready JSON text.

use std::task::{Context, Poll};

use super::Capabilities;
use super::gemini;
use super::gemini::wire::ClientMessage;
use super::openai;
use super::openai::translate::Translator;
use super::session::{Outbound, SessionEvent};
use crate::audio::g711::Law;

/// A session's wire protocol: how caller audio is encoded and at which rate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    /// Gemini Live: `realtimeInput.audio`, PCM16 at the rate its MIME type declares.
    Gemini,
    /// OpenAI Realtime: `input_audio_buffer.append`, `audio/pcm` (PCM16 at 24 kHz).
    OpenAi,
}

impl Protocol {
    /// The rate caller audio from a leg at `leg_rate` is sent at. Gemini takes PCM at any rate
    /// its MIME type declares and resamples it itself: a leg at 8–16 kHz is sent as it is (no
    /// resampler on the uplink, none of its delay, fewer bytes), unless `resample` asks for the
    /// model's native 16 kHz; a faster leg is brought down to 16 kHz. OpenAI's `audio/pcm` is
    /// 24 kHz only.
    pub const fn input_rate(self, leg_rate: u32, resample: bool) -> u32 {
        match self {
            Protocol::Gemini
                if !resample && leg_rate >= 8_000 && leg_rate <= gemini::INPUT_RATE =>
            {
                leg_rate
            }
            Protocol::Gemini => gemini::INPUT_RATE,
            Protocol::OpenAi => openai::PCM_RATE,
        }
    }

    /// The rate the model speaks at (audio arriving at another rate is resampled anyway).
    pub const fn output_rate(self) -> u32 {
        match self {
            Protocol::Gemini => gemini::OUTPUT_RATE,
            Protocol::OpenAi => openai::PCM_RATE,
        }
    }
}

/// How a session carries caller audio and speaks: its protocol and, for an OpenAI Realtime
/// session set up for a G.711 phone leg ([`SessionConfig::phone_law`]), that law at 8 kHz both
/// ways instead of 24 kHz PCM. Every session of a call is opened from the same settings, so
/// the first one's answers for all.
///
/// [`SessionConfig::phone_law`]: crate::model::gemini::session::SessionConfig::phone_law
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Wire {
    pub protocol: Protocol,
    /// The G.711 law caller audio is sent in and the model speaks (OpenAI only).
    pub law: Option<Law>,
}

impl From<Protocol> for Wire {
    /// PCM16 both ways.
    fn from(protocol: Protocol) -> Wire {
        Wire {
            protocol,
            law: None,
        }
    }
}

impl Wire {
    /// The rate caller audio from a leg at `leg_rate` is sent at: 8 kHz in G.711, else
    /// [`Protocol::input_rate`].
    pub const fn input_rate(self, leg_rate: u32, resample: bool) -> u32 {
        match self.law {
            Some(_) => crate::audio::g711::RATE,
            None => self.protocol.input_rate(leg_rate, resample),
        }
    }

    /// The rate the model speaks at.
    pub const fn output_rate(self) -> u32 {
        match self.law {
            Some(_) => crate::audio::g711::RATE,
            None => self.protocol.output_rate(),
        }
    }

    /// Writes the client message carrying `samples` (PCM16 at `rate`, the session's
    /// [`Wire::input_rate`]) into `json` (cleared first), in the session's law if it has one;
    /// `scratch` holds the raw bytes. Both buffers are reused.
    pub fn encode_audio(
        self,
        samples: &[i16],
        rate: u32,
        scratch: &mut Vec<u8>,
        json: &mut String,
    ) {
        match (self.protocol, self.law) {
            (Protocol::Gemini, _) => gemini::codec::encode_audio(samples, rate, scratch, json),
            (Protocol::OpenAi, Some(law)) => {
                debug_assert_eq!(rate, crate::audio::g711::RATE);
                scratch.clear();
                scratch.extend(samples.iter().map(|&s| law.encode(s)));
                openai::codec::encode_append_bytes(scratch, json);
            }
            (Protocol::OpenAi, None) => {
                debug_assert_eq!(rate, openai::PCM_RATE);
                openai::codec::encode_append_pcm16(samples, scratch, json)
            }
        }
    }

    /// The client message carrying `samples` (at `rate`), in a string of its own.
    pub fn audio_message(self, samples: &[i16], rate: u32, scratch: &mut Vec<u8>) -> String {
        let mut json = String::with_capacity(samples.len() * 3 + 96);
        self.encode_audio(samples, rate, scratch, &mut json);
        json
    }
}

/// A session could not be opened (either protocol).
pub use crate::model::session::SessionError as OpenError;

/// An OpenAI Realtime session and its translation state.
pub struct OpenAiSession {
    session: openai::session::Session,
    /// The next `clientContent` is initial history (items only); flipped once.
    history_pending: bool,
}

enum Inner {
    Gemini(gemini::session::Session),
    OpenAi(OpenAiSession),
}

/// Sees each event of a session as the session hands it out (transcripts for a caller's page).
pub type Observer = Box<dyn FnMut(&SessionEvent) + Send>;

/// One live model session of a call.
pub struct ModelSession {
    inner: Inner,
    caps: Capabilities,
    observer: Option<Observer>,
}

impl ModelSession {
    pub fn gemini(s: gemini::session::Session, caps: Capabilities) -> Self {
        ModelSession {
            inner: Inner::Gemini(s),
            caps,
            observer: None,
        }
    }

    /// `history_pending`: the session was opened to continue a call, and the first
    /// `clientContent` it is sent is the history (items only, no response).
    pub fn openai(s: openai::session::Session, caps: Capabilities, history_pending: bool) -> Self {
        ModelSession {
            inner: Inner::OpenAi(OpenAiSession {
                session: s,
                history_pending,
            }),
            caps,
            observer: None,
        }
    }

    pub fn protocol(&self) -> Protocol {
        match &self.inner {
            Inner::Gemini(_) => Protocol::Gemini,
            Inner::OpenAi(_) => Protocol::OpenAi,
        }
    }

    /// How the session takes caller audio and speaks.
    pub fn wire(&self) -> Wire {
        match &self.inner {
            Inner::Gemini(_) => Protocol::Gemini.into(),
            Inner::OpenAi(s) => Wire {
                protocol: Protocol::OpenAi,
                law: s.session.input_law(),
            },
        }
    }

    /// What the model can do in place.
    pub fn capabilities(&self) -> Capabilities {
        self.caps
    }

    /// The session's next event (model events, the end); `None` once it is over.
    /// Polling drives the session's socket. Cancel-safe.
    pub fn poll_event(&mut self, cx: &mut Context<'_>) -> Poll<Option<SessionEvent>> {
        let ev = match &mut self.inner {
            Inner::Gemini(s) => s.poll_event(cx),
            Inner::OpenAi(s) => s.session.poll_event(cx),
        };
        if let (Poll::Ready(Some(ev)), Some(o)) = (&ev, self.observer.as_mut()) {
            o(ev);
        }
        ev
    }

    /// Shows `observer` every event from now on, before the call sees it (on the call's task:
    /// it must not wait).
    pub fn observe(&mut self, observer: Observer) {
        self.observer = Some(observer);
    }

    /// The session's next event; `None` once it is over.
    pub async fn recv(&mut self) -> Option<SessionEvent> {
        std::future::poll_fn(|cx| self.poll_event(cx)).await
    }

    /// An event that is ready now, if any.
    pub fn try_event(&mut self) -> Option<SessionEvent> {
        let ev = match &mut self.inner {
            Inner::Gemini(s) => s.try_event(),
            Inner::OpenAi(s) => s.session.try_event(),
        };
        if let (Some(ev), Some(o)) = (&ev, self.observer.as_mut()) {
            o(ev);
        }
        ev
    }

    /// The oldest caller frame reported written to the socket and not yet taken (the session
    /// keeps the last [`WRITTEN_KEPT`](crate::model::shell::WRITTEN_KEPT)): `uplink_added_ms`'s
    /// samples, taken rather than woken for.
    pub fn take_written(&mut self) -> Option<crate::model::session::Written> {
        match &mut self.inner {
            Inner::Gemini(s) => s.take_written(),
            Inner::OpenAi(s) => s.session.take_written(),
        }
    }

    /// Queues ready text (caller audio encoded by [`Wire::encode_audio`]), a close or a
    /// ping; never waits. False if the session is gone.
    pub fn send(&mut self, out: Outbound) -> bool {
        match &mut self.inner {
            Inner::Gemini(s) => s.send(out),
            Inner::OpenAi(s) => s.session.send(out),
        }
    }

    /// Carries one of baton's messages on this session's wire.
    pub fn send_message(&mut self, msg: &ClientMessage) -> bool {
        let non_blocking = self.caps.non_blocking_tools;
        match &mut self.inner {
            // A model whose calls all block resumes on any answer: `scheduling` means nothing
            // there and is not sent.
            Inner::Gemini(s) if !non_blocking => match msg {
                ClientMessage::ToolResponse(tr) if has_scheduling(tr) => {
                    s.send_message(&ClientMessage::ToolResponse(without_scheduling(tr)))
                }
                _ => s.send_message(msg),
            },
            Inner::Gemini(s) => s.send_message(msg),
            Inner::OpenAi(s) => {
                let history = matches!(msg, ClientMessage::ClientContent(_))
                    && std::mem::take(&mut s.history_pending);
                let mut t = Translator::new(s.session.api(), history);
                s.session.send_steps(&t.translate(msg))
            }
        }
    }

    /// The caller barged in having heard `heard_ms` of the model's current audio item. On
    /// OpenAI Realtime: `response.cancel` (while a response is in progress) and
    /// `conversation.item.truncate` at what was heard, so the conversation holds only that.
    /// Gemini Live truncates by itself: nothing to send.
    pub fn barge_in(&mut self, heard_ms: u64) {
        if let Inner::OpenAi(s) = &mut self.inner {
            s.session.queue_barge_in(heard_ms);
        }
    }
}

fn has_scheduling(tr: &gemini::wire::ToolResponse) -> bool {
    tr.function_responses
        .iter()
        .flatten()
        .any(|r| r.scheduling.is_some())
}

fn without_scheduling(tr: &gemini::wire::ToolResponse) -> gemini::wire::ToolResponse {
    let mut tr = tr.clone();
    for r in tr.function_responses.iter_mut().flatten() {
        r.scheduling = None;
    }
    tr
}
