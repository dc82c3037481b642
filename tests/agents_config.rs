//! The shipped agent sets load and validate; bad sets report every problem with its key and fix.

use std::path::{Path, PathBuf};

use baton::agents::registry::{HistoryTransfer, Isolation, Mode, Role};
use baton::agents::{self, Strategy};

fn shipped(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("config/agents")
        .join(name)
}

#[test]
fn every_shipped_set_loads() {
    let sets = agents::load_dir(&shipped("")).unwrap();
    let names: Vec<&str> = sets.iter().map(|(_, r)| r.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "financial",
            "financial_shared",
            "front_desk",
            "front_desk_warm",
            "realty",
            "router",
            "sidecars",
            "support",
            "support_mcp"
        ]
    );
    for (path, r) in &sets {
        assert_eq!(
            r.agents.iter().filter(|a| a.role == Role::Primary).count(),
            1,
            "{}",
            path.display()
        );
        assert!(r.missing_env().is_empty(), "shipped sets need no secrets");
    }
}

#[test]
fn seed_000_financial_advisor_and_joint_schemes_specialist() {
    let r = agents::load(&shipped("financial.toml")).unwrap();
    let primary = r.agent(r.primary);
    assert_eq!(primary.id, "advisor");
    assert_eq!(primary.name, "Asha");
    let s = r.find("government_schemes").expect("alias");
    assert_eq!(s.id, "schemes");
    assert_eq!(
        r.find("government_schemes_specialist").unwrap().id,
        "schemes"
    );
    assert_eq!(s.policy.mode, Mode::Joint);
    assert!(
        s.activation
            .topics
            .contains(&"government_scheme".to_owned())
    );
    let route = r
        .tool("respond_to_financial_query")
        .unwrap()
        .route
        .clone()
        .unwrap();
    assert_eq!(route.requires_specialist, "requires_specialist");
    assert_eq!(route.specialist, "specialist_type");
}

#[test]
fn seed_002_domains_with_filtered_tools_and_phrases() {
    let r = agents::load(&shipped("support.toml")).unwrap();
    assert!(r.phrases.enabled);
    assert_eq!(r.phrases.window, 100);
    let sec = r.find("security_authentication").unwrap();
    assert_eq!(sec.policy.isolation, Isolation::Isolated);
    assert_eq!(sec.policy.history, HistoryTransfer::LastTurns(2));
    assert!(sec.tools.contains(&"unlock_account".to_owned()));
    assert!(
        !r.find("crm_billing")
            .unwrap()
            .tools
            .contains(&"unlock_account".to_owned())
    );
    assert_eq!(r.agents.len(), 3);
}

#[test]
fn seed_003_pipeline_with_dicom_rule_and_loop_guard() {
    let r = agents::load(&shipped("realty.toml")).unwrap();
    assert_eq!(r.guards.max_handoffs, 3);
    let sched = r.find("scheduler").unwrap();
    assert_eq!(sched.blocked_when[0].key, "dicom_status");
    assert_eq!(sched.activation.when.len(), 6);
    // The model may hand a qualified lead over too; the DICOM rule refuses that as well.
    assert!(sched.policy.transfer_tool);
    assert_eq!(sched.policy.strategy, Strategy::Auto);
    let f = r.find("follow_up").unwrap();
    assert!(f.handoffs.is_empty(), "terminal agent");
    assert!(f.priority > sched.priority && sched.priority > r.agent(r.primary).priority);
}

fn problems(text: &str) -> Vec<(String, String, String)> {
    match agents::parse(text, Path::new("/tmp/sets/bad.toml")) {
        Err(e) => {
            let rendered = e.to_string();
            assert!(rendered.starts_with("/tmp/sets/bad.toml: "), "{rendered}");
            e.problems()
                .iter()
                .map(|p| (p.key.clone(), p.message.clone(), p.fix.clone()))
                .collect()
        }
        Ok(_) => panic!("expected problems"),
    }
}

#[test]
fn unknown_keys_are_refused_with_their_line() {
    let p = problems(
        "[set]\nname = \"x\"\n[agents.a]\nname = \"A\"\nrole = \"primary\"\ninstruction = \"i\"\ncolour = 3\n",
    );
    assert_eq!(p.len(), 1);
    assert_eq!(p[0].0, "agents.a.colour");
    assert!(p[0].1.contains("line 7"), "{p:?}");
    let p = problems(
        "[set]\nname = \"x\"\n[agents.a]\nname = \"A\"\nrole = \"boss\"\ninstruction = \"i\"\n",
    );
    assert_eq!(p[0].0, "agents.a.role");
}

