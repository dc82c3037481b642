//! The tokio shell around [`MockSession`]: WebSocket handshake (path and credential checks), one
//! task per connection that feeds frames to the engine, sends what it produces (server JSON always
//! in binary frames) and sleeps until its next deadline. Time comes from `tokio::time::Instant`, so
//! tokio's paused clock drives accelerated runs. Serves TCP (plain or TLS) and in-memory duplex
//! streams.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_tungstenite::tungstenite::handshake::server::{ErrorResponse, Request, Response};
use tokio_tungstenite::tungstenite::http::StatusCode;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::protocol::frame::CloseFrame;
use tokio_tungstenite::tungstenite::{self, Message};

use super::engine::{MockSession, Outgoing};
use super::faults::Faults;
use super::inbound::{CLOSE_POLICY, CLOSE_TOO_BIG, MAX_MESSAGE_BYTES, Rejection};
use super::pong::LatePongs;
use super::record::{RecordError, RecordSink};
use super::resume::Resumption;
use super::scenario::{Scenario, ScenarioError};
use super::setup::{Backend, Endpoint, Profile};
use super::tls::{self, TlsError, TlsSetup};

/// Size of each direction's buffer in [`connect_in_memory`].
pub const DUPLEX_BUFFER: usize = 256 * 1024;

/// The WebSocket read buffer. tungstenite zero-fills its whole read buffer on every read, so its
/// 128 KiB default costs a 128 KiB memset per client message (a 20 ms audio chunk is about 1 KiB);
/// larger messages are read in several reads.
pub const READ_BUFFER_BYTES: usize = 8 * 1024;

/// How long a client may take over the WebSocket handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a closing session waits for the client's close reply.
const CLOSE_LINGER: Duration = Duration::from_secs(5);

/// Everything a mock server needs; shared by all its connections.
#[derive(Clone, Debug)]
pub struct MockOptions {
    pub scenario: Arc<Scenario>,
    /// If set, clients must present this key (`key` query, `x-goog-api-key`, `Authorization`).
    pub api_key: Option<String>,
    /// If set, every client message is recorded.
    pub record: Option<RecordSink>,
    /// The model behaviour every session follows.
    pub profile: Profile,
    /// Fault modes (the scenario's `[faults]` unless overridden).
    pub faults: Arc<Faults>,
    /// Resumption handles, open sockets and audio records of this server's connections.
    pub resumption: Arc<Resumption>,
    /// Speak the OpenAI Realtime protocol instead of Gemini Live (see [`super::openai`]).
    pub openai: Option<super::openai::OpenAiOptions>,
}

impl MockOptions {
    /// No key, no recording, the scenario's profile.
    pub fn new(scenario: Arc<Scenario>) -> Self {
        MockOptions {
            profile: scenario.profile,
            faults: Arc::new(scenario.faults.clone()),
            scenario,
            api_key: None,
            record: None,
            resumption: Arc::new(Resumption::default()),
            openai: None,
        }
    }

    /// What a client can do in place in a session of this server.
    pub fn capabilities(&self) -> crate::model::Capabilities {
        if self.openai.is_some() {
            return super::openai::CAPABILITIES;
        }
        self.profile.capabilities()
    }

    /// The real model this server imitates, as a client names it.
    pub fn model_id(&self) -> &'static str {
        if self.openai.is_some() {
            super::openai::MODEL_ID
        } else {
            self.profile.model_id()
        }
    }
}

