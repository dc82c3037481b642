//! The agent-set file as written (`config/agents/<set>.toml`): serde mirrors with unknown keys
//! refused and documented defaults. Nothing here is checked beyond types; [`super::load()`] turns a
//! [`SetFile`] into a validated [`super::Registry`] and reports every problem with its key.
//!
//! Every key has a default here, required ones too (an empty name, no backend): the decoder takes
//! a key of the wrong kind out and decodes the rest again, and a required key taken out must not
//! take its whole table with it. Whether a required key is there is the loader's check.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

use super::registry::Delivery;

/// One agent set: the agents of a call, their tools and the guards that apply.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SetFile {
    /// Required; a file without it is reported by the loader.
    #[serde(default)]
    pub set: Option<SetSection>,
    #[serde(default)]
    pub guards: GuardsSection,
    #[serde(default)]
    pub phrases: PhrasesSection,
    #[serde(default)]
    pub agents: BTreeMap<String, AgentSection>,
    #[serde(default)]
    pub tools: BTreeMap<String, ToolSection>,
    /// Agents beside the live session (seed 004), see [`super::sidecar`].
    #[serde(default)]
    pub sidecars: BTreeMap<String, SidecarSection>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SetSection {
    /// Short name of the set (logs, events); required.
    pub name: String,
    pub description: String,
    /// A warm standby session must report ready within this, or the handoff is abandoned.
    pub standby_timeout_ms: u64,
    /// A message held for a turn boundary is sent anyway when the model has not started its
    /// reply to the caller within this long.
    pub held_timeout_ms: u64,
    /// After an agent says it is handing off without naming whom to, the caller's next words
    /// pick the agent for this long.
    pub reroute_window_s: u64,
}

impl Default for SetSection {
    fn default() -> Self {
        SetSection {
            name: String::new(),
            description: String::new(),
            standby_timeout_ms: 5_000,
            held_timeout_ms: 3_000,
            reroute_window_s: 30,
        }
    }
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GuardsSection {
    /// At most this many handoffs within `window_s`; more are refused (seed 003 uses 3).
    pub max_handoffs: u32,
    pub window_s: u64,
    /// The active agent keeps the caller when the caller's words also match its own triggers.
    pub sticky: bool,
    /// Caller turns the newly active agent keeps the caller for before caller keywords may move
    /// the call again (model decisions and manual commands are not held back).
    pub min_turns: u32,
}

impl Default for GuardsSection {
    fn default() -> Self {
        GuardsSection {
            max_handoffs: 3,
            window_s: 60,
            sticky: true,
            min_turns: 0,
        }
    }
}

/// Handoff phrases detected in the agent's own transcript (seed 002). The lists default to the
/// seed's rules; set a list to replace it.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PhrasesSection {
    pub enabled: bool,
    /// Exact template (highest confidence), regexes.
    pub exact: Vec<String>,
    /// Domain-boundary phrases, regexes.
    pub boundary: Vec<String>,
    /// Explicit handoff language, regexes.
    pub explicit: Vec<String>,
    /// Keyword groups: one word of every group within `proximity_window` characters.
    pub proximity_groups: Vec<Vec<String>>,
    pub proximity_window: usize,
}

