//! The admin API (JSON, under `/admin/`), documented by the hand-written OpenAPI file served at
//! `/openapi.json` (`src/server/openapi.json`; a test keeps it and [`ROUTES`] equal). Agents of
//! the configured set; live calls with their active agents; activating or deactivating an agent
//! on a live call (the orchestrator's operator command, carried by the call's command channel
//! and done as a gapless handoff at the turn boundary); a call's transcript, agent history and
//! figures (live from the call's events, else from the store); a caller's agent contexts, listed
//! and updated. Errors are `{"error": "…"}` with a fitting status.
//!
//! [`routes`] is its own router: it sits among the daemon's protected routes (bearer token);
//! [`openapi`] is served open.

use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};

use super::AppState;
use super::live::Steering;
use crate::agents::registry::{Agent, Registry};
use crate::agents::{CommandError, Input};
use crate::call::tap::CommandSendError;
use crate::store::StoreError;
use crate::store::read::ContextPatch;

/// The OpenAPI document.
pub const OPENAPI: &str = include_str!("openapi.json");

/// Every admin route: `(method, path)`, as in the OpenAPI file.
pub const ROUTES: &[(&str, &str)] = &[
    ("get", "/openapi.json"),
    ("get", "/admin/agents"),
    ("get", "/admin/agents/{agent}"),
    ("get", "/admin/calls"),
    ("get", "/admin/calls/{call}"),
    ("get", "/admin/calls/{call}/transcript"),
    ("get", "/admin/calls/{call}/history"),
    ("get", "/admin/calls/{call}/figures"),
    ("post", "/admin/calls/{call}/agents/{agent}/activate"),
    ("post", "/admin/calls/{call}/agents/{agent}/deactivate"),
    ("get", "/admin/callers/{caller}/contexts"),
    ("get", "/admin/contexts/{context}"),
    ("patch", "/admin/contexts/{context}"),
];

/// The admin routes (state: the daemon's).
pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/admin/agents", get(list_agents))
        .route("/admin/agents/{agent}", get(get_agent))
        .route("/admin/calls", get(list_calls))
        .route("/admin/calls/{call}", get(get_call))
        .route("/admin/calls/{call}/transcript", get(transcript))
        .route("/admin/calls/{call}/history", get(history))
        .route("/admin/calls/{call}/figures", get(figures))
        .route(
            "/admin/calls/{call}/agents/{agent}/activate",
            post(activate),
        )
        .route(
            "/admin/calls/{call}/agents/{agent}/deactivate",
            post(deactivate),
        )
        .route("/admin/callers/{caller}/contexts", get(contexts))
        .route(
            "/admin/contexts/{context}",
            get(get_context).patch(patch_context),
        )
}

/// A live call's steering (its view and command channel), if it is listed and running.
fn steered(app: &AppState, call: &str) -> Option<Steering> {
    app.calls.get(call).and_then(|c| c.steering().cloned())
}

fn error(code: StatusCode, msg: impl Into<String>) -> Response {
    (code, Json(json!({ "error": msg.into() }))).into_response()
}

