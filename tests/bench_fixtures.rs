//! `baton bench fixtures` on a short accelerated run: every figure in report.json, the Markdown
//! linking its plots, and plots that are real images (PNG signature, SVG that parses as XML, a
//! timeline naming the agents and labelling the handoff gaps).

use std::path::{Path, PathBuf};

use baton::bench::fixtures::{self, FixturesArgs, FixturesError, ModelKind};
use serde_json::Value;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn scenario(name: &str) -> String {
    root()
        .join(format!("audio-fixtures/scenarios/{name}.toml"))
        .display()
        .to_string()
}

/// The texts of an SVG's `<text>` elements; panics unless the file is well-formed XML.
fn svg_texts(path: &Path) -> Vec<String> {
    let svg = std::fs::read_to_string(path).unwrap();
    let doc = roxmltree::Document::parse(&svg)
        .unwrap_or_else(|e| panic!("{} is not well-formed XML: {e}", path.display()));
    assert_eq!(doc.root_element().tag_name().name(), "svg");
    doc.descendants()
        .filter(|n| n.has_tag_name("text"))
        .map(|n| {
            n.descendants()
                .filter(|d| d.is_text())
                .filter_map(|d| d.text())
                .collect::<String>()
                .trim()
                .to_owned()
        })
        .collect()
}

fn stats_keys(v: &Value, name: &str) {
    for k in ["p50", "p95", "p99", "max", "samples"] {
        assert!(v.get(k).is_some(), "{name} has no {k}: {v}");
    }
}

