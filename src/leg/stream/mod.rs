//! The generic WebSocket leg, `WS /stream`: for apps that are neither a phone bridge nor a
//! browser with WebRTC. The client names its audio format in a JSON `start` (PCM16 at 8, 16, 24 or
//! 48 kHz, or Opus), then audio flows both ways in binary messages; `mark`, `clear` and `stop` are
//! JSON text with Twilio's semantics, and baton adds `started`, `transcript`, `error` and a final
//! `stop` with the call's summary.
//!
//! Layers, each owning one thing:
//! * [`wire`]: the JSON control messages both ways (no sockets, no state);
//! * [`codec`]: PCM16 and Opus audio in and out;
//! * [`core`]: the sans-IO core of one stream (start, re-framing, marks, clear; no clock);
//! * [`server`]: the async shell over an axum WebSocket that hands the call a `LegHandle`;
//! * [`client`]: a client of the protocol with app-like playback and a recording, for tests.

pub mod client;
pub mod codec;
pub mod core;
pub mod server;
pub mod wire;

pub use core::{EndReason, StreamCore, StreamError, StreamStats, Transmit};
pub use wire::{Encoding, Format, FromClient, ToClient};
