//! What a demo run produced: the summary, and each call's report and recording.

use std::path::PathBuf;

use super::meta::ScenarioMeta;
use super::summary::DemoSummary;
use crate::call::CallReport;

/// Everything a demo run produced.
pub struct DemoOutcome {
    pub summary: DemoSummary,
    /// The first call's report.
    pub report: CallReport,
    /// Every call, in order, with its contexts, sidecars and store id.
    pub calls: Vec<crate::server::attach::Ran>,
    /// What each call's scenario set up, in the order of `calls`.
    pub metas: Vec<ScenarioMeta>,
    /// The call timeline picture (SVG; a PNG beside it), when it could be drawn.
    pub timeline: Option<PathBuf>,
}

impl DemoOutcome {
    /// Why a call did not play to its end, when one lost its model for good (the demo then
    /// fails: its figures describe a cut call).
    pub fn failure(&self) -> Option<String> {
        lost_model(self.calls.iter().map(|c| c.report.end_reason.as_str()))
    }
}

/// The first of `reasons` (each call's, in order) that says the call lost its model for good.
fn lost_model<'a>(reasons: impl Iterator<Item = &'a str>) -> Option<String> {
    reasons.enumerate().find_map(|(i, r)| {
        (matches!(
            crate::server::metrics::end_label(r),
            "model_lost" | "model_reopen_failed"
        ) || r.starts_with("model socket dead"))
        .then(|| format!("call {} ended: {r}", i + 1))
    })
}

/// One call without the demo's files: its report, what the caller heard, and how long the parts
/// took on the wall clock.
pub struct CallOutcome {
    pub meta: ScenarioMeta,
    pub report: CallReport,
    pub recording: crate::leg::fixture::Recording,
    /// What the person of a warm transfer heard and said, when the demo played their phone.
    pub person: Option<super::phone::PersonRecording>,
    /// Loading the scenario, its clips, the caller fixture and the agent set (by
    /// [`run_call`](crate::demo::run_call)), then copying them and setting up the model backend.
    pub prepare_wall: std::time::Duration,
    /// Opening the session and running the call to its end.
    pub call_wall: std::time::Duration,
}

#[cfg(test)]
mod tests {
    use super::lost_model;

    #[test]
    fn a_call_that_lost_its_model_fails_the_demo() {
        let ended = ["caller hung up", "transferred to Ravi"];
        assert_eq!(lost_model(ended.into_iter()), None);
        let cut = [
            "caller hung up",
            "no model session could be reopened after 5 attempts (closed:1006)",
        ];
        assert_eq!(
            lost_model(cut.into_iter()).as_deref(),
            Some("call 2 ended: no model session could be reopened after 5 attempts (closed:1006)")
        );
        assert!(lost_model(["model connection lost: reset"].into_iter()).is_some());
        assert!(lost_model(["model socket dead: nothing received for 5s"].into_iter()).is_some());
    }
}
