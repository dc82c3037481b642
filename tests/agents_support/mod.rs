//! Test harness for the orchestrator: a virtual clock (plain `Instant` arithmetic), inputs fed
//! one at a time, every action drained and kept, and helpers that pick actions apart.

#![allow(dead_code)]

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use baton::agents::{self, Action, CallEvent, Input, Orchestrator, Registry};
use baton::model::gemini::wire::{ClientContent, ContextUpdate, FunctionResponse};
use baton::model::{Capabilities, ToolCallRequest};
use serde_json::{Value, json};

/// A 3.8-class model: everything in place.
pub const ALL: Capabilities = Capabilities {
    update_instructions: true,
    update_tools: true,
    non_blocking_tools: true,
    mid_session_client_content: true,
    resumption: true,
    history_config: true,
    calls_pause_speech: false,
};
/// A 2.5-native-audio-class model: non-blocking tools and client content, no `contextUpdate`.
pub const NO_UPDATE: Capabilities = Capabilities {
    update_instructions: false,
    update_tools: false,
    non_blocking_tools: true,
    mid_session_client_content: true,
    resumption: true,
    history_config: true,
    calls_pause_speech: false,
};
/// Client content mid-session only (synchronous tools, no `contextUpdate`).
pub const CONTENT_ONLY: Capabilities = Capabilities {
    update_instructions: false,
    update_tools: false,
    non_blocking_tools: false,
    mid_session_client_content: true,
    resumption: true,
    history_config: true,
    calls_pause_speech: false,
};
/// Nothing in place: every handoff needs a new session.
pub const BARE: Capabilities = Capabilities {
    update_instructions: false,
    update_tools: false,
    non_blocking_tools: false,
    mid_session_client_content: false,
    resumption: true,
    history_config: true,
    calls_pause_speech: false,
};

pub fn shipped(name: &str) -> Arc<Registry> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("config/agents")
        .join(name);
    Arc::new(agents::load(&p).unwrap())
}

pub fn inline(text: &str) -> Arc<Registry> {
    Arc::new(agents::parse(text, Path::new("inline.toml")).unwrap())
}

pub struct H {
    pub o: Orchestrator,
    pub t0: Instant,
    pub now: Instant,
    pub log: Vec<Action>,
    next_id: u32,
}

impl H {
    pub fn new(reg: Arc<Registry>, caps: Capabilities) -> H {
        let t0 = Instant::now();
        let mut h = H {
            o: Orchestrator::new(reg, caps, t0),
            t0,
            now: t0,
            log: Vec::new(),
            next_id: 0,
        };
        h.drain();
        h
    }

    /// The actions produced since the last drain (also after a direct `o.handle`).
    pub fn drain(&mut self) -> Vec<Action> {
        let mut out = Vec::new();
        while let Some(a) = self.o.poll_action() {
            out.push(a);
        }
        self.log.extend(out.iter().cloned());
        out
    }

    /// Feeds one input (100 ms after the previous one) and returns the actions it produced.
    pub fn feed(&mut self, i: Input) -> Vec<Action> {
        self.now += Duration::from_millis(100);
        self.o.handle(i, self.now).unwrap();
        self.drain()
    }

    /// Moves the clock, firing the orchestrator's deadlines on the way.
    pub fn advance(&mut self, d: Duration) -> Vec<Action> {
        let until = self.now + d;
        let mut out = Vec::new();
        while let Some((at, _)) = self.o.poll_timeout() {
            if at > until {
                break;
            }
            self.now = self.now.max(at);
            self.o.handle(Input::Timeout, self.now).unwrap();
            out.extend(self.drain());
        }
        self.now = until;
        out
    }

    pub fn caller(&mut self, text: &str) -> Vec<Action> {
        self.feed(Input::CallerTranscript {
            text: text.into(),
            finished: true,
        })
    }

    /// The model starts a turn and says `text` (audio first, then the words).
    pub fn speaks(&mut self, text: &str) -> Vec<Action> {
        let mut a = self.feed(Input::ModelAudio);
        a.extend(self.feed(Input::AgentTranscript {
            text: text.into(),
            finished: false,
        }));
        a
    }

