//! `baton mock-model`: runs the mock model as a standalone server for clients in other processes
//! (the official SDKs, a baton daemon, a browser). Prints one line with its URL, then serves until
//! Ctrl-C.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

use super::profile::Profile;
use super::record::RecordSink;
use super::scenario::Scenario;
use super::server::{self, MockError, MockOptions};
use super::tls::TlsSetup;

/// Serve a local model that speaks the Gemini Live protocol, scripted by a scenario.
#[derive(Clone, Debug, clap::Args)]
#[command(after_help = "\
Examples:
  # Plain WebSocket on the default port; every caller turn gets the built-in reply:
  baton mock-model

  # A scripted conversation, any free port (the URL is printed on stdout):
  baton mock-model --listen 127.0.0.1:0 --scenario audio-fixtures/scenarios/demo.toml

  # The financial-advisor handoff scenario, behaving like a model without contextUpdate:
  baton mock-model --scenario audio-fixtures/scenarios/seed000.toml --profile gemini-2.5

  # For the official google-genai SDK, which always connects with TLS:
  baton mock-model --tls-self-signed /tmp/mock-cert.pem
  SSL_CERT_FILE=/tmp/mock-cert.pem python client.py   # base_url https://localhost:9300

  # Require a key (read from the environment, never from the command line) and record what
  # clients send, one JSON message per line:
  MOCK_KEY=test-key baton mock-model --api-key-env MOCK_KEY --record-messages /tmp/sent.jsonl

Connect to ws[s]://HOST:PORT/ws/google.ai.generativelanguage.v1beta.GenerativeService.BidiGenerateContent
(also v1, v1alpha, ...Constrained, and /ws/google.cloud.aiplatform.v1beta1.LlmBidiService/BidiGenerateContent).")]
pub struct MockModelArgs {
    /// Address to listen on, e.g. 127.0.0.1:9300 or 127.0.0.1:0 for any free port.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:9300")]
    pub listen: String,

    /// Scenario TOML (turns, reply clips, timing); without it every turn gets the default reply.
    #[arg(long, value_name = "FILE")]
    pub scenario: Option<PathBuf>,

    /// Model behaviour (overrides the scenario's `[model] profile`): gemini-3.8 (contextUpdate,
    /// NON_BLOCKING tools), gemini-2.5 (no contextUpdate), gemini-3.1 (no contextUpdate, blocking
    /// tools only, no mid-session clientContent).
    #[arg(long, value_name = "PROFILE", value_parser = parse_profile)]
    pub profile: Option<Profile>,

    /// Serve wss:// with a fresh self-signed certificate for localhost and 127.0.0.1, written as
    /// PEM to CERT_OUT so clients can trust it (SSL_CERT_FILE=CERT_OUT).
    #[arg(long, value_name = "CERT_OUT", conflicts_with_all = ["tls_cert", "tls_key"])]
    pub tls_self_signed: Option<PathBuf>,

    /// Serve wss:// with this PEM certificate chain (needs --tls-key).
    #[arg(long, value_name = "PEM", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,

    /// PEM private key for --tls-cert.
    #[arg(long, value_name = "PEM", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,

    /// Write every client message as received to FILE (replacing it), one JSON object per line.
    #[arg(long, value_name = "FILE")]
    pub record_messages: Option<PathBuf>,

    /// Name of an environment variable holding the API key clients must present
    /// (x-goog-api-key header, key= query, or Authorization: Bearer). Without it any key is accepted.
    #[arg(long, value_name = "VAR")]
    pub api_key_env: Option<String>,
}

/// Binds, prints `baton mock-model listening on <base_url>`, serves until Ctrl-C.
pub async fn run(args: MockModelArgs) -> Result<(), MockError> {
    let scenario = match &args.scenario {
        Some(p) => Scenario::load(p)?,
        None => Scenario::builtin(),
    };
    let api_key = match &args.api_key_env {
        None => None,
        Some(var) => match std::env::var(var) {
            Ok(k) if !k.is_empty() => Some(k),
            _ => return Err(MockError::ApiKeyEnv { var: var.clone() }),
        },
    };
    let record = match &args.record_messages {
        Some(p) => Some(RecordSink::create(p).await?),
        None => None,
    };
    let tls = match (&args.tls_self_signed, &args.tls_cert, &args.tls_key) {
        (Some(out), _, _) => Some(TlsSetup::SelfSigned {
            cert_out: out.clone(),
        }),
        (None, Some(cert), Some(key)) => Some(TlsSetup::Files {
            cert: cert.clone(),
            key: key.clone(),
        }),
        _ => None,
    };
    let (record, writer) = match record {
        Some((sink, task)) => (Some(sink), Some(task)),
        None => (None, None),
    };
    let profile = args.profile.unwrap_or(scenario.profile);
    let opts = Arc::new(MockOptions {
        api_key,
        record,
        profile,
        ..MockOptions::new(Arc::new(scenario))
    });
    let server = server::bind(&args.listen, opts, tls).await?;
    let mut stdout = std::io::stdout().lock();
    writeln!(
        stdout,
        "baton mock-model listening on {}",
        server.base_url()
    )
    .and_then(|()| stdout.flush())
    .map_err(|source| MockError::Io {
        what: "cannot write to stdout".into(),
        source,
    })?;
    drop(stdout);
    server
        .run_until(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await;
    drop(writer);
    Ok(())
}

fn parse_profile(s: &str) -> Result<Profile, String> {
    s.parse()
        .map_err(|e: super::profile::UnknownProfile| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: MockModelArgs,
    }

    #[test]
    fn profile_flag_names_a_model_generation() {
        let cli = Cli::try_parse_from(["mock-model", "--profile", "gemini-3.1"]).unwrap();
        assert_eq!(cli.args.profile, Some(Profile::Gemini31));
        assert_eq!(
            Cli::try_parse_from(["mock-model"]).unwrap().args.profile,
            None
        );
        let err = Cli::try_parse_from(["mock-model", "--profile", "gpt"])
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("gemini-3.8"), "{err}");
    }
}
