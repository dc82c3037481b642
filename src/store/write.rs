//! One write as a producer hands it to the store's writer: a call's start, a transcript line, a
//! tool call, the call's end with its figures, a recording, a context's change of state.

use tokio::sync::oneshot;

use super::{ContextStatus, HandoffRow, HistoryRow};

/// One write. Times are ms since the Unix epoch unless named `_ms` (then: since the call began).
#[derive(Debug)]
pub enum Write {
    CallStarted {
        id: String,
        caller: Option<String>,
        leg: String,
        agent_set: Option<String>,
        at: i64,
    },
    Line {
        call_id: String,
        seq: i64,
        role: String,
        agent: String,
        text: String,
        at_ms: i64,
    },
    ToolCall {
        call_id: String,
        seq: i64,
        agent: String,
        tool: String,
        call_ref: String,
        turn: i64,
        allowed: bool,
        args: Option<String>,
        error: Option<String>,
        at_ms: i64,
    },
    /// A tool call recorded by `ToolCall` gave no result: why (what the model was told).
    ToolFailed {
        call_id: String,
        call_ref: String,
        error: String,
    },
    /// The call ended: its figures, agent history and handoffs.
    CallEnded {
        id: String,
        at: i64,
        end_reason: String,
        figures: String,
        history: Vec<HistoryRow>,
        handoffs: Vec<HandoffRow>,
    },
    Recording {
        call_id: String,
        path: String,
    },
    /// A new active context; any other active context of the caller is paused first.
    ContextActivated {
        id: String,
        caller: String,
        agent: String,
        summary: String,
        call_id: Option<String>,
        position: Option<i64>,
        data: String,
        at: i64,
    },
    /// A paused context becomes active again (others of the caller are paused first).
    ContextResumed {
        id: String,
        caller: String,
        call_id: Option<String>,
        position: Option<i64>,
        at: i64,
    },
    /// A context's status (and, if given, working state) changes.
    ContextStatus {
        id: String,
        status: ContextStatus,
        data: Option<String>,
        at: i64,
    },
    /// Answered once every write queued before it is applied (used by tests and at shutdown).
    Barrier(oneshot::Sender<()>),
}
