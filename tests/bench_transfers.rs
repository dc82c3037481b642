//! `baton bench transfers` end to end at a small size: five warm transfers against SIPp (the
//! callers and the person's phone), every one accounted for with one typed outcome, and a report
//! carrying every figure. Behaviour only: no timing is asserted.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

use crate::sip_support;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn field<'a>(v: &'a Value, path: &str) -> &'a Value {
    path.split('.').fold(v, |v, k| &v[k])
}

#[test]
fn five_warm_transfers_are_all_accounted_for() {
    if !sip_support::require("sipp", "sip-tester") {
        return;
    }
    let out = std::env::temp_dir().join(format!("baton-bench-transfers-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let run = Command::new(env!("CARGO_BIN_EXE_baton"))
        .current_dir(ROOT)
        .args([
            "bench",
            "transfers",
            "--transfers",
            "5",
            "--concurrency",
            "5",
        ])
        .args(["--stay-s", "8", "--out"])
        .arg(&out)
        .output()
        .expect("baton runs");
    let stdout = String::from_utf8_lossy(&run.stdout);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stdout.contains("5 of 5 transfers typed"), "{stdout}");

    let r: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap();
    assert_eq!(r["transfers"], 5);
    assert_eq!(r["calls_seen"], 5, "{r:#}");
    assert_eq!(r["requested"], 5, "{r:#}");
    assert_eq!(r["typed"], 5, "{r:#}");
    assert_eq!(r["all_accounted"], true, "{r:#}");
    // Every outcome has a kind, and the kinds add up to the transfers; on loopback the person
    // always answers and accepts.
    let kinds = r["outcomes"].as_object().unwrap();
    assert_eq!(kinds.values().map(|n| n.as_u64().unwrap()).sum::<u64>(), 5);
    assert_eq!(r["outcomes"]["connected"], 5, "{:#}", r["outcomes"]);
    for figure in ["setup_ms", "ring_ms", "total_ms", "dead_air_ms"] {
        for p in ["p50", "p95", "p99", "max"] {
            assert!(
                field(&r, &format!("{figure}.{p}")).is_number(),
                "{figure}.{p}: {:#}",
                r[figure]
            );
        }
        assert_eq!(r[figure]["samples"], 5, "{figure}: {:#}", r[figure]);
    }
    // The person's phone rang before answering, and the key was pressed after the answer.
    assert!(
        r["ring_ms"]["min"].as_f64().unwrap() >= 500.0,
        "{:#}",
        r["ring_ms"]
    );
    assert_eq!(r["dead_air_capped"], 0);
    // /metrics counted the same outcomes.
    assert_eq!(
        r["metrics"]["transfers_total"]["connected"], 5,
        "{:#}",
        r["metrics"]
    );
    assert_eq!(r["metrics"]["setup_ms_count"], 5);
    // SIPp's own view: every call followed its scenario.
    let sipp = r["sipp"].as_array().unwrap();
    assert_eq!(sipp.len(), 2);
    for s in sipp {
        assert_eq!(s["calls"], 5, "{s:#}");
        assert_eq!(s["failed"], 0, "{s:#}");
    }
    // Each call's own record.
    let calls = r["calls"].as_array().unwrap();
    assert_eq!(calls.len(), 5);
    for c in calls {
        let stages: Vec<&str> = c["stages"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(Value::as_str)
            .collect();
        for s in ["dialing", "ringing", "briefing", "bridged"] {
            assert!(stages.contains(&s), "{s} in {stages:?}");
        }
        assert_eq!(c["ended"], true, "{c:#}");
    }
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    for needle in [
        "# baton bench transfers",
        "transfer_setup_ms",
        "dead_air_ms",
        "| SIPp |",
    ] {
        assert!(md.contains(needle), "{needle} in report.md");
    }
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn without_sipp_it_names_the_package_to_install() {
    let empty = std::env::temp_dir().join(format!("baton-no-sipp-{}", std::process::id()));
    std::fs::create_dir_all(&empty).unwrap();
    let run = Command::new(env!("CARGO_BIN_EXE_baton"))
        .current_dir(Path::new(ROOT))
        .env("PATH", &empty)
        .args(["bench", "transfers", "--transfers", "1", "--out"])
        .arg(empty.join("out"))
        .output()
        .expect("baton runs");
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(!run.status.success());
    assert!(stderr.contains("sip-tester"), "{stderr}");
    let _ = std::fs::remove_dir_all(&empty);
}
