//! What this instance answers about its own live calls, as its admin API would: the live view
//! of a call (transcript, history, figures, events), an operator's activation, deactivation or
//! hang-up, and the list of its calls. The control bus serves other instances' requests with
//! [`answer_locally`] too, so an answer is the same whichever instance was asked; [`join_cluster`]
//! puts it on the bus. A listed call is live from its listing on: while it is still starting (its
//! model session opening) it reads as empty, and an operator's command waits for it to run.

use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use serde_json::{Value, json};

use super::super::AppState;
use super::super::cluster::bus::{Answer, Op};
use super::super::live::NotRunning;
use crate::agents::{CommandError, Input};
use crate::call::tap::CommandSendError;
use crate::store::recorder::SharedView;

/// How long an operator's command asked of this instance's own admin API waits for a call that
/// is still starting (listed as soon as its leg is up, while its model session opens). Asked
/// over the control bus, the wait is half of `cluster.command_timeout_ms`, so that the asker
/// hears the answer.
pub const STARTING_WAIT: Duration = Duration::from_secs(10);

/// A listed call's live view: its own once it runs, an empty one while it is starting.
fn live_view(app: &AppState, call: &str) -> Option<SharedView> {
    let c = app.calls.get(call)?;
    Some(c.steering().map(|s| s.view.clone()).unwrap_or_default())
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
/// requests with this. A command for a call still starting waits for it at most `starting`.
pub async fn answer_locally(app: &AppState, op: &Op, starting: Duration) -> Answer {
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
                let lines = c.history();
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
        Op::Transcript { call } => match live_view(app, call) {
            Some(view) => {
                let lines = view
                    .lock()
                    .map(|v| v.transcript.clone())
                    .unwrap_or_default();
                here(StatusCode::OK, json!({ "live": true, "lines": lines }))
            }
            None => Answer::NotHere,
        },
        Op::History { call } => match live_view(app, call) {
            Some(view) => {
                let (history, active) = view
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
        Op::Figures { call } => match live_view(app, call) {
            Some(view) => {
                let v = view
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
                starting,
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
                starting,
            )
            .await
        }
    }
}

/// An operator's command for call `call`, carried to its orchestrator once the call runs
/// (waiting at most `starting` while it starts).
async fn command(app: &AppState, call: &str, input: Input, starting: Duration) -> Answer {
    let Some(live) = app.calls.get(call) else {
        return Answer::NotHere;
    };
    let c = match live.steering_within(starting).await {
        Ok(c) => c,
        Err(NotRunning::Ended) => {
            let e = format!("call {call:?} ended before it started");
            return here(StatusCode::GONE, json!({ "error": e }));
        }
        Err(NotRunning::Starting) => {
            let e = format!(
                "call {call:?} is still starting (its model session is opening); try again"
            );
            return here(StatusCode::SERVICE_UNAVAILABLE, json!({ "error": e }));
        }
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
    // A command for a call still starting is answered before the asker gives up on it.
    let starting = Duration::from_millis(cfg.command_timeout_ms / 2);
    let serve: super::super::cluster::Serve = {
        let weak = Arc::downgrade(app);
        Arc::new(move |op| {
            let weak = weak.clone();
            Box::pin(async move {
                match weak.upgrade() {
                    Some(app) => answer_locally(&app, &op, starting).await,
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

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;
    use crate::call::tap::CallCommand;
    use crate::server::calls::CallSlot;
    use crate::server::live::{LiveCall, Steering};

    fn app() -> Arc<AppState> {
        let text = "[server]\nlisten = \"127.0.0.1:0\"\n[model]\nbackend = \"mock\"\n";
        let loaded = crate::config::parse(text, Path::new("baton.toml")).unwrap();
        crate::server::state(loaded).unwrap()
    }

    /// A call listed as its leg comes up, its model session not open yet.
    fn listed(app: &AppState) -> (CallSlot, Arc<LiveCall>) {
        let mut slot = app.calls.try_admit().unwrap();
        let live = slot.go_live("sip", None).unwrap();
        (slot, live)
    }

    fn activate(app: &Arc<AppState>, call: &str) -> tokio::task::JoinHandle<Answer> {
        let (app, op) = (
            app.clone(),
            Op::Activate {
                call: call.to_owned(),
                agent: "ravi".into(),
            },
        );
        tokio::spawn(async move { answer_locally(&app, &op, STARTING_WAIT).await })
    }

    fn status(a: &Answer) -> u16 {
        match a {
            Answer::Here { status, .. } => *status,
            Answer::NotHere => 0,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_command_for_a_call_still_starting_reaches_it_once_it_runs() {
        let app = app();
        let (_slot, live) = listed(&app);
        let asked = activate(&app, &live.id);
        // The model session takes a while to open; the operator's command waits, unanswered.
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert!(!asked.is_finished(), "answered before the call ran");
        let (commands, inbox) = crate::call::tap::Commands::channel(4);
        live.steer(Steering {
            caller: None,
            agent_set: Some("front_desk".into()),
            commands,
            view: SharedView::default(),
        });
        let mut rx = inbox.take().unwrap();
        let CallCommand::Agents { input, reply } = *rx.recv().await.unwrap();
        assert_eq!(
            input,
            Input::Activate {
                agent: "ravi".into()
            }
        );
        reply.unwrap().send(Ok(())).unwrap();
        let answer = asked.await.unwrap();
        assert_eq!(status(&answer), 202, "{answer:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_that_ends_before_it_runs_or_starts_too_slowly_says_so() {
        let app = app();
        let (slot, live) = listed(&app);
        let asked = activate(&app, &live.id);
        tokio::time::sleep(Duration::from_millis(100)).await;
        // Its model session could not be opened: the call is unlisted.
        drop(slot);
        let answer = asked.await.unwrap();
        assert_eq!(status(&answer), 410, "{answer:?}");

        let (_slot, live) = listed(&app);
        let started = tokio::time::Instant::now();
        let answer = activate(&app, &live.id).await.unwrap();
        assert_eq!(status(&answer), 503, "{answer:?}");
        assert_eq!(started.elapsed(), STARTING_WAIT);
        let Answer::Here { body, .. } = answer else {
            unreachable!()
        };
        assert!(
            body["error"].as_str().unwrap().contains("still starting"),
            "{body}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_still_starting_reads_as_live_and_empty() {
        let app = app();
        let (_slot, live) = listed(&app);
        let op = Op::Transcript {
            call: live.id.clone(),
        };
        let answer = answer_locally(&app, &op, STARTING_WAIT).await;
        let Answer::Here { status, body } = answer else {
            panic!("a listed call is live here: {answer:?}");
        };
        assert_eq!(status, 200);
        assert_eq!(body, json!({ "live": true, "lines": [] }));
    }
}
