//! The daemon's logs as an operator reads them: written to a file they carry no terminal escape
//! codes; the `call ended` line is readable fields (rounded milliseconds, no Rust debug output, no
//! field twice); `--log-format json` writes one JSON object per line with the same fields.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const BATON: &str = env!("CARGO_BIN_EXE_baton");

/// `baton serve` on a free loopback port with its stderr in `log`; returns it and its address
/// once it has said it listens.
fn serve(dir: &Path, log: &Path, json: bool) -> (Child, String) {
    let config = dir.join("baton.toml");
    std::fs::write(
        &config,
        format!(
            "[model]\nscenario = \"{ROOT}/audio-fixtures/scenarios/demo.toml\"\n[log]\nlevel = \"info\"\n"
        ),
    )
    .unwrap();
    let mut cmd = Command::new(BATON);
    cmd.args(["serve", "--listen", "127.0.0.1:0", "--config"])
        .arg(&config)
        .env_remove("BATON_LOG")
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(log).unwrap());
    if json {
        cmd.args(["--log-format", "json"]);
    }
    let mut child = cmd.spawn().unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line
        .split("http://")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .unwrap_or_else(|| panic!("no address in {line:?}"))
        .to_owned();
    (child, addr)
}

/// One short Twilio call (one caller turn), then SIGTERM; the daemon's log.
fn one_call(json: bool) -> String {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("serve.log");
    let (mut child, addr) = serve(dir.path(), &log, json);
    let dial = Command::new(BATON)
        .args([
            "dial",
            "twilio",
            &format!("ws://{addr}/twilio"),
            "--fixture",
        ])
        .arg(Path::new(ROOT).join("audio-fixtures/clips/caller_01.wav"))
        .arg("--out")
        .arg(dir.path().join("dial"))
        .output()
        .unwrap();
    assert!(
        dial.status.success(),
        "{}",
        String::from_utf8_lossy(&dial.stderr)
    );
    let term = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(term.success());
    assert!(child.wait().unwrap().success());
    std::fs::read_to_string(&log).unwrap()
}

#[test]
fn a_log_file_has_no_escape_codes_and_a_readable_call_ended_line() {
    let log = one_call(false);
    assert!(!log.contains('\x1b'), "escape codes in a log file:\n{log}");
    let ended = log
        .lines()
        .find(|l| l.contains("call ended"))
        .unwrap_or_else(|| panic!("no call ended line:\n{log}"));
    for debug in ["Summary {", "Some(", "None", "Cadence {", "[]"] {
        assert!(!ended.contains(debug), "{debug:?} in {ended}");
    }
    for field in [
        "end=caller hung up",
        "turns=1",
        "handoffs=0",
        "handoff_gaps_ms=none",
        "underruns=0",
        "first_audio_p50_ms=",
        "uplink_p99_ms=",
        "downlink_p50_ms=",
        "send_dev_p99_ms=",
    ] {
        assert!(ended.contains(field), "no {field} in {ended}");
    }
    // Milliseconds with at most two decimals.
    let p50 = ended
        .split("first_audio_p50_ms=")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .unwrap();
    assert!(p50.split('.').nth(1).is_none_or(|d| d.len() <= 2), "{p50}");
    // No field of the call's span twice.
    for line in log.lines().filter(|l| l.contains("call{")) {
        assert_eq!(line.matches(" leg=").count(), 1, "{line}");
    }
}

#[test]
fn json_logs_are_one_object_per_line_with_numeric_figures() {
    let log = one_call(true);
    assert!(!log.contains('\x1b'));
    let mut ended = None;
    for line in log.lines().filter(|l| !l.trim().is_empty()) {
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        if v["fields"]["message"] == "call ended" {
            ended = Some(v);
        }
    }
    let ended = ended.unwrap_or_else(|| panic!("no call ended object:\n{log}"));
    let f = &ended["fields"];
    assert_eq!(f["turns"], 1, "{ended}");
    assert!(f["first_audio_p50_ms"].is_f64(), "{ended}");
    assert!(f["uplink_p99_ms"].is_f64(), "{ended}");
    assert_eq!(ended["span"]["leg"], "twilio", "{ended}");
}

/// A BATON_LOG that is not a filter is said, with the level used instead, not silently ignored.
#[test]
fn a_baton_log_that_is_not_a_filter_is_said() {
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_baton"))
        .args(["demo", "--scenario", "demo", "--out"])
        .arg(dir.path())
        .env("BATON_LOG", "nonsense===")
        .output()
        .unwrap();
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("BATON_LOG is not a filter") && err.contains("logging at warn"),
        "{err}"
    );
}
