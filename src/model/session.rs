//! What every model session shares with the call, whatever its protocol: where the WebSocket
//! runs ([`Transport`]), how opening one fails ([`SessionError`]), a socket dialed ahead of its setup ([`Dialed`]), what the call hands a
//! session ([`Outbound`]) and what a session reports back ([`SessionEvent`]).

use std::time::Duration;

use futures_util::StreamExt;
use tokio::io::DuplexStream;
use tokio::net::TcpStream;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::handshake::client::Request;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::{
    Connector, MaybeTlsStream, WebSocketStream, client_async_with_config,
    connect_async_tls_with_config,
};

use crate::model::ModelEvent;
use crate::model::endpoint::{EndpointError, Trust};

/// A session could not be established (either protocol).
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error(transparent)]
    Endpoint(#[from] EndpointError),
    #[error("cannot connect to the model at {url}: {reason}")]
    Connect { url: String, reason: String },
    #[error("the model closed the session during setup (code {code}): {reason}")]
    SetupRefused { code: u16, reason: String },
    /// The service answered the setup with an error message (OpenAI; Gemini Live refuses a setup
    /// with a close frame).
    #[error("the model refused the session configuration: {0}")]
    Rejected(String),
    /// `awaited` (the setup's answer, or the WebSocket upgrade) did not come within `after`.
    #[error("no {awaited} from the model within {after:?}")]
    SetupTimeout {
        awaited: &'static str,
        after: Duration,
    },
    #[error("model connection failed during setup: {0}")]
    Io(String),
}

impl SessionError {
    /// The socket ended before answering the setup at all (closed without a close frame, or an
    /// I/O error): a socket dialed ahead that went stale, not a refusal.
    pub fn stale_socket(&self) -> bool {
        matches!(
            self,
            SessionError::Io(_) | SessionError::SetupRefused { code: 1006, .. }
        )
    }

    /// The service refused the session's setup as invalid (1007/1008): for a resumption, the
    /// handle was refused (only a Gemini session resumes with a handle; the call asks this only
    /// of a resumption).
    pub fn setup_refused_as_invalid(&self) -> bool {
        matches!(
            self,
            SessionError::SetupRefused {
                code: 1007 | 1008,
                ..
            }
        )
    }
}

/// Dials `url` with the upgrade request `req` ([`dial`]), for frames of `max_frame_bytes`; TLS
/// with `trust` on the network. A failure names the URL (never the credential, which is in the
/// request's header only).
pub(crate) async fn dial_endpoint(
    url: &str,
    req: Request,
    trust: &Trust,
    transport: Transport,
    max_frame_bytes: usize,
) -> Result<Dialed, SessionError> {
    let tls = match transport {
        Transport::Network => Some(trust.connector()?),
        Transport::InMemory(_) => None,
    };
    dial(req, tls, transport, max_frame_bytes)
        .await
        .map_err(|e| SessionError::Connect {
            url: url.to_owned(),
            reason: refusal_words(&e),
        })
}

/// A failed dial in words, with what to check when the upgrade was answered with an HTTP error,
/// and how to trust a server certificate no trusted CA signed.
fn refusal_words(e: &tokio_tungstenite::tungstenite::Error) -> String {
    let tokio_tungstenite::tungstenite::Error::Http(resp) = e else {
        return crate::model::tls::failure_words(e);
    };
    let status = resp.status();
    let hint = match status.as_u16() {
        404 => {
            "nothing answers WebSocket upgrades at that path: a Gemini Live endpoint and an \
             OpenAI Realtime one have different paths, so check that [model] backend (for a mock, \
             profile = \"openai\", or demo's --profile openai) matches the endpoint"
        }
        401 => {
            "the endpoint refused the credential: check what [model] credential_env names (or \
             what credential_command prints); an access token (Vertex) expires within the hour: \
             credential_command renews it"
        }
        403 => {
            "the endpoint refused access: check that the key or account may use this model and \
             that the API is enabled for its project (on Vertex, the account's IAM role and the \
             project in [model] model)"
        }
        _ => "the endpoint refused the WebSocket upgrade",
    };
    format!("HTTP {status}: {hint}")
}

/// Runs `open` (dial and setup) within `limit`; the setup's answer is `awaited`.
pub(crate) async fn open_within<T>(
    limit: Duration,
    awaited: &'static str,
    open: impl Future<Output = Result<T, SessionError>>,
) -> Result<T, SessionError> {
    tokio::time::timeout(limit, open)
        .await
        .unwrap_or(Err(SessionError::SetupTimeout {
            awaited,
            after: limit,
        }))
}

/// Where the WebSocket runs.
pub enum Transport {
    /// TCP (+TLS for `wss://`) to the endpoint's host.
    Network,
    /// An in-memory stream carrying the same WebSocket frames (accelerated runs with the mock).
    InMemory(tokio::io::DuplexStream),
}

/// A WebSocket to the model with the transport, TLS and upgrade done and nothing sent: a session
/// is started on it by sending its setup (`gemini::session::start_dialed`,
/// `openai::session::start_dialed`). Its protocol is the one of the endpoint it was dialed to.
pub struct Dialed {
    pub(crate) ws: DialedWs,
    /// Frames the server sent before any setup (OpenAI's `session.created`), in order.
    pub(crate) early: Vec<Message>,
}

