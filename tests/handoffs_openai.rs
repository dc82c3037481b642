//! Handoffs end to end on the OpenAI Realtime protocol: the seed scenarios through
//! `baton demo --profile openai` (the embedded mock's OpenAI profile, accelerated), with the
//! call's OpenAI session handle translating baton's messages (session.update, conversation items,
//! function call outputs, deferred response.create). The mock speaks in the voice of whichever
//! agent the wire made active, so the agents named on each turn prove the handoffs happened;
//! `handoff_gap_ms` is measured from played frames, as on Gemini.

use std::path::Path;

use baton::demo::{self, DemoArgs, DemoOutcome};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const SHARED_TOOLS: &str = "tests/data/agents/financial_shared_tools.toml";

fn run(scenario: &str, agents: Option<&str>, strategy: Option<&str>, out: &Path) -> DemoOutcome {
    let args = DemoArgs {
        scenario: Some(scenario.into()),
        agents: agents.map(|a| Path::new(ROOT).join(a)),
        strategy: strategy.map(str::to_owned),
        profile: Some("openai".into()),
        first_audio_ms: Some(500),
        out: out.to_path_buf(),
        api_key_env: "BATON_TEST_NO_KEY".into(),
        ..Default::default()
    };
    demo::run(&args).unwrap_or_else(|e| panic!("{scenario} {strategy:?} openai: {e}"))
}

/// What OpenAI Realtime can carry: no non-blocking tools, so never `tool_response`.
fn fits_openai(strategy: &str) -> bool {
    matches!(
        strategy,
        "context_update" | "inject_turn" | "recreate" | "recreate_cold"
    )
}

#[test]
fn the_seed_scenarios_hand_off_on_the_openai_profile() {
    let flows: [(&str, &[(&str, &str)]); 3] = [
        ("seed000", &[("advisor", "schemes"), ("schemes", "advisor")]),
        (
            "seed002",
            &[
                ("crm_billing", "product_promotions"),
                ("product_promotions", "security_authentication"),
            ],
        ),
        (
            "seed003",
            &[("qualifier", "scheduler"), ("scheduler", "follow_up")],
        ),
    ];
    for (name, flow) in flows {
        let dir = tempfile::tempdir().unwrap();
        let out = run(name, None, None, dir.path());
        let r = &out.report;
        assert_eq!(r.end_reason, "caller hung up", "{name}");
        let got: Vec<(&str, &str)> = r
            .handoffs
            .iter()
            .map(|h| (h.from.as_str(), h.to.as_str()))
            .collect();
        assert_eq!(got, flow, "{name}: {:?}", r.handoffs);
        for h in &r.handoffs {
            assert!(fits_openai(&h.strategy), "{name}: {h:?}");
            let gap = h
                .gap_ms
                .unwrap_or_else(|| panic!("{name}: {} was never heard: {h:?}", h.to));
            assert!(gap >= 0.0, "{name}: {h:?}");
        }
        assert_eq!(r.playout_flushed_samples, 0, "{name}: a handoff flushed");
        assert_eq!(r.interruptions, 0, "{name}");
        let agents: Vec<&str> = r.turns.iter().map(|t| t.agent.as_str()).collect();
        for (_, to) in flow {
            assert!(
                agents.contains(to),
                "{name}: {to} never answered a turn: {agents:?}"
            );
        }
        let summary: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.path().join("summary.json")).unwrap())
                .unwrap();
        assert!(
            summary["handoff_gap_ms"]["p50"].is_number(),
            "{name}: {summary}"
        );
        assert!(
            r.protocol_errors.is_empty(),
            "{name}: the translation drew errors: {:?}",
            r.protocol_errors
        );
    }
}

#[test]
fn every_strategy_openai_can_carry_hands_off_seed000() {
    for strategy in ["context_update", "inject_turn", "recreate", "recreate_cold"] {
        let dir = tempfile::tempdir().unwrap();
        let out = run("seed000", Some(SHARED_TOOLS), Some(strategy), dir.path());
        let r = &out.report;
        let why = format!("{strategy} on openai");
        assert_eq!(r.end_reason, "caller hung up", "{why}");
        let hs = &r.handoffs;
        assert_eq!(hs.len(), 2, "{why}: {hs:?}");
        assert_eq!(
            (hs[0].from.as_str(), hs[0].to.as_str()),
            ("advisor", "schemes"),
            "{why}"
        );
        assert_eq!(hs[0].strategy, strategy, "{why}");
        for h in hs {
            let gap = h.gap_ms.unwrap_or_else(|| panic!("{why}: {h:?} not heard"));
            if strategy == "recreate_cold" {
                assert!(
                    gap >= 480.0,
                    "{why}: the cold baseline shows its gap: {h:?}"
                );
            }
        }
        assert_eq!(r.playout_flushed_samples, 0, "{why}");
        assert_eq!(r.interruptions, 0, "{why}");
        assert!(
            r.protocol_errors.is_empty(),
            "{why}: {:?}",
            r.protocol_errors
        );
    }
}

#[test]
fn tool_response_is_refused_on_openai_in_one_line() {
    // No non-blocking tools on OpenAI Realtime: a strategy it can never carry is refused before
    // the call, not silently replaced.
    let dir = tempfile::tempdir().unwrap();
    let args = DemoArgs {
        scenario: Some("seed000".into()),
        agents: Some(Path::new(ROOT).join(SHARED_TOOLS)),
        strategy: Some("tool_response".into()),
        profile: Some("openai".into()),
        out: dir.path().to_path_buf(),
        ..Default::default()
    };
    let e = demo::run(&args).err().expect("refused").to_string();
    assert_eq!(
        e,
        "strategy tool_response cannot run on openai (gpt-realtime): the model has no non-blocking tools"
    );
}
