//! `GET /metrics` after one Twilio-protocol call through `baton serve`: the call's observations
//! are in the histograms and counters, in valid Prometheus text format, and a second daemon in
//! the same process keeps its own figures.

use crate::support;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use baton::leg::twilio::caller::{self, CallerEnd, CallerOptions};
use support::{Daemon, ROOT};

async fn scrape(d: &Daemon) -> (String, String) {
    let resp = support::http(
        &d.addr,
        "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    .await;
    let (head, body) = resp.split_once("\r\n\r\n").expect("an HTTP response");
    (head.to_owned(), body.to_owned())
}

/// One sample line: `name{a="b",c="d"} value`.
#[derive(Debug)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// Parses the text exposition format strictly enough to catch malformed output: every line is a
/// `# HELP`/`# TYPE` comment or a sample, names are valid, label values are quoted, values parse,
/// and every sample belongs to a declared family of the right type.
fn parse(text: &str) -> Vec<Sample> {
    let valid_name = |n: &str| {
        !n.is_empty()
            && n.chars().enumerate().all(|(i, c)| {
                c.is_ascii_alphabetic() || c == '_' || c == ':' || (i > 0 && c.is_ascii_digit())
            })
    };
    let mut types: BTreeMap<String, String> = BTreeMap::new();
    let mut out = Vec::new();
    for line in text.lines() {
        if line.trim().is_empty() {
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, ty) = rest.split_once(' ').expect("TYPE name type");
            assert!(valid_name(name), "{line}");
            assert!(
                ["counter", "gauge", "histogram", "summary", "untyped"].contains(&ty),
                "{line}"
            );
            types.insert(name.to_owned(), ty.to_owned());
            continue;
        }
        if let Some(rest) = line.strip_prefix("# HELP ") {
            assert!(valid_name(rest.split(' ').next().unwrap()), "{line}");
            continue;
        }
        assert!(!line.starts_with('#'), "unknown comment: {line}");
        let (series, value) = line.rsplit_once(' ').expect("series value");
        let value: f64 = match value {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            v => v.parse().unwrap_or_else(|_| panic!("bad value in {line}")),
        };
        let (name, labels) = match series.split_once('{') {
            None => (series, BTreeMap::new()),
            Some((name, rest)) => {
                let body = rest.strip_suffix('}').expect("labels end with }");
                let mut labels = BTreeMap::new();
                for pair in body.split(',').filter(|p| !p.is_empty()) {
                    let (k, v) = pair.split_once('=').expect("label=value");
                    assert!(valid_name(k), "{line}");
                    let v = v
                        .strip_prefix('"')
                        .and_then(|v| v.strip_suffix('"'))
                        .unwrap_or_else(|| panic!("unquoted label value in {line}"));
                    labels.insert(k.to_owned(), v.to_owned());
                }
                (name, labels)
            }
        };
        assert!(valid_name(name), "{line}");
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| {
                name.strip_suffix(s)
                    .filter(|f| types.get(*f).is_some_and(|t| t == "histogram"))
            })
            .unwrap_or(name);
        assert!(types.contains_key(family), "sample without a TYPE: {line}");
        out.push(Sample {
            name: name.to_owned(),
            labels,
            value,
        });
    }
    out
}