    pub fn generation_complete(&mut self) -> Vec<Action> {
        self.feed(Input::GenerationComplete)
    }

    pub fn turn_complete(&mut self) -> Vec<Action> {
        self.feed(Input::TurnComplete)
    }

    /// A whole model turn: speaks, generationComplete, turnComplete.
    pub fn model_turn(&mut self, text: &str) -> Vec<Action> {
        let mut a = self.speaks(text);
        a.extend(self.generation_complete());
        a.extend(self.turn_complete());
        a
    }

    /// The model calls `name(args)`; returns (call id, actions).
    pub fn call(&mut self, name: &str, args: Value) -> (String, Vec<Action>) {
        self.next_id += 1;
        let id = format!("fc_{}", self.next_id);
        let a = self.feed(Input::ToolCall(ToolCallRequest {
            id: id.clone(),
            name: name.into(),
            args,
        }));
        (id, a)
    }

    /// Runs every `RunTool` among `actions` the way the shell does (static tools only) and feeds
    /// the results.
    pub fn run_tools(&mut self, actions: &[Action]) -> Vec<Action> {
        let runs: Vec<_> = actions
            .iter()
            .filter_map(|a| match a {
                Action::RunTool(r) => Some(r.clone()),
                _ => None,
            })
            .collect();
        let mut out = Vec::new();
        for r in runs {
            let v = match &r.tool.backend {
                agents::registry::Backend::Static { reply } => Ok(reply.clone()),
                agents::registry::Backend::Http(_) | agents::registry::Backend::Mcp(_) => {
                    Err("no network in this test".to_owned())
                }
            };
            out.extend(self.feed(Input::ToolResult {
                call_id: r.call_id,
                result: v,
            }));
        }
        out
    }

    pub fn lead(&self) -> String {
        self.o.active()[0].id.clone()
    }

    pub fn active(&self) -> Vec<String> {
        self.o.active().into_iter().map(|a| a.id).collect()
    }

    pub fn events(&self) -> Vec<CallEvent> {
        events(&self.log)
    }
}

pub fn events(actions: &[Action]) -> Vec<CallEvent> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Event(e) => Some(e.clone()),
            _ => None,
        })
        .collect()
}

/// The JSON of every event, for field checks.
pub fn event_json(actions: &[Action], kind: &str) -> Vec<Value> {
    events(actions)
        .iter()
        .map(|e| serde_json::from_str::<Value>(&e.to_json_line()).unwrap())
        .filter(|v| v["type"] == kind)
        .collect()
}

pub fn announcements(actions: &[Action]) -> Vec<Value> {
    event_json(actions, "handoff_announcement")
}

pub fn blocked(actions: &[Action]) -> Vec<Value> {
    event_json(actions, "handoff_blocked")
}

pub fn context_updates(actions: &[Action]) -> Vec<ContextUpdate> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::ContextUpdate(c) => Some(c.clone()),
            _ => None,
        })
        .collect()
}

pub fn responses(actions: &[Action]) -> Vec<FunctionResponse> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::ToolResponse(r) => Some(r.clone()),
            _ => None,
        })
        .collect()
}

pub fn contents(actions: &[Action]) -> Vec<ClientContent> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::ClientContent(c) => Some(c.clone()),
            _ => None,
        })
        .collect()
}

pub fn content_text(c: &ClientContent) -> String {
    c.turns.as_ref().unwrap()[0].parts[0]
        .text
        .clone()
        .unwrap_or_default()
}

pub fn instruction(c: &ContextUpdate) -> String {
    c.system_instruction.as_ref().unwrap().parts[0]
        .text
        .clone()
        .unwrap_or_default()
}

/// Names of the functions a `tools` list declares.
pub fn function_names(tools: &[Value]) -> Vec<String> {
    tools
        .iter()
        .flat_map(|t| {
            t["functionDeclarations"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .map(|d| d["name"].as_str().unwrap_or_default().to_owned())
        .collect()
}

pub fn no_args() -> Value {
    json!({})
}
