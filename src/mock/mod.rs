//! The embedded mock model: a local server that speaks the Gemini Live wire protocol, scripted by
//! a scenario file, for tests, the demo and benchmarks (design §5, reference §12.1).
//!
//! - [`engine`]: the sans-IO session core ([`MockSession`]); never reads a clock; [`timers`]: its
//!   timer table.
//! - [`inbound`]: client frame → typed message, with the real service's close codes.
//! - [`setup`]: `setup` validation, backend/API version; [`profile`]: model-behaviour profiles
//!   (gemini-3.8 / 2.5 / 3.1) and their [`Capabilities`](crate::model::Capabilities).
//! - [`listen`] / [`speak`]: caller audio + VAD in; reply chunks + transcription out.
//! - [`scenario`] / [`clip`]: the script and its audio; [`reply`]: what one scripted turn says and
//!   calls; [`persona`]: which agent the wire named;
//!   [`brief`]: the script of a warm transfer's brief session.
//! - [`faults`]: goAway, drops, late pongs, garbage ([`pong`] delays pongs under the WebSocket);
//!   [`resume`]: resumption handles and per-lineage caller audio, shared by a server's
//!   connections.
//! - [`openai`]: the OpenAI Realtime profile (`--profile openai`), its own engine and shell over
//!   the same scenarios, clips and VAD.
//! - [`server`]: the tokio/WebSocket shell (TCP, TLS, in-memory duplex), [`record`]: message
//!   recording, [`cli`]: `baton mock-model`.

pub mod brief;
pub mod cli;
pub mod clip;
pub mod engine;
pub mod faults;
pub mod inbound;
pub mod listen;
pub mod mcp_server;
pub mod openai;
pub mod persona;
pub mod pong;
pub mod profile;
pub mod record;
pub mod reply;
pub mod resume;
pub mod rng;
pub mod scenario;
pub mod server;
pub mod setup;
pub mod speak;
pub mod timers;
pub mod tls;

pub use engine::{MockSession, Outgoing};
pub use faults::Faults;
pub use inbound::Rejection;
pub use profile::{Profile, Quirks};
pub use resume::Resumption;
pub use scenario::{Scenario, ScenarioError};
pub use server::{
    MockError, MockOptions, MockServer, RunningMockServer, bind, connect_in_memory,
    serve_connection,
};
pub use setup::{Backend, Endpoint};
