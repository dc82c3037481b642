//! One MCP tool as the agents see it ([`McpTool`]: its declared schema, the server's own schema,
//! its deadline, the connection it goes through) and one call of it: arguments checked against
//! the server's schema first, then `tools/call` on the shared session, answered by the result, by
//! the deadline (the server is sent `notifications/cancelled`), or by a cancellation from the call
//! (barge-in, the call's end; `notifications/cancelled` with the reason). A call whose future is
//! dropped before its answer also sends `notifications/cancelled`. The result is mapped to the
//! function response's value: structured content as it is, else the text (JSON text parsed), with
//! other content described; an error result is an error for the model.

use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CancelledNotificationParam, ClientRequest, RequestId,
    ServerResult,
};
use rmcp::service::{PeerRequestOptions, RoleClient, ServiceError};
use serde_json::{Value, json};
use tokio::sync::oneshot;

use super::link::Link;

/// A tool offered by an MCP server, translated for the models.
pub struct McpTool {
    /// The configured server's name (`[mcp.<server>]`).
    pub server: Arc<str>,
    /// The tool's name on the server, which is also the function name the model sees.
    pub name: String,
    pub description: String,
    /// The schema declared to the model (see [`super::schema::translate`]).
    pub parameters: Value,
    /// The server's own input schema, which arguments are checked against.
    pub input_schema: Value,
    /// The call's deadline.
    pub timeout: Duration,
    pub(super) link: Arc<Link>,
}

impl std::fmt::Debug for McpTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpTool")
            .field("server", &self.server)
            .field("name", &self.name)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

/// Why a call produced no result; the message is what the model is told (it names the tool and
/// the server, never a credential).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CallError {
    #[error("tool '{tool}': invalid arguments: {why}")]
    InvalidArguments { tool: String, why: String },
    #[error("tool '{tool}' is unavailable: MCP server '{server}' is not connected ({state})")]
    NotConnected {
        tool: String,
        server: String,
        state: String,
    },
    #[error("tool '{tool}' gave no result within {ms} ms")]
    Timeout { tool: String, ms: u128 },
    #[error("tool '{tool}' was cancelled: {reason}")]
    Cancelled { tool: String, reason: String },
    #[error("tool '{tool}' failed: {message}")]
    Failed { tool: String, message: String },
    #[error("tool '{tool}': MCP server '{server}' answered with an error: {message}")]
    Protocol {
        tool: String,
        server: String,
        message: String,
    },
    #[error("tool '{tool}': the connection to MCP server '{server}' was lost during the call")]
    Lost { tool: String, server: String },
}

/// Sends `notifications/cancelled` for a request unless disarmed (the answer arrived, or the
/// call already cancelled it with its own reason).
struct CancelOnDrop {
    peer: Option<rmcp::Peer<RoleClient>>,
    id: RequestId,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if let Some(peer) = self.peer.take()
            && let Ok(rt) = tokio::runtime::Handle::try_current()
        {
            let param = CancelledNotificationParam::new(
                Some(self.id.clone()),
                Some("the call no longer needs the result".into()),
            );
            rt.spawn(async move {
                let _ = peer.notify_cancelled(param).await;
            });
        }
    }
}

