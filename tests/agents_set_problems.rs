//! An agent set with several mistakes reports all of them in one load, each with its key, the
//! way the daemon's config does: keys it does not know, values of the wrong kind or not among
//! the names a key takes, and what the set's own checks find. A key found wrong is not reported
//! again through what it decides (a missing role, no primary, an empty instruction).

use std::path::{Path, PathBuf};

use baton::agents;

fn shipped(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("config/agents")
        .join(name)
}

/// `text` with `from` replaced by `to`, which must be there exactly once.
fn with(text: &str, from: &str, to: &str) -> String {
    assert_eq!(text.matches(from).count(), 1, "{from:?} in the set");
    text.replacen(from, to, 1)
}

/// The problems of a set that must not load, and its rendering.
fn problems(text: &str) -> (Vec<(String, String, String)>, String) {
    match agents::parse(text, Path::new("/tmp/sets/bad.toml")) {
        Err(e) => (
            e.problems()
                .iter()
                .map(|p| (p.key.clone(), p.message.clone(), p.fix.clone()))
                .collect(),
            e.to_string(),
        ),
        Ok(_) => panic!("expected problems"),
    }
}

fn keys(p: &[(String, String, String)]) -> Vec<&str> {
    p.iter().map(|(k, _, _)| k.as_str()).collect()
}

/// The rendering's header counts exactly the problems it lists.
fn count_matches(rendered: &str, n: usize) {
    assert!(
        rendered.starts_with(&format!("/tmp/sets/bad.toml: {n} problem(s)\n")),
        "{rendered}"
    );
    assert_eq!(rendered.matches("\n    fix: ").count(), n, "{rendered}");
}

#[test]
fn four_kinds_of_mistake_are_reported_in_one_load() {
    let good = std::fs::read_to_string(shipped("financial.toml")).unwrap();
    // A misspelt key, a number written as text, a strategy that does not exist, a tool name
    // with a typo: each in a different place, none hiding another.
    let text = with(
        &good,
        "greeting = \"Asha here again.",
        "greetng = \"Asha here again.",
    );
    let text = with(&text, "priority = 10\n", "priority = \"high\"\n");
    let text = with(&text, "strategy = \"auto\"\n", "strategy = \"fastest\"\n");
    let text = with(
        &text,
        "tools = [\"respond_to_scheme_query\"]",
        "tools = [\"respond_to_scheme_querry\"]",
    );
    let (p, rendered) = problems(&text);
    let mut k = keys(&p);
    k.sort();
    assert_eq!(
        k,
        [
            "agents.advisor.greetng",
            "agents.schemes.policy.strategy",
            "agents.schemes.priority",
            "agents.schemes.tools[0]",
        ],
        "{rendered}"
    );
    count_matches(&rendered, 4);
    // Listed among a daemon config's problems: one entry each, named by the set's file too.
    let e = agents::parse(&text, Path::new("/tmp/sets/bad.toml")).unwrap_err();
    let listed = e.problems_in_file();
    assert_eq!(listed.len(), 4);
    assert!(
        listed
            .iter()
            .all(|q| q.key.starts_with("/tmp/sets/bad.toml: agents.")),
        "{listed:?}"
    );
    let of = |key: &str| p.iter().find(|(k, _, _)| k == key).unwrap();
    let (_, m, f) = of("agents.advisor.greetng");
    assert!(m.contains("unknown key `greetng`"), "{m}");
    assert!(f.contains("did you mean `greeting`"), "{f}");
    let (_, m, f) = of("agents.schemes.priority");
    assert!(m.contains("\"high\"") && m.contains("whole number"), "{m}");
    assert!(f.contains("priority ="), "{f}");
    let (_, m, f) = of("agents.schemes.policy.strategy");
    assert!(m.contains("\"fastest\""), "{m}");
    assert!(f.contains("auto") && f.contains("recreate"), "{f}");
    let (_, m, f) = of("agents.schemes.tools[0]");
    assert!(m.contains("respond_to_scheme_querry"), "{m}");
    assert!(
        f.contains("did you mean \"respond_to_scheme_query\""),
        "{f}"
    );
    // Every decoding problem names its line.
    for (key, m, _) in &p {
        if key != "agents.schemes.tools[0]" {
            assert!(m.contains("(line "), "{key}: {m}");
        }
    }
}

