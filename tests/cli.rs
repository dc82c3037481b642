//! The command line as a user meets it: help that teaches by example, and check-config errors
//! that name the file, the key and the fix.

use std::process::Command;

fn baton(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_baton"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn every_subcommand_has_help_with_an_example() {
    let (ok, top, _) = baton(&["--help"]);
    assert!(ok);
    for sub in [
        "demo",
        "mock-model",
        "serve",
        "check-config",
        "dial",
        "call",
        "talk",
    ] {
        assert!(top.contains(sub), "top-level help lacks {sub}");
    }
    for sub in [
        &["demo"][..],
        &["mock-model"],
        &["serve"],
        &["check-config"],
        &["dial", "twilio"],
        &["dial", "audiosocket"],
        &["call"],
        &["talk"],
    ] {
        let mut args = sub.to_vec();
        args.push("--help");
        let (ok, help, _) = baton(&args);
        assert!(ok, "{sub:?} --help failed");
        assert!(
            help.contains("Example"),
            "{sub:?} help has no example:\n{help}"
        );
        assert!(
            help.contains("baton "),
            "{sub:?} help example does not show a command:\n{help}"
        );
    }
}

#[test]
fn check_config_names_file_key_and_fix() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.toml");
    std::fs::write(
        &bad,
        "[server]\nlisten = \"everywhere\"\n[model]\nbackend = \"vertex\"\n",
    )
    .unwrap();
    let (ok, _, err) = baton(&["check-config", bad.to_str().unwrap()]);
    assert!(!ok);
    assert!(err.contains("bad.toml"), "{err}");
    for key in ["server.listen", "model.credential_env", "model.url"] {
        assert!(err.contains(key), "no {key} in:\n{err}");
    }
    assert!(err.matches("fix:").count() >= 3, "{err}");

    let (ok, out, err) = baton(&[
        "check-config",
        concat!(env!("CARGO_MANIFEST_DIR"), "/config/baton.toml"),
    ]);
    // Another test may be holding a shipped port (HTTP 8080, SIP 5060) at the same moment.
    let taken = err.matches("already in use").count();
    assert!(
        ok || (taken > 0 && err.contains(&format!("{taken} problem(s)"))),
        "{err}"
    );
    assert!(
        out.contains("checking is OFF"),
        "the shipped config must say signatures are off:\n{out}"
    );
    assert!(
        out.contains("SIP on udp:127.0.0.1:5060"),
        "the shipped config answers SIP:\n{out}"
    );
}

#[test]
fn check_config_checks_the_sip_section() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("sip.toml");
    std::fs::write(
        &bad,
        "[sip]\nlisten = [\"udp:0.0.0.0:5060\"]\n[sip.routes]\n\"100\" = \"agents/none.toml\"\n\
         [sip.trunks.carrier]\nuri = \"sip:sip.carrier.example\"\nusername = \"acct\"\n\
         password_env = \"hunter2 is the password\"\n",
    )
    .unwrap();
    let (ok, _, err) = baton(&["check-config", bad.to_str().unwrap()]);
    assert!(!ok);
    for key in [
        "sip.allow_from",
        "sip.routes.100",
        "sip.trunks.carrier.password_env",
    ] {
        assert!(err.contains(key), "no {key} in:\n{err}");
    }
    assert!(err.matches("fix:").count() >= 3, "{err}");
    assert!(
        !err.contains("hunter2"),
        "a password written in place of a variable's name is not repeated:\n{err}"
    );
}

