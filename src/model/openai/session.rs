//! The OpenAI Realtime session client, the same shape as the Gemini one: `connect` performs the
//! WebSocket handshake, sends `session.update` and waits for `session.updated` (an `error` in
//! answer refuses the session); then one reader task turns frames into [`SessionEvent`]s (stamped
//! with their arrival time) and one writer task sends client events, reporting when each caller
//! frame reached the socket. The call's per-frame path only ever does a non-blocking channel send.
//!
//! The reader's [`Decoder`] is shared with the [`Session`] handle (a short lock per frame) so that
//! [`Session::barge_in`] can name the item being played and whether a response is in progress,
//! and so that [`Session::request_response`] sends `response.create` only when none is in
//! progress: otherwise the reader sends it as soon as the response in progress is done.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;

use super::codec::{self, Decoder};
use super::endpoint::{Endpoint, EndpointError};
use super::wire::{
    Api, AudioConfig, AudioFormat, AudioInput, AudioOutput, BetaSession, ClientEvent, FunctionTool,
    Item, Session as WireSession, SessionUpdate, Transcription, TurnDetection,
};
use crate::model::ModelEvent;
use crate::model::gemini::keepalive::{Keepalive, KeepaliveAction, KeepaliveConfig};
pub use crate::model::session::{Dialed, Outbound, SessionEvent, Transport};
use crate::model::session::{DialedWs, sleep_until_opt, writer};

/// How the session is configured by its first `session.update`.
#[derive(Clone, Debug)]
pub struct SessionConfig {
    /// `gpt-realtime`, `gpt-realtime-mini`, … (sent in the URL; the session's model never changes).
    pub model: String,
    pub instructions: Option<String>,
    pub tools: Vec<FunctionTool>,
    /// A built-in voice such as `marin`; fixed once the model has spoken.
    pub voice: Option<String>,
    /// What baton sends: `audio/pcm` (24 kHz) or G.711 (8 kHz, straight from a phone leg).
    pub input_format: AudioFormat,
    /// What the model speaks.
    pub output_format: AudioFormat,
    /// Input transcription model (e.g. `gpt-4o-mini-transcribe`); `None`: no caller transcripts.
    pub transcription: Option<String>,
    /// Server VAD; `None`: manual turns (`input_audio_buffer.commit` + `response.create`).
    pub turn_detection: Option<TurnDetection>,
    /// How long to wait for `session.updated`.
    pub setup_timeout: Duration,
    /// WebSocket pings and dead-socket detection.
    pub keepalive: KeepaliveConfig,
}

impl Default for SessionConfig {
    fn default() -> Self {
        SessionConfig {
            model: "gpt-realtime".into(),
            instructions: None,
            tools: Vec::new(),
            voice: None,
            input_format: AudioFormat::PCM24K,
            output_format: AudioFormat::PCM24K,
            transcription: Some("gpt-4o-mini-transcribe".into()),
            turn_detection: Some(TurnDetection::server_vad(None)),
            setup_timeout: Duration::from_secs(15),
            keepalive: KeepaliveConfig::default(),
        }
    }
}

impl SessionConfig {
    /// The `session.update` that sets the session up, in `api`'s shape.
    pub fn session_update(&self, api: Api) -> ClientEvent {
        let transcription = self.transcription.as_ref().map(|m| Transcription {
            model: Some(m.clone()),
            ..Default::default()
        });
        let session = match api {
            Api::Ga => SessionUpdate::Ga(WireSession {
                instructions: self.instructions.clone(),
                output_modalities: Some(vec!["audio".into()]),
                audio: Some(AudioConfig {
                    input: Some(AudioInput {
                        format: Some(self.input_format.clone()),
                        transcription,
                        turn_detection: Some(self.turn_detection.clone()),
                        ..Default::default()
                    }),
                    output: Some(AudioOutput {
                        format: Some(self.output_format.clone()),
                        voice: self.voice.clone().map(Value::String),
                        ..Default::default()
                    }),
                }),
                tools: Some(self.tools.clone()),
                ..Default::default()
            }),
            Api::Beta => SessionUpdate::Beta(BetaSession {
                instructions: self.instructions.clone(),
                modalities: Some(vec!["text".into(), "audio".into()]),
                voice: self.voice.clone().map(Value::String),
                input_audio_format: Some(self.input_format.beta_name().into()),
                output_audio_format: Some(self.output_format.beta_name().into()),
                input_audio_transcription: transcription,
                turn_detection: Some(self.turn_detection.clone()),
                tools: Some(self.tools.clone()),
                ..Default::default()
            }),
        };
        ClientEvent::SessionUpdate {
            event_id: None,
            session,
        }
    }
}

