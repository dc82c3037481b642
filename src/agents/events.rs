//! What a call reports about its agents: the per-call event stream (seed 002's names, one JSON
//! object per line), transcript lines tagged with the agent, and the agent history (seed 000
//! §5.1: activated/deactivated times and message counts). Times are milliseconds on the call's
//! media timeline: from the caller leg's media start, as the report's turn and reconnect times.

use serde::Serialize;

use super::phrases::PhraseRule;
use super::strategy::Strategy;

/// Where a handoff decision came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TriggerKind {
    /// An operator (admin API) activated or deactivated an agent.
    Manual,
    /// The model called a generated `transfer_to_<agent>` tool.
    TransferTool,
    /// A routing tool's arguments (seed 000: `topic`, `requires_specialist`, …).
    FunctionArgs,
    /// Keywords or intent patterns in the caller's words.
    CallerWords,
    /// The caller's words matched the active specialist's handback triggers.
    CallerHandback,
    /// A handoff phrase in the agent's own words (seed 002 rules).
    AgentPhrase,
    /// The agent said its configured handback phrase.
    HandbackPhrase,
    /// Call data met an agent's activation conditions.
    CallData,
}

/// Who spoke a transcript line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Speaker {
    Caller,
    Agent,
}

/// One line of the call's transcript. Caller lines carry the agent that was listening.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TranscriptLine {
    pub role: Speaker,
    pub agent: String,
    pub text: String,
    pub at_ms: u64,
}

/// One activation of an agent in a call.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct AgentActivation {
    pub agent: String,
    pub activated_at_ms: u64,
    pub deactivated_at_ms: Option<u64>,
    /// Model turns the agent spoke while active.
    pub message_count: u32,
    /// Why it was brought in (a transfer tool's `summary`, or the trigger's description).
    pub activation_summary: String,
}

/// The per-call event stream, serialised as `{"type": "<name>", …}`.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum CallEvent {
    /// An agent became active (`handoff`: through a handoff rather than at call start).
    AgentStart {
        agent_id: String,
        agent_name: String,
        handoff: bool,
        summary: String,
        at_ms: u64,
    },
    /// A handoff was decided and is being carried out.
    HandoffAnnouncement {
        from: String,
        to: String,
        strategy: Strategy,
        trigger: TriggerKind,
        #[serde(skip_serializing_if = "Option::is_none")]
        phrase_rule: Option<PhraseRule>,
        reason: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        note: Option<String>,
        at_ms: u64,
    },
    /// The new agent's first audio: the handoff is audible. `gap_ms` is filled by the call
    /// layer from its playout (silence between the two agents' voiced frames).
    HandoffComplete {
        from: String,
        to: String,
        strategy: Strategy,
        gap_ms: Option<u64>,
        at_ms: u64,
    },
    /// A handoff was refused (loop guard, blocking rule, another handoff in progress).
    HandoffBlocked {
        from: String,
        to: String,
        trigger: TriggerKind,
        reason: String,
        at_ms: u64,
    },
    /// A handoff could not be completed (standby session failed); the previous agent stays.
    HandoffFailed {
        from: String,
        to: String,
        reason: String,
        at_ms: u64,
    },
    /// The model called a function (`allowed: false`: refused by the active agents' tool filter).
    ToolCalled {
        agent_id: String,
        tool_name: String,
        call_id: String,
        turn: u64,
        allowed: bool,
        #[serde(skip_serializing_if = "Option::is_none")]
        error: Option<String>,
        /// The call's arguments (what the agent's working state is made of).
        #[serde(skip_serializing_if = "serde_json::Value::is_null")]
        args: serde_json::Value,
        at_ms: u64,
    },
    /// A tool the model called gave no result: it failed (an MCP server down or lost, an error
    /// result, arguments its schema refused) or missed its deadline. The model was told `error`.
    ToolFailed {
        agent_id: String,
        tool_name: String,
        call_id: String,
        error: String,
        at_ms: u64,
    },
    /// A complete transcript line.
    Transcript {
        role: Speaker,
        agent_id: String,
        text: String,
        at_ms: u64,
    },
    /// An agent stopped being active.
    AgentEnd {
        agent_id: String,
        message_count: u32,
        duration_ms: u64,
        at_ms: u64,
    },
    /// A sidecar's result went to the live session (`delivery`: the wire form used).
    SidecarDelivered {
        sidecar: String,
        delivery: String,
        at_ms: u64,
    },
    /// A sidecar's result could not go to the live session without making the model speak
    /// (the model takes no context mid-session); `reason` says why.
    SidecarUndelivered {
        sidecar: String,
        reason: String,
        at_ms: u64,
    },
    /// A transfer of the caller to a person (a human agent) was decided; the call hands the
    /// caller on once the announcement has played.
    TransferRequested {
        from: String,
        to: String,
        destination: String,
        plan: crate::transfer::Handover,
        trigger: TriggerKind,
        summary: String,
        at_ms: u64,
    },
    /// A step of a transfer to a person: its stages, then one `finished` with the typed report
    /// (`outcome.kind`, the SIP status, `setup_ms`, …).
    Transfer {
        to: String,
        #[serde(flatten)]
        step: crate::transfer::Event,
        at_ms: u64,
    },
    /// Something worth knowing that changed nothing (e.g. a routing argument of the wrong type).
    Notice { message: String, at_ms: u64 },
}

impl CallEvent {
    /// The event as one line of JSON (no trailing newline).
    pub fn to_json_line(&self) -> String {
        // Serialising plain data with string keys cannot fail.
        serde_json::to_string(self)
            .unwrap_or_else(|e| format!("{{\"type\":\"error\",\"message\":\"{e}\"}}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_serialise_with_the_seed_names() {
        let e = CallEvent::HandoffAnnouncement {
            from: "crm_billing".into(),
            to: "product_promotions".into(),
            strategy: Strategy::ContextUpdate,
            trigger: TriggerKind::AgentPhrase,
            phrase_rule: Some(PhraseRule::ExactTemplate),
            reason: "r".into(),
            note: None,
            at_ms: 5,
        };
        let v: serde_json::Value = serde_json::from_str(&e.to_json_line()).unwrap();
        assert_eq!(v["type"], "handoff_announcement");
        assert_eq!(v["strategy"], "context_update");
        assert_eq!(v["trigger"], "agent_phrase");
        assert_eq!(v["phrase_rule"], "exact_template");
        assert!(v.get("note").is_none());
        let c = CallEvent::HandoffComplete {
            from: "a".into(),
            to: "b".into(),
            strategy: Strategy::Recreate,
            gap_ms: None,
            at_ms: 9,
        };
        let v: serde_json::Value = serde_json::from_str(&c.to_json_line()).unwrap();
        assert_eq!(v["type"], "handoff_complete");
        assert!(v["gap_ms"].is_null(), "present for the call layer to fill");
    }
}
