//! The validated agent set a call runs with: agents (indexed by position, the index tags model
//! audio), their policies and triggers, the configured tools and the guards. Built only by
//! [`super::load()`], so everything here is known to be consistent: every referenced agent and
//! tool exists, there is exactly one primary, every regex compiles.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::matching::{Condition, TextTriggers};
use super::phrases::PhraseRules;
use super::strategy::Strategy;

/// Whether an agent starts the call or is brought in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    Primary,
    Specialist,
}

/// Whether the agent shares the live session or needs its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Isolation {
    Shared,
    Isolated,
}

/// How an agent takes over: replacing the active one or joining it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    Exclusive,
    Joint,
}

/// History a recreated session receives (seed 002's `HANDOFF_CONTEXT_TRANSFER_TURNS`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HistoryTransfer {
    All,
    None,
    /// The last N turns (a caller line and the agent's answer each).
    LastTurns(usize),
}

/// How handoffs to an agent are carried out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Policy {
    pub strategy: Strategy,
    pub isolation: Isolation,
    pub history: HistoryTransfer,
    pub mode: Mode,
    pub greet: bool,
    pub transfer_tool: bool,
}

/// What brings an agent in (or sends the caller back).
#[derive(Clone, Debug, Default)]
pub struct Triggers {
    pub text: TextTriggers,
    pub topics: Vec<String>,
    pub intents: Vec<String>,
    /// All holding: hand the caller to this agent.
    pub when: Vec<Condition>,
}

/// One agent of the set.
#[derive(Clone, Debug)]
pub struct Agent {
    /// Position in the set; tags this agent's audio and turns.
    pub index: u32,
    pub id: String,
    pub name: String,
    pub role: Role,
    pub instruction: String,
    pub expertise: Vec<String>,
    pub greeting: String,
    pub handback_phrase: String,
    /// The activation summary when the handoff brings none (`{reason}`, `{caller}`, `{from}`).
    pub summary_template: String,
    pub voice: Option<String>,
    pub aliases: Vec<String>,
    /// Configured tools, in declaration order.
    pub tools: Vec<String>,
    /// MCP tools the agent may call, per server (in the set's order of servers).
    pub mcp: Vec<McpGrant>,
    /// Agents this one may hand the caller to (indexes).
    pub handoffs: Vec<u32>,
    /// People this one may hand the caller to (indexes into [`Registry::people`]).
    pub people: Vec<u32>,
    pub priority: i32,
    pub activation: Triggers,
    pub handback: Triggers,
    pub policy: Policy,
    /// Any holding: no handoff to this agent.
    pub blocked_when: Vec<Condition>,
}

/// An agent's allow-list on one MCP server: tool names or globs.
#[derive(Clone, Debug)]
pub struct McpGrant {
    pub server: String,
    /// The patterns as written, and each compiled (`*` any run of characters, `?` one).
    pub patterns: Vec<(String, regex::Regex)>,
}

impl McpGrant {
    /// Whether the agent may call the server's tool `name`.
    pub fn allows(&self, name: &str) -> bool {
        self.patterns.iter().any(|(_, re)| re.is_match(name))
    }
}

/// A glob over tool names (`*`, `?`; everything else literal) as an anchored regex.
pub fn glob_regex(glob: &str) -> Result<regex::Regex, regex::Error> {
    let mut re = String::from("^");
    for c in glob.chars() {
        match c {
            '*' => re.push_str(".*"),
            '?' => re.push('.'),
            c => re.push_str(&regex::escape(&c.to_string())),
        }
    }
    re.push('$');
    regex::Regex::new(&re)
}

/// `BLOCKING` (the model waits for the result) or `NON_BLOCKING` (it keeps talking).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Behavior {
    Blocking,
    NonBlocking,
}

/// Delivery of a non-blocking tool's result (never `INTERRUPT`: it would cut the agent off).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scheduling {
    WhenIdle,
    Silent,
}

/// Where a tool's result comes from.
#[derive(Clone, Debug)]
pub enum Backend {
    /// A canned JSON reply.
    Static {
        reply: Value,
    },
    Http(HttpBackend),
    /// A tool of an MCP server, called on the daemon's shared session.
    Mcp(Arc<crate::mcp::McpTool>),
}

/// POST the arguments as JSON to `url`; the JSON body of a 2xx answer is the result.
#[derive(Clone, Debug)]
pub struct HttpBackend {
    pub url: url::Url,
    pub timeout: Duration,
    /// A header name and the NAME of the environment variable holding its value.
    pub header: Option<(String, String)>,
}

/// Which call data a tool call records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallDataSource {
    None,
    Args,
    Result,
}

