//! Checking one agent of a set (id, instruction, tools, handoffs, triggers, policy, blocking
//! rules) and converting it; every problem is reported with its key.

use std::collections::BTreeMap;

use super::{MAX_INSTRUCTION_CHARS, Problems, first_line};
use crate::agents::config::{
    AgentSection, ConditionSection, IsolationName, ModeName, RoleName, StrategyName, ToolSection,
    TriggersSection,
};
use crate::agents::matching::{Condition, Keyword, Test, TextTriggers, compile};
use crate::agents::registry::{
    Agent, HistoryTransfer, Isolation, McpGrant, Mode, Policy, Role, Triggers, glob_regex,
};
use crate::agents::strategy::Strategy;

pub(super) struct AgentCtx<'a> {
    pub id: &'a str,
    pub key: String,
    pub index_of: &'a dyn Fn(&str) -> Option<u32>,
    /// A human agent's index by id.
    pub person_of: &'a dyn Fn(&str) -> Option<u32>,
    pub count: u32,
    pub people: u32,
    pub tools: &'a BTreeMap<String, ToolSection>,
}

pub(super) fn agent(index: u32, a: &AgentSection, c: &AgentCtx, p: &mut Problems) -> Option<Agent> {
    let k = &c.key;
    let id_ok = c.id.len() <= 50
        && c.id.starts_with(|ch: char| ch.is_ascii_lowercase())
        && c.id
            .chars()
            .all(|ch| ch.is_ascii_lowercase() || ch.is_ascii_digit() || ch == '_');
    if !id_ok {
        p.add(
            k.clone(),
            format!(
                "{:?} cannot be an agent id (it names the transfer_to_<id> tool)",
                c.id
            ),
            "use lowercase letters, digits and _ (at most 50), starting with a letter",
        );
    }
    if a.name.trim().is_empty() {
        p.add(
            format!("{k}.name"),
            "is empty",
            "give the name callers hear, e.g. \"Billing Specialist\"",
        );
    }
    let instruction = a.instruction.trim();
    if instruction.is_empty() {
        p.add(
            format!("{k}.instruction"),
            "is empty",
            "say in a few sentences who the agent is and what it does",
        );
    } else if instruction.chars().count() > MAX_INSTRUCTION_CHARS {
        p.add(
            format!("{k}.instruction"),
            format!(
                "{} characters; live models follow short explicit instructions",
                instruction.chars().count()
            ),
            format!("keep it under {MAX_INSTRUCTION_CHARS} characters"),
        );
    }
    let mut ok = id_ok;
    let declared: Vec<String> = c.tools.keys().cloned().collect();
    for (i, t) in a.tools.iter().enumerate() {
        if !c.tools.contains_key(t) {
            ok = false;
            // A tool table decoding took out is reported there.
            if p.doubts(&format!("tools.{t}")) {
                continue;
            }
            let fix = match crate::config::decode::closest(t, &declared) {
                Some(near) => format!(
                    "did you mean \"{near}\"? Otherwise declare it as [tools.{t}] or remove it from the list"
                ),
                None => format!("declare it as [tools.{t}] or remove it from the list"),
            };
            p.add(
                format!("{k}.tools[{i}]"),
                format!("unknown tool {t:?}"),
                fix,
            );
        }
    }
    let mcp = mcp_grants(a, k, p);
    ok &= mcp.is_some();
    let mut handoffs = Vec::new();
    let mut people = Vec::new();
    match &a.handoffs {
        None => {}
        Some(list) => {
            for (i, h) in list.iter().enumerate() {
                if let Some(x) = (c.person_of)(h) {
                    people.push(x);
                    continue;
                }
                match (c.index_of)(h) {
                    Some(_) if h == c.id => p.add(
                        format!("{k}.handoffs[{i}]"),
                        "an agent cannot hand the caller to itself",
                        "remove it from the list",
                    ),
                    Some(x) => handoffs.push(x),
                    None => {
                        ok = false;
                        // An agent decoding took out is reported there.
                        if p.doubts(&format!("agents.{h}")) {
                            continue;
                        }
                        p.add(
                            format!("{k}.handoffs[{i}]"),
                            format!("unknown agent {h:?}"),
                            "name an agent of this set by its id (the key after agents.)",
                        );
                    }
                }
            }
        }
    }
    let role = match a.role {
        Some(RoleName::Primary) => Role::Primary,
        Some(RoleName::Specialist) => Role::Specialist,
        None => {
            p.add(
                format!("{k}.role"),
                "is missing",
                "give role = \"primary\" (the agent a call starts with) or \"specialist\"",
            );
            Role::Specialist
        }
    };
    if a.destination.is_some() {
        p.add(
            format!("{k}.destination"),
            "only a human agent has a destination",
            "add kind = \"human\" to hand the caller to a person, or remove the table",
        );
    }
    let policy = policy(a, role, &format!("{k}.policy"), p);
    if a.policy.mode == ModeName::Joint && !a.voice.is_empty() {
        p.add(
            format!("{k}.voice"),
            "a joint agent speaks in the session's voice, so its own voice would never be heard",
            "remove voice, or use mode = \"exclusive\"",
        );
    }
    if !a.handback_phrase.is_empty() && Keyword::new(&a.handback_phrase).is_none() {
        p.add(
            format!("{k}.handback_phrase"),
            "has no words",
            "write the sentence the agent says when it hands back",
        );
    }
    let activation = triggers(&a.activation, &format!("{k}.activation"), p);
    let handback = triggers(&a.handback, &format!("{k}.handback"), p);
    let blocked_when = conditions(&a.blocked_when, &format!("{k}.blocked_when"), p);
    let trimmed = |v: &[String]| v.iter().map(|s| s.trim().to_owned()).collect::<Vec<_>>();
    if a.handoffs.is_none() {
        handoffs = (0..c.count).filter(|&i| i != index).collect();
        people = (0..c.people).collect();
    }
    (ok).then_some(())?;
    Some(Agent {
        index,
        id: c.id.to_owned(),
        name: a.name.trim().to_owned(),
        role,
        instruction: instruction.to_owned(),
        expertise: trimmed(&a.expertise),
        greeting: a.greeting.trim().to_owned(),
        handback_phrase: a.handback_phrase.trim().to_owned(),
        summary_template: a.summary_template.trim().to_owned(),
        voice: (!a.voice.trim().is_empty()).then(|| a.voice.trim().to_owned()),
        aliases: trimmed(&a.aliases),
        tools: a.tools.clone(),
        mcp: mcp?,
        handoffs,
        people,
        priority: a.priority,
        activation: activation?,
        handback: handback?,
        policy: policy?,
        blocked_when: blocked_when?,
    })
}

