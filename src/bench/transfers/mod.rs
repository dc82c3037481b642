//! `baton bench transfers`: N warm transfers to a person against SIPp, every outcome accounted
//! for, with `transfer_setup_ms`, `transfer_dead_air_ms` and ring time as distributions.
//!
//! The daemon runs in this process on the embedded mock model ([`daemon`]), with the shipped
//! front-desk agent set (`config/agents/front_desk.toml`) changed in two places: Ravi is reached
//! `transfer = "warm"`, at a SIPp on a free loopback port. Two SIPp processes play the people
//! ([`rig`]):
//! * the callers: a UAC placing `--transfers` calls, `--concurrency` at a time, each playing the
//!   caller's question (the first 3.14 s of `clips/caller_conversation.wav`, 20 ms PCMU RTP
//!   packets written to a capture file at run time by [`pcap`]), staying on the line
//!   `--stay-s`, then hanging up. Asha answers the question by putting them through to Ravi;
//! * Ravi's phone: a UAS that rings `--ring-ms`, answers offering PCMU and
//!   `telephone-event/8000` on 101, `--key-after-ms` later presses 1 (SIPp's own RFC 4733
//!   capture `dtmf_2833_1.pcap`: accept) while the brief plays, then `--speaks-after-ms` after
//!   the key says who they are (`answering/h_priya.wav` from its first word) and waits for
//!   baton's BYE.
//!
//! Every call's feed is followed from its start: its `transfer_requested`, stages, the one
//! `finished` report (outcome kind, status, `setup_ms`, `ring_ms`, `total_ms`) and every
//! `dead_air` window. `/metrics` (`baton_transfers_total`, `baton_transfer_setup_ms`,
//! `baton_transfer_dead_air_ms`) is read at the end as a cross-check, and SIPp's own
//! statistics say how many calls it saw fail. Writes `report.md` and `report.json` to `--out`.

pub mod daemon;
pub mod pcap;
mod report;
pub mod rig;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;

use super::load::Machine;
use super::load::procs;
use super::report::Stats;
use daemon::{CallSeen, Daemon};
use rig::{Person, Sipp, SippFigures};

/// Command-line arguments of `baton bench transfers`.
#[derive(Debug, Clone, clap::Args)]
#[command(after_help = "Examples:\n  \
    cargo build --release\n  \
    target/release/baton bench transfers\n  \
    target/release/baton bench transfers --transfers 20 --concurrency 2 --out out/bench/transfers-20\n\n\
    Needs SIPp (Debian package sip-tester). Run from the repository root (it reads \
    config/agents/front_desk.toml and audio-fixtures/). Writes report.md and report.json to --out.")]
pub struct TransfersArgs {
    /// Warm transfers to run (one caller each).
    #[arg(long, value_name = "N", default_value_t = 100)]
    pub transfers: usize,
    /// Callers on the line at once.
    #[arg(long, value_name = "N", default_value_t = 4)]
    pub concurrency: usize,
    /// Where report.md, report.json and the rig's files go.
    #[arg(long, value_name = "DIR", default_value = "out/bench/transfers")]
    pub out: PathBuf,
    /// The agent set: its `ravi` is switched to a warm transfer to the bench's SIPp.
    #[arg(
        long,
        value_name = "FILE",
        default_value = "config/agents/front_desk.toml"
    )]
    pub agents: PathBuf,
    /// The bundled audio (clips/, answering/).
    #[arg(long, value_name = "DIR", default_value = "audio-fixtures")]
    pub fixtures: PathBuf,
    /// How long the person's phone rings before answering.
    #[arg(long, value_name = "MS", default_value_t = 1000)]
    pub ring_ms: u64,
    /// From the answer to the person pressing 1 (while the brief plays).
    #[arg(long, value_name = "MS", default_value_t = 2000)]
    pub key_after_ms: u64,
    /// From the key to the person's first word.
    #[arg(long, value_name = "MS", default_value_t = 200)]
    pub speaks_after_ms: u64,
    /// How long each caller stays on the line after their question.
    #[arg(long, value_name = "S", default_value_t = 12.0)]
    pub stay_s: f64,
    /// The person's key press: RFC 4733 events on payload type 101.
    #[arg(
        long,
        value_name = "PCAP",
        default_value = "/usr/share/sip-tester/dtmf_2833_1.pcap"
    )]
    pub key_pcap: PathBuf,
}

