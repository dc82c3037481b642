//! Call traces over OTLP/HTTP, received by a local collector on loopback: one trace per call,
//! a span per turn, handoff, tool call and reconnect, carrying the same figures as the call's
//! report; and `baton serve` exporting a finished call's trace when `[traces]` names the
//! collector.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use axum::routing::post;
use baton::call::CallReport;
use baton::demo::{self, DemoArgs};
use baton::traces::{self, Exporter, Ids, TracesConfig, attribute, spans_of};
use serde_json::Value;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

type Received = Arc<Mutex<Vec<Value>>>;

/// An OTLP/HTTP receiver: every JSON body POSTed to /v1/traces is kept.
async fn collector() -> (SocketAddr, Received) {
    collector_taking(Duration::ZERO).await
}

/// [`collector`], keeping a body only after `delay` (a request whose sender goes away before
/// then is dropped, as a real collector would never see it answered).
async fn collector_taking(delay: Duration) -> (SocketAddr, Received) {
    let got: Received = Arc::default();
    let keep = got.clone();
    let app = axum::Router::new().route(
        "/v1/traces",
        post(move |headers: http::HeaderMap, body: String| {
            let keep = keep.clone();
            async move {
                tokio::time::sleep(delay).await;
                assert_eq!(headers[http::header::CONTENT_TYPE], "application/json");
                let v: Value = serde_json::from_str(&body).expect("OTLP JSON");
                keep.lock().unwrap().push(v);
                "{}"
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (addr, got)
}

/// `baton serve` on `config` and a free port: the process and the address it printed.
async fn serve(config: &Path) -> (std::process::Child, String) {
    let mut serve = Command::new(env!("CARGO_BIN_EXE_baton"))
        .args(["serve", "--listen", "127.0.0.1:0", "--config"])
        .arg(config)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let out = serve.stdout.take().unwrap();
    let line = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        BufReader::new(out).read_line(&mut line).unwrap();
        line
    })
    .await
    .unwrap();
    let addr = line
        .split("http://")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .unwrap()
        .to_owned();
    (serve, addr)
}

/// One accelerated call of a bundled scenario (on its own paused-clock runtime).
fn report_of(scenario: &str) -> CallReport {
    let args = DemoArgs {
        scenario: Some(scenario.into()),
        ..DemoArgs::default()
    };
    std::thread::spawn(move || {
        let rt = demo::runtime(false).unwrap();
        rt.block_on(demo::run_call(&args, false)).unwrap().report
    })
    .join()
    .unwrap()
}

fn spans_named<'a>(spans: &[&'a Value], prefix: &str) -> Vec<&'a Value> {
    spans
        .iter()
        .copied()
        .filter(|s| s["name"].as_str().unwrap_or("").starts_with(prefix))
        .collect()
}

