//! The `baton` command line.

use clap::{Parser, Subcommand};

use baton::mock::cli::MockModelArgs;

/// baton: a real-time voice pipeline daemon.
#[derive(Parser)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run the embedded mock model (Gemini Live protocol) as a server.
    MockModel(MockModelArgs),
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    match Cli::parse().cmd {
        Cmd::MockModel(args) => baton::mock::cli::run(args).await?,
    }
    Ok(())
}
