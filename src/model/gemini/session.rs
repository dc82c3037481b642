//! The Gemini Live session client: a thin async shell over tokio-tungstenite. `connect` performs
//! the WebSocket handshake ([`dial`]), sends `setup` and waits for `setupComplete`
//! ([`start_dialed`] does the second half on a socket dialed ahead); then one reader task turns
//! frames into [`SessionEvent`]s (stamped with their arrival time) and one writer task sends
//! client messages, reporting when each caller frame actually reached the socket. The call's
//! per-frame path only ever does a non-blocking channel send.

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;

use super::codec;
use super::endpoint::{Endpoint, EndpointError};
use super::keepalive::{Keepalive, KeepaliveAction, KeepaliveConfig};
use super::wire::{self, ClientMessage, Content, Setup};
use crate::model::ModelEvent;
pub use crate::model::session::{Dialed, Outbound, SessionEvent, Transport};
use crate::model::session::{DialedWs, sleep_until_opt, writer};

/// How the session is configured at setup.
#[derive(Clone, Debug)]
pub struct SessionConfig {
    /// `models/…` (Developer API) or a full Vertex resource name.
    pub model: String,
    pub system_instruction: Option<String>,
    /// `Tool` objects as JSON (`{"functionDeclarations":[…]}`).
    pub tools: Vec<Value>,
    /// A prebuilt voice name such as `Kore`.
    pub voice: Option<String>,
    /// Ask for input and output transcriptions.
    pub transcription: bool,
    /// Server VAD silence window; `None` leaves the service default.
    pub silence_duration_ms: Option<u32>,
    /// How long to wait for `setupComplete`.
    pub setup_timeout: Duration,
    /// Ask the server to take history as `clientContent` before any realtime input
    /// (`historyConfig.initialHistoryInClientContent`), for a session that continues a call.
    pub history_in_client_content: bool,
    /// Request session resumption handles (`sessionResumption`); on by default, since a
    /// `goAway` or a dropped socket can only be survived with one.
    pub resumption: bool,
    /// Resume the session this handle names (a `sessionResumptionUpdate.newHandle` that came
    /// with `resumable: true`).
    pub resume_handle: Option<String>,
    /// `contextWindowCompression` (a sliding window), for sessions longer than ~15 min of audio.
    pub compression: Option<Compression>,
    /// WebSocket pings and dead-socket detection.
    pub keepalive: KeepaliveConfig,
}

/// `contextWindowCompression.slidingWindow`: when the context reaches `trigger_tokens`, the
/// oldest turns are dropped down to `target_tokens` (`None`: the service's defaults, 80 % of the
/// context window and half of the trigger).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Compression {
    pub trigger_tokens: Option<u64>,
    pub target_tokens: Option<u64>,
}

impl Compression {
    fn to_json(self) -> Value {
        let mut window = serde_json::Map::new();
        if let Some(t) = self.target_tokens {
            window.insert("targetTokens".into(), t.into());
        }
        let mut v = serde_json::Map::new();
        if let Some(t) = self.trigger_tokens {
            v.insert("triggerTokens".into(), t.into());
        }
        v.insert("slidingWindow".into(), Value::Object(window));
        Value::Object(v)
    }
}

impl Default for SessionConfig {
    fn default() -> Self {
        SessionConfig {
            model: "models/gemini-3.8-live".into(),
            system_instruction: None,
            tools: Vec::new(),
            voice: None,
            transcription: true,
            silence_duration_ms: None,
            setup_timeout: Duration::from_secs(15),
            history_in_client_content: false,
            resumption: true,
            resume_handle: None,
            compression: None,
            keepalive: KeepaliveConfig::default(),
        }
    }
}

