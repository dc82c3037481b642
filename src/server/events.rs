//! Watching calls while they run.
//!
//! * `GET /calls` — the live calls of every instance of the cluster: `[{"id", "leg",
//!   "started_unix_ms", "duration_ms", "active_agent", "events", "instance"}]`, oldest first.
//! * `WS /calls/{id}/events` — the call's event stream, one JSON object per text message:
//!   `call_start`, then the orchestrator's events as they happen (`agent_start`,
//!   `handoff_announcement`, `handoff_complete` with its measured `gap_ms`, `tool_called`,
//!   `transcript`, `agent_end`, …; see `crate::agents::CallEvent`), then `call_end` with the
//!   call's figures, after which the server closes the socket. A subscriber that connects late
//!   first receives everything published so far. Unknown call → 404 before the upgrade; a call
//!   held by another instance → 421 naming where to connect.

use std::sync::Arc;

use axum::Router;
use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade, close_code};
use axum::extract::{Path, State};
use axum::http::StatusCode;
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
    ws: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Response {
    let Some(call) = app.calls.get(&id) else {
        // The stream comes only from the instance holding the call: say where that is.
        if let Some(c) = app.cluster.get()
            && let Ok(super::cluster::Owner::Alive(row)) = c.owner(&id).await
        {
            return (
                StatusCode::MISDIRECTED_REQUEST,
                format!(
                    "call {id} is held by instance {}: connect to {}/calls/{id}/events\n",
                    row.id,
                    super::admission::ws_url(&row.url)
                ),
            )
                .into_response();
        }
        return (StatusCode::NOT_FOUND, "no such call (it may have ended)\n").into_response();
    };
    let ws = match ws {
        Ok(ws) => ws,
        Err(rejection) => return rejection.into_response(),
    };
    // Subscribe now, so nothing published between the upgrade and the socket is missed; the
    // socket task holds only the feed, never the call.
    let (history, rx) = call.subscribe();
    drop(call);
    // A browser that sent its token as a subprotocol gets this one selected (never the token's).
    ws.protocols([PROTOCOL])
        .on_upgrade(move |socket| stream(socket, history, rx))
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