fn store_error(e: StoreError) -> Response {
    match e {
        StoreError::NotFound { .. } => error(StatusCode::NOT_FOUND, e.to_string()),
        StoreError::Invalid(_) => error(StatusCode::BAD_REQUEST, e.to_string()),
        _ => error(StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
    }
}

fn no_store() -> Response {
    error(
        StatusCode::SERVICE_UNAVAILABLE,
        "no store is configured (set [store] url in the daemon config)",
    )
}

pub async fn openapi() -> Response {
    (
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        OPENAPI,
    )
        .into_response()
}

fn agent_json(reg: &Registry, a: &Agent) -> Value {
    json!({
        "id": a.id,
        "name": a.name,
        "role": a.role,
        "primary": a.index == reg.primary,
        "expertise": a.expertise,
        "tools": a.tools,
        "handoffs": a.handoffs.iter().map(|&i| reg.agent(i).id.clone()).collect::<Vec<_>>(),
        "priority": a.priority,
        "strategy": a.policy.strategy.as_str(),
        "mode": a.policy.mode,
    })
}

async fn list_agents(State(app): State<Arc<AppState>>) -> Response {
    let Some(reg) = &app.agents else {
        return Json(json!({ "set": null, "agents": [], "sidecars": [] })).into_response();
    };
    let sidecars: Vec<Value> = reg
        .sidecars
        .iter()
        .map(|s| {
            json!({
                "id": s.id,
                "description": s.description,
                "timeout_ms": s.timeout.as_millis() as u64,
                "budget_ms": s.budget.map(|b| b.as_millis() as u64),
                "deliver": s.deliver,
            })
        })
        .collect();
    Json(json!({
        "set": reg.name,
        "agents": reg.agents.iter().map(|a| agent_json(reg, a)).collect::<Vec<_>>(),
        "sidecars": sidecars,
    }))
    .into_response()
}

async fn get_agent(State(app): State<Arc<AppState>>, Path(agent): Path<String>) -> Response {
    match app
        .agents
        .as_ref()
        .and_then(|r| r.find(&agent).map(|a| (r, a)))
    {
        Some((reg, a)) => Json(agent_json(reg, a)).into_response(),
        None => error(StatusCode::NOT_FOUND, format!("no agent {agent:?}")),
    }
}

#[derive(serde::Deserialize)]
struct CallsQuery {
    /// `live` (default) or `ended` (from the store).
    state: Option<String>,
    limit: Option<i64>,
}

async fn list_calls(State(app): State<Arc<AppState>>, Query(q): Query<CallsQuery>) -> Response {
    match q.state.as_deref() {
        None | Some("live") => {
            let calls: Vec<_> = app.calls.list().iter().map(|c| c.admin_summary()).collect();
            Json(json!({ "calls": calls })).into_response()
        }
        Some("ended") => {
            let Some(s) = app.store.get() else {
                return no_store();
            };
            match s.store.calls(q.limit.unwrap_or(50).clamp(1, 1000)).await {
                Ok(calls) => Json(json!({ "calls": calls })).into_response(),
                Err(e) => store_error(e),
            }
        }
        Some(other) => error(
            StatusCode::BAD_REQUEST,
            format!("state {other:?}: use live or ended"),
        ),
    }
}

async fn get_call(State(app): State<Arc<AppState>>, Path(call): Path<String>) -> Response {
    if let Some(c) = app.calls.get(&call) {
        return Json(json!({ "live": true, "call": c.admin_summary() })).into_response();
    }
    let Some(s) = app.store.get() else {
        return error(StatusCode::NOT_FOUND, format!("no live call {call:?}"));
    };
    match s.store.call(&call).await {
        Ok(c) => Json(json!({ "live": false, "call": c })).into_response(),
        Err(e) => store_error(e),
    }
}

async fn transcript(State(app): State<Arc<AppState>>, Path(call): Path<String>) -> Response {
    if let Some(c) = steered(&app, &call) {
        let lines = c
            .view
            .lock()
            .map(|v| v.transcript.clone())
            .unwrap_or_default();
        return Json(json!({ "live": true, "lines": lines })).into_response();
    }
    let Some(s) = app.store.get() else {
        return error(StatusCode::NOT_FOUND, format!("no live call {call:?}"));
    };
    if let Err(e) = s.store.call(&call).await {
        return store_error(e);
    }
    match s.store.transcript(&call).await {
        Ok(lines) => Json(json!({ "live": false, "lines": lines })).into_response(),
        Err(e) => store_error(e),
    }
}

async fn history(State(app): State<Arc<AppState>>, Path(call): Path<String>) -> Response {
    if let Some(c) = steered(&app, &call) {
        let (history, active) = c
            .view
            .lock()
            .map(|v| (v.history.clone(), v.active.clone()))
            .unwrap_or_default();
        return Json(json!({ "live": true, "active_agents": active, "history": history }))
            .into_response();
    }
    let Some(s) = app.store.get() else {
        return error(StatusCode::NOT_FOUND, format!("no live call {call:?}"));
    };
    if let Err(e) = s.store.call(&call).await {
        return store_error(e);
    }
    match s.store.history(&call).await {
        Ok(h) => Json(json!({ "live": false, "history": h })).into_response(),
        Err(e) => store_error(e),
    }
}

async fn figures(State(app): State<Arc<AppState>>, Path(call): Path<String>) -> Response {
    if let Some(c) = steered(&app, &call) {
        let v = c
            .view
            .lock()
            .map(|v| {
                json!({
                    "live": true,
                    "handoff_events": v.handoffs,
                    "tool_calls": v.tool_calls,
                    "transcript_lines": v.transcript.len(),
                    "sidecar_deliveries": v.sidecar_deliveries,
                })
            })
            .unwrap_or_default();
        return Json(v).into_response();
    }
    let Some(s) = app.store.get() else {
        return error(StatusCode::NOT_FOUND, format!("no live call {call:?}"));
    };
    let c = match s.store.call(&call).await {
        Ok(c) => c,
        Err(e) => return store_error(e),
    };
    let handoffs = match s.store.handoffs(&call).await {
        Ok(h) => h,
        Err(e) => return store_error(e),
    };
    let tools = match s.store.tool_calls(&call).await {
        Ok(t) => t,
        Err(e) => return store_error(e),
    };
    Json(json!({
        "live": false,
        "figures": c.figures,
        "handoffs": handoffs,
        "tool_calls": tools,
    }))
    .into_response()
}

async fn command(app: &AppState, call: &str, input: Input) -> Response {
    let Some(c) = steered(app, call) else {
        return error(StatusCode::NOT_FOUND, format!("no live call {call:?}"));
    };
    match c.commands.request(input).await {
        Ok(()) => (
            StatusCode::ACCEPTED,
            Json(json!({
                "call": call,
                "status": "accepted",
                "note": "the handoff is carried out at the next turn boundary",
            })),
        )
            .into_response(),
        Err(CommandSendError::Refused(e @ CommandError::UnknownAgent(_))) => {
            error(StatusCode::NOT_FOUND, e.to_string())
        }
        Err(CommandSendError::Refused(e)) => error(StatusCode::CONFLICT, e.to_string()),
        Err(e @ CommandSendError::Busy) => error(StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
        Err(e @ CommandSendError::Ended) => error(StatusCode::GONE, e.to_string()),
    }
}

async fn activate(
    State(app): State<Arc<AppState>>,
    Path((call, agent)): Path<(String, String)>,
) -> Response {
    command(&app, &call, Input::Activate { agent }).await
}

async fn deactivate(
    State(app): State<Arc<AppState>>,
    Path((call, agent)): Path<(String, String)>,
) -> Response {
    command(&app, &call, Input::Deactivate { agent }).await
}

async fn contexts(State(app): State<Arc<AppState>>, Path(caller): Path<String>) -> Response {
    let Some(s) = app.store.get() else {
        return no_store();
    };
    match s.store.contexts(&caller).await {
        Ok(c) => Json(json!({ "caller": caller, "contexts": c })).into_response(),
        Err(e) => store_error(e),
    }
}

async fn get_context(State(app): State<Arc<AppState>>, Path(id): Path<String>) -> Response {
    let Some(s) = app.store.get() else {
        return no_store();
    };
    match s.store.context(&id).await {
        Ok(c) => Json(c).into_response(),
        Err(e) => store_error(e),
    }
}

async fn patch_context(
    State(app): State<Arc<AppState>>,
    Path(id): Path<String>,
    body: axum::body::Bytes,
) -> Response {
    let Some(s) = app.store.get() else {
        return no_store();
    };
    let patch: ContextPatch = match serde_json::from_slice(&body) {
        Ok(p) => p,
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                format!("body: {e}; send e.g. {{\"status\": \"paused\", \"context_data\": {{…}}}}"),
            );
        }
    };
    match s.store.update_context(&id, &patch).await {
        Ok(c) => Json(c).into_response(),
        Err(e) => store_error(e),
    }
}