impl SessionConfig {
    /// The `setup` message this config sends.
    pub fn setup_message(&self) -> ClientMessage {
        let model = if self.model.starts_with("models/") || self.model.starts_with("projects/") {
            self.model.clone()
        } else {
            format!("models/{}", self.model)
        };
        let speech_config = self
            .voice
            .as_ref()
            .map(|v| serde_json::json!({"voiceConfig": {"prebuiltVoiceConfig": {"voiceName": v}}}));
        let realtime_input_config = self
            .silence_duration_ms
            .map(|ms| wire::RealtimeInputConfig {
                automatic_activity_detection: Some(wire::AutomaticActivityDetection {
                    silence_duration_ms: Some(ms),
                    ..Default::default()
                }),
                ..Default::default()
            });
        let transcription = self.transcription.then(|| serde_json::json!({}));
        ClientMessage::Setup(Setup {
            model,
            generation_config: Some(wire::GenerationConfig {
                response_modalities: Some(vec!["AUDIO".into()]),
                speech_config,
                ..Default::default()
            }),
            system_instruction: self
                .system_instruction
                .as_ref()
                .map(|t| Content::text(None, t.clone())),
            tools: (!self.tools.is_empty()).then(|| self.tools.clone()),
            realtime_input_config,
            input_audio_transcription: transcription.clone(),
            output_audio_transcription: transcription,
            history_config: self
                .history_in_client_content
                .then_some(wire::HistoryConfig {
                    initial_history_in_client_content: Some(true),
                }),
            session_resumption: (self.resumption || self.resume_handle.is_some()).then(|| {
                wire::SessionResumptionConfig {
                    handle: self.resume_handle.clone(),
                    transparent: None,
                }
            }),
            context_window_compression: self.compression.map(Compression::to_json),
            ..Default::default()
        })
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
    #[error("no setupComplete from the model within {0:?}")]
    SetupTimeout(Duration),
    #[error("model connection failed during setup: {0}")]
    Io(String),
}

/// A live session: send with [`Session::send`], receive from [`Session::events`].
pub struct Session {
    tx: mpsc::UnboundedSender<Outbound>,
    pub events: mpsc::UnboundedReceiver<SessionEvent>,
}

impl Session {
    /// Queues a message for the socket; never waits. Returns false if the session is gone.
    pub fn send(&self, out: Outbound) -> bool {
        self.tx.send(out).is_ok()
    }

