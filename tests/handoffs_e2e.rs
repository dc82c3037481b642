//! Handoffs end to end on the embedded mock, accelerated: every strategy on every model profile
//! that supports it. The mock speaks in the voice of whichever agent the *wire* made active, so
//! the recording proves the handoff really happened; `handoff_gap_ms` is measured from played
//! frames. With a 500 ms first-audio latency and announcements over a second long, every
//! in-session strategy and the warm `recreate` must be gapless (≤ one 20 ms frame); the cold
//! baseline shows its real gap.

use crate::support;

use std::path::{Path, PathBuf};

use baton::audio::{resample, wav};
use baton::demo::{self, DemoArgs, DemoOutcome};
use baton::mock::Scenario;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const SHARED_TOOLS: &str = "tests/data/agents/financial_shared_tools.toml";

fn run(
    scenario: &str,
    agents: Option<&str>,
    strategy: Option<&str>,
    profile: Option<&str>,
    out: &Path,
) -> DemoOutcome {
    let args = DemoArgs {
        scenario: Some(scenario.into()),
        agents: agents.map(|a| Path::new(ROOT).join(a)),
        strategy: strategy.map(str::to_owned),
        profile: profile.map(str::to_owned),
        first_audio_ms: Some(500),
        out: out.to_path_buf(),
        api_key_env: "BATON_TEST_NO_KEY".into(),
        ..Default::default()
    };
    demo::run(&args).unwrap_or_else(|e| panic!("{scenario} {strategy:?} {profile:?}: {e}"))
}

fn right_channel(dir: &Path) -> Vec<i16> {
    let mut r = hound::WavReader::open(dir.join("call.wav")).unwrap();
    let s: Vec<i16> = r.samples::<i16>().map(Result::unwrap).collect();
    s.iter().skip(1).step_by(2).copied().collect()
}

/// Checks one seed 000 run: advisor → schemes → back to the advisor, in the right voices.
fn check_seed000(out: &DemoOutcome, dir: &Path, strategy: &str, profile: &str) {
    let why = format!("{strategy} on {profile}");
    let r = &out.report;
    assert_eq!(r.end_reason, "caller hung up", "{why}");
    let hs = &r.handoffs;
    assert_eq!(hs.len(), 2, "{why}: {hs:?}");
    assert_eq!(
        (hs[0].from.as_str(), hs[0].to.as_str()),
        ("advisor", "schemes"),
        "{why}"
    );
    assert_eq!(
        (hs[1].from.as_str(), hs[1].to.as_str()),
        ("schemes", "advisor"),
        "{why}: handback"
    );
    assert_eq!(
        hs[0].strategy, strategy,
        "{why}: the strategy asked for was used"
    );
    // Who the caller heard, in order (the call's log and trace name them so).
    assert_eq!(r.agents_heard(), ["advisor", "schemes", "advisor"], "{why}");
    for h in hs {
        let gap = h
            .gap_ms
            .unwrap_or_else(|| panic!("{why}: {} was never heard", h.to));
        if strategy == "recreate_cold" {
            // Close, then open, then the model's 500 ms first-audio latency: a real gap.
            assert!(
                gap >= 480.0,
                "{why}: cold recreation shows its gap, got {gap} ms"
            );
        } else {
            assert!(
                gap <= 20.0,
                "{why}: {} → {} gap {gap} ms (over one frame)",
                h.from,
                h.to
            );
            assert!(
                h.announcement_queued_ms.unwrap_or(0.0) >= 1000.0,
                "{why}: {h:?}"
            );
        }
    }
    // A handoff never flushes playout and never cuts a turn.
    assert_eq!(r.playout_flushed_samples, 0, "{why}");
    assert_eq!(r.interruptions, 0, "{why}");
    if profile != "gemini-3.1" {
        // (3.1's tool calls are synchronous: the model stops mid-announcement until the transfer
        // call is answered and resumes after its latency; those underruns are the model's.)
        assert_eq!(r.underruns, 0, "{why}");
    }
    // The recording: right after the advisor's announcement the caller hears Ravi's first words
    // (the scenario's handoff reply, in Ravi's voice).
    let scenario =
        Scenario::load(&Path::new(ROOT).join("audio-fixtures/scenarios/seed000.toml")).unwrap();
    let handoff_turn = scenario
        .turns
        .iter()
        .find_map(|t| t.handoff.as_ref().filter(|h| h.to == "schemes"))
        .unwrap();
    let clip = resample::resample_all(&handoff_turn.reply.audio, 24_000, 16_000).unwrap();
    let right = right_channel(dir);
    let heard = hs[0].heard_at_ms.unwrap();
    let score = support::best_match(&right, &clip, (heard * 16.0) as usize, 16 * 40, 16_000, 4);
    assert!(
        score > 0.9,
        "{why}: Ravi's handoff reply not found in the recording (best match {score:.2})"
    );
}

