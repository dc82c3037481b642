//! The bundled scenarios against a separate `baton mock-model` process per scenario and
//! profile, addressed over loopback by the id of the real model the profile imitates — the way
//! a user points baton at the service: baton knows only the URL and the model id, and takes
//! what the model can do from its model table. At real pace, half of them at once, each with
//! its agents' configured strategy (every strategy is played on the embedded mock by
//! `tests/script_matrix.rs`); the checks are the same (`tests/script_support`). A scenario of
//! several calls plays its first call here (the later ones need the earlier call's store, which
//! `tests/script_matrix.rs` covers).

use crate::script_support;
use crate::support;

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use baton::demo::{self, DemoArgs};
use baton::mock::Scenario;
use script_support::{Script, check};

/// Profiles and the real model ids a user would configure for them.
const MODELS: [(&str, &str); 4] = [
    ("gemini-3.8", "models/gemini-3.8-live"),
    (
        "gemini-2.5",
        "models/gemini-2.5-flash-native-audio-preview-09-2025",
    ),
    ("gemini-3.1", "models/gemini-3.1-flash-live-preview"),
    ("openai", "gpt-realtime"),
];

fn play(scenario: &Path, profile: &str, model: &str, out: &Path) -> Vec<String> {
    let (_mock, url) = support::start_mock_model(profile, scenario);
    let url = if profile == "openai" {
        format!("{url}/v1")
    } else {
        url
    };
    let args = DemoArgs {
        scenario: Some(scenario.display().to_string()),
        model_url: Some(url),
        model: Some(model.to_owned()),
        profile: (profile == "openai").then(|| profile.to_owned()),
        out: out.to_path_buf(),
        api_key_env: "BATON_TEST_NO_KEY".into(),
        ..Default::default()
    };
    let run = || -> Result<_, demo::DemoError> {
        let prepared = demo::prepare(&args)?;
        demo::runtime(true)?.block_on(demo::run_prepared(&prepared, &args, true))
    };
    let outcome = match run() {
        Ok(o) => o,
        Err(e) => return vec![format!("failed: {e}")],
    };
    let wav = out.join("call.wav");
    std::fs::create_dir_all(out).unwrap();
    outcome.recording.write(&wav).unwrap();
    let s = Scenario::load(scenario).unwrap();
    check(&Script::of(&s, 16_000), &outcome.report, &wav, true)
}

#[test]
fn every_scenario_plays_to_its_script_on_a_separate_mock_addressed_by_a_real_model_id() {
    let mut cases: Vec<(PathBuf, &str, &str)> = Vec::new();
    for scenario in demo::bundled_scenarios().unwrap() {
        // A scenario of several calls plays its first call only (see the module doc).
        for (profile, model) in MODELS {
            cases.push((scenario.clone(), profile, model));
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let failures = Mutex::new(Vec::new());
    // Half the cases at a time: all 40 calls and mock processes at once needed most of both
    // cores, and now and then a call fell behind its 20 ms clock (underruns, a line moved).
    for (half, batch) in cases.chunks(cases.len().div_ceil(2)).enumerate() {
        std::thread::scope(|s| {
            for (j, (scenario, profile, model)) in batch.iter().enumerate() {
                let out = dir.path().join(format!("case{half}-{j}"));
                let failures = &failures;
                s.spawn(move || {
                    let bad = play(scenario, profile, model, &out);
                    if !bad.is_empty() {
                        failures.lock().unwrap().push(format!(
                            "{} on a separate {profile} mock as {model}:\n    {}",
                            scenario.file_stem().unwrap().to_string_lossy(),
                            bad.join("\n    ")
                        ));
                    }
                });
            }
        });
    }
    let failures = failures.into_inner().unwrap();
    assert!(
        failures.is_empty(),
        "{} of {} remote cases did not play to their script:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

/// A model the table gets wrong (a gemini-2.5 service addressed as gemini-3.8): its refusal of
/// `contextUpdate` (close 1007) turns the feature off for the call; the handoff in flight is
/// carried by the resumed session with the whole announcement heard, the next one by another
/// strategy, and the call still plays to its script.
#[test]
fn a_refused_context_update_is_carried_on_and_never_sent_again() {
    let scenario = demo::scenario_path("seed000");
    let (_mock, url) = support::start_mock_model("gemini-2.5", &scenario);
    let dir = tempfile::tempdir().unwrap();
    let args = DemoArgs {
        scenario: Some(scenario.display().to_string()),
        model_url: Some(url),
        model: Some("models/gemini-3.8-live".into()),
        out: dir.path().to_path_buf(),
        api_key_env: "BATON_TEST_NO_KEY".into(),
        ..Default::default()
    };
    let prepared = demo::prepare(&args).unwrap();
    let outcome = demo::runtime(true)
        .unwrap()
        .block_on(demo::run_prepared(&prepared, &args, true))
        .unwrap();
    let wav = dir.path().join("call.wav");
    outcome.recording.write(&wav).unwrap();
    let s = Scenario::load(&scenario).unwrap();
    let bad = check(&Script::of(&s, 16_000), &outcome.report, &wav, true);
    assert!(bad.is_empty(), "{}", bad.join("\n"));
    let r = &outcome.report;
    assert_eq!(r.reconnects.len(), 1, "{:?}", r.reconnects);
    assert_eq!(r.reconnects[0].cause, "closed:1007");
    assert_eq!(r.audio_lost_ms, 0.0);
    let h = &r.handoffs;
    // The record names what carried it: a session set up anew for the new agent.
    assert_eq!(h[0].strategy, "recreate");
    assert!(
        h[0].note.as_deref().is_some_and(|n| n
            .starts_with("context_update was tried; contextUpdate refused by the model (1007)")),
        "{h:?}"
    );
    assert_ne!(h[1].strategy, "context_update", "{h:?}");
}
