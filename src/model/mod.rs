//! Live model adapters.
pub mod gemini;
