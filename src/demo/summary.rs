//! `summary.json`: the figures of a demo run under the names every baton report uses, and how
//! the calls' reports become them. A scenario of several calls (seed 001) has its top-level
//! figures cover every call, and each call's own in `call_list`.

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::args::DemoArgs;
use super::handoffs::HandoffLine;
use super::meta::ScenarioMeta;
use crate::call::metrics::{Summary, round2, summarize};
use crate::call::{CallReport, ReconnectRecord};
use crate::server::attach::Ran;

/// Why an accelerated run has no `uplink_added_ms` (`uplink_note`; the bench reports say the same).
pub const UPLINK_NOTE: &str = "not measured on the virtual clock: nothing advances it between a \
    frame's arrival and its write to the model socket (run with --realtime)";

/// `summary.json`: names fixed across baton's reports.
#[derive(Clone, Debug, Serialize)]
pub struct DemoSummary {
    /// How many calls the scenario made (seed 001 makes two). The figures that follow cover
    /// every call (counts summed, percentiles over all the calls' samples, each handoff,
    /// reconnect and transfer with the `call` it happened in, counted from 1, when there are
    /// several); each call's own figures are its entry in `call_list`.
    pub calls: u32,
    #[serde(flatten)]
    pub figures: Figures,
    /// The first call's recording (`call.wav`); each call's (`call<n>.wav` for the n-th) is its
    /// `call_list` entry's `recording`.
    pub recording: String,
    /// The call timeline picture (SVG; a PNG beside it), one row per call.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeline: Option<String>,
    pub mode: &'static str,
    pub leg_codec: &'static str,
    /// Why the call ended; for several calls the one reason they all ended for, else each
    /// call's as `call 1: …; call 2: …`.
    pub end_reason: String,
    /// Every call of a scenario of several calls, in order, each with all its own figures
    /// (absent for a scenario of one call, whose figures are the ones above).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub call_list: Vec<CallSummary>,
    /// Each transfer to a person: its request, its stages and its one outcome, as the call's
    /// feed has them (`transfer_requested`, `transfer`); with `call` when there are several.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub transfers: Vec<serde_json::Value>,
    /// The person's side of a warm transfer whose phone the demo played: `person.wav`, what they
    /// said (left) and heard (right). With several calls, the first one recorded
    /// (`person<n>.wav` for the n-th call); each call's is in its `call_list` entry.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub person_recording: Option<String>,
}

/// The figures of one call, or of every call of a scenario together.
#[derive(Clone, Debug, Serialize)]
pub struct Figures {
    pub turns: usize,
    pub first_audio_ms: P95,
    /// Caller frame received → written to the model socket; null when it was not measured (an
    /// accelerated run: `uplink_note` says why).
    pub uplink_added_ms: Option<P99>,
    /// Why `uplink_added_ms` is null.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uplink_note: Option<&'static str>,
    pub downlink_added_ms: P99,
    pub underruns: u64,
    /// Each handoff with the strategy asked for (`asked`), the one that carried it (`strategy`)
    /// and why they differ (`why`).
    pub handoffs: Vec<InCall<HandoffLine>>,
    pub handoff_gap_ms: Option<P95>,
    /// Model session switches (goAway, drops) and what they cost.
    pub reconnects: Vec<InCall<ReconnectRecord>>,
    pub reconnect_gap_ms: Option<P95>,
    pub audio_replayed_ms: f64,
    pub audio_lost_ms: f64,
}

/// One call of a scenario of several, with everything the top level has for a single call.
#[derive(Clone, Debug, Serialize)]
pub struct CallSummary {
    /// Its place in the scenario, counted from 1.
    pub call: u32,
    /// Its id in the store.
    pub call_id: String,
    /// Its scenario's `name` (seed 001's second call is `seed001-call2`).
    pub scenario: String,
    #[serde(flatten)]
    pub figures: Figures,
    /// Its recording: `call.wav` for the first, `call<n>.wav` for the n-th.
    pub recording: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub person_recording: Option<String>,
    pub end_reason: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub transfers: Vec<serde_json::Value>,
    /// How long loading the caller's contexts took.
    pub context_load_ms: Option<f64>,
    /// What happened to the caller's contexts.
    pub contexts: Vec<String>,
    pub sidecars: Option<crate::agents::sidecar::SidecarReport>,
}