/// A partial `session.update` that swaps instructions and/or tools in place (a handoff); the
/// new settings apply from the next response, the voice stays.
pub fn update_event(
    api: Api,
    instructions: Option<&str>,
    tools: Option<&[FunctionTool]>,
) -> ClientEvent {
    let session = match api {
        Api::Ga => SessionUpdate::Ga(WireSession {
            instructions: instructions.map(str::to_owned),
            tools: tools.map(<[FunctionTool]>::to_vec),
            ..Default::default()
        }),
        Api::Beta => SessionUpdate::Beta(BetaSession {
            instructions: instructions.map(str::to_owned),
            tools: tools.map(<[FunctionTool]>::to_vec),
            ..Default::default()
        }),
    };
    ClientEvent::SessionUpdate {
        event_id: None,
        session,
    }
}

/// A session could not be established.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error(transparent)]
    Endpoint(#[from] EndpointError),
    #[error("cannot connect to the model at {url}: {reason}")]
    Connect { url: String, reason: String },
    #[error("the model closed the session during setup (code {code}): {reason}")]
    SetupRefused { code: u16, reason: String },
    #[error("the model refused the session configuration: {0}")]
    Rejected(String),
    #[error("no session.updated from the model within {0:?}")]
    SetupTimeout(Duration),
    #[error("model connection failed during setup: {0}")]
    Io(String),
}

/// A live session: send with [`Session::send`] and the helpers, receive from
/// [`Session::events`].
pub struct Session {
    tx: mpsc::UnboundedSender<Outbound>,
    pub events: mpsc::UnboundedReceiver<SessionEvent>,
    shared: Arc<Mutex<Shared>>,
    api: Api,
}

/// What the reader and the handle share: the decoder and the response gate.
#[derive(Debug)]
struct Shared {
    decoder: Decoder,
    /// A response was asked for while one was in progress (or requested): send one when done.
    want_response: bool,
    /// `response.create` was sent and its `response.created` has not arrived yet.
    requested: bool,
}

impl Shared {
    /// Asks for a response: true when `response.create` may go out now.
    fn request(&mut self) -> bool {
        if self.decoder.active_response().is_some() || self.requested {
            // Requests made during one response are served by one response after it (the
            // requested one may have been planned before this request's items arrived).
            self.want_response = true;
            false
        } else {
            self.requested = true;
            true
        }
    }

    /// After a frame's events: true when the waiting `response.create` may go out now.
    fn after_frame(&mut self, events: &[ModelEvent]) -> bool {
        if self.decoder.active_response().is_some() {
            self.requested = false;
        }
        let refused = events.iter().any(|e| {
            matches!(e, ModelEvent::ProtocolError(m)
                if codec::error_code(m) == Some("conversation_already_has_active_response"))
        });
        if refused && self.requested {
            // Raced a response the server started itself: ask again when that one is done.
            self.requested = false;
            self.want_response = true;
        }
        if self.want_response && !self.requested && self.decoder.active_response().is_none() {
            self.want_response = false;
            self.requested = true;
            return true;
        }
        false
    }
}

fn lock(shared: &Mutex<Shared>) -> std::sync::MutexGuard<'_, Shared> {
    match shared.lock() {
        Ok(g) => g,
        Err(poisoned) => poisoned.into_inner(),
    }
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

impl Session {
    /// Queues a message for the socket; never waits. Returns false if the session is gone.
    pub fn send(&self, out: Outbound) -> bool {
        self.tx.send(out).is_ok()
    }

    pub fn send_event(&self, ev: &ClientEvent) -> bool {
        self.send(Outbound::Text {
            json: codec::encode(ev),
            received_at: None,
        })
    }

    /// Caller audio, PCM16 in the session's input format (24 kHz for `audio/pcm`);
    /// `received_at` measures `uplink_added_ms`.
    pub fn append_pcm16(&self, samples: &[i16], received_at: Option<Instant>) -> bool {
        let (mut scratch, mut json) = (Vec::new(), String::new());
        codec::encode_append_pcm16(samples, &mut scratch, &mut json);
        self.send(Outbound::Text { json, received_at })
    }

    /// Swaps instructions and/or tools in place.
    pub fn update(&self, instructions: Option<&str>, tools: Option<&[FunctionTool]>) -> bool {
        self.send_event(&update_event(self.api, instructions, tools))
    }

