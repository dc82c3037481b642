//! The Gemini Live session client: the session handle (its settings and the `setup` they make
//! are [`super::setup`]). `connect` performs the WebSocket handshake ([`dial`]), sends `setup` and
//! waits for `setupComplete` ([`start_dialed`] does the second half on a socket dialed ahead);
//! the session then runs its [`GeminiCore`] in the model's one WebSocket shell
//! ([`crate::model::shell`]), which reports [`SessionEvent`]s stamped with their arrival time.
//! The call's task drives the session by polling it; sending never waits.

use std::task::{Context, Poll};

use tokio::time::Instant;

use super::codec;
use super::codec::MAX_FRAME_BYTES;
use super::endpoint::Endpoint;
use super::protocol::GeminiCore;
pub use super::setup::{Compression, SessionConfig};
use super::wire::ClientMessage;
pub use crate::model::session::{Dialed, Outbound, SessionError, SessionEvent, Transport};
use crate::model::session::{dial_endpoint, open_within};
use crate::model::shell;

/// A live session: send with [`Session::send`], receive with [`Session::recv`] (or
/// [`Session::poll_event`]); its polls drive the socket.
pub struct Session {
    shell: shell::Handle<Outbound>,
}

impl Session {
    /// Queues a message for the socket (written on the next poll); never waits. Returns false
    /// if the session is gone.
    pub fn send(&mut self, out: Outbound) -> bool {
        self.shell.send(out)
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

    pub fn send_message(&mut self, msg: &ClientMessage) -> bool {
        self.send(Outbound::Text {
            json: codec::encode(msg),
            received_at: None,
        })
    }
}

/// The setup's answer.
const AWAITED: &str = "setupComplete";

/// Connects, sends `setup` and waits for `setupComplete`, all within `config.setup_timeout`
/// (a peer that accepts TCP but never completes TLS or the upgrade cannot hold a call).
pub async fn connect(
    endpoint: &Endpoint,
    transport: Transport,
    config: &SessionConfig,
) -> Result<Session, SessionError> {
    open_within(config.setup_timeout, AWAITED, async {
        start_dialed(dial(endpoint, transport).await?, config).await
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

/// Starts a session on a socket [`dial`]ed to a Gemini Live endpoint: sends `setup` and waits
/// for `setupComplete` within `config.setup_timeout` (the core keeps that deadline).
pub async fn start_dialed(dialed: Dialed, config: &SessionConfig) -> Result<Session, SessionError> {
    let core = GeminiCore::new(config, Instant::now());
    let shell = shell::start(dialed, core)
        .await
        .map_err(|f| f.into_error(AWAITED))?;
    Ok(Session { shell })
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