fn num(v: Option<&Value>) -> f64 {
    v.and_then(Value::as_f64).unwrap_or(f64::NAN)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collector_receives_one_trace_per_call_with_the_reports_figures() {
    let (addr, got) = collector().await;
    let exporter = Exporter::new(&TracesConfig {
        otlp_endpoint: format!("http://{addr}"),
        service_name: String::new(),
    })
    .unwrap()
    .unwrap();
    // seed000: turns, a handoff there and back with its tool calls; fault_goaway: reconnects.
    let handoffs = report_of("seed000");
    let reconnects = report_of("fault_goaway");
    assert!(!handoffs.handoffs.is_empty() && !reconnects.reconnects.is_empty());
    for (i, r) in [&handoffs, &reconnects].into_iter().enumerate() {
        let mut seed = [0u8; 24];
        seed[0] = i as u8 + 1;
        let body = traces::call_trace(
            r,
            &format!("call-{i}"),
            "baton",
            SystemTime::now(),
            &Ids::from_seed(seed),
        );
        exporter.send(&body).await.unwrap();
    }
    let got = got.lock().unwrap().clone();
    assert_eq!(got.len(), 2);

    // Call 1: one trace, every span under the root call span.
    let spans = spans_of(&got[0]);
    let root = spans[0];
    assert_eq!(root["name"], "call");
    let trace = root["traceId"].as_str().unwrap();
    for s in &spans {
        assert_eq!(s["traceId"], trace);
    }
    assert_eq!(
        got[0]["resourceSpans"][0]["resource"]["attributes"][0]["value"]["stringValue"],
        "baton"
    );
    assert_eq!(attribute(root, "baton.call.id").unwrap(), "call-0");
    // A span per turn, with its first-audio figure as the report has it.
    let turns = spans_named(&spans, "turn ");
    assert_eq!(turns.len(), handoffs.turns.len());
    for (span, turn) in turns.iter().zip(&handoffs.turns) {
        assert_eq!(span["parentSpanId"], root["spanId"]);
        if let Some(fa) = turn.first_audio_ms {
            let got = num(attribute(span, "baton.turn.first_audio_ms"));
            assert!((got - fa).abs() < 0.01, "{got} vs {fa}");
        }
    }
    // A span per handoff with its strategy and gap; there and back.
    let hs = spans_named(&spans, "handoff ");
    assert_eq!(hs.len(), handoffs.handoffs.len());
    assert_eq!(hs.len(), 2);
    assert_eq!(hs[0]["name"], "handoff advisor → schemes");
    assert_eq!(hs[1]["name"], "handoff schemes → advisor");
    for (span, h) in hs.iter().zip(&handoffs.handoffs) {
        assert_eq!(
            attribute(span, "baton.handoff.strategy").unwrap(),
            h.strategy.as_str()
        );
        let gap = num(attribute(span, "baton.handoff.gap_ms"));
        assert!((gap - h.gap_ms.unwrap()).abs() < 0.01);
    }
    // The model's transfer_to_* calls are tool-call spans.
    let tools = spans_named(&spans, "tool ");
    assert!(
        tools
            .iter()
            .any(|t| t["name"] == "tool transfer_to_schemes"),
        "{tools:#?}"
    );
    // The root carries the call's summary figures.
    let p50 = baton::call::metrics::summarize(&handoffs.first_audio_ms)
        .p50
        .unwrap();
    assert!((num(attribute(root, "baton.first_audio_ms.p50")) - p50).abs() < 0.01);

    // Call 2: its own trace, with a span per reconnect.
    let spans2 = spans_of(&got[1]);
    assert_ne!(spans2[0]["traceId"], trace);
    let rs = spans_named(&spans2, "reconnect ");
    assert_eq!(rs.len(), reconnects.reconnects.len());
    for (span, r) in rs.iter().zip(&reconnects.reconnects) {
        assert_eq!(
            attribute(span, "baton.reconnect.outcome").unwrap(),
            r.outcome.as_str()
        );
        assert_eq!(
            num(attribute(span, "baton.reconnect.audio_lost_ms")),
            r.audio_lost_ms
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_exports_a_finished_calls_trace_to_the_configured_collector() {
    let (addr, got) = collector().await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("baton.toml");
    std::fs::write(
        &config,
        format!(
            "[model]\nscenario = \"{ROOT}/audio-fixtures/scenarios/demo.toml\"\n\
             [traces]\notlp_endpoint = \"http://{addr}\"\n"
        ),
    )
    .unwrap();
    let (mut serve, baton_addr) = serve(&config).await;
    let dial = tokio::process::Command::new(env!("CARGO_BIN_EXE_baton"))
        .args([
            "dial",
            "twilio",
            &format!("ws://{baton_addr}/twilio"),
            "--fixture",
        ])
        .arg(Path::new(ROOT).join("audio-fixtures/clips/caller_01.wav"))
        .arg("--out")
        .arg(dir.path().join("dial"))
        .output()
        .await
        .unwrap();
    assert!(
        dial.status.success(),
        "{}",
        String::from_utf8_lossy(&dial.stderr)
    );
    // The export follows the call's end: wait for it (at most 10 s).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while got.lock().unwrap().is_empty() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let _ = Command::new("kill")
        .args(["-TERM", &serve.id().to_string()])
        .status();
    let _ = serve.wait();
    let got = got.lock().unwrap().clone();
    assert_eq!(got.len(), 1, "one call, one trace");
    let spans = spans_of(&got[0]);
    let root = spans[0];
    assert_eq!(root["name"], "call");
    assert!(
        !attribute(root, "baton.call.id")
            .unwrap()
            .as_str()
            .unwrap()
            .is_empty()
    );
    assert_eq!(attribute(root, "baton.call.turns").unwrap(), "1");
    let turn = spans_named(&spans, "turn ");
    assert_eq!(turn.len(), 1);
    assert!(num(attribute(turn[0], "baton.turn.first_audio_ms")) > 0.0);
    // The root span covers the call, and ended about now.
    let ns = |k: &str| root[k].as_str().unwrap().parse::<u128>().unwrap();
    assert!(ns("endTimeUnixNano") > ns("startTimeUnixNano"));
}

/// A call still running when `serve` is told to stop ends with the drain, and its trace reaches
/// the collector before the process exits (it used to be dropped with the shard that ran it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_the_drain_ends_is_exported_before_serve_exits() {
    // A collector that takes 300 ms to answer: serve must wait for it before it exits.
    let (addr, got) = collector_taking(Duration::from_millis(300)).await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("baton.toml");
    std::fs::write(
        &config,
        format!(
            "[server]\ndrain_timeout_s = 1\n\
             [model]\nscenario = \"{ROOT}/audio-fixtures/scenarios/demo.toml\"\n\
             [traces]\notlp_endpoint = \"http://{addr}\"\n"
        ),
    )
    .unwrap();
    let (mut serve, baton_addr) = serve(&config).await;
    // The bundled four-turn call: ~40 s, so it is still running when serve stops.
    let mut dial = tokio::process::Command::new(env!("CARGO_BIN_EXE_baton"))
        .args([
            "dial",
            "twilio",
            &format!("ws://{baton_addr}/twilio"),
            "--out",
        ])
        .arg(dir.path().join("dial"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let listed = async {
        loop {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let mut c = tokio::net::TcpStream::connect(&baton_addr).await.unwrap();
            c.write_all(b"GET /calls HTTP/1.0\r\nHost: baton\r\n\r\n")
                .await
                .unwrap();
            let mut body = String::new();
            c.read_to_string(&mut body).await.unwrap();
            if body.contains("\"id\"") {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(20), listed)
        .await
        .expect("the call is listed");
    let _ = Command::new("kill")
        .args(["-TERM", &serve.id().to_string()])
        .status();
    let status = tokio::task::spawn_blocking(move || serve.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success(), "serve drained and stopped: {status:?}");
    // Nothing more is waited for: the trace was sent before the process exited.
    let got = got.lock().unwrap().clone();
    assert_eq!(got.len(), 1, "the drained call's trace");
    let root = spans_of(&got[0])[0];
    assert_eq!(root["name"], "call");
    let _ = dial.kill().await;
}