impl McpTool {
    /// Calls the tool with `args`. `cancel` carries a reason to stop early (barge-in, the call's
    /// end).
    pub async fn call(
        &self,
        args: &Value,
        cancel: Option<oneshot::Receiver<String>>,
    ) -> Result<Value, CallError> {
        let tool = || self.name.clone();
        let server = || self.server.to_string();
        super::args::validate(&self.input_schema, args).map_err(|e| {
            CallError::InvalidArguments {
                tool: tool(),
                why: e.to_string(),
            }
        })?;
        let deadline = tokio::time::Instant::now() + self.timeout;
        let timed_out = || CallError::Timeout {
            tool: tool(),
            ms: self.timeout.as_millis(),
        };
        let _slot = match tokio::time::timeout_at(deadline, self.link.slots.acquire()).await {
            Ok(Ok(permit)) => permit,
            Ok(Err(_)) => {
                return Err(CallError::Lost {
                    tool: tool(),
                    server: server(),
                });
            }
            Err(_) => return Err(timed_out()),
        };
        let Some(conn) = self.link.current() else {
            return Err(CallError::NotConnected {
                tool: tool(),
                server: server(),
                state: self.link.state_text(),
            });
        };
        let arguments = match args {
            Value::Object(m) => Some(m.clone()),
            Value::Null => None,
            _ => {
                return Err(CallError::InvalidArguments {
                    tool: tool(),
                    why: "the arguments must be an object".into(),
                });
            }
        };
        let mut params = CallToolRequestParams::new(self.name.clone());
        params.arguments = arguments;
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
        // The request could not be sent or the session's transport closed under it: the
        // session is gone, whatever its state says (a reply that is merely odd is not that).
        let lost = || {
            conn.lost.cancel();
            CallError::Lost {
                tool: tool(),
                server: server(),
            }
        };
        let mut handle = conn
            .peer
            .send_cancellable_request(request, PeerRequestOptions::no_options())
            .await
            .map_err(|_| lost())?;
        let mut guard = CancelOnDrop {
            peer: Some(conn.peer.clone()),
            id: handle.id.clone(),
        };
        let cancel = async {
            match cancel {
                Some(rx) => rx.await.unwrap_or_else(|_| "the call ended".to_owned()),
                None => std::future::pending().await,
            }
        };
        let outcome = tokio::select! {
            r = &mut handle.rx => Ok(r),
            _ = tokio::time::sleep_until(deadline) => Err(format!("timed out after {} ms", self.timeout.as_millis())),
            reason = cancel => Err(reason),
        };
        guard.peer = None;
        let result = match outcome {
            Ok(r) => r,
            Err(reason) => {
                let expired = reason.starts_with("timed out");
                let _ = handle.cancel(Some(reason.clone())).await;
                return Err(if expired {
                    self::timeout_error(&self.name, self.timeout)
                } else {
                    CallError::Cancelled {
                        tool: tool(),
                        reason,
                    }
                });
            }
        };
        match result {
            Ok(Ok(ServerResult::CallToolResult(r))) => {
                let v = serde_json::to_value(&r).unwrap_or(Value::Null);
                map_result(&v).map_err(|message| CallError::Failed {
                    tool: tool(),
                    message,
                })
            }
            Ok(Ok(_)) => Err(CallError::Protocol {
                tool: tool(),
                server: server(),
                message: "the answer to tools/call is not a tool result".into(),
            }),
            Ok(Err(ServiceError::McpError(e))) => Err(CallError::Protocol {
                tool: tool(),
                server: server(),
                message: e.message.to_string(),
            }),
            Ok(Err(ServiceError::TransportSend(_) | ServiceError::TransportClosed)) | Err(_) => {
                Err(lost())
            }
            Ok(Err(e)) => Err(CallError::Protocol {
                tool: tool(),
                server: server(),
                message: e.to_string(),
            }),
        }
    }
}

fn timeout_error(tool: &str, timeout: Duration) -> CallError {
    CallError::Timeout {
        tool: tool.to_owned(),
        ms: timeout.as_millis(),
    }
}

/// A `tools/call` result (as JSON) into the function response's value, or the error message of an
/// error result.
pub fn map_result(r: &Value) -> Result<Value, String> {
    let content = r
        .get("content")
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice);
    let text = content_text(content);
    if r.get("isError").and_then(Value::as_bool) == Some(true) {
        return Err(if text.is_empty() {
            "the tool reported an error".into()
        } else {
            text
        });
    }
    if let Some(s) = r.get("structuredContent").filter(|s| !s.is_null()) {
        return Ok(s.clone());
    }
    if let [block] = content
        && block.get("type").and_then(Value::as_str) == Some("text")
        && let Some(t) = block.get("text").and_then(Value::as_str)
        && let Ok(v @ (Value::Object(_) | Value::Array(_))) = serde_json::from_str::<Value>(t)
    {
        return Ok(v);
    }
    Ok(json!(text))
}

/// Every content block as text: text as it is, resources by their text or link, media described.
fn content_text(content: &[Value]) -> String {
    let mut parts = Vec::new();
    for b in content {
        let s = |k: &str| b.get(k).and_then(Value::as_str).unwrap_or("");
        match s("type") {
            "text" => parts.push(s("text").to_owned()),
            "image" | "audio" => parts.push(format!("[{} {}]", s("type"), s("mimeType"))),
            "resource_link" => parts.push(format!("[link {} {}]", s("name"), s("uri"))),
            "resource" => {
                let r = b.get("resource").cloned().unwrap_or(Value::Null);
                match r.get("text").and_then(Value::as_str) {
                    Some(t) => parts.push(t.to_owned()),
                    None => parts.push(format!(
                        "[resource {}]",
                        r.get("uri").and_then(Value::as_str).unwrap_or("")
                    )),
                }
            }
            other => parts.push(format!("[{other} content]")),
        }
    }
    parts.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_become_function_response_values() {
        let structured = json!({"content": [{"type": "text", "text": "{\"a\": 1}"}], "structuredContent": {"a": 1}});
        assert_eq!(map_result(&structured), Ok(json!({"a": 1})));
        let json_text = json!({"content": [{"type": "text", "text": "{\"bill\": 45.99}"}]});
        assert_eq!(map_result(&json_text), Ok(json!({"bill": 45.99})));
        let plain = json!({"content": [{"type": "text", "text": "done"}, {"type": "image", "data": "AAAA", "mimeType": "image/png"}]});
        assert_eq!(map_result(&plain), Ok(json!("done\n[image image/png]")));
        let err =
            json!({"content": [{"type": "text", "text": "no such customer"}], "isError": true});
        assert_eq!(map_result(&err), Err("no such customer".into()));
        assert_eq!(map_result(&json!({})), Ok(json!("")));
    }
}
