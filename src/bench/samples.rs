//! What the fixture benchmark measured, call by call: the sweep's cells (scenario, strategy,
//! profile, the caller recording's format), each finished call's report and wall time, and how
//! the run went on the clocks. The report, its plots and its tables are built from these.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;

use crate::call::CallReport;
use crate::call::metrics::round2;
use crate::demo::ScenarioMeta;

/// A caller WAV's format: what the file holds, before baton mixes it to mono and resamples it to
/// the leg's rate.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CallerFormat {
    pub file: String,
    pub sample_rate_hz: u32,
    pub channels: u16,
    /// `16-bit integer`, `32-bit float`, …
    pub samples: String,
    pub seconds: f64,
}

impl CallerFormat {
    /// The format of the WAV at `path`; `None` if it cannot be read (the call's own load says
    /// why).
    pub fn read(path: &Path) -> Option<CallerFormat> {
        let reader = hound::WavReader::open(path).ok()?;
        let spec = reader.spec();
        let kind = match spec.sample_format {
            hound::SampleFormat::Int => "integer",
            hound::SampleFormat::Float => "float",
        };
        Some(CallerFormat {
            file: path.display().to_string(),
            sample_rate_hz: spec.sample_rate,
            channels: spec.channels,
            samples: format!("{}-bit {kind}", spec.bits_per_sample),
            seconds: round2(f64::from(reader.duration()) / f64::from(spec.sample_rate.max(1)))
                + 0.0,
        })
    }

    /// `44100 Hz, 2 channels, 16-bit integer, 3.20 s`.
    pub fn describe(&self) -> String {
        format!(
            "{} Hz, {} channel{}, {}, {:.2} s",
            self.sample_rate_hz,
            self.channels,
            if self.channels == 1 { "" } else { "s" },
            self.samples,
            self.seconds
        )
    }
}

/// One point of the sweep; each runs `--calls` times.
#[derive(Clone, Debug)]
pub struct Cell {
    pub scenario: PathBuf,
    /// Index of the scenario's loaded files in
    /// [`Plan::prepared`](crate::bench::fixtures::Plan::prepared).
    pub prepared: usize,
    /// The scenario's name.
    pub scenario_name: String,
    /// `None`: the agents' configured policy (or no agent set).
    pub strategy: Option<String>,
    /// `None`: the scenario's profile (or a remote model's own).
    pub profile: Option<String>,
    /// The caller recording's file format, as read (before resampling to the leg's rate).
    pub caller: Option<CallerFormat>,
}

impl Cell {
    /// `configured` without a forced strategy, `none` without an agent set.
    pub fn strategy_label(&self, agent_set: bool) -> String {
        match (&self.strategy, agent_set) {
            (Some(s), _) => s.clone(),
            (None, true) => "configured".into(),
            (None, false) => "none".into(),
        }
    }
}

/// One finished call.
pub struct CallSample {
    pub meta: ScenarioMeta,
    pub report: CallReport,
    /// Copying the loaded scenario and opening the session through hang-up.
    pub call_wall: Duration,
}

/// The result of one call of one cell.
pub struct CallResult {
    pub cell: usize,
    pub rep: u32,
    pub outcome: Result<CallSample, String>,
    /// What the call logged at WARN and ERROR (kept here, not printed).
    pub warnings: Vec<String>,
    /// How long the call took to run (for the progress's estimate).
    pub took: std::time::Duration,
}

/// How the run went on the clocks.
#[derive(Clone, Copy, Debug)]
pub struct Clocks {
    /// Running the calls.
    pub wall: Duration,
    /// Process CPU time while the calls ran (all threads), if it could be read.
    pub cpu: Option<Duration>,
    /// Loading the scenarios, clips, fixtures and agent sets, once each, before the calls.
    pub load_wall: Duration,
    pub load_cpu: Option<Duration>,
    pub workers: usize,
}

/// The calls that finished, with their cell's index.
pub(super) fn ok(results: &[CallResult]) -> impl Iterator<Item = (usize, &CallSample)> {
    results
        .iter()
        .filter_map(|r| Some((r.cell, r.outcome.as_ref().ok()?)))
}
