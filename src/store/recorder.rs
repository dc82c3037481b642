//! One call's observer: follows the call's events (an [`crate::call::tap::EventSink`]
//! listener, off the audio path) and turns them into store writes — transcript lines, tool
//! calls, the caller's agent contexts (seed 001, through a [`ContextTracker`]) — while keeping a
//! live view for the admin API. At the call's end, [`call_ended`] writes the call's figures,
//! agent history and handoffs from its report.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::{HandoffRow, HistoryRow, LineRow, Store, StoreWriter, Write, new_id, now_ms};
use crate::agents::CallEvent;
use crate::agents::contexts::{ContextOp, ContextTracker, Resumable};
use crate::call::CallReport;
use crate::call::metrics::{round2, summarize};
use crate::store::rows::ContextStatus;

/// What the admin API shows of a live call.
#[derive(Clone, Debug, Default, Serialize)]
pub struct LiveView {
    /// The active agents, the lead first.
    pub active: Vec<String>,
    pub transcript: Vec<LineRow>,
    pub history: Vec<HistoryRow>,
    /// Handoff events so far (announcements, completions, refusals).
    pub handoffs: Vec<Value>,
    pub tool_calls: u64,
    pub sidecar_deliveries: u64,
}

/// A live view shared between the observer and the admin API.
pub type SharedView = Arc<Mutex<LiveView>>;

/// The caller's contexts at call start, and how long fetching them took.
#[derive(Clone, Debug)]
pub struct Loaded {
    pub contexts: Vec<Resumable>,
    pub took: Duration,
    /// The store did not answer in time (the call goes on without them).
    pub timed_out: bool,
}

/// Fetches the caller's resumable contexts, waiting at most `limit` (before the call's audio
/// starts; on timeout or error the call proceeds without them).
pub async fn load_contexts(store: &Store, caller: &str, limit: Duration) -> Loaded {
    let t0 = Instant::now();
    let r = tokio::time::timeout(limit, store.resumable_contexts(caller)).await;
    let took = t0.elapsed();
    let (contexts, timed_out) = match r {
        Ok(Ok(rows)) => {
            // Newest first: one context per agent, the latest.
            let mut out: Vec<Resumable> = Vec::new();
            for c in rows {
                if !out.iter().any(|r| r.agent == c.agent) {
                    out.push(Resumable {
                        context_id: c.id,
                        agent: c.agent,
                        summary: c.activation_summary,
                        data: c.context_data,
                    });
                }
            }
            (out, false)
        }
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "caller contexts unavailable; the call starts without them");
            (Vec::new(), false)
        }
        Err(_) => {
            tracing::warn!(
                limit_ms = limit.as_millis() as u64,
                "the store did not answer in time; the call starts without the caller's contexts"
            );
            (Vec::new(), true)
        }
    };
    Loaded {
        contexts,
        took,
        timed_out,
    }
}

/// Follows one call's events.
pub struct Recorder {
    pub call_id: String,
    pub caller: Option<String>,
    pub writer: Option<StoreWriter>,
    pub tracker: Option<ContextTracker>,
    pub view: SharedView,
}

/// What the observer saw, for the call's end.
#[derive(Clone, Debug, Default)]
pub struct Observed {
    pub lines: i64,
    pub tool_calls: i64,
    pub context_ops: Vec<ContextOp>,
}

impl Recorder {
    /// Runs until the call's events end.
    pub async fn run(mut self, mut events: mpsc::Receiver<std::sync::Arc<CallEvent>>) -> Observed {
        let mut seen = Observed::default();
        while let Some(ev) = events.recv().await {
            self.on_event(&ev, &mut seen);
        }
        if let Some(op) = self.tracker.as_mut().and_then(ContextTracker::finish) {
            self.context_op(&op);
            seen.context_ops.push(op);
        }
        seen
    }

    fn write(&self, w: Write) {
        if let Some(wr) = &self.writer {
            wr.write(w);
        }
    }

