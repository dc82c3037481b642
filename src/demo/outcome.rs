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
