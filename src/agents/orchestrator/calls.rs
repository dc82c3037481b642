//! The model's function calls: the tool filter (only the active agents' tools and transfers),
//! running configured tools, answering with their results (or an error in time, so a BLOCKING
//! call never stalls the session), and recording call data from arguments or results.

use std::sync::Arc;
use std::time::Instant;

use serde_json::{Value, json};

use super::handoff::{CallCtx, Request, Target};
use super::{Action, Orchestrator, Timer, ToolRun};
use crate::agents::events::{CallEvent, TriggerKind};
use crate::agents::registry::{CallDataSource, Tool};
use crate::agents::tools::{self, Resolved};
use crate::model::ToolCallRequest;
use crate::model::gemini::wire::FunctionResponseScheduling;

/// A configured tool running for the model.
#[derive(Debug)]
pub(super) struct PendingCall {
    pub id: String,
    pub tool: Arc<Tool>,
    pub deadline: Instant,
    /// Declared NON_BLOCKING: the model is not waiting for it.
    pub non_blocking: bool,
    /// A handoff brief to deliver with the result (`tool_response` from a routing tool).
    pub brief: Option<String>,
    pub epoch: u32,
    /// The agent whose turn called it.
    pub agent_id: String,
}

impl Orchestrator {
    pub(super) fn on_tool_call(&mut self, req: ToolCallRequest, now: Instant) {
        self.model_activity(now);
        let at_ms = self.ms(now);
        let agent_id = self.id(self.turn_agent);
        let called = |allowed: bool, error: Option<String>| CallEvent::ToolCalled {
            agent_id: agent_id.clone(),
            tool_name: req.name.clone(),
            call_id: req.id.clone(),
            turn: self.turn,
            allowed,
            error,
            args: req.args.clone(),
            at_ms,
        };
        if let Some(to) = self.pending
            && req.name.starts_with(tools::TRANSFER_PREFIX)
        {
            let e = called(true, None);
            self.event(e);
            self.absorb_transfer(&req, to, now);
            return;
        }
        match tools::resolve(&self.reg, &self.members, &req.name) {
            Resolved::Unavailable(why) => {
                let e = called(true, Some(why.clone()));
                self.event(e);
                self.tool_failed(&agent_id, &req.name, &req.id, why.clone(), now);
                let sched = self.refusal_scheduling(&req.name);
                let r = tools::error(&req.id, &req.name, &why, sched);
                self.actions.push_back(Action::ToolResponse(r));
            }
            Resolved::Refused(why) => {
                let e = called(false, Some(why.clone()));
                self.event(e);
                let sched = self.refusal_scheduling(&req.name);
                let r = tools::error(&req.id, &req.name, &why, sched);
                self.actions.push_back(Action::ToolResponse(r));
            }
            Resolved::Transfer(target) => {
                let e = called(true, None);
                self.event(e);
                let non_blocking = self.caps.non_blocking_tools;
                let ctx = CallCtx {
                    id: req.id.clone(),
                    name: req.name.clone(),
                    non_blocking,
                    transfer: true,
                };
                let summary = req
                    .args
                    .get("summary")
                    .and_then(Value::as_str)
                    .map(str::trim)
                    .filter(|s| !s.is_empty());
                let Some(summary) = summary else {
                    let msg = format!(
                        "argument 'summary' (a string) is required: one or two sentences for {} about what the caller needs",
                        self.reg.agent(target).name
                    );
                    let r = tools::error(&req.id, &req.name, &msg, ctx.sched());
                    self.actions.push_back(Action::ToolResponse(r));
                    return;
                };
                let reason = format!("{} called {}", self.reg.agent(self.lead()).name, req.name);
                // A refusal is told by its `handoff_blocked` event (and to a calling tool).
                let _ = self.begin_handoff(
                    Request {
                        target: Target::Agent(target),
                        trigger: TriggerKind::TransferTool,
                        phrase_rule: None,
                        reason,
                        summary: Some(summary.to_owned()),
                        call: Some(ctx),
                        manual: false,
                    },
                    now,
                );
            }
            Resolved::Person(index) => {
                let e = called(true, None);
                self.event(e);
                let ctx = CallCtx {
                    id: req.id.clone(),
                    name: req.name.clone(),
                    non_blocking: self.caps.non_blocking_tools,
                    transfer: true,
                };
                let summary = req
                    .args
                    .get("summary")
                    .and_then(Value::as_str)
                    .map(str::trim)
                    .unwrap_or_default()
                    .to_owned();
                // A refusal is told by its `handoff_blocked` event (and to a calling tool).
                let _ =
                    self.begin_person(index, TriggerKind::TransferTool, Some((ctx, summary)), now);
            }
            Resolved::Tool(tool) => {
                let e = called(true, None);
                self.event(e);
                let non_blocking = tools::declared_non_blocking(&tool, &self.caps);
                self.calls.push(PendingCall {
                    id: req.id.clone(),
                    tool: tool.clone(),
                    deadline: now + tool.deadline(),
                    non_blocking,
                    brief: None,
                    epoch: self.session.epoch,
                    agent_id: agent_id.clone(),
                });
                self.arm_call_timer();
                self.actions.push_back(Action::RunTool(ToolRun {
                    call_id: req.id.clone(),
                    agent: self.id(self.turn_agent),
                    tool: tool.clone(),
                    args: req.args.clone(),
                }));
                let data_changed =
                    tool.call_data == CallDataSource::Args && self.record_data(&req.args);
                if let Some(route) = &tool.route {
                    let ctx = CallCtx {
                        id: req.id.clone(),
                        name: req.name.clone(),
                        non_blocking,
                        transfer: false,
                    };
                    self.check_route_args(route, &ctx, &req.args, now);
                }
                if data_changed {
                    self.check_call_data(now);
                }
            }
        }
    }