/// `mcp = { <server> = ["name", "glob*"] }`: server names as `[mcp.<name>]` allows them, each
/// pattern a tool name or a glob of one.
fn mcp_grants(a: &AgentSection, k: &str, p: &mut Problems) -> Option<Vec<McpGrant>> {
    let mut ok = true;
    let mut out = Vec::new();
    for (server, patterns) in &a.mcp {
        let key = format!("{k}.mcp.{server}");
        if !crate::mcp::config::valid_name(server) {
            ok = false;
            p.add(
                &key,
                format!("{server:?} cannot be an MCP server name"),
                "name a server of the daemon's [mcp.<name>] tables (letters, digits, _ and -)",
            );
        }
        if patterns.is_empty() {
            ok = false;
            p.add(
                &key,
                "allows no tool",
                "list tool names or globs, e.g. [\"get_billing_summary\", \"get_invoice_*\"], or remove the server",
            );
        }
        let mut compiled = Vec::new();
        for (i, pat) in patterns.iter().enumerate() {
            let ok_chars = !pat.trim().is_empty()
                && pat
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '*' | '?'));
            match glob_regex(pat.trim()) {
                Ok(re) if ok_chars => compiled.push((pat.trim().to_owned(), re)),
                _ => {
                    ok = false;
                    p.add(
                        format!("{key}[{i}]"),
                        format!("{pat:?} is not a tool name or glob"),
                        "use letters, digits, _ - . and the wildcards * and ?, e.g. \"get_*\"",
                    );
                }
            }
        }
        out.push(McpGrant {
            server: server.clone(),
            patterns: compiled,
        });
    }
    ok.then_some(out)
}

fn policy(a: &AgentSection, role: Role, k: &str, p: &mut Problems) -> Option<Policy> {
    let s = &a.policy;
    let strategy = match s.strategy {
        StrategyName::Auto => Strategy::Auto,
        StrategyName::ContextUpdate => Strategy::ContextUpdate,
        StrategyName::ToolResponse => Strategy::ToolResponse,
        StrategyName::InjectTurn => Strategy::InjectTurn,
        StrategyName::Recreate => Strategy::Recreate,
        StrategyName::RecreateCold => Strategy::RecreateCold,
    };
    let isolation = match s.isolation {
        IsolationName::Shared => Isolation::Shared,
        IsolationName::Isolated => Isolation::Isolated,
    };
    let mode = match s.mode {
        ModeName::Exclusive => Mode::Exclusive,
        ModeName::Joint => Mode::Joint,
    };
    let in_place = matches!(
        strategy,
        Strategy::ContextUpdate | Strategy::ToolResponse | Strategy::InjectTurn
    );
    if isolation == Isolation::Isolated && in_place {
        p.add(
            format!("{k}.strategy"),
            format!(
                "{} works inside the shared session but isolation = \"isolated\"",
                strategy.as_str()
            ),
            "use strategy = \"auto\", \"recreate\" or \"recreate_cold\", or isolation = \"shared\"",
        );
    }
    if mode == Mode::Joint {
        if isolation == Isolation::Isolated {
            p.add(
                format!("{k}.mode"),
                "a joint agent shares the session with the active one but isolation = \"isolated\"",
                "use isolation = \"shared\" or mode = \"exclusive\"",
            );
        }
        if matches!(strategy, Strategy::Recreate | Strategy::RecreateCold) {
            p.add(
                format!("{k}.strategy"),
                "a joint agent joins the live session; a new session would drop the active agent",
                "use strategy = \"auto\" or an in-place strategy",
            );
        }
        if role == Role::Primary {
            p.add(
                format!("{k}.mode"),
                "the primary starts the call; it cannot join one",
                "remove mode (or move it to a specialist)",
            );
        }
    }
    let history = match parse_history(&s.history) {
        Some(h) => h,
        None => {
            p.add(
                format!("{k}.history"),
                format!("{:?} is not a history transfer", s.history),
                "write \"all\", \"none\" or \"last N\" (N turns, e.g. \"last 2\")",
            );
            return None;
        }
    };
    Some(Policy {
        strategy,
        isolation,
        history,
        mode,
        greet: s.greet,
        transfer_tool: s.transfer_tool,
    })
}

