//! Credentials never leave baton: the model API key, the Twilio auth token, the API bearer
//! tokens and the token a `model.credential_command` prints are sentinels, and after a real call
//! through `baton serve`, a `baton demo` call, the `baton mock-model` that checked the key, a
//! `serve` that renewed the command's token and sent it with a call, and `check-config` running
//! that command (and one that fails after printing it), all at `BATON_LOG=trace`, no output of
//! any of them (stdout, stderr, the recording, the summary JSON) holds a sentinel in any of its
//! usual forms: raw, percent-encoded, hex, or base64 (standard and URL-safe, at every
//! alignment).

use crate::support;

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};

use baton::leg::twilio::caller::{self, CallerEnd};
use baton::leg::twilio::signature::AuthToken;
use support::{ROOT, speaking_caller};

const MODEL_KEY: &str = "BATON_TEST_SENTINEL_8f3a_model+K/ey=";
const TWILIO_TOKEN: &str = "BATON_TEST_SENTINEL_8f3a_twilio+T/ok";
const API_TOKEN: &str = "BATON_TEST_SENTINEL_8f3a_api-tokens_0123";
const COMMAND_TOKEN: &str = "BATON_TEST_SENTINEL_8f3a_command+T/ok=";

/// Every form a sentinel could leak in.
fn forms(secret: &str) -> Vec<String> {
    let mut v = vec![
        secret.to_owned(),
        "BATON_TEST_SENTINEL".to_owned(),
        secret
            .bytes()
            .map(|b| match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                    (b as char).to_string()
                }
                _ => format!("%{b:02X}"),
            })
            .collect(),
        secret.bytes().map(|b| format!("{b:02x}")).collect(),
    ];
    // A secret inside a larger base64 text starts at one of three alignments; drop the last
    // characters, which depend on what follows it.
    for skip in 0..3 {
        let tail = &secret.as_bytes()[skip..];
        for enc in [STANDARD.encode(tail), URL_SAFE_NO_PAD.encode(tail)] {
            v.push(enc[..enc.len() - 4].to_owned());
        }
    }
    v
}

/// A child whose stdout and stderr are collected in the background.
struct Proc {
    child: Child,
    out: Arc<Mutex<Vec<u8>>>,
    err: Arc<Mutex<Vec<u8>>>,
    first_line: std::sync::mpsc::Receiver<String>,
    /// The threads copying stdout and stderr: they end at the pipes' end of file.
    readers: [std::thread::JoinHandle<()>; 2],
}

fn spawn(args: &[&str], envs: &[(&str, &str)]) -> Proc {
    let mut child = Command::new(env!("CARGO_BIN_EXE_baton"))
        .args(args)
        .envs(envs.iter().copied())
        .env("BATON_LOG", "trace")
        .current_dir(ROOT)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out: Arc<Mutex<Vec<u8>>> = Arc::default();
    let err: Arc<Mutex<Vec<u8>>> = Arc::default();
    let (tx, first_line) = std::sync::mpsc::channel();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let o = Arc::clone(&out);
    let out_reader = std::thread::spawn(move || {
        let mut line = String::new();
        while stdout.read_line(&mut line).unwrap_or(0) > 0 {
            o.lock().unwrap().extend_from_slice(line.as_bytes());
            let _ = tx.send(line.clone());
            line.clear();
        }
    });
    let mut stderr = child.stderr.take().unwrap();
    let e = Arc::clone(&err);
    let err_reader = std::thread::spawn(move || {
        let mut buf = [0u8; 8192];
        while let Ok(n) = stderr.read(&mut buf) {
            if n == 0 {
                break;
            }
            e.lock().unwrap().extend_from_slice(&buf[..n]);
        }
    });
    Proc {
        child,
        out,
        err,
        first_line,
        readers: [out_reader, err_reader],
    }
}

impl Proc {
    /// The first stdout line containing `needle`.
    fn line_with(&self, needle: &str) -> String {
        loop {
            let line = self
                .first_line
                .recv_timeout(Duration::from_secs(60))
                .unwrap_or_else(|_| {
                    panic!(
                        "no {needle:?} on stdout; stderr:\n{}",
                        String::from_utf8_lossy(&self.err.lock().unwrap())
                    )
                });
            if line.contains(needle) {
                return line;
            }
        }
    }

