//! `baton call`: asks a running `baton serve` to place an outbound SIP call on one of its
//! trunks (`POST /calls` on the admin API) and reports the call's typed outcome. The daemon
//! owns the trunk, the agents and the call; this command only asks and prints.

use std::time::Duration;

use crate::leg::sip::call::Outcome;
use crate::secret::Secret;
use crate::server::sip::{PlaceRequest, Placed};

/// Options of `baton call`.
#[derive(Clone, Debug, clap::Args)]
#[command(after_help = "Examples:\n  \
    baton call sip:100@pbx.example.com            # a SIP URI, on the only trunk\n  \
    baton call +15550100 --trunk carrier          # a number, dialled on the trunk 'carrier'\n  \
    BATON_API_TOKEN=... baton call 100 --server https://baton.example.com --token-env BATON_API_TOKEN\n\n\
    Exit status 0 when the call was answered (its agent set then runs it like an inbound\n\
    call), 1 for every other outcome: busy, no answer, rejected (with the SIP status), failed.")]
pub struct CallArgs {
    /// Whom to call: a SIP URI (`sip:100@pbx.example.com`) or a number or extension, dialled at
    /// the trunk's host.
    pub to: String,
    /// The daemon's HTTP address.
    #[arg(long, value_name = "URL", default_value = "http://127.0.0.1:8080")]
    pub server: String,
    /// The trunk to call through (`[sip.trunks.<name>]`); may be left out when only one is
    /// configured.
    #[arg(long, value_name = "NAME")]
    pub trunk: Option<String>,
    /// The caller ID, a SIP URI; default: the trunk's `from`.
    #[arg(long, value_name = "URI")]
    pub from: Option<String>,
    /// Ring this long before giving up (no answer), 1-3600; default: the trunk's
    /// `ring_timeout_s`.
    #[arg(long, value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub ring_timeout_s: Option<u64>,
    /// The environment variable holding an API token, when the daemon requires one
    /// (`server.auth_tokens_env`).
    #[arg(long, value_name = "VAR")]
    pub token_env: Option<String>,
    /// Print the outcome as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Why `baton call` could not learn an outcome.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    #[error("{var} is not set (--token-env names the variable holding an API token)")]
    NoToken { var: String },
    #[error("{server} did not answer: {reason}")]
    Unreachable { server: String, reason: String },
    #[error(
        "--server {0:?} is not an http:// or https:// URL: give the daemon's address, e.g. \
         --server http://127.0.0.1:8080"
    )]
    BadServer(String),
    #[error("the daemon refused the request ({status}): {message}")]
    Refused { status: u16, message: String },
    #[error("the daemon's answer is not an outcome: {0}")]
    BadAnswer(String),
    #[error("the call was not answered: {0}")]
    NotAnswered(Outcome),
}

/// A request's failure with its causes (reqwest's own sentence hides them: "error sending
/// request" for a refused connection), and a timeout said as one.
fn why(e: &reqwest::Error) -> String {
    let mut text = if e.is_timeout() {
        "no answer in time".to_owned()
    } else {
        e.to_string()
    };
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}

/// Places the call and returns its outcome (an error for anything but an answer).
pub async fn place(args: &CallArgs) -> Result<Placed, CallError> {
    let token = match &args.token_env {
        Some(var) => Some(
            std::env::var(var)
                .ok()
                .filter(|v| !v.is_empty())
                .map(Secret::new)
                .ok_or_else(|| CallError::NoToken { var: var.clone() })?,
        ),
        None => None,
    };
    let unreachable = |reason: String| CallError::Unreachable {
        server: args.server.clone(),
        reason,
    };
    let scheme_ok = args.server.starts_with("http://") || args.server.starts_with("https://");
    if !scheme_ok || reqwest::Url::parse(&args.server).is_err() {
        return Err(CallError::BadServer(args.server.clone()));
    }
    let tls = crate::model::tls::default_client_config().map_err(|e| unreachable(e.to_string()))?;
    let ring = args.ring_timeout_s.unwrap_or(120);
    let client = reqwest::Client::builder()
        .tls_backend_preconfigured((*tls).clone())
        // The daemon answers once the call is answered or has failed: allow the whole ring.
        .timeout(Duration::from_secs(ring.saturating_add(15)))
        // A daemon that is not there is said at once, not after the whole ring.
        .connect_timeout(Duration::from_secs(10))
        .build()
        .map_err(|e| unreachable(e.to_string()))?;
    let body = serde_json::json!({
        "to": args.to,
        "trunk": args.trunk,
        "from": args.from,
        "ring_timeout_s": args.ring_timeout_s,
    });
    // The request type the daemon takes; built here so a field renamed there fails to compile.
    let _: PlaceRequest = serde_json::from_value(body.clone()).map_err(|e| {
        CallError::BadAnswer(format!("the request does not match the daemon's API: {e}"))
    })?;
    let mut req = client
        .post(format!("{}/calls", args.server.trim_end_matches('/')))
        .json(&body);
    if let Some(t) = &token {
        req = req.bearer_auth(t.expose());
    }
    let resp = req.send().await.map_err(|e| unreachable(why(&e)))?;
    let status = resp.status();
    let text = resp.text().await.map_err(|e| unreachable(why(&e)))?;
    if !status.is_success() {
        let message = serde_json::from_str::<serde_json::Value>(&text)
            .ok()
            .and_then(|v| v["error"].as_str().map(str::to_owned))
            .unwrap_or(text);
        return Err(CallError::Refused {
            status: status.as_u16(),
            message,
        });
    }
    let placed: Placed =
        serde_json::from_str(&text).map_err(|e| CallError::BadAnswer(format!("{e}: {text}")))?;
    Ok(placed)
}

/// `baton call`: prints the outcome; an error unless the call was answered.
pub fn run(args: &CallArgs) -> Result<(), CallError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| CallError::Unreachable {
            server: args.server.clone(),
            reason: e.to_string(),
        })?;
    let placed = match rt.block_on(place(args)) {
        Ok(p) => p,
        Err(e) => {
            // A script reading --json gets the failure as JSON too (and a person on stderr).
            if args.json {
                println!("{}", serde_json::json!({ "error": e.to_string() }));
            }
            return Err(e);
        }
    };
    if args.json {
        println!(
            "{}",
            serde_json::to_string(&placed).unwrap_or_else(|_| placed.outcome.to_string())
        );
    } else {
        match &placed.call_id {
            Some(id) => println!("{} (call {id})", placed.outcome),
            None => println!("{}", placed.outcome),
        }
    }
    match placed.outcome {
        Outcome::Answered => Ok(()),
        other => Err(CallError::NotAnswered(other)),
    }
}
