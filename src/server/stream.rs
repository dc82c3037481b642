//! `WS /stream`: the generic WebSocket leg for apps. Capacity is checked before the upgrade
//! (503), then the socket becomes a stream leg and a call runs between it and a fresh model
//! session in tasks of its own; transcript fragments are forwarded live and the last `stop`
//! carries the call's summary.
//!
//! [`routes`] is its own router so it can be placed behind an authentication layer.

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::extract::ws::{WebSocket, WebSocketUpgrade};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tracing::Instrument;

use super::AppState;
use super::calls::CallSlot;
use super::transcripts;
use crate::call::metrics::summarize;
use crate::call::{self, CallOptions};
use crate::leg::LegCommand;
use crate::leg::stream::ToClient;
use crate::leg::stream::server::{self as leg, Notice, StreamLegOptions};

/// The `/stream` route.
pub fn routes() -> Router<Arc<AppState>> {
    Router::new().route("/stream", get(upgrade))
}

async fn upgrade(State(app): State<Arc<AppState>>, ws: WebSocketUpgrade) -> Response {
    let Some(slot) = app.calls.try_admit() else {
        let why = if app.calls.draining() {
            "baton is shutting down"
        } else {
            "baton is at its call limit"
        };
        tracing::warn!(active = app.calls.active(), "refused a /stream call: {why}");
        return (StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n")).into_response();
    };
    leg::configure_upgrade(ws)
        .on_upgrade(move |socket| async move {
            let span = tracing::info_span!("stream");
            run_call(app, socket, slot).instrument(span).await
        })
        .into_response()
}

async fn run_call(app: Arc<AppState>, socket: WebSocket, slot: CallSlot) {
    let lim = &app.loaded.config.limits;
    let opts = StreamLegOptions {
        event_queue: lim.leg_queue_frames,
        outbound_queue: lim.leg_queue_frames,
        ..Default::default()
    };
    let stream = match leg::accept(socket, opts).await {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "stream ended before the call began");
            return;
        }
    };
    let (mut session, agents) = match app.open_call().await {
        Ok(x) => x,
        Err(e) => {
            tracing::error!(error = %e, "cannot open the model session; hanging up");
            let _ = stream.notices.send(Notice::Finish {
                reason: format!("the model session could not be opened: {e}"),
                summary: serde_json::Value::Null,
            });
            let _ = stream.handle.commands.send(LegCommand::Hangup);
            drop(stream.handle);
            let _ = tokio::time::timeout(std::time::Duration::from_secs(5), stream.task).await;
            return;
        }
    };
    let mut fragments = transcripts::tap(&mut session);
    let notices = stream.notices.clone();
    let forward = tokio::spawn(async move {
        while let Some(f) = fragments.recv().await {
            let n = Notice::Event(ToClient::Transcript {
                role: f.role,
                text: f.text,
                finished: f.finished,
            });
            if notices.send(n).is_err() {
                break;
            }
        }
    });
    let opts = CallOptions {
        hangup: Some(slot.hangup.clone()),
        ..Default::default()
    };
    let format = stream.format;
    match call::run_with_agents(stream.handle, session, opts, agents).await {
        Ok(report) => {
            let _ = stream.notices.send(Notice::Finish {
                reason: report.end_reason.clone(),
                summary: transcripts::summary(&report),
            });
            let stats = tokio::time::timeout(std::time::Duration::from_secs(5), stream.task)
                .await
                .ok()
                .and_then(Result::ok);
            tracing::info!(
                %format,
                turns = report.turns.len(),
                underruns = report.underruns,
                end = %report.end_reason,
                uplink_added_ms = ?summarize(&report.uplink_added_ms),
                downlink_added_ms = ?summarize(&report.downlink_added_ms),
                marks_played = stats.as_ref().map_or(0, |s| s.stream.marks_played),
                send_cadence = ?stats.as_ref().map(|s| s.send_cadence()),
                "call ended"
            );
        }
        Err(e) => tracing::error!(error = %e, "call failed"),
    }
    forward.abort();
    drop(slot);
}
