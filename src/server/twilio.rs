//! `WS /twilio`: a Twilio Media Streams call. The signature is checked on the upgrade request
//! (403 before the upgrade), capacity is checked (503 with the reason), then the socket becomes a
//! Twilio leg and a call is run between it and a fresh model session, in tasks of its own
//! (`super::bridges::run_call`, shared with every other bridge).

use std::sync::Arc;

use axum::extract::State;
use axum::extract::ws::WebSocketUpgrade;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};

use super::AppState;
use super::bridges;
use crate::leg::bridge::{Dialect, DialectChoice};
use crate::leg::twilio::signature;

/// The upgrade handler.
pub async fn upgrade(
    State(app): State<Arc<AppState>>,
    headers: HeaderMap,
    ws: WebSocketUpgrade,
) -> Response {
    // Twilio signs the URL it was given: the public one, or this instance's own when the
    // answer document placed the call here (`cluster.advertise_url`).
    if let Some(token) = &app.twilio_token
        && let Err(e) = signature::verify_upgrade(&headers, &app.stream_url, token).or_else(|e| {
            let own = format!(
                "{}/twilio",
                super::admission::ws_url(&app.loaded.advertise_url())
            );
            if own == app.stream_url {
                Err(e)
            } else {
                signature::verify_upgrade(&headers, &own, token)
            }
        })
    {
        tracing::warn!(error = %e, "refused a /twilio upgrade: bad X-Twilio-Signature");
        app.metrics.refused("signature");
        return (StatusCode::FORBIDDEN, "invalid X-Twilio-Signature\n").into_response();
    }
    let opts = bridges::options(&app, DialectChoice::Fixed(Dialect::Twilio));
    bridges::upgrade(app, ws, opts)
}
