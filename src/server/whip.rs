//! Browser callers over WebRTC with WHIP-style signalling (RFC 9725, except that the answer is
//! `sendrecv`: the caller hears the agent on the same connection).
//!
//! * `POST /whip` with `Content-Type: application/sdp` (the offer) → `201 Created` with the
//!   answer (`application/sdp`, every candidate in it: no trickle), `Location: /whip/<session>`
//!   (128 random bits: unguessable), `Baton-Call-Id: <id>` and
//!   `Link: </calls/<id>/events>; rel="events"`. Wrong content type → 415, an offer over
//!   `webrtc.max_offer_bytes` → 413, an offer that is not SDP or that baton cannot answer (no
//!   Opus, no audio, video sections, recvonly) → 400 with the reason; full or draining → `307`
//!   to another instance of the cluster with room (`Location: <its URL>/whip`), else 503 with
//!   the reason and `Retry-After`.
//! * `DELETE /whip/<session>` hangs up (200 once the call has ended, 404 for an unknown session);
//!   in a cluster, a session held by another instance is hung up there (over the control bus).
//! * `OPTIONS` on both answers CORS preflights for `webrtc.allow_origins` and says
//!   `Accept-Post: application/sdp`. `PATCH` (trickle, ICE restart) is not offered: 405.
//!
//! Each call then runs in its own task: the leg waits for the browser's first audio, a model
//! session opens, and `call::run_with_agents` runs until either side ends.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, post};
use tracing::Instrument;

use super::AppState;
use super::attach::{self, CallInfo, Ran, RunError};
use super::calls::{CallSlot, LiveCall, random_hex};
use crate::call::CallReport;
use crate::leg::webrtc::{self as leg, IceServer, PeerError, PeerSettings, WebrtcLegOptions};

/// Headers a page on another origin may read from the answer.
const EXPOSED: &str = "Location, Link, Baton-Call-Id";
/// How long `DELETE` waits for the call to end before answering anyway.
const DELETE_WAIT: Duration = Duration::from_secs(5);
/// The leg kind label of this module's calls.
const LEG: &str = "webrtc";

/// The WHIP routes, to be merged into the server's router (behind its auth layer, if any).
pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/whip", post(create).options(preflight))
        .route("/whip/{session}", delete(remove).options(preflight))
}

fn text(code: StatusCode, msg: impl Into<String>) -> Response {
    let mut body = msg.into();
    body.push('\n');
    (
        code,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        body,
    )
        .into_response()
}

/// The `Access-Control-Allow-Origin` value for a request, if its origin is allowed.
fn allowed_origin(app: &AppState, headers: &HeaderMap) -> Option<HeaderValue> {
    let origin = headers.get(header::ORIGIN)?;
    let allow = &app.loaded.config.webrtc.allow_origins;
    if allow.iter().any(|a| a == "*") {
        return Some(HeaderValue::from_static("*"));
    }
    let o = origin.to_str().ok()?;
    allow.iter().any(|a| a == o).then(|| origin.clone())
}

fn with_cors(mut r: Response, origin: Option<HeaderValue>) -> Response {
    if let Some(o) = origin {
        let h = r.headers_mut();
        h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, o);
        h.insert(
            header::ACCESS_CONTROL_EXPOSE_HEADERS,
            HeaderValue::from_static(EXPOSED),
        );
        h.append(header::VARY, HeaderValue::from_static("Origin"));
    }
    r
}

async fn preflight(State(app): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    let origin = allowed_origin(&app, &headers);
    let mut r = StatusCode::NO_CONTENT.into_response();
    let h = r.headers_mut();
    h.insert(
        header::ALLOW,
        HeaderValue::from_static("POST, DELETE, OPTIONS"),
    );
    h.insert("accept-post", HeaderValue::from_static("application/sdp"));
    if origin.is_some() {
        h.insert(
            header::ACCESS_CONTROL_ALLOW_METHODS,
            HeaderValue::from_static("POST, DELETE, OPTIONS"),
        );
        h.insert(
            header::ACCESS_CONTROL_ALLOW_HEADERS,
            HeaderValue::from_static("content-type, authorization"),
        );
        h.insert(
            header::ACCESS_CONTROL_MAX_AGE,
            HeaderValue::from_static("600"),
        );
    }
    with_cors(r, origin)
}