#[test]
fn every_semantic_problem_is_reported_with_key_and_fix() {
    let text = r#"
[set]
name = "bad"
[guards]
max_handoffs = 0
[phrases]
enabled = true
explicit = ["let me (transfer"]
[agents.one]
name = "One"
role = "primary"
instruction = "You are one."
tools = ["nope"]
handoffs = ["ghost"]
[agents.one.activation]
patterns = ["(unclosed"]
[agents.two]
name = "Two"
role = "primary"
instruction = "You are two."
voice = "Puck"
[agents.two.policy]
mode = "joint"
history = "most"
[[agents.two.blocked_when]]
key = "dicom_status"
[tools.lookup]
description = "Look up."
backend = "http"
url = "ftp://x"
header = "Authorization"
reply = { a = 1 }
scheduling = "interrupt"
[tools.lookup.parameters]
type = "object"
required = ["id"]
"#;
    let p = problems(text);
    let keys: Vec<&str> = p.iter().map(|(k, _, _)| k.as_str()).collect();
    for k in [
        "guards.max_handoffs",
        "phrases.explicit[0]",
        "agents.two.role",
        "agents.one.tools[0]",
        "agents.one.handoffs[0]",
        "agents.one.activation.patterns[0]",
        "agents.two.policy.mode",
        "agents.two.policy.history",
        "agents.two.voice",
        "agents.two.blocked_when[0]",
        "tools.lookup.parameters",
        "tools.lookup.scheduling",
        "tools.lookup.reply",
        "tools.lookup.url",
        "tools.lookup.header_env",
        "tools.lookup",
    ] {
        assert!(keys.contains(&k), "missing {k} in {keys:#?}");
    }
    assert!(p.iter().all(|(_, m, f)| !m.is_empty() && !f.is_empty()));
    let regex = p
        .iter()
        .find(|(k, _, _)| k == "agents.one.activation.patterns[0]")
        .unwrap();
    assert!(regex.1.contains("not a valid regex"), "{regex:?}");
}

#[test]
fn a_secret_is_named_never_written() {
    let text = r#"
[set]
name = "s"
[agents.a]
name = "A"
role = "primary"
instruction = "i"
tools = ["crm"]
[tools.crm]
description = "CRM lookup."
backend = "http"
url = "https://crm.example.com/x"
header = "Authorization"
header_env = "Bearer abc123"
"#;
    let p = problems(text);
    assert_eq!(p[0].0, "tools.crm.header_env");
    assert!(p[0].1.contains("NAME of an environment variable"));
}

#[test]
fn a_set_without_agents_or_primary_is_refused() {
    let p = problems("[set]\nname = \"e\"\n");
    assert_eq!(p[0].0, "agents");
    let p = problems(
        "[set]\nname = \"e\"\n[agents.a]\nname = \"A\"\nrole = \"specialist\"\ninstruction = \"i\"\n",
    );
    assert!(
        p.iter()
            .any(|(k, m, _)| k == "agents" && m.contains("primary")),
        "{p:?}"
    );
}

