//! The transfer benchmark's outputs: its figures worked out from the calls' feeds, `/metrics` and
//! SIPp's statistics, written as `report.json` and `report.md`, and the summary it prints.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use super::daemon::CallSeen;
use super::rig::{Person, SippFigures};
use super::{MetricsFigures, QUESTION_MS, TransfersArgs, TransfersError, TransfersReport};
use crate::bench::load::Machine;
use crate::bench::report::Stats;

/// One 20 ms frame: dead air up to this long is inaudible.
const FRAME_MS: u64 = 20;

pub(super) fn build(
    args: &TransfersArgs,
    person: Person,
    calls: Vec<CallSeen>,
    sipp: Vec<SippFigures>,
    metrics: &str,
) -> TransfersReport {
    let values = |f: fn(&CallSeen) -> Option<u64>| -> Vec<f64> {
        calls.iter().filter_map(f).map(|v| v as f64).collect()
    };
    let mut outcomes = BTreeMap::new();
    for c in &calls {
        let kind = c.outcome.clone().unwrap_or_else(|| "none".into());
        *outcomes.entry(kind).or_insert(0u64) += 1;
    }
    let typed = calls.iter().filter(|c| c.finished_events == 1).count();
    let requested = calls.iter().filter(|c| c.requested).count();
    let dead_air: Vec<u64> = calls
        .iter()
        .flat_map(|c| c.dead_air_ms.iter().copied())
        .collect();
    let callers_placed = sipp
        .iter()
        .find(|s| s.who == "callers")
        .and_then(|s| s.calls);
    let all_accounted = callers_placed == Some(args.transfers as u64)
        && calls.len() == args.transfers
        && typed == args.transfers
        && requested == args.transfers;
    let machine = Machine::probe();
    let mut notes = Vec::new();
    if machine.build == "debug" {
        notes.push("debug build: timings are not representative; use cargo build --release".into());
    }
    notes.push(format!(
        "the person's phone presses 1 {} ms after answering and says their first word {} ms \
         after the key's first packet; the dead air at the bridge ends at the first frame of \
         their audio played to the caller, not at their first word (their silence is theirs)",
        person.key_after_ms, person.speaks_after_ms
    ));
    notes.push(format!(
        "SIPp, the daemon and the mock model share the machine's {} core(s)",
        machine.cores
    ));
    let lost: u64 = calls.iter().map(|c| c.lost_events).sum();
    if lost > 0 {
        notes.push(format!("the call feeds fell behind and lost {lost} events"));
    }
    let many = calls.iter().filter(|c| c.finished_events > 1).count();
    if many > 0 {
        notes.push(format!("{many} calls reported more than one outcome"));
    }
    TransfersReport {
        command: std::env::args().collect::<Vec<_>>().join(" "),
        machine,
        transfers: args.transfers,
        concurrency: args.concurrency,
        person,
        caller_question_ms: QUESTION_MS,
        caller_stay_s: args.stay_s,
        calls_seen: calls.len(),
        requested,
        typed,
        outcomes,
        all_accounted,
        setup_ms: Stats::of(&values(|c| c.setup_ms)),
        ring_ms: Stats::of(&values(|c| c.ring_ms)),
        total_ms: Stats::of(&values(|c| c.total_ms)),
        dead_air_ms: Stats::of(&dead_air.iter().map(|&v| v as f64).collect::<Vec<_>>()),
        dead_air_over_one_frame: dead_air.iter().filter(|&&v| v > FRAME_MS).count(),
        dead_air_capped: calls.iter().filter(|c| c.dead_air_capped).count(),
        metrics: MetricsFigures::read(metrics),
        sipp,
        notes,
        calls,
    }
}

pub(super) fn write(r: &TransfersReport, dir: &Path) -> Result<(), TransfersError> {
    let io = |p: &Path, e: std::io::Error| {
        TransfersError::Io(format!("cannot write {}: {e}", p.display()))
    };
    let json = dir.join("report.json");
    let text = serde_json::to_string_pretty(r).map_err(|e| TransfersError::Io(e.to_string()))?;
    std::fs::write(&json, text + "\n").map_err(|e| io(&json, e))?;
    let md = dir.join("report.md");
    std::fs::write(&md, markdown(r)).map_err(|e| io(&md, e))?;
    Ok(())
}

fn num(x: Option<f64>) -> String {
    x.map_or("—".to_owned(), |x| format!("{x:.0}"))
}

