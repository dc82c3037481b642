//! Watching calls while they run.
//!
//! * `GET /calls` — the live calls of every instance of the cluster: `[{"id", "leg",
//!   "started_unix_ms", "duration_ms", "active_agent", "active_agent_id", "events", "instance"}]`, oldest first.
//! * `WS /calls/{id}/events` — the call's event stream, one JSON object per text message:
//!   `call_start`, then the orchestrator's events as they happen (`agent_start`,
//!   `handoff_announcement`, `handoff_complete` with its measured `gap_ms`, `tool_called`,
//!   `tool_failed`,
//!   `transcript`, `agent_end`, …; see `crate::agents::CallEvent`), then `call_end` with the
//!   call's figures, after which the server closes the socket. A subscriber that connects late
//!   first receives everything published so far. Unknown call → 404 before the upgrade. A call
//!   held by another instance of the cluster is relayed from it: this instance opens the same
//!   stream on the owner (with the client's own credential) and passes every message on; if the
//!   owner cannot be reached, 502 before the upgrade, naming it. A plain GET (no upgrade) for such
//!   a call → 421 naming where it is held.

use std::sync::Arc;

use axum::Router;
use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade, close_code};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use futures_util::{SinkExt, StreamExt};
use tokio::sync::broadcast;

use super::AppState;

/// The subprotocol of the event stream (selected when the client offers it).
pub const PROTOCOL: &str = "baton.events";

/// The event routes, to be merged into the server's router (behind its auth layer, if any).
pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/calls", get(list))
        .route("/calls/{id}/events", get(events))
}

/// Every instance's live calls (each names its `instance`).
async fn list(State(app): State<Arc<AppState>>) -> Response {
    let (calls, _) = super::admin::cluster_list(&app, false).await;
    axum::Json(calls).into_response()
}

