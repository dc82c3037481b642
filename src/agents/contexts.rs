//! Seed 001's agent contexts, the pure part. A *context* is a specialist's piece of work for
//! one caller: why the router brought it in (the activation summary: a transfer tool's `summary`,
//! or the agent's configured template), where in the transcript that happened, its working state
//! (JSON: the arguments of the agent's tool calls, merged), and its status.
//!
//! - **activate**: a specialist starts in a call → a new `active` context (the caller's other
//!   active one, if any, is paused: at most one is active per caller);
//! - **pause**: the call ends while the specialist is active, or the caller is moved to another
//!   specialist → `paused`, working state kept;
//! - **complete**: the specialist hands the caller back to the primary agent → `completed`;
//! - **resume**: in a later call from the same caller, a handoff to an agent with a paused (or
//!   still active) context reactivates that context, and the agent's instruction or brief
//!   carries the earlier summary and working state ([`resume_brief`]) — not the whole history.
//!
//! [`ContextTracker`] turns a call's events into these operations; the store applies them.
//! The orchestrator only reads [`Resumable`]s (see `Orchestrator::resume_contexts`).

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::events::CallEvent;

/// A context a call may resume (loaded from the store before the call's audio starts).
#[derive(Clone, Debug, PartialEq)]
pub struct Resumable {
    pub context_id: String,
    pub agent: String,
    pub summary: String,
    pub data: Value,
}

/// What the resumed agent is told, before any summary of the new handoff.
pub fn resume_brief(r: &Resumable, fresh: Option<&str>) -> String {
    let mut s = format!(
        "You are resuming a task you paused with this caller in an earlier call. Why you were \
         brought in then: {}",
        r.summary.trim()
    );
    let empty = r.data.as_object().is_some_and(Map::is_empty) || r.data.is_null();
    if !empty {
        s.push_str(&format!(" Working state so far: {}.", r.data));
    }
    s.push_str(" Pick up where you left off; do not ask again for what is known.");
    if let Some(f) = fresh.map(str::trim).filter(|f| !f.is_empty()) {
        s.push_str(&format!(" Now: {f}"));
    }
    s
}

/// An operation on the store's contexts.
#[derive(Clone, Debug, PartialEq)]
pub enum ContextOp {
    Activate {
        id: String,
        agent: String,
        summary: String,
        /// Transcript lines before the activation.
        position: i64,
        data: Value,
    },
    Resume {
        id: String,
        agent: String,
        position: i64,
    },
    Pause {
        id: String,
        data: Value,
    },
    Complete {
        id: String,
        data: Value,
    },
}

/// Follows one call's events and says what happens to the caller's contexts.
#[derive(Debug)]
pub struct ContextTracker {
    primary: String,
    resumable: Vec<Resumable>,
    /// The active specialist's context: (context id, agent).
    active: Option<(String, String)>,
    state: BTreeMap<String, Map<String, Value>>,
    lines: i64,
    announced_to: Option<String>,
}

impl ContextTracker {
    /// A call whose primary agent is `primary`, with the caller's resumable contexts.
    pub fn new(primary: &str, resumable: Vec<Resumable>) -> ContextTracker {
        ContextTracker {
            primary: primary.to_owned(),
            resumable,
            active: None,
            state: BTreeMap::new(),
            lines: 0,
            announced_to: None,
        }
    }

    /// The operations an event causes; `new_id` names a new context.
    pub fn on_event(
        &mut self,
        ev: &CallEvent,
        mut new_id: impl FnMut() -> String,
    ) -> Vec<ContextOp> {
        let mut ops = Vec::new();
        match ev {
            CallEvent::Transcript { .. } => self.lines += 1,
            CallEvent::ToolCalled {
                agent_id,
                tool_name,
                allowed: true,
                args,
                ..
            } if !tool_name.starts_with("transfer_to_") => {
                if let Some(obj) = args.as_object() {
                    let st = self.state.entry(agent_id.clone()).or_default();
                    for (k, v) in obj {
                        st.insert(k.clone(), v.clone());
                    }
                }
            }
            CallEvent::HandoffAnnouncement { to, .. } => self.announced_to = Some(to.clone()),
            CallEvent::AgentStart {
                agent_id, summary, ..
            } if *agent_id != self.primary => {
                if let Some(op) = self.close(agent_id) {
                    ops.push(op);
                }
                match self.resumable.iter().position(|r| &r.agent == agent_id) {
                    Some(i) => {
                        let r = self.resumable.remove(i);
                        if let Value::Object(m) = &r.data {
                            let st = self.state.entry(agent_id.clone()).or_default();
                            for (k, v) in m {
                                st.entry(k.clone()).or_insert_with(|| v.clone());
                            }
                        }
                        self.active = Some((r.context_id.clone(), agent_id.clone()));
                        ops.push(ContextOp::Resume {
                            id: r.context_id,
                            agent: agent_id.clone(),
                            position: self.lines,
                        });
                    }
                    None => {
                        let id = new_id();
                        self.active = Some((id.clone(), agent_id.clone()));
                        ops.push(ContextOp::Activate {
                            id,
                            agent: agent_id.clone(),
                            summary: summary.clone(),
                            position: self.lines,
                            data: self.data(agent_id),
                        });
                    }
                }
            }
            CallEvent::AgentEnd { agent_id, .. } => {
                let back = self.announced_to.as_deref() == Some(self.primary.as_str());
                if self.active.as_ref().is_some_and(|(_, a)| a == agent_id) {
                    let (id, agent) = self.active.take().unwrap_or_default();
                    let data = self.data(&agent);
                    ops.push(if back {
                        ContextOp::Complete { id, data }
                    } else {
                        ContextOp::Pause { id, data }
                    });
                }
            }
            _ => {}
        }
        ops
    }