/// Why the benchmark could not run.
#[derive(Debug, thiserror::Error)]
pub enum TransfersError {
    #[error("{0}")]
    Args(String),
    #[error(
        "SIPp is not installed: install the Debian package sip-tester (scripts/setup.sh does), \
         then run again"
    )]
    NoSipp,
    #[error("{0}")]
    Io(String),
    #[error("the daemon under test: {0}")]
    Daemon(String),
}

/// The caller's question: the first 3.14 s of the bundled conversation.
const QUESTION_MS: u64 = 3140;

/// The benchmark's result (`report.json`).
#[derive(Clone, Debug, Serialize)]
pub struct TransfersReport {
    pub command: String,
    pub machine: Machine,
    pub transfers: usize,
    pub concurrency: usize,
    pub person: Person,
    /// The caller's question, then this long on the line (s).
    pub caller_question_ms: u64,
    pub caller_stay_s: f64,
    /// Calls the daemon saw (its call feeds).
    pub calls_seen: usize,
    /// Calls whose agent asked for the transfer (`transfer_requested`).
    pub requested: usize,
    /// Calls with exactly one typed outcome (`transfer` `finished`).
    pub typed: usize,
    /// Outcomes by kind; `none` counts calls that ended without one.
    pub outcomes: BTreeMap<String, u64>,
    /// Every transfer the callers placed ended in exactly one typed outcome.
    pub all_accounted: bool,
    /// `transfer_setup_ms`: request to the person's answer, minus ring time.
    pub setup_ms: Stats,
    /// Ring time: the first 180 to the answer.
    pub ring_ms: Stats,
    /// Request to outcome (for `connected`: to the bridge).
    pub total_ms: Stats,
    /// `transfer_dead_air_ms`: each switch of what the caller hears to the first frame of its
    /// new source's audio, one value per window.
    pub dead_air_ms: Stats,
    /// Windows longer than one 20 ms frame.
    pub dead_air_over_one_frame: usize,
    /// Windows cut at the cap (the caller heard nothing for 10 s).
    pub dead_air_capped: usize,
    /// The same figures as the daemon's `/metrics` counts them.
    pub metrics: MetricsFigures,
    /// The callers' and the person's SIPp.
    pub sipp: Vec<SippFigures>,
    pub notes: Vec<String>,
    /// Every call, as its feed told it.
    pub calls: Vec<CallSeen>,
}

/// What `/metrics` said at the end.
#[derive(Clone, Debug, Default, Serialize)]
pub struct MetricsFigures {
    /// `baton_transfers_total{plan="warm"}` by `kind`.
    pub transfers_total: BTreeMap<String, u64>,
    pub setup_ms_count: Option<u64>,
    pub setup_ms_sum: Option<f64>,
    pub dead_air_ms_count: Option<u64>,
    pub dead_air_ms_sum: Option<f64>,
}

impl MetricsFigures {
    fn read(body: &str) -> MetricsFigures {
        let mut transfers_total = BTreeMap::new();
        for l in body.lines().filter(|l| !l.starts_with('#')) {
            let Some(labels) = l.strip_prefix(figures_name::OUTCOMES) else {
                continue;
            };
            let Some((labels, v)) = labels.rsplit_once(' ') else {
                continue;
            };
            if !labels.contains("plan=\"warm\"") {
                continue;
            }
            let kind = labels
                .split("kind=\"")
                .nth(1)
                .and_then(|k| k.split('"').next());
            if let (Some(kind), Ok(v)) = (kind, v.parse::<f64>()) {
                transfers_total.insert(kind.to_owned(), v as u64);
            }
        }
        let sum = |name: String| procs::prom_sum(body, &name);
        MetricsFigures {
            transfers_total,
            setup_ms_count: sum(format!("{}_count", figures_name::SETUP_MS)).map(|v| v as u64),
            setup_ms_sum: sum(format!("{}_sum", figures_name::SETUP_MS)),
            dead_air_ms_count: sum(format!("{}_count", figures_name::DEAD_AIR_MS))
                .map(|v| v as u64),
            dead_air_ms_sum: sum(format!("{}_sum", figures_name::DEAD_AIR_MS)),
        }
    }
}

use crate::transfer::figures as figures_name;

