//! The OpenAI Realtime session client, the same shape as the Gemini one: the session handle (its
//! settings and the `session.update` they make are [`super::setup`]). `connect` performs
//! the WebSocket handshake, sends `session.update` and waits for `session.updated` (an `error` in
//! answer refuses the session); the session then runs its [`OpenAiCore`] in the model's one
//! WebSocket shell ([`crate::model::shell`]), which reports [`SessionEvent`]s stamped with their
//! arrival time. The handle only sends the core [`Command`]s: the response gate and what a
//! barge-in sends are the core's decisions, taken where the frames arrive, with no shared state.
//! The call's task drives the session by polling it; sending never waits.

use serde_json::Value;
use std::task::{Context, Poll};

use tokio::sync::oneshot;
use tokio::time::Instant;

use super::codec;
use super::codec::MAX_FRAME_BYTES;
use super::endpoint::Endpoint;
use super::protocol::{Command, OpenAiCore};
pub use super::setup::{SessionConfig, update_event};
use super::wire::{Api, ClientEvent, FunctionTool, Item};
use crate::audio::g711::Law;
pub use crate::model::session::{Dialed, Outbound, SessionError, SessionEvent, Transport};
use crate::model::session::{dial_endpoint, open_within};
use crate::model::shell;

/// A live session: send with [`Session::send`] and the helpers, receive with
/// [`Session::recv`] (or [`Session::poll_event`]); its polls drive the socket.
pub struct Session {
    shell: shell::Handle<Command>,
    api: Api,
    /// The G.711 law the session takes caller audio in (`audio/pcmu`, `audio/pcma`); `None`:
    /// 24 kHz PCM.
    input_law: Option<Law>,
}

impl Session {
    /// Queues a message for the socket; never waits. Returns false if the session is gone.
    pub fn send(&mut self, out: Outbound) -> bool {
        self.shell.send(Command::Out(out))
    }

    pub fn send_event(&mut self, ev: &ClientEvent) -> bool {
        self.send(Outbound::Text {
            json: codec::encode(ev),
            received_at: None,
        })
    }

    /// Caller audio, PCM16 in the session's input format (24 kHz for `audio/pcm`);
    /// `received_at` measures `uplink_added_ms`.
    pub fn append_pcm16(&mut self, samples: &[i16], received_at: Option<Instant>) -> bool {
        let (mut scratch, mut json) = (Vec::new(), String::new());
        codec::encode_append_pcm16(samples, &mut scratch, &mut json);
        self.send(Outbound::Text { json, received_at })
    }

    /// Swaps instructions and/or tools in place.
    pub fn update(&mut self, instructions: Option<&str>, tools: Option<&[FunctionTool]>) -> bool {
        self.send_event(&update_event(self.api, instructions, tools))
    }

    /// Adds a `system` message to the conversation (context for later responses; starts none).
    pub fn add_system_message(&mut self, text: &str) -> bool {
        self.send_event(&ClientEvent::ConversationItemCreate {
            event_id: None,
            previous_item_id: None,
            item: Item::text("system", text),
        })
    }

    /// Answers function call `call_id` and asks for the response that uses the result (see
    /// [`Session::request_response`]).
    pub fn tool_response(&mut self, call_id: &str, output: &Value) -> bool {
        let output = match output {
            Value::String(s) => s.clone(),
            v => v.to_string(),
        };
        self.send_event(&ClientEvent::ConversationItemCreate {
            event_id: None,
            previous_item_id: None,
            item: Item::function_output(call_id, output),
        }) && self.request_response()
    }

    /// Asks for a response: `response.create` now if no response is in progress or requested;
    /// else it goes out when the response in progress is done (the service refuses one during
    /// another with `conversation_already_has_active_response`). Any number of requests made
    /// meanwhile are served by that one response.
    pub fn request_response(&mut self) -> bool {
        self.shell.send(Command::Respond)
    }