/// An item of one call among several: `call` (from 1) beside its own fields, absent for a
/// scenario of one call.
#[derive(Clone, Debug, Serialize)]
pub struct InCall<T> {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub call: Option<u32>,
    #[serde(flatten)]
    pub item: T,
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
fn reconnect(r: &ReconnectRecord) -> ReconnectRecord {
    ReconnectRecord {
        at_ms: r.at_ms + 0.0,
        gap_ms: r.gap_ms.map(|v| v + 0.0),
        model_audio_queued_ms: r.model_audio_queued_ms + 0.0,
        audio_replayed_ms: r.audio_replayed_ms + 0.0,
        audio_lost_ms: r.audio_lost_ms + 0.0,
        ..r.clone()
    }
}

/// The files the demo wrote for one call.
pub(super) struct Written {
    pub recording: PathBuf,
    pub person: Option<PathBuf>,
}

impl Figures {
    /// The figures of `calls` together (`(call number, report, scenario)`), each handoff and
    /// reconnect tagged with its call when `tag`; uplink figures only when `measured` (on the
    /// real clock).
    fn of(calls: &[(u32, &CallReport, &ScenarioMeta)], tag: bool, measured: bool) -> Figures {
        let all = |f: fn(&CallReport) -> &Vec<f64>| -> Vec<f64> {
            calls
                .iter()
                .flat_map(|(_, r, _)| f(r).iter().copied())
                .collect()
        };
        let call = |n: u32| tag.then_some(n);
        let handoffs: Vec<InCall<HandoffLine>> = calls
            .iter()
            .flat_map(|&(n, r, meta)| {
                r.handoffs.iter().map(move |h| InCall {
                    call: call(n),
                    item: HandoffLine::explain(&meta.agents, &handoff(h)),
                })
            })
            .collect();
        let reconnects: Vec<InCall<ReconnectRecord>> = calls
            .iter()
            .flat_map(|&(n, r, _)| {
                r.reconnects.iter().map(move |c| InCall {
                    call: call(n),
                    item: reconnect(c),
                })
            })
            .collect();
        Figures {
            turns: calls.iter().map(|(_, r, _)| r.turns.len()).sum(),
            first_audio_ms: summarize(&all(|r| &r.first_audio_ms)).into(),
            uplink_added_ms: measured.then(|| summarize(&all(|r| &r.uplink_added_ms)).into()),
            uplink_note: (!measured).then_some(UPLINK_NOTE),
            downlink_added_ms: summarize(&all(|r| &r.downlink_added_ms)).into(),
            underruns: calls.iter().map(|(_, r, _)| r.underruns).sum(),
            handoff_gap_ms: (!handoffs.is_empty()).then(|| {
                let gaps: Vec<f64> = handoffs
                    .iter()
                    .filter_map(|h| h.item.record.gap_ms)
                    .collect();
                summarize(&gaps).into()
            }),
            handoffs,
            reconnect_gap_ms: (!reconnects.is_empty())
                .then(|| summarize(&all(|r| &r.reconnect_gap_ms)).into()),
            reconnects,
            audio_replayed_ms: r2(calls.iter().map(|(_, r, _)| r.audio_replayed_ms).sum()),
            audio_lost_ms: r2(calls.iter().map(|(_, r, _)| r.audio_lost_ms).sum()),
        }
    }
}

/// A call's transfers to a person, as its feed has them; with `call` when given.
fn transfers(report: &CallReport, call: Option<u32>) -> Vec<serde_json::Value> {
    report
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
        .map(|mut v| {
            if let (Some(n), Some(o)) = (call, v.as_object_mut()) {
                o.insert("call".into(), n.into());
            }
            v
        })
        .collect()
}

/// How every call ended: the one reason, else each call's.
fn end_reason(calls: &[Ran]) -> String {
    match calls {
        [] => String::new(),
        [first, rest @ ..]
            if rest
                .iter()
                .all(|c| c.report.end_reason == first.report.end_reason) =>
        {
            first.report.end_reason.clone()
        }
        _ => calls
            .iter()
            .enumerate()
            .map(|(i, c)| format!("call {}: {}", i + 1, c.report.end_reason))
            .collect::<Vec<_>>()
            .join("; "),
    }
}

fn display(p: &Path) -> String {
    p.display().to_string()
}

/// The demo's `summary.json` for its calls (in order, with each one's scenario and files).
pub(super) fn summarize_calls(
    calls: &[Ran],
    metas: &[ScenarioMeta],
    written: &[Written],
    args: &DemoArgs,
    realtime: bool,
) -> DemoSummary {
    let several = calls.len() > 1;
    let numbered: Vec<(u32, &CallReport, &ScenarioMeta)> = calls
        .iter()
        .zip(metas)
        .enumerate()
        .map(|(i, (c, m))| (i as u32 + 1, &c.report, m))
        .collect();
    let call_list = if several {
        numbered
            .iter()
            .zip(calls.iter().zip(written))
            .map(|(&(n, report, meta), (ran, w))| CallSummary {
                call: n,
                call_id: ran.id.clone(),
                scenario: meta.name.clone(),
                figures: Figures::of(&[(n, report, meta)], false, realtime),
                recording: display(&w.recording),
                person_recording: w.person.as_deref().map(display),
                end_reason: report.end_reason.clone(),
                transfers: transfers(report, None),
                context_load_ms: ran.context_load_ms,
                contexts: ran.context_ops.iter().map(describe).collect(),
                sidecars: ran.sidecars.clone(),
            })
            .collect()
    } else {
        Vec::new()
    };
    DemoSummary {
        calls: calls.len() as u32,
        figures: Figures::of(&numbered, several, realtime),
        recording: written
            .first()
            .map(|w| display(&w.recording))
            .unwrap_or_default(),
        timeline: None,
        mode: if realtime { "realtime" } else { "accelerated" },
        leg_codec: args.leg_codec.name(),
        end_reason: end_reason(calls),
        call_list,
        transfers: numbered
            .iter()
            .flat_map(|&(n, r, _)| transfers(r, several.then_some(n)))
            .collect(),
        person_recording: written
            .iter()
            .find_map(|w| w.person.as_deref().map(display)),
    }
}

/// A context operation in words.
pub fn describe(op: &crate::agents::contexts::ContextOp) -> String {
    use crate::agents::contexts::ContextOp;
    match op {
        ContextOp::Activate {
            id, agent, summary, ..
        } => format!("{id} activated for {agent}: \"{summary}\""),
        ContextOp::Resume { id, agent, .. } => format!("{id} resumed for {agent}"),
        ContextOp::Pause { id, data } => format!("{id} paused, working state {data}"),
        ContextOp::Complete { id, data } => format!("{id} completed, working state {data}"),
    }
}