fn value(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    samples
        .iter()
        .find(|s| {
            s.name == name
                && labels
                    .iter()
                    .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|s| s.value)
}

/// Buckets rise monotonically to `+Inf`, which equals `_count`.
fn check_histogram(samples: &[Sample], name: &str) -> f64 {
    let buckets: Vec<(f64, f64)> = samples
        .iter()
        .filter(|s| s.name == format!("{name}_bucket"))
        .map(|s| {
            let le = &s.labels["le"];
            let le = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().unwrap()
            };
            (le, s.value)
        })
        .collect();
    assert!(buckets.len() > 3, "{name} has no buckets");
    assert!(
        buckets
            .windows(2)
            .all(|w| w[0].0 < w[1].0 && w[0].1 <= w[1].1),
        "{name}: {buckets:?}"
    );
    let count = value(samples, &format!("{name}_count"), &[]).expect("count");
    assert_eq!(buckets.last().unwrap(), &(f64::INFINITY, count), "{name}");
    assert!(value(samples, &format!("{name}_sum"), &[]).is_some());
    count
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_call_shows_up_in_metrics() {
    let d = Daemon::start(&support::mock_config(
        "audio-fixtures/scenarios/demo.toml",
        "",
    ))
    .await;
    let other = Daemon::start(&support::mock_config("", "")).await;

    // Before any call: the live gauge and no call counted.
    let (head, body) = scrape(&d).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: text/plain; version=0.0.4"),
        "{head}"
    );
    let s = parse(&body);
    assert_eq!(value(&s, "baton_calls_active", &[]), Some(0.0));
    assert_eq!(value(&s, "baton_calls_total", &[]), None);

    // The caller says one turn and waits for the reply.
    let c1 = baton::audio::wav::read(&Path::new(ROOT).join("audio-fixtures/clips/caller_01.wav"))
        .unwrap();
    let mut pcm = vec![0i16; 8000];
    pcm.extend_from_slice(&c1.samples);
    pcm.extend(std::iter::repeat_n(0, 16000));
    let mut opts = CallerOptions::from_pcm(&pcm, 16000, "one turn").unwrap();
    opts.max_tail = Duration::from_secs(8);
    let report = caller::dial(&d.twilio_url(), opts).await.unwrap();
    assert_eq!(report.end, CallerEnd::HungUp);
    assert!(report.media_received > 0, "the caller heard no reply");

    // The call is counted once its slot is freed.
    assert_eq!(d.calls_ended().await, 0);
    let (_, body) = scrape(&d).await;
    let s = parse(&body);
    assert_eq!(value(&s, "baton_calls_active", &[]), Some(0.0), "{body}");
    // The call's tasks woke up (a process-wide count: every frame they moved took some).
    assert!(
        value(&s, "baton_task_wakeups_total", &[])
            .is_some_and(|w| w >= report.media_received as f64),
        "{body}"
    );
    assert_eq!(
        value(
            &s,
            "baton_calls_total",
            &[("leg", "twilio"), ("end", "caller_hung_up")]
        ),
        Some(1.0),
        "{body}"
    );
    let total: f64 = s
        .iter()
        .filter(|x| x.name == "baton_calls_total")
        .map(|x| x.value)
        .sum();
    assert_eq!(total, 1.0, "{body}");
    assert!(check_histogram(&s, "baton_first_audio_ms") >= 1.0, "{body}");
    assert!(
        check_histogram(&s, "baton_uplink_added_ms") >= 1.0,
        "{body}"
    );
    assert!(
        check_histogram(&s, "baton_downlink_added_ms") >= 1.0,
        "{body}"
    );
    assert!(
        check_histogram(&s, "baton_egress_jitter_ms") >= 1.0,
        "{body}"
    );
    let frames_in = value(&s, "baton_frames_in_total", &[("leg", "twilio")]).unwrap();
    assert!(
        frames_in >= report.frames_sent as f64 - 2.0,
        "{frames_in} vs {}",
        report.frames_sent
    );
    let frames_out = value(&s, "baton_frames_out_total", &[("leg", "twilio")]).unwrap();
    assert_eq!(frames_out, report.media_received as f64);
    assert_eq!(value(&s, "baton_underruns_total", &[]), Some(0.0), "{body}");
    for name in ["baton_uplink_added_ms", "baton_first_audio_ms"] {
        assert!(
            body.contains(&format!("# HELP {name} ")),
            "{name} has no HELP"
        );
        assert!(body.contains(&format!("# TYPE {name} histogram")), "{name}");
    }

    // A second daemon in this process counted nothing.
    let (_, body) = scrape(&other).await;
    let s = parse(&body);
    assert_eq!(value(&s, "baton_calls_total", &[]), None, "{body}");
    assert_eq!(value(&s, "baton_first_audio_ms_count", &[]), None, "{body}");
    other.stop().await;
    d.stop().await;
}