    fn on_event(&mut self, ev: &CallEvent, seen: &mut Observed) {
        if let Some(t) = self.tracker.as_mut() {
            let ops = t.on_event(ev, || new_id("ctx_"));
            for op in ops {
                self.context_op(&op);
                seen.context_ops.push(op);
            }
        }
        let mut v = self.view.lock().unwrap_or_else(|p| p.into_inner());
        match ev {
            CallEvent::Transcript {
                role,
                agent_id,
                text,
                at_ms,
            } => {
                // The orchestrator's rule for its history: an agent's line counts toward the
                // activation its agent last began.
                if *role == crate::agents::Speaker::Agent
                    && let Some(h) = v.history.iter_mut().rev().find(|h| &h.agent == agent_id)
                {
                    h.message_count += 1;
                }
                let role = serde_json::to_value(role)
                    .ok()
                    .and_then(|r| r.as_str().map(str::to_owned))
                    .unwrap_or_default();
                let line = LineRow {
                    seq: seen.lines,
                    role: role.clone(),
                    agent: agent_id.clone(),
                    text: text.clone(),
                    at_ms: *at_ms as i64,
                };
                seen.lines += 1;
                v.transcript.push(line);
                drop(v);
                self.write(Write::Line {
                    call_id: self.call_id.clone(),
                    seq: seen.lines - 1,
                    role,
                    agent: agent_id.clone(),
                    text: text.clone(),
                    at_ms: *at_ms as i64,
                });
            }
            CallEvent::ToolCalled {
                agent_id,
                tool_name,
                call_id,
                turn,
                allowed,
                error,
                args,
                at_ms,
            } => {
                v.tool_calls += 1;
                drop(v);
                self.write(Write::ToolCall {
                    call_id: self.call_id.clone(),
                    seq: seen.tool_calls,
                    agent: agent_id.clone(),
                    tool: tool_name.clone(),
                    call_ref: call_id.clone(),
                    turn: *turn as i64,
                    allowed: *allowed,
                    args: (!args.is_null()).then(|| args.to_string()),
                    error: error.clone(),
                    at_ms: *at_ms as i64,
                });
                seen.tool_calls += 1;
            }
            CallEvent::ToolFailed { call_id, error, .. } => {
                drop(v);
                self.write(Write::ToolFailed {
                    call_id: self.call_id.clone(),
                    call_ref: call_id.clone(),
                    error: error.clone(),
                });
            }
            CallEvent::AgentStart {
                agent_id,
                summary,
                at_ms,
                ..
            } => {
                // A joining agent goes behind the lead only in a joint call; the orchestrator
                // reports the lead through its handoff announcement, so keep arrival order.
                v.active.retain(|a| a != agent_id);
                v.active.insert(0, agent_id.clone());
                let seq = v.history.len() as i64;
                v.history.push(HistoryRow {
                    seq,
                    agent: agent_id.clone(),
                    activated_at_ms: *at_ms as i64,
                    deactivated_at_ms: None,
                    message_count: 0,
                    activation_summary: summary.clone(),
                });
            }
            CallEvent::AgentEnd {
                agent_id,
                message_count,
                at_ms,
                ..
            } => {
                v.active.retain(|a| a != agent_id);
                if let Some(h) = v
                    .history
                    .iter_mut()
                    .rev()
                    .find(|h| &h.agent == agent_id && h.deactivated_at_ms.is_none())
                {
                    h.deactivated_at_ms = Some(*at_ms as i64);
                    h.message_count = h.message_count.max(i64::from(*message_count));
                }
            }
            CallEvent::HandoffAnnouncement { .. }
            | CallEvent::HandoffComplete { .. }
            | CallEvent::HandoffBlocked { .. }
            | CallEvent::HandoffFailed { .. } => {
                v.handoffs
                    .push(serde_json::to_value(ev).unwrap_or(Value::Null));
            }
            CallEvent::SidecarDelivered { .. } => v.sidecar_deliveries += 1,
            CallEvent::SidecarUndelivered { .. }
            | CallEvent::Notice { .. }
            | CallEvent::TransferRequested { .. }
            | CallEvent::Transfer { .. } => {}
        }
    }

