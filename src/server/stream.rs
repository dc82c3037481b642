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
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tracing::Instrument;

use super::AppState;
use super::attach::{self, CallInfo, Ran, RunError};
use super::calls::CallSlot;
use super::transcripts;
use crate::leg::stream::ToClient;
use crate::leg::stream::server::{self as leg, Notice, StreamLegOptions};

/// The leg kind label of this module's calls.
const LEG: &str = "stream";

/// The subprotocol of `/stream` (selected when the client offers it).
pub const PROTOCOL: &str = "baton.stream";

/// The `/stream` route.
pub fn routes() -> Router<Arc<AppState>> {
    Router::new().route("/stream", get(upgrade))
}

async fn upgrade(State(app): State<Arc<AppState>>, ws: WebSocketUpgrade) -> Response {
    let Some(slot) = app.calls.try_admit() else {
        return super::admission::refuse(&app, "/stream");
    };
    // A browser that sent its token as a subprotocol gets `baton.stream` selected.
    leg::configure_upgrade(ws)
        .protocols([PROTOCOL])
        .on_upgrade(move |socket| async move {
            let span = tracing::info_span!("stream");
            run_call(app, socket, slot).instrument(span).await
        })
        .into_response()
}

async fn run_call(app: Arc<AppState>, socket: WebSocket, slot: CallSlot) {
    let stream = match leg::accept(socket, StreamLegOptions::default()).await {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "stream ended before the call began");
            return;
        }
    };
    let mut slot = slot;
    // Listed for GET /calls, its event stream and the admin API.
    let live = slot.go_live(LEG, None).ok();
    if let Some(l) = &live {
        l.publish(&serde_json::json!({
            "type": "call_start", "call_id": l.id, "leg": LEG,
            "started_unix_ms": l.started_unix_ms, "at_ms": 0,
        }));
    }
    // Transcript fragments go to the client as they come: tapped from the session before the
    // call takes it.
    let forward = std::sync::Mutex::new(None);
    let notices = stream.notices.clone();
    let open = async {
        let (mut session, agents) = app.open_call(None).await?;
        let mut fragments = transcripts::tap(&mut session);
        let task = tokio::spawn(async move {
            while let Some(f) = fragments.recv().await {
                let n = Notice::Event(ToClient::Transcript {
                    role: f.role,
                    text: f.text,
                    finished: f.finished,
                });
                if notices.send(n).await.is_err() {
                    break;
                }
            }
        });
        if let Ok(mut g) = forward.lock() {
            *g = Some(task);
        }
        Ok((session, agents))
    };
    let info = CallInfo {
        leg: LEG,
        caller: None,
    };
    let format = stream.format;
    let result = attach::run_call_opening(
        &app,
        Box::pin(open),
        stream.handle,
        info,
        live.clone(),
        slot.hangup.clone(),
    )
    .await;
    let end = |reason: &str, figures| {
        if let Some(l) = &live {
            super::live::publish_end(l, reason, figures);
        }
    };
    if let Err(e) = &result {
        super::call_log::call_not_run(&app.metrics, LEG, e);
    }
    match result {
        Ok(Ran { report, id, .. }) => {
            end(&report.end_reason, super::live::figures(&report));
            finish(
                &stream.notices,
                Notice::Finish {
                    reason: report.end_reason.clone(),
                    summary: transcripts::summary(&report),
                },
            )
            .await;
            let stats = tokio::time::timeout(std::time::Duration::from_secs(5), stream.task)
                .await
                .ok()
                .and_then(Result::ok);
            let format = format.to_string();
            super::call_log::call_ended(
                &app.metrics,
                LEG,
                &report,
                super::call_log::Extra {
                    call: &id,
                    send_intervals: stats.as_ref().map(|s| &s.send_intervals),
                    frames: stats
                        .as_ref()
                        .map(|s| (s.stream.frames_in, s.stream.frames_out)),
                    format: Some(&format),
                    marks_played: Some(stats.as_ref().map_or(0, |s| s.stream.marks_played)),
                    ..Default::default()
                },
            );
        }
        Err(RunError::NoSession(e)) => {
            end(&format!("no model session: {e}"), serde_json::Value::Null);
            finish(
                &stream.notices,
                Notice::Finish {
                    reason: format!("the model session could not be opened: {e}"),
                    summary: serde_json::Value::Null,
                },
            )
            .await;
            let _ = tokio::time::timeout(std::time::Duration::from_secs(5), stream.task).await;
        }
        Err(RunError::Failed(e)) => {
            end(&format!("call failed: {e}"), serde_json::Value::Null);
        }
    }
    if let Some(f) = forward.lock().ok().and_then(|mut g| g.take()) {
        f.abort();
    }
    drop(slot);
}

/// Hands the leg's closing task the call's last notice; it waits for it only briefly, so
/// neither does this.
async fn finish(notices: &tokio::sync::mpsc::Sender<Notice>, last: Notice) {
    let _ = tokio::time::timeout(std::time::Duration::from_secs(2), notices.send(last)).await;
}