impl Default for PhrasesSection {
    fn default() -> Self {
        let v = |xs: &[&str]| xs.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        PhrasesSection {
            enabled: false,
            exact: v(&["outside my area.*connect you with.*specialist"]),
            boundary: v(&[
                "outside my (domain|expertise|area)",
                "not my (specialty|expertise|domain)",
            ]),
            explicit: v(&[
                "connect you with.*specialist",
                "let me (transfer|route|connect) you",
                "better suited to help",
            ]),
            proximity_groups: vec![
                v(&["outside", "not my"]),
                v(&["area", "domain", "expertise"]),
                v(&["connect", "transfer", "specialist"]),
            ],
            proximity_window: 100,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RoleName {
    Primary,
    Specialist,
}

/// Who an agent of the set is: a persona of the live model, or a person the caller is handed to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KindName {
    #[default]
    Model,
    /// A person reached by a transfer (`[agents.<id>.destination]`).
    Human,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentSection {
    /// `"model"` (the default) or `"human"`.
    #[serde(default)]
    pub kind: KindName,
    /// Required.
    #[serde(default)]
    pub name: String,
    /// Required for model agents; a human agent is always brought in, never primary.
    #[serde(default)]
    pub role: Option<RoleName>,
    /// Required for model agents; a human agent has none.
    #[serde(default)]
    pub instruction: String,
    /// A human agent's destination and transfer settings ([`crate::transfer::destination`]).
    #[serde(default)]
    pub destination: Option<crate::transfer::destination::HumanAgentConfig>,
    #[serde(default)]
    pub expertise: Vec<String>,
    /// First words when the agent takes over.
    #[serde(default)]
    pub greeting: String,
    /// What the agent says when it hands the caller back; hearing it triggers the handback.
    #[serde(default)]
    pub handback_phrase: String,
    /// The activation summary when the handoff brings none (a transfer tool's `summary` wins):
    /// `{reason}` (why the handoff was decided), `{caller}` (the caller's last words), `{from}`
    /// (the agent handing over) are filled in. Empty: the trigger's reason.
    #[serde(default)]
    pub summary_template: String,
    /// Prebuilt voice name; empty: the session's voice.
    #[serde(default)]
    pub voice: String,
    /// Other names the model may use for this agent (e.g. a function argument's enum value).
    #[serde(default)]
    pub aliases: Vec<String>,
    /// Configured tools the agent may call.
    #[serde(default)]
    pub tools: Vec<String>,
    /// Tools from the daemon's MCP servers the agent may call: server name → tool names or
    /// globs (`*`, `?`), e.g. `mcp = { crm = ["get_billing_*", "pay_invoice"] }`.
    #[serde(default)]
    pub mcp: BTreeMap<String, Vec<String>>,
    /// Agents this one may hand the caller to; absent: every other agent.
    #[serde(default)]
    pub handoffs: Option<Vec<String>>,
    /// Higher wins when several agents match the same words.
    #[serde(default)]
    pub priority: i32,
    #[serde(default)]
    pub activation: TriggersSection,
    #[serde(default)]
    pub handback: TriggersSection,
    #[serde(default)]
    pub policy: PolicySection,
    /// No handoff to this agent while any of these holds.
    #[serde(default)]
    pub blocked_when: Vec<ConditionSection>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TriggersSection {
    /// Whole words or phrases in the caller's transcript (case and punctuation ignored).
    pub keywords: Vec<String>,
    /// Regexes over the caller's transcript (case-insensitive): intent phrases.
    pub patterns: Vec<String>,
    /// Values of a routing tool's topic argument.
    pub topics: Vec<String>,
    /// Values of a routing tool's intent argument.
    pub intents: Vec<String>,
    /// Call-data conditions that, all holding, hand the caller to this agent.
    pub when: Vec<ConditionSection>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConditionSection {
    /// Required.
    #[serde(default)]
    pub key: String,
    #[serde(default)]
    pub equals: Option<String>,
    #[serde(default)]
    pub not_equals: Option<String>,
    #[serde(default)]
    pub present: Option<bool>,
    /// Said in events and to the model when the condition refuses a handoff.
    #[serde(default)]
    pub reason: String,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StrategyName {
    #[default]
    Auto,
    ContextUpdate,
    ToolResponse,
    InjectTurn,
    Recreate,
    RecreateCold,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IsolationName {
    #[default]
    Shared,
    Isolated,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ModeName {
    /// The agent replaces the active one.
    #[default]
    Exclusive,
    /// The agent joins the active one; one instruction carries both personas.
    Joint,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PolicySection {
    /// How a handoff to this agent reaches the model.
    pub strategy: StrategyName,
    pub isolation: IsolationName,
    /// History a recreated session receives: "all", "none" or "last N" (turns).
    pub history: String,
    pub mode: ModeName,
    /// Prompt the agent to greet when it takes over and nothing else makes the model speak.
    pub greet: bool,
    /// Generate `transfer_to_<id>` for agents that may hand the caller to this one.
    pub transfer_tool: bool,
}

impl Default for PolicySection {
    fn default() -> Self {
        PolicySection {
            strategy: StrategyName::Auto,
            isolation: IsolationName::Shared,
            history: "all".into(),
            mode: ModeName::Exclusive,
            greet: true,
            transfer_tool: true,
        }
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BehaviorName {
    #[default]
    Blocking,
    NonBlocking,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SchedulingName {
    #[default]
    WhenIdle,
    Silent,
    Interrupt,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BackendName {
    Http,
    Static,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CallDataName {
    #[default]
    None,
    Args,
    Result,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolSection {
    /// Required.
    #[serde(default)]
    pub description: String,
    /// JSON Schema of the arguments (written as TOML tables).
    #[serde(default)]
    pub parameters: Option<serde_json::Value>,
    #[serde(default)]
    pub behavior: BehaviorName,
    /// For non-blocking tools: how the result is delivered.
    #[serde(default)]
    pub scheduling: SchedulingName,
    /// Required.
    #[serde(default)]
    pub backend: Option<BackendName>,
    /// http: where the arguments are POSTed as JSON.
    #[serde(default)]
    pub url: String,
    #[serde(default = "default_tool_timeout_ms")]
    pub timeout_ms: u64,
    /// http: a header sent with every request, e.g. "Authorization".
    #[serde(default)]
    pub header: String,
    /// http: NAME of the environment variable holding the header's value.
    #[serde(default)]
    pub header_env: String,
    /// static: the JSON the tool returns.
    #[serde(default)]
    pub reply: Option<serde_json::Value>,
    /// Copy the top-level scalar fields of the arguments or the result into the call data.
    #[serde(default)]
    pub call_data: CallDataName,
    /// Present: this tool's arguments drive handoffs (seed 000's `respond_to_financial_query`).
    #[serde(default)]
    pub route: Option<RouteSection>,
}

fn default_tool_timeout_ms() -> u64 {
    5_000
}

/// Names of the arguments a routing tool's decisions are read from.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RouteSection {
    pub topic: String,
    pub intent: String,
    pub requires_specialist: String,
    pub specialist: String,
    pub handback: String,
}

impl Default for RouteSection {
    fn default() -> Self {
        RouteSection {
            topic: "topic".into(),
            intent: "user_intent".into(),
            requires_specialist: "requires_specialist".into(),
            specialist: "specialist_type".into(),
            handback: "requires_handback".into(),
        }
    }
}

/// `[sidecars.<id>]` as written.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SidecarSection {
    #[serde(default)]
    pub description: String,
    /// `http` or `static`; required.
    #[serde(default)]
    pub backend: String,
    #[serde(default)]
    pub url: Option<String>,
    /// An optional header (e.g. `Authorization`) ...
    #[serde(default)]
    pub header: Option<String>,
    /// ... whose value is read from this environment variable (never the file).
    #[serde(default)]
    pub header_env: Option<String>,
    #[serde(default)]
    pub reply: Option<Value>,
    #[serde(default)]
    pub delay_ms: u64,
    /// Required.
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    #[serde(default)]
    pub budget_ms: Option<u64>,
    #[serde(default)]
    pub deliver: Delivery,
    #[serde(default = "one")]
    pub max_in_flight: usize,
    /// What the fed text starts with (default: `[<id>]`).
    #[serde(default)]
    pub label: Option<String>,
}

fn one() -> usize {
    1
}
