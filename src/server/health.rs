//! Probes, open to load balancers and orchestrators: `GET /livez` (the process answers: 200 for
//! as long as it serves, through a drain too), `GET /readyz` (a new call would be taken here: 200,
//! else 503 with `draining` or `full`), and `GET /healthz` (200 with the instance's state and
//! load, for people and older probes; 200 during a drain too, so a drain is never mistaken for a
//! dead process).

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::json;

use super::AppState;

/// Paths of the probes (the Kubernetes manifests and the systemd unit name them too).
pub const LIVEZ: &str = "/livez";
pub const READYZ: &str = "/readyz";
pub const HEALTHZ: &str = "/healthz";

/// The probe routes (no authentication: see [`super::router`]).
pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route(LIVEZ, get(livez))
        .route(READYZ, get(readyz))
        .route(HEALTHZ, get(healthz))
}

fn state_word(app: &AppState) -> &'static str {
    match app.calls.unready() {
        None => "ready",
        Some(u) => u.as_str(),
    }
}

async fn livez() -> Response {
    axum::Json(json!({ "status": "live" })).into_response()
}

async fn readyz(State(app): State<Arc<AppState>>) -> Response {
    let body = json!({
        "status": state_word(&app),
        "active_calls": app.calls.active(),
        "max_calls": app.calls.max(),
    });
    let code = if app.calls.unready().is_none() {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (code, axum::Json(body)).into_response()
}

async fn healthz(State(app): State<Arc<AppState>>) -> Response {
    let status = if app.calls.draining() {
        "draining"
    } else {
        "ok"
    };
    let mut body = json!({
        "status": status,
        "ready": app.calls.unready().is_none(),
        "active_calls": app.calls.active(),
        "max_calls": app.calls.max(),
    });
    if let Some(c) = app.cluster.get() {
        body["instance"] = json!(c.id());
    }
    if let Some(hub) = &app.mcp {
        // A server that is down does not make the daemon unhealthy: calls get error responses
        // for its tools while it reconnects.
        body["mcp"] = serde_json::to_value(hub.status()).unwrap_or_default();
    }
    if let Some(sip) = app.sip.get() {
        // Each registering trunk's state; a failed registration is reported, not fatal.
        body["sip_registrations"] = serde_json::to_value(sip.registrations()).unwrap_or_default();
    }
    axum::Json(body).into_response()
}
