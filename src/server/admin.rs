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
use super::cluster::Owner;
use super::cluster::bus::{Answer, BusError, Op};
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
    ("post", "/admin/calls/{call}/hangup"),
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

/// The live calls of this instance, each naming the instance.
fn local_list(app: &AppState, admin: bool) -> Vec<Value> {
    app.calls
        .list()
        .iter()
        .map(|c| {
            let mut v = if admin {
                serde_json::to_value(c.admin_summary()).unwrap_or_default()
            } else {
                c.summary()
            };
            v["instance"] = json!(app.instance_id);
            v
        })
        .collect()
}

/// The live calls of every instance of the cluster (this one alone outside a cluster), oldest
/// first, and the instances that did not answer.
pub async fn cluster_list(app: &AppState, admin: bool) -> (Vec<Value>, Vec<Value>) {
    let mut calls = local_list(app, admin);
    let mut unanswered = Vec::new();
    if let Some(c) = app.cluster.get() {
        for (id, r) in c.ask_all(Op::List { admin }).await {
            match r {
                Ok(Answer::Here { body, .. }) => {
                    if let Some(list) = body.get("calls").and_then(Value::as_array) {
                        calls.extend(list.iter().cloned());
                    }
                }
                Ok(Answer::NotHere) => {}
                Err(e) => {
                    tracing::warn!(instance = %id, error = %e, "a live-call list is incomplete");
                    unanswered.push(json!({ "instance": id, "error": e.to_string() }));
                }
            }
        }
    }
    let key = if admin {
        "started_at"
    } else {
        "started_unix_ms"
    };
    calls.sort_by_key(|v| v.get(key).and_then(Value::as_i64).unwrap_or(0));
    (calls, unanswered)
}

async fn list_calls(State(app): State<Arc<AppState>>, Query(q): Query<CallsQuery>) -> Response {
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

fn here(status: StatusCode, body: Value) -> Answer {
    Answer::Here {
        status: status.as_u16(),
        body,
    }
}

fn answered(status: u16, body: Value) -> Response {
    let code = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY);
    (code, Json(body)).into_response()
}

/// What this instance answers about one of its own live calls (or all of them), as its admin
/// API would; `NotHere` when the call is not live here. The control bus serves other instances'
/// requests with this.
pub async fn answer_locally(app: &AppState, op: &Op) -> Answer {
    match op {
        Op::List { admin } => here(StatusCode::OK, json!({ "calls": local_list(app, *admin) })),
        Op::Call { call } => match app.calls.get(call) {
            Some(c) => here(
                StatusCode::OK,
                json!({ "live": true, "instance": app.instance_id, "call": c.admin_summary() }),
            ),
            None => Answer::NotHere,
        },
        Op::Events { call } => match app.calls.get(call) {
            Some(c) => {
                let (lines, _) = c.subscribe();
                let events: Vec<Value> = lines
                    .iter()
                    .filter_map(|l| serde_json::from_str(l).ok())
                    .collect();
                here(
                    StatusCode::OK,
                    json!({ "live": true, "instance": app.instance_id, "events": events }),
                )
            }
            None => Answer::NotHere,
        },
        Op::Hangup { call } => match app.calls.get(call) {
            Some(c) => {
                c.hang_up_by_operator();
                tracing::info!(call = %call, "hung up by an operator");
                here(
                    StatusCode::ACCEPTED,
                    json!({ "call": call, "status": "hanging up", "instance": app.instance_id }),
                )
            }
            None => Answer::NotHere,
        },
        Op::Transcript { call } => match steered(app, call) {
            Some(c) => {
                let lines = c
                    .view
                    .lock()
                    .map(|v| v.transcript.clone())
                    .unwrap_or_default();
                here(StatusCode::OK, json!({ "live": true, "lines": lines }))
            }
            None => Answer::NotHere,
        },
        Op::History { call } => match steered(app, call) {
            Some(c) => {
                let (history, active) = c
                    .view
                    .lock()
                    .map(|v| (v.history.clone(), v.active.clone()))
                    .unwrap_or_default();
                here(
                    StatusCode::OK,
                    json!({ "live": true, "active_agents": active, "history": history }),
                )
            }
            None => Answer::NotHere,
        },
        Op::Figures { call } => match steered(app, call) {
            Some(c) => {
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
                here(StatusCode::OK, v)
            }
            None => Answer::NotHere,
        },
        Op::Activate { call, agent } => {
            command(
                app,
                call,
                Input::Activate {
                    agent: agent.clone(),
                },
            )
            .await
        }
        Op::Deactivate { call, agent } => {
            command(
                app,
                call,
                Input::Deactivate {
                    agent: agent.clone(),
                },
            )
            .await
        }
    }
}

