//! The official openai Python SDK and `baton mock-model --profile openai`:
//! - the SDK's realtime client holds a conversation with the mock (session update, audio turns,
//!   a function call, a client-side barge-in, the concurrency errors), validating every server
//!   event against its own types;
//! - every client event baton's OpenAI codec sends (recorded by the mock during a live session,
//!   plus one of each kind built directly, GA and beta) validates against the SDK's client event
//!   types, unknown fields refused.
//!
//! Needs python3 with the venv module and access to PyPI the first time
//! (`scripts/python-env.sh` makes `target/pyenv`); without them the test fails and says why.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;

use baton::mock::openai::OpenAiOptions;
use baton::mock::record::RecordSink;
use baton::mock::scenario::{Reply, ScriptedToolCall, Turn};
use baton::mock::{MockOptions, Scenario, bind, clip};
use baton::model::ModelEvent;
use baton::model::openai::codec;
use baton::model::openai::endpoint::Endpoint;
use baton::model::openai::session::{self, SessionConfig, SessionEvent, Transport, update_event};
use baton::model::openai::wire::{
    Api, AudioFormat, ClientEvent, FunctionTool, Item, ResponseParams, TurnDetection,
};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const KEY: &str = "sk-mock-sdk-test";

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
        "scripts/python-env.sh failed; the openai SDK test needs python3 with venv and pip \
         (and PyPI access the first time):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

fn start_mock(record: &Path) -> (Server, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_baton"))
        .args([
            "mock-model",
            "--profile",
            "openai",
            "--listen",
            "127.0.0.1:0",
        ])
        .arg("--scenario")
        .arg(Path::new(ROOT).join("tests/data/openai_sdk_scenario.toml"))
        .args(["--api-key-env", "BATON_TEST_OPENAI_MOCK_KEY"])
        .env("BATON_TEST_OPENAI_MOCK_KEY", KEY)
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

fn validate(python: &Path, file: &Path, beta: bool) -> String {
    let mut cmd = Command::new(python);
    cmd.arg(Path::new(ROOT).join("tests/python/validate_openai_client_events.py"));
    if beta {
        cmd.arg("--beta");
    }
    cmd.arg(file);
    let out = run_with_limit(cmd, Duration::from_secs(60));
    let shown = show("validator", &out);
    assert!(
        out.status.success(),
        "the SDK refused a client event:\n{shown}"
    );
    shown
}

#[test]
fn official_sdk_holds_a_conversation_with_the_mock() {
    let python = python();
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("sdk_events.jsonl");
    let (server, url) = start_mock(&record);
    assert!(url.starts_with("ws://127.0.0.1:"), "{url}");
    let mut client = Command::new(&python);
    client
        .arg(Path::new(ROOT).join("tests/python/openai_sdk_client.py"))
        .arg("--base-url")
        .arg(format!("{url}/v1"))
        .args(["--api-key", KEY])
        .env("NO_PROXY", "localhost,127.0.0.1")
        .env("no_proxy", "localhost,127.0.0.1");
    let out = run_with_limit(client, Duration::from_secs(120));
    let shown = show("openai SDK client", &out);
    println!("{shown}");
    assert!(out.status.success(), "{shown}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("all checks passed"),
        "{shown}"
    );
    drop(server);
    // What the SDK itself sent passes the validator (so the validator is no stricter than the SDK).
    let recorded = std::fs::read_to_string(&record).unwrap();
    for kind in [
        "session.update",
        "input_audio_buffer.append",
        "conversation.item.create",
        "response.create",
        "response.cancel",
        "conversation.item.truncate",
    ] {
        assert!(
            recorded.contains(&format!("\"{kind}\"")),
            "recording lacks {kind}"
        );
    }
    validate(&python, &record, false);
}

fn scenario() -> Scenario {
    let mut sc = Scenario::builtin();
    sc.timing.first_audio = Duration::from_millis(50);
    let mut t = Turn::new(
        Some("What is my balance?".into()),
        Reply {
            audio: clip::synthetic_utterance().into(),
            text: "Your balance is five dollars.".into(),
        },
    );
    t.tool_call = Some(ScriptedToolCall {
        name: "get_balance".into(),
        args: json!({"account": "checking"}),
    });
    sc.turns.push(t);
    sc
}

/// A live session against the in-process mock, recording what baton sends: session.update,
/// audio appends, a function call output + response.create, a partial update, a system message,
/// a barge-in (cancel + truncate).
fn record_live_session(record: &Path) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let (sink, writer) = RecordSink::create(record).await.unwrap();
        let opts = MockOptions {
            record: Some(sink),
            openai: Some(OpenAiOptions::default()),
            ..MockOptions::new(Arc::new(scenario()))
        };
        let server = bind("127.0.0.1:0", Arc::new(opts), None)
            .await
            .unwrap()
            .spawn();
        let ep = Endpoint::new(
            &format!("{}/v1", server.base_url()),
            "gpt-realtime",
            Api::Ga,
            None,
        )
        .unwrap();
        let mut td = TurnDetection::server_vad(Some(400));
        td.interrupt_response = Some(false);
        let cfg = SessionConfig {
            instructions: Some("You are a friendly financial advisor.".into()),
            voice: Some("marin".into()),
            tools: vec![FunctionTool::new(
                "get_balance",
                Some("Look up the caller's balance.".into()),
                json!({"type": "object", "properties": {"account": {"type": "string"}}}),
            )],
            turn_detection: Some(td),
            ..Default::default()
        };
        let mut s = session::connect(&ep, Transport::Network, &cfg)
            .await
            .unwrap();
        let mut say = || {
            let mut audio = clip::synthetic_utterance();
            audio.extend(vec![0i16; 24_000]);
            for chunk in audio.chunks(480) {
                s.append_pcm16(chunk, None);
            }
        };
        say();
        let mut barged = false;
        loop {
            let ev = tokio::time::timeout(Duration::from_secs(10), s.recv())
                .await
                .expect("timed out")
                .expect("session ended");
            let SessionEvent::Model(e, _) = ev else {
                continue;
            };
            match e {
                ModelEvent::ToolCall(calls) => {
                    s.tool_response(&calls[0].id, &json!({"balance": 5}));
                }
                ModelEvent::Audio { .. } if !barged => {
                    barged = true;
                    assert_eq!(s.barge_in(20).await.len(), 2);
                }
                ModelEvent::TurnComplete if barged => break,
                ModelEvent::ProtocolError(m) => panic!("{m}"),
                _ => {}
            }
        }
        s.update(Some("You are the billing specialist."), Some(&[]));
        s.add_system_message("The caller is verified.");
        s.send(baton::model::session::Outbound::Close);
        // The mock answers the close once it has read (and recorded) everything sent before it.
        let closed = tokio::time::timeout(Duration::from_secs(10), async {
            while let Some(ev) = s.recv().await {
                if matches!(ev, SessionEvent::Closed { .. }) {
                    break;
                }
            }
        })
        .await;
        assert!(closed.is_ok(), "the mock never answered the close");
        drop(s);
        server.stop().await;
        // The recorder ends (flushed) once the stopped server has let go of its sink.
        let flushed = tokio::time::timeout(Duration::from_secs(10), writer).await;
        assert!(
            matches!(flushed, Ok(Ok(()))),
            "the recording was not finished"
        );
    });
}

