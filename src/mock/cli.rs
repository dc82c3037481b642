//! `baton mock-model`: runs the mock model as a standalone server for clients in other processes
//! (the official SDKs, a baton daemon, a browser). Prints one line with its URL, then serves until
//! Ctrl-C.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

use std::time::Duration;

use super::faults::{DropRule, Faults};
use super::openai::OpenAiOptions;
use super::profile::ProfileArg;
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

  # The OpenAI Realtime protocol, sessions ending after 10 minutes:
  baton mock-model --profile openai --session-lifetime 600

  # For the official google-genai SDK, which always connects with TLS:
  baton mock-model --tls-self-signed /tmp/mock-cert.pem
  SSL_CERT_FILE=/tmp/mock-cert.pem python client.py   # base_url https://localhost:9300

  # Require a key (read from the environment, never from the command line) and record what
  # clients send, one JSON message per line:
  MOCK_KEY=test-key baton mock-model --api-key-env MOCK_KEY --record-messages /tmp/sent.jsonl

  # Behave like the service at the end of a connection, and worse (overrides [faults]):
  baton mock-model --scenario audio-fixtures/scenarios/demo.toml --go-away-after 20 \
      --go-away-time-left 10 --late-pong-ms 30000 --drop mid_tool_call@5:1011 --drop after@60:1006

Connect to ws[s]://HOST:PORT/ws/google.ai.generativelanguage.v1beta.GenerativeService.BidiGenerateContent
(also v1, v1alpha, ...Constrained, and /ws/google.cloud.aiplatform.v1beta1.LlmBidiService/BidiGenerateContent).
With --profile openai: ws[s]://HOST:PORT/v1/realtime?model=gpt-realtime (OpenAI SDKs: websocket_base_url
ws://HOST:PORT/v1).")]
pub struct MockModelArgs {
    /// Address to listen on, e.g. 127.0.0.1:9300 or 127.0.0.1:0 for any free port.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:9300")]
    pub listen: String,

    /// Scenario TOML (turns, reply clips, timing); without it every turn gets the default reply.
    #[arg(long, value_name = "FILE")]
    pub scenario: Option<PathBuf>,

    /// Model behaviour (overrides the scenario's `[model] profile`): gemini-3.8 (contextUpdate,
    /// NON_BLOCKING tools), gemini-2.5 (no contextUpdate), gemini-3.1 (no contextUpdate, blocking
    /// tools only, no mid-session clientContent); or openai: the OpenAI Realtime protocol at
    /// ws://HOST:PORT/v1/realtime?model=… (the same scenario, clips and VAD).
    #[arg(long, value_name = "PROFILE", value_parser = parse_profile)]
    pub profile: Option<ProfileArg>,

    /// With --profile openai: end each session after SECS with a session_expired error (the
    /// service: 3600).
    #[arg(long, value_name = "SECS")]
    pub session_lifetime: Option<f64>,

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

    /// Threads serving the connections (default: one per core). 1 serves them all from one
    /// thread with no hand-offs between threads, the cheapest per connection (`baton bench load`
    /// runs its mock so, beside the server under test).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..))]
    pub threads: Option<u16>,

    /// Before each wait for the network, a serving thread pauses this long, so that the
    /// messages arriving meanwhile are read in one wake-up rather than one each: far fewer
    /// context switches under many connections, for the model's timing quantised to US µs (the
    /// real service's own timing varies by tens of ms). Default 0: every message read at once.
    #[arg(long, value_name = "US", default_value_t = 0)]
    pub batch_us: u64,

    #[command(flatten)]
    pub faults: FaultArgs,
}

impl MockModelArgs {
    /// The runtime `baton mock-model` serves on (see [`MockModelArgs::threads`]).
    pub fn runtime(&self) -> std::io::Result<tokio::runtime::Runtime> {
        let mut b = match self.threads {
            Some(1) => tokio::runtime::Builder::new_current_thread(),
            n => {
                let mut b = tokio::runtime::Builder::new_multi_thread();
                if let Some(n) = n {
                    b.worker_threads(usize::from(n));
                }
                b
            }
        };
        batched(&mut b, Duration::from_micros(self.batch_us));
        b.enable_all().build()
    }
}

