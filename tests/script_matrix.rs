//! Every bundled scenario plays to its script on every model profile baton supports
//! (`gemini-3.8`, `gemini-2.5`, `gemini-3.1`, `openai`) with every handoff strategy the profile
//! allows, on the embedded mock (accelerated clock). A call plays to its script when the agents
//! say exactly the scripted lines in order (from the transcript), the recording holds exactly
//! the scripted reply clips in order (cross-correlation, not baton's events), each handoff
//! happens once in the scripted order, nothing unscripted is heard, there is no underrun, an
//! in-session or warm handoff inserts no silence at all by the recording (the next agent's first
//! sample follows the announcement's last), and every handoff's reported `gap_ms` agrees with
//! the recording within 1 ms. A strategy
//! the profile cannot carry at all is refused before the call with one line naming the profile
//! and the missing capability.
//!
//! `tests/script_matrix_remote.rs` plays the same scripts against separate `baton mock-model`
//! processes addressed by real model ids, at real pace.

use crate::script_support;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use baton::agents::strategy::{Strategy, unplayable};
use baton::demo::{self, DemoArgs};
use baton::mock::Scenario;
use baton::model::catalog;
use baton::model::handle::Protocol;
use script_support::{Script, check};

const PROFILES: [&str; 4] = ["gemini-3.8", "gemini-2.5", "gemini-3.1", "openai"];
const STRATEGIES: [Strategy; 5] = [
    Strategy::ContextUpdate,
    Strategy::ToolResponse,
    Strategy::InjectTurn,
    Strategy::Recreate,
    Strategy::RecreateCold,
];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// What the model of `profile` takes in place (the table's entry for the model it imitates).
fn capabilities(profile: &str) -> baton::model::Capabilities {
    if profile == "openai" {
        return catalog::lookup(Protocol::OpenAi, catalog::DEFAULT_OPENAI_MODEL).capabilities;
    }
    let p: baton::mock::Profile = profile.parse().unwrap();
    catalog::lookup(Protocol::Gemini, p.model_id()).capabilities
}

struct Case {
    scenario: PathBuf,
    profile: &'static str,
    strategy: Option<Strategy>,
}

impl Case {
    fn label(&self) -> String {
        format!(
            "{} on {} with {}",
            self.scenario.file_stem().unwrap().to_string_lossy(),
            self.profile,
            self.strategy.map_or("its agents' policy", Strategy::as_str)
        )
    }
}

fn cases() -> Vec<Case> {
    let mut out = Vec::new();
    for scenario in demo::bundled_scenarios().unwrap() {
        let s = Scenario::load(&scenario).unwrap();
        for profile in PROFILES {
            out.push(Case {
                scenario: scenario.clone(),
                profile,
                strategy: None,
            });
            if s.agents.is_some() {
                for st in STRATEGIES {
                    out.push(Case {
                        scenario: scenario.clone(),
                        profile,
                        strategy: Some(st),
                    });
                }
            }
        }
    }
    out
}

/// The script of every call file of every bundled scenario, loaded once.
fn scripts() -> HashMap<PathBuf, Script> {
    let mut out = HashMap::new();
    for scenario in demo::bundled_scenarios().unwrap() {
        for path in demo::scenario_calls(&scenario) {
            let s = Scenario::load(&path).unwrap();
            out.insert(path, Script::of(&s, 16_000));
        }
    }
    out
}

/// Runs one case; every difference from the script, one line each.
fn play(case: &Case, out: &Path, scripts: &HashMap<PathBuf, Script>) -> Vec<String> {
    let args = DemoArgs {
        scenario: Some(case.scenario.display().to_string()),
        profile: Some(case.profile.to_owned()),
        strategy: case.strategy.map(|s| s.as_str().to_owned()),
        out: out.to_path_buf(),
        api_key_env: "BATON_TEST_NO_KEY".into(),
        ..Default::default()
    };
    let caps = capabilities(case.profile);
    let missing = case.strategy.and_then(|s| unplayable(s, &caps));
    let outcome = match (demo::run(&args), missing) {
        (Err(e), Some(missing)) => {
            let line = e.to_string();
            let strategy = case.strategy.unwrap().as_str();
            let ok = !line.contains('\n')
                && line.contains(case.profile)
                && line.contains(strategy)
                && line.contains(missing);
            return if ok {
                Vec::new()
            } else {
                vec![format!(
                    "refused, but not in one line naming {} and {missing:?}: {line:?}",
                    case.profile
                )]
            };
        }
        (Ok(_), Some(missing)) => {
            return vec![format!("played although the model has {missing}")];
        }
        (Err(e), None) => return vec![format!("failed: {e}")],
        (Ok(o), None) => o,
    };
    let paths = demo::scenario_calls(&case.scenario);
    assert_eq!(paths.len(), outcome.calls.len());
    let gapless = case.strategy != Some(Strategy::RecreateCold);
    let mut bad = Vec::new();
    for (i, (path, ran)) in paths.iter().zip(&outcome.calls).enumerate() {
        let wav = match i {
            0 => out.join("call.wav"),
            n => out.join(format!("call{}.wav", n + 1)),
        };
        for b in check(&scripts[path], &ran.report, &wav, gapless) {
            bad.push(format!("call {}: {b}", i + 1));
        }
    }
    bad
}

#[test]
fn every_scenario_plays_to_its_script_on_every_profile_and_strategy() {
    let cases = cases();
    assert!(cases.len() > 60, "{} cases", cases.len());
    let scripts = scripts();
    let next = Mutex::new(0usize);
    let failures = Mutex::new(Vec::new());
    let dir = tempfile::tempdir().unwrap();
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                loop {
                    let i = {
                        let mut n = next.lock().unwrap();
                        *n += 1;
                        *n - 1
                    };
                    let Some(case) = cases.get(i) else { break };
                    let out = dir.path().join(format!("case{i}"));
                    let bad = play(case, &out, &scripts);
                    if !bad.is_empty() {
                        failures.lock().unwrap().push(format!(
                            "{}:\n    {}",
                            case.label(),
                            bad.join("\n    ")
                        ));
                    }
                }
            });
        }
    });
    let failures = failures.into_inner().unwrap();
    assert!(
        failures.is_empty(),
        "{} of {} cases did not play to their script:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

#[test]
fn a_scenario_is_refused_in_one_line_on_a_strategy_its_profile_cannot_carry() {
    let dir = tempfile::tempdir().unwrap();
    let args = DemoArgs {
        scenario: Some(
            root()
                .join("audio-fixtures/scenarios/seed000.toml")
                .display()
                .to_string(),
        ),
        profile: Some("gemini-3.1".into()),
        strategy: Some("context_update".into()),
        out: dir.path().to_path_buf(),
        ..Default::default()
    };
    let e = demo::run(&args).err().expect("refused").to_string();
    assert_eq!(
        e,
        "strategy context_update cannot run on gemini-3.1 (models/gemini-3.1-flash-live-preview): \
         the model has no contextUpdate (instruction and tool update in place)"
    );
}
