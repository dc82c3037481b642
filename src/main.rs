//! The `baton` command line: thin wrappers over the library's entry points.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use std::path::PathBuf;

use baton::config::{self, LogFormat};
use baton::demo::{self, DemoArgs};
use baton::dial::{self, DialAudioSocketArgs, DialBridgeArgs, DialTwilioArgs};
use baton::leg::bridge::Dialect;
use baton::mock::cli::MockModelArgs;
use baton::server;

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
    baton demo                       # advisor Asha hands you to specialist Ravi and back\n  \
    baton demo --realtime --json     # the same at real pace, summary as JSON\n  \
    baton mock-model --listen 127.0.0.1:9300\n                                   \
    # a Gemini-Live-protocol mock for any client\n\n\
    Logging: set BATON_LOG (e.g. BATON_LOG=debug); logs go to stderr, coloured only on a\n\
    terminal; --log-format json writes one JSON object per line."
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
    /// Log format on stderr: human (colours only on a terminal) or json (one object per line;
    /// `serve`: with the call's span). For `serve` it overrides log.format.
    #[arg(long, global = true, value_name = "FORMAT", value_parser = parse_log_format)]
    log_format: Option<LogFormat>,
}

#[derive(Subcommand)]
enum Cmd {
    /// Play a bundled call through baton and the embedded mock model (default: seed 000, two
    /// agents with a handoff there and back); print its timeline with each handoff and its gap,
    /// and the latency table; write out/demo/call.wav, timeline.svg/png and summary.json.
    Demo(DemoArgs),
    /// Serve the embedded mock model on a socket (the Gemini Live protocol, or OpenAI Realtime
    /// with --profile openai), for baton or any client, including the official SDKs over wss://.
    MockModel(MockModelArgs),
    /// Run the daemon: telephony bridges (Twilio Media Streams at /twilio; Telnyx, Plivo, Exotel,
    /// Vonage at /telnyx, /plivo, /exotel, /vonage; any of them detected at /media-stream),
    /// SIP trunks and phones ([sip]), Asterisk AudioSocket ([audiosocket] listen), browsers over
    /// WebRTC (WHIP at /whip) and apps (/stream) connect; each call is carried to the configured
    /// model and back.
    Serve(ServeArgs),
    /// Place an outbound SIP call through a running `baton serve` (POST /calls on its admin
    /// API) on a configured trunk; prints the typed outcome.
    Call(baton::place::CallArgs),
    /// Place a call to a telephony-protocol server from a WAV fixture, as the bridge would.
    #[command(subcommand)]
    Dial(DialTarget),
    /// Measured runs with reports and plots: fixture replays and concurrency sweeps.
    #[command(subcommand)]
    Bench(BenchTarget),
    /// Talk to the configured agents through this machine's microphone and speaker (needs a
    /// build with `--features mic`); the transcript is printed as it comes.
    Talk(baton::talk::TalkArgs),
    /// Serve seed 002's MCP server (billing, promotions and security tools) over Streamable
    /// HTTP at http://<listen>/mcp, or over stdin/stdout with --stdio.
    #[command(
        after_help = "Examples:\n  baton mock-mcp --listen 127.0.0.1:9400\n  baton mock-mcp --stdio"
    )]
    MockMcp {
        /// Address to listen on.
        #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:9400")]
        listen: String,
        /// Speak MCP over stdin/stdout instead (for `[mcp.<name>] command = …`).
        #[arg(long)]
        stdio: bool,
    },
    /// Validate a config file; every problem is reported with its key and how to fix it; the
    /// MCP servers are tried once.
    #[command(after_help = "Example:\n  baton check-config config/baton.toml")]
    CheckConfig {
        /// The TOML config file.
        file: PathBuf,
        /// Check it as `serve --insecure-no-auth` would run it: a non-loopback address without
        /// API tokens is then not a problem.
        #[arg(long)]
        insecure_no_auth: bool,
    },
}

