//! The async shell that runs a tool for the orchestrator: a `static` tool returns its canned
//! reply; an `http` tool POSTs the arguments as JSON (HTTP/1.1 over TCP, or TLS with rustls+ring
//! and the platform's roots) within its timeout and returns the JSON body of a 2xx answer. A header's
//! value comes from the environment variable the config names; it is marked sensitive and never
//! appears in an error. An MCP tool is called on its server's shared session (see
//! [`crate::mcp::call`]).
//!
//! [`ToolTasks`] is how a call runs them: each in its own task (the audio path never waits on a
//! tool), cancelled with a reason when the model cancels the call (barge-in) and all at once when
//! the call ends, which an MCP server hears as `notifications/cancelled`.

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

use std::collections::HashMap;

use tokio::sync::{mpsc, oneshot};

use super::orchestrator::{Input, ToolRun};
use super::registry::{Backend, HttpBackend};

/// Largest response body accepted from a tool.
pub const MAX_BODY: usize = 1 << 20;

/// Why a tool produced no result. The message is what the model is told.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ToolError {
    #[error("tool '{tool}' is not configured: environment variable {var} is not set")]
    MissingEnv { tool: String, var: String },
    #[error(
        "tool '{tool}' is not configured: environment variable {var} does not hold a valid header value"
    )]
    BadHeaderValue { tool: String, var: String },
    #[error("tool '{tool}' gave no result within {ms} ms")]
    Timeout { tool: String, ms: u128 },
    #[error("tool '{tool}' could not reach {url}: {reason}")]
    Connect {
        tool: String,
        url: String,
        reason: String,
    },
    #[error("tool '{tool}': no usable HTTP answer from {url}: {reason}")]
    BadAnswer {
        tool: String,
        url: String,
        reason: String,
    },
    #[error("tool '{tool}': {url} answered HTTP {status}")]
    Status {
        tool: String,
        url: String,
        status: u16,
    },
    #[error("tool '{tool}': the answer from {url} is not JSON ({reason})")]
    NotJson {
        tool: String,
        url: String,
        reason: String,
    },
    #[error(transparent)]
    Mcp(#[from] crate::mcp::CallError),
}

impl ToolRun {
    /// The input that reports this run's outcome to the orchestrator.
    pub fn into_input(self, result: Result<Value, ToolError>) -> Input {
        Input::ToolResult {
            call_id: self.call_id,
            result: result.map_err(|e| e.to_string()),
        }
    }
}

/// Runs the tool of `run` with its arguments.
pub async fn run(run: &ToolRun) -> Result<Value, ToolError> {
    run_cancellable(run, None).await
}

/// [`run`], stopped early with the reason `cancel` brings (MCP tools; the others run to their
/// end or timeout).
pub async fn run_cancellable(
    run: &ToolRun,
    cancel: Option<oneshot::Receiver<String>>,
) -> Result<Value, ToolError> {
    match &run.tool.backend {
        Backend::Static { reply } => Ok(reply.clone()),
        Backend::Http(h) => post_json(&run.tool.name, h, &run.args).await,
        Backend::Mcp(t) => Ok(t.call(&run.args, cancel).await?),
    }
}

/// The tools one call is running, each in its own task.
#[derive(Default)]
pub struct ToolTasks {
    /// By the model's call id: how to cancel it.
    running: HashMap<String, (oneshot::Sender<String>, tokio::task::AbortHandle)>,
}

impl ToolTasks {
    /// Runs `run` in a task of its own; its outcome goes to `results` as [`Input::ToolResult`]
    /// (the tool's task waits for room; the call reading them never does). Boxed: results are
    /// rare, and the channel's first block of slots is made with every call.
    pub fn spawn(&mut self, run: ToolRun, results: mpsc::Sender<Box<Input>>) {
        self.running.retain(|_, (_, task)| !task.is_finished());
        let (cancel_tx, cancel_rx) = oneshot::channel();
        let id = run.call_id.clone();
        let task = tokio::spawn(async move {
            let result = run_cancellable(&run, Some(cancel_rx)).await;
            let _ = results.send(Box::new(run.into_input(result))).await;
        });
        self.running.insert(id, (cancel_tx, task.abort_handle()));
    }

    /// The model cancelled these calls (the caller barged in): their tools are stopped with
    /// `reason`.
    pub fn cancel(&mut self, ids: &[String], reason: &str) {
        for id in ids {
            if let Some((tx, _)) = self.running.remove(id) {
                let _ = tx.send(reason.to_owned());
            }
        }
    }

    /// Tools still running.
    pub fn running(&self) -> usize {
        self.running
            .values()
            .filter(|(_, task)| !task.is_finished())
            .count()
    }
}

impl Drop for ToolTasks {
    /// The call ended: every tool still running is told so (its cancel channel closes).
    fn drop(&mut self) {
        for (_, (tx, _)) in self.running.drain() {
            let _ = tx.send("the call ended".to_owned());
        }
    }
}

