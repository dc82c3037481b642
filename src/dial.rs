//! `baton dial twilio`: place one call to any Twilio-protocol server (baton or another) the way
//! Twilio would, from a WAV fixture, and report what the caller heard and how evenly it arrived.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Serialize;

use crate::leg::twilio::cadence::Cadence;
use crate::leg::twilio::caller::{self, CallerEnd, CallerError, CallerOptions};
use crate::leg::twilio::signature::AuthToken;

/// Options of `baton dial twilio`.
#[derive(Clone, Debug, clap::Args)]
#[command(after_help = "Examples:\n  \
    baton dial twilio ws://127.0.0.1:8080/twilio\n  \
    baton dial twilio ws://127.0.0.1:8080/twilio --fixture my-call.wav --param From=+15550100\n  \
    TWILIO_AUTH_TOKEN=... baton dial twilio wss://baton.example.com/twilio --auth-token-env TWILIO_AUTH_TOKEN")]
pub struct DialTwilioArgs {
    /// The server's Media Streams WebSocket URL.
    pub url: String,
    /// What the caller says: a WAV of any rate (sent as 8 kHz μ-law). Default: the bundled
    /// four-turn conversation.
    #[arg(long, value_name = "WAV")]
    pub fixture: Option<PathBuf>,
    /// Where to write call.wav (left caller, right agent as heard) and report.json.
    #[arg(long, value_name = "DIR", default_value = "out/dial")]
    pub out: PathBuf,
    /// A custom parameter for `start.customParameters`, as NAME=VALUE (repeatable).
    #[arg(long = "param", value_name = "NAME=VALUE")]
    pub params: Vec<String>,
    /// Sign the upgrade with X-Twilio-Signature using the token in this environment variable.
    #[arg(long, value_name = "VAR")]
    pub auth_token_env: Option<String>,
    /// The URL to sign, when the server validates against a different public URL.
    #[arg(long, value_name = "URL")]
    pub signed_url: Option<String>,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

/// `baton dial` could not run.
#[derive(Debug, thiserror::Error)]
pub enum DialError {
    #[error(transparent)]
    Fixture(#[from] crate::leg::fixture::FixtureError),
    #[error(transparent)]
    Caller(#[from] CallerError),
    #[error("--param {0:?} is not NAME=VALUE")]
    BadParam(String),
    #[error("{0} is not set or empty (named by --auth-token-env)")]
    MissingToken(String),
    #[error("cannot write {path}: {reason}")]
    Output { path: PathBuf, reason: String },
    #[error("cannot start the runtime: {0}")]
    Runtime(String),
}

/// `report.json`.
#[derive(Clone, Debug, Serialize)]
pub struct DialReport {
    pub url: String,
    pub end: String,
    pub frames_sent: u64,
    pub media_received: u64,
    pub played_ms: u64,
    pub dropped_ms: u64,
    pub marks_received: u64,
    pub marks_echoed: u64,
    pub clears_received: u64,
    pub bad_messages: u64,
    /// Deviation of the inbound `media` interval from 20 ms, within bursts of agent speech.
    pub cadence: Cadence,
    pub recording: String,
}

pub fn run(args: &DialTwilioArgs) -> Result<DialReport, DialError> {
    let fixture = args
        .fixture
        .clone()
        .unwrap_or_else(|| crate::demo::bundled("audio-fixtures/clips/caller_conversation.wav"));
    let mut opts = CallerOptions::from_wav(&fixture)?;
    let mut params = BTreeMap::new();
    for p in &args.params {
        let (k, v) = p
            .split_once('=')
            .ok_or_else(|| DialError::BadParam(p.clone()))?;
        params.insert(k.to_owned(), v.to_owned());
    }
    opts.custom_parameters = params;
    if let Some(var) = &args.auth_token_env {
        let token = std::env::var(var)
            .ok()
            .filter(|t| !t.is_empty())
            .ok_or_else(|| DialError::MissingToken(var.clone()))?;
        opts.auth_token = Some(AuthToken::new(token));
        opts.signed_url = args.signed_url.clone();
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| DialError::Runtime(e.to_string()))?;
    let r = rt.block_on(caller::dial(&args.url, opts))?;
    std::fs::create_dir_all(&args.out).map_err(|e| DialError::Output {
        path: args.out.clone(),
        reason: e.to_string(),
    })?;
    let wav = args.out.join("call.wav");
    r.recording.write(&wav).map_err(|e| DialError::Output {
        path: wav.clone(),
        reason: e.to_string(),
    })?;
    let report = DialReport {
        url: args.url.clone(),
        end: match &r.end {
            CallerEnd::HungUp => "caller hung up".into(),
            CallerEnd::ServerClosed { code, reason } => {
                format!("server closed (code {code:?}): {reason}")
            }
            CallerEnd::ConnectionLost(e) => format!("connection lost: {e}"),
        },
        frames_sent: r.frames_sent,
        media_received: r.media_received,
        played_ms: r.played_ms,
        dropped_ms: r.dropped_ms,
        marks_received: r.marks_received,
        marks_echoed: r.marks_echoed,
        clears_received: r.clears_received,
        bad_messages: r.bad_messages,
        cadence: r.cadence,
        recording: wav.display().to_string(),
    };
    let json_path = args.out.join("report.json");
    std::fs::write(
        &json_path,
        serde_json::to_string_pretty(&report).unwrap_or_default() + "\n",
    )
    .map_err(|e| DialError::Output {
        path: json_path.clone(),
        reason: e.to_string(),
    })?;
    Ok(report)
}

/// The human-readable report.
pub fn render(r: &DialReport) -> String {
    format!(
        "call to {}: {}\n\
         sent {} frames; heard {} media messages ({} ms played, {} ms dropped by clear)\n\
         marks {} received / {} echoed; clears {}; unusable messages {}\n\
         agent audio cadence: {} intervals, deviation from 20 ms p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms\n\
         recording: {} (left = caller, right = agent as heard)\n",
        r.url,
        r.end,
        r.frames_sent,
        r.media_received,
        r.played_ms,
        r.dropped_ms,
        r.marks_received,
        r.marks_echoed,
        r.clears_received,
        r.bad_messages,
        r.cadence.intervals,
        f64::from(r.cadence.p50_dev_us) / 1000.0,
        f64::from(r.cadence.p99_dev_us) / 1000.0,
        f64::from(r.cadence.max_dev_us) / 1000.0,
        r.recording
    )
}
