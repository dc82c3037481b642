//! The fixture benchmark's report: distributions gathered from every call's `CallReport`, grouped
//! by scenario, profile and strategy, and written as `report.json`, `report.md` and plots.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Serialize;

use super::host::{self, Machine};
use super::samples::{CallResult, CallSample, CallerFormat, Cell, Clocks, ok};
use crate::call::metrics::{round2, summarize};
use crate::demo::handoffs::HandoffLine;
use crate::plot::PlotError;

/// The report could not be written.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("cannot write {path}: {reason}")]
    Output { path: PathBuf, reason: String },
    #[error(transparent)]
    Plot(#[from] PlotError),
}

/// What the run was, as the command and the machine saw it.
#[derive(Clone, Debug)]
pub struct RunInfo {
    pub command: String,
    pub machine: Machine,
    pub mode: &'static str,
    pub model: String,
    pub leg_codec: &'static str,
    pub calls_per_cell: u32,
    /// Cells left out of the sweep, each with why.
    pub left_out: Vec<String>,
}

/// Percentiles (nearest rank) of one figure; `null`s and `samples: 0` when there were none.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct Stats {
    pub min: Option<f64>,
    pub p50: Option<f64>,
    pub p95: Option<f64>,
    pub p99: Option<f64>,
    pub max: Option<f64>,
    pub mean: Option<f64>,
    pub samples: usize,
}

impl Stats {
    pub fn of(values: &[f64]) -> Stats {
        let s = summarize(values);
        Stats {
            min: values.iter().copied().reduce(f64::min).map(r2),
            p50: s.p50.map(r2),
            p95: s.p95.map(r2),
            p99: s.p99.map(r2),
            max: s.max.map(r2),
            mean: (!values.is_empty())
                .then(|| r2(values.iter().sum::<f64>() / values.len() as f64)),
            samples: values.len(),
        }
    }
}

