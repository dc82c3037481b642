//! The telephony bridges other than Twilio, each on its own WebSocket path (`/telnyx`, `/plivo`,
//! `/exotel`, `/vonage`), and every dialect by detection on the shared path [`SHARED_PATH`].
//! Capacity is checked on the upgrade (503), then the socket becomes a bridge leg and a call is
//! run between it and a fresh model session, in tasks of its own. `/twilio` ([`super::twilio`])
//! checks its signature, then runs its calls through the same `upgrade` and `run_call`: every
//! dialect's call is listed (`GET /calls`, admin), stored, counted in the metrics under its
//! dialect's leg label and reported when it ends, alike.
//!
//! Authentication: `/telnyx` checks the `x-telnyx-streaming-auth-token` header (403) when
//! `telnyx.stream_auth_token_env` names a set variable, and `/exotel` checks `Authorization:
//! Basic` (403) when `exotel.basic_auth_env` does; each is then served by [`own_auth_routes`],
//! outside the bearer-token layer (the bridge cannot send a bearer token). Every other route here
//! has no authentication of its own and is built by [`routes`], which
//! [`super::protected_routes`] places behind the bearer-token layer: each route has exactly one
//! authenticator.

use std::collections::HashMap;
use std::sync::Arc;

use std::sync::atomic::{AtomicU64, Ordering};

use axum::Router;
use axum::extract::ws::{WebSocket, WebSocketUpgrade};
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tracing::Instrument;

use super::AppState;
use super::attach::{self, CallInfo, Ran, RunError};
use super::calls::{CallSlot, FinishedCall};
use crate::leg::bridge::audio::{AudioFormat, Encoding, RATES};
use crate::leg::bridge::auth::{verify_basic, verify_telnyx_token};
use crate::leg::bridge::server::{self as bridge_leg, BridgeLegOptions};
use crate::leg::bridge::{Dialect, DialectChoice, StartInfo};

/// The shared path where the dialect is detected from the first messages.
pub const SHARED_PATH: &str = "/media-stream";

/// The routes that authenticate their upgrades themselves: `/telnyx` when a streaming token is
/// configured, `/exotel` when a Basic `KEY:TOKEN` is.
pub fn own_auth_routes(app: &AppState) -> Router<Arc<AppState>> {
    authenticated(app, true)
}

/// The bridge routes without authentication of their own: `/plivo`, `/vonage`, the shared
/// detection path, and `/telnyx`, `/exotel` when no credential is configured for them.
pub fn routes(app: &AppState) -> Router<Arc<AppState>> {
    authenticated(app, false)
        .route(Dialect::Plivo.path(), get(plivo))
        .route(Dialect::Vonage.path(), get(vonage))
        .route(SHARED_PATH, get(shared))
}

/// `/telnyx` and `/exotel`, each where its credential is configured (`with_auth`) or not.
fn authenticated(app: &AppState, with_auth: bool) -> Router<Arc<AppState>> {
    let mut r = Router::new();
    if app.telnyx_token.is_some() == with_auth {
        r = r.route(Dialect::Telnyx.path(), get(telnyx));
    }
    if app.exotel_basic.is_some() == with_auth {
        r = r.route(Dialect::Exotel.path(), get(exotel));
    }
    r
}

async fn telnyx(
    State(app): State<Arc<AppState>>,
    headers: HeaderMap,
    ws: WebSocketUpgrade,
) -> Response {
    if let Some(token) = &app.telnyx_token
        && let Err(e) = verify_telnyx_token(&headers, token)
    {
        tracing::warn!(error = %e, "refused a /telnyx upgrade");
        app.metrics.refused("credential");
        return (StatusCode::FORBIDDEN, format!("{e}\n")).into_response();
    }
    let opts = options(&app, DialectChoice::Fixed(Dialect::Telnyx));
    upgrade(app, ws, opts)
}

