//! The plots of a fixture report: latency CDFs (per scenario), handoff gaps per strategy, and
//! one call timeline per scenario (a row per profile and strategy).

use std::path::Path;

use super::report::{FixturesReport, PlotRef, ReportError, distinct, profile_of};
use super::samples::{CallSample, Cell};
use crate::plot::cdf::Cdf;
use crate::plot::timeline::{Row, Timeline, agents_heard};
use crate::plot::{self, PlotError};

/// Draws every plot into `dir` (SVG + PNG) and lists them in `report`.
pub fn draw(
    dir: &Path,
    report: &mut FixturesReport,
    samples: &[(&Cell, &CallSample)],
    mode: &str,
) -> Result<(), ReportError> {
    let mut save = |figure: &dyn Fn(&Path) -> Result<(), PlotError>, stem: &str, title: String| {
        figure(&dir.join(stem))?;
        report.plots.push(PlotRef {
            title,
            svg: format!("{stem}.svg"),
            png: format!("{stem}.png"),
        });
        Ok::<_, ReportError>(())
    };
    let by_scenario = |f: fn(&CallSample) -> &Vec<f64>| -> Vec<(String, Vec<f64>)> {
        report_groups(samples, |s| s.meta.name.clone(), |s| f(s).clone())
    };
    for (name, title, series) in [
        (
            "first_audio_ms",
            "first_audio_ms: end of caller speech → first agent audio out",
            by_scenario(|s| &s.report.first_audio_ms),
        ),
        (
            "uplink_added_ms",
            "uplink_added_ms: caller frame received → written to the model socket",
            // Not measured on the virtual clock (see report::UPLINK_NOTE).
            if mode == "accelerated" {
                Vec::new()
            } else {
                by_scenario(|s| &s.report.uplink_added_ms)
            },
        ),
        (
            "downlink_added_ms",
            "downlink_added_ms: model audio received → first frame to the leg",
            by_scenario(|s| &s.report.downlink_added_ms),
        ),
    ] {
        if series.is_empty() {
            continue;
        }
        let cdf = Cdf {
            title: format!("{title} ({mode})"),
            x_desc: format!("{name} (ms)"),
            series,
        };
        save(
            &|p| plot::save(&cdf, p).map(drop),
            &format!("cdf-{name}"),
            cdf.title.clone(),
        )?;
    }
    let mut by_strategy: Vec<(String, Vec<f64>)> = Vec::new();
    for (_, s) in samples {
        for h in &s.report.handoffs {
            let Some(gap) = h.gap_ms else { continue };
            match by_strategy.iter_mut().find(|(k, _)| *k == h.strategy) {
                Some((_, v)) => v.push(gap),
                None => by_strategy.push((h.strategy.clone(), vec![gap])),
            }
        }
    }
    let cdf = Cdf {
        title: format!("handoff_gap_ms by the strategy that carried the handoff ({mode})"),
        x_desc: "handoff_gap_ms: silence heard between two agents (ms)".into(),
        series: by_strategy,
    };
    save(
        &|p| plot::save(&cdf, p).map(drop),
        "cdf-handoff_gap_ms",
        cdf.title.clone(),
    )?;

    for row in &mut report.scenarios {
        let calls: Vec<(&Cell, &CallSample)> = samples
            .iter()
            .filter(|(c, _)| c.scenario_name == row.scenario)
            .copied()
            .collect();
        let Some(figure) = timeline(&row.scenario, &calls, mode) else {
            continue;
        };
        let stem = format!("timeline-{}", file_safe(&row.scenario));
        plot::save(&figure, &dir.join(&stem))?;
        report.plots.push(PlotRef {
            title: figure.title.clone(),
            svg: format!("{stem}.svg"),
            png: format!("{stem}.png"),
        });
        row.timeline = Some(format!("{stem}.png"));
    }

    Ok(())
}

/// Samples grouped by a key, groups in first-seen order.
fn report_groups(
    samples: &[(&Cell, &CallSample)],
    key: impl Fn(&CallSample) -> String,
    values: impl Fn(&CallSample) -> Vec<f64>,
) -> Vec<(String, Vec<f64>)> {
    let mut out: Vec<(String, Vec<f64>)> = Vec::new();
    for (_, s) in samples {
        let k = key(s);
        let v = values(s);
        match out.iter_mut().find(|(o, _)| *o == k) {
            Some((_, acc)) => acc.extend(v),
            None => out.push((k, v)),
        }
    }
    out
}

/// One row per cell (its first call), agents coloured in the order the scenario names them.
fn timeline(scenario: &str, calls: &[(&Cell, &CallSample)], mode: &str) -> Option<Timeline> {
    let first = calls.first()?.1;
    let mut rows = Vec::new();
    let mut shown: Vec<(String, String)> = Vec::new();
    for (cell, s) in calls {
        let key = (profile_of(&s.meta), cell.strategy_label(s.meta.agent_set));
        if shown.contains(&key) {
            continue;
        }
        let label = if s.meta.agent_set {
            let used = distinct(s.report.handoffs.iter().map(|h| h.strategy.as_str()));
            if used.is_empty() || used == [key.1.as_str()] {
                format!("{}\n{}", key.0, key.1)
            } else {
                format!("{}\n{}\n→ carried by {}", key.0, key.1, used.join(", "))
            }
        } else {
            key.0.clone()
        };
        shown.push(key);
        rows.push(Row::from_report(label, &s.report));
    }
    let agents = agents_heard(&first.meta.personas, &rows);
    let per_cell = if calls.len() > rows.len() {
        ", first call of each"
    } else {
        ""
    };
    Some(Timeline {
        title: format!("{scenario}: call timeline ({mode}{per_cell})"),
        agents,
        rows,
    })
}

fn file_safe(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}