#[test]
fn a_key_found_wrong_is_not_reported_again_through_what_it_decides() {
    let head = "[set]\nname = \"x\"\n";
    let primary = "[agents.a]\nname = \"A\"\nrole = \"primary\"\ninstruction = \"i\"\n";
    // A role that does not exist: not also "is missing", nor "no agent is primary".
    let (p, r) = problems(&format!(
        "{head}[agents.a]\nname = \"A\"\nrole = \"boss\"\ninstruction = \"i\"\n"
    ));
    assert_eq!(keys(&p), ["agents.a.role"], "{r}");
    assert!(p[0].2.contains("primary"), "{r}");
    count_matches(&r, 1);
    // A misspelt instruction: not also "instruction is empty".
    let (p, r) = problems(&format!(
        "{head}[agents.a]\nname = \"A\"\nrole = \"primary\"\ninstructions = \"i\"\n"
    ));
    assert_eq!(keys(&p), ["agents.a.instructions"], "{r}");
    assert!(p[0].2.contains("`instruction`"), "{r}");
    // A misspelt table of agents: not also "the set has no agents".
    let (p, r) = problems(&format!(
        "{head}[agent.a]\nname = \"A\"\nrole = \"primary\"\ninstruction = \"i\"\n"
    ));
    assert_eq!(keys(&p), ["agent"], "{r}");
    assert!(p[0].2.contains("`agents`"), "{r}");
    // A kind that does not exist: the agent is neither checked as a model agent nor as a person.
    let (p, r) = problems(&format!(
        "{head}{primary}[agents.p]\nkind = \"humane\"\nname = \"P\"\n[agents.p.destination]\nto = \"sip:p@pbx.example.com\"\n"
    ));
    assert_eq!(keys(&p), ["agents.p.kind"], "{r}");
    // A tool list written as one name: not also "no agent lists this tool".
    let (p, r) = problems(&format!(
        "{head}[agents.a]\nname = \"A\"\nrole = \"primary\"\ninstruction = \"i\"\ntools = \"lookup\"\n[tools.lookup]\ndescription = \"Look up.\"\nbackend = \"static\"\nreply = {{ ok = true }}\n"
    ));
    assert_eq!(keys(&p), ["agents.a.tools"], "{r}");
    assert!(p[0].1.contains("a list"), "{r}");
    // A condition's test of the wrong kind: not also "needs exactly one of equals, …".
    let (p, r) = problems(&format!(
        "{head}{primary}[[agents.a.blocked_when]]\nkey = \"dicom_status\"\nequals = 3\n"
    ));
    assert_eq!(keys(&p), ["agents.a.blocked_when[0].equals"], "{r}");
    // A tool's backend that does not exist: not also "is missing", nor its url judged.
    let (p, r) = problems(&format!(
        "{head}[agents.a]\nname = \"A\"\nrole = \"primary\"\ninstruction = \"i\"\ntools = [\"t\"]\n[tools.t]\ndescription = \"T.\"\nbackend = \"grpc\"\nurl = \"grpc://x\"\n"
    ));
    assert_eq!(keys(&p), ["tools.t.backend"], "{r}");
    assert!(p[0].2.contains("http") && p[0].2.contains("static"), "{r}");
}

