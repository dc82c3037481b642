//! Reaching a call wherever it is: from this instance when it holds the call live, from its
//! holder over the control bus when another instance of the cluster does (that instance's answer
//! returned as is, or an error naming it when it is gone or silent), else from the store; and
//! every instance's list of live calls.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::super::AppState;
use super::super::cluster::Owner;
use super::super::cluster::bus::{Answer, BusError, Op};
use super::local::{STARTING_WAIT, answer_locally, local_list};
use super::{error, store_error};
use crate::store::CallRow;

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

fn answered(status: u16, body: Value) -> Response {
    let code = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY);
    (code, Json(body)).into_response()
}

/// Answers a request about one call: from this instance when it holds the call live, from its
/// holder over the control bus, else from the store.
pub(super) async fn about(app: &AppState, op: Op) -> Response {
    if let Answer::Here { status, body } = answer_locally(app, &op, STARTING_WAIT).await {
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
            Ok(Owner::Unknown | Owner::Me) => {
                // A call that has just started may be live before its row is written (its
                // instance's writes are queued, or held through a database outage): every
                // instance is asked, and only the holder answers.
                if let Some(r) = ask_everyone(c, &op).await {
                    return r;
                }
            }
            Ok(_) => {}
            Err(e) => {
                tracing::debug!(error = %e, "cannot find who holds the call; asking every instance");
                if let Some(r) = ask_everyone(c, &op).await {
                    return r;
                }
            }
        }
    }
    stored(app, &op).await
}

/// The answer of the instance that holds the call live, if one does.
async fn ask_everyone(c: &super::super::cluster::Cluster, op: &Op) -> Option<Response> {
    c.ask_all(op.clone())
        .await
        .into_iter()
        .find_map(|(_, r)| match r {
            Ok(Answer::Here { status, body }) => Some(answered(status, body)),
            _ => None,
        })
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
        // A command: a call the store has as ended is gone for good (410, as the cluster's
        // holder says); one it does not know, or has as under way elsewhere, is not live here.
        Op::Activate { .. } | Op::Deactivate { .. } | Op::Hangup { .. } => {
            return match s.store.call(call).await {
                Ok(CallRow {
                    ended_at: Some(_),
                    end_reason,
                    ..
                }) => error(
                    StatusCode::GONE,
                    format!(
                        "call {call:?} has ended ({})",
                        end_reason.as_deref().unwrap_or("no reason recorded")
                    ),
                ),
                _ => not_live(),
            };
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