#[derive(Subcommand)]
enum BenchTarget {
    /// Replay fixture scenarios against a model (embedded mock by default); report latency,
    /// handoff and reconnect figures with plots.
    Fixtures(Box<baton::bench::fixtures::FixturesArgs>),
    /// Sweep concurrent Twilio-protocol calls against `baton serve` in its own process; report
    /// egress jitter, underruns, CPU and RSS per step.
    Load(baton::bench::load::LoadArgs),
    /// Many concurrent Twilio-protocol callers in this one process (the client side of `bench
    /// load`, also usable against a server on another machine); JSON lines on stdout.
    LoadClient(baton::bench::load::LoadClientArgs),
    /// Warm transfers to a person against SIPp (callers and the person's phone) on the embedded
    /// mock; report outcomes by kind, transfer_setup_ms, dead air and ring time.
    Transfers(baton::bench::transfers::TransfersArgs),
}

#[derive(Subcommand)]
enum DialTarget {
    /// Dial a Twilio Media Streams server (baton's /twilio or any other).
    Twilio(DialTwilioArgs),
    /// Dial a Telnyx media-streaming server (baton's /telnyx, or /media-stream).
    Telnyx(DialBridgeArgs),
    /// Dial a Plivo Audio Streams server (baton's /plivo, or /media-stream).
    Plivo(DialBridgeArgs),
    /// Dial an Exotel Voicebot server (baton's /exotel, or /media-stream).
    Exotel(DialBridgeArgs),
    /// Dial a Vonage Voice API WebSocket server (baton's /vonage, or /media-stream).
    Vonage(DialBridgeArgs),
    /// Connect to an AudioSocket server (baton's [audiosocket] listener or any other) as
    /// Asterisk would.
    Audiosocket(DialAudioSocketArgs),
}

#[derive(clap::Args)]
#[command(after_help = "Examples:\n  \
    baton serve --config config/baton.toml                 # embedded mock, 127.0.0.1:8080\n  \
    baton serve --config config/baton.toml --listen 0.0.0.0:8080\n  \
    baton serve --config config/baton.toml --log-format json\n\n\
    Point a Twilio number's voice webhook at https://<public_url>/twiml; it answers with\n\
    <Connect><Stream url=\"wss://<public_url>/twilio\">. Health: GET /healthz; Prometheus\n\
    metrics: GET /metrics.\n\n\
    Another model endpoint: [model] url = \"ws://127.0.0.1:9300\" for a separate\n\
    `baton mock-model --listen 127.0.0.1:9300 --scenario FILE` (that mock plays its own scenario;\n\
    model.scenario is the embedded mock's), or a wss:// URL, with model.ca_file = \"cert.pem\"\n\
    when its certificate is private (e.g. `baton mock-model --tls-self-signed cert.pem`).\n\
    serve checks the config first and refuses with every problem; `baton check-config FILE`\n\
    shows the same list and the model endpoint serve will use.")]
struct ServeArgs {
    /// The TOML config file (see config/baton.toml).
    #[arg(long, value_name = "FILE", default_value = "config/baton.toml")]
    config: PathBuf,
    /// Listen address (IP:port); overrides server.listen.
    #[arg(long, value_name = "ADDR", value_parser = listen_addr)]
    listen: Option<std::net::SocketAddr>,
    /// Serve a non-loopback address without API tokens (server.auth_tokens_env). Every endpoint
    /// is then open to anyone who reaches the address; baton logs a warning at start-up.
    #[arg(long)]
    insecure_no_auth: bool,
}

