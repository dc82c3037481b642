//! The demo's timeline picture: each call of the scenario as a row (who spoke when, each handoff
//! with its measured gap, reconnects), written as `timeline.svg` and `timeline.png` next to the
//! recording.

use std::path::{Path, PathBuf};

use super::args::DemoError;
use super::handoffs::name_of;
use super::meta::ScenarioMeta;
use crate::plot::timeline::{Row, Timeline, agents_heard};
use crate::server::attach::Ran;

/// Draws the calls' timeline into `out`; returns the SVG's path (`None` without a call).
pub(super) fn draw(
    out: &Path,
    calls: &[Ran],
    metas: &[ScenarioMeta],
    realtime: bool,
) -> Result<Option<PathBuf>, DemoError> {
    if metas.is_empty() {
        return Ok(None);
    }
    let figure = timeline(calls, metas, realtime);
    let (svg, _png) =
        crate::plot::save(&figure, &out.join("timeline")).map_err(|e| DemoError::Output {
            path: e.path.clone(),
            reason: e.reason,
        })?;
    Ok(Some(svg))
}

/// One row per call; each handoff marker names the two agents and the gap.
fn timeline(calls: &[Ran], metas: &[ScenarioMeta], realtime: bool) -> Timeline {
    let mut rows = Vec::new();
    for (i, (ran, meta)) in calls.iter().zip(metas).enumerate() {
        let label = if calls.len() > 1 {
            format!("call {}\n{}", i + 1, meta.profile)
        } else {
            meta.profile.clone()
        };
        let mut row = Row::from_report(label, &ran.report);
        for (marker, h) in row.handoffs.iter_mut().zip(&ran.report.handoffs) {
            marker.label = format!(
                "{} → {}: {}",
                name_of(&meta.agents, &h.from),
                name_of(&meta.agents, &h.to),
                marker.label
            );
        }
        rows.push(row);
    }
    let first = &metas[0];
    let names: Vec<(String, String)> = if first.agents.is_empty() {
        first.personas.clone()
    } else {
        first
            .agents
            .iter()
            .map(|a| (a.id.clone(), a.name.clone()))
            .collect()
    };
    Timeline {
        title: format!(
            "{}: call timeline ({})",
            first.name,
            if realtime { "real time" } else { "accelerated" }
        ),
        agents: agents_heard(&names, &rows),
        rows,
    }
}