    /// Waits (at most 60 s) for stderr to hold `needle`.
    fn wait_stderr(&self, needle: &str) {
        let start = std::time::Instant::now();
        loop {
            let err = String::from_utf8_lossy(&self.err.lock().unwrap()).into_owned();
            if err.contains(needle) {
                return;
            }
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "no {needle:?} on stderr:\n{err}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Sends `signal` (by our child's own pid), waits for the exit, returns (stdout, stderr).
    fn stop(mut self, signal: &str) -> (Vec<u8>, Vec<u8>) {
        let _ = Command::new("kill")
            .args([signal, &self.child.id().to_string()])
            .status();
        let start = std::time::Instant::now();
        while self.child.try_wait().unwrap().is_none() && start.elapsed() < Duration::from_secs(15)
        {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        // Everything the process wrote is read once both pipes reach their end (at most 15 s).
        let start = std::time::Instant::now();
        while !self.readers.iter().all(|r| r.is_finished())
            && start.elapsed() < Duration::from_secs(15)
        {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(
            self.readers.iter().all(|r| r.is_finished()),
            "the process's output never reached its end"
        );
        let out = self.out.lock().unwrap().clone();
        let err = self.err.lock().unwrap().clone();
        (out, err)
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[test]
fn no_credential_appears_in_any_output() {
    let dir = tempfile::tempdir().unwrap();
    let envs = [
        ("SENT_MODEL", MODEL_KEY),
        ("SENT_TWILIO", TWILIO_TOKEN),
        ("SENT_API", API_TOKEN),
        ("SENT_COMMAND", COMMAND_TOKEN),
    ];

    // The mock model, requiring the key.
    let mock = spawn(
        &[
            "mock-model",
            "--listen",
            "127.0.0.1:0",
            "--api-key-env",
            "SENT_MODEL",
        ],
        &envs,
    );
    let mock_url = mock
        .line_with("listening on")
        .rsplit(' ')
        .next()
        .unwrap()
        .trim()
        .to_owned();

    // The daemon: the key for the model, the Twilio token for signatures, API tokens.
    let port = free_port();
    let config = dir.path().join("baton.toml");
    std::fs::write(
        &config,
        format!(
            "[server]\nlisten = \"127.0.0.1:{port}\"\ndrain_timeout_s = 1\nauth_tokens_env = \"SENT_API\"\n\
             [model]\nbackend = \"gemini\"\nurl = \"{mock_url}\"\ncredential_env = \"SENT_MODEL\"\n\
             [twilio]\nauth_token_env = \"SENT_TWILIO\"\n[log]\nlevel = \"trace\"\n"
        ),
    )
    .unwrap();
    let serve = spawn(&["serve", "--config", config.to_str().unwrap()], &envs);
    serve.line_with("listening on");

    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let url = format!("ws://{addr}/twilio");
        let mut opts = speaking_caller("MZsentinel", Duration::from_secs(6));
        opts.auth_token = Some(AuthToken::new(TWILIO_TOKEN));
        let report = caller::dial(&url, opts).await.unwrap();
        assert_eq!(report.end, CallerEnd::HungUp, "{report:?}");
        assert!(report.media_received > 0, "the call reached the model");
        // A bearer token where the signature is required, and on the open health check.
        let r = support::http(
            &addr,
            &format!("GET /twiml HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {API_TOKEN}\r\nConnection: close\r\n\r\n"),
        )
        .await;
        assert!(r.starts_with("HTTP/1.1 403"), "{r}");
        let r = support::http(
            &addr,
            &format!("GET /healthz HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {API_TOKEN}\r\nConnection: close\r\n\r\n"),
        )
        .await;
        assert!(r.starts_with("HTTP/1.1 200"), "{r}");
    });
    let (serve_out, serve_err) = serve.stop("-TERM");

    // A daemon whose model token a command prints (from a variable, so the file never holds
    // it), renewed every second: it is renewed, and a call sends it (the mock refuses it).
    let port = free_port();
    let renewing = dir.path().join("renewing.toml");
    let print_token = "[\"sh\", \"-c\", \"printf '%s\\\\n' \\\"$SENT_COMMAND\\\"\"]";
    std::fs::write(
        &renewing,
        format!(
            "[server]\nlisten = \"127.0.0.1:{port}\"\ndrain_timeout_s = 1\n\
             [model]\nbackend = \"gemini\"\nurl = \"{mock_url}\"\n\
             credential_command = {print_token}\ncredential_refresh_s = 1\n[log]\nlevel = \"trace\"\n"
        ),
    )
    .unwrap();
    let renewing_serve = spawn(&["serve", "--config", renewing.to_str().unwrap()], &envs);
    renewing_serve.line_with("listening on");
    renewing_serve.wait_stderr("model credential renewed");
    rt.block_on(async {
        let url = format!("ws://127.0.0.1:{port}/twilio");
        // The call ends when its model session is refused; its end is not what is checked.
        let _ = caller::dial(&url, speaking_caller("MZrenewed", Duration::from_secs(2))).await;
    });
    let (renewing_out, renewing_err) = renewing_serve.stop("-TERM");

    // check-config runs the command: once as it is, once failing after printing the token.
    let check_config = |file: &Path| {
        Command::new(env!("CARGO_BIN_EXE_baton"))
            .args(["check-config"])
            .arg(file)
            .envs(envs)
            .env("BATON_LOG", "trace")
            .current_dir(ROOT)
            .output()
            .unwrap()
    };
    let checked = check_config(&renewing);
    assert!(
        checked.status.success(),
        "{}",
        String::from_utf8_lossy(&checked.stderr)
    );
    let failing = dir.path().join("failing.toml");
    std::fs::write(
        &failing,
        std::fs::read_to_string(&renewing).unwrap().replace(
            "\\\"$SENT_COMMAND\\\"",
            "\\\"$SENT_COMMAND\\\"; echo 'no active account' >&2; exit 3",
        ),
    )
    .unwrap();
    let failed = check_config(&failing);
    assert!(!failed.status.success());
    assert!(
        String::from_utf8_lossy(&failed.stderr).contains("model.credential_command: sh failed"),
        "{}",
        String::from_utf8_lossy(&failed.stderr)
    );

    // `baton demo` against the same model: a recording and a summary on disk.
    let scenario = dir.path().join("short.toml");
    let clip = Path::new(ROOT).join("audio-fixtures/clips/caller_01.wav");
    std::fs::write(
        &scenario,
        format!("name = \"short\"\ncaller = \"{}\"\n", clip.display()),
    )
    .unwrap();
    let out_dir = dir.path().join("out");
    let demo = Command::new(env!("CARGO_BIN_EXE_baton"))
        .args(["demo", "--json", "--scenario"])
        .arg(&scenario)
        .args([
            "--model-url",
            &mock_url,
            "--api-key-env",
            "SENT_MODEL",
            "--out",
        ])
        .arg(&out_dir)
        .envs(envs)
        .env("BATON_LOG", "trace")
        .current_dir(ROOT)
        .output()
        .unwrap();
    assert!(
        demo.status.success(),
        "{}",
        String::from_utf8_lossy(&demo.stderr)
    );
    let (mock_out, mock_err) = mock.stop("-INT");

    let mut outputs: Vec<(String, Vec<u8>)> = vec![
        ("serve stdout".into(), serve_out),
        ("serve stderr".into(), serve_err),
        ("mock-model stdout".into(), mock_out),
        ("mock-model stderr".into(), mock_err),
        ("demo stdout".into(), demo.stdout),
        ("demo stderr".into(), demo.stderr),
        ("renewing serve stdout".into(), renewing_out),
        ("renewing serve stderr".into(), renewing_err),
        ("check-config stdout".into(), checked.stdout),
        ("check-config stderr".into(), checked.stderr),
        ("failing check-config stdout".into(), failed.stdout),
        ("failing check-config stderr".into(), failed.stderr),
    ];
    for entry in std::fs::read_dir(&out_dir).unwrap() {
        let p = entry.unwrap().path();
        outputs.push((p.display().to_string(), std::fs::read(&p).unwrap()));
    }

    // The run was real: trace logging on, a call ended, a recording and a summary written.
    let text = |name: &str| {
        let (_, b) = outputs.iter().find(|(n, _)| n == name).unwrap();
        String::from_utf8_lossy(b).into_owned()
    };
    assert!(
        text("serve stderr").contains("TRACE"),
        "trace logging was on"
    );
    assert!(text("serve stderr").contains("call ended"));
    assert!(text("demo stdout").contains("\"turns\""));
    assert!(outputs.iter().any(|(n, _)| n.ends_with("call.wav")));
    assert!(outputs.iter().any(|(n, _)| n.ends_with("summary.json")));

    let mut leaks = Vec::new();
    assert!(text("renewing serve stderr").contains("TRACE"));
    for secret in [MODEL_KEY, TWILIO_TOKEN, API_TOKEN, COMMAND_TOKEN] {
        for form in forms(secret) {
            for (name, bytes) in &outputs {
                if bytes.windows(form.len()).any(|w| w == form.as_bytes()) {
                    leaks.push(format!("{name} holds {form:?}"));
                }
            }
        }
    }
    assert!(
        leaks.is_empty(),
        "credentials leaked:\n{}",
        leaks.join("\n")
    );
}