    /// A transfer call made while a handoff is already decided: answered as the protocol
    /// requires, quietly (no second trigger). The same target is the same handoff (its other
    /// signal); another target is refused.
    fn absorb_transfer(&mut self, req: &ToolCallRequest, to: u32, now: Instant) {
        let quiet = Some(FunctionResponseScheduling::Silent);
        let target = req
            .name
            .strip_prefix(tools::TRANSFER_PREFIX)
            .and_then(|id| self.reg.agents.iter().find(|a| a.id == id))
            .map(|a| a.index);
        let name = self.reg.agent(to).name.clone();
        let r = if target == Some(to) {
            tools::output(
                &req.id,
                &req.name,
                json!({ "status": "transferred", "agent": name }),
                quiet,
            )
        } else {
            let reason = format!("a handoff to {name} is in progress");
            let e = CallEvent::HandoffBlocked {
                from: self.id(self.lead()),
                to: target.map_or_else(|| req.name.clone(), |t| self.id(t)),
                trigger: TriggerKind::TransferTool,
                reason: reason.clone(),
                at_ms: self.ms(now),
            };
            self.event(e);
            tools::error(&req.id, &req.name, &reason, quiet)
        };
        self.actions.push_back(Action::ToolResponse(r));
    }

    /// Scheduling for an error answer: WHEN_IDLE when the model declared the function
    /// non-blocking (so it hears about the refusal without being cut off).
    fn refusal_scheduling(&self, name: &str) -> Option<FunctionResponseScheduling> {
        let non_blocking = if name.starts_with(tools::TRANSFER_PREFIX) {
            self.caps.non_blocking_tools
        } else {
            self.reg
                .tool(name)
                .is_some_and(|t| tools::declared_non_blocking(t, &self.caps))
        };
        non_blocking.then_some(FunctionResponseScheduling::WhenIdle)
    }

