//! `report.md`: the fixture benchmark's report for people — summary tables, the handoff table by
//! strategy and profile, throughput, the command and machine, and the plots embedded.

use std::fmt::Write;

use super::report::{FixturesReport, Stats};

fn num(x: Option<f64>) -> String {
    x.map_or("—".to_owned(), |x| format!("{:.2}", x + 0.0))
}

fn stats_cells(s: &Stats) -> String {
    format!(
        "{} | {} | {} | {} | {}",
        num(s.p50),
        num(s.p95),
        num(s.p99),
        num(s.max),
        s.samples
    )
}

/// Renders the report as Markdown; plots are linked by their file names next to it.
pub fn render(r: &FixturesReport) -> String {
    let mut s = String::new();
    let m = &r.machine;
    let run = &r.run;
    let _ = writeln!(s, "# baton bench fixtures\n");
    let _ = writeln!(s, "```sh\n{}\n```\n", r.command);
    let _ = writeln!(
        s,
        "- **Machine:** {} cores, {}, {} {}; {} build, baton {}; load average {} at the start.",
        m.cores, m.cpu_model, m.os, m.kernel, m.build, m.baton_version, m.load_average
    );
    let _ = writeln!(
        s,
        "- **Run:** {}, {}, leg {}; scenarios {}; profiles {}; strategies {}.",
        run.mode,
        run.model,
        run.leg_codec,
        run.scenarios.join(", "),
        run.profiles.join(", "),
        run.strategies.join(", ")
    );
    let _ = writeln!(
        s,
        "- **Calls:** {} ({} per scenario, profile and strategy; {} at once), {} failed.\n",
        run.calls, run.calls_per_cell, run.workers, run.failed
    );
    if !run.left_out.is_empty() {
        let _ = writeln!(s, "- **Left out:** {}.\n", run.left_out.join("; "));
    }

    let f = &r.figures;
    let _ = writeln!(s, "## Figures (all calls)\n");
    let _ = writeln!(s, "| figure | p50 | p95 | p99 | max | samples |");
    let _ = writeln!(s, "|---|---|---|---|---|---|");
    for (name, st) in [
        ("first_audio_ms (per turn)", &f.first_audio_ms),
        ("first_audio_ms overhead", &f.first_audio_overhead_ms),
        ("downlink_added_ms", &f.downlink_added_ms),
        ("handoff_gap_ms", &f.handoff_gap_ms),
        ("reconnect_gap_ms", &f.reconnect_gap_ms),
        ("underruns (per call)", &f.underruns.per_call),
    ] {
        let _ = writeln!(s, "| {name} | {} |", stats_cells(st));
        if name == "first_audio_ms overhead" {
            match &f.uplink_note {
                Some(note) => {
                    let _ = writeln!(s, "| uplink_added_ms | {note} | | | | 0 |");
                }
                None => {
                    let _ = writeln!(
                        s,
                        "| uplink_added_ms | {} |",
                        stats_cells(&f.uplink_added_ms)
                    );
                }
            }
        }
    }
    let _ = writeln!(
        s,
        "\nUnderruns: {} in all, in {} of {} calls. Percentiles are nearest-rank; times in ms.\n",
        f.underruns.total,
        f.underruns.calls_with_underruns,
        run.calls - run.failed
    );

    if !r.first_audio_overhead.is_empty() {
        let _ = writeln!(s, "## first_audio_ms over the mock's configured latency\n");
        let _ = writeln!(
            s,
            "Configured = the mock's first-audio latency + its VAD silence window; overhead = \
             measured − configured (playout tick alignment, resampling, baton's own time).\n"
        );
        let _ = writeln!(
            s,
            "| scenario | profile | configured | first_audio_ms p50 | overhead p50 | overhead p95 | overhead max | turns |"
        );
        let _ = writeln!(s, "|---|---|---|---|---|---|---|---|");
        for o in &r.first_audio_overhead {
            let _ = writeln!(
                s,
                "| {} | {} | {:.0} + {:.0} = {:.0} | {} | {} | {} | {} | {} |",
                o.scenario,
                o.profile,
                o.model_first_audio_ms,
                o.silence_ms,
                o.configured_ms,
                num(o.first_audio_ms.p50),
                num(o.overhead_ms.p50),
                num(o.overhead_ms.p95),
                num(o.overhead_ms.max),
                o.overhead_ms.samples
            );
        }
        s.push('\n');
    }

    let _ = writeln!(s, "## Handoffs by strategy and profile\n");
    if r.handoffs_by_strategy_profile.is_empty() {
        let _ = writeln!(s, "No scenario in this run has an agent set.\n");
    } else {
        let _ = writeln!(
            s,
            "`handoff_gap_ms` is the silence the caller hears between the two agents' voiced \
             frames. *Carried by* differs from the strategy asked for when the model or the \
             handoff cannot take it (`auto`: the first strategy that can); the reasons follow \
             the table.\n"
        );
        let _ = writeln!(
            s,
            "| scenario | profile | strategy | carried by | calls | handoffs | gap p50 | gap p95 | gap max | announcement queued p50 | trigger_to_wire_ms p50 / max | underruns |"
        );
        let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|---|---|---|");
        for h in &r.handoffs_by_strategy_profile {
            let handoffs = if h.not_heard > 0 {
                format!("{} ({} not heard)", h.handoffs, h.not_heard)
            } else {
                h.handoffs.to_string()
            };
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {handoffs} | {} | {} | {} | {} | {} / {} | {} |",
                h.scenario,
                h.profile,
                h.strategy,
                h.used.join(", "),
                h.calls,
                num(h.handoff_gap_ms.p50),
                num(h.handoff_gap_ms.p95),
                num(h.handoff_gap_ms.max),
                num(h.announcement_queued_ms.p50),
                num(h.trigger_to_wire_ms.p50),
                num(h.trigger_to_wire_ms.max),
                h.underruns
            );
        }
        s.push('\n');
        let reasons: Vec<_> = r
            .handoffs_by_strategy_profile
            .iter()
            .filter(|h| !h.why.is_empty())
            .collect();
        if !reasons.is_empty() {
            let _ = writeln!(s, "Why a handoff was carried by another strategy:\n");
            for h in reasons {
                for why in &h.why {
                    let _ = writeln!(
                        s,
                        "- {} on {}, {} asked: {why}",
                        h.scenario, h.profile, h.strategy
                    );
                }
            }
            s.push('\n');
        }
        let floors: Vec<_> = r
            .handoffs_by_strategy_profile
            .iter()
            .filter(|h| h.over_floor_ms.samples > 0)
            .collect();
        if !floors.is_empty() {
            let _ = writeln!(
                s,
                "### Silence at each handoff beside its floor\n\nThe floor is the least silence any \
                 client could leave: the model's first-audio latency minus the announcement still \
                 queued when the new agent's trigger went out. *Over floor* is the caller-heard \
                 silence minus it; *spread* is its max − min over every handoff of every call.\n"
            );
            let _ = writeln!(
                s,
                "| scenario | profile | strategy | handoffs | silence p50 | floor p50 | over floor p50 | over floor min / max | spread |"
            );
            let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|");
            for h in floors {
                let o = &h.over_floor_ms;
                let spread = o.max.zip(o.min).map(|(a, b)| a - b);
                let _ = writeln!(
                    s,
                    "| {} | {} | {} | {} | {} | {} | {} | {} / {} | {} |",
                    h.scenario,
                    h.profile,
                    h.strategy,
                    o.samples,
                    num(h.handoff_gap_ms.p50),
                    num(h.floor_ms.p50),
                    num(o.p50),
                    num(o.min),
                    num(o.max),
                    num(spread)
                );
            }
            s.push('\n');
        }
    }

    let rc = &r.reconnects;
    let _ = writeln!(s, "## Reconnects\n");
    if rc.count == 0 {
        let _ = writeln!(
            s,
            "No model reconnects in this run (`reconnect_gap_ms`: 0 samples; \
             `audio_replayed_ms` 0, `audio_lost_ms` 0).\n"
        );
    } else {
        let g = &rc.reconnect_gap_ms;
        let cause: Vec<String> = rc
            .by_cause
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        let outcome: Vec<String> = rc
            .by_outcome
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        let _ = writeln!(
            s,
            "{} reconnects ({}; {}). `reconnect_gap_ms` p50 {}, p95 {}, max {} ({} followed by \
             agent audio); `audio_replayed_ms` {:.0} in all, `audio_lost_ms` {:.0}.\n",
            rc.count,
            cause.join(", "),
            outcome.join(", "),
            num(g.p50),
            num(g.p95),
            num(g.max),
            g.samples,
            rc.audio_replayed_ms,
            rc.audio_lost_ms
        );
    }

    let t = &r.throughput;
    let _ = writeln!(s, "## Throughput\n");
    let _ = writeln!(s, "| measure | value |");
    let _ = writeln!(s, "|---|---|");
    let _ = writeln!(
        s,
        "| call audio processed | {:.1} s (caller fixtures {:.1} s) |",
        t.media_s, t.caller_fixture_s
    );
    let _ = writeln!(
        s,
        "| wall time | {:.2} s, {} calls at once on {} cores |",
        t.wall_s, t.workers, t.cores
    );
    let _ = writeln!(
        s,
        "| process CPU time | {} |",
        t.cpu_s
            .map_or("not measured".into(), |c| format!("{c:.2} s"))
    );
    let _ = writeln!(
        s,
        "| x real time per wall-second | {:.1} |",
        t.x_realtime_per_wall_s
    );
    let _ = writeln!(
        s,
        "| x real time per wall-second per core | {:.1} |",
        t.x_realtime_per_wall_s_per_core
    );
    let _ = writeln!(
        s,
        "| x real time per CPU-second | {} |",
        t.x_realtime_per_cpu_s
            .map_or("—".into(), |x| format!("{x:.1}"))
    );
    let _ = writeln!(
        s,
        "| per call (wall, summed) | {:.2} s: {:.1} x real time per call thread |",
        t.call_wall_s, t.x_realtime_per_call_wall_s
    );
    let _ = writeln!(
        s,
        "| loading scenarios once, before the calls (not above) | {:.2} s wall, {} CPU |",
        t.load_wall_s,
        t.load_cpu_s.map_or("—".into(), |c| format!("{c:.2} s"))
    );
    let _ = writeln!(
        s,
        "\nCall audio = each call's timeline (one 20 ms tick per played frame). Wall and CPU time \
         cover the calls only; CPU is the whole process's (user + system, every thread, read \
         from /proc at 10 ms resolution): baton's pipeline both ways and the mock model on the \
         other end of the socket. {}\n",
        if run.mode == "accelerated" {
            "Accelerated calls skip every wait, so these figures are how fast the work itself \
             goes; other processes on the machine lower them."
        } else {
            "Real-time calls run at 1x each; per CPU-second says roughly how many such calls one \
             core could carry."
        }
    );

    let _ = writeln!(s, "## Scenarios\n");
    let _ = writeln!(
        s,
        "Caller audio is each scenario's WAV as the file holds it; every call mixes it to mono \
         and resamples it to the leg's rate ({}).\n",
        r.run.leg_codec
    );
    let _ = writeln!(
        s,
        "| scenario | caller audio | calls | turns | first_audio_ms p50 | handoffs | underruns | ended |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|---|---|");
    for sc in &r.scenarios {
        let ended: Vec<String> = sc
            .end_reasons
            .iter()
            .map(|(k, v)| format!("{k} ×{v}"))
            .collect();
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} | {} |",
            sc.scenario,
            sc.caller.as_ref().map_or("—".to_owned(), |c| c.describe()),
            sc.calls,
            sc.turns,
            num(sc.first_audio_ms.p50),
            sc.handoffs,
            sc.underruns,
            ended.join("; ")
        );
    }
    s.push('\n');

    let warned: Vec<_> = r
        .scenarios
        .iter()
        .filter(|sc| !sc.warnings.is_empty())
        .collect();
    if !warned.is_empty() {
        let _ = writeln!(s, "## Warnings logged during the calls\n");
        let _ = writeln!(
            s,
            "Kept here rather than printed during the run. A scenario that scripts faults (the \
             mock's `[faults]`: goAway, drops) expects the warnings about them; anywhere else a \
             warning is something to look at.\n"
        );
        for sc in warned {
            let why = if sc.scripted_faults {
                " (scripted faults: expected)"
            } else {
                ""
            };
            let _ = writeln!(s, "- **{}**{why}:", sc.scenario);
            for w in &sc.warnings {
                let _ = writeln!(s, "  - {} ×{}", w.line, w.count);
            }
        }
        s.push('\n');
    }

    let _ = writeln!(s, "## Plots\n");
    for p in &r.plots {
        let _ = writeln!(s, "### {}\n", p.title);
        let _ = writeln!(s, "![{}]({})\n\n[SVG]({})\n", p.title, p.png, p.svg);
    }

    if !r.errors.is_empty() {
        let _ = writeln!(s, "## Failed calls\n");
        for e in &r.errors {
            let _ = writeln!(s, "- {e}");
        }
    }
    s
}