#[test]
fn a_short_run_reports_every_figure_with_readable_plots() {
    let dir = tempfile::tempdir().unwrap();
    let args = FixturesArgs {
        scenario: Some(scenario("seed000")),
        strategy: Some("recreate,recreate_cold".into()),
        jobs: Some(2),
        report: dir.path().to_path_buf(),
        api_key_env: "BATON_TEST_NO_KEY".into(),
        ..Default::default()
    };
    fixtures::run(&args).unwrap();

    let json: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("report.json")).unwrap())
            .unwrap();
    let figures = &json["figures"];
    for name in [
        "first_audio_ms",
        "first_audio_overhead_ms",
        "uplink_added_ms",
        "downlink_added_ms",
        "handoff_gap_ms",
        "reconnect_gap_ms",
    ] {
        stats_keys(&figures[name], name);
    }
    assert_eq!(json["run"]["calls"], 2);
    assert_eq!(json["run"]["failed"], 0);
    // seed000: five caller turns per call, each answered.
    assert_eq!(figures["first_audio_ms"]["samples"], 10);
    // On the virtual clock baton's own uplink time is not measured, and the report says so.
    assert_eq!(figures["uplink_added_ms"]["samples"], 0);
    assert!(
        figures["uplink_note"]
            .as_str()
            .unwrap()
            .contains("--realtime")
    );
    assert!(figures["downlink_added_ms"]["samples"].as_u64().unwrap() > 100);
    // Accelerated, the overhead over the mock's 300 ms + 500 ms VAD window is tick alignment.
    let overhead = figures["first_audio_overhead_ms"]["max"].as_f64().unwrap();
    assert!((0.0..=40.0).contains(&overhead), "{overhead}");
    let row = &json["first_audio_overhead"][0];
    assert_eq!(row["configured_ms"], 800.0);
    assert!(figures["underruns"]["total"].is_u64());
    stats_keys(&figures["underruns"]["per_call"], "underruns per call");

    // handoff_gap_ms by strategy and profile: a warm standby is gapless, a cold one is not.
    let rows = json["handoffs_by_strategy_profile"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "{rows:#?}");
    for (row, strategy) in rows.iter().zip(["recreate", "recreate_cold"]) {
        assert_eq!(row["scenario"], "seed000");
        assert_eq!(row["profile"], "gemini-3.8");
        assert_eq!(row["strategy"], strategy);
        assert_eq!(row["used"], serde_json::json!([strategy]));
        assert_eq!(row["handoffs"], 2);
        stats_keys(&row["handoff_gap_ms"], "handoff_gap_ms");
    }
    assert_eq!(rows[0]["handoff_gap_ms"]["max"], 0.0);
    let cold = rows[1]["handoff_gap_ms"]["p50"].as_f64().unwrap();
    assert!(cold > 100.0, "recreate_cold gap {cold}");

    // Reconnects: none here, but every key is there.
    let rc = &json["reconnects"];
    assert_eq!(rc["count"], 0);
    assert_eq!(rc["reconnect_gap_ms"]["samples"], 0);
    assert_eq!(rc["audio_replayed_ms"], 0.0);
    assert_eq!(rc["audio_lost_ms"], 0.0);

    // Throughput: two ~45 s calls, far faster than real time on a virtual clock.
    let t = &json["throughput"];
    let media = t["media_s"].as_f64().unwrap();
    assert!((80.0..=120.0).contains(&media), "{media}");
    for k in [
        "x_realtime_per_wall_s",
        "x_realtime_per_wall_s_per_core",
        "x_realtime_per_call_wall_s",
    ] {
        assert!(t[k].as_f64().unwrap() > 1.0, "{k}: {t}");
    }
    if cfg!(target_os = "linux") {
        assert!(t["cpu_s"].as_f64().unwrap() > 0.0, "{t}");
        assert!(t["x_realtime_per_cpu_s"].as_f64().unwrap() > 1.0, "{t}");
    }
    assert!(json["machine"]["cores"].as_u64().unwrap() >= 1);
    assert!(json["command"].as_str().is_some_and(|c| !c.is_empty()));

    // Every plot: in the Markdown, a PNG and an SVG that are real images.
    let md = std::fs::read_to_string(dir.path().join("report.md")).unwrap();
    let plots = json["plots"].as_array().unwrap();
    let stems: Vec<&str> = plots
        .iter()
        .map(|p| p["png"].as_str().unwrap().trim_end_matches(".png"))
        .collect();
    assert!(!stems.contains(&"cdf-uplink_added_ms"), "{stems:?}");
    for stem in [
        "cdf-first_audio_ms",
        "cdf-downlink_added_ms",
        "cdf-handoff_gap_ms",
        "timeline-seed000",
    ] {
        assert!(stems.contains(&stem), "{stem} not in {stems:?}");
    }
    for p in plots {
        let (png, svg) = (p["png"].as_str().unwrap(), p["svg"].as_str().unwrap());
        assert!(
            md.contains(&format!("]({png})")),
            "report.md does not embed {png}"
        );
        assert!(
            md.contains(&format!("]({svg})")),
            "report.md does not link {svg}"
        );
        let bytes = std::fs::read(dir.path().join(png)).unwrap();
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "{png}");
        assert!(bytes.len() > 10_000, "{png}: {} bytes", bytes.len());
        assert!(std::fs::metadata(dir.path().join(svg)).unwrap().len() > 5_000);
        assert!(
            !svg_texts(&dir.path().join(svg)).is_empty(),
            "{svg} has no text"
        );
    }
    for table in [
        "| first_audio_ms (per turn) |",
        "| uplink_added_ms | not measured on the virtual clock",
        "| downlink_added_ms |",
        "| handoff_gap_ms |",
        "| reconnect_gap_ms |",
        "| seed000 | gemini-3.8 | recreate_cold | recreate_cold |",
        "x real time per CPU-second",
        "cores",
    ] {
        assert!(md.contains(table), "report.md lacks {table:?}");
    }

    // The timeline names the agents and labels the gaps it shows.
    let texts = svg_texts(&dir.path().join("timeline-seed000.svg"));
    for want in [
        "advisor (Asha)",
        "schemes (Ravi)",
        "gap 0 ms",
        "caller speech",
    ] {
        assert!(texts.iter().any(|t| t == want), "no {want:?} in {texts:?}");
    }
    let cold_label = format!("gap {cold:.0} ms");
    assert!(
        texts.contains(&cold_label),
        "no {cold_label:?} in {texts:?}"
    );
}