    pub(super) fn on_tool_result(
        &mut self,
        call_id: &str,
        result: Result<Value, String>,
        now: Instant,
    ) {
        let Some(pos) = self
            .calls
            .iter()
            .position(|c| c.id == call_id && c.epoch == self.session.epoch)
        else {
            return; // cancelled, timed out, or from a replaced session
        };
        let call = self.calls.remove(pos);
        self.arm_call_timer();
        let mut sched = call
            .non_blocking
            .then(|| tools::scheduling(call.tool.scheduling));
        let name = &call.tool.name;
        let response = match result {
            Ok(v) => {
                let data_changed =
                    call.tool.call_data == CallDataSource::Result && self.record_data(&v);
                let value = match &call.brief {
                    Some(b) => {
                        if call.non_blocking {
                            sched = Some(FunctionResponseScheduling::WhenIdle);
                        }
                        json!({ "result": v, "handoff": b })
                    }
                    None => v,
                };
                let r = tools::output(&call.id, name, value, sched);
                self.actions.push_back(Action::ToolResponse(r));
                if data_changed {
                    self.check_call_data(now);
                }
                return;
            }
            Err(e) => {
                self.tool_failed(&call.agent_id, &call.tool.name, &call.id, e.clone(), now);
                tools::error(&call.id, name, &e, sched)
            }
        };
        self.actions.push_back(Action::ToolResponse(response));
    }

    /// Says that call `call_id` of `tool` (by `agent`) gave no result, and why (what the model
    /// is told).
    fn tool_failed(&mut self, agent: &str, tool: &str, call_id: &str, error: String, now: Instant) {
        tracing::warn!(%tool, %agent, %error, "tool call failed");
        let at_ms = self.ms(now);
        self.event(CallEvent::ToolFailed {
            agent_id: agent.to_owned(),
            tool_name: tool.to_owned(),
            call_id: call_id.to_owned(),
            error,
            at_ms,
        });
    }

    /// Answers every overdue call with an error.
    pub(super) fn expire_calls(&mut self, now: Instant) {
        let (due, keep): (Vec<PendingCall>, Vec<PendingCall>) = std::mem::take(&mut self.calls)
            .into_iter()
            .partition(|c| c.deadline <= now);
        self.calls = keep;
        for c in due {
            if c.epoch != self.session.epoch {
                continue;
            }
            let ms = c.tool.deadline().as_millis();
            let msg = format!("tool '{}' gave no result within {ms} ms", c.tool.name);
            self.tool_failed(&c.agent_id, &c.tool.name, &c.id, msg.clone(), now);
            let sched = c.non_blocking.then(|| tools::scheduling(c.tool.scheduling));
            let r = tools::error(&c.id, &c.tool.name, &msg, sched);
            self.actions.push_back(Action::ToolResponse(r));
        }
        self.arm_call_timer();
    }

    /// The model cancelled these calls (barge-in): their results are no longer wanted.
    pub(super) fn cancel_calls(&mut self, ids: &[String]) {
        self.calls.retain(|c| !ids.contains(&c.id));
        self.arm_call_timer();
    }

    fn arm_call_timer(&mut self) {
        match self.calls.iter().map(|c| c.deadline).min() {
            Some(at) => self.timers.set(Timer::ToolResult, at),
            None => self.timers.stop(Timer::ToolResult),
        }
    }

    /// A call the model is waiting on (BLOCKING, of the live session) is unanswered.
    pub(super) fn blocking_call_open(&self) -> bool {
        self.calls
            .iter()
            .any(|c| !c.non_blocking && c.epoch == self.session.epoch)
    }

    /// Drops the calls of a session that is being replaced.
    pub(super) fn drop_calls(&mut self) {
        self.calls.clear();
        self.timers.stop(Timer::ToolResult);
    }

    /// Copies the top-level scalar fields of `v` into the call data; true if anything changed.
    fn record_data(&mut self, v: &Value) -> bool {
        let Some(obj) = v.as_object() else {
            return false;
        };
        let mut changed = false;
        for (k, v) in obj {
            let s = match v {
                Value::String(s) => s.clone(),
                Value::Bool(b) => b.to_string(),
                Value::Number(n) => n.to_string(),
                _ => continue,
            };
            if self.data.get(k) != Some(&s) {
                self.data.insert(k.clone(), s);
                changed = true;
            }
        }
        changed
    }

    /// Attaches a handoff brief to a running routing call's answer.
    pub(super) fn attach_brief(&mut self, call_id: &str, brief: String) -> bool {
        match self.calls.iter_mut().find(|c| c.id == call_id) {
            Some(c) => {
                c.brief = Some(brief);
                true
            }
            None => false,
        }
    }
}
