//! The rmcp client side of one server: the handler that hears the server's notifications
//! (`tools/list_changed` wakes the supervisor; progress is logged), and
//! connecting over Streamable HTTP (rmcp's reqwest client with baton's rustls config; the
//! session id and resumable SSE stream are rmcp's; the configured header's value read from its
//! environment variable and marked sensitive) or over a child process's stdio.

use std::collections::HashMap;
use std::sync::Arc;

use rmcp::ServiceExt;
use rmcp::model::ProgressNotificationParam;
use rmcp::service::{NotificationContext, RoleClient, RunningService};
use tokio::sync::Notify;

use super::config::{ServerSpec, Transport};

/// A running client session with one server.
pub type Session = RunningService<RoleClient, Handler>;

/// Hears a server's notifications.
#[derive(Clone, Default)]
pub struct Handler {
    /// Woken on `notifications/tools/list_changed`.
    pub tools_changed: Arc<Notify>,
}

impl rmcp::ClientHandler for Handler {
    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.tools_changed.notify_one();
    }

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        tracing::debug!(
            progress = params.progress,
            total = ?params.total,
            message = params.message.as_deref().unwrap_or(""),
            "MCP tool progress"
        );
    }
}

/// Why a server could not be connected (the message names the server, never a credential).
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("environment variable {var} (the value of header {header}) is not set")]
    MissingEnv { header: String, var: String },
    #[error("environment variable {var} does not hold a valid value for header {header}")]
    BadHeaderValue { header: String, var: String },
    #[error("cannot build the HTTP client: {0}")]
    Client(String),
    #[error("cannot start `{command}`: {reason}")]
    Spawn { command: String, reason: String },
    #[error("the MCP handshake failed: {0}")]
    Handshake(String),
    #[error("no answer within {0} ms")]
    Timeout(u128),
}

/// Connects to `spec` and completes the MCP handshake, within its connect timeout.
pub async fn connect(spec: &ServerSpec, handler: Handler) -> Result<Session, ConnectError> {
    let ms = spec.connect_timeout.as_millis();
    let work = async {
        match &spec.transport {
            Transport::Http {
                url,
                header,
                max_concurrent,
            } => connect_http(url, header.as_ref(), *max_concurrent, handler).await,
            Transport::Stdio {
                command,
                args,
                env,
                cwd,
            } => {
                let mut cmd = tokio::process::Command::new(command);
                cmd.args(args).envs(env).kill_on_drop(true);
                if let Some(dir) = cwd {
                    cmd.current_dir(dir);
                }
                let (child, _) = rmcp::transport::TokioChildProcess::builder(cmd)
                    .stderr(std::process::Stdio::inherit())
                    .spawn()
                    .map_err(|e| ConnectError::Spawn {
                        command: command.clone(),
                        reason: e.to_string(),
                    })?;
                handler
                    .serve(child)
                    .await
                    .map_err(|e| ConnectError::Handshake(plain_words(&e)))
            }
        }
    };
    match tokio::time::timeout(spec.connect_timeout, work).await {
        Ok(r) => r,
        Err(_) => Err(ConnectError::Timeout(ms)),
    }
}

/// An error and its causes in words a person reads: the Rust type names some transports put in
/// brackets (`Transport [rmcp::transport::…<…>]`) left out, each cause said once.
pub fn plain_words(e: &dyn std::error::Error) -> String {
    let mut out = without_type_names(&e.to_string());
    let mut cause = e.source();
    while let Some(c) = cause {
        let words = without_type_names(&c.to_string());
        if !words.is_empty() && !out.contains(&words) {
            out = format!("{out}: {words}");
        }
        cause = c.source();
    }
    out
}

/// `text` without its bracketed Rust paths (`[a::b<c::d>]`), spaces closed up.
fn without_type_names(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(open) = rest.find('[') {
        let Some(len) = rest[open..].find(']') else {
            break;
        };
        let inside = &rest[open + 1..open + len];
        out.push_str(&rest[..open]);
        if !inside.contains("::") {
            out.push_str(&rest[open..=open + len]);
        }
        rest = &rest[open + len + 1..];
    }
    out.push_str(rest);
    out.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The value of a configured header, from its environment variable, marked sensitive.
pub fn header_value(header: &str, var: &str) -> Result<http::HeaderValue, ConnectError> {
    let value = std::env::var(var).map_err(|_| ConnectError::MissingEnv {
        header: header.to_owned(),
        var: var.to_owned(),
    })?;
    let mut v = http::HeaderValue::from_str(&value).map_err(|_| ConnectError::BadHeaderValue {
        header: header.to_owned(),
        var: var.to_owned(),
    })?;
    v.set_sensitive(true);
    Ok(v)
}

async fn connect_http(
    url: &url::Url,
    header: Option<&(String, String)>,
    max_concurrent: usize,
    handler: Handler,
) -> Result<Session, ConnectError> {
    use rmcp::transport::StreamableHttpClientTransport;
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
    let mut headers = HashMap::new();
    if let Some((name, var)) = header {
        let value = header_value(name, var)?;
        let name = http::HeaderName::from_bytes(name.as_bytes())
            .map_err(|e| ConnectError::Client(e.to_string()))?;
        headers.insert(name, value);
    }
    let tls = crate::model::tls::default_client_config()
        .map_err(|e| ConnectError::Client(e.to_string()))?;
    let client = reqwest::Client::builder()
        .tls_backend_preconfigured((*tls).clone())
        .tcp_nodelay(true)
        .pool_max_idle_per_host(max_concurrent)
        .build()
        .map_err(|e| ConnectError::Client(e.to_string()))?;
    let config = StreamableHttpClientTransportConfig::with_uri(url.as_str())
        .max_concurrent_requests(max_concurrent)
        .custom_headers(headers);
    let transport = StreamableHttpClientTransport::with_client(client, config);
    handler
        .serve(transport)
        .await
        .map_err(|e| ConnectError::Handshake(plain_words(&e)))
}

#[cfg(test)]
mod tests {
    use super::without_type_names;

    #[test]
    fn rust_type_names_are_left_out_of_a_message() {
        assert_eq!(
            without_type_names(
                "Send message error Transport [rmcp::transport::worker::WorkerTransport<rmcp::a::B<reqwest::Client>>] error: Client error: error sending request for url (http://127.0.0.1:9/mcp)"
            ),
            "Send message error Transport error: Client error: error sending request for url (http://127.0.0.1:9/mcp)"
        );
        assert_eq!(without_type_names("a [b] c"), "a [b] c");
    }
}