#[test]
fn bad_requests_are_refused_before_any_call() {
    let dir = tempfile::tempdir().unwrap();
    let base = FixturesArgs {
        scenario: Some(scenario("seed000")),
        report: dir.path().join("r"),
        api_key_env: "BATON_TEST_NO_KEY".into(),
        ..Default::default()
    };
    let err = |args: FixturesArgs| fixtures::run(&args).expect_err("refused").to_string();

    let e = err(FixturesArgs {
        strategy: Some("recreate,warp".into()),
        ..base.clone()
    });
    assert!(e.contains("warp"), "{e}");
    let e = err(FixturesArgs {
        profile: Some("gemini-9".into()),
        ..base.clone()
    });
    assert!(e.contains("gemini-9"), "{e}");
    let e = err(FixturesArgs {
        scenario: Some("no-such-scenario".into()),
        ..base.clone()
    });
    assert!(e.contains("no-such-scenario"), "{e}");
    let e = err(FixturesArgs {
        model_url: Some("ws://127.0.0.1:9".into()),
        profile: Some("gemini-3.1".into()),
        ..base.clone()
    });
    assert!(e.contains("--profile"), "{e}");
    // Every cell left out (gemini-3.1 cannot update a live session's instructions): nothing to
    // run is said so, with why, instead of an empty sweep.
    let e = err(FixturesArgs {
        profile: Some("gemini-3.1".into()),
        strategy: Some("context_update".into()),
        ..base.clone()
    });
    assert!(
        e.contains("nothing to run") && e.contains("context_update left out"),
        "{e}"
    );
    // The real service without its key: refused, nothing dialled.
    let gemini = fixtures::run(&FixturesArgs {
        model: ModelKind::Gemini,
        ..base.clone()
    });
    assert!(
        matches!(gemini, Err(FixturesError::MissingKey { ref var }) if var == "BATON_TEST_NO_KEY"),
        "{:?}",
        gemini.err()
    );
    assert!(
        !dir.path().join("r").exists(),
        "no report for a refused run"
    );
}

#[test]
fn the_shared_tools_scenario_exercises_all_five_strategies_and_measures_each_gap() {
    let dir = tempfile::tempdir().unwrap();
    let args = FixturesArgs {
        scenario: Some("shared_tools".into()),
        strategy: Some("all".into()),
        jobs: Some(2),
        report: dir.path().to_path_buf(),
        api_key_env: "BATON_TEST_NO_KEY".into(),
        ..Default::default()
    };
    fixtures::run(&args).unwrap();
    let json: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("report.json")).unwrap())
            .unwrap();
    let rows = json["handoffs_by_strategy_profile"].as_array().unwrap();
    let asked: Vec<&str> = rows
        .iter()
        .map(|r| r["strategy"].as_str().unwrap())
        .collect();
    assert_eq!(
        asked,
        [
            "auto",
            "context_update",
            "tool_response",
            "inject_turn",
            "recreate",
            "recreate_cold"
        ]
    );
    for row in &rows[1..] {
        // Each strategy asked for carried both handoffs, and both gaps were measured.
        assert_eq!(row["used"], serde_json::json!([row["strategy"]]), "{row}");
        assert_eq!(row["why"], serde_json::json!([]), "{row}");
        assert_eq!(row["handoffs"], 2, "{row}");
        assert_eq!(row["handoff_gap_ms"]["samples"], 2, "{row}");
    }
    // auto's choice is named with its reason.
    assert_eq!(rows[0]["used"], serde_json::json!(["context_update"]));
    assert!(
        rows[0]["why"][0]
            .as_str()
            .unwrap()
            .starts_with("auto chose")
    );
    // In-session and warm handoffs are gapless; the cold one is not.
    for row in &rows[..5] {
        assert_eq!(row["handoff_gap_ms"]["max"], 0.0, "{row}");
    }
    assert!(rows[5]["handoff_gap_ms"]["p50"].as_f64().unwrap() > 100.0);
    let md = std::fs::read_to_string(dir.path().join("report.md")).unwrap();
    assert!(
        md.contains("| shared_tools | gemini-3.8 | tool_response | tool_response |"),
        "{md}"
    );
    assert!(
        md.contains("| shared_tools | gemini-3.8 | inject_turn | inject_turn |"),
        "{md}"
    );
}

