//! baton: a real-time voice pipeline daemon. A caller leg's audio is framed, resampled and streamed
//! to a Live-API-style speech-to-speech model over one WebSocket; the model's audio comes back and is
//! played out to the caller on a steady 20 ms clock.
//!
//! See `ARCHITECTURE.md` for the codemap and the path of one frame.

pub mod agents;
pub mod audio;
pub mod b64;
pub mod backend;
pub mod bench;
pub mod call;
pub mod config;
pub mod deadlines;
pub mod demo;
pub mod dial;
pub mod mcp;
pub mod place;
pub mod reservoir;
pub mod server;
pub mod store;
pub mod talk;

pub mod leg;
pub mod mock;
pub mod model;
pub mod parsers;
pub mod plot;
pub mod secret;
pub mod traces;
pub mod transfer;
pub mod wakeups;
