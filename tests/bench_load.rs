//! `baton bench load` end to end at small sizes: a two-step sweep spawns the mock model, `baton
//! serve` and the load client as separate processes, and writes a report with every figure for
//! every step, and the plots.

use std::path::Path;
use std::process::Command;

/// Runs `baton bench load ARGS --report REPORT`, fails with its output unless it succeeds, and
/// returns its report.json, stdout and stderr.
fn bench_load(args: &[&str], report: &Path) -> (serde_json::Value, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_baton"))
        .args(["bench", "load"])
        .args(args)
        .arg("--report")
        .arg(report)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{stderr}\n{stdout}");
    let json = std::fs::read_to_string(report.join("report.json")).unwrap();
    (serde_json::from_str(&json).unwrap(), stdout, stderr)
}

/// Every figure a step must carry (none may be null when baton serve is spawned).
const STEP_FIELDS: &[&str] = &[
    "calls",
    "started",
    "failed",
    "failures",
    "ends",
    "window_s",
    "intervals",
    "jitter_ms.p50",
    "jitter_ms.p99",
    "jitter_ms.max",
    "call_p99_ms.max",
    "late_frames",
    "underruns",
    "late_ticks",
    "server_send_jitter_p99_le_ms",
    "media_received",
    "frames_sent",
    "baton.cpu_pct",
    "baton.cpu_ms_per_call_s",
    "baton.rss_idle_kib",
    "baton.rss_steady_kib",
    "baton.rss_peak_kib",
    "rss_per_call_kib",
    "baton.anon_idle_kib",
    "baton.anon_steady_kib",
    "baton.anon_after_kib",
    "baton.rss_warm_kib",
    "baton.anon_warm_kib",
    "rss_after_vs_warm_pct",
    "anon_per_call_kib",
    "mock_cpu_pct",
    "client_cpu_pct",
    "mock_cpu_ms_per_call_s",
    "client_cpu_ms_per_call_s",
    "busiest",
    "other_cpu_pct",
    "loadavg_before",
    "client_tick_late_ms.p99",
    "held",
    "failed_because",
];

#[test]
fn a_two_step_sweep_reports_every_figure() {
    let dir = tempfile::tempdir().unwrap();
    let args = ["--calls", "5,10", "--duration", "6", "--ramp", "0.5"];
    let (report, stdout, stderr) = bench_load(&args, dir.path());
    assert!(stdout.contains("Largest step with jitter p99"), "{stdout}");
    // Progress went to stderr as plain lines (not a terminal here).
    assert!(stderr.contains("bench load: step 2/2"), "{stderr}");

    let steps = report["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 2);
    for (step, calls) in steps.iter().zip([5u64, 10]) {
        for field in STEP_FIELDS {
            let v = field.split('.').fold(step, |v, k| &v[k]);
            assert!(
                !v.is_null(),
                "step {calls}: {field} is missing or null: {step:#}"
            );
        }
        assert_eq!(step["calls"], calls);
        assert_eq!(step["started"], calls, "{step:#}");
        assert_eq!(step["ends"]["hung_up"], calls, "{step:#}");
        assert!(
            step["intervals"].as_u64().unwrap() > 0,
            "no agent audio heard: {step:#}"
        );
        assert!(step["baton"]["rss_steady_kib"].as_u64().unwrap() > 1024);
        assert!(step["baton"]["cpu_pct"].as_f64().unwrap() > 0.0);
        // The rig's own CPU per call-second is worked out like baton's.
        for (pct, per_call) in [
            ("mock_cpu_pct", "mock_cpu_ms_per_call_s"),
            ("client_cpu_pct", "client_cpu_ms_per_call_s"),
        ] {
            let pct = step[pct].as_f64().unwrap();
            let per_call = step[per_call].as_f64().unwrap();
            // `pct` is rounded to 0.1 %, `per_call` to 0.001 ms.
            let expected = pct * 10.0 / calls as f64;
            assert!(
                (per_call - expected).abs() <= 0.5 / calls as f64 + 0.001,
                "{per_call} vs {expected}: {step:#}"
            );
        }
    }
    assert!(report["rss_slope_kib_per_call"].is_number(), "{report:#}");
    assert!(report.get("largest_held").is_some());
    assert!(report["machine"]["cores"].as_u64().unwrap() > 0);

    let md = std::fs::read_to_string(dir.path().join("report.md")).unwrap();
    assert!(md.contains("| 10 | 10 |"), "{md}");
    for stem in ["jitter", "cpu", "rss"] {
        let png = std::fs::read(dir.path().join(format!("{stem}.png"))).unwrap();
        assert_eq!(&png[1..4], b"PNG", "{stem}.png");
        let svg = std::fs::read_to_string(dir.path().join(format!("{stem}.svg"))).unwrap();
        assert!(
            svg.contains("<svg") && svg.contains("concurrent calls"),
            "{stem}.svg"
        );
    }
    // Every child process is gone: the last mock's port is closed and no process runs the
    // generated config.
    let cfg = std::fs::read_to_string(dir.path().join("serve.toml")).unwrap();
    let mock = cfg
        .split("url = \"ws://")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .unwrap();
    assert!(
        std::net::TcpStream::connect(mock).is_err(),
        "the mock at {mock} still runs"
    );
    let config = dir.path().join("serve.toml").display().to_string();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        if let Ok(cmd) = std::fs::read(entry.path().join("cmdline")) {
            let cmd = String::from_utf8_lossy(&cmd);
            assert!(!cmd.contains(&config), "still running: {cmd}");
        }
    }
}