#[test]
fn a_human_agent_is_a_person_reached_by_a_transfer() {
    use baton::transfer::{Destination, Handover, OnNoAnswer};
    let r = agents::load(&shipped("front_desk.toml")).unwrap();
    assert_eq!(r.agents.len(), 1, "a person is no model agent");
    assert_eq!(r.agent(r.primary).id, "advisor");
    let ravi = r.person("schemes desk").expect("found by alias");
    assert_eq!(ravi.id, "ravi");
    assert_eq!(ravi.name, "Ravi");
    assert_eq!(
        ravi.human.destination,
        Destination::Sip("sip:ravi@127.0.0.1:5999".into())
    );
    assert_eq!(ravi.human.handover, Handover::Blind);
    assert_eq!(ravi.human.on_no_answer, OnNoAnswer::Return);
    assert_eq!(ravi.human.ring_timeout.as_secs(), 25);
    assert_eq!(r.agent(r.primary).people, vec![0]);
    // The model sees the person's transfer tool and is told when to use it.
    let caps = baton::model::catalog::lookup(
        baton::model::handle::Protocol::Gemini,
        "models/gemini-2.5-flash-native-audio-preview-09-2025",
    )
    .capabilities;
    let tools = agents::tools::declarations(&r, &[r.primary], &caps);
    let names: Vec<&str> = tools[0]["functionDeclarations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["transfer_to_ravi"]);
    let instruction = agents::prompts::system_instruction_for(&r, &[r.primary], None, false);
    assert!(
        instruction.contains("transfer_to_ravi (Ravi for government savings schemes)"),
        "{instruction}"
    );
    assert!(matches!(
        agents::tools::resolve(&r, &[r.primary], "transfer_to_ravi"),
        agents::tools::Resolved::Person(0)
    ));
}

#[test]
fn a_human_agents_problems_are_named_by_key_with_a_fix() {
    let head =
        "[set]\nname = \"x\"\n[agents.a]\nname = \"A\"\nrole = \"primary\"\ninstruction = \"i\"\n";
    let keys = |p: &[(String, String, String)]| p.iter().map(|x| x.0.clone()).collect::<Vec<_>>();
    // No destination.
    let p = problems(&format!(
        "{head}[agents.p]\nkind = \"human\"\nname = \"P\"\n"
    ));
    assert_eq!(keys(&p), ["agents.p.destination"], "{p:?}");
    assert!(p[0].2.contains("[agents.p.destination]"), "{p:?}");
    // A destination that is none, named by its full key with the accepted form.
    let p = problems(&format!(
        "{head}[agents.p]\nkind = \"human\"\nname = \"P\"\n[agents.p.destination]\nto = \"4471\"\ntransfer = \"blind\"\n"
    ));
    assert_eq!(keys(&p), ["agents.p.destination.to"], "{p:?}");
    assert!(p[0].1.contains("sip:4471@pbx.example.com"), "{p:?}");
    // A warm transfer is the default: the person is dialled, briefed and bridged.
    let set = agents::parse(
        &format!(
            "{head}[agents.p]\nkind = \"human\"\nname = \"P\"\n[agents.p.destination]\nto = \"+442079460018\"\n"
        ),
        Path::new("/tmp/sets/warm.toml"),
    )
    .expect("a warm person loads");
    assert_eq!(
        set.people[0].human.handover,
        baton::transfer::Handover::Warm
    );
    // What a person cannot have, and a person as primary.
    let p = problems(&format!(
        "{head}[agents.p]\nkind = \"human\"\nname = \"P\"\nrole = \"primary\"\ninstruction = \"be nice\"\ntools = [\"t\"]\n[agents.p.destination]\nto = \"sip:p@pbx.example.com\"\ntransfer = \"blind\"\non_no_answer = \"agent:nobody\"\n"
    ));
    let k = keys(&p);
    for key in [
        "agents.p.role",
        "agents.p.instruction",
        "agents.p.tools",
        "agents.p.destination.on_no_answer",
    ] {
        assert!(k.contains(&key.to_owned()), "{key} missing from {p:?}");
    }
    // A destination on a model agent, and a model agent without a role.
    let p = problems(
        "[set]\nname = \"x\"\n[agents.a]\nname = \"A\"\nrole = \"primary\"\ninstruction = \"i\"\n[agents.a.destination]\nto = \"sip:a@b.c\"\n[agents.b]\nname = \"B\"\ninstruction = \"i\"\n",
    );
    let k = keys(&p);
    assert!(k.contains(&"agents.a.destination".to_owned()), "{p:?}");
    assert!(k.contains(&"agents.b.role".to_owned()), "{p:?}");
    // An unknown key in the destination table is refused with its line.
    let p = problems(&format!(
        "{head}[agents.p]\nkind = \"human\"\nname = \"P\"\n[agents.p.destination]\nto = \"sip:p@pbx.example.com\"\nring = 5\n"
    ));
    assert_eq!(p[0].0, "agents.p.destination.ring", "{p:?}");
}

#[test]
fn the_readmes_human_agent_example_loads() {
    let readme = include_str!("../README.md");
    let section = readme
        .split("### A person in the agent set")
        .nth(1)
        .expect("the README section");
    let block = section
        .split("```toml\n")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .expect("its TOML block");
    let text = format!("[set]\nname = \"readme\"\n{block}");
    let r = agents::parse(&text, Path::new("README.md")).unwrap();
    assert_eq!(r.people[0].id, "ravi");
}

#[test]
fn hold_audio_is_for_warm_transfers_and_must_be_a_readable_wav() {
    let head =
        "[set]\nname = \"x\"\n[agents.a]\nname = \"A\"\nrole = \"primary\"\ninstruction = \"i\"\n";
    let person = |dest: &str| {
        format!(
            "{head}[agents.p]\nkind = \"human\"\nname = \"P\"\n[agents.p.destination]\nto = \"sip:p@pbx.example.com\"\n{dest}"
        )
    };
    let p = problems(&person(
        "transfer = \"blind\"\nhold_audio = \"music.wav\"\n",
    ));
    assert_eq!(p[0].0, "agents.p.destination.hold_audio", "{p:?}");
    assert!(p[0].1.contains("warm transfers only"), "{p:?}");
    let p = problems(&person("hold_audio = \"no-such-music.wav\"\n"));
    assert_eq!(p[0].0, "agents.p.destination.hold_audio", "{p:?}");
    assert!(p[0].1.contains("cannot be used"), "{p:?}");
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let set = agents::parse(
        &person("hold_audio = \"audio-fixtures/answering/m_music.wav\"\n"),
        &root.join("set.toml"),
    )
    .expect("a readable WAV, relative to the set's file");
    let hold = set.people[0].human.hold.as_ref().expect("read at load");
    assert!(hold.rate > 0 && !hold.samples.is_empty());
}
