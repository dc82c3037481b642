//! `baton dial` as a person runs it against `baton serve`: a line per caller turn while the call
//! runs, the caller-side first-audio figures in the report, the server's reason for refusing the
//! upgrade, a hint for a URL that is not a WebSocket, and every error said once.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const BATON: &str = env!("CARGO_BIN_EXE_baton");

/// `baton serve` on a free loopback port with the demo scenario and `extra` config; returns it
/// and its address once it has said it listens.
fn serve(dir: &Path, extra: &str, env: &[(&str, &str)]) -> (Child, String) {
    let config = dir.join("baton.toml");
    std::fs::write(
        &config,
        format!("[model]\nscenario = \"{ROOT}/audio-fixtures/scenarios/demo.toml\"\n{extra}"),
    )
    .unwrap();
    let mut child = Command::new(BATON)
        .args(["serve", "--listen", "127.0.0.1:0", "--config"])
        .arg(&config)
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
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

/// Two caller turns: a second of 300 Hz tone then 1.5 s of silence, twice, at 8 kHz.
fn two_turns(path: &Path) {
    let spec = hound::WavSpec {
        channels: 1,
        sample_rate: 8000,
        bits_per_sample: 16,
        sample_format: hound::SampleFormat::Int,
    };
    let mut w = hound::WavWriter::create(path, spec).unwrap();
    for _ in 0..2 {
        for i in 0..8000 {
            let t = f64::from(i) / 8000.0;
            w.write_sample((8000.0 * (2.0 * std::f64::consts::PI * 300.0 * t).sin()) as i16)
                .unwrap();
        }
        for _ in 0..12_000 {
            w.write_sample(0i16).unwrap();
        }
    }
    w.finalize().unwrap();
}

fn dial(args: &[&str], fixture: &Path, out: &Path) -> Output {
    Command::new(BATON)
        .arg("dial")
        .args(args)
        .arg("--fixture")
        .arg(fixture)
        .arg("--out")
        .arg(out)
        .output()
        .unwrap()
}

fn stop(mut child: Child) {
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let _ = child.wait();
}

#[test]
fn dial_reports_each_turn_as_it_happens_and_the_caller_side_first_audio() {
    let dir = tempfile::tempdir().unwrap();
    let wav = dir.path().join("two-turns.wav");
    two_turns(&wav);
    let (child, addr) = serve(dir.path(), "", &[]);
    let out = dial(
        &["twilio", &format!("ws://{addr}/twilio")],
        &wav,
        &dir.path().join("dial"),
    );
    stop(child);
    let err = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{err}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(
        lines.first(),
        Some(&"dial: connected; the caller says 2 turns over 5.0 s"),
        "{err}"
    );
    // In order: turn 1 ends, its answer is heard, turn 2 ends, its answer is heard.
    let at = |needle: &str| {
        lines
            .iter()
            .position(|l| l.starts_with(needle))
            .unwrap_or_else(|| panic!("no {needle:?} in\n{err}"))
    };
    let ended1 = at("dial: turn 1/2: the caller stopped speaking at 1.0 s");
    let heard1 = at("dial: turn 1/2: agent heard ");
    let ended2 = at("dial: turn 2/2: the caller stopped speaking at 3.5 s");
    let heard2 = at("dial: turn 2/2: agent heard ");
    assert!(
        ended1 < heard1 && heard1 < ended2 && ended2 < heard2,
        "{err}"
    );

    let report: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("dial/report.json")).unwrap(),
    )
    .unwrap();
    let turns = report["turns"].as_array().unwrap();
    assert_eq!(turns.len(), 2, "{report:#}");
    assert_eq!(turns[0]["caller_stopped_ms"], 1000);
    assert_eq!(turns[1]["caller_stopped_ms"], 3500);
    for t in turns {
        // The server's voice-activity window (500 ms) is part of what the caller waits.
        let ms = t["first_audio_ms"].as_u64().unwrap();
        assert!(ms >= 500, "{t}");
    }
    assert_eq!(report["first_audio_ms"]["answered"], 2);
    assert!(
        stdout.contains("caller-side first audio (caller stops → agent heard): p50 "),
        "{stdout}"
    );
}

