//! Tools as the model sees them: the exact Gemini `functionDeclarations` for the active agents
//! (their configured tools plus generated `transfer_to_<agent>` tools with a required `summary`),
//! the filter that decides what a model call refers to, and the function responses the
//! orchestrator sends back.
//!
//! Declarations use `parametersJsonSchema` (the configured JSON Schema, verbatim). `behavior:
//! NON_BLOCKING` is declared only when the adapter has non-blocking tools; transfer tools are
//! then always non-blocking, so the model keeps talking while the handoff is prepared.
//!
//! Which transfer tools exist: with in-place tool updates, those of the agents the active ones
//! may hand to; without them the declared set cannot change inside a session, so every transfer
//! tool of the set is declared from the start and a call to one the active agent may not use is
//! refused at call time.

use std::sync::Arc;

use serde_json::{Value, json};

use super::registry::{Agent, Behavior, Person, Registry, Scheduling, Tool};
use crate::model::Capabilities;
use crate::model::gemini::wire::{FunctionResponse, FunctionResponseScheduling};

/// Prefix of the generated handoff tools (reserved: no MCP tool may take a name with it).
pub const TRANSFER_PREFIX: &str = crate::mcp::hub::RESERVED_PREFIX;

/// The handoff tool for `agent`.
pub fn transfer_name(agent: &Agent) -> String {
    format!("{TRANSFER_PREFIX}{}", agent.id)
}

/// The transfer tool for a human agent.
pub fn person_transfer_name(person: &Person) -> String {
    format!("{TRANSFER_PREFIX}{}", person.id)
}