/// The offer's bytes, or the response that refuses it.
async fn read_offer(app: &AppState, headers: &HeaderMap, body: Body) -> Result<String, Response> {
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let mime = ct.split(';').next().unwrap_or("").trim();
    if !mime.eq_ignore_ascii_case("application/sdp") {
        let got = if ct.is_empty() { "none" } else { ct };
        return Err(text(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            format!("POST /whip takes an SDP offer with Content-Type: application/sdp (got {got})"),
        ));
    }
    let limit = app.loaded.config.webrtc.max_offer_bytes;
    let too_large = || {
        text(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("the SDP offer is larger than {limit} bytes (webrtc.max_offer_bytes)"),
        )
    };
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(too_large());
    }
    let bytes = match axum::body::to_bytes(body, limit).await {
        Ok(b) => b,
        Err(e) => {
            let over = std::iter::successors(Some(&e as &(dyn std::error::Error + 'static)), |e| {
                e.source()
            })
            .any(|e| e.is::<http_body_util::LengthLimitError>());
            return Err(if over {
                too_large()
            } else {
                text(
                    StatusCode::BAD_REQUEST,
                    format!("cannot read the offer: {e}"),
                )
            });
        }
    };
    String::from_utf8(bytes.to_vec())
        .map_err(|_| text(StatusCode::BAD_REQUEST, "the SDP offer is not UTF-8 text"))
}

/// The peer-connection settings from `[webrtc]`.
fn peer_settings(app: &AppState) -> PeerSettings {
    let w = &app.loaded.config.webrtc;
    let udp_addrs = if w.udp_addrs.is_empty() {
        vec![std::net::SocketAddr::new(app.loaded.listen.ip(), 0).to_string()]
    } else {
        w.udp_addrs.clone()
    };
    PeerSettings {
        udp_addrs,
        ice_servers: w
            .ice_servers
            .iter()
            .map(|u| IceServer {
                urls: vec![u.clone()],
                ..Default::default()
            })
            .collect(),
        nat_1to1_ips: w.nat_1to1_ips.clone(),
        ..Default::default()
    }
}

async fn create(State(app): State<Arc<AppState>>, headers: HeaderMap, body: Body) -> Response {
    let origin = allowed_origin(&app, &headers);
    let r = answer(&app, &headers, body).await;
    with_cors(r, origin)
}

async fn answer(app: &Arc<AppState>, headers: &HeaderMap, body: Body) -> Response {
    let offer = match read_offer(app, headers, body).await {
        Ok(o) => o,
        Err(r) => return r,
    };
    if let Err(e) = leg::check_offer(&offer) {
        tracing::info!(error = %e, "refused a WHIP offer");
        return text(StatusCode::BAD_REQUEST, e.to_string());
    }
    let Some(mut slot) = app.calls.try_admit() else {
        // The instance that will hold the call answers the offer: another one of the cluster
        // with room, by a redirect (RFC 9725 §4.5), else a refusal with Retry-After.
        return match super::admission::place(app) {
            super::admission::Target::There { id, url } => {
                tracing::info!(to = %id, "WHIP offer redirected to another instance");
                let mut r = StatusCode::TEMPORARY_REDIRECT.into_response();
                if let Ok(v) = HeaderValue::from_str(&format!("{url}/whip")) {
                    r.headers_mut().insert(header::LOCATION, v);
                }
                r
            }
            _ => super::admission::refuse(app, "/whip"),
        };
    };
    let answered = match leg::answer(&offer, &peer_settings(app)).await {
        Ok(a) => a,
        Err(e @ PeerError::BadOffer(_)) => {
            tracing::info!(error = %e, "refused a WHIP offer");
            return text(StatusCode::BAD_REQUEST, e.to_string());
        }
        Err(e) => {
            tracing::error!(error = %e, "cannot answer a WHIP offer");
            return text(StatusCode::INTERNAL_SERVER_ERROR, e.to_string());
        }
    };
    let listed = random_hex(16).and_then(|s| slot.go_live(LEG, Some(s)));
    let live = match listed {
        Ok(l) => l,
        Err(e) => {
            let _ = answered.peer.pc.close().await;
            return text(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("no random session id: {e}"),
            );
        }
    };
    let session = live.session.clone().unwrap_or_default();
    let id = live.id.clone();
    // The agent set's names, so the page names an agent before it first speaks.
    let agents: Vec<serde_json::Value> = app
        .agents
        .iter()
        .flat_map(|r| &r.agents)
        .map(|a| serde_json::json!({"id": a.id, "name": a.name}))
        .collect();
    live.publish(&serde_json::json!({
        "type": "call_start", "call_id": id, "leg": LEG,
        "started_unix_ms": live.started_unix_ms, "at_ms": 0, "agents": agents,
    }));
    let span = tracing::info_span!("webrtc", call_id = %id);
    tokio::spawn(run_call(app.clone(), answered.peer, slot, live).instrument(span));
    tracing::info!(call_id = %id, "WHIP offer answered");
    let mut r = (StatusCode::CREATED, answered.sdp).into_response();
    let h = r.headers_mut();
    let headers = [
        (header::CONTENT_TYPE, "application/sdp".to_owned()),
        (header::LOCATION, format!("/whip/{session}")),
        (
            header::LINK,
            format!("</calls/{id}/events>; rel=\"events\""),
        ),
        (header::CACHE_CONTROL, "no-store".to_owned()),
    ];
    for (k, v) in headers {
        if let Ok(v) = HeaderValue::from_str(&v) {
            h.insert(k, v);
        }
    }
    if let Ok(v) = HeaderValue::from_str(&id) {
        h.insert("baton-call-id", v);
    }
    r
}

