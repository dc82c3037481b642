//! What one call's scenario set up (after the command line's overrides): the names, the model
//! profile and its configured latency, the personas and agents the report speaks of.

use std::path::PathBuf;

use serde::Serialize;

use super::handoffs;

/// What one call's scenario set up, after the command line's overrides.
#[derive(Clone, Debug, Serialize)]
pub struct ScenarioMeta {
    /// The scenario's `name`.
    pub name: String,
    /// The scenario's one-line description.
    pub description: String,
    pub path: PathBuf,
    /// The embedded mock's profile (the scenario's unless overridden).
    pub profile: String,
    /// The embedded mock's configured first-audio latency (ms).
    pub model_first_audio_ms: f64,
    /// The VAD silence window that ends a caller turn (ms).
    pub silence_ms: f64,
    /// The agents the scenario's personas speak as: `(id, name)`.
    pub personas: Vec<(String, String)>,
    /// The call ran an agent set.
    pub agent_set: bool,
    /// Length of the caller fixture (s).
    pub caller_s: f64,
    /// The model was the embedded mock (so its configured latency is what the call met).
    pub embedded_mock: bool,
    /// The agent set's agents, with the strategy each one's policy asks for (empty without a
    /// set).
    pub agents: Vec<handoffs::AgentMeta>,
    /// The scenario has the mock inject faults (goAway, drops, late pongs, garbage, refused
    /// resumes): the reconnects and the warnings about them are what it is for.
    pub scripted_faults: bool,
}
