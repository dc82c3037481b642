//! One call.
