//! `WS /twilio`: a Twilio Media Streams call. The signature is checked on the upgrade request
//! (403 before the upgrade), capacity is checked (503 with the reason), then the socket becomes a Twilio leg and a
//! call is run between it and a fresh model session, in tasks of its own.

use std::sync::Arc;

use axum::extract::State;
use axum::extract::ws::WebSocketUpgrade;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};

use std::sync::atomic::{AtomicU64, Ordering};

use tracing::Instrument;

use super::AppState;
use super::attach::{self, CallInfo, Ran, RunError};
use super::calls::{CallSlot, FinishedCall};
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
        app.metrics.refused("signature");
        return (StatusCode::FORBIDDEN, "invalid X-Twilio-Signature\n").into_response();
    }
    let Some(slot) = app.calls.try_admit() else {
        return over_capacity(&app);
    };
    twilio_leg::configure_upgrade(ws)
        .on_upgrade(move |socket| async move {
            // One span per call: every log line of the call carries its id, and its stream sid
            // and agent once known. No caller audio and no credentials go in it.
            let call_id = NEXT_CALL.fetch_add(1, Ordering::Relaxed);
            let span = tracing::info_span!(
                "call",
                call_id,
                leg = "twilio",
                stream_sid = tracing::field::Empty,
                call_sid = tracing::field::Empty,
                agent = tracing::field::Empty,
            );
            run_call(app, socket, slot).instrument(span).await
        })
        .into_response()
}

/// Ids of calls in this process, for the per-call span (1, 2, ...).
static NEXT_CALL: AtomicU64 = AtomicU64::new(1);

/// A call baton cannot take: 503 **before** the upgrade (Twilio reports it as error 31920 and
/// carries on with the TwiML after `</Connect>`), the reason in the body and `Retry-After`. Calls
/// in progress are never touched to make room.
fn over_capacity(app: &AppState) -> Response {
    let why = if app.calls.draining() {
        "baton is shutting down; try again later".to_owned()
    } else {
        format!(
            "baton is at its call limit ({} calls, limits.max_calls); try again later",
            app.calls.max()
        )
    };
    tracing::warn!(active = app.calls.active(), "refused a call: {why}");
    app.metrics.refused(if app.calls.draining() {
        "draining"
    } else {
        "capacity"
    });
    (
        StatusCode::SERVICE_UNAVAILABLE,
        [(axum::http::header::RETRY_AFTER, "5")],
        format!("{why}\n"),
    )
        .into_response()
}

/// One Twilio call, start to end.
async fn run_call(app: Arc<AppState>, socket: axum::extract::ws::WebSocket, mut slot: CallSlot) {
    let c = &app.loaded.config;
    let opts = TwilioLegOptions {
        stream: StreamOptions {
            expected_account_sid: (!c.twilio.account_sid.is_empty())
                .then(|| c.twilio.account_sid.clone()),
            ..Default::default()
        },
        event_queue: c.limits.leg_queue_frames,
        outbound_queue: c.limits.leg_queue_frames * 2,
        frames_in: app.metrics.twilio_frames_in.clone(),
        frames_out: app.metrics.twilio_frames_out.clone(),
        ..Default::default()
    };
    let (leg, start, leg_task) = match twilio_leg::accept(socket, opts).await {
        Ok(x) => x,
        Err(e) => {
            tracing::warn!(error = %e, "Twilio stream ended before the call began");
            app.calls.report_finished(FinishedCall {
                stream_sid: String::new(),
                outcome: Err(e.to_string()),
            });
            return;
        }
    };
    let span = tracing::Span::current();
    span.record("stream_sid", start.stream_sid.as_str());
    span.record("call_sid", start.call_sid.as_deref().unwrap_or("-"));
    // Listed for GET /calls, its event stream and the admin API; a call that cannot be listed
    // still runs.
    let live = slot.go_live(LEG, None).ok();
    if let Some(l) = &live {
        l.publish(&serde_json::json!({
            "type": "call_start", "call_id": l.id, "leg": LEG,
            "stream_sid": start.stream_sid, "started_unix_ms": l.started_unix_ms, "at_ms": 0,
        }));
    }
    let param = match c.twilio.caller_parameter.as_str() {
        "" => "From",
        p => p,
    };
    let info = CallInfo {
        leg: LEG,
        caller: start
            .custom_parameters
            .get(param)
            .filter(|v| !v.trim().is_empty())
            .cloned(),
    };
    match attach::run_call(&app, leg, info, live.clone(), slot.hangup.clone()).await {
        Err(RunError::NoSession(e)) => {
            app.metrics.session_open_failed(LEG);
            let _ = leg_stats(leg_task).await;
            app.calls.report_finished(FinishedCall {
                stream_sid: start.stream_sid.clone(),
                outcome: Err(e.to_string()),
            });
            if let Some(l) = &live {
                super::live::publish_end(l, "no model session", serde_json::Value::Null);
            }
        }
        Ok(Ran {
            id,
            report,
            context_load_ms,
            ..
        }) => {
            if let Some(l) = &live {
                super::live::publish_end(l, &report.end_reason, super::live::figures(&report));
            }
            let stats = leg_stats(leg_task).await;
            let cadence = stats.as_ref().map(|s| s.send_cadence());
            let intervals = stats.as_ref().map_or(&[][..], |s| &s.send_intervals_us[..]);
            app.metrics.call_ended(LEG, &report, intervals);
            // The agents heard, in order (the span holds the last one).
            let agents_heard = agent_names(&report.agent_history);
            if let Some(last) = agents_heard.last() {
                span.record("agent", last.as_str());
            }
            tracing::info!(
                call = %id,
                context_load_ms = ?context_load_ms,
                stream_sid = %start.stream_sid,
                agents = ?agents_heard,
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
            app.calls.report_finished(FinishedCall {
                stream_sid: start.stream_sid.clone(),
                outcome: Ok(Arc::new(report)),
            });
        }
        Err(RunError::Failed(e)) => {
            app.metrics.call_failed(LEG);
            tracing::error!(stream_sid = %start.stream_sid, error = %e, "call failed");
            app.calls.report_finished(FinishedCall {
                stream_sid: start.stream_sid.clone(),
                outcome: Err(e.to_string()),
            });
            if let Some(l) = &live {
                super::live::publish_end(l, &format!("call failed: {e}"), serde_json::Value::Null);
            }
        }
    }
    drop(slot);
}

/// The leg kind label of this module's calls.
const LEG: &str = "twilio";

/// The agent names of a report's `agent_history`, in activation order.
fn agent_names(history: &serde_json::Value) -> Vec<String> {
    history
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|h| h.get("agent").and_then(|n| n.as_str()).map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// The leg's stats once its driver ends. A peer that stops reading must not hold the call slot:
/// the wait is bounded, then the driver is aborted.
pub(super) async fn leg_stats<T>(task: tokio::task::JoinHandle<T>) -> Option<T> {
    let abort = task.abort_handle();
    match tokio::time::timeout(std::time::Duration::from_secs(5), task).await {
        Ok(r) => r.ok(),
        Err(_) => {
            abort.abort();
            None
        }
    }
}
