//! Agents: the agent sets of `config/agents/` (who the agents are, their tools, triggers and
//! policies), and the orchestrator that hands a live caller between them without a gap.
//!
//! ```text
//! config/agents/<set>.toml ──load──▶ Registry ──▶ Orchestrator (pure: handle / poll_action / poll_timeout)
//!                                                      │ Action::RunTool ──▶ runner::run (async shell)
//!                                                      ▼
//!                                     wire actions for the call layer (contextUpdate, toolResponse,
//!                                     clientContent, standby sessions), attribution, call events
//! ```
//!
//! Modules, one job each: [`config`] (the file as written), [`load`](mod@load) (validation, every problem
//! with key and fix), [`registry`] (the validated set), [`matching`] (keywords, patterns,
//! call-data conditions), [`phrases`] (seed 002 handoff phrases), [`tools`] (function
//! declarations, the tool filter, function responses), [`prompts`] (instructions and briefs),
//! [`setup`] (a session's setup and transferred history), [`contexts`] (seed 001's resumable
//! agent contexts), [`strategy`] (how a handoff reaches the
//! model, and when), [`events`] (call events, transcript, agent history), [`orchestrator`] (the
//! state machine), [`commands`] (inputs from outside the call loop: operators, sidecars), [`runner`]
//! (running tools), [`sidecar`] (seed 004's agents beside the live session).
//!
//! **Architecture invariant:** the orchestrator knows no sockets and no clock; nothing it emits
//! flushes playout or cuts a turn being generated.

pub mod commands;
pub mod config;
pub mod contexts;
pub mod events;
pub mod load;
pub mod matching;
pub mod orchestrator;
pub mod phrases;
pub mod prompts;
pub mod registry;
pub mod runner;
pub mod setup;
pub mod sidecar;
pub mod strategy;
pub mod tools;

pub use events::{AgentActivation, CallEvent, Speaker, TranscriptLine, TriggerKind};
pub use load::{SetError, load, load_dir, parse};
pub use orchestrator::{
    Action, AgentTag, CommandError, Input, Orchestrator, PersonHandover, Timer, ToolRun,
};
pub use registry::Registry;
pub use setup::SessionSetup;
pub use strategy::Strategy;
