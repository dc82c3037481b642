//! The telephony bridges other than Twilio, each on its own WebSocket path (`/telnyx`, `/plivo`,
//! `/exotel`, `/vonage`), and every dialect by detection on the shared path [`SHARED_PATH`].
//! Capacity is checked on the upgrade (503), then the socket becomes a bridge leg and a call is
//! run between it and a fresh model session, in tasks of its own — the same as `/twilio`.
//!
//! Authentication: `/telnyx` checks the `x-telnyx-streaming-auth-token` header (403) when
//! `telnyx.stream_auth_token_env` names a set variable, and `/exotel` checks `Authorization:
//! Basic` (403) when `exotel.basic_auth_env` does; each is then served by [`own_auth_routes`].
//! Every other route here has no authentication of its own and is built by [`routes`], so that it
//! can be placed behind the daemon's bearer-token layer.

use std::collections::HashMap;
use std::sync::Arc;

use axum::Router;
use axum::extract::ws::{WebSocket, WebSocketUpgrade};
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tracing::Instrument;

use super::AppState;
use super::calls::CallSlot;
use crate::call::metrics::summarize;
use crate::call::{self, CallOptions};
use crate::leg::LegCommand;
use crate::leg::bridge::audio::{AudioFormat, Encoding, RATES};
use crate::leg::bridge::auth::{verify_basic, verify_telnyx_token};
use crate::leg::bridge::server::{self as bridge_leg, BridgeLegOptions};
use crate::leg::bridge::{Dialect, DialectChoice};

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
        return (StatusCode::FORBIDDEN, format!("{e}\n")).into_response();
    }
    upgrade(app, ws, DialectChoice::Fixed(Dialect::Telnyx), None)
}

async fn plivo(State(app): State<Arc<AppState>>, ws: WebSocketUpgrade) -> Response {
    upgrade(app, ws, DialectChoice::Fixed(Dialect::Plivo), None)
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
    let format = AudioFormat::new(Encoding::L16Le, rate);
    upgrade(app, ws, DialectChoice::Fixed(Dialect::Exotel), Some(format))
}

async fn vonage(State(app): State<Arc<AppState>>, ws: WebSocketUpgrade) -> Response {
    upgrade(app, ws, DialectChoice::Fixed(Dialect::Vonage), None)
}

async fn shared(State(app): State<Arc<AppState>>, ws: WebSocketUpgrade) -> Response {
    upgrade(app, ws, DialectChoice::Detect, None)
}

/// Capacity (503), then the call in its own task.
fn upgrade(
    app: Arc<AppState>,
    ws: WebSocketUpgrade,
    dialect: DialectChoice,
    fallback: Option<AudioFormat>,
) -> Response {
    let Some(slot) = admit(&app) else {
        return refuse_busy(&app);
    };
    let c = &app.loaded.config;
    let mut opts = BridgeLegOptions::new(dialect);
    opts.stream.fallback_format = fallback;
    opts.event_queue = c.limits.leg_queue_frames;
    opts.outbound_queue = c.limits.leg_queue_frames * 2;
    let name = match dialect {
        DialectChoice::Fixed(d) => d.name(),
        DialectChoice::Detect => "detect",
    };
    bridge_leg::configure_upgrade(ws)
        .on_upgrade(move |socket| async move {
            let span = tracing::info_span!("bridge", route = name);
            run_call(app, socket, slot, opts).instrument(span).await
        })
        .into_response()
}

pub(super) fn admit(app: &AppState) -> Option<CallSlot> {
    app.calls.try_admit()
}

pub(super) fn refuse_busy(app: &AppState) -> Response {
    let why = if app.calls.draining() {
        "baton is shutting down"
    } else {
        "baton is at its call limit"
    };
    tracing::warn!(active = app.calls.active(), "refused a call: {why}");
    (StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n")).into_response()
}

/// One bridge call, start to end.
pub(super) async fn run_call(
    app: Arc<AppState>,
    socket: WebSocket,
    slot: CallSlot,
    opts: BridgeLegOptions,
) {
    let (leg, start, leg_task) = match bridge_leg::accept(socket, opts).await {
        Ok(x) => x,
        Err(e) => {
            tracing::warn!(error = %e, "media stream ended before the call began");
            return;
        }
    };
    let dialect = start.dialect;
    tracing::info!(%dialect, stream_sid = %start.stream_sid, call_sid = start.call_sid.as_deref().unwrap_or("-"), "call started");
    let (session, agents) = match app.open_call().await {
        Ok(x) => x,
        Err(e) => {
            tracing::error!(stream_sid = %start.stream_sid, error = %e, "cannot open the model session; hanging up");
            let _ = leg.commands.send(LegCommand::Hangup);
            drop(leg);
            let _ = leg_stats(leg_task).await;
            return;
        }
    };
    let opts = CallOptions {
        hangup: Some(slot.hangup.clone()),
        ..Default::default()
    };
    match call::run_with_agents(leg, session, opts, agents).await {
        Ok(report) => {
            let stats = leg_stats(leg_task).await;
            let cadence = stats.as_ref().map(|s| s.send_cadence());
            tracing::info!(
                %dialect,
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
        Err(e) => tracing::error!(stream_sid = %start.stream_sid, error = %e, "call failed"),
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