/// Makes every worker of `b` pause `pause` before it waits for I/O or a timer (nothing when
/// zero): what arrives during the pause is then read in the same wake-up. The pause is a sleep,
/// not CPU, and it delays timers by at most `pause`. For the measuring rig's processes (the mock
/// model, the load client), whose per-message wake-ups would otherwise cost more than their work.
pub fn batched(b: &mut tokio::runtime::Builder, pause: Duration) {
    if !pause.is_zero() {
        b.on_thread_park(move || std::thread::sleep(pause));
    }
}

/// Fault modes (each overrides the scenario's `[faults]` key; see src/mock/faults.rs).
#[derive(Clone, Debug, Default, clap::Args)]
pub struct FaultArgs {
    /// Send goAway this many seconds after each connection's setup.
    #[arg(long, value_name = "SECS")]
    pub go_away_after: Option<f64>,
    /// The timeLeft goAway announces; the connection closes 1011 when it runs out.
    #[arg(long, value_name = "SECS")]
    pub go_away_time_left: Option<f64>,
    /// Send nothing more after goAway (pongs are still answered).
    #[arg(long)]
    pub silent_after_go_away: bool,
    /// Drop a connection: `WHEN[@SECS][:CLOSE]`, WHEN one of after, mid_caller_utterance,
    /// mid_tool_call, mid_model_turn; SECS from the first setup; CLOSE 1011 (default), 1008,
    /// 1006 (no close frame) or silent (a dead socket). Repeatable.
    #[arg(long, value_name = "RULE", value_parser = parse_drop)]
    pub drop: Vec<DropRule>,
    /// Arm every --drop again on each connection, SECS counted from that connection's setup.
    #[arg(long)]
    pub drop_every_connection: bool,
    /// Answer WebSocket pings this late (the service: 8000–30000).
    #[arg(long, value_name = "MS")]
    pub late_pong_ms: Option<u64>,
    /// Send a frame that is not JSON this often.
    #[arg(long, value_name = "SECS")]
    pub garbage_every: Option<f64>,
    /// Refuse every resumption handle as unknown (clients must fall back to a fresh session).
    #[arg(long)]
    pub refuse_resume: bool,
    /// At most this many goAways and drops over the server's life.
    #[arg(long, value_name = "N")]
    pub max_faults: Option<u32>,
    /// Seed of the fault randomness.
    #[arg(long, value_name = "N")]
    pub fault_seed: Option<u64>,
}

impl FaultArgs {
    /// Applies the flags given over `f`.
    pub fn apply(&self, f: &mut Faults) {
        let secs = |s: f64| Duration::from_secs_f64(s.clamp(0.0, 86_400.0));
        if let Some(s) = self.go_away_after {
            f.go_away_after = Some((secs(s), secs(s)));
        }
        if let Some(s) = self.go_away_time_left {
            f.go_away_time_left = secs(s);
        }
        f.silent_after_go_away |= self.silent_after_go_away;
        if !self.drop.is_empty() {
            f.drops = self.drop.clone();
        }
        if self.drop_every_connection {
            for d in &mut f.drops {
                d.every_connection = true;
            }
        }
        if let Some(ms) = self.late_pong_ms {
            f.late_pong = (ms > 0).then(|| Duration::from_millis(ms));
        }
        if let Some(s) = self.garbage_every {
            f.garbage_every = (s > 0.0).then(|| secs(s));
        }
        f.refuse_resume |= self.refuse_resume;
        if let Some(n) = self.max_faults {
            f.max_faults = (n > 0).then_some(n);
        }
        if let Some(seed) = self.fault_seed {
            f.seed = seed;
        }
    }
}

