//! What reads return (and the admin API serialises as JSON).

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A context's lifecycle (seed 001).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ContextStatus {
    Active,
    Paused,
    Completed,
}

impl ContextStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            ContextStatus::Active => "active",
            ContextStatus::Paused => "paused",
            ContextStatus::Completed => "completed",
        }
    }

    pub fn parse(s: &str) -> Option<ContextStatus> {
        match s {
            "active" => Some(ContextStatus::Active),
            "paused" => Some(ContextStatus::Paused),
            "completed" => Some(ContextStatus::Completed),
            _ => None,
        }
    }
}

/// One agent context of a caller.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ContextRow {
    pub id: String,
    pub caller: String,
    pub agent: String,
    pub activation_summary: String,
    pub activation_call_id: Option<String>,
    pub activation_position: Option<i64>,
    /// The agent's working state (JSON).
    pub context_data: Value,
    pub status: ContextStatus,
    pub created_at: i64,
    pub updated_at: i64,
    pub completed_at: Option<i64>,
}

/// One call.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CallRow {
    pub id: String,
    pub caller: Option<String>,
    pub leg: String,
    pub agent_set: Option<String>,
    pub started_at: i64,
    pub ended_at: Option<i64>,
    pub end_reason: Option<String>,
    /// The call's figures (JSON), once it ended.
    pub figures: Option<Value>,
    pub recording: Option<String>,
}

/// One transcript line.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LineRow {
    pub seq: i64,
    /// `caller` or `agent`.
    pub role: String,
    /// The agent speaking, or listening to the caller.
    pub agent: String,
    pub text: String,
    pub at_ms: i64,
}

/// One activation of an agent in a call.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct HistoryRow {
    pub seq: i64,
    pub agent: String,
    pub activated_at_ms: i64,
    pub deactivated_at_ms: Option<i64>,
    pub message_count: i64,
    pub activation_summary: String,
}

/// One function call of the model.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ToolCallRow {
    pub seq: i64,
    pub agent: String,
    pub tool: String,
    pub call_ref: String,
    pub turn: i64,
    pub allowed: bool,
    pub args: Option<Value>,
    pub error: Option<String>,
    pub at_ms: i64,
}

/// One handoff with its figures.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct HandoffRow {
    pub seq: i64,
    pub from: String,
    pub to: String,
    pub strategy: String,
    pub trigger: String,
    pub gap_ms: Option<f64>,
    pub announcement_queued_ms: Option<f64>,
    pub trigger_to_wire_ms: Option<f64>,
    pub heard_at_ms: Option<f64>,
    pub at_ms: i64,
}

/// JSON text from the store as a value (text that is not JSON is kept as a string).
pub(crate) fn json_of(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_owned()))
}
