//! Reading an agent-set file: TOML decoded key by key the way the daemon's config is (unknown
//! keys, values of the wrong kind or not among the names a key takes: each reported and taken
//! out, the rest decoded), then validation of what was decoded, every problem with the file, the
//! key and how to fix it, all in one load, and the conversion into a [`Registry`]. This file holds
//! the set level; `agent` and `tool` check one agent or one tool each.

mod agent;
mod person;
mod sidecar;
mod tool;

pub use agent::parse_history;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use super::config::{AgentSection, KindName, PhrasesSection, RoleName, SetFile, SetSection};
use super::matching::compile;
use super::phrases::{PhraseRules, group_regex};
use super::registry::{Guards, Registry, Timing};
use crate::config::decode::{Problem, decode_with};

/// Where the keys of an agent set are documented (named in the fixes of unknown keys).
const DOCS: &str = "config/agents/README.md";

/// Longest instruction accepted: real models follow short explicit instructions, not long ones.
pub const MAX_INSTRUCTION_CHARS: usize = 4_000;

/// An agent-set file that cannot be used; `Display` lists every problem.
#[derive(Debug, thiserror::Error)]
pub enum SetError {
    #[error("{path}: cannot read: {reason}")]
    Read { path: PathBuf, reason: String },
    #[error("{}", render(path, problems))]
    Invalid {
        path: PathBuf,
        problems: Vec<Problem>,
    },
}

impl SetError {
    /// The problems found (empty for a read error).
    pub fn problems(&self) -> &[Problem] {
        match self {
            SetError::Read { .. } => &[],
            SetError::Invalid { problems, .. } => problems,
        }
    }

    /// The problems found, each keyed by the set's file too (`<file>: <key>`), for a report
    /// that lists them among another file's problems (a daemon config naming this set), one
    /// entry per problem. Empty for a read error.
    pub fn problems_in_file(&self) -> Vec<Problem> {
        match self {
            SetError::Read { .. } => Vec::new(),
            SetError::Invalid { path, problems } => problems
                .iter()
                .map(|p| Problem {
                    key: format!("{}: {}", path.display(), p.key),
                    ..p.clone()
                })
                .collect(),
        }
    }
}

fn render(path: &Path, problems: &[Problem]) -> String {
    let mut s = format!("{}: {} problem(s)", path.display(), problems.len());
    for p in problems {
        s.push_str(&format!("\n  {}: {}\n    fix: {}", p.key, p.message, p.fix));
    }
    s
}

