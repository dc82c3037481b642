//! `WS /twilio`: a Twilio Media Streams call. The signature is checked on the upgrade request
//! (403 before the upgrade), capacity is checked (503), then the socket becomes a Twilio leg and a
//! call is run between it and a fresh model session, in tasks of its own.

use std::sync::Arc;

use axum::extract::State;
use axum::extract::ws::WebSocketUpgrade;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};

use tracing::Instrument;

use super::AppState;
use super::calls::CallSlot;
use super::live::{self, CallInfo, Ran};
use crate::call::metrics::summarize;
use crate::leg::twilio::server::{self as twilio_leg, TwilioLegOptions};
use crate::leg::twilio::signature;
use crate::leg::twilio::stream::StreamOptions;

/// The upgrade handler.
pub async fn upgrade(
    State(app): State<Arc<AppState>>,
    headers: HeaderMap,
    ws: WebSocketUpgrade,
) -> Response {
    if let Some(token) = &app.twilio_token
        && let Err(e) = signature::verify_upgrade(&headers, &app.stream_url, token)
    {
        tracing::warn!(error = %e, "refused a /twilio upgrade: bad X-Twilio-Signature");
        return (StatusCode::FORBIDDEN, "invalid X-Twilio-Signature\n").into_response();
    }
    let Some(slot) = app.calls.try_admit() else {
        let why = if app.calls.draining() {
            "baton is shutting down"
        } else {
            "baton is at its call limit"
        };
        tracing::warn!(active = app.calls.active(), "refused a call: {why}");
        return (StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n")).into_response();
    };
    twilio_leg::configure_upgrade(ws)
        .on_upgrade(move |socket| async move {
            let span = tracing::info_span!("twilio");
            run_call(app, socket, slot).instrument(span).await
        })
        .into_response()
}

/// One Twilio call, start to end.
async fn run_call(app: Arc<AppState>, socket: axum::extract::ws::WebSocket, slot: CallSlot) {
    let c = &app.loaded.config;
    let opts = TwilioLegOptions {
        stream: StreamOptions {
            expected_account_sid: (!c.twilio.account_sid.is_empty())
                .then(|| c.twilio.account_sid.clone()),
            ..Default::default()
        },
        event_queue: c.limits.leg_queue_frames,
        outbound_queue: c.limits.leg_queue_frames * 2,
        ..Default::default()
    };
    let (leg, start, leg_task) = match twilio_leg::accept(socket, opts).await {
        Ok(x) => x,
        Err(e) => {
            tracing::warn!(error = %e, "Twilio stream ended before the call began");
            return;
        }
    };
    tracing::info!(stream_sid = %start.stream_sid, call_sid = start.call_sid.as_deref().unwrap_or("-"), "call started");
    let param = match c.twilio.caller_parameter.as_str() {
        "" => "From",
        p => p,
    };
    let info = CallInfo {
        leg: "twilio".into(),
        caller: start
            .custom_parameters
            .get(param)
            .filter(|v| !v.trim().is_empty())
            .cloned(),
    };
    match live::run_call(&app, leg, info, Some(slot.hangup.clone())).await {
        Some(Ran {
            id,
            report,
            context_load_ms,
            ..
        }) => {
            let stats = leg_stats(leg_task).await;
            let cadence = stats.as_ref().map(|s| s.send_cadence());
            tracing::info!(
                call = %id,
                context_load_ms = ?context_load_ms,
                stream_sid = %start.stream_sid,
                turns = report.turns.len(),
                handoffs = ?report.handoffs,
                underruns = report.underruns,
                end = %report.end_reason,
                first_audio_ms = ?report.first_audio_ms,
                uplink_added_ms = ?summarize(&report.uplink_added_ms),
                downlink_added_ms = ?summarize(&report.downlink_added_ms),
                send_cadence = ?cadence,
                "call ended"
            );
        }
        None => {
            let _ = leg_stats(leg_task).await;
        }
    }
    drop(slot);
}

/// The leg's stats once its driver ends. A peer that stops reading must not hold the call slot:
/// the wait is bounded, then the driver is aborted.
async fn leg_stats<T>(task: tokio::task::JoinHandle<T>) -> Option<T> {
    let abort = task.abort_handle();
    match tokio::time::timeout(std::time::Duration::from_secs(5), task).await {
        Ok(r) => r.ok(),
        Err(_) => {
            abort.abort();
            None
        }
    }
}
