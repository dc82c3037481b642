//! `summary.json`: the figures of a demo call under the names every baton report uses, and how
//! one call's report becomes them.

use std::path::Path;

use serde::Serialize;

use super::args::DemoArgs;
use super::handoffs::HandoffLine;
use super::meta::ScenarioMeta;
use crate::call::CallReport;
use crate::call::metrics::{Summary, round2, summarize};

/// `summary.json`: names fixed across baton's reports.
#[derive(Clone, Debug, Serialize)]
pub struct DemoSummary {
    pub calls: u32,
    pub turns: usize,
    pub first_audio_ms: P95,
    pub uplink_added_ms: P99,
    pub downlink_added_ms: P99,
    pub underruns: u64,
    /// Each handoff with the strategy asked for (`asked`), the one that carried it (`strategy`)
    /// and why they differ (`why`).
    pub handoffs: Vec<HandoffLine>,
    pub handoff_gap_ms: Option<P95>,
    /// Model session switches (goAway, drops) and what they cost.
    pub reconnects: Vec<crate::call::ReconnectRecord>,
    pub reconnect_gap_ms: Option<P95>,
    pub audio_replayed_ms: f64,
    pub audio_lost_ms: f64,
    pub recording: String,
    /// The call timeline picture (SVG; a PNG beside it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeline: Option<String>,
    pub mode: &'static str,
    pub leg_codec: &'static str,
    pub end_reason: String,
    /// Every call of a scenario of several calls (the fields above are the first one's).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub call_list: Vec<serde_json::Value>,
    /// Each transfer to a person: its request, its stages and its one outcome, as the call's
    /// feed has them (`transfer_requested`, `transfer`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub transfers: Vec<serde_json::Value>,
    /// The person's side of a warm transfer whose phone the demo played: `person.wav`, what they
    /// said (left) and heard (right).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub person_recording: Option<String>,
}

/// `{"p50","p95","max"}`; null where there were no samples.
#[derive(Clone, Debug, Default, Serialize)]
pub struct P95 {
    pub p50: Option<f64>,
    pub p95: Option<f64>,
    pub max: Option<f64>,
}

/// `{"p50","p99","max"}`; null where there were no samples.
#[derive(Clone, Debug, Default, Serialize)]
pub struct P99 {
    pub p50: Option<f64>,
    pub p99: Option<f64>,
    pub max: Option<f64>,
}

/// Rounded to 0.01, never negative zero (`-0.0 + 0.0` is `0.0`).
fn r2(x: f64) -> f64 {
    round2(x) + 0.0
}

impl From<Summary> for P95 {
    fn from(s: Summary) -> Self {
        P95 {
            p50: s.p50.map(r2),
            p95: s.p95.map(r2),
            max: s.max.map(r2),
        }
    }
}

impl From<Summary> for P99 {
    fn from(s: Summary) -> Self {
        P99 {
            p50: s.p50.map(r2),
            p99: s.p99.map(r2),
            max: s.max.map(r2),
        }
    }
}

/// A handoff's figures without negative zeros.
fn handoff(h: &crate::call::HandoffRecord) -> crate::call::HandoffRecord {
    let z = |x: Option<f64>| x.map(|v| v + 0.0);
    crate::call::HandoffRecord {
        gap_ms: z(h.gap_ms),
        announcement_queued_ms: z(h.announcement_queued_ms),
        trigger_to_wire_ms: z(h.trigger_to_wire_ms),
        heard_at_ms: z(h.heard_at_ms),
        queued_at_trigger_ms: z(h.queued_at_trigger_ms),
        ..h.clone()
    }
}

/// A reconnect's figures without negative zeros.
fn reconnect(r: &crate::call::ReconnectRecord) -> crate::call::ReconnectRecord {
    crate::call::ReconnectRecord {
        at_ms: r.at_ms + 0.0,
        gap_ms: r.gap_ms.map(|v| v + 0.0),
        model_audio_queued_ms: r.model_audio_queued_ms + 0.0,
        audio_replayed_ms: r.audio_replayed_ms + 0.0,
        audio_lost_ms: r.audio_lost_ms + 0.0,
        ..r.clone()
    }
}

/// The summary of one call (the demo's `summary.json`, before a scenario's further calls).
pub(super) fn summarize_call(
    report: &CallReport,
    meta: &ScenarioMeta,
    wav_path: &Path,
    args: &DemoArgs,
    realtime: bool,
) -> DemoSummary {
    DemoSummary {
        calls: 1,
        turns: report.turns.len(),
        first_audio_ms: summarize(&report.first_audio_ms).into(),
        uplink_added_ms: summarize(&report.uplink_added_ms).into(),
        downlink_added_ms: summarize(&report.downlink_added_ms).into(),
        underruns: report.underruns,
        handoffs: report
            .handoffs
            .iter()
            .map(|h| HandoffLine::explain(&meta.agents, &handoff(h)))
            .collect(),
        handoff_gap_ms: (!report.handoffs.is_empty()).then(|| {
            let gaps: Vec<f64> = report.handoffs.iter().filter_map(|h| h.gap_ms).collect();
            summarize(&gaps).into()
        }),
        reconnects: report.reconnects.iter().map(reconnect).collect(),
        reconnect_gap_ms: (!report.reconnects.is_empty())
            .then(|| summarize(&report.reconnect_gap_ms).into()),
        audio_replayed_ms: r2(report.audio_replayed_ms),
        audio_lost_ms: r2(report.audio_lost_ms),
        recording: wav_path.display().to_string(),
        timeline: None,
        mode: if realtime { "realtime" } else { "accelerated" },
        leg_codec: args.leg_codec.name(),
        end_reason: report.end_reason.clone(),
        call_list: Vec::new(),
        transfers: report
            .events
            .iter()
            .filter(|e| {
                matches!(
                    e,
                    crate::agents::CallEvent::TransferRequested { .. }
                        | crate::agents::CallEvent::Transfer { .. }
                )
            })
            .filter_map(|e| serde_json::to_value(e).ok())
            .collect(),
        person_recording: None,
    }
}
