//! Embedded mock model.