/// With `--call-seconds` calls churn: each caller places calls one after another for the step,
/// the first shorter by a spread amount, and every call is counted.
#[test]
fn a_churning_step_places_a_new_call_as_each_one_ends() {
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "--calls",
        "4",
        "--duration",
        "8",
        "--call-seconds",
        "3",
        "--ramp",
        "0.5",
    ];
    let (report, _, _) = bench_load(&args, dir.path());
    assert_eq!(report["call_seconds"], 3.0, "{report:#}");
    let step = &report["steps"][0];
    // Lines of 8 s in calls of 3 s, the first 0.75, 1.5, 2.25 and 3 s long: 4 + 4 + 3 + 3.
    assert_eq!(step["calls"], 4, "{step:#}");
    assert_eq!(step["calls_placed"], 14, "{step:#}");
    assert_eq!(step["started"], 14, "{step:#}");
    assert_eq!(step["failed"], 0, "{step:#}");
    assert_eq!(step["ends"]["hung_up"], 14, "{step:#}");
    assert!(step["intervals"].as_u64().unwrap() > 0, "{step:#}");
    // CPU and memory are per call held at once, not per call placed.
    let cpu = step["baton"]["cpu_pct"].as_f64().unwrap();
    let per_call = step["baton"]["cpu_ms_per_call_s"].as_f64().unwrap();
    assert!((per_call - cpu * 10.0 / 4.0).abs() <= 0.2, "{step:#}");
    let md = std::fs::read_to_string(dir.path().join("report.md")).unwrap();
    assert!(
        md.contains("Calls churn: each caller places calls of 3 s"),
        "{md}"
    );
}

/// With `--agents`, `--scenario` and `--store`, the spawned daemon runs the agent set and keeps
/// every call of the step in the store (transcripts included) while the load runs.
#[test]
fn a_step_with_the_agent_set_and_a_store_keeps_every_call() {
    let dir = tempfile::tempdir().unwrap();
    let root = env!("CARGO_MANIFEST_DIR");
    let db = dir.path().join("load.db");
    let url = format!("sqlite://{}", db.display());
    let agents = format!("{root}/config/agents/financial.toml");
    let scenario = format!("{root}/audio-fixtures/scenarios/seed000.toml");
    let args = [
        "--calls",
        "4",
        "--duration",
        "8",
        "--ramp",
        "0.5",
        "--store",
        &url,
        "--agents",
        &agents,
        "--scenario",
        &scenario,
    ];
    let (report, _, _) = bench_load(&args, &dir.path().join("report"));
    assert!(
        report["target"]
            .as_str()
            .unwrap()
            .contains("store sqlite://"),
        "{report:#}"
    );
    assert_eq!(report["steps"][0]["started"], 4, "{report:#}");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (calls, lines) = rt.block_on(async {
        let store = baton::store::Store::open(&url).await.unwrap();
        let calls = store.calls(100).await.unwrap();
        let mut lines = 0;
        for c in &calls {
            lines += store.transcript(&c.id).await.unwrap().len();
        }
        (calls, lines)
    });
    // The step's four calls and the 2-second call that warmed the daemon up before it.
    assert_eq!(calls.len(), 5, "{calls:?}");
    assert!(calls.iter().all(|c| c.ended_at.is_some()), "{calls:?}");
    assert!(lines >= 4, "{lines} transcript lines for 4 calls");
}

