//! `baton talk`: a conversation with the configured agents from the terminal, through the local
//! microphone and speaker (cpal, behind the `mic` feature). The transcript is printed as it
//! comes; when the call ends (Ctrl-C), each turn is listed with the agent that answered, then the
//! handoffs and the latency figures.
//!
//! [`talk`] is independent of the audio library: it takes any [`AudioDevice`], so it runs with a
//! fake device in tests.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

use tokio::sync::watch;

use crate::call::metrics::{round2, summarize};
use crate::call::{self, CallOptions, CallReport};
use crate::leg::LegCommand;
use crate::leg::mic::{self, AudioDevice, DeviceError, MicOptions};
use crate::server::{AppState, transcripts};

/// Options of `baton talk`.
#[derive(Clone, Debug, clap::Args)]
#[command(after_help = "Examples:\n  \
    baton talk --config config/baton.toml\n  \
    baton talk --list-devices\n  \
    baton talk --input USB --output USB     # devices whose name contains USB\n\n\
    Use headphones: the agent's voice picked up by the microphone interrupts it. Ctrl-C ends the call.")]
pub struct TalkArgs {
    /// The TOML config file (model, agent set); the same as `baton serve`'s.
    #[arg(long, value_name = "FILE", default_value = "config/baton.toml")]
    pub config: PathBuf,
    /// The input device: the first whose name contains this (default: the system's).
    #[arg(long, value_name = "NAME")]
    pub input: Option<String>,
    /// The output device: the first whose name contains this (default: the system's).
    #[arg(long, value_name = "NAME")]
    pub output: Option<String>,
    /// List the audio devices and exit.
    #[arg(long)]
    pub list_devices: bool,
}

/// `baton talk` could not run.
#[derive(Debug, thiserror::Error)]
pub enum TalkError {
    #[error(
        "this baton was built without the microphone: rebuild with `cargo build --release \
         --features mic` (needs libasound2-dev: scripts/setup.sh --mic)"
    )]
    NoMicFeature,
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    #[error(transparent)]
    Serve(#[from] crate::server::ServeError),
    #[error("audio device: {0}")]
    Device(#[from] DeviceError),
    #[error("cannot open the model session: {0}")]
    Session(String),
    #[error("call failed: {0}")]
    Call(String),
    #[error("cannot start the runtime: {0}")]
    Runtime(String),
}

/// Runs `baton talk` on the system's audio devices.
#[cfg(feature = "mic")]
pub fn run(args: &TalkArgs) -> Result<(), TalkError> {
    use crate::leg::mic::cpal_device::{self, CpalDevice};
    if args.list_devices {
        for d in cpal_device::list()? {
            println!("{d}");
        }
        return Ok(());
    }
    let loaded = crate::config::load(&args.config)?;
    let device = CpalDevice::open(args.input.as_deref(), args.output.as_deref())?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| TalkError::Runtime(e.to_string()))?;
    rt.block_on(async move {
        let app = crate::server::state(loaded)?;
        println!(
            "talking to {} through the {} — Ctrl-C to hang up",
            app.backend.describe(),
            device.describe()
        );
        let (tx, rx) = watch::channel(false);
        tokio::spawn(async move {
            let _ = tokio::signal::ctrl_c().await;
            let _ = tx.send(true);
        });
        // A credential a command renews (`model.credential_command`) stays fresh for a long talk.
        let renewal =
            crate::server::renewed_of(&app.backend).map(|r| tokio::spawn(r.keep_renewed()));
        let talked = talk(app, Box::new(device), rx, std::io::stdout()).await;
        if let Some(r) = renewal {
            r.abort();
        }
        talked?;
        Ok(())
    })
}

/// Without the `mic` feature there is no device to talk through.
#[cfg(not(feature = "mic"))]
pub fn run(_args: &TalkArgs) -> Result<(), TalkError> {
    Err(TalkError::NoMicFeature)
}

/// Holds one conversation through `device` until `hangup` turns true or the model ends it,
/// printing the transcript to `out` as it comes and a summary at the end.
pub async fn talk(
    app: Arc<AppState>,
    device: Box<dyn AudioDevice>,
    hangup: watch::Receiver<bool>,
    mut out: impl Write + Send + 'static,
) -> Result<CallReport, TalkError> {
    let leg = mic::start(device, MicOptions::default())?;
    let (mut session, agents) = match app.open_call(None).await {
        Ok(x) => x,
        Err(e) => {
            let mut handle = leg.handle;
            let _ = handle.send(LegCommand::Hangup);
            return Err(TalkError::Session(e.to_string()));
        }
    };
    let mut fragments = transcripts::tap(&mut session);
    let printer = tokio::spawn(async move {
        let mut role = "";
        while let Some(f) = fragments.recv().await {
            if f.role != role {
                role = f.role;
                let who = if role == "caller" { "you" } else { "agent" };
                let _ = write!(out, "\n{who}: ");
            }
            let _ = write!(out, "{}", f.text);
            let _ = out.flush();
        }
        let _ = writeln!(out);
        out
    });
    let opts = CallOptions {
        hangup: Some(hangup),
        ..Default::default()
    };
    let result = call::run_with_agents(leg.handle, session, opts, agents).await;
    let stats = tokio::time::timeout(std::time::Duration::from_secs(5), leg.task)
        .await
        .ok()
        .and_then(Result::ok);
    let report = result.map_err(|e| TalkError::Call(e.to_string()))?;
    let mut out = printer.await.map_err(|e| TalkError::Call(e.to_string()))?;
    let _ = out.write_all(render_summary(&report).as_bytes());
    if let Some(s) = stats
        && (s.capture_overflow > 0 || s.playback_overflow > 0 || s.frames_dropped > 0)
    {
        let _ = writeln!(
            out,
            "audio: {} captured samples dropped, {} played samples dropped, {} frames dropped",
            s.capture_overflow, s.playback_overflow, s.frames_dropped
        );
    }
    let _ = out.flush();
    Ok(report)
}

/// Each turn with the agent that answered, the handoffs, and the figures.
pub fn render_summary(r: &CallReport) -> String {
    let mut s = format!("\ncall ended: {}\n", r.end_reason);
    for t in &r.turns {
        let agent = if t.agent.is_empty() {
            "agent"
        } else {
            &t.agent
        };
        s.push_str(&format!(
            "  turn {}: you: {:?}\n          {agent}: {:?}{}\n",
            t.index + 1,
            t.caller_text,
            t.agent_text,
            if t.interrupted { " (interrupted)" } else { "" }
        ));
    }
    for h in &r.handoffs {
        s.push_str(&format!(
            "  handoff {} → {} ({}, gap {} ms)\n",
            h.from,
            h.to,
            h.strategy,
            h.gap_ms.map_or("-".into(), |g| format!("{g:.0}"))
        ));
    }
    let p = |v: &[f64]| {
        let x = summarize(v);
        format!(
            "p50 {} p99 {}",
            x.p50.map_or("-".into(), |v| round2(v).to_string()),
            x.p99.map_or("-".into(), |v| round2(v).to_string())
        )
    };
    s.push_str(&format!(
        "  first_audio_ms {} · uplink_added_ms {} · downlink_added_ms {} · underruns {}\n",
        p(&r.first_audio_ms),
        p(&r.uplink_added_ms),
        p(&r.downlink_added_ms),
        r.underruns
    ));
    s
}
