//! The official google-genai Python SDK as a client of `baton mock-model`: proves the mock speaks
//! the wire protocol the way the real service does (TLS, paths, casing, binary frames, turn
//! signals, tool calls), and that recorded client messages pass the SDK's strict validator.
//!
//! Needs python3 with the venv module and access to PyPI the first time
//! (`scripts/python-env.sh` makes `target/pyenv`); without them the test fails and says why.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// Kills the mock server when the test ends, however it ends.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn python() -> PathBuf {
    let out = Command::new("bash")
        .arg(Path::new(ROOT).join("scripts/python-env.sh"))
        .output()
        .expect("cannot run bash for scripts/python-env.sh");
    assert!(
        out.status.success(),
        "scripts/python-env.sh failed; the google-genai SDK test needs python3 with venv and pip \
         (and PyPI access the first time):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let path = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    assert!(
        Path::new(&path).exists(),
        "scripts/python-env.sh printed {path:?}, which does not exist"
    );
    PathBuf::from(path)
}

/// Starts the mock with TLS and returns it with its base URL.
fn start_mock(cert: &Path, record: &Path) -> (Server, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_baton"))
        .args(["mock-model", "--listen", "127.0.0.1:0", "--tls-self-signed"])
        .arg(cert)
        .arg("--scenario")
        .arg(Path::new(ROOT).join("tests/data/sdk_scenario.toml"))
        .arg("--record-messages")
        .arg(record)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("cannot start the baton binary");
    let stdout = child.stdout.take().expect("piped stdout");
    let mut line = String::new();
    let read = BufReader::new(stdout).read_line(&mut line);
    let mut server = Server(child);
    let url = line
        .trim()
        .strip_prefix("baton mock-model listening on ")
        .map(str::to_owned);
    let Some(url) = url.filter(|_| read.is_ok()) else {
        let _ = server.0.kill();
        let mut err = String::new();
        if let Some(mut e) = server.0.stderr.take() {
            let _ = e.read_to_string(&mut err);
        }
        panic!("baton mock-model did not announce its URL (stdout {line:?}):\n{err}");
    };
    (server, url)
}

/// Runs `cmd`, killing it after `limit`.
fn run_with_limit(mut cmd: Command, limit: Duration) -> Output {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("cannot start python");
    let deadline = Instant::now() + limit;
    while child.try_wait().expect("wait on python").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().expect("python output")
}

fn show(what: &str, out: &Output) -> String {
    format!(
        "{what}: {}\n--- stdout\n{}--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn official_sdk_talks_to_the_mock_and_its_messages_validate() {
    let python = python();
    let dir = tempfile::tempdir().unwrap();
    let cert = dir.path().join("cert.pem");
    let record = dir.path().join("client_messages.jsonl");
    let (server, url) = start_mock(&cert, &record);
    assert!(url.starts_with("wss://localhost:"), "{url}");

    let mut client = Command::new(&python);
    client
        .arg(Path::new(ROOT).join("tests/python/genai_sdk_client.py"))
        .arg("--base-url")
        .arg(url.replacen("wss://", "https://", 1))
        .arg("--clip")
        .arg(Path::new(ROOT).join("audio-fixtures/clips/caller_01.wav"))
        .args([
            "--expect-input-text",
            "Hi. I need some advice on my savings.",
        ])
        .args([
            "--expect-output-text",
            "Happy to help. Do you have an emergency fund?",
        ])
        .env("SSL_CERT_FILE", &cert)
        .env("NO_PROXY", "localhost,127.0.0.1")
        .env("no_proxy", "localhost,127.0.0.1");
    let out = run_with_limit(client, Duration::from_secs(120));
    let shown = show("google-genai SDK client", &out);
    println!("{shown}");
    assert!(out.status.success(), "{shown}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("all checks passed"),
        "{shown}"
    );
    drop(server);

    // What the SDK sent, as recorded, passes the SDK's own strict validator…
    let recorded = std::fs::read_to_string(&record).unwrap();
    for key in [
        "\"setup\"",
        "\"realtime_input\"",
        "\"client_content\"",
        "\"tool_response\"",
    ] {
        assert!(recorded.contains(key), "recording lacks {key}");
    }
    let mut validate = Command::new(&python);
    validate
        .arg(Path::new(ROOT).join("tests/python/validate_client_messages.py"))
        .arg(&record);
    let out = run_with_limit(validate, Duration::from_secs(60));
    let shown = show("validate_client_messages.py", &out);
    println!("{shown}");
    assert!(out.status.success(), "{shown}");

    // …and the validator refuses a message with a field the SDK does not have, naming the line.
    let bad = dir.path().join("bad.jsonl");
    let first = recorded.lines().next().unwrap_or_default();
    std::fs::write(
        &bad,
        format!("{first}\n{{\"realtimeInput\":{{\"text\":\"hi\",\"bogusField\":1}}}}\n"),
    )
    .unwrap();
    let mut validate = Command::new(&python);
    validate
        .arg(Path::new(ROOT).join("tests/python/validate_client_messages.py"))
        .arg(&bad);
    let out = run_with_limit(validate, Duration::from_secs(60));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "{}",
        show("validator on bad input", &out)
    );
    assert!(
        stderr.contains("bad.jsonl:2") && stderr.contains("bogusField"),
        "{stderr}"
    );
}