fn outcomes(r: &TransfersReport) -> String {
    r.outcomes
        .iter()
        .map(|(k, n)| format!("{k} {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn headline(r: &TransfersReport) -> String {
    format!(
        "{} of {} transfers typed ({}); {}",
        r.typed,
        r.transfers,
        outcomes(r),
        if r.all_accounted {
            "every transfer accounted for"
        } else {
            "NOT every transfer accounted for"
        }
    )
}

fn sipp_line(s: &SippFigures) -> String {
    let failures = if s.failures.is_empty() {
        "none".to_owned()
    } else {
        s.failures
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    format!(
        "| {} | {} | {} | {} | {} | {} |",
        s.who,
        s.calls.map_or("—".into(), |v| v.to_string()),
        s.successful.map_or("—".into(), |v| v.to_string()),
        s.failed.map_or("—".into(), |v| v.to_string()),
        failures,
        s.exit_code.map_or("stopped".into(), |c| c.to_string()),
    )
}

/// What the command prints when done.
pub(super) fn summary(r: &TransfersReport, dir: &Path) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "{}", headline(r));
    let _ = writeln!(s, "figure             p50    p95    p99    max  samples");
    for (name, st) in figures(r) {
        let _ = writeln!(
            s,
            "{name:<17} {:>5} {:>6} {:>6} {:>6}  {:>7}",
            num(st.p50),
            num(st.p95),
            num(st.p99),
            num(st.max),
            st.samples
        );
    }
    let _ = writeln!(
        s,
        "dead air windows over one frame ({FRAME_MS} ms): {} of {}; capped: {}",
        r.dead_air_over_one_frame, r.dead_air_ms.samples, r.dead_air_capped
    );
    for sp in &r.sipp {
        let _ = writeln!(
            s,
            "SIPp {}: {} calls, {} failed{}",
            sp.who,
            sp.calls.map_or("?".into(), |v| v.to_string()),
            sp.failed.map_or("?".into(), |v| v.to_string()),
            if sp.failures.is_empty() {
                String::new()
            } else {
                format!(" ({:?})", sp.failures)
            }
        );
    }
    let _ = writeln!(s, "report: {}", dir.join("report.md").display());
    s
}

fn figures(r: &TransfersReport) -> [(&'static str, &Stats); 4] {
    [
        ("transfer_setup_ms", &r.setup_ms),
        ("dead_air_ms", &r.dead_air_ms),
        ("ring_ms", &r.ring_ms),
        ("total_ms", &r.total_ms),
    ]
}

fn markdown(r: &TransfersReport) -> String {
    let mut s = String::new();
    let m = &r.machine;
    let p = &r.person;
    let _ = writeln!(s, "# baton bench transfers\n");
    let _ = writeln!(s, "```sh\n{}\n```\n", r.command);
    let _ = writeln!(
        s,
        "Machine: {} core(s), {}, {} MiB, Linux {}; {} build. {} warm transfers against SIPp, \
         {} callers at a time; each caller asks its question ({} ms), stays {} s and hangs up. \
         The person's phone rings {} ms, presses 1 {} ms after answering and speaks {} ms after \
         the key.\n",
        m.cores,
        m.cpu,
        m.mem_mib,
        m.kernel,
        m.build,
        r.transfers,
        r.concurrency,
        r.caller_question_ms,
        r.caller_stay_s,
        p.ring_ms,
        p.key_after_ms,
        p.speaks_after_ms
    );
    let _ = writeln!(s, "**{}.**\n", headline(r));
    let _ = writeln!(
        s,
        "Calls seen by the daemon: {}; transfer requested on {}; exactly one typed outcome on {}.\n",
        r.calls_seen, r.requested, r.typed
    );
    let _ = writeln!(s, "| figure (ms) | p50 | p95 | p99 | max | samples |");
    let _ = writeln!(s, "|---|---:|---:|---:|---:|---:|");
    for (name, st) in figures(r) {
        let _ = writeln!(
            s,
            "| {name} | {} | {} | {} | {} | {} |",
            num(st.p50),
            num(st.p95),
            num(st.p99),
            num(st.max),
            st.samples
        );
    }
    let _ = writeln!(
        s,
        "\nDead-air windows longer than one frame ({FRAME_MS} ms): {} of {}; cut at the cap: {}.\n",
        r.dead_air_over_one_frame, r.dead_air_ms.samples, r.dead_air_capped
    );
    let mt = &r.metrics;
    let _ = writeln!(
        s,
        "`/metrics`: `baton_transfers_total{{plan=\"warm\"}}` {}; `baton_transfer_setup_ms` \
         count {} sum {}; `baton_transfer_dead_air_ms` count {} sum {}.\n",
        if mt.transfers_total.is_empty() {
            "none".to_owned()
        } else {
            mt.transfers_total
                .iter()
                .map(|(k, v)| format!("{k} {v}"))
                .collect::<Vec<_>>()
                .join(", ")
        },
        mt.setup_ms_count.map_or("—".into(), |v| v.to_string()),
        num(mt.setup_ms_sum),
        mt.dead_air_ms_count.map_or("—".into(), |v| v.to_string()),
        num(mt.dead_air_ms_sum),
    );
    let _ = writeln!(
        s,
        "| SIPp | calls | successful | failed | failures | exit |"
    );
    let _ = writeln!(s, "|---|---:|---:|---:|---|---|");
    for sp in &r.sipp {
        let _ = writeln!(s, "{}", sipp_line(sp));
    }
    s.push('\n');
    for n in &r.notes {
        let _ = writeln!(s, "- {n}");
    }
    s.push_str(
        "\n## What the figures mean\n\n\
- **transfer_setup_ms**: from the agent's transfer request to the person's answer, minus the time \
their phone rang (the transfer's `finished` report on the call's feed).\n\
- **dead_air_ms**: after each switch of what the caller hears (the bridge to the person, or back \
to the agent), how long until the first frame of the new source's audio was played to the \
caller: one value per switch; the person's or the agent's own silences are not counted. One \
frame (20 ms) or less is inaudible.\n\
- **ring_ms**: the first 180 Ringing to the answer. **total_ms**: the request to the outcome (for \
`connected`, to the bridge).\n\
- **typed**: the call's feed carried exactly one `transfer` `finished` event with an outcome \
kind; *none* counts calls that ended without one. Every transfer is accounted for when the \
callers' SIPp placed every call, the daemon saw each, and each had its agent's request and one \
typed outcome.\n\
- **SIPp**: its own statistics (`-trace_stat`): calls that did not follow the scenario, by \
SIPp's reason; retransmissions are counted there too.\n",
    );
    s
}