/// POSTs `args` to the backend within its timeout.
pub async fn post_json(tool: &str, h: &HttpBackend, args: &Value) -> Result<Value, ToolError> {
    let header = match &h.header {
        None => None,
        Some((name, var)) => {
            let value = std::env::var(var).map_err(|_| ToolError::MissingEnv {
                tool: tool.to_owned(),
                var: var.clone(),
            })?;
            let mut v =
                http::HeaderValue::from_str(&value).map_err(|_| ToolError::BadHeaderValue {
                    tool: tool.to_owned(),
                    var: var.clone(),
                })?;
            v.set_sensitive(true);
            Some((name.clone(), v))
        }
    };
    let fut = exchange(tool, h, args, header);
    match tokio::time::timeout(h.timeout, fut).await {
        Ok(r) => r,
        Err(_) => Err(ToolError::Timeout {
            tool: tool.to_owned(),
            ms: h.timeout.as_millis(),
        }),
    }
}

async fn exchange(
    tool: &str,
    h: &HttpBackend,
    args: &Value,
    header: Option<(String, http::HeaderValue)>,
) -> Result<Value, ToolError> {
    let url = &h.url;
    let connect_err = |reason: String| ToolError::Connect {
        tool: tool.to_owned(),
        url: crate::secret::url_shown(url),
        reason,
    };
    let host = url
        .host_str()
        .ok_or_else(|| connect_err("no host".into()))?;
    let port = url
        .port_or_known_default()
        .ok_or_else(|| connect_err("no port".into()))?;
    let authority = match url.port() {
        Some(p) => format!("{host}:{p}"),
        None => host.to_owned(),
    };
    let mut path = url.path().to_owned();
    if let Some(q) = url.query() {
        path.push('?');
        path.push_str(q);
    }
    let body = serde_json::to_vec(args).unwrap_or_else(|_| b"{}".to_vec());
    let mut req = http::Request::post(path)
        .header(http::header::HOST, authority)
        .header(http::header::CONTENT_TYPE, "application/json")
        .header(http::header::ACCEPT, "application/json");
    if let Some((name, value)) = header {
        req = req.header(name, value);
    }
    let req = req
        .body(Full::new(Bytes::from(body)))
        .map_err(|e| connect_err(format!("bad request: {e}")))?;
    let tcp = TcpStream::connect((host.trim_start_matches('[').trim_end_matches(']'), port))
        .await
        .map_err(|e| connect_err(e.to_string()))?;
    let _ = tcp.set_nodelay(true);
    if url.scheme() == "https" {
        let tls = tls_connector().map_err(connect_err)?;
        let name = rustls::pki_types::ServerName::try_from(host.to_owned())
            .map_err(|e| connect_err(format!("bad TLS name: {e}")))?;
        let stream = tls
            .connect(name, tcp)
            .await
            .map_err(|e| connect_err(format!("TLS: {e}")))?;
        exchange_over(stream, tool, url, req).await
    } else {
        exchange_over(tcp, tool, url, req).await
    }
}

/// Sends `req` on an open connection `io` to the tool at `url` and reads its answer: the JSON body
/// of a 2xx response, or an error naming the tool, the URL and what was wrong. This is where
/// everything the tool's server says is parsed (HTTP by hyper, the body by serde_json).
pub async fn exchange_over<S>(
    io: S,
    tool: &str,
    url: &url::Url,
    req: http::Request<Full<Bytes>>,
) -> Result<Value, ToolError>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (status, bytes) = send(io, req).await.map_err(|reason| ToolError::BadAnswer {
        tool: tool.to_owned(),
        url: crate::secret::url_shown(url),
        reason,
    })?;
    if !(200..300).contains(&status) {
        return Err(ToolError::Status {
            tool: tool.to_owned(),
            url: crate::secret::url_shown(url),
            status,
        });
    }
    serde_json::from_slice(&bytes).map_err(|e| ToolError::NotJson {
        tool: tool.to_owned(),
        url: crate::secret::url_shown(url),
        reason: e.to_string(),
    })
}

/// One request on a fresh HTTP/1.1 connection; the status and the body (at most [`MAX_BODY`]).
async fn send<S>(io: S, req: http::Request<Full<Bytes>>) -> Result<(u16, Bytes), String>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, conn) = http1::handshake(TokioIo::new(io))
        .await
        .map_err(|e| chain(&e))?;
    let work = async move {
        let resp = sender.send_request(req).await.map_err(|e| chain(&e))?;
        let status = resp.status().as_u16();
        let announced = hyper::body::Body::size_hint(resp.body()).lower();
        if announced > MAX_BODY as u64 {
            return Err(format!(
                "the body is announced as {announced} bytes, over the {MAX_BODY}-byte limit"
            ));
        }
        let body = Limited::new(resp.into_body(), MAX_BODY)
            .collect()
            .await
            .map_err(|e| format!("reading the body: {}", chain(e.as_ref())))?
            .to_bytes();
        Ok::<_, String>((status, body))
    };
    tokio::pin!(conn);
    tokio::pin!(work);
    tokio::select! {
        r = &mut work => r,
        c = &mut conn => match c {
            Ok(()) => work.await,
            Err(e) => Err(chain(&e)),
        },
    }
}

/// An error and its causes, `outer: inner: …` (hyper says "operation was canceled" and keeps the
/// parse error that caused it as the source).
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut s = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let text = c.to_string();
        if !s.ends_with(&text) {
            s.push_str(": ");
            s.push_str(&text);
        }
        cause = c.source();
    }
    s
}

/// The platform's roots (see [`crate::model::tls`]); certificates always verified.
fn tls_connector() -> Result<tokio_rustls::TlsConnector, String> {
    let config = crate::model::tls::default_client_config().map_err(|e| e.to_string())?;
    Ok(tokio_rustls::TlsConnector::from(config))
}
