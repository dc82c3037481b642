//! `baton bench fixtures`: replays fixture scenarios and reports their figures.

/// Command-line arguments of `baton bench fixtures`.
#[derive(Debug, Clone, clap::Args)]
pub struct FixturesArgs {}

/// Why a fixture run failed.
#[derive(Debug, thiserror::Error)]
pub enum FixturesError {
    #[error("baton bench fixtures is not available in this build")]
    Unavailable,
}

/// Runs the benchmark described by `args`.
pub fn run(_args: &FixturesArgs) -> Result<(), FixturesError> {
    Err(FixturesError::Unavailable)
}