/// Runs the benchmark described by `args`.
pub fn run(args: &TransfersArgs) -> Result<(), TransfersError> {
    if args.transfers == 0 || args.concurrency == 0 {
        return Err(TransfersError::Args(
            "--transfers and --concurrency must be at least 1".into(),
        ));
    }
    if !(args.stay_s.is_finite() && args.stay_s >= 2.0) {
        return Err(TransfersError::Args(
            "--stay-s must be at least 2 (the transfer happens while the caller stays)".into(),
        ));
    }
    sipp_installed()?;
    let f = |rel: &str| args.fixtures.join(rel);
    let inputs = [
        args.agents.clone(),
        args.key_pcap.clone(),
        f("clips/caller_conversation.wav"),
        f("answering/h_priya.wav"),
        f("clips/seed000/asha_02.wav"),
        f("clips/seed000/asha_01.wav"),
        f("clips/seed000/asha_default.wav"),
    ];
    for p in &inputs {
        if !p.is_file() {
            return Err(TransfersError::Args(format!(
                "{} is missing: run from the repository root, or point --agents, --fixtures or \
                 --key-pcap at it",
                p.display()
            )));
        }
    }
    let out = std::path::absolute(&args.out)
        .map_err(|e| TransfersError::Io(format!("{}: {e}", args.out.display())))?;
    let rig_dir = out.join("rig");
    std::fs::create_dir_all(&rig_dir)
        .map_err(|e| TransfersError::Io(format!("cannot create {}: {e}", rig_dir.display())))?;
    let abs = |p: &Path| {
        std::path::absolute(p).map_err(|e| TransfersError::Io(format!("{}: {e}", p.display())))
    };
    let write = |p: &Path, bytes: &[u8]| {
        std::fs::write(p, bytes)
            .map_err(|e| TransfersError::Io(format!("cannot write {}: {e}", p.display())))
    };

    // The callers' audio: the question, then silence while they stay.
    let stay = Duration::from_secs_f64(args.stay_s);
    let question = read_8k(&f("clips/caller_conversation.wav"), Some(QUESTION_MS))?;
    let mut caller = question;
    caller.resize(caller.len() + (stay.as_millis() as usize) * 8, 0);
    let caller_pcap = rig_dir.join("caller.pcap");
    write(&caller_pcap, &pcap::pcmu_rtp(&caller, 0x0ca1_1e25))?;
    // The person's words, from the first one.
    let words = read_8k(&f("answering/h_priya.wav"), None)?;
    let first = words
        .chunks(160)
        .position(|b| crate::audio::vad::rms_dbfs(b) > -45.0)
        .unwrap_or(0);
    let voice_pcap = rig_dir.join("person.pcap");
    write(
        &voice_pcap,
        &pcap::pcmu_rtp(&words[first * 160..], 0x0fe5_0a11),
    )?;
    let person = Person {
        ring_ms: args.ring_ms,
        key_after_ms: args.key_after_ms,
        speaks_after_ms: args.speaks_after_ms,
        key_pcap: abs(&args.key_pcap)?,
        voice_pcap: voice_pcap.clone(),
    };

    // The agent set, the mock's script and the daemon's config.
    let person_port = rig::free_udp()?;
    let set_path = rig_dir.join("front_desk_warm.toml");
    write(&set_path, warm_set(&args.agents, person_port)?.as_bytes())?;
    let scenario_path = rig_dir.join("scenario.toml");
    let scenario = mock_scenario(&set_path, &abs(&args.fixtures)?);
    write(&scenario_path, scenario.as_bytes())?;
    let config_path = rig_dir.join("daemon.toml");
    let config = format!(
        "# Generated by baton bench transfers: the daemon under test, on the embedded mock.\n\
         [server]\nlisten = \"127.0.0.1:0\"\ndrain_timeout_s = 1\n\
         [model]\nbackend = \"mock\"\nscenario = {:?}\n\
         [limits]\nmax_calls = {}\n\
         [sip]\nlisten = [\"udp:127.0.0.1:0\"]\n\
         [agents]\nset = {:?}\n",
        scenario_path.display().to_string(),
        args.concurrency * 2 + 8,
        set_path.display().to_string(),
    );
    write(&config_path, config.as_bytes())?;

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| TransfersError::Io(format!("cannot start the runtime: {e}")))?;
    let call_s = QUESTION_MS as f64 / 1000.0 + args.stay_s;
    let rounds = args.transfers.div_ceil(args.concurrency) as f64;
    let limit = Duration::from_secs_f64(rounds * (call_s + 2.0) * 2.0 + 60.0);
    eprintln!(
        "bench transfers: {} warm transfers, {} at a time (about {:.0} s)",
        args.transfers,
        args.concurrency,
        rounds * (call_s + 1.0)
    );
    let (calls, sipp, metrics) = rt.block_on(async {
        let d = Daemon::start(&config, &config_path).await?;
        let person_sipp = Sipp::start(
            "person",
            &rig_dir,
            &rig::person_scenario(&person),
            person_port,
            None,
            &["-m".into(), args.transfers.to_string()],
        )?;
        let callers = Sipp::start(
            "callers",
            &rig_dir,
            &rig::caller_scenario(&caller_pcap, Duration::from_millis(caller_ms(&caller))),
            rig::free_udp()?,
            Some(d.sip),
            &[
                "-m".into(),
                args.transfers.to_string(),
                "-l".into(),
                args.concurrency.to_string(),
                "-r".into(),
                "1".into(),
            ],
        )?;
        let (done_tx, done_rx) = tokio::sync::oneshot::channel::<()>();
        let callers = tokio::spawn(async move {
            let figures = callers.finish(limit).await;
            let _ = done_tx.send(());
            figures
        });
        let calls = d
            .follow_calls(
                async {
                    let _ = done_rx.await;
                },
                args.transfers,
                Duration::from_secs(30),
            )
            .await;
        let callers = callers.await.unwrap_or_default();
        let person = person_sipp.finish(Duration::from_secs(15)).await;
        let http = d.http;
        let metrics = tokio::task::spawn_blocking(move || {
            procs::http_get(http, &http.to_string(), "/metrics").unwrap_or_default()
        })
        .await
        .unwrap_or_default();
        d.stop().await;
        Ok::<_, TransfersError>((calls, vec![callers, person], metrics))
    })?;
    let report = report::build(args, person, calls, sipp, &metrics);
    report::write(&report, &out)?;
    print!("{}", report::summary(&report, &out));
    Ok(())
}