/// `all`, `none` or `last N`.
pub fn parse_history(s: &str) -> Option<HistoryTransfer> {
    let s = s.trim();
    match s {
        "all" => Some(HistoryTransfer::All),
        "none" => Some(HistoryTransfer::None),
        _ => {
            let n: usize = s.strip_prefix("last")?.trim().parse().ok()?;
            Some(if n == 0 {
                HistoryTransfer::None
            } else {
                HistoryTransfer::LastTurns(n)
            })
        }
    }
}

fn triggers(t: &TriggersSection, k: &str, p: &mut Problems) -> Option<Triggers> {
    let mut ok = true;
    let mut keywords = Vec::new();
    for (i, w) in t.keywords.iter().enumerate() {
        match Keyword::new(w) {
            Some(kw) => keywords.push(kw),
            None => {
                ok = false;
                p.add(
                    format!("{k}.keywords[{i}]"),
                    format!("{w:?} has no letters or digits"),
                    "remove it or write a word",
                );
            }
        }
    }
    let mut patterns = Vec::new();
    for (i, pat) in t.patterns.iter().enumerate() {
        match compile(pat) {
            Ok(r) => patterns.push(r),
            Err(e) => {
                ok = false;
                p.add(
                    format!("{k}.patterns[{i}]"),
                    format!("{pat:?} is not a valid regex: {}", first_line(&e.to_string())),
                    "fix the regex (https://docs.rs/regex syntax), e.g. \"(book|schedule) a visit\"",
                );
            }
        }
    }
    for (field, list) in [("topics", &t.topics), ("intents", &t.intents)] {
        for (i, v) in list.iter().enumerate() {
            if v.trim().is_empty() {
                ok = false;
                p.add(
                    format!("{k}.{field}[{i}]"),
                    "is empty",
                    "write the argument value, e.g. \"government_scheme\"",
                );
            }
        }
    }
    let when = conditions(&t.when, &format!("{k}.when"), p);
    (ok).then_some(())?;
    Some(Triggers {
        text: TextTriggers { keywords, patterns },
        topics: t.topics.iter().map(|s| s.trim().to_owned()).collect(),
        intents: t.intents.iter().map(|s| s.trim().to_owned()).collect(),
        when: when?,
    })
}

fn conditions(list: &[ConditionSection], k: &str, p: &mut Problems) -> Option<Vec<Condition>> {
    let mut out = Vec::new();
    let mut ok = true;
    for (i, c) in list.iter().enumerate() {
        let key = format!("{k}[{i}]");
        if c.key.trim().is_empty() {
            ok = false;
            p.add(
                format!("{key}.key"),
                "is empty",
                "name the call-data key, e.g. key = \"dicom_status\"",
            );
        }
        let tests: Vec<Test> = [
            c.equals.clone().map(Test::Equals),
            c.not_equals.clone().map(Test::NotEquals),
            c.present.map(Test::Present),
        ]
        .into_iter()
        .flatten()
        .collect();
        match <[Test; 1]>::try_from(tests) {
            Ok([test]) => out.push(Condition {
                key: c.key.trim().to_owned(),
                test,
                reason: c.reason.trim().to_owned(),
            }),
            Err(_) => {
                ok = false;
                // A test decoding took out is reported there.
                if ["equals", "not_equals", "present"]
                    .iter()
                    .any(|t| p.doubts(&format!("{key}.{t}")))
                {
                    continue;
                }
                p.add(
                    key,
                    "needs exactly one of equals, not_equals, present",
                    "e.g. { key = \"dicom_status\", equals = \"dirty\", reason = \"…\" }",
                );
            }
        }
    }
    ok.then_some(out)
}