pub(crate) enum DialedWs {
    /// Boxed (both): a TLS stream is a kilobyte and more, moved between tasks once.
    Network(Box<WebSocketStream<MaybeTlsStream<TcpStream>>>),
    InMemory(Box<WebSocketStream<DuplexStream>>),
}

/// Frames a dialed socket may receive before its setup and still be used (a server talking
/// more than that to an idle socket is not one to start a session on).
const MAX_EARLY_FRAMES: usize = 8;

impl Dialed {
    /// Waits until the idle socket ends (closed by the server, an error, or too much unasked
    /// talk); frames that arrive meanwhile are kept for the session's start. Pings are answered
    /// as they are read.
    pub async fn idle_until_closed(&mut self) {
        loop {
            let next = match &mut self.ws {
                DialedWs::Network(ws) => ws.next().await,
                DialedWs::InMemory(ws) => ws.next().await,
            };
            match next {
                None | Some(Err(_)) | Some(Ok(Message::Close(_))) => return,
                Some(Ok(Message::Ping(_) | Message::Pong(_) | Message::Frame(_))) => {}
                Some(Ok(m)) => {
                    if self.early.len() >= MAX_EARLY_FRAMES {
                        return;
                    }
                    self.early.push(m);
                }
            }
        }
    }

    /// Closes the unused socket normally.
    pub async fn close(self) {
        let frame = Some(tokio_tungstenite::tungstenite::protocol::CloseFrame {
            code: CloseCode::Normal,
            reason: "not needed".into(),
        });
        let _ = match self.ws {
            DialedWs::Network(mut ws) => (*ws).close(frame).await,
            DialedWs::InMemory(mut ws) => (*ws).close(frame).await,
        };
    }
}

/// tungstenite's default read buffer is 128 KiB, zero-filled and so resident per call
/// (`baton bench load` measured 283 → 200 KiB per call going to 16 KiB). The buffer is the
/// most one read takes and where the socket's buffer starts: a frame larger than what is left
/// grows it to fit (a model frame is a few KiB: 40 ms of 24 kHz audio in base64), so a small
/// start costs a few more reads of a burst, not lost or split messages, and an idle socket (the
/// standby) holds only this much.
const READ_BUFFER_BYTES: usize = 4 * 1024;

/// Dials `req`: TCP (+TLS with `tls` for `wss://`) or the in-memory stream, then the WebSocket
/// upgrade, for messages of `max_frame_bytes` at most. Nagle is off: a control message written right after another (a handoff's context
/// update, then its trigger) would wait for the first one's ACK — 40 ms on loopback with delayed
/// ACKs, a round trip to the service — before leaving.
pub(crate) async fn dial(
    req: Request,
    tls: Option<Connector>,
    transport: Transport,
    max_frame_bytes: usize,
) -> Result<Dialed, tokio_tungstenite::tungstenite::Error> {
    let config = WebSocketConfig::default()
        .read_buffer_size(READ_BUFFER_BYTES)
        .max_message_size(Some(max_frame_bytes))
        .max_frame_size(Some(max_frame_bytes));
    let ws = match transport {
        Transport::Network => {
            let (ws, _) = connect_async_tls_with_config(req, Some(config), true, tls).await?;
            DialedWs::Network(Box::new(ws))
        }
        Transport::InMemory(stream) => {
            let (ws, _) = client_async_with_config(req, stream, Some(config)).await?;
            DialedWs::InMemory(Box::new(ws))
        }
    };
    Ok(Dialed {
        ws,
        early: Vec::new(),
    })
}

/// A caller frame received at `received_at` was written to the socket at `written_at`: taken
/// from the session when the call likes ([`ModelSession::take_written`](super::handle::ModelSession::take_written)),
/// not an event that wakes it (every caller frame makes one).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Written {
    pub received_at: Instant,
    pub written_at: Instant,
}

/// Something the session reports to the call.
#[derive(Debug)]
pub enum SessionEvent {
    /// A model event and when its frame arrived.
    Model(ModelEvent, Instant),
    /// The connection ended. `code` is absent when there was no close frame (1006).
    Closed { code: Option<u16>, reason: String },
    /// Nothing at all arrived for `silent_for` although pings were sent: the socket is dead and
    /// has been abandoned (handled like a drop).
    Dead { silent_for: Duration },
}

/// What the call hands a session: a frame to write.
#[derive(Debug)]
pub enum Outbound {
    /// A ready JSON text; `received_at` is set for caller audio, to measure `uplink_added_ms`.
    Text {
        json: String,
        received_at: Option<Instant>,
    },
    /// Close the socket normally.
    Close,
    /// A WebSocket ping (sent by the keepalive).
    Ping,
}

/// Sleeps until `at`; never without one.
pub(crate) async fn sleep_until_opt(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_upgrade_refused_over_http_says_what_to_check() {
        let refused = |code: u16| {
            let resp = http::Response::builder().status(code).body(None).unwrap();
            refusal_words(&tokio_tungstenite::tungstenite::Error::Http(Box::new(resp)))
        };
        let r = refused(404);
        assert!(r.starts_with("HTTP 404 Not Found: nothing answers"), "{r}");
        assert!(r.contains("profile = \"openai\""), "{r}");
        let r = refused(401);
        assert!(
            r.contains("credential_env") && r.contains("credential_command renews it"),
            "{r}"
        );
        // A 403 is the credential's permission, not the credential.
        let r = refused(403);
        assert!(r.contains("IAM role") && !r.contains("renews"), "{r}");
        assert!(refused(500).contains("refused the WebSocket upgrade"));
    }
}