fn parse_log_format(s: &str) -> Result<LogFormat, String> {
    match s {
        "human" => Ok(LogFormat::Human),
        "json" => Ok(LogFormat::Json),
        _ => Err(format!("{s:?} is not a log format: use human or json")),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let format = cli.log_format;
    let init_logging =
        |level: &str, default: LogFormat| init_logging(level, format.unwrap_or(default));
    let result = match cli.cmd {
        Cmd::Demo(args) => {
            init_logging("warn", LogFormat::Human);
            run_demo(&args)
        }
        Cmd::MockModel(args) => {
            init_logging("info", LogFormat::Human);
            run_mock(args)
        }
        Cmd::Serve(args) => {
            tune_allocator();
            run_serve(args, format)
        }
        Cmd::Bench(BenchTarget::Fixtures(args)) => {
            init_logging_with("warn", format.unwrap_or(LogFormat::Human), true);
            baton::bench::fixtures::run(&args).map_err(anyhow::Error::from)
        }
        Cmd::Bench(BenchTarget::Load(args)) => {
            init_logging("warn", LogFormat::Human);
            baton::bench::load::run(&args).map_err(anyhow::Error::from)
        }
        Cmd::Bench(BenchTarget::LoadClient(args)) => {
            init_logging("error", LogFormat::Human);
            baton::bench::load::client::run(&args).map_err(anyhow::Error::from)
        }
        Cmd::Bench(BenchTarget::Transfers(args)) => {
            init_logging("warn", LogFormat::Human);
            baton::bench::transfers::run(&args).map_err(anyhow::Error::from)
        }
        Cmd::CheckConfig {
            file,
            insecure_no_auth,
        } => check_config(&file, insecure_no_auth),
        Cmd::Call(args) => {
            init_logging("warn", LogFormat::Human);
            baton::place::run(&args).map_err(anyhow::Error::from)
        }
        Cmd::MockMcp { listen, stdio } => {
            // stdout carries the protocol with --stdio: logs stay on stderr.
            init_logging("info", LogFormat::Human);
            run_mock_mcp(&listen, stdio)
        }
        Cmd::Talk(args) => {
            init_logging("warn", LogFormat::Human);
            baton::talk::run(&args).map_err(anyhow::Error::from)
        }
        Cmd::Dial(DialTarget::Twilio(args)) => {
            init_logging("warn", LogFormat::Human);
            run_dial(&args)
        }
        Cmd::Dial(DialTarget::Telnyx(args)) => {
            init_logging("warn", LogFormat::Human);
            run_dial_bridge(Dialect::Telnyx, &args)
        }
        Cmd::Dial(DialTarget::Plivo(args)) => {
            init_logging("warn", LogFormat::Human);
            run_dial_bridge(Dialect::Plivo, &args)
        }
        Cmd::Dial(DialTarget::Exotel(args)) => {
            init_logging("warn", LogFormat::Human);
            run_dial_bridge(Dialect::Exotel, &args)
        }
        Cmd::Dial(DialTarget::Vonage(args)) => {
            init_logging("warn", LogFormat::Human);
            run_dial_bridge(Dialect::Vonage, &args)
        }
        Cmd::Dial(DialTarget::Audiosocket(args)) => {
            init_logging("warn", LogFormat::Human);
            run_dial_audiosocket(&args)
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("baton: {}", error_text(&e));
            ExitCode::FAILURE
        }
    }
}

/// An error and its causes on one line, each said once: a message that already quotes its
/// cause (`file: not a readable WAV file: {cause}`) is not followed by the cause again.
fn error_text(e: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in e.chain() {
        let part = cause.to_string();
        if text.contains(part.trim()) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&part);
    }
    text
}

/// Logs go to stderr, with colours only when stderr is a terminal (never escape codes in a file
/// or a pipe); BATON_LOG overrides the level, except that libraries which would log credentials
/// are capped (`baton::secret::LOG_CAPS`).
fn init_logging(default_level: &str, format: LogFormat) {
    init_logging_with(default_level, format, false);
}

/// [`init_logging`]; with `capture`, the WARN and ERROR events of threads running a benchmark's
/// calls are kept for its report instead of printed (`baton::bench::capture`).
fn init_logging_with(default_level: &str, format: LogFormat, capture: bool) {
    use baton::bench::capture::{Capture, Printed};
    use tracing_subscriber::prelude::*;
    // A BATON_LOG that does not parse is said once logging is up, not silently replaced.
    let mut refused = None;
    let mut filter = match tracing_subscriber::EnvFilter::try_from_env("BATON_LOG") {
        Ok(f) => f,
        Err(e) => {
            if std::env::var_os("BATON_LOG").is_some() {
                refused = Some(e.to_string());
            }
            tracing_subscriber::EnvFilter::new(default_level)
        }
    };
    for cap in baton::secret::LOG_CAPS {
        if let Ok(d) = cap.parse() {
            filter = filter.add_directive(d);
        }
    }
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let hint = filter.max_level_hint();
    let printed = capture.then(|| Printed::upto(hint));
    let human = (format == LogFormat::Human).then(|| {
        tracing_subscriber::fmt::layer()
            .with_ansi(ansi)
            .with_writer(std::io::stderr)
            .with_filter(printed)
    });
    let json = (format == LogFormat::Json).then(|| {
        tracing_subscriber::fmt::layer()
            .json()
            .with_writer(std::io::stderr)
            .with_filter(printed)
    });
    tracing_subscriber::registry()
        .with(filter)
        .with(human)
        .with(json)
        .with(capture.then(|| Capture::upto(hint)))
        .init();
    if let Some(why) = refused {
        tracing::warn!(
            "BATON_LOG is not a filter ({why}); logging at {default_level}. Write a level \
             (error, warn, info, debug, trace) or targets, e.g. BATON_LOG=baton=debug,info"
        );
    }
}

