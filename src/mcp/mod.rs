//! Agents' tools from MCP servers: one connection per configured server, shared by every call of
//! the daemon, with each agent seeing only the tools its set allows (seed 002's
//! `FilteredMCPTool`).
//!
//! ```text
//! [mcp.<name>] ─▶ Hub::start ─▶ one supervisor task per server (rmcp client: Streamable HTTP, or a
//!                               child's stdio restarted with back-off), reconnecting until shutdown
//!                                    │ tools/list at connect and on notifications/tools/list_changed
//!                                    ▼
//!                    Catalog: per server an ArcSwap snapshot of translated tools (+ refusals)
//!                                    │ lock-free reads
//!        agents::Registry::mcp_tools(agent) ── the agent's allow-list ──▶ declarations, the filter
//!                                    │
//!        runner ── McpTool::call: arguments checked, deadline, notifications/cancelled ──▶ server
//! ```
//!
//! Modules, one job each: [`config`] (`[mcp.*]` and its validation), [`schema`] (JSON Schema
//! into what the models accept), [`args`] (arguments checked against the server's schema),
//! [`client`] (the rmcp client: connecting over either transport, notifications), [`hub`]
//! (servers, their supervisors, the catalog of tools), [`link`] (one server's session slot and
//! status), [`call`] (one tool call and its result as a function response).
//!
//! **Invariant:** nothing here runs on the audio path: calls run in the tool tasks the call
//! layer spawns, and the catalog is read without locks.

pub mod args;
pub mod call;
pub mod client;
pub mod config;
pub mod hub;
pub mod link;
pub mod schema;

pub use call::{CallError, McpTool};
pub use config::{McpServerSection, ServerSpec, Transport};
pub use hub::{Catalog, Hub, Refusal, ServerStatus, State};