/// One of every client event baton can build, in each dialect's session shape.
fn every_event(api: Api) -> Vec<ClientEvent> {
    let cfg = SessionConfig {
        instructions: Some("Be brief.".into()),
        voice: Some("marin".into()),
        input_format: AudioFormat::Pcmu,
        output_format: AudioFormat::Pcma,
        tools: vec![FunctionTool::new(
            "f",
            None,
            json!({"type": "object", "properties": {}}),
        )],
        ..Default::default()
    };
    let manual = SessionConfig {
        turn_detection: None,
        transcription: None,
        ..Default::default()
    };
    let mut out = vec![
        cfg.session_update(api),
        manual.session_update(api),
        update_event(api, Some("New instructions."), Some(&cfg.tools)),
        ClientEvent::InputAudioBufferCommit { event_id: None },
        ClientEvent::InputAudioBufferClear {
            event_id: Some("evt_1".into()),
        },
        ClientEvent::ConversationItemCreate {
            event_id: None,
            previous_item_id: Some("root".into()),
            item: Item::text("user", "Hello."),
        },
        ClientEvent::ResponseCreate {
            event_id: None,
            response: Some(ResponseParams {
                instructions: Some("Greet the caller.".into()),
                conversation: Some("none".into()),
                ..Default::default()
            }),
        },
    ];
    out.extend(codec::barge_in(
        Some("resp_1"),
        Some(&codec::AudioItem {
            item_id: "item_1".into(),
            samples: 24_000,
            rate: 24_000,
        }),
        500,
    ));
    out
}

#[test]
fn every_client_event_baton_sends_validates_against_the_sdk_types() {
    let python = python();
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("baton_events.jsonl");
    record_live_session(&record);
    let mut lines = std::fs::read_to_string(&record).unwrap();
    for kind in [
        "session.update",
        "input_audio_buffer.append",
        "conversation.item.create",
        "response.create",
        "response.cancel",
        "conversation.item.truncate",
    ] {
        assert!(
            lines.contains(&format!("\"{kind}\"")),
            "recording lacks {kind}"
        );
    }
    let mut append = String::new();
    codec::encode_append_bytes(&[0xff; 160], &mut append);
    lines.push_str(&append);
    lines.push('\n');
    for e in every_event(Api::Ga) {
        lines.push_str(&codec::encode(&e));
        lines.push('\n');
    }
    let ga = dir.path().join("ga.jsonl");
    std::fs::write(&ga, &lines).unwrap();
    println!("{}", validate(&python, &ga, false));

    let beta = dir.path().join("beta.jsonl");
    let beta_lines: String = every_event(Api::Beta)
        .iter()
        .map(|e| codec::encode(e) + "\n")
        .collect();
    std::fs::write(&beta, beta_lines).unwrap();
    println!("{}", validate(&python, &beta, true));
}