async fn events(
    State(app): State<Arc<AppState>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    ws: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Response {
    let Some(call) = app.calls.get(&id) else {
        // Held by another instance: relayed from it.
        if let Some(c) = app.cluster.get()
            && let Ok(super::cluster::Owner::Alive(row)) = c.owner(&id).await
        {
            let url = format!("{}/calls/{id}/events", super::admission::ws_url(&row.url));
            let Ok(ws) = ws else {
                return refuse(
                    StatusCode::MISDIRECTED_REQUEST,
                    format!(
                        "call {id} is held by instance {}: open a WebSocket to {url}",
                        row.id
                    ),
                );
            };
            return match open_upstream(&url, &headers).await {
                Ok(upstream) => ws
                    .protocols([PROTOCOL])
                    .on_upgrade(move |socket| relay(socket, upstream)),
                Err(why) => refuse(
                    StatusCode::BAD_GATEWAY,
                    format!(
                        "call {id} is held by instance {}, whose event stream could not be \
                         opened: {why}; try again, or read GET /admin/calls/{id}/events",
                        row.id
                    ),
                ),
            };
        }
        return refuse(
            StatusCode::NOT_FOUND,
            format!(
                "no live call {id:?} (it may have ended: GET /admin/calls/{id} has it from the \
                 store; GET /calls lists the live ones)"
            ),
        );
    };
    let ws = match ws {
        Ok(ws) => ws,
        Err(rejection) => {
            return refuse(
                rejection.status(),
                format!(
                    "{rejection}: this is a WebSocket (subprotocol {PROTOCOL:?}); the events so \
                     far are at GET /admin/calls/{id}/events"
                ),
            );
        }
    };
    // Subscribe now, so nothing published between the upgrade and the socket is missed; the
    // socket task holds only the feed, never the call.
    let (history, rx) = call.subscribe();
    drop(call);
    // A browser that sent its token as a subprotocol gets this one selected (never the token's).
    ws.protocols([PROTOCOL])
        .on_upgrade(move |socket| stream(socket, history, rx))
}

/// A JSON refusal (`{"error": …}`), as every protected route answers.
fn refuse(status: StatusCode, error: String) -> Response {
    (status, axum::Json(serde_json::json!({ "error": error }))).into_response()
}

type Upstream =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// How long opening the owner's stream may take before the client is told it failed.
const UPSTREAM_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Opens the owner instance's event stream with the client's own credential (its
/// `Authorization` header or bearer subprotocol: the cluster's instances share their tokens).
/// The error names what failed, never the credential.
async fn open_upstream(url: &str, headers: &HeaderMap) -> Result<Upstream, String> {
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    let mut request = url.into_client_request().map_err(|e| e.to_string())?;
    for name in [header::AUTHORIZATION, header::SEC_WEBSOCKET_PROTOCOL] {
        if let Some(v) = headers.get(&name) {
            request.headers_mut().insert(name, v.clone());
        }
    }
    if !request
        .headers()
        .contains_key(header::SEC_WEBSOCKET_PROTOCOL)
    {
        request.headers_mut().insert(
            header::SEC_WEBSOCKET_PROTOCOL,
            header::HeaderValue::from_static(PROTOCOL),
        );
    }
    match tokio::time::timeout(UPSTREAM_TIMEOUT, tokio_tungstenite::connect_async(request)).await {
        Ok(Ok((ws, _))) => Ok(ws),
        Ok(Err(tokio_tungstenite::tungstenite::Error::Http(r))) => {
            Err(format!("it answered HTTP {}", r.status()))
        }
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("no answer within {UPSTREAM_TIMEOUT:?}")),
    }
}

/// Passes the owner's messages on to the client until either side ends; the owner's close
/// (with its reason) is passed on too.
async fn relay(socket: WebSocket, upstream: Upstream) {
    use tokio_tungstenite::tungstenite::Message as Up;
    let (mut sink, mut incoming) = socket.split();
    let (mut up_sink, mut up) = upstream.split();
    loop {
        tokio::select! {
            m = up.next() => match m {
                Some(Ok(Up::Text(t))) => {
                    if sink.send(Message::Text(t.as_str().into())).await.is_err() {
                        break;
                    }
                }
                Some(Ok(Up::Close(frame))) => {
                    let frame = frame.map(|f| CloseFrame {
                        code: f.code.into(),
                        reason: f.reason.as_str().into(),
                    });
                    let _ = sink.send(Message::Close(frame)).await;
                    return;
                }
                Some(Ok(_)) => {}
                Some(Err(_)) | None => {
                    let frame = CloseFrame {
                        code: close_code::AWAY,
                        reason: "the instance holding the call went away".into(),
                    };
                    let _ = sink.send(Message::Close(Some(frame))).await;
                    return;
                }
            },
            m = incoming.next() => match m {
                Some(Ok(Message::Close(_))) | None | Some(Err(_)) => break,
                Some(Ok(_)) => {}
            },
        }
    }
    let _ = up_sink.close().await;
}

async fn stream(socket: WebSocket, history: Vec<Arc<str>>, mut rx: broadcast::Receiver<Arc<str>>) {
    let (mut sink, mut incoming) = socket.split();
    for line in history {
        if sink
            .send(Message::Text(line.as_ref().into()))
            .await
            .is_err()
        {
            return;
        }
    }
    loop {
        tokio::select! {
            msg = rx.recv() => match msg {
                Ok(line) => {
                    if sink.send(Message::Text(line.as_ref().into())).await.is_err() {
                        return;
                    }
                }
                Err(broadcast::error::RecvError::Lagged(n)) => {
                    let notice = serde_json::json!({"type": "lagged", "missed": n});
                    if sink.send(Message::Text(notice.to_string().into())).await.is_err() {
                        return;
                    }
                }
                Err(broadcast::error::RecvError::Closed) => break,
            },
            m = incoming.next() => match m {
                // The stream is one-way; whatever the client sends is ignored.
                Some(Ok(Message::Close(_))) | None | Some(Err(_)) => return,
                Some(Ok(_)) => {}
            },
        }
    }
    let frame = CloseFrame {
        code: close_code::NORMAL,
        reason: "call ended".into(),
    };
    let _ = sink.send(Message::Close(Some(frame))).await;
}
