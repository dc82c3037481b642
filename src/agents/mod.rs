//! Agents: the agent sets of `config/agents/` (who the agents are, their tools, triggers and
//! policies), and what the model is given for them.
//!
//! Modules, one job each: [`config`] (the file as written), [`load`] (validation, every problem
//! with key and fix), [`registry`] (the validated set), [`matching`] (keywords, patterns,
//! call-data conditions), [`phrases`] (seed 002 handoff phrases), [`tools`] (function
//! declarations, the tool filter, function responses), [`prompts`] (instructions and briefs),
//! [`setup`] (a session's setup and transferred history), [`strategy`] (how a handoff reaches the
//! model, and when), [`events`] (call events, transcript, agent history).

pub mod config;
pub mod events;
pub mod load;
pub mod matching;
pub mod phrases;
pub mod prompts;
pub mod registry;
pub mod setup;
pub mod strategy;
pub mod tools;

pub use events::{AgentActivation, CallEvent, Speaker, TranscriptLine, TriggerKind};
pub use load::{SetError, load, load_dir, parse};
pub use registry::Registry;
pub use setup::SessionSetup;
pub use strategy::Strategy;