    pub fn send_message(&self, msg: &ClientMessage) -> bool {
        self.send(Outbound::Text {
            json: codec::encode(msg),
            received_at: None,
        })
    }
}

/// tungstenite's default read buffer is 128 KiB, zero-filled and so resident per call; model
/// frames are a few KiB (40 ms of 24 kHz audio in base64), so 16 KiB reads them in one go and
/// keeps a call's memory down (`baton bench load` measured 283 → 200 KiB per call).
const READ_BUFFER_BYTES: usize = 16 * 1024;

fn ws_config() -> WebSocketConfig {
    WebSocketConfig::default()
        .read_buffer_size(READ_BUFFER_BYTES)
        .max_message_size(Some(codec::MAX_FRAME_BYTES))
        .max_frame_size(Some(codec::MAX_FRAME_BYTES))
}

/// Connects, sends `setup` and waits for `setupComplete`, all within `config.setup_timeout`
/// (a peer that accepts TCP but never completes TLS or the upgrade cannot hold a call).
pub async fn connect(
    endpoint: &Endpoint,
    transport: Transport,
    config: &SessionConfig,
) -> Result<Session, SessionError> {
    tokio::time::timeout(config.setup_timeout, async {
        let dialed = dial(endpoint, transport).await?;
        start_on(dialed, config).await
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

/// Starts a session on a socket [`dial`]ed to a Gemini Live endpoint: sends `setup` and waits
/// for `setupComplete` within `config.setup_timeout`.
pub async fn start_dialed(dialed: Dialed, config: &SessionConfig) -> Result<Session, SessionError> {
    tokio::time::timeout(config.setup_timeout, start_on(dialed, config))
        .await
        .unwrap_or(Err(SessionError::SetupTimeout(config.setup_timeout)))
}

async fn start_on(dialed: Dialed, config: &SessionConfig) -> Result<Session, SessionError> {
    match dialed.ws {
        DialedWs::Network(ws) => start(*ws, dialed.early, config).await,
        DialedWs::InMemory(ws) => start(*ws, dialed.early, config).await,
    }
}

async fn start<S>(
    mut ws: WebSocketStream<S>,
    early: Vec<Message>,
    config: &SessionConfig,
) -> Result<Session, SessionError>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let setup = codec::encode(&config.setup_message());
    ws.send(Message::text(setup))
        .await
        .map_err(|e| SessionError::Io(e.to_string()))?;
    let (events_tx, events) = mpsc::unbounded_channel();
    let deadline = Instant::now() + config.setup_timeout;
    // Wait for setupComplete; anything that arrives with or before it (or came before the
    // setup was sent) is passed on in order.
    let mut early = early.into_iter();
    loop {
        let msg = match early.next() {
            Some(m) => Some(Ok(m)),
            None => tokio::time::timeout_at(deadline, ws.next())
                .await
                .map_err(|_| SessionError::SetupTimeout(config.setup_timeout))?,
        };
        let now = Instant::now();
        match msg {
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
            Some(Ok(m)) => {
                let mut evs = Vec::new();
                frame_events(m, &mut evs);
                let done = evs.iter().any(|e| matches!(e, ModelEvent::SetupComplete));
                for e in evs {
                    let _ = events_tx.send(SessionEvent::Model(e, now));
                }
                if done {
                    break;
                }
            }
        }
    }
    let (sink, stream) = ws.split();
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(writer(sink, rx, events_tx.clone()));
    let keepalive = Keepalive::new(config.keepalive, Instant::now());
    tokio::spawn(reader(stream, events_tx, tx.downgrade(), keepalive));
    Ok(Session { tx, events })
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
fn frame_events(m: Message, out: &mut Vec<ModelEvent>) {
    let bytes: &[u8] = match &m {
        Message::Binary(b) => b,
        Message::Text(t) => t.as_bytes(),
        _ => return,
    };
    match codec::decode(bytes) {
        Ok(msg) => codec::into_events(msg, out),
        Err(e) => out.push(ModelEvent::ProtocolError(e.to_string())),
    }
}

/// Reads frames until the socket ends or the keepalive calls it dead. Pings go through the
/// writer (a weak handle, so dropping the [`Session`] still ends the writer and the socket).
async fn reader<S>(
    mut stream: futures_util::stream::SplitStream<WebSocketStream<S>>,
    events: mpsc::UnboundedSender<SessionEvent>,
    writer: mpsc::WeakUnboundedSender<Outbound>,
    mut keepalive: Keepalive,
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
                        frame_events(m, &mut evs);
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
mod tests {
    use super::*;

    #[test]
    fn setup_message_shape() {
        let cfg = SessionConfig {
            model: "gemini-live-x".into(),
            system_instruction: Some("Be brief.".into()),
            voice: Some("Kore".into()),
            silence_duration_ms: Some(500),
            ..Default::default()
        };
        let v = serde_json::to_value(cfg.setup_message()).unwrap();
        assert_eq!(v["setup"]["model"], "models/gemini-live-x");
        assert_eq!(
            v["setup"]["generationConfig"]["responseModalities"][0],
            "AUDIO"
        );
        assert_eq!(
            v["setup"]["generationConfig"]["speechConfig"]["voiceConfig"]["prebuiltVoiceConfig"]["voiceName"],
            "Kore"
        );
        assert_eq!(
            v["setup"]["systemInstruction"]["parts"][0]["text"],
            "Be brief."
        );
        assert_eq!(
            v["setup"]["realtimeInputConfig"]["automaticActivityDetection"]["silenceDurationMs"],
            500
        );
        assert_eq!(v["setup"]["inputAudioTranscription"], serde_json::json!({}));
        assert!(v["setup"].get("tools").is_none());
        // Resumption handles are always requested; no compression unless configured.
        assert_eq!(v["setup"]["sessionResumption"], serde_json::json!({}));
        assert!(v["setup"].get("contextWindowCompression").is_none());
    }

    #[test]
    fn resume_handle_and_compression() {
        let cfg = SessionConfig {
            resume_handle: Some("h-7".into()),
            compression: Some(Compression {
                trigger_tokens: Some(100_000),
                target_tokens: Some(50_000),
            }),
            ..Default::default()
        };
        let v = serde_json::to_value(cfg.setup_message()).unwrap();
        assert_eq!(v["setup"]["sessionResumption"]["handle"], "h-7");
        assert_eq!(
            v["setup"]["contextWindowCompression"],
            serde_json::json!({"triggerTokens": 100000, "slidingWindow": {"targetTokens": 50000}})
        );
        let off = SessionConfig {
            resumption: false,
            ..Default::default()
        };
        let v = serde_json::to_value(off.setup_message()).unwrap();
        assert!(v["setup"].get("sessionResumption").is_none());
    }
}