/// Argument names a routing tool's decisions are read from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Route {
    pub topic: String,
    pub intent: String,
    pub requires_specialist: String,
    pub specialist: String,
    pub handback: String,
}

/// A configured tool.
#[derive(Clone, Debug)]
pub struct Tool {
    pub name: String,
    pub description: String,
    /// JSON Schema of the arguments.
    pub parameters: Value,
    pub behavior: Behavior,
    pub scheduling: Scheduling,
    pub backend: Backend,
    pub call_data: CallDataSource,
    pub route: Option<Route>,
}

impl Tool {
    /// How long the orchestrator waits for a result before answering the model with an error.
    pub fn deadline(&self) -> Duration {
        match &self.backend {
            Backend::Static { .. } => Duration::from_secs(1),
            Backend::Http(h) => h.timeout + Duration::from_secs(1),
            Backend::Mcp(t) => t.timeout + Duration::from_secs(1),
        }
    }
}

/// The loop guard and routing stickiness.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Guards {
    pub max_handoffs: u32,
    pub window: Duration,
    pub sticky: bool,
    pub min_turns: u32,
}

/// Deadlines of the set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Timing {
    pub standby_timeout: Duration,
    pub held_timeout: Duration,
    pub reroute_window: Duration,
}

/// A human agent of the set (`kind = "human"`): a person the caller is handed to by a transfer.
/// The model never speaks as one; the call hands the caller's leg on (see [`crate::transfer`]).
#[derive(Clone, Debug)]
pub struct Person {
    /// Position in [`Registry::people`].
    pub index: u32,
    pub id: String,
    pub name: String,
    pub expertise: Vec<String>,
    pub aliases: Vec<String>,
    /// Where they are reached and how.
    pub human: crate::transfer::HumanAgent,
    /// Generate `transfer_to_<id>` for the agents that may hand the caller to this person.
    pub transfer_tool: bool,
}

/// A validated agent set.
#[derive(Clone, Debug)]
pub struct Registry {
    pub name: String,
    pub description: String,
    pub agents: Vec<Agent>,
    /// The set's human agents, reached by a transfer.
    pub people: Vec<Person>,
    pub tools: BTreeMap<String, Arc<Tool>>,
    pub primary: u32,
    pub guards: Guards,
    pub phrases: PhraseRules,
    pub timing: Timing,
    /// Agents beside the live session (seed 004).
    pub sidecars: Vec<Arc<Sidecar>>,
    /// The daemon's MCP tools, once bound ([`Registry::bind_mcp`]); unbound, agents see no MCP
    /// tools.
    pub mcp: Option<Arc<crate::mcp::Catalog>>,
}

impl Registry {
    /// The agent at `index` (an index from this registry; out of range falls back to the primary).
    pub fn agent(&self, index: u32) -> &Agent {
        self.agents
            .get(index as usize)
            .or_else(|| self.agents.get(self.primary as usize))
            .unwrap_or_else(|| unreachable_empty())
    }

    /// The human agent with this id, name or alias (case and punctuation ignored).
    pub fn person(&self, name: &str) -> Option<&Person> {
        let key = super::matching::normalize(name);
        self.people.iter().find(|p| p.id == name).or_else(|| {
            self.people.iter().find(|p| {
                std::iter::once(&p.id)
                    .chain(std::iter::once(&p.name))
                    .chain(p.aliases.iter())
                    .any(|n| super::matching::normalize(n) == key)
            })
        })
    }

    /// One line per human agent for `check-config`: whom the model can hand the caller to, how,
    /// and on which calls it can happen (`legs`: the calls of this daemon that can be handed on
    /// blind, e.g. "SIP calls (REFER)"; `dials`: the daemon has SIP to dial a person for a warm
    /// transfer, from a call on any leg).
    pub fn describe_people(&self, legs: &[&str], dials: bool) -> Vec<String> {
        self.people
            .iter()
            .map(|p| {
                let how = match p.human.handover {
                    crate::transfer::Handover::Blind => "blind transfer",
                    crate::transfer::Handover::Warm => "warm transfer",
                };
                let warm = p.human.handover == crate::transfer::Handover::Warm;
                let calls = if warm && dials {
                    "dialled over this daemon's SIP, briefed and bridged, from a call on any leg"
                        .to_owned()
                } else if warm {
                    "but this daemon has no SIP to dial them ([sip] listen): every transfer ends \
                     unavailable and the caller stays with the agent"
                        .to_owned()
                } else if legs.is_empty() {
                    "but no call of this daemon can be handed on (no [sip] listen, no \
                     twilio.auth_token_env): every transfer ends unavailable and the caller stays \
                     with the agent"
                        .to_owned()
                } else {
                    format!(
                        "on {}; a call on any other leg keeps the agent (outcome unavailable)",
                        legs.join(" and ")
                    )
                };
                format!(
                    "human agent {} ({}): {how} to {}, {calls}",
                    p.id, p.name, p.human.destination
                )
            })
            .collect()
    }