/// How long the caller's capture lasts (ms): the scenario hangs up when it ends.
fn caller_ms(pcm: &[i16]) -> u64 {
    (pcm.len().div_ceil(160) * 20) as u64
}

/// Whether `sipp` runs.
fn sipp_installed() -> Result<(), TransfersError> {
    match std::process::Command::new("sipp")
        .arg("-v")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
    {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(TransfersError::NoSipp),
        Err(e) => Err(TransfersError::Io(format!("cannot run sipp: {e}"))),
    }
}

/// A WAV as 8 kHz mono, its first `ms` only when given.
fn read_8k(path: &Path, ms: Option<u64>) -> Result<Vec<i16>, TransfersError> {
    let clip = crate::audio::wav::read(path).map_err(|e| TransfersError::Io(e.to_string()))?;
    let end = ms.map_or(clip.samples.len(), |ms| {
        (clip.rate as usize * ms as usize / 1000).min(clip.samples.len())
    });
    crate::audio::resample::resample_all(&clip.samples[..end], clip.rate, 8000)
        .map_err(|e| TransfersError::Io(format!("{}: {e}", path.display())))
}

/// The agent set at `path` with Ravi reached warm at the bench's SIPp on `port`.
fn warm_set(path: &Path, port: u16) -> Result<String, TransfersError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| TransfersError::Io(format!("cannot read {}: {e}", path.display())))?;
    let mut doc: toml::Table = text
        .parse()
        .map_err(|e| TransfersError::Args(format!("{} is not TOML: {e}", path.display())))?;
    let dest = doc
        .get_mut("agents")
        .and_then(|a| a.get_mut("ravi"))
        .and_then(|r| r.get_mut("destination"))
        .and_then(|d| d.as_table_mut())
        .ok_or_else(|| {
            TransfersError::Args(format!(
                "{} has no [agents.ravi.destination]: the bench transfers the caller to Ravi",
                path.display()
            ))
        })?;
    dest.insert("to".into(), format!("sip:ravi@127.0.0.1:{port}").into());
    dest.insert("transfer".into(), "warm".into());
    Ok(format!(
        "# Generated by baton bench transfers from {}: Ravi reached warm at the bench's SIPp.\n{}",
        path.display(),
        toml::to_string(&doc).map_err(|e| TransfersError::Io(e.to_string()))?
    ))
}