/// Every problem of the file and of what it needs here (variables, ports), and what the rest
/// of it says (the model endpoint first); non-zero with the problems on stderr.
/// The calls of a daemon with config `c` that can be handed to a person.
fn transfer_legs(c: &config::Config) -> Vec<&'static str> {
    let mut legs = Vec::new();
    if !c.sip.listen.is_empty() {
        legs.push("SIP calls (REFER)");
    }
    if !c.twilio.auth_token_env.is_empty() {
        legs.push("Twilio calls (REST redirect)");
    }
    legs
}

/// `serve`'s start-up rule on exposure ([`server::auth::exposure`]) as a problem of the file:
/// a reachable address without API tokens, unless `insecure_no_auth`.
fn exposure_problem(checked: &config::Checked, insecure_no_auth: bool) -> Option<config::Problem> {
    let listen = checked.listen?;
    let c = &checked.config;
    let twilio_signed = !c.twilio.auth_token_env.is_empty() && !c.twilio.disable_signature_check;
    let tokens = !c.server.auth_tokens_env.is_empty();
    let e = server::auth::exposure(listen, tokens, twilio_signed, insecure_no_auth).err()?;
    Some(config::Problem {
        key: checked.listen_key.into(),
        message: e.refusal(),
        fix: e.fix().into(),
    })
}

/// The tokens in `server.auth_tokens_env`'s variable, when it is set, as `serve` reads them
/// ([`server::auth::ApiTokens`]): too short or not fit for a header is a problem of the key. An
/// unset variable is reported as such by the config's own checks.
fn tokens_problem(checked: &config::Checked) -> Option<config::Problem> {
    let var = checked.config.server.auth_tokens_env.trim();
    if var.is_empty() || std::env::var_os(var).is_none_or(|v| v.is_empty()) {
        return None;
    }
    let e = server::auth::ApiTokens::from_env(var).err()?;
    Some(config::Problem {
        key: "server.auth_tokens_env".into(),
        message: e.to_string(),
        fix: format!(
            "export {var} as one or more comma-separated tokens of at least {} printable \
             characters without spaces (e.g. `openssl rand -hex 32`)",
            server::auth::MIN_TOKEN_LEN
        ),
    })
}

/// `model.credential_command` run once, as `serve` runs it at start: a failure is a problem of
/// the key. Nothing the command prints on its standard output is shown.
fn credential_problem(checked: &config::Checked) -> Option<config::Problem> {
    const KEY: &str = "model.credential_command";
    let m = &checked.config.model;
    let argv = m.credential_command.as_ref()?;
    // The mock's is void; a command the file gets wrong is reported as such.
    if m.backend == config::BackendKind::Mock || checked.problems.iter().any(|p| p.key == KEY) {
        return None;
    }
    let e = baton::model::credential::CredentialCommand::new(argv.clone())
        .and_then(|c| c.run())
        .err()?;
    Some(config::Problem {
        key: KEY.into(),
        message: e.to_string(),
        fix: e.fix(),
    })
}

