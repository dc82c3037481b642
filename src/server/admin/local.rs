//! What this instance answers about its own live calls, as its admin API would: the live view
//! of a call (transcript, history, figures, events), an operator's activation, deactivation or
//! hang-up, and the list of its calls. The control bus serves other instances' requests with
//! [`answer_locally`] too, so an answer is the same whichever instance was asked; [`join_cluster`]
//! puts it on the bus.

use std::sync::Arc;

use axum::http::StatusCode;
use serde_json::{Value, json};

use super::super::AppState;
use super::super::cluster::bus::{Answer, Op};
use super::super::live::Steering;
use crate::agents::{CommandError, Input};
use crate::call::tap::CommandSendError;

/// A live call's steering (its view and command channel), if it is listed and running.
fn steered(app: &AppState, call: &str) -> Option<Steering> {
    app.calls.get(call).and_then(|c| c.steering().cloned())
}

/// The live calls of this instance, each naming the instance.
pub(super) fn local_list(app: &AppState, admin: bool) -> Vec<Value> {
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

fn here(status: StatusCode, body: Value) -> Answer {
    Answer::Here {
        status: status.as_u16(),
        body,
    }
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
        Op::WhipHangup { session } => {
            // Answered at once: the asker's wait is bounded by cluster.command_timeout_ms.
            if super::super::whip::end_session(app, session, false).await {
                here(StatusCode::OK, json!({ "status": "hung up" }))
            } else {
                Answer::NotHere
            }
        }
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

/// Joins the instances sharing the store, when it is PostgreSQL and `cluster.enabled`: the
/// registry and its heartbeat, placement data, and the control bus serving the admin API's
/// requests about this instance's calls.
pub async fn join_cluster(app: &Arc<AppState>) {
    let cfg = &app.loaded.config.cluster;
    let Some(s) = app.store.get() else { return };
    if !cfg.enabled || s.store.kind() != crate::store::Kind::Postgres || app.cluster.get().is_some()
    {
        return;
    }
    let Ok(url) = super::super::attach::store_url(&app.loaded.config.store) else {
        return;
    };
    let serve: super::super::cluster::Serve = {
        let weak = Arc::downgrade(app);
        Arc::new(move |op| {
            let weak = weak.clone();
            Box::pin(async move {
                match weak.upgrade() {
                    Some(app) => answer_locally(&app, &op).await,
                    None => super::super::cluster::bus::Answer::NotHere,
                }
            })
        })
    };
    let c = super::super::cluster::Cluster::start(
        app.instance_id.clone(),
        app.loaded.advertise_url(),
        s.store.clone(),
        url,
        app.calls.clone(),
        cfg.clone(),
        serve,
    )
    .await;
    let _ = app.cluster.set(c);
}
