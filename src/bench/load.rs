//! `baton bench load`: concurrency sweep of Twilio-protocol calls against `baton serve`.

/// Command-line arguments of `baton bench load`.
#[derive(Debug, Clone, clap::Args)]
pub struct LoadArgs {}

/// Why a load sweep failed.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("baton bench load is not available in this build")]
    Unavailable,
}

/// Runs the sweep described by `args`.
pub fn run(_args: &LoadArgs) -> Result<(), LoadError> {
    Err(LoadError::Unavailable)
}