fn check_config(file: &std::path::Path, insecure_no_auth: bool) -> anyhow::Result<()> {
    let mut checked = config::check(file, None)?;
    let exposed = exposure_problem(&checked, insecure_no_auth);
    checked.problems.extend(exposed);
    let tokens = tokens_problem(&checked);
    checked.problems.extend(tokens);
    let credential = credential_problem(&checked);
    checked.problems.extend(credential);
    let loaded = checked.loaded();
    let c = &loaded.config;
    if checked.problems.is_empty() {
        println!("{}: ok", file.display());
    } else {
        println!(
            "{}: {} problem(s), listed below; the rest of the file says (a value it gets wrong \
             may show its default):",
            file.display(),
            checked.problems.len()
        );
    }
    // A value the file gets wrong is shown as what runs instead (its default), marked.
    let marked = |key: &str| {
        if checked.problems.iter().any(|p| p.key == key) {
            " (see its problem below)"
        } else {
            ""
        }
    };
    println!(
        "  listen {}{} · model backend {}{} · max {} calls{}",
        c.server.listen,
        marked("server.listen"),
        format!("{:?}", c.model.backend).to_lowercase(),
        marked("model.backend"),
        c.limits.max_calls,
        marked("limits.max_calls"),
    );
    model_lines(&loaded);
    println!("  twilio stream URL {}", loaded.twilio_stream_url());
    if let Some(why) = loaded.public_url_problem() {
        println!("    warning: {why}");
    }
    if let Some(a) = loaded.audiosocket_listen() {
        println!("  AudioSocket listener on {a}");
    }
    if !c.sip.listen.is_empty() {
        println!(
            "  SIP on {} · RTP ports {}-{} · codecs {}",
            c.sip.listen.join(", "),
            c.sip.rtp_port_min,
            c.sip.rtp_port_max,
            c.sip.codecs.join(", ")
        );
        for (name, t) in &c.sip.trunks {
            println!(
                "  SIP trunk {name}: {}{}",
                t.uri,
                if t.register { " (registers)" } else { "" }
            );
        }
        for (user, set) in &c.sip.routes {
            let path = loaded.resolve(set);
            println!("  SIP calls to {user} run {}", path.display());
            if let Ok(set) = baton::agents::load(&path) {
                for line in set.describe_people(&["SIP calls (REFER)"], true) {
                    println!("    {line}");
                }
            }
        }
    }
    if !c.agents.set.is_empty() {
        let path = loaded.resolve(&c.agents.set);
        println!("  agent set {}", path.display());
        if let Ok(set) = baton::agents::load(&path) {
            for line in set.describe_people(&transfer_legs(c), !c.sip.listen.is_empty()) {
                println!("    {line}");
            }
        }
    }
    if let Ok(Some(e)) = baton::traces::Exporter::new(&c.traces) {
        println!("  call traces to {} (OTLP/HTTP, JSON)", e.endpoint());
    }
    if !c.mcp.is_empty() {
        let (specs, _) = baton::mcp::config::problems(&c.mcp, &loaded.resolve("."));
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        for s in rt.block_on(baton::mcp::hub::probe(specs)) {
            print!("  MCP server {} ({}): ", s.name, s.endpoint);
            match s.state {
                baton::mcp::State::Connected => println!("connected, {} tool(s)", s.tools.len()),
                _ => println!(
                    "DOWN: {} (the daemon starts anyway and keeps retrying)",
                    s.error.as_deref().unwrap_or("no answer")
                ),
            }
            for r in &s.refused {
                println!("    {r}");
            }
        }
    }
    if c.server.auth_tokens_env.is_empty() && insecure_no_auth {
        println!(
            "  no API tokens, --insecure-no-auth: every endpoint is open to whoever reaches {}",
            c.server.listen
        );
    } else if c.server.auth_tokens_env.is_empty() {
        println!("  no API tokens: serves only a loopback address (else --insecure-no-auth)");
    } else {
        println!(
            "  API tokens required (from ${}) on every route but the probes (/livez, /readyz, /healthz), the call page (/, /caller.wav) and /openapi.json",
            c.server.auth_tokens_env
        );
    }
    if !c.model.ca_file.is_empty() {
        println!(
            "  model TLS also trusts {}",
            loaded.resolve(&c.model.ca_file).display()
        );
    }
    if c.twilio.auth_token_env.is_empty() || c.twilio.disable_signature_check {
        println!("  X-Twilio-Signature checking is OFF (no twilio.auth_token_env)");
    } else {
        println!(
            "  X-Twilio-Signature required (token from ${})",
            c.twilio.auth_token_env
        );
    }
    checked.into_result()?;
    Ok(())
}