#[test]
fn every_strategy_on_every_profile_that_supports_it_is_gapless() {
    let matrix: [(&str, &[&str]); 3] = [
        (
            "gemini-3.8",
            &["context_update", "tool_response", "inject_turn", "recreate"],
        ),
        ("gemini-2.5", &["tool_response", "inject_turn", "recreate"]),
        ("gemini-3.1", &["recreate"]),
    ];
    for (profile, strategies) in matrix {
        for strategy in strategies {
            let dir = tempfile::tempdir().unwrap();
            let out = run(
                "seed000",
                Some(SHARED_TOOLS),
                Some(strategy),
                Some(profile),
                dir.path(),
            );
            check_seed000(&out, dir.path(), strategy, profile);
        }
    }
}

#[test]
fn the_cold_baseline_shows_its_gap_on_every_profile() {
    for profile in ["gemini-3.8", "gemini-2.5", "gemini-3.1"] {
        let dir = tempfile::tempdir().unwrap();
        let out = run(
            "seed000",
            Some(SHARED_TOOLS),
            Some("recreate_cold"),
            Some(profile),
            dir.path(),
        );
        check_seed000(&out, dir.path(), "recreate_cold", profile);
    }
}

#[test]
fn a_strategy_the_model_cannot_carry_falls_back_and_says_why() {
    // inject_turn cannot change the tools, and Ravi's differ from Asha's: gemini-3.8 carries
    // the handoff with context_update and says why.
    let dir = tempfile::tempdir().unwrap();
    let out = run(
        "seed000",
        None,
        Some("inject_turn"),
        Some("gemini-3.8"),
        dir.path(),
    );
    assert_eq!(out.report.handoffs[0].strategy, "context_update");
    let note = out.report.events.iter().find_map(|e| match e {
        baton::agents::CallEvent::HandoffAnnouncement { note, .. } => note.clone(),
        _ => None,
    });
    assert!(
        note.as_deref()
            .is_some_and(|n| n.contains("inject_turn") && n.contains("tools")),
        "no fallback note: {note:?}"
    );
    assert!(
        out.report
            .handoffs
            .iter()
            .all(|h| h.gap_ms.is_some_and(|g| g <= 20.0))
    );
}

#[test]
fn the_shipped_seed_scenarios_play_their_seeds_flows() {
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
        let out = run(name, None, None, None, dir.path());
        let got: Vec<(&str, &str)> = out
            .report
            .handoffs
            .iter()
            .map(|h| (h.from.as_str(), h.to.as_str()))
            .collect();
        assert_eq!(got, flow, "{name}");
        for h in &out.report.handoffs {
            assert!(h.gap_ms.is_some_and(|g| g <= 20.0), "{name}: {h:?}");
        }
        assert_eq!(out.report.playout_flushed_samples, 0, "{name}");
        // Every turn after a handoff is answered in the new agent's voice (the mock speaks as the
        // persona the wire made active).
        let agents: Vec<&str> = out.report.turns.iter().map(|t| t.agent.as_str()).collect();
        for (_, to) in flow {
            assert!(
                agents.contains(to),
                "{name}: {to} never answered a turn: {agents:?}"
            );
        }
        // The summary names for handoffs.
        let summary: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.path().join("summary.json")).unwrap())
                .unwrap();
        for key in [
            "from",
            "to",
            "strategy",
            "trigger",
            "gap_ms",
            "announcement_queued_ms",
        ] {
            assert!(
                summary["handoffs"][0].get(key).is_some(),
                "{name}: handoffs lack {key}: {summary}"
            );
        }
        for key in ["p50", "p95", "max"] {
            assert!(
                summary["handoff_gap_ms"][key].is_number(),
                "{name}: {summary}"
            );
        }
        let _ = wav::read(&dir.path().join("call.wav")).unwrap();
    }
}

#[test]
fn list_names_every_bundled_scenario_first() {
    let list = demo::list_scenarios().unwrap();
    let names: Vec<&str> = list
        .lines()
        .map(|l| l.split_whitespace().next().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "demo",
            "fault_goaway",
            "fault_mid_tool_call",
            "fault_mid_utterance",
            "seed000",
            "seed001",
            "seed002",
            "seed003",
            "seed004",
            "shared_tools",
            "warm_transfer"
        ]
    );
    let _ = PathBuf::from(ROOT);
}
