//! The tokio shell around [`RealtimeSession`]: the WebSocket handshake (path `/v1/realtime`, a
//! `model` or `call_id` query parameter, the Bearer key when the server requires one, the beta
//! header), then one loop that feeds frames and timeouts to the engine and sends what it produces
//! as text frames. Time comes from `tokio::time::Instant`, so a paused clock drives accelerated runs.

use std::sync::Arc;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::handshake::server::{ErrorResponse, Request, Response};
use tokio_tungstenite::tungstenite::http::StatusCode;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::protocol::frame::CloseFrame;

use super::engine::{MAX_APPEND_BYTES, Outgoing, RealtimeSession};
use crate::mock::server::MockOptions;
use crate::model::openai::wire::Api;

const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(30);
const CLOSE_LINGER: Duration = Duration::from_secs(5);

/// Why a handshake is refused: an HTTP status and a JSON error body like the service's.
fn refuse(status: StatusCode, code: &str, message: &str) -> ErrorResponse {
    let body = serde_json::json!({"error": {"type": "invalid_request_error", "code": code,
                                            "message": message, "param": null}});
    let mut e = ErrorResponse::new(Some(body.to_string()));
    *e.status_mut() = status;
    e
}

/// Checks one upgrade request: the dialect and the model it names, or the refusal.
#[allow(clippy::result_large_err)]
pub fn admit(req: &Request, api_key: Option<&str>) -> Result<(Api, String), ErrorResponse> {
    let path = req.uri().path().trim_end_matches('/');
    if path != "/v1/realtime" && path != "/realtime" {
        return Err(refuse(
            StatusCode::NOT_FOUND,
            "not_found",
            &format!("{path} is not a Realtime API path; connect to /v1/realtime?model=…"),
        ));
    }
    let mut model = None;
    for (k, v) in url::form_urlencoded::parse(req.uri().query().unwrap_or("").as_bytes()) {
        if k == "model" || (k == "call_id" && model.is_none()) {
            model = Some(v.into_owned());
        }
    }
    let Some(model) = model.filter(|m| !m.is_empty()) else {
        return Err(refuse(
            StatusCode::BAD_REQUEST,
            "missing_required_parameter",
            "Missing required parameter: 'model'.",
        ));
    };
    if let Some(required) = api_key {
        let presented = req
            .headers()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().strip_prefix("Bearer "))
            .map(str::trim);
        match presented {
            Some(k) if k == required => {}
            Some(_) => {
                return Err(refuse(
                    StatusCode::UNAUTHORIZED,
                    "invalid_api_key",
                    "Incorrect API key provided.",
                ));
            }
            None => {
                return Err(refuse(
                    StatusCode::UNAUTHORIZED,
                    "missing_api_key",
                    "You didn't provide an API key. Provide it in an Authorization header (Bearer auth).",
                ));
            }
        }
    }
    let beta = req
        .headers()
        .get("openai-beta")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|p| p.trim() == "realtime=v1"));
    Ok((if beta { Api::Beta } else { Api::Ga }, model))
}

/// Serves one connection of the OpenAI profile until either side closes.
pub async fn serve_connection<S>(stream: S, opts: Arc<MockOptions>)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let lifetime = opts
        .openai
        .as_ref()
        .map_or(super::DEFAULT_LIFETIME, |o| o.lifetime);
    let mut admitted = None;
    #[allow(clippy::result_large_err)]
    let callback = |req: &Request, resp: Response| -> Result<Response, ErrorResponse> {
        admitted = Some(admit(req, opts.api_key.as_deref())?);
        Ok(resp)
    };
    let config = WebSocketConfig::default()
        .read_buffer_size(crate::mock::server::READ_BUFFER_BYTES)
        .max_message_size(Some(MAX_APPEND_BYTES + 64 * 1024))
        .max_frame_size(Some(MAX_APPEND_BYTES + 64 * 1024));
    let handshake = tokio_tungstenite::accept_hdr_async_with_config(stream, callback, Some(config));
    let mut ws = match tokio::time::timeout(HANDSHAKE_TIMEOUT, handshake).await {
        Ok(Ok(ws)) => ws,
        Ok(Err(e)) => {
            tracing::debug!(error = %e, "WebSocket handshake refused");
            return;
        }
        Err(_) => return,
    };
    let Some((api, model)) = admitted else {
        return;
    };
    let mut session = RealtimeSession::new(opts.scenario.clone(), api, &model, lifetime);
    session.start(tokio::time::Instant::now().into_std());
    loop {
        let mut wrote = false;
        while let Some(out) = session.poll_transmit() {
            match out {
                Outgoing::Event(v) => {
                    if ws.feed(Message::text(v.to_string())).await.is_err() {
                        return;
                    }
                    wrote = true;
                }
                Outgoing::Close { code, reason } => {
                    let frame = CloseFrame {
                        code: code.into(),
                        reason: reason.into(),
                    };
                    let _ = ws.close(Some(frame)).await;
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
        tokio::select! {
            incoming = ws.next() => {
                let now = tokio::time::Instant::now().into_std();
                match incoming {
                    Some(Ok(Message::Text(t))) => {
                        if let Some(r) = &opts.record { r.record(t.as_bytes()); }
                        session.handle_frame(t.as_bytes(), now);
                    }
                    Some(Ok(Message::Binary(b))) => {
                        if let Some(r) = &opts.record { r.record(&b); }
                        session.handle_frame(&b, now);
                    }
                    Some(Ok(Message::Ping(_) | Message::Pong(_) | Message::Frame(_))) => {}
                    Some(Ok(Message::Close(_))) | None | Some(Err(_)) => return,
                }
            }
            () = sleep_until(deadline) => {
                session.handle_timeout(tokio::time::Instant::now().into_std());
            }
        }
    }
}

async fn sleep_until(deadline: Option<std::time::Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(tokio::time::Instant::from_std(d)).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(uri: &str, headers: &[(&str, &str)]) -> Request {
        let mut b = Request::builder().uri(uri);
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        b.body(()).unwrap()
    }

    #[test]
    fn admission() {
        let ok = admit(&req("/v1/realtime?model=gpt-realtime", &[]), None).unwrap();
        assert_eq!(ok, (Api::Ga, "gpt-realtime".to_owned()));
        let beta = admit(
            &req("/v1/realtime?model=m", &[("OpenAI-Beta", "realtime=v1")]),
            None,
        )
        .unwrap();
        assert_eq!(beta.0, Api::Beta);
        assert_eq!(
            admit(&req("/v1/other?model=m", &[]), None)
                .unwrap_err()
                .status(),
            StatusCode::NOT_FOUND
        );
        assert_eq!(
            admit(&req("/v1/realtime", &[]), None).unwrap_err().status(),
            StatusCode::BAD_REQUEST
        );
        let key = Some("sk-test");
        assert!(
            admit(
                &req(
                    "/v1/realtime?model=m",
                    &[("authorization", "Bearer sk-test")]
                ),
                key
            )
            .is_ok()
        );
        let wrong = admit(
            &req("/v1/realtime?model=m", &[("authorization", "Bearer guess")]),
            key,
        )
        .unwrap_err();
        assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED);
        assert!(!wrong.body().as_deref().unwrap_or("").contains("guess"));
        assert_eq!(
            admit(&req("/v1/realtime?model=m", &[]), key)
                .unwrap_err()
                .status(),
            StatusCode::UNAUTHORIZED
        );
    }
}