#[test]
fn the_demo_is_the_seed000_story_with_its_handoffs_and_a_timeline_picture() {
    let dir = tempfile::tempdir().unwrap();
    let (ok, out, err) = baton(&["demo", "--out", dir.path().to_str().unwrap()]);
    assert!(ok, "{err}");
    assert!(
        out.contains("first_audio_ms") && out.contains("underruns"),
        "{out}"
    );
    // Each handoff is marked where the caller heard it, with its measured gap, between the
    // announcing agent's line and the new agent's.
    let asha = out.find("Asha: \"Let me bring in Ravi").expect(&out);
    let there = out.find("handoff Asha → Ravi at ").expect(&out);
    let ravi = out.find("Ravi: \"Hi, I'm Ravi").expect(&out);
    assert!(asha < there && there < ravi, "{out}");
    let back = out.find("handoff Ravi → Asha at ").expect(&out);
    assert!(
        out[there..].contains("gap 0 ms") && out[back..].contains("gap 0 ms"),
        "{out}"
    );
    assert!(out.contains("timeline picture: "), "{out}");
    for f in ["call.wav", "timeline.svg", "timeline.png", "summary.json"] {
        assert!(dir.path().join(f).exists(), "no {f}");
    }
    let svg = std::fs::read_to_string(dir.path().join("timeline.svg")).unwrap();
    assert!(
        svg.contains("Asha → Ravi") && svg.contains("Ravi → Asha"),
        "{svg}"
    );

    let (ok, json, _) = baton(&["demo", "--json", "--out", dir.path().to_str().unwrap()]);
    assert!(ok);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["turns"], 5);
    let handoffs = v["handoffs"].as_array().unwrap();
    assert_eq!(handoffs.len(), 2);
    assert_eq!(handoffs[0]["asked"], "auto");
    assert_eq!(handoffs[0]["strategy"], "context_update");
    assert!(
        handoffs[0]["why"].as_str().unwrap().contains("auto"),
        "{json}"
    );

    // The single-agent call stays available by name.
    let (ok, out, err) = baton(&[
        "demo",
        "--scenario",
        "demo",
        "--out",
        dir.path().to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    assert!(
        out.contains("single-agent") && !out.contains("handoff "),
        "{out}"
    );
}

#[test]
fn a_strategy_that_cannot_carry_a_handoff_says_what_carried_it_and_why() {
    let dir = tempfile::tempdir().unwrap();
    let (ok, out, err) = baton(&[
        "demo",
        "--scenario",
        "seed000",
        "--strategy",
        "inject_turn",
        "--out",
        dir.path().to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    assert!(out.contains("inject_turn → context_update"), "{out}");
    assert!(
        out.contains("why: inject_turn cannot carry this handoff (the tools change"),
        "{out}"
    );
}

/// A wrong `--strategy` or `--profile` is a usage error like clap's own (exit 2), naming the
/// choices, before anything runs.
#[test]
fn a_wrong_strategy_or_profile_is_a_usage_error_naming_the_choices() {
    for (flag, value, choices) in [
        (
            "--strategy",
            "bogus",
            "use auto, context_update, tool_response",
        ),
        (
            "--profile",
            "gemini-9",
            "gemini-3.8, gemini-2.5, gemini-3.1, or openai",
        ),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_baton"))
            .args(["demo", flag, value])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flag}: {err}");
        assert!(
            err.contains(&format!("invalid value '{value}' for '{flag}")),
            "{err}"
        );
        assert!(err.contains(choices), "{err}");
    }
}

/// `baton call` says what is wrong with its daemon's address: not a URL, nobody there (the
/// cause, at once), a ring out of range.
#[test]
fn call_says_what_is_wrong_with_the_daemons_address() {
    let (ok, _, err) = baton(&["call", "100", "--server", "127.0.0.1:9"]);
    assert!(
        !ok && err.contains("is not an http:// or https:// URL"),
        "{err}"
    );
    // A port nobody listens on: bound, noted, closed.
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let server = format!("http://{}", free.local_addr().unwrap());
    drop(free);
    let (ok, _, err) = baton(&["call", "100", "--server", &server]);
    assert!(!ok && err.contains("Connection refused"), "{err}");
    let out = Command::new(env!("CARGO_BIN_EXE_baton"))
        .args(["call", "100", "--ring-timeout-s", "18446744073709551615"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("is not in 1..=3600"), "{err}");
}

/// `baton call --json` gives a failure before any outcome as JSON on stdout too, for scripts.
#[test]
fn call_with_json_says_a_failure_as_json() {
    let (ok, out, err) = baton(&["call", "100", "--server", "http://127.0.0.1:9", "--json"]);
    assert!(!ok);
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap_or_else(|e| {
        panic!("not JSON ({e}): {out}");
    });
    let said = v["error"].as_str().unwrap_or_default();
    assert!(said.contains("did not answer"), "{v}");
    assert!(err.contains(said), "and on stderr: {err}");
}

/// `baton demo --scenario ARG` from `dir`.
fn demo_in(dir: &std::path::Path, scenario: &str) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_baton"))
        .args(["demo", "--json", "--scenario", scenario, "--out"])
        .arg(dir.join("out"))
        .current_dir(dir)
        .env_remove("BATON_LOG")
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_scenario_argument_is_the_file_it_names_else_a_bundled_name() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("notes.md"), "just notes, not a scenario\n").unwrap();
    // A file is read as that file however it is written.
    for arg in ["notes.md", "./notes.md"] {
        let (ok, _, err) = demo_in(d, arg);
        assert!(!ok);
        assert!(
            err.contains(&format!("{arg}: TOML parse error")) && !err.contains("no scenario named"),
            "{arg}: {err}"
        );
    }
    // A bundled name still plays the bundled scenario.
    let (ok, out, err) = demo_in(d, "demo");
    assert!(ok, "{err}");
    assert!(out.contains("\"turns\""), "{out}");
    // A file that has a bundled scenario's name is the file, and the user is told which.
    std::fs::write(d.join("demo"), "not a scenario either\n").unwrap();
    let (ok, _, err) = demo_in(d, "demo");
    assert!(!ok);
    assert!(
        err.contains("demo: TOML parse error")
            && err.contains("playing the file demo in this folder, not the bundled scenario demo")
            && err.contains("audio-fixtures/scenarios/demo.toml"),
        "{err}"
    );
    // Neither a file nor a bundled name: the bundled names, and that a path is taken too.
    for (arg, says) in [
        ("README.md", "no scenario named \"README.md\""),
        ("nosuch", "no scenario named \"nosuch\""),
        ("./nothere.toml", "scenario file ./nothere.toml not found"),
    ] {
        let (ok, _, err) = demo_in(d, arg);
        assert!(!ok);
        assert!(
            err.contains(says)
                && err.contains("bundled: demo, ")
                && err.contains("seed000")
                && err.contains("or the path of a scenario file"),
            "{arg}: {err}"
        );
    }
}