    /// The agent with this id, or whose name or alias is this (case and punctuation ignored).
    pub fn find(&self, name: &str) -> Option<&Agent> {
        let key = super::matching::normalize(name);
        self.agents.iter().find(|a| a.id == name).or_else(|| {
            self.agents.iter().find(|a| {
                std::iter::once(&a.id)
                    .chain(std::iter::once(&a.name))
                    .chain(a.aliases.iter())
                    .any(|n| super::matching::normalize(n) == key)
            })
        })
    }

    pub fn tool(&self, name: &str) -> Option<&Arc<Tool>> {
        self.tools.get(name)
    }

    /// Whether a call of this set may open a socket of its own: an HTTP tool or sidecar. (MCP
    /// servers are reached through the daemon's hub, people through a leg.)
    pub fn reaches_network(&self) -> bool {
        self.tools
            .values()
            .any(|t| matches!(t.backend, Backend::Http(_)))
            || self
                .sidecars
                .iter()
                .any(|s| matches!(s.backend, SidecarBackend::Http(_)))
    }

    /// The MCP servers the set's agents name, sorted.
    pub fn mcp_servers(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .agents
            .iter()
            .flat_map(|a| a.mcp.iter().map(|g| g.server.clone()))
            .collect();
        v.sort();
        v.dedup();
        v
    }

    /// Gives the set the daemon's MCP tools. Every server an agent names must be in the
    /// catalog; the error lists those that are not.
    pub fn bind_mcp(&mut self, catalog: Arc<crate::mcp::Catalog>) -> Result<(), Vec<String>> {
        let missing: Vec<String> = self
            .mcp_servers()
            .into_iter()
            .filter(|s| !catalog.has(s))
            .collect();
        if !missing.is_empty() {
            return Err(missing);
        }
        self.mcp = Some(catalog);
        Ok(())
    }

    /// The MCP tools `agent` may call now (the servers' current lists through its allow-list),
    /// as tools; read without locks.
    pub fn mcp_tools(&self, agent: &Agent) -> Vec<Arc<Tool>> {
        let Some(catalog) = &self.mcp else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for grant in &agent.mcp {
            let set = catalog.tools(&grant.server);
            for t in set.tools.iter().filter(|t| grant.allows(&t.name)) {
                out.push(Arc::new(Tool {
                    name: t.name.clone(),
                    description: t.description.clone(),
                    parameters: t.parameters.clone(),
                    behavior: Behavior::Blocking,
                    scheduling: Scheduling::WhenIdle,
                    backend: Backend::Mcp(t.clone()),
                    call_data: CallDataSource::None,
                    route: None,
                }));
            }
        }
        out
    }

    /// The environment variables the set's tools name that are not set now (checked at start-up
    /// so a missing secret is reported before the first call, never with its value).
    pub fn missing_env(&self) -> Vec<(String, String)> {
        self.tools
            .values()
            .filter_map(|t| match &t.backend {
                Backend::Http(HttpBackend {
                    header: Some((_, env)),
                    ..
                }) if std::env::var_os(env).is_none() => Some((t.name.clone(), env.clone())),
                _ => None,
            })
            .collect()
    }
}

/// A registry is never built without agents (validation refuses it).
#[cold]
fn unreachable_empty() -> &'static Agent {
    panic!("an agent registry without agents cannot be built")
}

/// How a result reaches the live session.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Delivery {
    /// `client_content` where the model takes mid-session client content; elsewhere the result
    /// is not delivered (it would make the model speak) and a `sidecar_undelivered` event says
    /// why.
    #[default]
    Auto,
    /// `clientContent{turns:[…], turnComplete:false}` once the current turn is over: context for
    /// the model's next answer, no reply of its own, no interruption.
    ClientContent,
    /// A turn-completing text prompt at a quiet moment (`realtimeInput.text` on models without
    /// mid-session client content): the model answers it.
    Prompt,
    /// Counted, not fed (a sidecar that only records).
    None,
}

/// Where a sidecar's result comes from.
#[derive(Clone, Debug)]
pub enum SidecarBackend {
    Http(HttpBackend),
    /// A canned reply after `delay`.
    Static {
        reply: Value,
        delay: Duration,
    },
}

/// A validated sidecar.
#[derive(Clone, Debug)]
pub struct Sidecar {
    pub id: String,
    pub description: String,
    pub backend: SidecarBackend,
    pub timeout: Duration,
    pub budget: Option<Duration>,
    pub deliver: Delivery,
    pub max_in_flight: usize,
    pub label: String,
}
