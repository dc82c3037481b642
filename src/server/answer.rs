//! The answer documents: what a provider's voice webhook gets back to point the call's media
//! stream at baton — Twilio's TwiML (`GET|POST /twiml`), Telnyx's TeXML (`/answer/telnyx`),
//! Plivo's XML (`/answer/plivo`) and Vonage's NCCO (`/answer/vonage`). Each names the instance
//! placed for the call ([`super::admission::place`]: this one while it takes calls, else the
//! least loaded ready instance of the cluster), so a call never lands on a full or draining
//! instance; with none ready, 503 with the reason and `Retry-After` (the provider's fallback
//! URL takes over).
//!
//! `/twiml` checks X-Twilio-Signature when a Twilio token is configured (then it is outside the
//! bearer layer, like `/twilio`); the others are among the protected routes ([`routes`]).

use std::collections::HashMap;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Form, Query, State};
use axum::http::{HeaderMap, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use super::AppState;
use super::admission::{self, Target};
use super::twiml;
use crate::leg::bridge::Dialect;

/// The answer routes without authentication of their own (placed among the protected routes).
pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/answer/telnyx", get(texml_get).post(texml_post))
        .route("/answer/plivo", get(plivo_get).post(plivo_post))
        .route("/answer/vonage", get(ncco_get).post(ncco_post))
}

/// The stream URL of the instance placed for a new call, on `dialect`'s path; or why there is
/// none (answered with 503 and `Retry-After`).
pub fn placed(app: &AppState, dialect: Dialect) -> Result<String, String> {
    let t0 = std::time::Instant::now();
    let target = admission::place(app);
    let took_us = t0.elapsed().as_micros() as u64;
    match target {
        Target::Here(base) => {
            tracing::debug!(took_us, "new call placed here");
            Ok(format!("{}{}", admission::ws_url(&base), dialect.path()))
        }
        Target::There { id, url } => {
            tracing::info!(to = %id, took_us, "new call placed on another instance");
            Ok(format!("{}{}", admission::ws_url(&url), dialect.path()))
        }
        Target::Nowhere(why) => {
            tracing::warn!("no instance for a new call: {why}");
            Err(why)
        }
    }
}

fn xml(body: String) -> Response {
    ([(header::CONTENT_TYPE, "text/xml; charset=utf-8")], body).into_response()
}

fn texml(app: &AppState) -> Response {
    match placed(app, Dialect::Telnyx) {
        Ok(url) => xml(twiml::texml_stream(&url)),
        Err(why) => admission::unavailable(&why),
    }
}

async fn texml_get(State(app): State<Arc<AppState>>) -> Response {
    texml(&app)
}

async fn texml_post(State(app): State<Arc<AppState>>) -> Response {
    texml(&app)
}

fn plivo(app: &AppState) -> Response {
    match placed(app, Dialect::Plivo) {
        Ok(url) => xml(twiml::plivo_stream(&url)),
        Err(why) => admission::unavailable(&why),
    }
}

async fn plivo_get(State(app): State<Arc<AppState>>) -> Response {
    plivo(&app)
}

async fn plivo_post(State(app): State<Arc<AppState>>) -> Response {
    plivo(&app)
}

/// Vonage asks for its NCCO with `from` (and `to`, `uuid`) in the query (GET) or a JSON body
/// (POST); `from` rides along as a WebSocket header, which names the caller.
fn ncco(app: &AppState, from: Option<&str>) -> Response {
    match placed(app, Dialect::Vonage) {
        Ok(url) => (
            [(header::CONTENT_TYPE, "application/json")],
            twiml::vonage_ncco(&url, from).to_string(),
        )
            .into_response(),
        Err(why) => admission::unavailable(&why),
    }
}

async fn ncco_get(
    State(app): State<Arc<AppState>>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    ncco(&app, q.get("from").map(String::as_str))
}

async fn ncco_post(State(app): State<Arc<AppState>>, body: axum::body::Bytes) -> Response {
    // The event body is optional here: without it the call still gets its NCCO.
    let from = serde_json::from_slice::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| v.get("from").and_then(|f| f.as_str()).map(str::to_owned));
    ncco(&app, from.as_deref())
}

/// Twilio's voice webhook fields passed on to the stream as `<Parameter>`s.
const FORWARDED: [&str; 4] = ["From", "To", "CallSid", "Direction"];

fn twiml_response(app: &AppState, fields: &HashMap<String, String>) -> Response {
    let params: Vec<(String, String)> = FORWARDED
        .iter()
        .filter_map(|k| fields.get(*k).map(|v| ((*k).to_owned(), v.clone())))
        .collect();
    match placed(app, Dialect::Twilio) {
        Ok(url) => xml(twiml::connect_stream(&url, &params)),
        Err(why) => admission::unavailable(&why),
    }
}

pub async fn twiml_get(
    State(app): State<Arc<AppState>>,
    headers: HeaderMap,
    uri: Uri,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    if let Err(e) = twiml_signature(&app, &headers, uri.query(), &q, false) {
        return twiml_refused(e);
    }
    twiml_response(&app, &q).into_response()
}

pub async fn twiml_post(
    State(app): State<Arc<AppState>>,
    headers: HeaderMap,
    uri: Uri,
    Form(f): Form<HashMap<String, String>>,
) -> Response {
    if let Err(e) = twiml_signature(&app, &headers, uri.query(), &f, true) {
        return twiml_refused(e);
    }
    twiml_response(&app, &f).into_response()
}

/// Twilio signs its voice webhook like the stream upgrade: the configured public URL of
/// `/twiml` (with its query string), plus the POST form fields.
fn twiml_signature(
    app: &AppState,
    headers: &HeaderMap,
    query: Option<&str>,
    fields: &HashMap<String, String>,
    post: bool,
) -> Result<(), crate::leg::twilio::SignatureError> {
    let Some(token) = &app.twilio_token else {
        return Ok(());
    };
    let mut url = format!("{}/twiml", app.loaded.public_url());
    if let Some(q) = query {
        url.push('?');
        url.push_str(q);
    }
    let params: Vec<(&str, &str)> = if post {
        fields
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect()
    } else {
        Vec::new()
    };
    let signature = match headers.get(crate::leg::twilio::signature::SIGNATURE_HEADER) {
        None => Err(crate::leg::twilio::SignatureError::Missing),
        Some(v) => v
            .to_str()
            .map_err(|_| crate::leg::twilio::SignatureError::Unreadable),
    };
    signature.and_then(|sig| crate::leg::twilio::signature::validate(&url, &params, sig, token))
}

fn twiml_refused(e: crate::leg::twilio::SignatureError) -> Response {
    tracing::warn!(error = %e, "refused a /twiml request: bad X-Twilio-Signature");
    (StatusCode::FORBIDDEN, "invalid X-Twilio-Signature\n").into_response()
}