    fn context_op(&self, op: &ContextOp) {
        let Some(caller) = self.caller.clone() else {
            return;
        };
        let at = now_ms();
        let w = match op {
            ContextOp::Activate {
                id,
                agent,
                summary,
                position,
                data,
            } => Write::ContextActivated {
                id: id.clone(),
                caller,
                agent: agent.clone(),
                summary: summary.clone(),
                call_id: Some(self.call_id.clone()),
                position: Some(*position),
                data: data.to_string(),
                at,
            },
            ContextOp::Resume { id, position, .. } => Write::ContextResumed {
                id: id.clone(),
                caller,
                call_id: Some(self.call_id.clone()),
                position: Some(*position),
                at,
            },
            ContextOp::Pause { id, data } => Write::ContextStatus {
                id: id.clone(),
                status: ContextStatus::Paused,
                data: Some(data.to_string()),
                at,
            },
            ContextOp::Complete { id, data } => Write::ContextStatus {
                id: id.clone(),
                status: ContextStatus::Completed,
                data: Some(data.to_string()),
                at,
            },
        };
        self.write(w);
    }
}

/// The figures of a call as stored (names as in `summary.json`).
pub fn figures(report: &CallReport, extra: Value) -> Value {
    let p = |v: &[f64]| {
        let s = summarize(v);
        json!({"p50": s.p50.map(round2), "p95": s.p95.map(round2), "p99": s.p99.map(round2), "max": s.max.map(round2)})
    };
    let mut f = json!({
        "turns": report.turns.len(),
        "first_audio_ms": p(&report.first_audio_ms),
        "uplink_added_ms": p(&report.uplink_added_ms),
        "downlink_added_ms": p(&report.downlink_added_ms),
        "underruns": report.underruns,
        "late_ticks": report.late_ticks,
        "interruptions": report.interruptions,
        "handoffs": report.handoffs.len(),
        "handoff_gap_ms": report.handoff_gap_ms,
        "tool_calls": report.tool_calls,
    });
    if let (Some(o), Value::Object(e)) = (f.as_object_mut(), extra) {
        o.extend(e);
    }
    f
}

/// The call-ended write: figures, agent history and handoffs from the report.
pub fn call_ended(id: &str, report: &CallReport, figures: Value) -> Write {
    let history: Vec<HistoryRow> = report
        .agent_history
        .as_array()
        .map(|a| {
            a.iter()
                .enumerate()
                .map(|(i, h)| HistoryRow {
                    seq: i as i64,
                    agent: h["agent"].as_str().unwrap_or_default().to_owned(),
                    activated_at_ms: h["activated_at_ms"].as_i64().unwrap_or_default(),
                    deactivated_at_ms: h["deactivated_at_ms"].as_i64(),
                    message_count: h["message_count"].as_i64().unwrap_or_default(),
                    activation_summary: h["activation_summary"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned(),
                })
                .collect()
        })
        .unwrap_or_default();
    let handoffs = report
        .handoffs
        .iter()
        .enumerate()
        .map(|(i, h)| HandoffRow {
            seq: i as i64,
            from: h.from.clone(),
            to: h.to.clone(),
            strategy: h.strategy.clone(),
            trigger: h.trigger.clone(),
            gap_ms: h.gap_ms,
            announcement_queued_ms: h.announcement_queued_ms,
            trigger_to_wire_ms: h.trigger_to_wire_ms,
            heard_at_ms: h.heard_at_ms,
            at_ms: h.at_ms as i64,
        })
        .collect();
    Write::CallEnded {
        id: id.to_owned(),
        at: now_ms(),
        end_reason: report.end_reason.clone(),
        figures: figures.to_string(),
        history,
        handoffs,
    }
}