/// Answers a request about one call: from this instance when it holds the call live, from its
/// holder over the control bus, else from the store.
async fn about(app: &AppState, op: Op) -> Response {
    if let Answer::Here { status, body } = answer_locally(app, &op).await {
        return answered(status, body);
    }
    let call = op.call().unwrap_or_default().to_owned();
    let command = matches!(
        op,
        Op::Activate { .. } | Op::Deactivate { .. } | Op::Hangup { .. }
    );
    if let Some(c) = app.cluster.get() {
        match c.owner(&call).await {
            Ok(Owner::Alive(row)) => match c.ask(&row.id, op.clone()).await {
                Ok(Answer::Here { status, body }) => return answered(status, body),
                // It ended meanwhile: the store has it.
                Ok(Answer::NotHere) => {}
                Err(BusError::Timeout { ms, .. }) => {
                    return error(
                        StatusCode::GATEWAY_TIMEOUT,
                        format!(
                            "call {call:?} is held by instance {} ({}), which did not answer within \
                             {ms} ms; it may have stopped (it is marked gone once its heartbeat is \
                             older than cluster.stale_after_ms)",
                            row.id, row.url
                        ),
                    );
                }
                Err(e) => return error(StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
            },
            Ok(Owner::Gone { id, holder }) if command => {
                let since = holder.map_or_else(String::new, |h| {
                    format!(
                        " (state {}, last heartbeat {} ms ago)",
                        h.state, h.heartbeat_age_ms
                    )
                });
                return error(
                    StatusCode::GONE,
                    format!(
                        "call {call:?} was held by instance {id}, which is gone{since}; \
                         the call ended with it"
                    ),
                );
            }
            Ok(Owner::Ended(reason)) if command => {
                return error(
                    StatusCode::GONE,
                    format!("call {call:?} has ended ({reason})"),
                );
            }
            Ok(_) => {}
            Err(e) => tracing::debug!(error = %e, "cannot find who holds the call"),
        }
    }
    stored(app, &op).await
}

/// A request about a call that is not live anywhere: from the store.
async fn stored(app: &AppState, op: &Op) -> Response {
    let call = op.call().unwrap_or_default();
    let not_live = || error(StatusCode::NOT_FOUND, format!("no live call {call:?}"));
    let Some(s) = app.store.get() else {
        return not_live();
    };
    let row = match op {
        Op::Call { .. } | Op::Transcript { .. } | Op::History { .. } | Op::Figures { .. } => {
            match s.store.call(call).await {
                Ok(c) => c,
                Err(e) => return store_error(e),
            }
        }
        _ => return not_live(),
    };
    match op {
        Op::Call { .. } => Json(json!({ "live": false, "call": row })).into_response(),
        Op::Transcript { .. } => match s.store.transcript(call).await {
            Ok(lines) => Json(json!({ "live": false, "lines": lines })).into_response(),
            Err(e) => store_error(e),
        },
        Op::History { .. } => match s.store.history(call).await {
            Ok(h) => Json(json!({ "live": false, "history": h })).into_response(),
            Err(e) => store_error(e),
        },
        _ => {
            let handoffs = match s.store.handoffs(call).await {
                Ok(h) => h,
                Err(e) => return store_error(e),
            };
            let tools = match s.store.tool_calls(call).await {
                Ok(t) => t,
                Err(e) => return store_error(e),
            };
            Json(json!({
                "live": false,
                "figures": row.figures,
                "handoffs": handoffs,
                "tool_calls": tools,
            }))
            .into_response()
        }
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

async fn command(app: &AppState, call: &str, input: Input) -> Answer {
    let Some(c) = steered(app, call) else {
        return Answer::NotHere;
    };
    let (code, body) = match c.commands.request(input).await {
        Ok(()) => (
            StatusCode::ACCEPTED,
            json!({
                "call": call,
                "status": "accepted",
                "instance": app.instance_id,
                "note": "the handoff is carried out at the next turn boundary",
            }),
        ),
        Err(CommandSendError::Refused(e @ CommandError::UnknownAgent(_))) => {
            (StatusCode::NOT_FOUND, json!({ "error": e.to_string() }))
        }
        Err(CommandSendError::Refused(e)) => {
            (StatusCode::CONFLICT, json!({ "error": e.to_string() }))
        }
        Err(e @ CommandSendError::Busy) => (
            StatusCode::SERVICE_UNAVAILABLE,
            json!({ "error": e.to_string() }),
        ),
        Err(e @ CommandSendError::Ended) => (StatusCode::GONE, json!({ "error": e.to_string() })),
    };
    here(code, body)
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
    match s.store.update_context(&id, &patch).await {
        Ok(c) => Json(c).into_response(),
        Err(e) => store_error(e),
    }
}