#[test]
fn required_keys_of_the_wrong_kind_keep_the_rest_checked() {
    // A name written as a number: the agent is still checked (its tool is unknown), and its
    // handoff target still exists for the other agent.
    let text = r#"
[set]
name = 7
[agents.a]
name = 1
role = "primary"
instruction = "i"
tools = ["nope"]
handoffs = ["b"]
[agents.b]
name = "B"
role = "specialist"
instruction = "i"
handoffs = ["a"]
[tools.t]
description = ["T."]
backend = "static"
reply = {}
[[agents.b.blocked_when]]
key = 5
present = true
"#;
    let (p, r) = problems(text);
    let mut k = keys(&p);
    k.sort();
    assert_eq!(
        k,
        [
            "agents.a.name",
            "agents.a.tools[0]",
            "agents.b.blocked_when[0].key",
            "set.name",
            "tools.t",
            "tools.t.description",
        ],
        "{r}"
    );
    count_matches(&r, 6);
    // A required key has no default to fall back on; an optional one has.
    for (key, _, f) in &p {
        if key.ends_with("name") || key.ends_with("description") || key.ends_with(".key") {
            assert!(!f.contains("default"), "{key}: {f}");
        }
    }
    let (p, r) = problems(
        "[set]\nname = \"x\"\ndescription = 3\n[agents.a]\nname = \"A\"\nrole = \"primary\"\ninstruction = \"i\"\n",
    );
    assert_eq!(keys(&p), ["set.description"], "{r}");
    assert!(p[0].2.contains("remove the line to use the default"), "{r}");
}

#[test]
fn a_missing_required_key_is_named_once() {
    let text = r#"
[agents.a]
role = "primary"
instruction = "i"
tools = ["t"]
[tools.t]
description = "T."
[sidecars.s]
backend = "static"
reply = {}
"#;
    let (p, r) = problems(text);
    let mut k = keys(&p);
    k.sort();
    assert_eq!(
        k,
        [
            "agents.a.name",
            "set",
            "sidecars.s.timeout_ms",
            "tools.t.backend"
        ],
        "{r}"
    );
    for (key, m, f) in &p {
        assert!(!m.is_empty() && !f.is_empty(), "{key}");
    }
}

#[test]
fn every_problem_of_a_sidecar_is_reported() {
    let text = r#"
[set]
name = "x"
[agents.a]
name = "A"
role = "primary"
instruction = "i"
[sidecars.s]
backend = "http"
url = "ftp://x"
timeout_ms = 0
max_in_flight = 0
deliver = "shout"
"#;
    let (p, r) = problems(text);
    let mut k = keys(&p);
    k.sort();
    assert_eq!(
        k,
        [
            "sidecars.s.deliver",
            "sidecars.s.max_in_flight",
            "sidecars.s.timeout_ms",
            "sidecars.s.url",
        ],
        "{r}"
    );
}

#[test]
fn a_syntax_error_is_reported_with_the_keys_around_it() {
    let text = "[set]\nname = \"x\"\n[agents.a]\nname = \"A\"\nrole = \"primary\"\ninstruction = \"i\"\npriority = = 3\ncolour = \"red\"\n";
    let (p, r) = problems(text);
    let k = keys(&p);
    assert!(k.contains(&"(syntax)"), "{r}");
    assert!(k.contains(&"agents.a.colour"), "{r}");
    let syntax = p.iter().find(|(k, _, _)| k == "(syntax)").unwrap();
    assert!(syntax.1.contains("line 7"), "{r}");
}

#[test]
fn a_human_agents_destination_reports_every_wrong_setting() {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/corpus/agent_set/human_ring_timeout.toml"),
    )
    .unwrap();
    // A number without its country code, a ring timeout too long and a blind transfer that
    // would screen: three settings, three problems. And, read from the table as written despite
    // those, an agent to fall back to that is not in the set.
    let text = with(&text, "to = \"+442079460018\"", "to = \"02079460018\"");
    let text = with(
        &text,
        "transfer = \"blind\"\n",
        "transfer = \"blind\"\nscreen = true\non_no_answer = \"agent:nobody\"\n",
    );
    let (p, rendered) = problems(&text);
    assert_eq!(
        keys(&p),
        [
            "agents.desk.destination.to",
            "agents.desk.destination.ring_timeout_s",
            "agents.desk.destination.screen",
            "agents.desk.destination.on_no_answer",
        ],
        "{rendered}"
    );
    count_matches(&rendered, 4);
}
