//! Caller legs.
