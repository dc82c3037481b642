//! Sidecar agents (seed 004): configured agents that run *beside* the live session and never
//! speak. On each finished caller line they get the transcript so far and call their backend, all
//! in parallel, each within its own timeout (seed 004's table: analysis 2 s, research 5 s, …).
//! A result that arrives in time is fed into the live session without interrupting it: the
//! orchestrator holds it for the turn boundary and sends it in the form the model accepts
//! ([`Delivery`]). A timeout or an error is logged, counted and ignored: the call goes on.
//!
//! ```text
//! call events ──(EventSink, try_send)──▶ sidecar task ──▶ backend (HTTP POST / static), timeout
//!                                              │ in time
//!                                              ▼
//!                      Commands::offer(Input::SidecarResult) ──▶ orchestrator ──▶ wire, at the boundary
//! ```
//!
//! In the agent set: `[sidecars.<id>]` with `backend = "http"` (`url`, optional `header` and
//! `header_env`) or
//! `"static"` (`reply`, `delay_ms`: a stand-in for a backend's working time), `timeout_ms`,
//! `budget_ms` (the latency it should keep; slower results still count, as over budget),
//! `deliver` and `max_in_flight`.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::task::{self, JoinError, JoinSet};
use tokio::time::Instant;

use super::commands::Commands;
use super::events::{CallEvent, Speaker};
use super::orchestrator::Input;
use super::registry::{Delivery, Sidecar, SidecarBackend};

/// Longest text fed to the model from one result.
const MAX_TEXT: usize = 2000;

/// What one sidecar did in a call.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct SidecarStats {
    pub runs: u64,
    pub ok: u64,
    pub timeouts: u64,
    /// Runs that failed: the backend's error, or the run itself broke (panicked).
    pub errors: u64,
    /// Results slower than `budget_ms` (still delivered when in time).
    pub over_budget: u64,
    /// Turns skipped because `max_in_flight` runs were still going.
    pub skipped: u64,
    /// Results handed to the call for the live session.
    pub offered: u64,
    /// Results the call could not take (ended, or its queue full).
    pub undelivered: u64,
    /// Runs still going when the call ended (stopped; `runs` = `ok` + `timeouts` + `errors` +
    /// this).
    pub unfinished: u64,
    /// Latency of each answered run, ms.
    pub latency_ms: Vec<u64>,
}

/// The sidecars of a call, by id.
pub type SidecarReport = BTreeMap<String, SidecarStats>;

/// A finished run: the sidecar, its latency, its result, and whether it timed out.
type Done = (Arc<Sidecar>, Duration, Result<Value, String>, bool);

/// Runs a call's sidecars until its events end; returns what each did.
pub async fn run(
    sidecars: Vec<Arc<Sidecar>>,
    mut events: mpsc::Receiver<Arc<CallEvent>>,
    commands: Commands,
    call_id: String,
) -> SidecarReport {
    let mut report: SidecarReport = sidecars
        .iter()
        .map(|s| (s.id.clone(), SidecarStats::default()))
        .collect();
    let mut in_flight = InFlight::default();
    let mut tasks: JoinSet<Done> = JoinSet::new();
    let mut transcript: Vec<Value> = Vec::new();
    let mut lead = String::new();
    loop {
        tokio::select! {
            ev = events.recv() => {
                let Some(ev) = ev else { break };
                match &*ev {
                    CallEvent::AgentStart { agent_id, .. } => lead.clone_from(agent_id),
                    CallEvent::Transcript { role, agent_id, text, .. } => {
                        let r = if *role == Speaker::Caller { "caller" } else { "agent" };
                        transcript.push(json!({"role": r, "agent": agent_id, "text": text}));
                        if *role != Speaker::Caller {
                            continue;
                        }
                        let payload = json!({
                            "call_id": call_id,
                            "agent": lead,
                            "turn": transcript.iter().filter(|l| l["role"] == "caller").count(),
                            "transcript": transcript,
                        });
                        for s in &sidecars {
                            let stats = report.entry(s.id.clone()).or_default();
                            if in_flight.count(&s.id) >= s.max_in_flight {
                                stats.skipped += 1;
                                continue;
                            }
                            stats.runs += 1;
                            let run = s.clone();
                            let payload = payload.clone();
                            in_flight.spawn(&mut tasks, s, async move {
                                let t0 = Instant::now();
                                let (r, timed_out) = call(&run, &payload).await;
                                (run, t0.elapsed(), r, timed_out)
                            });
                        }
                    }
                    _ => {}
                }
            }
            Some(joined) = tasks.join_next_with_id(), if !tasks.is_empty() => {
                let Some((s, took, result, timed_out)) = in_flight.joined(joined, &mut report) else {
                    continue;
                };
                let stats = report.entry(s.id.clone()).or_default();
                match result {
                    Ok(v) => {
                        stats.ok += 1;
                        stats.latency_ms.push(took.as_millis() as u64);
                        if s.budget.is_some_and(|b| took > b) {
                            stats.over_budget += 1;
                        }
                        if s.deliver == Delivery::None {
                            continue;
                        }
                        let input = Input::SidecarResult {
                            sidecar: s.id.clone(),
                            text: text_of(&s.label, &v),
                            deliver: s.deliver,
                        };
                        match commands.offer(input) {
                            Ok(()) => stats.offered += 1,
                            Err(e) => {
                                stats.undelivered += 1;
                                tracing::warn!(sidecar = %s.id, error = %e, "sidecar result not delivered");
                            }
                        }
                    }
                    Err(e) if timed_out => {
                        stats.timeouts += 1;
                        tracing::warn!(sidecar = %s.id, timeout_ms = s.timeout.as_millis() as u64, error = %e, "sidecar timed out; ignored");
                    }
                    Err(e) => {
                        stats.errors += 1;
                        tracing::warn!(sidecar = %s.id, error = %e, "sidecar failed; ignored");
                    }
                }
            }
        }
    }
    for (id, n) in in_flight.per_sidecar {
        report.entry(id).or_default().unfinished = n as u64;
    }
    report
}

