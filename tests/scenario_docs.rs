//! docs/scenarios.md stays true: every TOML example in it is a scenario the mock loads (clips
//! and caller files found, no unknown key), and each feature the page describes has one.

use std::path::PathBuf;

use baton::mock::Scenario;

fn examples() -> (PathBuf, Vec<String>) {
    let doc = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("docs/scenarios.md");
    let text = std::fs::read_to_string(&doc).unwrap();
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        match (&mut current, line.trim_end()) {
            (None, "```toml") => current = Some(String::new()),
            (Some(b), "```") => {
                blocks.push(std::mem::take(b));
                current = None;
            }
            (Some(b), l) => {
                b.push_str(l);
                b.push('\n');
            }
            (None, _) => {}
        }
    }
    (doc, blocks)
}

#[test]
fn every_example_in_the_scenario_docs_loads() {
    let (doc, blocks) = examples();
    let loaded: Vec<Scenario> = blocks
        .iter()
        .map(|b| Scenario::parse(b, &doc).unwrap_or_else(|e| panic!("{e}\n{b}")))
        .collect();
    for s in &loaded {
        let caller = s.caller.as_ref().expect("every example names its caller");
        assert!(caller.exists(), "{}: {}", s.name, caller.display());
        if let Some(agents) = &s.agents {
            baton::agents::load(agents).unwrap_or_else(|e| panic!("{}: {e}", s.name));
        }
    }
    let has = |f: &dyn Fn(&Scenario) -> bool| loaded.iter().any(f);
    assert!(
        has(&|s| s.turns.is_empty() && s.personas.is_empty()),
        "a bare recording"
    );
    assert!(has(&|s| !s.turns.is_empty()), "scripted turns");
    assert!(has(&|s| s.greeting.is_some()), "a greeting");
    assert!(has(&|s| s
        .turns
        .iter()
        .any(|t| t.tool_call.is_some() && t.after_tool.is_some())));
    assert!(has(
        &|s| s.turns.iter().any(|t| t.handoff.is_some()) && s.agents.is_some()
    ));
    assert!(has(
        &|s| s.faults.go_away_after.is_some() && !s.faults.drops.is_empty()
    ));
    assert!(has(&|s| s.quirks.partial_content_wedges_vad));
    assert!(has(&|s| s.timing.first_audio.as_millis() == 600));
}