/// Reads and validates one agent-set file.
pub fn load(path: &Path) -> Result<Registry, SetError> {
    let text = std::fs::read_to_string(path).map_err(|e| SetError::Read {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    parse(&text, path)
}

/// Every `*.toml` set in a folder, by file name.
pub fn load_dir(dir: &Path) -> Result<Vec<(PathBuf, Registry)>, SetError> {
    let read_err = |e: std::io::Error| SetError::Read {
        path: dir.to_path_buf(),
        reason: e.to_string(),
    };
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(read_err)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    paths.sort();
    paths
        .into_iter()
        .map(|p| load(&p).map(|r| (p, r)))
        .collect()
}

/// Parses and validates set text; `path` names the file in errors. Every problem is reported
/// at once: those of decoding (syntax, keys, kinds of value) in file order, then those of the
/// checks below.
pub fn parse(text: &str, path: &Path) -> Result<Registry, SetError> {
    let decoded = decode_with::<SetFile>(text, DOCS, &required);
    let file = decoded.value;
    let mut p = Problems {
        list: decoded.problems,
        doubtful: decoded.doubtful,
    };
    let base = path.parent().unwrap_or(Path::new("."));
    let registry = file.and_then(|f| build(&f, base, &mut p));
    match registry {
        Some(r) if p.list.is_empty() => Ok(r),
        _ => Err(SetError::Invalid {
            path: path.to_path_buf(),
            problems: p.list,
        }),
    }
}

/// The problems of one set, and the keys decoding found wrong.
pub(super) struct Problems {
    list: Vec<Problem>,
    /// Keys decoding reported and took out, so what the checks see there is a default (and,
    /// for a misspelt key, the key it was meant to be, which the checks see as missing). A
    /// check of such a key, or of what it decides, would only report the same mistake again.
    doubtful: Vec<String>,
}

impl Problems {
    /// Adds a problem of the checks, unless it is about a key decoding already reported.
    pub(super) fn add(
        &mut self,
        key: impl Into<String>,
        message: impl Into<String>,
        fix: impl Into<String>,
    ) {
        let key = key.into();
        if self.doubts(&key) {
            return;
        }
        self.list.push(Problem {
            key,
            message: message.into(),
            fix: fix.into(),
        });
    }

    /// How many problems there are so far.
    pub(super) fn len(&self) -> usize {
        self.list.len()
    }

    /// Whether decoding took out `key` or a table holding it: its value is a default.
    pub(super) fn doubts(&self, key: &str) -> bool {
        self.doubtful.iter().any(|d| within(key, d))
    }

    /// Whether decoding took out a whole table right under `table` (e.g. an agent written as a
    /// number), or `table` itself.
    fn doubts_an_entry_of(&self, table: &str) -> bool {
        self.doubtful.iter().any(|d| {
            d == table
                || d.strip_prefix(table)
                    .and_then(|r| r.strip_prefix('.'))
                    .is_some_and(|entry| !entry.contains(['.', '[']))
        })
    }
}

/// Whether `key` is one a set cannot do without (the loader reports it missing).
fn required(key: &str) -> bool {
    let under = |top: &str, leaves: &[&str]| {
        key.strip_prefix(top)
            .is_some_and(|rest| leaves.iter().any(|l| rest.ends_with(&format!(".{l}"))))
    };
    key == "set.name"
        || under("agents.", &["name", "instruction", "destination.to", "key"])
        || under("tools.", &["description", "backend"])
        || under("sidecars.", &["backend", "timeout_ms"])
}

/// Whether `key` is `table` or a key inside it (`table.x`, `table[0]`).
fn within(key: &str, table: &str) -> bool {
    key.strip_prefix(table)
        .is_some_and(|r| r.is_empty() || r.starts_with(['.', '[']))
}

fn build(f: &SetFile, base: &Path, p: &mut Problems) -> Option<Registry> {
    let set = match &f.set {
        Some(set) => {
            if set.name.trim().is_empty() {
                p.add(
                    "set.name",
                    "is missing or empty",
                    "name the set, e.g. name = \"support\"",
                );
            }
            set.clone()
        }
        None => {
            p.add(
                "set",
                "the file has no [set] table",
                "start the file with [set] and the set's name, e.g. name = \"support\"",
            );
            SetSection::default()
        }
    };
    for (key, v) in [
        ("set.standby_timeout_ms", set.standby_timeout_ms),
        ("set.held_timeout_ms", set.held_timeout_ms),
        ("set.reroute_window_s", set.reroute_window_s),
    ] {
        if v == 0 {
            p.add(
                key,
                "is 0",
                "use a positive value or remove the key for the default",
            );
        }
    }
    let g = &f.guards;
    if g.max_handoffs == 0 {
        p.add(
            "guards.max_handoffs",
            "is 0, so no handoff could ever happen",
            "use at least 1; seed 003's loop guard is 3",
        );
    }
    if g.window_s == 0 {
        p.add(
            "guards.window_s",
            "is 0, so the loop guard never counts anything",
            "use the window in seconds, e.g. 60",
        );
    }
    let phrases = phrase_rules(&f.phrases, p);
    // Model agents are indexed in their own order (the index tags model audio); human agents
    // in theirs.
    let models: Vec<(&String, &AgentSection)> = f
        .agents
        .iter()
        .filter(|(_, a)| a.kind == KindName::Model)
        .collect();
    let humans: Vec<(&String, &AgentSection)> = f
        .agents
        .iter()
        .filter(|(_, a)| a.kind == KindName::Human)
        .collect();
    let ids: Vec<&String> = models.iter().map(|(id, _)| *id).collect();
    let index_of = |id: &str| ids.iter().position(|x| *x == id).map(|i| i as u32);
    let person_ids: Vec<&String> = humans.iter().map(|(id, _)| *id).collect();
    let person_of = |id: &str| person_ids.iter().position(|x| *x == id).map(|i| i as u32);
    // What the agents' roles and kinds decide is not judged when decoding took one out.
    let agent_gone = p.doubts_an_entry_of("agents");
    let unsure = |field: &str, p: &Problems| {
        agent_gone
            || f.agents
                .keys()
                .any(|id| p.doubts(&format!("agents.{id}.{field}")))
    };
    let kinds_unsure = unsure("kind", p);
    let roles_unsure = kinds_unsure || unsure("role", p);
    if models.is_empty() && !f.agents.is_empty() && !kinds_unsure {
        p.add(
            "agents",
            "the set has only human agents; a model agent answers the call",
            "add an [agents.<id>] table with role = \"primary\" and an instruction",
        );
    }
    if f.agents.is_empty() && !agent_gone {
        p.add(
            "agents",
            "the set has no agents",
            "add at least one [agents.<id>] table with role = \"primary\"",
        );
    }
    let primaries: Vec<&String> = models
        .iter()
        .filter(|(_, a)| a.role == Some(RoleName::Primary))
        .map(|(id, _)| *id)
        .collect();
    match primaries.as_slice() {
        [] if !models.is_empty() && !roles_unsure => p.add(
            "agents",
            "no agent has role = \"primary\"",
            "mark the agent a call starts with as role = \"primary\"",
        ),
        [_] | [] => {}
        [first, rest @ ..] => {
            for id in rest {
                p.add(
                    format!("agents.{id}.role"),
                    format!("a second primary (agents.{first} is one already)"),
                    "keep exactly one role = \"primary\"; make the others \"specialist\"",
                );
            }
        }
    }
    let mut names: BTreeMap<String, String> = BTreeMap::new();
    let mut agents = Vec::new();
    let mut people = Vec::new();
    for (id, a) in &f.agents {
        for n in std::iter::once(id)
            .chain(std::iter::once(&a.name))
            .chain(&a.aliases)
        {
            let norm = super::matching::normalize(n);
            if norm.is_empty() {
                continue; // an empty name is reported as such
            }
            match names.get(&norm) {
                Some(other) if other != id => p.add(
                    format!("agents.{id}.aliases"),
                    format!("{n:?} also names agents.{other}"),
                    "give every agent distinct ids, names and aliases",
                ),
                _ => {
                    names.insert(norm, id.clone());
                }
            }
        }
    }
    for (i, (id, a)) in models.iter().enumerate() {
        // An agent whose kind was taken out is neither a model agent nor a person to check.
        if p.doubts(&format!("agents.{id}.kind")) {
            agents.push(None);
            continue;
        }
        let ctx = agent::AgentCtx {
            id,
            key: format!("agents.{id}"),
            index_of: &index_of,
            person_of: &person_of,
            count: models.len() as u32,
            people: humans.len() as u32,
            tools: &f.tools,
        };
        agents.push(agent::agent(i as u32, a, &ctx, p));
    }
    for (i, (id, a)) in humans.iter().enumerate() {
        people.push(person::person(i as u32, id, a, &index_of, base, p));
    }
    let mut tools = BTreeMap::new();
    // A declared tool an agent means by a misspelt name is listed (the misspelling is reported).
    let declared: Vec<String> = f.tools.keys().cloned().collect();
    let meant: Vec<&str> = f
        .agents
        .values()
        .flat_map(|a| &a.tools)
        .filter(|t| !f.tools.contains_key(*t))
        .filter_map(|t| crate::config::decode::closest(t, &declared))
        .collect();
    for (name, t) in &f.tools {
        if let Some(tool) = tool::tool(name, t, p) {
            tools.insert(name.clone(), Arc::new(tool));
        }
        if !f.agents.values().any(|a| a.tools.contains(name))
            && !meant.contains(&name.as_str())
            && !unsure("tools", p)
        {
            p.add(
                format!("tools.{name}"),
                "no agent lists this tool",
                format!("add \"{name}\" to an agent's tools, or remove the table"),
            );
        }
    }
    let sidecars = sidecar::build(&f.sidecars, p);
    let primary = primaries.first().and_then(|id| index_of(id))?;
    Some(Registry {
        name: set.name.clone(),
        description: set.description.clone(),
        agents: agents.into_iter().collect::<Option<Vec<_>>>()?,
        people: people.into_iter().collect::<Option<Vec<_>>>()?,
        tools,
        primary,
        guards: Guards {
            max_handoffs: g.max_handoffs,
            window: Duration::from_secs(g.window_s),
            sticky: g.sticky,
            min_turns: g.min_turns,
        },
        phrases: phrases?,
        timing: Timing {
            standby_timeout: Duration::from_millis(set.standby_timeout_ms),
            held_timeout: Duration::from_millis(set.held_timeout_ms),
            reroute_window: Duration::from_secs(set.reroute_window_s),
        },
        sidecars,
        mcp: None,
    })
}

fn phrase_rules(s: &PhrasesSection, p: &mut Problems) -> Option<PhraseRules> {
    let mut ok = true;
    let mut list = |name: &str, v: &[String], p: &mut Problems| {
        let mut out = Vec::new();
        for (i, pat) in v.iter().enumerate() {
            match compile(pat) {
                Ok(r) => out.push(r),
                Err(e) => {
                    ok = false;
                    p.add(
                        format!("phrases.{name}[{i}]"),
                        format!("{pat:?} is not a valid regex: {}", first_line(&e.to_string())),
                        "fix the regex (https://docs.rs/regex syntax), e.g. \"outside my (area|domain)\"",
                    );
                }
            }
        }
        out
    };
    let exact = list("exact", &s.exact, p);
    let boundary = list("boundary", &s.boundary, p);
    let explicit = list("explicit", &s.explicit, p);
    let mut groups = Vec::new();
    for (i, g) in s.proximity_groups.iter().enumerate() {
        if g.is_empty() || g.iter().any(|w| w.trim().is_empty()) {
            ok = false;
            p.add(
                format!("phrases.proximity_groups[{i}]"),
                "a group is empty or holds an empty word",
                "list at least one word per group, e.g. [\"outside\", \"not my\"]",
            );
            continue;
        }
        match group_regex(g) {
            Ok(r) => groups.push(r),
            Err(e) => {
                ok = false;
                p.add(
                    format!("phrases.proximity_groups[{i}]"),
                    first_line(&e.to_string()),
                    "use plain words",
                );
            }
        }
    }
    if !s.proximity_groups.is_empty() && s.proximity_window == 0 {
        ok = false;
        p.add(
            "phrases.proximity_window",
            "is 0 characters",
            "use the seed's 100, or remove the key",
        );
    }
    ok.then_some(PhraseRules {
        enabled: s.enabled,
        exact,
        boundary,
        explicit,
        groups,
        window: s.proximity_window,
    })
}

pub(super) fn first_line(s: &str) -> String {
    s.lines()
        .rfind(|l| !l.trim().is_empty())
        .unwrap_or(s)
        .trim()
        .to_owned()
}