/// The runs going on: how many per sidecar (for `max_in_flight`), and whose each task is, so a
/// run that broke (its task panicked) still frees its place and is counted as failed.
#[derive(Default)]
struct InFlight {
    per_sidecar: BTreeMap<String, usize>,
    owner: HashMap<task::Id, String>,
}

impl InFlight {
    fn count(&self, sidecar: &str) -> usize {
        self.per_sidecar.get(sidecar).copied().unwrap_or(0)
    }

    fn spawn<F>(&mut self, tasks: &mut JoinSet<Done>, s: &Sidecar, run: F)
    where
        F: Future<Output = Done> + Send + 'static,
    {
        *self.per_sidecar.entry(s.id.clone()).or_default() += 1;
        let handle = tasks.spawn(run);
        self.owner.insert(handle.id(), s.id.clone());
    }

    /// A run's task ended: its place is free; its result, or `None` when the task broke (then
    /// it is counted as an error here).
    fn joined(
        &mut self,
        joined: Result<(task::Id, Done), JoinError>,
        report: &mut SidecarReport,
    ) -> Option<Done> {
        let id = match &joined {
            Ok((id, _)) => *id,
            Err(e) => e.id(),
        };
        let sidecar = self.owner.remove(&id)?;
        if let Some(n) = self.per_sidecar.get_mut(&sidecar) {
            *n = n.saturating_sub(1);
        }
        match joined {
            Ok((_, done)) => Some(done),
            Err(e) => {
                report.entry(sidecar.clone()).or_default().errors += 1;
                tracing::error!(%sidecar, error = %e, "sidecar run broke; ignored");
                None
            }
        }
    }
}

/// One run: the result, and whether it failed by running out of time.
async fn call(s: &Sidecar, payload: &Value) -> (Result<Value, String>, bool) {
    match &s.backend {
        SidecarBackend::Http(h) => match super::runner::post_json(&s.id, h, payload).await {
            Ok(v) => (Ok(v), false),
            Err(e) => {
                let t = matches!(e, super::runner::ToolError::Timeout { .. });
                (Err(e.to_string()), t)
            }
        },
        SidecarBackend::Static { reply, delay } => {
            let work = async {
                tokio::time::sleep(*delay).await;
                reply.clone()
            };
            match tokio::time::timeout(s.timeout, work).await {
                Ok(v) => (Ok(v), false),
                Err(_) => (
                    Err(format!(
                        "sidecar '{}' gave no result within {} ms",
                        s.id,
                        s.timeout.as_millis()
                    )),
                    true,
                ),
            }
        }
    }
}

/// The words fed to the model: the label, then the result's `text` (or the result as JSON).
pub fn text_of(label: &str, v: &Value) -> String {
    let body = match v.get("text").and_then(Value::as_str) {
        Some(t) => t.trim().to_owned(),
        None => v.to_string(),
    };
    let mut s = format!("{label} {body}");
    if s.len() > MAX_TEXT {
        let mut end = MAX_TEXT;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sidecar(id: &str) -> Arc<Sidecar> {
        Arc::new(Sidecar {
            id: id.into(),
            description: String::new(),
            backend: SidecarBackend::Static {
                reply: json!({}),
                delay: Duration::ZERO,
            },
            timeout: Duration::from_secs(2),
            budget: None,
            deliver: Delivery::None,
            max_in_flight: 1,
            label: id.into(),
        })
    }

    /// A run whose task breaks frees its place (the next turn runs, not skipped) and counts as
    /// failed, not as still going when the call ends.
    #[tokio::test]
    async fn a_run_that_panics_frees_its_place_and_counts_as_failed() {
        let s = sidecar("analysis");
        let mut report = SidecarReport::new();
        let mut tasks = JoinSet::new();
        let mut in_flight = InFlight::default();
        in_flight.spawn(&mut tasks, &s, async { panic!("a broken backend") });
        assert_eq!(in_flight.count("analysis"), 1);
        let joined = tasks.join_next_with_id().await.expect("one task");
        assert!(in_flight.joined(joined, &mut report).is_none());
        assert_eq!(in_flight.count("analysis"), 0);
        assert_eq!(report["analysis"].errors, 1);

        let run = s.clone();
        in_flight.spawn(&mut tasks, &s, async move {
            (run, Duration::ZERO, Ok(json!({"ok": true})), false)
        });
        let joined = tasks.join_next_with_id().await.expect("one task");
        let (done, _, result, _) = in_flight.joined(joined, &mut report).expect("a result");
        assert_eq!(
            (done.id.as_str(), result),
            ("analysis", Ok(json!({"ok": true})))
        );
        assert_eq!(in_flight.count("analysis"), 0);
        assert_eq!(report["analysis"].errors, 1);
    }
}
