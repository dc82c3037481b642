//! The admin API (JSON, under `/admin/`), documented by the hand-written OpenAPI file served at
//! `/openapi.json` (`src/server/openapi.json`; a test keeps it and [`ROUTES`] equal). Agents of
//! the configured set; live calls with their active agents; activating or deactivating an agent
//! on a live call (the orchestrator's operator command, carried by the call's command channel
//! and done as a gapless handoff at the turn boundary); a call's transcript, agent history and
//! figures (live from the call's events, else from the store); hanging a call up; a caller's
//! agent contexts, listed and updated; the instances of the cluster, and a drain of this one.
//! Errors are `{"error": "…"}` with a fitting status.
//!
//! Any instance answers about any call: a call held by another instance of the cluster is
//! asked about over the control bus ([`super::cluster::bus`]) and its holder's answer returned
//! as is; when the holder is gone or does not answer in time, the error says so.
//!
//! `local` answers about this instance's own live calls (and serves other instances' requests);
//! `reach` finds the call wherever it is.
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

mod local;
mod reach;

use super::AppState;
use super::cluster::bus::Op;
use crate::agents::registry::{Agent, Registry};
use crate::store::StoreError;

use crate::store::read::ContextPatch;
pub use local::{answer_locally, join_cluster};
use reach::about;
pub use reach::cluster_list;

/// The OpenAPI document.
pub const OPENAPI: &str = include_str!("../openapi.json");

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
    ("post", "/admin/calls/{call}/hangup"),
    ("get", "/calls"),
    ("post", "/calls"),
    ("post", "/calls/{call}/dtmf"),
    ("post", "/calls/{call}/transfer"),
    ("get", "/admin/calls/{call}/events"),
    ("get", "/admin/instances"),
    ("post", "/admin/drain"),
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
        .route("/admin/calls/{call}/hangup", post(hangup))
        .route("/admin/calls/{call}/events", get(events))
        .route("/admin/instances", get(instances))
        .route("/admin/drain", post(drain))
        .route("/admin/callers/{caller}/contexts", get(contexts))
        .route(
            "/admin/contexts/{context}",
            get(get_context).patch(patch_context),
        )
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
    // Each MCP server's allow-list as written, and the tools it lets through now.
    let granted = reg.mcp_tools(a);
    let mcp: serde_json::Map<String, Value> = a
        .mcp
        .iter()
        .map(|g| {
            let listed: Vec<&str> = granted
                .iter()
                .filter(|t| {
                    matches!(&t.backend, crate::agents::registry::Backend::Mcp(m) if *m.server == *g.server)
                })
                .map(|t| t.name.as_str())
                .collect();
            let patterns: Vec<&str> = g.patterns.iter().map(|(p, _)| p.as_str()).collect();
            (
                g.server.clone(),
                json!({ "allow": patterns, "tools": listed }),
            )
        })
        .collect();
    json!({
        "id": a.id,
        "name": a.name,
        "role": a.role,
        "primary": a.index == reg.primary,
        "expertise": a.expertise,
        "tools": a.tools,
        "mcp": mcp,
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

async fn list_calls(
    State(app): State<Arc<AppState>>,
    q: Result<Query<CallsQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let q = match q {
        Ok(Query(q)) => q,
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                format!("{}: use ?state=live|ended&limit=1..1000", e.body_text()),
            );
        }
    };
    match q.state.as_deref() {
        None | Some("live") => {
            let (calls, unanswered) = cluster_list(&app, true).await;
            let mut v = json!({ "calls": calls });
            if !unanswered.is_empty() {
                v["unanswered"] = json!(unanswered);
            }
            Json(v).into_response()
        }
        Some("ended") => {
            let Some(s) = app.store.get() else {
                return no_store();
            };
            let limit = q.limit.unwrap_or(50);
            if !(1..=1000).contains(&limit) {
                return error(
                    StatusCode::BAD_REQUEST,
                    format!("limit {limit}: give 1 to 1000 (50 without it)"),
                );
            }
            match s.store.ended_calls(limit).await {
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
    about(&app, Op::Call { call }).await
}

async fn transcript(State(app): State<Arc<AppState>>, Path(call): Path<String>) -> Response {
    about(&app, Op::Transcript { call }).await
}

async fn history(State(app): State<Arc<AppState>>, Path(call): Path<String>) -> Response {
    about(&app, Op::History { call }).await
}

async fn figures(State(app): State<Arc<AppState>>, Path(call): Path<String>) -> Response {
    about(&app, Op::Figures { call }).await
}

async fn events(State(app): State<Arc<AppState>>, Path(call): Path<String>) -> Response {
    about(&app, Op::Events { call }).await
}

async fn hangup(State(app): State<Arc<AppState>>, Path(call): Path<String>) -> Response {
    about(&app, Op::Hangup { call }).await
}

async fn activate(
    State(app): State<Arc<AppState>>,
    Path((call, agent)): Path<(String, String)>,
) -> Response {
    about(&app, Op::Activate { call, agent }).await
}

async fn deactivate(
    State(app): State<Arc<AppState>>,
    Path((call, agent)): Path<(String, String)>,
) -> Response {
    about(&app, Op::Deactivate { call, agent }).await
}

/// The registry as this instance last read it (this instance alone outside a cluster).
async fn instances(State(app): State<Arc<AppState>>) -> Response {
    match app.cluster.get() {
        Some(c) => Json(json!({
            "cluster": true,
            "this": c.id(),
            "instances": c.instances(),
        }))
        .into_response(),
        None => Json(json!({
            "cluster": false,
            "this": app.instance_id,
            "instances": [{
                "id": app.instance_id,
                "url": app.loaded.advertise_url(),
                "capacity": app.calls.max(),
                "active_calls": app.calls.active(),
                "state": app.calls.unready().map_or("ready", |u| u.as_str()),
            }],
        }))
        .into_response(),
    }
}

/// Starts this instance's drain, as SIGTERM does.
async fn drain(State(app): State<Arc<AppState>>) -> Response {
    let first = app.calls.start_draining();
    if first {
        tracing::info!("drain asked for through the admin API");
    }
    (
        StatusCode::ACCEPTED,
        Json(json!({
            "status": "draining",
            "already": !first,
            "active_calls": app.calls.active(),
            "drain_timeout_s": app.loaded.config.server.drain_timeout_s,
        })),
    )
        .into_response()
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
    if patch.context_data.as_ref().is_some_and(|d| !d.is_object()) {
        return error(
            StatusCode::BAD_REQUEST,
            "context_data is the agent's working state, a JSON object (e.g. \
             {\"context_data\": {\"note\": \"…\"}}): it replaces the state whole",
        );
    }
    match s.store.update_context(&id, &patch).await {
        Ok(c) => Json(c).into_response(),
        Err(e) => store_error(e),
    }
}