/// People the active set may hand the caller to.
pub fn reachable_people(reg: &Registry, members: &[u32]) -> Vec<u32> {
    let mut out: Vec<u32> = members
        .iter()
        .flat_map(|&m| reg.agent(m).people.iter().copied())
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// People whose transfer tool the model sees: every person of the set with a transfer tool (the
/// same for every active set, so a handoff between model agents never changes them); a call to
/// one the active agent may not use is refused at call time. None when handoffs go by words.
pub fn person_targets(reg: &Registry, caps: &Capabilities) -> Vec<u32> {
    if handoffs_by_words(caps) {
        return Vec::new();
    }
    reg.people
        .iter()
        .filter(|p| p.transfer_tool)
        .map(|p| p.index)
        .collect()
}

/// Agents the active set (`members[0]` leads) may hand the caller to.
pub fn reachable(reg: &Registry, members: &[u32]) -> Vec<u32> {
    let mut out: Vec<u32> = members
        .iter()
        .flat_map(|&m| reg.agent(m).handoffs.iter().copied())
        .filter(|&t| Some(&t) != members.first())
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// Handoffs are announced in words, not called as transfer tools: on a model whose calls pause
/// its speech, a transfer called mid-announcement would stop the voice until answered, so the
/// handoff rides on the announcing words (the set's `[phrases]`, else
/// [`super::phrases::announcement`] naming the agent).
pub fn handoffs_by_words(caps: &Capabilities) -> bool {
    caps.calls_pause_speech
}

/// Agents whose transfer tool the model sees for this active set (none when
/// [`handoffs_by_words`]).
pub fn transfer_targets(reg: &Registry, members: &[u32], caps: &Capabilities) -> Vec<u32> {
    if handoffs_by_words(caps) {
        return Vec::new();
    }
    // tool_response and inject_turn leave the session with the tools it was set up with: a set
    // whose policy asks for them is set up with every transfer it allows, as on a model that
    // cannot update its tools, so the agent that takes over can hand the caller on or back.
    let kept = reg.agents.iter().any(|a| {
        matches!(
            a.policy.strategy,
            super::strategy::Strategy::ToolResponse | super::strategy::Strategy::InjectTurn
        )
    });
    let mut out: Vec<u32> = if caps.update_tools && !kept {
        reachable(reg, members)
    } else {
        reg.agents
            .iter()
            .flat_map(|a| a.handoffs.iter().copied())
            .collect()
    };
    out.sort_unstable();
    out.dedup();
    out.retain(|&t| reg.agent(t).policy.transfer_tool);
    out
}

/// The configured tools of the active agents, in their declared order, then the MCP tools their
/// allow-lists take from the servers' current lists, without duplicates (a name already taken
/// keeps its first tool).
pub fn agent_tools(reg: &Registry, members: &[u32]) -> Vec<Arc<Tool>> {
    let mut out: Vec<Arc<Tool>> = Vec::new();
    for &m in members {
        for name in &reg.agent(m).tools {
            if let Some(t) = reg.tool(name)
                && !out.iter().any(|x| x.name == *name)
            {
                out.push(t.clone());
            }
        }
        for t in reg.mcp_tools(reg.agent(m)) {
            if !out.iter().any(|x| x.name == t.name) {
                out.push(t);
            }
        }
    }
    out
}

/// Names of the configured (non-transfer) tools the model sees, sorted: two sets with equal
/// names need no tool update.
pub fn tool_names(reg: &Registry, members: &[u32]) -> Vec<String> {
    let mut v: Vec<String> = agent_tools(reg, members)
        .iter()
        .map(|t| t.name.clone())
        .collect();
    v.sort();
    v
}

/// The `tools` list for setup or `contextUpdate`: one `Tool` holding every function
/// declaration, or nothing when the agents have no functions.
pub fn declarations(reg: &Registry, members: &[u32], caps: &Capabilities) -> Vec<Value> {
    let mut decls: Vec<Value> = agent_tools(reg, members)
        .iter()
        .map(|t| tool_declaration(t, caps))
        .collect();
    decls.extend(
        transfer_targets(reg, members, caps)
            .into_iter()
            .map(|t| transfer_declaration(reg.agent(t), caps)),
    );
    decls.extend(
        person_targets(reg, caps)
            .into_iter()
            .filter_map(|i| reg.people.get(i as usize))
            .map(|p| person_declaration(p, caps)),
    );
    if decls.is_empty() {
        Vec::new()
    } else {
        vec![json!({ "functionDeclarations": decls })]
    }
}

/// What a warm transfer's brief session says yes or no with: `accept_transfer` and
/// `decline_transfer` (`reason`), for the person being briefed (`name`).
pub const ACCEPT_TRANSFER: &str = "accept_transfer";
/// See [`ACCEPT_TRANSFER`].
pub const DECLINE_TRANSFER: &str = "decline_transfer";

/// The `tools` of a brief session: the person accepts or declines the call.
pub fn brief_declarations(name: &str) -> Vec<Value> {
    vec![json!({ "functionDeclarations": [
        {
            "name": ACCEPT_TRANSFER,
            "description": format!("{name} will take the call: connect the caller to them now."),
            "parametersJsonSchema": { "type": "object", "properties": {} }
        },
        {
            "name": DECLINE_TRANSFER,
            "description": format!("{name} will not or cannot take the call; the caller stays with the agent."),
            "parametersJsonSchema": {
                "type": "object",
                "properties": {
                    "reason": {
                        "type": "string",
                        "description": format!("Why, in {name}'s words, for the caller to hear.")
                    }
                }
            }
        }
    ]})]
}

fn tool_declaration(t: &Tool, caps: &Capabilities) -> Value {
    let mut d = json!({
        "name": t.name,
        "description": t.description,
        "parametersJsonSchema": t.parameters,
    });
    if declared_non_blocking(t, caps) {
        d["behavior"] = json!("NON_BLOCKING");
    }
    d
}

fn transfer_declaration(target: &Agent, caps: &Capabilities) -> Value {
    let about = if target.expertise.is_empty() {
        String::new()
    } else {
        format!(" ({})", target.expertise.join(", "))
    };
    let mut d = json!({
        "name": transfer_name(target),
        "description": format!(
            "Hand the caller to {}{about}. Say one short sentence announcing it first.",
            target.name
        ),
        "parametersJsonSchema": {
            "type": "object",
            "properties": {
                "summary": {
                    "type": "string",
                    "description": format!(
                        "One or two sentences for {}: what the caller needs and what is known.",
                        target.name
                    )
                }
            },
            "required": ["summary"]
        }
    });
    if caps.non_blocking_tools {
        d["behavior"] = json!("NON_BLOCKING");
    }
    d
}

fn person_declaration(person: &Person, caps: &Capabilities) -> Value {
    let about = if person.expertise.is_empty() {
        String::new()
    } else {
        format!(" ({})", person.expertise.join(", "))
    };
    let mut d = json!({
        "name": person_transfer_name(person),
        "description": format!(
            "Put the caller through to {}{about}, a person. Say one short sentence announcing it first; the call goes to them when you have finished speaking.",
            person.name
        ),
        "parametersJsonSchema": {
            "type": "object",
            "properties": {
                "summary": {
                    "type": "string",
                    "description": format!(
                        "One or two sentences for {}: what the caller needs and what is known.",
                        person.name
                    )
                }
            },
            "required": ["summary"]
        }
    });
    if caps.non_blocking_tools {
        d["behavior"] = json!("NON_BLOCKING");
    }
    d
}

/// Whether the model treats calls of `t` as NON_BLOCKING.
pub fn declared_non_blocking(t: &Tool, caps: &Capabilities) -> bool {
    caps.non_blocking_tools && t.behavior == Behavior::NonBlocking
}

/// What a model function call refers to, for the active set.
#[derive(Clone, Debug)]
pub enum Resolved {
    /// A configured tool the active agents may use.
    Tool(Arc<Tool>),
    /// A handoff to this agent.
    Transfer(u32),
    /// A transfer of the caller to this person ([`Registry::people`]).
    Person(u32),
    /// A tool the active agents' MCP allow-list names on a server that is not connected (so
    /// its tools are not listed): not a refusal of the filter; the reason is told to the model.
    Unavailable(String),
    /// Anything else, with the reason told to the model.
    Refused(String),
}

/// Resolves the function `name` the model called while `members` are active.
pub fn resolve(reg: &Registry, members: &[u32], name: &str) -> Resolved {
    let lead = reg.agent(members.first().copied().unwrap_or(reg.primary));
    if let Some(id) = name.strip_prefix(TRANSFER_PREFIX)
        && let Some(target) = reg.agents.iter().find(|a| a.id == id)
    {
        if target.index == lead.index {
            return Resolved::Refused(format!("you are already {}", lead.name));
        }
        if !target.policy.transfer_tool || !reachable(reg, members).contains(&target.index) {
            return Resolved::Refused(format!(
                "{} cannot hand the caller to {} with a tool",
                lead.name, target.name
            ));
        }
        return Resolved::Transfer(target.index);
    }
    if let Some(id) = name.strip_prefix(TRANSFER_PREFIX)
        && let Some(person) = reg.people.iter().find(|p| p.id == id)
    {
        if !person.transfer_tool || !reachable_people(reg, members).contains(&person.index) {
            return Resolved::Refused(format!(
                "{} cannot put the caller through to {} with a tool",
                lead.name, person.name
            ));
        }
        return Resolved::Person(person.index);
    }
    match agent_tools(reg, members)
        .into_iter()
        .find(|t| t.name == name)
    {
        Some(t) => Resolved::Tool(t),
        None if let Some(why) = unlisted_mcp_tool(reg, members, name) => Resolved::Unavailable(why),
        None => {
            let available: Vec<String> = agent_tools(reg, members)
                .iter()
                .map(|t| t.name.clone())
                .collect();
            Resolved::Refused(format!(
                "tool '{name}' is not available to {}; available: [{}]",
                lead.name,
                available.join(", ")
            ))
        }
    }
}

/// Why `name` is not listed, when an active agent's MCP allow-list names it on a server that is
/// not connected now.
fn unlisted_mcp_tool(reg: &Registry, members: &[u32], name: &str) -> Option<String> {
    let catalog = reg.mcp.as_ref()?;
    members
        .iter()
        .flat_map(|&m| reg.agent(m).mcp.iter())
        .filter(|grant| grant.allows(name))
        .find_map(|grant| {
            let state = catalog.unconnected(&grant.server)?;
            let e = crate::mcp::CallError::NotConnected {
                tool: name.to_owned(),
                server: grant.server.clone(),
                state,
            };
            Some(e.to_string())
        })
}

/// The wire value of a scheduling choice.
pub fn scheduling(s: Scheduling) -> FunctionResponseScheduling {
    match s {
        Scheduling::WhenIdle => FunctionResponseScheduling::WhenIdle,
        Scheduling::Silent => FunctionResponseScheduling::Silent,
    }
}

/// A successful result: `{"output": value}`.
pub fn output(
    id: &str,
    name: &str,
    value: Value,
    sched: Option<FunctionResponseScheduling>,
) -> FunctionResponse {
    FunctionResponse {
        id: Some(id.to_owned()),
        name: Some(name.to_owned()),
        response: Some(json!({ "output": value })),
        will_continue: None,
        scheduling: sched,
    }
}

/// A failure the model can act on: `{"error": message}`.
pub fn error(
    id: &str,
    name: &str,
    message: &str,
    sched: Option<FunctionResponseScheduling>,
) -> FunctionResponse {
    FunctionResponse {
        id: Some(id.to_owned()),
        name: Some(name.to_owned()),
        response: Some(json!({ "error": message })),
        will_continue: None,
        scheduling: sched,
    }
}