/// The mock server could not start.
#[derive(Debug, thiserror::Error)]
pub enum MockError {
    #[error(transparent)]
    Scenario(#[from] ScenarioError),
    #[error(transparent)]
    Tls(#[from] TlsError),
    #[error(transparent)]
    Record(#[from] RecordError),
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: String,
        source: std::io::Error,
    },
    #[error("environment variable {var} (named by --api-key-env) is not set or empty")]
    ApiKeyEnv { var: String },
    #[error("{0}")]
    Usage(String),
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
}

/// A bound, not yet running, mock server.
pub struct MockServer {
    listener: TcpListener,
    acceptor: Option<TlsAcceptor>,
    opts: Arc<MockOptions>,
    local_addr: SocketAddr,
}

/// Binds `addr`; with `tls`, serves `wss://`.
pub async fn bind(
    addr: &str,
    opts: Arc<MockOptions>,
    tls: Option<TlsSetup>,
) -> Result<MockServer, MockError> {
    let acceptor = tls.as_ref().map(tls::acceptor).transpose()?;
    let bind_err = |source| MockError::Bind {
        addr: addr.to_owned(),
        source,
    };
    let listener = TcpListener::bind(addr).await.map_err(bind_err)?;
    let local_addr = listener.local_addr().map_err(bind_err)?;
    Ok(MockServer {
        listener,
        acceptor,
        opts,
        local_addr,
    })
}

impl MockServer {
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// `ws://127.0.0.1:PORT`, or `wss://localhost:PORT` with TLS (the certificate's name).
    pub fn base_url(&self) -> String {
        let port = self.local_addr.port();
        if self.acceptor.is_some() {
            format!("wss://localhost:{port}")
        } else if self.local_addr.ip().is_unspecified() {
            format!("ws://127.0.0.1:{port}")
        } else {
            format!("ws://{}", self.local_addr)
        }
    }

    /// Accepts connections until `shutdown` completes; each runs in its own task.
    pub async fn run_until(self, shutdown: impl Future<Output = ()>) {
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                () = &mut shutdown => return,
                accepted = self.listener.accept() => match accepted {
                    Ok((tcp, peer)) => {
                        let _ = tcp.set_nodelay(true);
                        let opts = self.opts.clone();
                        match &self.acceptor {
                            None => { tokio::spawn(serve_connection(tcp, opts)); }
                            Some(acceptor) => {
                                let acceptor = acceptor.clone();
                                tokio::spawn(async move {
                                    match tokio::time::timeout(Duration::from_secs(10), acceptor.accept(tcp)).await {
                                        Ok(Ok(tls)) => serve_connection(tls, opts).await,
                                        Ok(Err(e)) => tracing::debug!(%peer, error = %e, "TLS handshake failed"),
                                        Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
                                    }
                                });
                            }
                        }
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                },
            }
        }
    }

    /// Runs in a background task until the returned handle is stopped or dropped.
    pub fn spawn(self) -> RunningMockServer {
        let base_url = self.base_url();
        let local_addr = self.local_addr;
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(self.run_until(async {
            let _ = rx.await;
        }));
        RunningMockServer {
            base_url,
            local_addr,
            stop: Some(tx),
            task,
        }
    }
}

/// A mock server running in the background. Dropping it stops accepting new connections.
pub struct RunningMockServer {
    base_url: String,
    local_addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl RunningMockServer {
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Stops accepting connections and waits for the accept loop to end (sessions already
    /// running finish on their own).
    pub async fn stop(mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        let _ = (&mut self.task).await;
    }
}

impl Drop for RunningMockServer {
    fn drop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
    }
}

/// An in-process mock: spawns [`serve_connection`] on one end of a duplex pipe and returns the
/// other end, on which the client performs its WebSocket client handshake. Call inside a tokio
/// runtime (a paused clock makes the whole conversation run in virtual time).
pub fn connect_in_memory(opts: Arc<MockOptions>) -> tokio::io::DuplexStream {
    let (client, server) = tokio::io::duplex(DUPLEX_BUFFER);
    tokio::spawn(serve_connection(server, opts));
    client
}

/// Serves one connection: the WebSocket server handshake (unknown paths get HTTP 404), the
/// credential check, then the session until either side closes.
pub async fn serve_connection<S>(stream: S, opts: Arc<MockOptions>)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    // A distant service: the upgrade is answered only after the connect's round trips.
    let connect = opts.scenario.timing.connect;
    if !connect.is_zero() {
        tokio::time::sleep(connect).await;
    }
    if opts.openai.is_some() {
        return super::openai::serve_connection(stream, opts).await;
    }
    let mut admitted: Option<(Endpoint, Result<(), Rejection>)> = None;
    // The callback's error type is tungstenite's; its size is not ours to choose.
    #[allow(clippy::result_large_err)]
    let callback = |req: &Request, resp: Response| -> Result<Response, ErrorResponse> {
        let Some(endpoint) = endpoint_for(req.uri().path()) else {
            let mut e = ErrorResponse::new(Some(format!(
                "{} is not a Live API path; try /ws/google.ai.generativelanguage.v1beta.\
                 GenerativeService.BidiGenerateContent\n",
                req.uri().path()
            )));
            *e.status_mut() = StatusCode::NOT_FOUND;
            return Err(e);
        };
        let auth = check_credentials(req, opts.api_key.as_deref());
        admitted = Some((endpoint, auth));
        Ok(resp)
    };
    let config = WebSocketConfig::default()
        .read_buffer_size(READ_BUFFER_BYTES)
        .max_message_size(Some(2 * MAX_MESSAGE_BYTES))
        .max_frame_size(Some(2 * MAX_MESSAGE_BYTES));
    let stream = LatePongs::new(stream, opts.faults.late_pong.unwrap_or_default());
    let handshake = tokio_tungstenite::accept_hdr_async_with_config(stream, callback, Some(config));
    let mut ws = match tokio::time::timeout(HANDSHAKE_TIMEOUT, handshake).await {
        Ok(Ok(ws)) => ws,
        Ok(Err(e)) => {
            tracing::debug!(error = %e, "WebSocket handshake refused");
            return;
        }
        Err(_) => {
            tracing::debug!("WebSocket handshake timed out");
            return;
        }
    };
    let Some((endpoint, auth)) = admitted else {
        return;
    };
    if opts.faults.late_pong.is_some() {
        ws.get_mut().activate();
    }
    let conn = opts.resumption.register();
    let mut session = MockSession::new(opts.scenario.clone(), endpoint, opts.profile).with_server(
        opts.resumption.clone(),
        conn,
        opts.faults.clone(),
    );
    if let Err(r) = auth {
        session.close(r);
    }
    run_session(ws, session, opts.record.as_ref(), &opts.resumption).await;
    opts.resumption
        .closed(conn, tokio::time::Instant::now().into_std());
}

/// How long a connection told to go silent keeps its socket open without reading it.
const HANG_FOR: Duration = Duration::from_secs(3600);

async fn run_session<S>(
    mut ws: tokio_tungstenite::WebSocketStream<S>,
    mut session: MockSession,
    record: Option<&RecordSink>,
    store: &Resumption,
) where
    S: AsyncRead + AsyncWrite + Unpin,
{
    // One timer for the connection's life, moved only when the engine's deadline moves (a
    // fresh one per message would add and remove a timer entry 50 times a second).
    let timer = tokio::time::sleep(HANG_FOR);
    tokio::pin!(timer);
    let mut armed: Option<std::time::Instant> = None;
    loop {
        // Drain everything the engine produced.
        let mut wrote = false;
        while let Some(out) = session.poll_transmit() {
            match out {
                Outgoing::Message(m) => {
                    let json = match super::speak::to_json(m) {
                        Ok(j) => j,
                        Err(e) => {
                            tracing::error!(error = %e, "cannot encode a server message");
                            session.close(Rejection::new(1011, "Internal error occurred."));
                            continue;
                        }
                    };
                    if ws.feed(Message::Binary(json.into())).await.is_err() {
                        return;
                    }
                    wrote = true;
                }
                Outgoing::Raw(bytes) => {
                    if ws.feed(Message::Binary(bytes.into())).await.is_err() {
                        return;
                    }
                    wrote = true;
                }
                // The session is over from the server's side: a resume may now go ahead.
                Outgoing::Drop => return,
                Outgoing::Hang => {
                    store.closed(session.connection(), tokio::time::Instant::now().into_std());
                    tokio::time::sleep(HANG_FOR).await;
                    return;
                }
                Outgoing::Close { code, reason } => {
                    store.closed(session.connection(), tokio::time::Instant::now().into_std());
                    let frame = CloseFrame {
                        code: code.into(),
                        reason: reason.into(),
                    };
                    let _ = ws.close(Some(frame)).await;
                    // Wait (briefly) for the client's close reply, then drop the connection.
                    let _ = tokio::time::timeout(CLOSE_LINGER, async {
                        while let Some(Ok(_)) = ws.next().await {}
                    })
                    .await;
                    return;
                }
            }
        }
        if wrote && ws.flush().await.is_err() {
            return;
        }
        let deadline = session.poll_timeout();
        if deadline != armed {
            if let Some(d) = deadline {
                timer.as_mut().reset(tokio::time::Instant::from_std(d));
            }
            armed = deadline;
        }
        tokio::select! {
            incoming = ws.next() => {
                let now = tokio::time::Instant::now().into_std();
                match incoming {
                    Some(Ok(Message::Text(t))) => {
                        if let Some(r) = record { r.record(t.as_bytes()); }
                        session.handle_frame(t.as_bytes(), now);
                    }
                    Some(Ok(Message::Binary(b))) => {
                        if let Some(r) = record { r.record(&b); }
                        session.handle_frame(&b, now);
                    }
                    // Pings are answered by tungstenite on the next write/flush.
                    Some(Ok(Message::Ping(_) | Message::Pong(_) | Message::Frame(_))) => {}
                    Some(Ok(Message::Close(_))) | None => return,
                    Some(Err(tungstenite::Error::Capacity(e))) => {
                        session.close(Rejection::new(CLOSE_TOO_BIG, format!("message too big: {e}")));
                    }
                    Some(Err(e)) => {
                        tracing::debug!(error = %e, "connection ended");
                        return;
                    }
                }
            }
            () = &mut timer, if armed.is_some() => {
                // Fired: the next deadline re-arms it, even one equal to this.
                armed = None;
                session.handle_timeout(tokio::time::Instant::now().into_std());
            }
        }
    }
}

/// Maps a request path to the service it names (`None`: not a Live API path → 404).
pub fn endpoint_for(path: &str) -> Option<Endpoint> {
    let path = format!("/{}", path.trim_start_matches('/'));
    if let Some(rest) = path.strip_prefix("/ws/google.ai.generativelanguage.") {
        let (version, method) = rest.split_once(".GenerativeService.")?;
        let known = ["v1", "v1beta", "v1alpha"].contains(&version)
            && ["BidiGenerateContent", "BidiGenerateContentConstrained"].contains(&method);
        return known.then(|| Endpoint {
            backend: Backend::DevApi,
            api_version: version.to_owned(),
        });
    }
    let rest = path.strip_prefix("/ws/google.cloud.aiplatform.")?;
    let version = rest.strip_suffix(".LlmBidiService/BidiGenerateContent")?;
    ["v1", "v1beta1"].contains(&version).then(|| Endpoint {
        backend: Backend::Vertex,
        api_version: version.to_owned(),
    })
}

/// Checks the client's credential against the required key, if any. The reason never contains
/// what the client sent.
fn check_credentials(req: &Request, required: Option<&str>) -> Result<(), Rejection> {
    let Some(required) = required else {
        return Ok(());
    };
    let header = |name: &str| {
        req.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    let mut presented: Vec<String> = Vec::new();
    if let Some(k) = header("x-goog-api-key") {
        presented.push(k.to_owned());
    }
    if let Some(auth) = header("authorization") {
        for scheme in ["Bearer ", "Token "] {
            if let Some(v) = auth.strip_prefix(scheme) {
                presented.push(v.trim().to_owned());
            }
        }
    }
    if let Some(q) = req.uri().query() {
        for (k, v) in url::form_urlencoded::parse(q.as_bytes()) {
            if k == "key" || k == "access_token" {
                presented.push(v.into_owned());
            }
        }
    }
    if presented.is_empty() {
        Err(Rejection::new(
            CLOSE_POLICY,
            "Missing API key: pass it in the x-goog-api-key header or the key query parameter.",
        ))
    } else if presented.iter().any(|k| k == required) {
        Ok(())
    } else {
        Err(Rejection::new(
            CLOSE_POLICY,
            "API key not valid. Please pass a valid API key.",
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths() {
        let dev = endpoint_for(
            "/ws/google.ai.generativelanguage.v1beta.GenerativeService.BidiGenerateContent",
        )
        .unwrap();
        assert_eq!(dev.backend, Backend::DevApi);
        assert_eq!(dev.api_version, "v1beta");
        assert!(endpoint_for("/ws/google.ai.generativelanguage.v1alpha.GenerativeService.BidiGenerateContentConstrained").is_some());
        assert!(
            endpoint_for(
                "//ws/google.ai.generativelanguage.v1.GenerativeService.BidiGenerateContent"
            )
            .is_some()
        );
        let v =
            endpoint_for("/ws/google.cloud.aiplatform.v1beta1.LlmBidiService/BidiGenerateContent")
                .unwrap();
        assert_eq!(v.backend, Backend::Vertex);
        assert_eq!(v.api_version, "v1beta1");
        for bad in [
            "/",
            "/ws/google.ai.generativelanguage.v2.GenerativeService.BidiGenerateContent",
            "/ws/google.ai.generativelanguage.v1beta.GenerativeService/BidiGenerateContent",
            "/ws/google.cloud.aiplatform.v1.LlmBidiService.BidiGenerateContent",
        ] {
            assert!(endpoint_for(bad).is_none(), "{bad}");
        }
    }

    fn req(uri: &str, headers: &[(&str, &str)]) -> Request {
        let mut b = Request::builder().uri(uri);
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        b.body(()).unwrap()
    }

    #[test]
    fn credentials() {
        let p = "/ws/x";
        assert!(check_credentials(&req(p, &[]), None).is_ok());
        assert!(check_credentials(&req(p, &[("x-goog-api-key", "k1")]), Some("k1")).is_ok());
        assert!(check_credentials(&req("/ws/x?key=k1", &[]), Some("k1")).is_ok());
        assert!(check_credentials(&req(p, &[("authorization", "Bearer k1")]), Some("k1")).is_ok());
        let missing = check_credentials(&req(p, &[]), Some("k1")).unwrap_err();
        assert_eq!(missing.code, CLOSE_POLICY);
        let wrong = check_credentials(&req("/ws/x?key=secret-guess", &[]), Some("k1")).unwrap_err();
        assert_eq!(wrong.code, CLOSE_POLICY);
        assert!(!wrong.reason.contains("secret-guess") && !wrong.reason.contains("k1"));
    }
}