/// The mock model's script: Asha answers the question by putting the caller through to Ravi;
/// if the transfer fails she carries on.
fn mock_scenario(set: &Path, fixtures: &Path) -> String {
    let clip = |rel: &str| format!("{:?}", fixtures.join(rel).display().to_string());
    format!(
        r#"# Generated by baton bench transfers.
name = "bench_transfers"
description = "Asha puts the caller through to Ravi, a person, by a warm transfer."
agents = {set:?}
caller = {caller}

[model]
profile = "gemini-3.8"
first_audio_ms = 300
speed = 4.0
chunk_ms = 40
burst = 3
silence_ms = 500
default_reply = {default}
default_reply_text = "Sorry, could you say that again?"

[[turn]]
input_text = "Is there a government scheme for savers?"
reply = {announce}
output_text = "Let me bring in Ravi, our government schemes specialist."
[turn.tool_call]
name = "transfer_to_ravi"
args = {{ summary = "The caller wants to know about government savings schemes." }}

[[turn]]
input_text = "[transfer] The caller could not be put through to Ravi."
reply = {back}
output_text = "Hello, I'm Asha. Start with an emergency fund."
"#,
        set = set.display().to_string(),
        caller = clip("clips/caller_conversation.wav"),
        default = clip("clips/seed000/asha_default.wav"),
        announce = clip("clips/seed000/asha_02.wav"),
        back = clip("clips/seed000/asha_01.wav"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROOT: &str = env!("CARGO_MANIFEST_DIR");

    #[test]
    fn the_shipped_set_is_switched_to_a_warm_transfer_to_the_rig() {
        let text = warm_set(
            &Path::new(ROOT).join("config/agents/front_desk.toml"),
            40_123,
        )
        .unwrap();
        let doc: toml::Table = text.parse().unwrap();
        let dest = &doc["agents"]["ravi"]["destination"];
        assert_eq!(dest["to"].as_str(), Some("sip:ravi@127.0.0.1:40123"));
        assert_eq!(dest["transfer"].as_str(), Some("warm"));
        assert_eq!(doc["agents"]["advisor"]["role"].as_str(), Some("primary"));
        let bad =
            std::env::temp_dir().join(format!("bench-transfers-bad-{}.toml", std::process::id()));
        std::fs::write(&bad, "[agents.advisor]\nname = \"Asha\"\n").unwrap();
        let e = warm_set(&bad, 1).unwrap_err().to_string();
        assert!(e.contains("[agents.ravi.destination]"), "{e}");
        std::fs::write(&bad, "not = toml = at all").unwrap();
        assert!(
            warm_set(&bad, 1)
                .unwrap_err()
                .to_string()
                .contains("not TOML")
        );
        let _ = std::fs::remove_file(bad);
    }

    #[test]
    fn the_mock_script_parses_and_calls_the_transfer_tool() {
        let s = mock_scenario(Path::new("/x/set.toml"), Path::new("/f"));
        let doc: toml::Table = s.parse().unwrap();
        assert_eq!(doc["agents"].as_str(), Some("/x/set.toml"));
        let turns = doc["turn"].as_array().unwrap();
        assert_eq!(
            turns[0]["tool_call"]["name"].as_str(),
            Some("transfer_to_ravi")
        );
        assert_eq!(
            turns[0]["reply"].as_str(),
            Some("/f/clips/seed000/asha_02.wav")
        );
    }

    #[test]
    fn metrics_by_kind() {
        let body = "# HELP x\nbaton_transfers_total{plan=\"warm\",kind=\"connected\"} 98\n\
                    baton_transfers_total{plan=\"warm\",kind=\"busy\"} 2\n\
                    baton_transfers_total{plan=\"blind_refer\",kind=\"connected\"} 5\n\
                    baton_transfer_setup_ms_count{plan=\"warm\"} 98\n\
                    baton_transfer_setup_ms_sum{plan=\"warm\"} 4900\n\
                    baton_transfer_dead_air_ms_count{plan=\"warm\"} 98\n\
                    baton_transfer_dead_air_ms_sum{plan=\"warm\"} 0\n";
        let m = MetricsFigures::read(body);
        assert_eq!(m.transfers_total.get("connected"), Some(&98));
        assert_eq!(m.transfers_total.get("busy"), Some(&2));
        assert_eq!(m.transfers_total.len(), 2);
        assert_eq!(m.setup_ms_count, Some(98));
        assert_eq!(m.setup_ms_sum, Some(4900.0));
        assert_eq!(m.dead_air_ms_sum, Some(0.0));
        assert!(
            MetricsFigures::read("garbage {{{ \n")
                .transfers_total
                .is_empty()
        );
    }
}