#[test]
fn progress_piped_is_a_line_per_call_and_expected_faults_are_results_not_warn_lines() {
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_baton"))
        .args([
            "bench",
            "fixtures",
            "--scenario",
            "fault_mid_utterance,demo",
            "--jobs",
            "1",
        ])
        .arg("--report")
        .arg(dir.path())
        .env_remove("BATON_LOG")
        .output()
        .unwrap();
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = err.lines().collect();
    // What the run is, one line per finished call with the time left, then the summary.
    assert!(lines[0].starts_with("bench fixtures: 2 calls, "), "{err}");
    assert!(lines[0].contains("of caller audio"), "{err}");
    assert!(lines[1].starts_with("bench fixtures: 1/2 calls"), "{err}");
    assert!(
        lines[1].contains("left: fault_mid_utterance: ok, "),
        "{err}"
    );
    assert!(lines[1].contains("about its scripted faults"), "{err}");
    assert!(lines[2].starts_with("bench fixtures: 2/2 calls"), "{err}");
    assert!(lines[2].ends_with("demo: ok"), "{err}");
    assert_eq!(lines.len(), 4, "{err}");
    // No WARN line on stderr; the warnings are in the report, marked as expected.
    assert!(!err.contains("WARN"), "{err}");
    let md = std::fs::read_to_string(dir.path().join("report.md")).unwrap();
    assert!(
        md.contains("**fault_mid_utterance** (scripted faults: expected)"),
        "{md}"
    );
}

/// Two caller turns (a second of 300 Hz tone, then 1.5 s of silence, twice) as a WAV at `rate`
/// with `channels` identical channels.
fn two_turns_wav(path: &Path, rate: u32, channels: u16) {
    let spec = hound::WavSpec {
        channels,
        sample_rate: rate,
        bits_per_sample: 16,
        sample_format: hound::SampleFormat::Int,
    };
    let mut w = hound::WavWriter::create(path, spec).unwrap();
    for _ in 0..2 {
        for i in 0..rate {
            let t = f64::from(i) / f64::from(rate);
            let v = (8000.0 * (2.0 * std::f64::consts::PI * 300.0 * t).sin()) as i16;
            for _ in 0..channels {
                w.write_sample(v).unwrap();
            }
        }
        for _ in 0..(rate * 3 / 2) * u32::from(channels) {
            w.write_sample(0i16).unwrap();
        }
    }
    w.finalize().unwrap();
}