/// On the OpenAI profile the spawned daemon speaks OpenAI Realtime to the mock's OpenAI profile,
/// with `resample_input` as asked (the format each session takes is `serve_twilio`'s test).
/// Every call is placed and answered either way.
#[test]
fn a_step_runs_on_the_openai_profile_either_way() {
    let dir = tempfile::tempdir().unwrap();
    for resample in [false, true] {
        let mut args = vec!["--calls", "4", "--duration", "5", "--ramp", "0.5"];
        args.extend(["--profile", "openai"]);
        if resample {
            args.push("--resample-input");
        }
        let report_dir = dir.path().join(format!("report-{resample}"));
        let (report, _, _) = bench_load(&args, &report_dir);
        let target = report["target"].as_str().unwrap();
        assert!(target.contains("mock profile openai"), "{report:#}");
        assert_eq!(target.contains("resample_input"), resample, "{target}");
        let step = &report["steps"][0];
        assert_eq!(step["started"], 4, "{report:#}");
        assert_eq!(step["failed"], 0, "{report:#}");
        assert!(
            step["media_received"].as_u64().unwrap_or(0) > 0,
            "the callers heard nothing: {report:#}"
        );
        let serve = std::fs::read_to_string(report_dir.join("serve.toml")).unwrap();
        assert!(serve.contains("profile = \"openai\""), "{serve}");
        assert_eq!(serve.contains("resample_input = true"), resample, "{serve}");
        let mock = std::fs::read_to_string(report_dir.join("logs/mock-4.log")).unwrap_or_default();
        assert!(!mock.contains("ERROR"), "{mock}");
    }
}

/// Mistakes the spawned processes would only have found later (in their logs) are refused at
/// once, with what to do, and nothing is started; a target nobody answers at is an error, not a
/// step that "did not hold".
#[test]
fn bad_requests_are_refused_at_once_and_an_unreachable_target_fails() {
    let dir = tempfile::tempdir().unwrap();
    let refused = |args: &[&str]| -> String {
        let out = Command::new(env!("CARGO_BIN_EXE_baton"))
            .args(["bench", "load", "--calls", "2", "--duration", "2"])
            .args(args)
            .arg("--report")
            .arg(dir.path().join("r"))
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(!out.status.success(), "{args:?} was run: {stderr}");
        stderr
    };
    let e = refused(&["--profile", "openai", "--target-pid", "1"]);
    assert!(e.contains("--target-pid goes with --target"), "{e}");
    let e = refused(&["--target", "http://127.0.0.1:9/twilio"]);
    assert!(e.contains("use ws://127.0.0.1:9/twilio"), "{e}");
    let missing = dir.path().join("missing.wav");
    let e = refused(&["--fixture", missing.to_str().unwrap()]);
    assert!(e.contains("--fixture") && e.contains("missing.wav"), "{e}");
    let e = refused(&["--store", "mysql://x"]);
    assert!(e.contains("--store") && e.contains("sqlite://"), "{e}");
    let e = refused(&["--profile", "gpt9"]);
    assert!(e.contains("or openai"), "{e}");
    assert!(!dir.path().join("r").exists(), "nothing started, no report");
    // Nobody listens on the discard port: the step cannot place a call.
    let e = refused(&["--target", "ws://127.0.0.1:9/twilio", "--ramp", "0"]);
    assert!(
        e.contains("no call of the step reached ws://127.0.0.1:9/twilio"),
        "{e}"
    );
}
