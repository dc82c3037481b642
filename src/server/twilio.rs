//! `WS /twilio`: a Twilio Media Streams call. The signature is checked on the upgrade request
//! (403 before the upgrade), capacity is checked (503), then the socket becomes a Twilio leg and a
//! call is run between it and a fresh model session, in tasks of its own
//! ([`super::bridges::run_call`], shared with every other bridge).

use std::sync::Arc;

use axum::extract::State;
use axum::extract::ws::WebSocketUpgrade;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};

use tracing::Instrument;

use super::AppState;
use super::bridges::{admit, refuse_busy, run_call};
use crate::leg::bridge::server::{BridgeLegOptions, configure_upgrade};
use crate::leg::bridge::{Dialect, DialectChoice};
use crate::leg::twilio::signature;

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
    let Some(slot) = admit(&app) else {
        return refuse_busy(&app);
    };
    let c = &app.loaded.config;
    let mut opts = BridgeLegOptions::new(DialectChoice::Fixed(Dialect::Twilio));
    opts.stream.expected_account_sid =
        (!c.twilio.account_sid.is_empty()).then(|| c.twilio.account_sid.clone());
    opts.event_queue = c.limits.leg_queue_frames;
    opts.outbound_queue = c.limits.leg_queue_frames * 2;
    configure_upgrade(ws)
        .on_upgrade(move |socket| async move {
            let span = tracing::info_span!("twilio");
            run_call(app, socket, slot, opts).instrument(span).await
        })
        .into_response()
}
