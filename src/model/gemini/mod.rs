//! The Gemini Live protocol.
pub mod wire;