    /// The call ended: an agent still at work pauses, keeping its state.
    pub fn finish(&mut self) -> Option<ContextOp> {
        let (id, agent) = self.active.take()?;
        Some(ContextOp::Pause {
            id,
            data: self.data(&agent),
        })
    }

    /// Another specialist starts while one is active (not through its end): pause that one.
    fn close(&mut self, starting: &str) -> Option<ContextOp> {
        let (id, agent) = self.active.take_if(|(_, a)| a.as_str() != starting)?;
        let data = self.data(&agent);
        Some(ContextOp::Pause { id, data })
    }

    fn data(&self, agent: &str) -> Value {
        Value::Object(self.state.get(agent).cloned().unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn start(agent: &str, summary: &str) -> CallEvent {
        CallEvent::AgentStart {
            agent_id: agent.into(),
            agent_name: agent.into(),
            handoff: true,
            summary: summary.into(),
            at_ms: 0,
        }
    }

    fn end(agent: &str) -> CallEvent {
        CallEvent::AgentEnd {
            agent_id: agent.into(),
            message_count: 1,
            duration_ms: 1,
            at_ms: 0,
        }
    }

    fn announce(to: &str) -> CallEvent {
        CallEvent::HandoffAnnouncement {
            from: String::new(),
            to: to.into(),
            strategy: crate::agents::Strategy::ContextUpdate,
            trigger: crate::agents::TriggerKind::TransferTool,
            phrase_rule: None,
            reason: String::new(),
            note: None,
            at_ms: 0,
        }
    }

    fn tool(agent: &str, name: &str, args: Value) -> CallEvent {
        CallEvent::ToolCalled {
            agent_id: agent.into(),
            tool_name: name.into(),
            call_id: "c".into(),
            turn: 1,
            allowed: true,
            error: None,
            args,
            at_ms: 0,
        }
    }

    fn line() -> CallEvent {
        CallEvent::Transcript {
            role: crate::agents::Speaker::Caller,
            agent_id: "router".into(),
            text: "hi".into(),
            at_ms: 0,
        }
    }

    #[test]
    fn activate_collect_state_pause_at_call_end() {
        let mut t = ContextTracker::new("router", vec![]);
        let id = || "ctx1".to_owned();
        assert!(
            t.on_event(&start("router", ""), id).is_empty(),
            "primary: no context"
        );
        t.on_event(&line(), id);
        t.on_event(&announce("offer"), id);
        let ops = t.on_event(&start("offer", "wants a Camry quote"), id);
        assert_eq!(
            ops,
            vec![ContextOp::Activate {
                id: "ctx1".into(),
                agent: "offer".into(),
                summary: "wants a Camry quote".into(),
                position: 1,
                data: json!({}),
            }]
        );
        t.on_event(
            &tool("offer", "transfer_to_router", json!({"summary": "x"})),
            id,
        );
        t.on_event(
            &tool("offer", "update_offer", json!({"brand": "Toyota"})),
            id,
        );
        t.on_event(
            &tool("offer", "update_offer", json!({"budget": 200000})),
            id,
        );
        assert_eq!(
            t.finish(),
            Some(ContextOp::Pause {
                id: "ctx1".into(),
                data: json!({"brand": "Toyota", "budget": 200000}),
            })
        );
    }

    #[test]
    fn resume_then_complete_on_handback() {
        let r = Resumable {
            context_id: "old".into(),
            agent: "offer".into(),
            summary: "wants a Camry quote".into(),
            data: json!({"brand": "Toyota"}),
        };
        let mut t = ContextTracker::new("router", vec![r.clone()]);
        let id = || unreachable!("resumed, not created");
        let ops = t.on_event(&start("offer", "back again"), id);
        assert_eq!(
            ops,
            vec![ContextOp::Resume {
                id: "old".into(),
                agent: "offer".into(),
                position: 0
            }]
        );
        t.on_event(
            &tool("offer", "update_offer", json!({"financing": "lease"})),
            id,
        );
        t.on_event(&announce("router"), id);
        let ops = t.on_event(&end("offer"), id);
        assert_eq!(
            ops,
            vec![ContextOp::Complete {
                id: "old".into(),
                data: json!({"brand": "Toyota", "financing": "lease"}),
            }]
        );
        assert_eq!(t.finish(), None);
        let b = resume_brief(&r, Some("caller asks about leasing"));
        assert!(b.contains("wants a Camry quote") && b.contains("\"brand\":\"Toyota\""));
        assert!(b.ends_with("Now: caller asks about leasing"));
    }

    #[test]
    fn moving_to_another_specialist_pauses() {
        let mut t = ContextTracker::new("router", vec![]);
        let mut n = 0;
        let mut id = || {
            n += 1;
            format!("c{n}")
        };
        t.on_event(&start("offer", "a"), &mut id);
        t.on_event(&announce("booking"), &mut id);
        let ops = t.on_event(&end("offer"), &mut id);
        assert!(matches!(&ops[..], [ContextOp::Pause { id, .. }] if id == "c1"));
        let ops = t.on_event(&start("booking", "b"), &mut id);
        assert!(matches!(&ops[..], [ContextOp::Activate { id, .. }] if id == "c2"));
    }
}