async fn remove(
    State(app): State<Arc<AppState>>,
    headers: HeaderMap,
    Path(session): Path<String>,
) -> Response {
    let origin = allowed_origin(&app, &headers);
    let r = if end_session(&app, &session, true).await {
        text(StatusCode::OK, "hung up")
    } else if let Some(c) = app.cluster.get() {
        // The session may be held by another instance (the offer was redirected there, and a
        // load balancer brought the DELETE here): whoever holds it hangs up.
        let op = super::cluster::bus::Op::WhipHangup { session };
        let held = c.ask_all(op).await.into_iter().any(|(_, a)| {
            matches!(a, Ok(super::cluster::bus::Answer::Here { status, .. }) if status == 200)
        });
        if held {
            text(StatusCode::OK, "hung up")
        } else {
            not_found()
        }
    } else {
        not_found()
    };
    with_cors(r, origin)
}

fn not_found() -> Response {
    text(
        StatusCode::NOT_FOUND,
        "no such WHIP session (it may have ended)",
    )
}

/// Hangs up the browser call of WHIP session `secret` if this instance holds it (with `wait`,
/// waiting a little for it to end); false when it does not.
pub async fn end_session(app: &AppState, secret: &str, wait: bool) -> bool {
    let Some(live) = app.calls.by_session(secret) else {
        return false;
    };
    live.hang_up();
    let ended = wait && live.wait_ended(DELETE_WAIT).await;
    tracing::info!(call_id = %live.id, ended, "WHIP session deleted");
    true
}

/// One browser call, from the answer to the end.
async fn run_call(app: Arc<AppState>, peer: leg::Peer, slot: CallSlot, live: Arc<LiveCall>) {
    let c = &app.loaded.config;
    let opts = WebrtcLegOptions {
        bitrate: c.webrtc.opus_bitrate,
        connect_timeout: Duration::from_secs(c.webrtc.connect_timeout_s),
        event_queue: c.limits.leg_queue_frames,
        ..Default::default()
    };
    let end = |reason: String, figures| super::live::publish_end(&live, &reason, figures);
    // A drain that runs out while the browser is still connecting ends the call as a DELETE does.
    let start = leg::start(peer, opts, live.hangup_signal());
    tokio::pin!(start);
    let mut drain = slot.hangup.clone();
    let mut drained = false;
    let started = loop {
        tokio::select! {
            r = &mut start => break r,
            d = drain.wait_for(|v| *v), if !drained => {
                drained = true;
                if d.is_ok() {
                    live.hang_up();
                }
            }
        }
    };
    let (leg, leg_task) = match started {
        Ok(x) => x,
        Err(e) => {
            tracing::warn!(error = %e, "browser call ended before it began");
            end(e.to_string(), serde_json::Value::Null);
            return;
        }
    };
    let info = CallInfo {
        leg: LEG,
        caller: None,
    };
    let result = attach::run_call(&app, leg, info, Some(live.clone()), slot.hangup.clone()).await;
    let stats = super::bridges::leg_stats(leg_task).await;
    if let Err(e) = &result {
        super::call_log::call_not_run(&app.metrics, LEG, e);
    }
    match result {
        Ok(Ran { report, .. }) => {
            let figures = figures(&report, stats.as_ref());
            super::call_log::call_ended(
                &app.metrics,
                LEG,
                &report,
                super::call_log::Extra {
                    call: &live.id,
                    // One Opus packet carries one 20 ms frame.
                    frames: stats.as_ref().map(|s| (s.inbound.frames, s.packets_out)),
                    ..Default::default()
                },
            );
            end(report.end_reason.clone(), figures);
        }
        Err(RunError::NoSession(e)) => {
            end(format!("no model session: {e}"), serde_json::Value::Null);
        }
        Err(RunError::Failed(e)) => {
            end(format!("call failed: {e}"), serde_json::Value::Null);
        }
    }
    drop(slot);
}

/// The call's figures for `call_end`, with the leg's counts and its frame → RTP times.
fn figures(report: &CallReport, leg: Option<&leg::LegStats>) -> serde_json::Value {
    let mut f = super::live::figures(report);
    let wire: Vec<f64> = leg
        .map(|l| {
            l.play_to_wire_us
                .iter()
                .map(|&u| f64::from(u) / 1000.0)
                .collect()
        })
        .unwrap_or_default();
    f["play_to_wire_ms"] = super::live::percentiles(&wire);
    f["leg"] = serde_json::to_value(leg).unwrap_or_default();
    f
}