    /// Adds a `system` message to the conversation (context for later responses; starts none).
    pub fn add_system_message(&self, text: &str) -> bool {
        self.send_event(&ClientEvent::ConversationItemCreate {
            event_id: None,
            previous_item_id: None,
            item: Item::text("system", text),
        })
    }

    /// Answers function call `call_id` and asks for the response that uses the result (see
    /// [`Session::request_response`]).
    pub fn tool_response(&self, call_id: &str, output: &Value) -> bool {
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
    pub fn request_response(&self) -> bool {
        let now = lock(&self.shared).request();
        !now || self.send(response_create())
    }

    /// Carries out translated steps in order.
    pub fn send_steps(&self, steps: &[super::translate::Step]) -> bool {
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

    /// The caller barged in having heard `heard_ms` of the item being played: sends
    /// `response.cancel` (if a response is in progress) and `conversation.item.truncate`.
    /// Returns what was sent.
    pub fn barge_in(&self, heard_ms: u64) -> Vec<ClientEvent> {
        let events = lock(&self.shared).decoder.barge_in(heard_ms);
        for e in &events {
            self.send_event(e);
        }
        events
    }

    /// The assistant item that carried the latest audio and how much of it arrived.
    pub fn audio_item(&self) -> Option<codec::AudioItem> {
        lock(&self.shared).decoder.audio_item().cloned()
    }
}

/// Model frames are a few KiB of base64 audio; 16 KiB reads them in one go (see the Gemini
/// session for the per-call memory this saves).
const READ_BUFFER_BYTES: usize = 16 * 1024;

fn ws_config() -> WebSocketConfig {
    WebSocketConfig::default()
        .read_buffer_size(READ_BUFFER_BYTES)
        .max_message_size(Some(codec::MAX_FRAME_BYTES))
        .max_frame_size(Some(codec::MAX_FRAME_BYTES))
}

/// Connects, sends `session.update` and waits for `session.updated`, all within
/// `config.setup_timeout`.
pub async fn connect(
    endpoint: &Endpoint,
    transport: Transport,
    config: &SessionConfig,
) -> Result<Session, SessionError> {
    tokio::time::timeout(config.setup_timeout, async {
        let dialed = dial(endpoint, transport).await?;
        start_on(dialed, endpoint.api, config).await
    })
    .await
    .unwrap_or(Err(SessionError::SetupTimeout(config.setup_timeout)))
}

/// Dials the endpoint (transport, TLS, WebSocket upgrade) without sending anything: a socket to
/// start a session on later with [`start_dialed`]. No timeout of its own.
pub async fn dial(endpoint: &Endpoint, transport: Transport) -> Result<Dialed, SessionError> {
    let req = endpoint.request()?;
    let tls = match transport {
        Transport::Network => Some(endpoint.connector()?),
        Transport::InMemory(_) => None,
    };
    crate::model::session::dial(req, tls, transport, ws_config())
        .await
        .map_err(|e| SessionError::Connect {
            url: endpoint.url.clone(),
            reason: e.to_string(),
        })
}

/// Starts a session in `api`'s dialect on a socket [`dial`]ed to an OpenAI Realtime endpoint:
/// sends `session.update` and waits for `session.updated` within `config.setup_timeout`.
pub async fn start_dialed(
    dialed: Dialed,
    api: Api,
    config: &SessionConfig,
) -> Result<Session, SessionError> {
    tokio::time::timeout(config.setup_timeout, start_on(dialed, api, config))
        .await
        .unwrap_or(Err(SessionError::SetupTimeout(config.setup_timeout)))
}

async fn start_on(
    dialed: Dialed,
    api: Api,
    config: &SessionConfig,
) -> Result<Session, SessionError> {
    match dialed.ws {
        DialedWs::Network(ws) => start(*ws, dialed.early, api, config).await,
        DialedWs::InMemory(ws) => start(*ws, dialed.early, api, config).await,
    }
}

async fn start<S>(
    mut ws: WebSocketStream<S>,
    early: Vec<Message>,
    api: Api,
    config: &SessionConfig,
) -> Result<Session, SessionError>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let update = codec::encode(&config.session_update(api));
    ws.send(Message::text(update))
        .await
        .map_err(|e| SessionError::Io(e.to_string()))?;
    let (events_tx, events) = mpsc::unbounded_channel();
    let mut decoder = Decoder::new(config.output_format.clone());
    let deadline = Instant::now() + config.setup_timeout;
    // Wait for session.updated; what arrives with or before it (or came before the update was
    // sent, as `session.created` does) is passed on in order.
    let mut early = early.into_iter();
    loop {
        let msg = match early.next() {
            Some(m) => Some(Ok(m)),
            None => tokio::time::timeout_at(deadline, ws.next())
                .await
                .map_err(|_| SessionError::SetupTimeout(config.setup_timeout))?,
        };
        let now = Instant::now();
        let m = match msg {
            None => {
                return Err(SessionError::SetupRefused {
                    code: 1006,
                    reason: "connection closed".into(),
                });
            }
            Some(Err(e)) => return Err(SessionError::Io(e.to_string())),
            Some(Ok(Message::Close(frame))) => {
                let (code, reason) = close_parts(frame);
                return Err(SessionError::SetupRefused {
                    code: code.unwrap_or(1005),
                    reason,
                });
            }
            Some(Ok(m)) => m,
        };
        let mut evs = Vec::new();
        frame_events(&m, &mut decoder, &mut evs);
        if let Some(ModelEvent::ProtocolError(e)) = evs
            .iter()
            .find(|e| matches!(e, ModelEvent::ProtocolError(m) if codec::error_code(m).is_some()))
        {
            return Err(SessionError::Rejected(e.clone()));
        }
        let done = evs.iter().any(|e| matches!(e, ModelEvent::SetupComplete));
        for e in evs {
            let _ = events_tx.send(SessionEvent::Model(e, now));
        }
        if done {
            break;
        }
    }
    let shared = Arc::new(Mutex::new(Shared {
        decoder,
        want_response: false,
        requested: false,
    }));
    let (sink, stream) = ws.split();
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(writer(sink, rx, events_tx.clone()));
    let keepalive = Keepalive::new(config.keepalive, Instant::now());
    tokio::spawn(reader(
        stream,
        events_tx,
        tx.downgrade(),
        keepalive,
        shared.clone(),
    ));
    Ok(Session {
        tx,
        events,
        shared,
        api,
    })
}

fn close_parts(
    frame: Option<tokio_tungstenite::tungstenite::protocol::CloseFrame>,
) -> (Option<u16>, String) {
    match frame {
        Some(f) => (Some(u16::from(f.code)), f.reason.to_string()),
        None => (None, String::new()),
    }
}

/// Decodes one WebSocket message into model events (protocol errors included).
fn frame_events(m: &Message, decoder: &mut Decoder, out: &mut Vec<ModelEvent>) {
    let bytes: &[u8] = match m {
        Message::Binary(b) => b,
        Message::Text(t) => t.as_bytes(),
        _ => return,
    };
    match codec::decode(bytes) {
        Ok(ev) => decoder.into_events(ev, out),
        Err(e) => out.push(ModelEvent::ProtocolError(e.to_string())),
    }
}

/// Reads frames until the socket ends or the keepalive calls it dead.
async fn reader<S>(
    mut stream: futures_util::stream::SplitStream<WebSocketStream<S>>,
    events: mpsc::UnboundedSender<SessionEvent>,
    writer: mpsc::WeakUnboundedSender<Outbound>,
    mut keepalive: Keepalive,
    shared: Arc<Mutex<Shared>>,
) where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut evs = Vec::new();
    let (code, reason) = loop {
        crate::wakeups::note();
        let wake = keepalive.poll_timeout();
        tokio::select! {
            msg = stream.next() => {
                let now = Instant::now();
                keepalive.on_frame(now);
                match msg {
                    None => break (None, "connection ended without a close frame".to_owned()),
                    Some(Err(e)) => break (None, e.to_string()),
                    Some(Ok(Message::Close(frame))) => break close_parts(frame),
                    Some(Ok(m)) => {
                        let respond = {
                            let mut sh = lock(&shared);
                            frame_events(&m, &mut sh.decoder, &mut evs);
                            sh.after_frame(&evs)
                        };
                        if respond && let Some(w) = writer.upgrade() {
                            let _ = w.send(response_create());
                        }
                        for e in evs.drain(..) {
                            if events.send(SessionEvent::Model(e, now)).is_err() {
                                return;
                            }
                        }
                    }
                }
            }
            () = sleep_until_opt(wake) => match keepalive.handle_timeout(Instant::now()) {
                Some(KeepaliveAction::Ping) => {
                    if let Some(w) = writer.upgrade() {
                        let _ = w.send(Outbound::Ping);
                    }
                }
                Some(KeepaliveAction::Dead { silent_for }) => {
                    let _ = events.send(SessionEvent::Dead { silent_for });
                    return;
                }
                None => {}
            },
        }
    };
    let _ = events.send(SessionEvent::Closed { code, reason });
}

#[cfg(test)]
#[path = "session_tests.rs"]
mod tests;