async fn plivo(State(app): State<Arc<AppState>>, ws: WebSocketUpgrade) -> Response {
    let opts = options(&app, DialectChoice::Fixed(Dialect::Plivo));
    upgrade(app, ws, opts)
}

/// Exotel chooses 16 or 24 kHz with `?sample-rate=` on the stream URL.
async fn exotel(
    State(app): State<Arc<AppState>>,
    Query(q): Query<HashMap<String, String>>,
    headers: HeaderMap,
    ws: WebSocketUpgrade,
) -> Response {
    if let Some(key_token) = &app.exotel_basic
        && let Err(e) = verify_basic(&headers, key_token)
    {
        tracing::warn!(error = %e, "refused an /exotel upgrade");
        app.metrics.refused("credential");
        return (StatusCode::FORBIDDEN, format!("{e}\n")).into_response();
    }
    let rate = match q.get("sample-rate").map(|r| r.parse::<u32>()) {
        None => 8000,
        Some(Ok(r)) if RATES.contains(&r) => r,
        Some(_) => {
            return (
                StatusCode::BAD_REQUEST,
                "sample-rate must be 8000, 16000 or 24000\n",
            )
                .into_response();
        }
    };
    let mut opts = options(&app, DialectChoice::Fixed(Dialect::Exotel));
    opts.stream.fallback_format = Some(AudioFormat::new(Encoding::L16Le, rate));
    upgrade(app, ws, opts)
}

async fn vonage(State(app): State<Arc<AppState>>, ws: WebSocketUpgrade) -> Response {
    let opts = options(&app, DialectChoice::Fixed(Dialect::Vonage));
    upgrade(app, ws, opts)
}

async fn shared(State(app): State<Arc<AppState>>, ws: WebSocketUpgrade) -> Response {
    let opts = options(&app, DialectChoice::Detect);
    upgrade(app, ws, opts)
}

/// The leg settings every bridge route shares: queue sizes from `[limits]`, the daemon's live
/// frame counters, Twilio's account check (for a Twilio stream, on `/twilio` or detected).
pub(super) fn options(app: &AppState, dialect: DialectChoice) -> BridgeLegOptions {
    let c = &app.loaded.config;
    let mut opts = BridgeLegOptions::new(dialect);
    opts.stream.expected_account_sid =
        (!c.twilio.account_sid.is_empty()).then(|| c.twilio.account_sid.clone());
    opts.frames = app.metrics.frames.clone();
    opts
}

/// Capacity (503), then the call in its own task, under a span of its own.
pub(super) fn upgrade(
    app: Arc<AppState>,
    ws: WebSocketUpgrade,
    opts: BridgeLegOptions,
) -> Response {
    let route = match opts.dialect {
        DialectChoice::Fixed(d) => d.path(),
        DialectChoice::Detect => SHARED_PATH,
    };
    let Some(slot) = app.calls.try_admit() else {
        return over_capacity(&app, route);
    };
    bridge_leg::configure_upgrade(ws)
        .on_upgrade(move |socket| async move {
            // One span per call: every log line of the call carries its id, and its dialect,
            // stream sid and agent once known. No caller audio and no credentials go in it.
            let call_id = NEXT_CALL.fetch_add(1, Ordering::Relaxed);
            let span = tracing::info_span!(
                "call",
                call_id,
                route,
                leg = tracing::field::Empty,
                stream_sid = tracing::field::Empty,
                call_sid = tracing::field::Empty,
                agent = tracing::field::Empty,
            );
            if let DialectChoice::Fixed(d) = opts.dialect {
                span.record("leg", d.name());
            }
            run_call(app, socket, slot, opts).instrument(span).await
        })
        .into_response()
}

/// Ids of calls in this process, for the per-call span (1, 2, ...).
static NEXT_CALL: AtomicU64 = AtomicU64::new(1);