/// The model endpoint `serve` will use, the model it addresses and what baton will use of it.
fn model_lines(loaded: &config::Loaded) {
    use baton::config::BackendKind;
    let m = &loaded.config.model;
    let embedded_profile = (m.backend == BackendKind::Mock && m.url.is_empty()).then(|| {
        if m.openai() {
            return baton::mock::openai::MODEL_ID;
        }
        let scenario = if m.scenario.is_empty() {
            baton::mock::Scenario::builtin()
        } else {
            match baton::mock::Scenario::load(&loaded.resolve(&m.scenario)) {
                Ok(s) => s,
                Err(_) => baton::mock::Scenario::builtin(),
            }
        };
        scenario.profile.model_id()
    });
    let endpoint = match (m.backend, m.url.as_str()) {
        (BackendKind::Mock, "") => "the embedded mock model (in this process)".to_owned(),
        (BackendKind::Gemini, "") => baton::model::gemini::endpoint::DEVELOPER_API_BASE.to_owned(),
        (BackendKind::Openai, "") => baton::model::openai::endpoint::OPENAI_BASE.to_owned(),
        (_, url) => url.to_owned(),
    };
    println!("  model endpoint {endpoint}");
    if let Some(program) = m.credential_command.as_ref().and_then(|argv| argv.first())
        && m.backend != BackendKind::Mock
    {
        println!(
            "  model credential: what {program} prints, run at start and again every {} s",
            m.credential_refresh_s
        );
    }
    let info = m.model_info(embedded_profile);
    for line in baton::model::catalog::describe(&info).lines() {
        println!("  {line}");
    }
}

fn run_mock_mcp(listen: &str, stdio: bool) -> anyhow::Result<()> {
    use baton::mock::mcp_server::{SupportDesk, serve_http};
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        if stdio {
            use rmcp::ServiceExt;
            let running = SupportDesk::default()
                .serve((tokio::io::stdin(), tokio::io::stdout()))
                .await?;
            let _ = running.waiting().await;
            return Ok(());
        }
        let stop = tokio_util::sync::CancellationToken::new();
        let addr = serve_http(SupportDesk::default(), listen, stop.clone()).await?;
        eprintln!("seed 002 MCP server on http://{addr}/mcp — Ctrl-C to stop");
        server::termination_signal().await;
        stop.cancel();
        Ok(())
    })
}

fn run_dial(args: &DialTwilioArgs) -> anyhow::Result<()> {
    let report = dial::run(args)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", dial::render(&report));
    }
    dial_failed(&report)
}

fn run_dial_bridge(dialect: Dialect, args: &DialBridgeArgs) -> anyhow::Result<()> {
    let report = dial::run_bridge(dialect, args)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", dial::render(&report));
    }
    dial_failed(&report)
}

/// A call the server refused or lost fails the command, after its report is out.
fn dial_failed(report: &dial::DialReport) -> anyhow::Result<()> {
    match &report.failure {
        Some(why) => anyhow::bail!("the call did not run to its end: {why}"),
        None => Ok(()),
    }
}

fn run_dial_audiosocket(args: &DialAudioSocketArgs) -> anyhow::Result<()> {
    let report = dial::run_audiosocket(args)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", dial::render_audiosocket(&report));
    }
    match &report.failure {
        Some(why) => anyhow::bail!("the call did not run to its end: {why}"),
        None => Ok(()),
    }
}

/// Runs the daemon with glibc's per-thread cache of freed chunks off, so memory a load freed
/// can be given back (`server::memory::allocator_tunables`): glibc reads its tunables only when a
/// process starts, so while nothing else has started yet `serve` executes itself again, once,
/// with them in `GLIBC_TUNABLES` (same process id, same arguments). An operator's own
/// `glibc.malloc.tcache_count` is kept; if re-executing fails, the daemon runs as it is.
fn tune_allocator() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        use std::os::unix::process::CommandExt;
        let current = std::env::var("GLIBC_TUNABLES").ok();
        let Some(tunables) = baton::server::memory::allocator_tunables(current.as_deref()) else {
            return;
        };
        let mut args = std::env::args_os();
        let argv0 = args.next().unwrap_or_else(|| "baton".into());
        let err = std::process::Command::new("/proc/self/exe")
            .arg0(argv0)
            .args(args)
            .env("GLIBC_TUNABLES", tunables)
            .exec();
        eprintln!("baton: running with glibc's thread cache on ({err})");
    }
}