    /// Carries out translated steps in order.
    pub fn send_steps(&mut self, steps: &[super::translate::Step]) -> bool {
        let mut ok = true;
        for s in steps {
            ok &= match s {
                super::translate::Step::Send(e) => self.send_event(e),
                super::translate::Step::Respond => self.request_response(),
            };
        }
        ok
    }

    /// The session's dialect.
    pub fn api(&self) -> Api {
        self.api
    }

    /// The G.711 law the session was set up to take caller audio in, at 8 kHz; `None`: PCM16
    /// at 24 kHz.
    pub fn input_law(&self) -> Option<Law> {
        self.input_law
    }

    /// The caller barged in having heard `heard_ms` of the item being played: the core sends
    /// `response.cancel` (if a response is in progress) and `conversation.item.truncate`.
    /// Never waits; false if the session is gone.
    pub fn queue_barge_in(&mut self, heard_ms: u64) -> bool {
        self.shell.send(Command::BargeIn {
            heard_ms,
            reply: None,
        })
    }

    /// [`Session::queue_barge_in`], returning what the core sent once it took it (nothing if
    /// the session is gone).
    pub async fn barge_in(&mut self, heard_ms: u64) -> Vec<ClientEvent> {
        let (reply, sent) = oneshot::channel();
        let cmd = Command::BargeIn {
            heard_ms,
            reply: Some(reply),
        };
        if !self.shell.send(cmd) {
            return Vec::new();
        }
        sent.await.unwrap_or_default()
    }

    /// The assistant item that carried the latest audio and how much of it arrived, as the
    /// core has it once the messages sent before this are taken.
    pub async fn audio_item(&mut self) -> Option<codec::AudioItem> {
        let (reply, item) = oneshot::channel();
        if !self.shell.send(Command::AudioItem(reply)) {
            return None;
        }
        item.await.ok().flatten()
    }

    /// The next event; `None` once the session is over. Cancel-safe.
    pub fn poll_event(&mut self, cx: &mut Context<'_>) -> Poll<Option<SessionEvent>> {
        self.shell.poll_event(cx)
    }

    /// The next event; `None` once the session is over.
    pub async fn recv(&mut self) -> Option<SessionEvent> {
        self.shell.recv().await
    }

    /// An event that is ready now, if any.
    pub fn try_event(&mut self) -> Option<SessionEvent> {
        self.shell.try_event()
    }

    /// The oldest caller frame reported written and not yet taken.
    pub fn take_written(&mut self) -> Option<crate::model::session::Written> {
        self.shell.take_written()
    }
}

/// The setup's answer.
const AWAITED: &str = "session.updated";

/// Connects, sends `session.update` and waits for `session.updated`, all within
/// `config.setup_timeout`.
pub async fn connect(
    endpoint: &Endpoint,
    transport: Transport,
    config: &SessionConfig,
) -> Result<Session, SessionError> {
    open_within(config.setup_timeout, AWAITED, async {
        start_dialed(dial(endpoint, transport).await?, endpoint.api, config).await
    })
    .await
}

/// Dials the endpoint (transport, TLS, WebSocket upgrade) without sending anything: a socket to
/// start a session on later with [`start_dialed`]. No timeout of its own.
pub async fn dial(endpoint: &Endpoint, transport: Transport) -> Result<Dialed, SessionError> {
    let req = endpoint.request()?;
    dial_endpoint(
        &endpoint.url,
        req,
        &endpoint.tls,
        transport,
        MAX_FRAME_BYTES,
    )
    .await
}

/// Starts a session in `api`'s dialect on a socket [`dial`]ed to an OpenAI Realtime endpoint:
/// sends `session.update` and waits for `session.updated` within `config.setup_timeout` (the
/// core keeps that deadline).
pub async fn start_dialed(
    dialed: Dialed,
    api: Api,
    config: &SessionConfig,
) -> Result<Session, SessionError> {
    let core = OpenAiCore::new(config, api, Instant::now());
    let shell = shell::start(dialed, core)
        .await
        .map_err(|f| f.into_error(AWAITED))?;
    Ok(Session {
        shell,
        api,
        input_law: config.input_format.law(),
    })
}
