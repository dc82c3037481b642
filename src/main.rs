//! The `baton` command line (subcommands arrive with the mock model and the demo).
fn main() {}