#[test]
fn any_wav_is_benched_with_fixture_and_the_report_states_its_format() {
    let dir = tempfile::tempdir().unwrap();
    let formats = [("call-8k.wav", 8000, 1), ("call-16k.wav", 16_000, 1)];
    let mut paths = Vec::new();
    for (name, rate, channels) in formats.iter().chain(&[("call-44k-stereo.wav", 44_100, 2)]) {
        let p = dir.path().join(name);
        two_turns_wav(&p, *rate, *channels);
        paths.push(p);
    }
    let report = dir.path().join("report");
    fixtures::run(&FixturesArgs {
        fixture: paths.clone(),
        jobs: Some(2),
        report: report.clone(),
        ..Default::default()
    })
    .unwrap();
    let json: Value =
        serde_json::from_str(&std::fs::read_to_string(report.join("report.json")).unwrap())
            .unwrap();
    assert_eq!(json["run"]["calls"], 3, "only the fixtures run");
    let rows = json["scenarios"].as_array().unwrap();
    assert_eq!(rows.len(), 3, "{rows:#?}");
    for (row, (name, rate, channels)) in rows.iter().zip([
        ("call-8k.wav", 8000, 1),
        ("call-16k.wav", 16_000, 1),
        ("call-44k-stereo.wav", 44_100, 2),
    ]) {
        assert_eq!(row["scenario"], name);
        // Both caller turns were heard and answered, whatever the file's rate.
        assert_eq!(row["turns"], 2, "{row:#}");
        assert_eq!(row["first_audio_ms"]["samples"], 2, "{row:#}");
        let caller = &row["caller"];
        assert_eq!(caller["sample_rate_hz"], rate);
        assert_eq!(caller["channels"], channels);
        assert_eq!(caller["samples"], "16-bit integer");
        assert_eq!(caller["seconds"], 5.0);
    }
    let md = std::fs::read_to_string(report.join("report.md")).unwrap();
    assert!(
        md.contains("| call-44k-stereo.wav | 44100 Hz, 2 channels, 16-bit integer, 5.00 s |"),
        "{md}"
    );

    // A WAV given as a scenario is refused once, pointing at --fixture.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_baton"))
        .args(["bench", "fixtures", "--scenario"])
        .arg(&paths[0])
        .arg("--report")
        .arg(dir.path().join("refused"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("not a scenario file"), "{err}");
    assert!(err.contains("--fixture"), "{err}");
    assert_eq!(
        err.matches("call-8k.wav: a WAV recording").count(),
        1,
        "{err}"
    );
    assert!(!err.contains("UTF-8"), "{err}");
}

/// An accelerated call whose agent set opens sockets of its own (an HTTP sidecar) keeps the
/// runtime's I/O driver, which the sweep drops for calls that need none: the sidecar's POST
/// reaches a loopback server and the call ends well.
#[test]
fn an_agent_set_that_reaches_the_network_still_reaches_it_when_accelerated() {
    use std::io::{Read, Write};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    let server = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/research", server.local_addr().unwrap());
    let posts = Arc::new(AtomicUsize::new(0));
    let seen = posts.clone();
    std::thread::spawn(move || {
        for stream in server.incoming() {
            let Ok(mut s) = stream else { return };
            let _ = s.set_read_timeout(Some(std::time::Duration::from_secs(2)));
            let mut buf = [0u8; 8192];
            if matches!(s.read(&mut buf), Ok(n) if buf[..n].starts_with(b"POST /research")) {
                seen.fetch_add(1, Ordering::SeqCst);
            }
            let body = r#"{"text":"Series I bonds: up to 10,000 dollars a year."}"#;
            let _ = write!(
                s,
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    let set = std::fs::read_to_string(root().join("config/agents/sidecars.toml")).unwrap();
    let slow = "backend = \"static\"\nreply = { text = \"Series I bonds: up to 10,000 dollars a year per person.\" }\ndelay_ms = 8000";
    assert!(set.contains(slow), "the shipped set changed: {set}");
    let set = set.replace(slow, &format!("backend = \"http\"\nurl = \"{url}\""));
    let dir = tempfile::tempdir().unwrap();
    let agents = dir.path().join("sidecars_http.toml");
    std::fs::write(&agents, set).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_baton"))
        .args(["bench", "fixtures", "--scenario", "seed000", "--calls", "1"])
        .arg("--agents")
        .arg(&agents)
        .arg("--report")
        .arg(dir.path().join("report"))
        .env_remove("BATON_LOG")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let md = std::fs::read_to_string(dir.path().join("report/report.md")).unwrap();
    assert!(md.contains("0 failed"), "{md}");
    assert!(!md.contains("IO is disabled"), "{md}");
    assert!(posts.load(Ordering::SeqCst) >= 1, "{err}\n{md}");
}