/// `WHEN[@SECS][:CLOSE]`.
fn parse_drop(s: &str) -> Result<DropRule, String> {
    let (rest, close) = match s.split_once(':') {
        Some((r, c)) => (r, c),
        None => (s, "1011"),
    };
    let (when, at) = match rest.split_once('@') {
        Some((w, a)) => (w, a),
        None => (rest, "0"),
    };
    let raw = format!(
        "[[drop]]\nwhen = {when:?}\nafter_s = {}\nclose = {close:?}\n",
        at.parse::<f64>()
            .map_err(|_| format!("{at:?} is not a number of seconds"))?
    );
    let parsed: super::faults::RawFaults = toml::from_str(&raw).map_err(|e| e.to_string())?;
    let faults = super::faults::parse(parsed).map_err(|(_, what)| what)?;
    faults
        .drops
        .first()
        .copied()
        .ok_or_else(|| "no drop rule".to_owned())
}

/// Binds, prints `baton mock-model listening on <base_url>`, serves until Ctrl-C.
pub async fn run(args: MockModelArgs) -> Result<(), MockError> {
    if let Some(s) = args.session_lifetime
        && !matches!(args.profile, Some(ProfileArg::OpenAi))
    {
        return Err(MockError::Usage(format!(
            "--session-lifetime {s}: only OpenAI Realtime sessions expire; add --profile openai"
        )));
    }
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
    let (profile, openai) = match args.profile {
        Some(ProfileArg::Gemini(p)) => (p, None),
        Some(ProfileArg::OpenAi) => {
            let mut o = OpenAiOptions::default();
            if let Some(s) = args.session_lifetime {
                o.lifetime = Duration::from_secs_f64(s.clamp(0.001, 86_400.0));
            }
            (scenario.profile, Some(o))
        }
        None => (scenario.profile, None),
    };
    let mut faults = scenario.faults.clone();
    args.faults.apply(&mut faults);
    let opts = Arc::new(MockOptions {
        api_key,
        record,
        profile,
        faults: Arc::new(faults),
        openai,
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

fn parse_profile(s: &str) -> Result<ProfileArg, String> {
    s.parse()
        .map_err(|e: super::profile::UnknownProfile| format!("{e}, or openai"))
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

    use crate::mock::profile::Profile;

    #[test]
    fn profile_flag_names_a_model_generation() {
        let cli = Cli::try_parse_from(["mock-model", "--profile", "gemini-3.1"]).unwrap();
        assert_eq!(
            cli.args.profile,
            Some(ProfileArg::Gemini(Profile::Gemini31))
        );
        let cli = Cli::try_parse_from(["mock-model", "--profile", "openai"]).unwrap();
        assert_eq!(cli.args.profile, Some(ProfileArg::OpenAi));
        assert_eq!(
            Cli::try_parse_from(["mock-model"]).unwrap().args.profile,
            None
        );
        let err = Cli::try_parse_from(["mock-model", "--profile", "gpt"])
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            err.contains("gemini-3.8") && err.contains("openai"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn a_session_lifetime_without_the_openai_profile_is_refused() {
        let cli = Cli::try_parse_from(["mock-model", "--session-lifetime", "10"]).unwrap();
        let err = run(cli.args).await.err().map(|e| e.to_string());
        assert!(
            err.as_deref()
                .is_some_and(|e| e.contains("add --profile openai")),
            "{err:?}"
        );
    }

    #[test]
    fn fault_flags_override_the_scenario() {
        let cli = Cli::try_parse_from([
            "mock-model",
            "--go-away-after",
            "20",
            "--late-pong-ms",
            "30000",
            "--drop",
            "mid_tool_call@5:1006",
            "--drop",
            "after@60:silent",
            "--drop-every-connection",
        ])
        .unwrap();
        let mut f = Faults::default();
        cli.args.faults.apply(&mut f);
        assert_eq!(f.go_away_after.map(|r| r.0), Some(Duration::from_secs(20)));
        assert_eq!(f.late_pong, Some(Duration::from_secs(30)));
        assert_eq!(f.drops.len(), 2);
        assert_eq!(f.drops[0].when, super::super::faults::When::MidToolCall);
        assert_eq!(f.drops[0].ending, super::super::faults::Ending::Abrupt);
        assert_eq!(f.drops[1].ending, super::super::faults::Ending::Silent);
        assert!(f.drops.iter().all(|d| d.every_connection));
        let err = Cli::try_parse_from(["mock-model", "--drop", "sometimes"])
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("mid_tool_call"), "{err}");
    }
}