/// A call baton cannot take: 503 **before** the upgrade (Twilio reports it as error 31920 and
/// carries on with the TwiML after `</Connect>`; the other bridges end or fail over the stream; a
/// load balancer may retry it on another instance), the reason in the body and `Retry-After`.
/// Calls in progress are never touched to make room.
pub(super) fn over_capacity(app: &AppState, route: &str) -> Response {
    super::admission::refuse(app, route)
}

/// Who is calling, as the start message names them (their agent contexts follow them across
/// calls): Twilio's custom parameter `twilio.caller_parameter` (default `From`); the `from` of
/// Telnyx's and Exotel's `start` (or a `from` custom parameter or Vonage header); none for
/// Plivo, whose `start` does not say.
fn caller(app: &AppState, start: &StartInfo) -> Option<String> {
    let key = match start.dialect {
        Dialect::Twilio => match app.loaded.config.twilio.caller_parameter.as_str() {
            "" => "From",
            p => p,
        },
        _ => "from",
    };
    start
        .custom_parameters
        .get(key)
        .filter(|v| !v.trim().is_empty())
        .cloned()
}

/// One bridge call, start to end.
pub(super) async fn run_call(
    app: Arc<AppState>,
    socket: WebSocket,
    mut slot: CallSlot,
    opts: BridgeLegOptions,
) {
    let detected = matches!(opts.dialect, DialectChoice::Detect);
    let (leg, start, leg_task) = match bridge_leg::accept(socket, opts).await {
        Ok(x) => x,
        Err(e) => {
            tracing::warn!(error = %e, "media stream ended before the call began");
            app.calls.report_finished(FinishedCall {
                stream_sid: String::new(),
                outcome: Err(e.to_string()),
            });
            return;
        }
    };
    let dialect = start.dialect;
    // The leg kind label of the call: its dialect's name.
    let leg_label = dialect.name();
    let span = tracing::Span::current();
    if detected {
        // A fixed path's dialect is in the span already (recording it again would repeat it).
        span.record("leg", leg_label);
    }
    span.record("stream_sid", start.stream_sid.as_str());
    span.record("call_sid", start.call_sid.as_deref().unwrap_or("-"));
    // Listed for GET /calls, its event stream and the admin API; a call that cannot be listed
    // still runs.
    let live = slot.go_live(leg_label, None).ok();
    if let Some(l) = &live {
        l.publish(&serde_json::json!({
            "type": "call_start", "call_id": l.id, "leg": leg_label,
            "stream_sid": start.stream_sid, "started_unix_ms": l.started_unix_ms, "at_ms": 0,
        }));
    }
    let info = CallInfo {
        leg: leg_label,
        caller: caller(&app, &start),
    };
    // A Twilio call's agents can hand the caller to a person (a REST redirect).
    let transfer = match dialect {
        Dialect::Twilio => super::twilio_transfer::transfer_port(&app, &start)
            .inspect_err(|why| tracing::debug!(%why, "this call takes no transfers to a person"))
            .ok(),
        _ => None,
    };
    let result = attach::run_call_with_transfer(
        &app,
        leg,
        info,
        live.clone(),
        slot.hangup.clone(),
        transfer,
    )
    .await;
    if let Err(e) = &result {
        super::call_log::call_not_run(&app.metrics, leg_label, e);
    }
    match result {
        Err(RunError::NoSession(e)) => {
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
            // The agents heard, in order (the span holds the last one).
            if let Some(last) = report.agents_heard().last() {
                span.record("agent", last.as_str());
            }
            // Its frames are counted live, by the leg.
            super::call_log::call_ended(
                &app.metrics,
                leg_label,
                &report,
                super::call_log::Extra {
                    call: &id,
                    context_load_ms,
                    send_intervals: stats.as_ref().map(|s| &s.send_intervals),
                    ..Default::default()
                },
            );
            app.calls.report_finished(FinishedCall {
                stream_sid: start.stream_sid.clone(),
                outcome: Ok(Arc::new(report)),
            });
        }
        Err(RunError::Failed(e)) => {
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
