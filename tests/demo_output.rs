//! What `baton demo` tells its user: a scenario of several calls (seed 001) printed and summed up
//! call by call, a figure that was not measured said to be so in `summary.json`, and the two
//! mistakes a new user makes first (a scenario name that is not bundled, `--out` naming a file)
//! answered with what to do.

use std::path::{Path, PathBuf};

use baton::demo::{self, DemoArgs};
use serde_json::Value;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn args(scenario: &str, out: &Path) -> DemoArgs {
    DemoArgs {
        scenario: Some(scenario.to_owned()),
        out: out.to_path_buf(),
        api_key_env: "BATON_TEST_NO_KEY".into(),
        ..Default::default()
    }
}

fn summary_json(dir: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(dir.join("summary.json")).unwrap()).unwrap()
}

/// Where `needle` is in `text`, at or after `from`; fails naming it.
fn at(text: &str, from: usize, needle: &str) -> usize {
    from + text[from..]
        .find(needle)
        .unwrap_or_else(|| panic!("no {needle:?} after byte {from} in:\n{text}"))
}

#[test]
fn every_call_of_seed001_is_printed_and_summed_up() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = root().join("audio-fixtures/scenarios/seed001.toml");
    let outcome = demo::run(&args(&scenario.display().to_string(), dir.path())).unwrap();
    assert_eq!(outcome.calls.len(), 2, "seed001 is two calls");
    let (c1, c2) = (&outcome.calls[0].report, &outcome.calls[1].report);

    // Printed: each call under its heading with its turns, its handoffs and its recording, then
    // the figures of both together.
    let text = demo::render(&outcome);
    let one = at(&text, 0, "── call 1 of 2 (");
    at(&text, one, "\"Hi. I'd like a quote for a Toyota Camry.\"");
    let table1 = at(&text, one, "\nhandoff ");
    at(&text, table1, "Gina → Victor");
    let wav1 = dir.path().join("call.wav");
    let rec1 = at(&text, table1, &format!("recording: {}", wav1.display()));
    let two = at(&text, rec1, "── call 2 of 2 (");
    at(&text, two, "seed001-call2");
    at(&text, two, "\"Hi, it's me again about my car quote.\"");
    let table2 = at(&text, two, "\nhandoff ");
    at(&text, table2, "Gina → Victor");
    at(&text, table2, "Victor → Gina");
    let wav2 = dir.path().join("call2.wav");
    let rec2 = at(&text, table2, &format!("recording: {}", wav2.display()));
    let all = at(
        &text,
        rec2,
        "── all 2 calls together: 5 turns, 3 handoffs, 0 underruns",
    );
    let samples = c1.first_audio_ms.len() + c2.first_audio_ms.len();
    let row = at(&text, all, "first_audio_ms ");
    let row = &text[row..row + text[row..].find('\n').unwrap()];
    assert!(row.ends_with(&format!(" {samples}")), "{row}");
    assert!(wav1.exists() && wav2.exists());

    // summary.json: the top level covers both calls, each handoff naming its call; call_list has
    // each call's own.
    let s = summary_json(dir.path());
    assert_eq!(s["calls"], 2);
    assert_eq!(s["turns"], c1.turns.len() + c2.turns.len(), "{s:#}");
    let calls_of: Vec<u64> = s["handoffs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["call"].as_u64().unwrap())
        .collect();
    assert_eq!(calls_of, [1, 2, 2], "{s:#}");
    assert_eq!(s["handoffs"][2]["from"], "vehicle_offer");
    let max = |v: &[f64]| v.iter().copied().fold(f64::MIN, f64::max);
    let downlink_max = max(&c1.downlink_added_ms).max(max(&c2.downlink_added_ms));
    assert_eq!(s["downlink_added_ms"]["max"], downlink_max, "{s:#}");
    assert_eq!(s["recording"], wav1.display().to_string());
    let list = s["call_list"].as_array().unwrap();
    assert_eq!(list.len(), 2);
    for (i, (c, report)) in list.iter().zip([c1, c2]).enumerate() {
        assert_eq!(c["call"], i + 1);
        assert_eq!(c["call_id"], outcome.calls[i].id);
        assert_eq!(c["turns"], report.turns.len());
        assert_eq!(
            c["handoffs"].as_array().unwrap().len(),
            report.handoffs.len()
        );
        assert!(c["handoffs"][0].get("call").is_none(), "{c:#}");
        assert!(c["handoffs"][0]["asked"].is_string(), "{c:#}");
        assert!(c["first_audio_ms"]["p95"].is_number(), "{c:#}");
        assert!(c["uplink_added_ms"].is_null(), "{c:#}");
        assert_eq!(c["end_reason"], report.end_reason);
    }
    assert_eq!(list[0]["recording"], wav1.display().to_string());
    assert_eq!(list[1]["recording"], wav2.display().to_string());
    assert_eq!(list[1]["scenario"], "seed001-call2");
    assert!(
        list[1]["contexts"][0]
            .as_str()
            .is_some_and(|c| c.contains("resumed for vehicle_offer")),
        "{s:#}"
    );
}