/// `report.json`.
#[derive(Clone, Debug, Serialize)]
pub struct FixturesReport {
    /// The command line that produced this report.
    pub command: String,
    pub machine: Machine,
    pub run: RunSummary,
    /// Every figure of design §6 over all calls.
    pub figures: Figures,
    /// `handoff_gap_ms` and friends per scenario, profile and strategy.
    pub handoffs_by_strategy_profile: Vec<HandoffRow>,
    /// `first_audio_ms` against the mock's configured latency + VAD window.
    pub first_audio_overhead: Vec<OverheadRow>,
    pub reconnects: Reconnects,
    pub throughput: Throughput,
    pub scenarios: Vec<ScenarioRow>,
    /// Figures written next to the report (file names relative to it).
    pub plots: Vec<PlotRef>,
    /// Calls that failed, with the reason.
    pub errors: Vec<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct RunSummary {
    pub mode: &'static str,
    pub model: String,
    pub leg_codec: &'static str,
    pub scenarios: Vec<String>,
    pub profiles: Vec<String>,
    pub strategies: Vec<String>,
    pub calls_per_cell: u32,
    pub calls: usize,
    pub failed: usize,
    /// Calls run at once.
    pub workers: usize,
    /// Cells left out of the sweep, each with why (a strategy the profile's model cannot carry).
    pub left_out: Vec<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Figures {
    /// Per answered turn.
    pub first_audio_ms: Stats,
    /// Per turn: `first_audio_ms` − (the mock's `first_audio_ms` + its VAD `silence_ms`); embedded
    /// mock only.
    pub first_audio_overhead_ms: Stats,
    /// Real time only: on the virtual clock nothing advances time between a frame's arrival and
    /// its write, so accelerated runs leave it empty (`uplink_note` says so).
    pub uplink_added_ms: Stats,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uplink_note: Option<String>,
    pub downlink_added_ms: Stats,
    /// Per heard handoff, all strategies and profiles (see `handoffs_by_strategy_profile`).
    pub handoff_gap_ms: Stats,
    pub reconnect_gap_ms: Stats,
    pub underruns: Underruns,
}

#[derive(Clone, Debug, Serialize)]
pub struct Underruns {
    pub total: u64,
    pub calls_with_underruns: usize,
    pub per_call: Stats,
}

#[derive(Clone, Debug, Serialize)]
pub struct HandoffRow {
    pub scenario: String,
    pub profile: String,
    /// The strategy asked for (`configured`: each agent's policy).
    pub strategy: String,
    /// The strategies that carried the handoffs (differs when the model cannot carry the one
    /// asked for).
    pub used: Vec<String>,
    /// Why a handoff was carried by another strategy than the one asked for, once per reason.
    pub why: Vec<String>,
    pub calls: usize,
    pub handoffs: usize,
    pub not_heard: usize,
    pub handoff_gap_ms: Stats,
    pub announcement_queued_ms: Stats,
    pub trigger_to_wire_ms: Stats,
    /// Per heard handoff: the least silence any client could leave, the model's first-audio
    /// latency minus the announcement still queued when the new agent's trigger went out (0 when
    /// more was queued). Known for the embedded mock, whose latency is configured.
    pub floor_ms: Stats,
    /// Per heard handoff: the caller-heard silence minus its floor.
    pub over_floor_ms: Stats,
    pub underruns: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct OverheadRow {
    pub scenario: String,
    pub profile: String,
    pub model_first_audio_ms: f64,
    pub silence_ms: f64,
    /// `model_first_audio_ms + silence_ms`.
    pub configured_ms: f64,
    pub first_audio_ms: Stats,
    pub overhead_ms: Stats,
}

#[derive(Clone, Debug, Serialize)]
pub struct Reconnects {
    pub count: usize,
    pub reconnect_gap_ms: Stats,
    /// Totals over every call.
    pub audio_replayed_ms: f64,
    pub audio_lost_ms: f64,
    pub by_cause: BTreeMap<String, usize>,
    pub by_outcome: BTreeMap<String, usize>,
}

/// How fast the calls went. Wall and CPU cover running the calls only: each scenario's files are
/// loaded once before (`load_*`).
#[derive(Clone, Debug, Serialize)]
pub struct Throughput {
    /// Call audio processed: every call's timeline (20 ms per played tick), summed.
    pub media_s: f64,
    /// The caller fixtures' own length, summed.
    pub caller_fixture_s: f64,
    pub wall_s: f64,
    /// Process CPU (user + system, every thread, the embedded mock's work included).
    pub cpu_s: Option<f64>,
    pub workers: usize,
    pub cores: usize,
    /// `media_s / wall_s`.
    pub x_realtime_per_wall_s: f64,
    /// `media_s / wall_s / min(workers, cores)`.
    pub x_realtime_per_wall_s_per_core: f64,
    /// `media_s / cpu_s`: what one fully busy core carries.
    pub x_realtime_per_cpu_s: Option<f64>,
    /// Wall time of each call (copying its loaded scenario, session open to hang-up), summed.
    pub call_wall_s: f64,
    /// `media_s / call_wall_s`: x real time of one call's thread while it runs.
    pub x_realtime_per_call_wall_s: f64,
    /// Loading each scenario's clips, caller fixture and agent set, once, before the calls.
    pub load_wall_s: f64,
    pub load_cpu_s: Option<f64>,
}

#[derive(Clone, Debug, Serialize)]
pub struct ScenarioRow {
    pub scenario: String,
    pub path: String,
    pub calls: usize,
    pub turns: usize,
    pub first_audio_ms: Stats,
    pub handoffs: usize,
    pub underruns: u64,
    pub end_reasons: BTreeMap<String, usize>,
    pub timeline: Option<String>,
    /// The caller recording's format as the file holds it (calls resample it to the leg).
    pub caller: Option<CallerFormat>,
    /// The mock injected faults in this scenario's calls (its `[faults]`): the warnings about
    /// them are expected.
    pub scripted_faults: bool,
    /// What the calls logged at WARN or ERROR (kept here rather than printed), each distinct
    /// line with how often.
    pub warnings: Vec<WarningRow>,
}

#[derive(Clone, Debug, Serialize)]
pub struct WarningRow {
    pub line: String,
    pub count: usize,
}

#[derive(Clone, Debug, Serialize)]
pub struct PlotRef {
    pub title: String,
    pub svg: String,
    pub png: String,
}

/// Why an accelerated run has no `uplink_added_ms` (the demo's own note).
pub const UPLINK_NOTE: &str = crate::demo::UPLINK_NOTE;

/// Rounded to 0.01, never negative zero.
pub fn r2(x: f64) -> f64 {
    round2(x) + 0.0
}

/// The profile a call met: the embedded mock's, or `remote`.
pub(super) fn profile_of(meta: &crate::demo::ScenarioMeta) -> String {
    if meta.embedded_mock {
        meta.profile.clone()
    } else {
        "remote".into()
    }
}

/// Values in first-seen order, once each.
pub(super) fn distinct<'a>(it: impl Iterator<Item = &'a str>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for s in it {
        if !out.iter().any(|o| o == s) {
            out.push(s.to_owned());
        }
    }
    out
}

/// Gathers every call's figures.
pub fn build(
    info: &RunInfo,
    cells: &[Cell],
    results: &[CallResult],
    clocks: Clocks,
) -> FixturesReport {
    let samples: Vec<(&Cell, &CallSample)> = ok(results).map(|(c, s)| (&cells[c], s)).collect();
    let virtual_clock = info.mode == "accelerated";
    let all = |f: fn(&CallSample) -> &Vec<f64>| -> Vec<f64> {
        samples
            .iter()
            .flat_map(|(_, s)| f(s).iter().copied())
            .collect()
    };
    let overhead = |s: &CallSample| -> Vec<f64> {
        let configured = s.meta.model_first_audio_ms + s.meta.silence_ms;
        s.report
            .first_audio_ms
            .iter()
            .map(|v| v - configured)
            .collect()
    };
    let per_call_underruns: Vec<f64> = samples
        .iter()
        .map(|(_, s)| s.report.underruns as f64)
        .collect();
    let heard_gaps: Vec<f64> = samples
        .iter()
        .flat_map(|(_, s)| s.report.handoffs.iter().filter_map(|h| h.gap_ms))
        .collect();
    let figures = Figures {
        first_audio_ms: Stats::of(&all(|s| &s.report.first_audio_ms)),
        first_audio_overhead_ms: Stats::of(
            &samples
                .iter()
                .filter(|(_, s)| s.meta.embedded_mock)
                .flat_map(|(_, s)| overhead(s))
                .collect::<Vec<_>>(),
        ),
        uplink_added_ms: if virtual_clock {
            Stats::default()
        } else {
            Stats::of(&all(|s| &s.report.uplink_added_ms))
        },
        uplink_note: virtual_clock.then(|| UPLINK_NOTE.to_owned()),
        downlink_added_ms: Stats::of(&all(|s| &s.report.downlink_added_ms)),
        handoff_gap_ms: Stats::of(&heard_gaps),
        reconnect_gap_ms: Stats::of(&all(|s| &s.report.reconnect_gap_ms)),
        underruns: Underruns {
            total: samples.iter().map(|(_, s)| s.report.underruns).sum(),
            calls_with_underruns: samples
                .iter()
                .filter(|(_, s)| s.report.underruns > 0)
                .count(),
            per_call: Stats::of(&per_call_underruns),
        },
    };

    // Handoffs per (scenario, profile, strategy), in sweep order.
    let mut handoffs_by_strategy_profile = Vec::new();
    let mut keys: Vec<(String, String, String)> = Vec::new();
    for (cell, s) in samples.iter().filter(|(_, s)| s.meta.agent_set) {
        let key = (
            s.meta.name.clone(),
            profile_of(&s.meta),
            cell.strategy_label(true),
        );
        if !keys.contains(&key) {
            keys.push(key);
        }
    }
    for (scenario, profile, strategy) in keys {
        let group: Vec<&CallSample> = samples
            .iter()
            .filter(|(c, s)| {
                s.meta.agent_set
                    && s.meta.name == scenario
                    && profile_of(&s.meta) == profile
                    && c.strategy_label(true) == strategy
            })
            .map(|(_, s)| *s)
            .collect();
        let hs: Vec<_> = group.iter().flat_map(|s| &s.report.handoffs).collect();
        let field = |f: fn(&crate::call::HandoffRecord) -> Option<f64>| {
            Stats::of(&hs.iter().filter_map(|h| f(h)).collect::<Vec<_>>())
        };
        let pairs: Vec<(f64, f64)> = group
            .iter()
            .filter(|s| s.meta.embedded_mock)
            .flat_map(|s| {
                let latency = s.meta.model_first_audio_ms;
                s.report.handoffs.iter().filter_map(move |h| {
                    let floor = (latency - h.queued_at_trigger_ms?).max(0.0);
                    Some((floor, h.gap_ms? - floor))
                })
            })
            .collect();
        let floor_ms = Stats::of(&pairs.iter().map(|p| p.0).collect::<Vec<_>>());
        let over_floor_ms = Stats::of(&pairs.iter().map(|p| p.1).collect::<Vec<_>>());
        let why: Vec<String> = group
            .iter()
            .flat_map(|s| {
                s.report
                    .handoffs
                    .iter()
                    .filter_map(|h| HandoffLine::explain(&s.meta.agents, h).why)
            })
            .collect();
        handoffs_by_strategy_profile.push(HandoffRow {
            floor_ms,
            over_floor_ms,
            used: distinct(hs.iter().map(|h| h.strategy.as_str())),
            why: distinct(why.iter().map(String::as_str)),
            calls: group.len(),
            handoffs: hs.len(),
            not_heard: hs.iter().filter(|h| h.gap_ms.is_none()).count(),
            handoff_gap_ms: field(|h| h.gap_ms),
            announcement_queued_ms: field(|h| h.announcement_queued_ms),
            trigger_to_wire_ms: field(|h| h.trigger_to_wire_ms),
            underruns: group.iter().map(|s| s.report.underruns).sum(),
            scenario,
            profile,
            strategy,
        });
    }

    let mut first_audio_overhead = Vec::new();
    let mut seen: Vec<(String, String)> = Vec::new();
    for (_, s) in samples.iter().filter(|(_, s)| s.meta.embedded_mock) {
        let key = (s.meta.name.clone(), s.meta.profile.clone());
        if seen.contains(&key) {
            continue;
        }
        seen.push(key);
        let group: Vec<&CallSample> = samples
            .iter()
            .filter(|(_, o)| {
                o.meta.embedded_mock
                    && o.meta.name == s.meta.name
                    && o.meta.profile == s.meta.profile
            })
            .map(|(_, o)| *o)
            .collect();
        let v2v: Vec<f64> = group
            .iter()
            .flat_map(|g| g.report.first_audio_ms.iter().copied())
            .collect();
        let over: Vec<f64> = group.iter().flat_map(|g| overhead(g)).collect();
        first_audio_overhead.push(OverheadRow {
            scenario: s.meta.name.clone(),
            profile: s.meta.profile.clone(),
            model_first_audio_ms: s.meta.model_first_audio_ms,
            silence_ms: s.meta.silence_ms,
            configured_ms: s.meta.model_first_audio_ms + s.meta.silence_ms,
            first_audio_ms: Stats::of(&v2v),
            overhead_ms: Stats::of(&over),
        });
    }

    let reconnects = {
        let rs: Vec<_> = samples
            .iter()
            .flat_map(|(_, s)| &s.report.reconnects)
            .collect();
        let mut by_cause = BTreeMap::new();
        let mut by_outcome = BTreeMap::new();
        for r in &rs {
            *by_cause.entry(r.cause.clone()).or_insert(0) += 1;
            *by_outcome.entry(r.outcome.clone()).or_insert(0) += 1;
        }
        Reconnects {
            count: rs.len(),
            reconnect_gap_ms: figures.reconnect_gap_ms.clone(),
            audio_replayed_ms: r2(samples
                .iter()
                .map(|(_, s)| s.report.audio_replayed_ms)
                .sum()),
            audio_lost_ms: r2(samples.iter().map(|(_, s)| s.report.audio_lost_ms).sum()),
            by_cause,
            by_outcome,
        }
    };

    let media_s: f64 = samples
        .iter()
        .map(|(_, s)| s.report.frames_played as f64 * 0.02)
        .sum();
    let wall_s = clocks.wall.as_secs_f64();
    let cores = host::cores();
    let call_wall_s: f64 = samples.iter().map(|(_, s)| s.call_wall.as_secs_f64()).sum();
    let per = |a: f64, b: f64| if b > 0.0 { round2(a / b) } else { 0.0 };
    let throughput = Throughput {
        media_s: round2(media_s),
        caller_fixture_s: round2(samples.iter().map(|(_, s)| s.meta.caller_s).sum()),
        wall_s: round2(wall_s),
        cpu_s: clocks.cpu.map(|c| round2(c.as_secs_f64())),
        workers: clocks.workers,
        cores,
        x_realtime_per_wall_s: per(media_s, wall_s),
        x_realtime_per_wall_s_per_core: per(
            media_s,
            wall_s * clocks.workers.min(cores).max(1) as f64,
        ),
        x_realtime_per_cpu_s: clocks.cpu.map(|c| per(media_s, c.as_secs_f64())),
        call_wall_s: round2(call_wall_s),
        x_realtime_per_call_wall_s: per(media_s, call_wall_s),
        load_wall_s: round2(clocks.load_wall.as_secs_f64()),
        load_cpu_s: clocks.load_cpu.map(|c| round2(c.as_secs_f64())),
    };

    let scenario_names = distinct(cells.iter().map(|c| c.scenario_name.as_str()));
    let scenarios = scenario_names
        .iter()
        .map(|name| {
            let group: Vec<&CallSample> = samples
                .iter()
                .filter(|(c, _)| &c.scenario_name == name)
                .map(|(_, s)| *s)
                .collect();
            let mut warnings: Vec<WarningRow> = Vec::new();
            for line in results
                .iter()
                .filter(|r| &cells[r.cell].scenario_name == name)
                .flat_map(|r| &r.warnings)
            {
                match warnings.iter_mut().find(|w| &w.line == line) {
                    Some(w) => w.count += 1,
                    None => warnings.push(WarningRow {
                        line: line.clone(),
                        count: 1,
                    }),
                }
            }
            let mut end_reasons = BTreeMap::new();
            for s in &group {
                *end_reasons.entry(s.report.end_reason.clone()).or_insert(0) += 1;
            }
            ScenarioRow {
                scenario: name.clone(),
                path: cells
                    .iter()
                    .find(|c| &c.scenario_name == name)
                    .map(|c| c.scenario.display().to_string())
                    .unwrap_or_default(),
                calls: group.len(),
                turns: group.iter().map(|s| s.report.turns.len()).sum(),
                first_audio_ms: Stats::of(
                    &group
                        .iter()
                        .flat_map(|s| s.report.first_audio_ms.iter().copied())
                        .collect::<Vec<_>>(),
                ),
                handoffs: group.iter().map(|s| s.report.handoffs.len()).sum(),
                underruns: group.iter().map(|s| s.report.underruns).sum(),
                end_reasons,
                timeline: None,
                caller: cells
                    .iter()
                    .find(|c| &c.scenario_name == name)
                    .and_then(|c| c.caller.clone()),
                scripted_faults: group.iter().any(|s| s.meta.scripted_faults),
                warnings,
            }
        })
        .collect();

    FixturesReport {
        command: info.command.clone(),
        machine: info.machine.clone(),
        run: RunSummary {
            mode: info.mode,
            model: info.model.clone(),
            leg_codec: info.leg_codec,
            scenarios: scenario_names,
            profiles: distinct(samples.iter().map(|(_, s)| s.meta.profile.as_str())),
            strategies: distinct(
                samples
                    .iter()
                    .map(|(c, s)| c.strategy_label(s.meta.agent_set))
                    .collect::<Vec<_>>()
                    .iter()
                    .map(String::as_str),
            ),
            calls_per_cell: info.calls_per_cell,
            calls: results.len(),
            failed: results.iter().filter(|r| r.outcome.is_err()).count(),
            workers: clocks.workers,
            left_out: info.left_out.clone(),
        },
        figures,
        handoffs_by_strategy_profile,
        first_audio_overhead,
        reconnects,
        throughput,
        scenarios,
        plots: Vec::new(),
        errors: results
            .iter()
            .filter_map(|r| r.outcome.as_ref().err().cloned())
            .collect(),
    }
}
