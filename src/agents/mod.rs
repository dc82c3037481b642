//! Agents: the agent sets of `config/agents/` (who the agents are, their tools, triggers and
//! policies).
//!
//! Modules, one job each: [`config`] (the file as written), [`load`] (validation, every problem
//! with key and fix), [`registry`] (the validated set), [`matching`] (keywords, patterns,
//! call-data conditions), [`phrases`] (seed 002 handoff phrases), [`strategy`] (how a handoff
//! reaches the model, and when).

pub mod config;
pub mod load;
pub mod matching;
pub mod phrases;
pub mod registry;
pub mod strategy;

pub use load::{SetError, load, load_dir, parse};
pub use registry::Registry;
pub use strategy::Strategy;