#[test]
fn uplink_latency_is_null_when_not_measured_and_figures_when_it_is() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = dir.path().join("short.toml");
    let clip = root().join("audio-fixtures/clips/caller_01.wav");
    std::fs::write(
        &scenario,
        format!("name = \"short\"\ncaller = \"{}\"\n", clip.display()),
    )
    .unwrap();

    // Accelerated: nothing advances the virtual clock between a frame's arrival and its write.
    let out = dir.path().join("accelerated");
    let outcome = demo::run(&args(&scenario.display().to_string(), &out)).unwrap();
    let s = summary_json(&out);
    assert_eq!(s["mode"], "accelerated");
    assert!(s["uplink_added_ms"].is_null(), "{s:#}");
    assert!(
        s["uplink_note"]
            .as_str()
            .is_some_and(|n| n.contains("not measured") && n.contains("--realtime")),
        "{s:#}"
    );
    assert!(s["downlink_added_ms"]["p99"].is_number(), "{s:#}");
    assert!(s.get("call_list").is_none(), "one call: {s:#}");
    assert!(
        demo::render(&outcome).contains("uplink_added_ms      not measured on the virtual clock")
    );

    // Real time: measured, and no note.
    let out = dir.path().join("realtime");
    let mut a = args(&scenario.display().to_string(), &out);
    a.realtime = true;
    demo::run(&a).unwrap();
    let s = summary_json(&out);
    assert_eq!(s["mode"], "realtime");
    for k in ["p50", "p99", "max"] {
        assert!(s["uplink_added_ms"][k].is_number(), "{s:#}");
    }
    assert!(s.get("uplink_note").is_none(), "{s:#}");
}

#[test]
fn a_scenario_that_is_not_bundled_points_at_the_list() {
    let dir = tempfile::tempdir().unwrap();
    let err = demo::run(&args("nosuch", dir.path()))
        .err()
        .expect("no such scenario")
        .to_string();
    assert!(
        err.contains("no scenario named \"nosuch\"") && err.contains("baton demo --list"),
        "{err}"
    );
    assert!(!err.contains("No such file"), "{err}");

    let err = demo::run(&args("seed01", dir.path()))
        .err()
        .expect("no such scenario")
        .to_string();
    assert!(err.contains("did you mean `--scenario seed001`"), "{err}");

    let missing = dir.path().join("missing.toml");
    let err = demo::run(&args(&missing.display().to_string(), dir.path()))
        .err()
        .expect("no such file")
        .to_string();
    assert!(
        err.contains(&format!("scenario file {} not found", missing.display()))
            && err.contains("baton demo --list"),
        "{err}"
    );
    assert!(
        std::fs::read_dir(dir.path()).unwrap().next().is_none(),
        "nothing written"
    );
}

#[test]
fn out_must_be_a_directory() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("summary.txt");
    std::fs::write(&file, "mine").unwrap();
    let err = demo::run(&args("demo", &file))
        .err()
        .expect("--out is a file")
        .to_string();
    assert!(
        err.contains(&format!("--out {}", file.display()))
            && err.contains("--out must be a directory"),
        "{err}"
    );
    assert!(!err.contains("File exists"), "{err}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "mine");

    // Under a file, too: the file is named.
    let under = file.join("demo");
    let err = demo::run(&args("demo", &under))
        .err()
        .expect("--out is under a file")
        .to_string();
    assert!(
        err.contains(&format!("--out {}", under.display()))
            && err.contains(&format!("{} is a file", file.display()))
            && err.contains("--out must be a directory"),
        "{err}"
    );
}
