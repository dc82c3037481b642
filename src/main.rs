//! The `baton` command line: thin wrappers over the library's entry points.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use baton::demo::{self, DemoArgs};
use baton::mock::cli::MockModelArgs;

/// baton — a real-time voice pipeline daemon.
///
/// A caller's audio (phone bridge, browser, microphone or a recorded WAV fixture) is framed into
/// 20 ms frames, resampled and streamed to a Live-API speech-to-speech model over one WebSocket;
/// the model's audio is played back to the caller on a steady 20 ms clock, and every step is
/// measured.
#[derive(Parser)]
#[command(
    name = "baton",
    version,
    after_help = "Examples:\n  \
    baton demo                       # one bundled call against the embedded mock model\n  \
    baton demo --realtime --json     # the same at real pace, summary as JSON\n  \
    baton mock-model --listen 127.0.0.1:9300\n                                   \
    # a Gemini-Live-protocol mock for any client\n\n\
    Logging: set BATON_LOG (e.g. BATON_LOG=debug); logs go to stderr."
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run the bundled caller conversation through baton and the embedded mock model; print a
    /// per-turn timeline and latency table; write out/demo/call.wav and summary.json.
    Demo(DemoArgs),
    /// Serve the embedded Gemini-Live-protocol mock model on a socket, for baton or any client
    /// (including the official google-genai SDK over wss://).
    MockModel(MockModelArgs),
}

fn main() -> ExitCode {
    init_logging();
    let cli = Cli::parse();
    let result = match cli.cmd {
        Cmd::Demo(args) => run_demo(&args),
        Cmd::MockModel(args) => run_mock(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("baton: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("BATON_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}

fn run_demo(args: &DemoArgs) -> anyhow::Result<()> {
    let outcome = demo::run(args)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&outcome.summary)?);
    } else {
        print!("{}", demo::render(&outcome));
    }
    Ok(())
}

fn run_mock(args: MockModelArgs) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(baton::mock::cli::run(args))?;
    Ok(())
}