/// `--listen`: an IP address and a port, said so when it is anything else.
fn listen_addr(s: &str) -> Result<std::net::SocketAddr, String> {
    s.parse().map_err(|_| {
        format!(
            "{s:?} is not an IP address and port: write e.g. 127.0.0.1:8080, or 0.0.0.0:8080 for \
             every interface (a host name such as localhost is not taken)"
        )
    })
}

fn run_serve(args: ServeArgs, log_format: Option<LogFormat>) -> anyhow::Result<()> {
    // The same checks as check-config, every problem at once, before anything starts.
    if !args.config.exists() {
        anyhow::bail!(
            "{}: no such config file (relative to {}): give one with --config <FILE>; \
             config/baton.toml in baton's source tree is the documented example",
            args.config.display(),
            std::env::current_dir().map_or_else(|_| "here".into(), |d| d.display().to_string())
        );
    }
    let mut checked = config::check(&args.config, args.listen)?;
    let exposed = exposure_problem(&checked, args.insecure_no_auth);
    checked.problems.extend(exposed);
    let tokens = tokens_problem(&checked);
    checked.problems.extend(tokens);
    let listen_key = checked.listen_key;
    let mut loaded = checked.into_result()?;
    if let Some(format) = log_format {
        loaded.config.log.format = format;
    }
    init_logging(&loaded.config.log.level, loaded.config.log.format);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let served = rt.block_on(async move {
        let listen = loaded.listen;
        if let Some(exporter) = baton::traces::Exporter::new(&loaded.config.traces)? {
            exporter.install();
        }
        let taken = config::config_ports(&loaded);
        let app = server::state(loaded)?;
        let twilio_signed = app.twilio_token.is_some();
        let exposure = server::auth::exposure(
            listen,
            app.api_tokens.is_some(),
            twilio_signed,
            args.insecure_no_auth,
        )?;
        let listener = tokio::net::TcpListener::bind(listen).await.map_err(|e| {
            config::ConfigError::Invalid {
                path: args.config.clone(),
                problems: vec![config::bind_problem(listen_key, listen, &e, &taken)],
            }
        })?;
        let addr = listener.local_addr()?;
        server::auth::log_exposure(exposure, addr, twilio_signed);
        for (on, route, credential) in [
            (
                app.telnyx_token.is_some(),
                "/telnyx",
                "x-telnyx-streaming-auth-token",
            ),
            (
                app.exotel_basic.is_some(),
                "/exotel",
                "Authorization: Basic KEY:TOKEN",
            ),
        ] {
            if on {
                tracing::info!(
                    "{route} is authenticated by {credential} instead of the API tokens"
                );
            }
        }
        println!(
            "baton serve listening on http://{addr} (model: {}; twilio stream {})",
            app.backend.describe(),
            app.stream_url
        );
        tracing::info!(%addr, model = %app.backend.describe(), "serving");
        server::serve(app, listener, server::termination_signal()).await?;
        // The traces of the calls the drain ended are still on their way.
        baton::traces::flush(baton::server::TRACES_FLUSH_WAIT).await;
        tracing::info!("stopped");
        anyhow::Ok(())
    });
    // What still runs on the runtime is given a bounded moment, never an unbounded wait.
    rt.shutdown_timeout(baton::server::RUNTIME_CLOSE_WAIT);
    served
}

fn run_demo(args: &DemoArgs) -> anyhow::Result<()> {
    if args.list {
        print!("{}", demo::list_scenarios()?);
        return Ok(());
    }
    let outcome = demo::run(args)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&outcome.summary)?);
    } else {
        print!("{}", demo::render(&outcome));
    }
    if let Some(why) = outcome.failure() {
        anyhow::bail!("the call did not play to its end ({why}); its figures describe a cut call");
    }
    Ok(())
}

fn run_mock(args: MockModelArgs) -> anyhow::Result<()> {
    let rt = args.runtime()?;
    rt.block_on(baton::mock::cli::run(args))?;
    Ok(())
}