#[test]
fn a_refusal_says_the_servers_reason_and_url_mistakes_get_a_hint_each_error_said_once() {
    let dir = tempfile::tempdir().unwrap();
    let wav = Path::new(ROOT).join("audio-fixtures/clips/caller_01.wav");
    let (child, addr) = serve(
        dir.path(),
        "[twilio]\nauth_token_env = \"DIAL_TEST_TWILIO_TOKEN\"\n",
        &[("DIAL_TEST_TWILIO_TOKEN", "s3cret-token")],
    );
    // Unsigned: refused, with the reason the server gave.
    let out = dial(
        &["twilio", &format!("ws://{addr}/twilio")],
        &wav,
        &dir.path().join("a"),
    );
    stop(child);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("refused the WebSocket upgrade with HTTP 403: invalid X-Twilio-Signature"),
        "{err}"
    );
    assert_eq!(err.matches("HTTP 403").count(), 1, "{err}");
    assert!(!err.contains("s3cret"), "{err}");

    // http:// and https:// name the WebSocket URL to use instead.
    for (url, hint) in [
        ("http://127.0.0.1:9/twilio", "use ws://127.0.0.1:9/twilio"),
        (
            "https://example.invalid/twilio",
            "use wss://example.invalid/twilio",
        ),
    ] {
        let out = dial(&["twilio", url], &wav, &dir.path().join("b"));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success());
        assert!(err.contains(hint), "{err}");
    }

    // A corrupt WAV: one message, naming the file.
    let bad = dir.path().join("corrupt.wav");
    std::fs::write(&bad, b"RIFF\x10\0\0\0WAVEjunk").unwrap();
    let out = dial(
        &["twilio", "ws://127.0.0.1:9/twilio"],
        &bad,
        &dir.path().join("c"),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("corrupt.wav: not a readable WAV file"),
        "{err}"
    );
    let reason = err.rsplit(": ").next().unwrap().trim();
    assert_eq!(err.matches(reason).count(), 1, "{err}");
}

/// A call the server ends with a refusal (here `start` from another Twilio account) prints its
/// report and fails the command; options the server would refuse are refused before dialling.
#[test]
fn a_call_the_server_refuses_fails_the_command_and_bad_options_are_refused_first() {
    let dir = tempfile::tempdir().unwrap();
    let wav = Path::new(ROOT).join("audio-fixtures/clips/caller_01.wav");
    let (child, addr) = serve(
        dir.path(),
        "[twilio]\naccount_sid = \"AC11111111111111111111111111111111\"\n",
        &[],
    );
    let out = dial(
        &["twilio", &format!("ws://{addr}/twilio")],
        &wav,
        &dir.path().join("a"),
    );
    stop(child);
    let (so, err) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(!out.status.success(), "{so}\n{err}");
    assert!(so.contains("code 1008"), "the report is printed: {so}");
    assert!(
        err.contains("the call did not run to its end") && err.contains("not the expected account"),
        "{err}"
    );
    let report = std::fs::read_to_string(dir.path().join("a/report.json")).unwrap();
    assert!(report.contains("\"failure\""), "{report}");

    for (args, says) in [
        (
            &["--rate", "44100"][..],
            "--rate 44100: an AudioSocket call runs at",
        ),
        (
            &["--dtmf", "X@1"][..],
            "--dtmf \"X@1\" is not DIGIT@SECONDS",
        ),
    ] {
        let mut all = vec!["audiosocket", "127.0.0.1:9"];
        all.extend_from_slice(args);
        let out = dial(&all, &wav, &dir.path().join("b"));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success());
        assert!(err.contains(says), "{err}");
    }

    // An --out that cannot be written is refused before dialling (nothing listens at port 9:
    // the refusal is about the folder, not the call).
    let file = dir.path().join("a-file");
    std::fs::write(&file, "").unwrap();
    for kind in [
        &["twilio", "ws://127.0.0.1:9/twilio"][..],
        &["audiosocket", "127.0.0.1:9"],
    ] {
        let out = dial(kind, &wav, &file.join("out"));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{err}");
        assert!(
            err.contains("a-file/out") && !err.contains("connect"),
            "{kind:?}: {err}"
        );
    }

    // An AudioSocket call whose connection is lost (here: an HTTP server answering it) prints
    // its report and fails the command, like the other dialects.
    let http = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let at = http.local_addr().unwrap();
    let answer = std::thread::spawn(move || {
        use std::io::{Read, Write};
        let (mut s, _) = http.accept().unwrap();
        let mut buf = [0u8; 64];
        let _ = s.read(&mut buf);
        let _ = s.write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n");
    });
    let out = dial(
        &["audiosocket", &at.to_string()],
        &wav,
        &dir.path().join("c"),
    );
    answer.join().unwrap();
    let (so, err) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(!out.status.success(), "{so}\n{err}");
    assert!(err.contains("the call did not run to its end"), "{err}");
    let report = std::fs::read_to_string(dir.path().join("c/report.json")).unwrap();
    assert!(report.contains("\"failure\""), "{report}");
}
