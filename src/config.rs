//! The daemon's TOML configuration (`baton serve --config`, `baton check-config`): parsing with
//! unknown keys refused, then validation that reports every problem with the file, the key and
//! how to fix it. Credentials are never in the file: it names the environment variable that
//! holds each one.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

pub mod decode;
mod environment;
mod sections;
mod void;

pub use decode::{Problem, closest, from_toml};
pub use environment::{bind_problem, closest_existing, config_ports, missing_file};

pub use sections::*;

/// A config file that cannot be used; `Display` lists every problem.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{path}: cannot read: {reason}")]
    Read { path: PathBuf, reason: String },
    #[error("{}", render(path, problems))]
    Invalid {
        path: PathBuf,
        problems: Vec<Problem>,
    },
}

fn render(path: &Path, problems: &[Problem]) -> String {
    let mut s = format!("{}: {} problem(s)", path.display(), problems.len());
    for p in problems {
        s.push_str(&format!("\n  {}: {}\n    fix: {}", p.key, p.message, p.fix));
    }
    s
}

/// A loaded, validated config and the file it came from.
#[derive(Clone, Debug)]
pub struct Loaded {
    pub config: Config,
    pub path: PathBuf,
    pub listen: SocketAddr,
}

impl Loaded {
    /// A path in the config, resolved against the config file's folder.
    pub fn resolve(&self, p: &str) -> PathBuf {
        let p = Path::new(p);
        if p.is_absolute() {
            p.to_path_buf()
        } else {
            self.path.parent().unwrap_or(Path::new(".")).join(p)
        }
    }

    /// The public origin, or `http://<listen>` when none is configured.
    pub fn public_url(&self) -> String {
        let u = self.config.server.public_url.trim_end_matches('/');
        if u.is_empty() {
            format!("http://{}", self.listen)
        } else {
            u.to_owned()
        }
    }

    /// Where this instance is reached (`cluster.advertise_url`, else the public origin), without
    /// a trailing `/`.
    pub fn advertise_url(&self) -> String {
        let u = self.config.cluster.advertise_url.trim_end_matches('/');
        if u.is_empty() {
            self.public_url()
        } else {
            u.to_owned()
        }
    }

    /// The AudioSocket listen address, when one is configured (validated by [`parse`]).
    pub fn audiosocket_listen(&self) -> Option<SocketAddr> {
        self.config.audiosocket.listen.parse().ok()
    }

    /// Why [`public_url`](Self::public_url) cannot be reached by a bridge, when it cannot: no
    /// `server.public_url` and a wildcard `server.listen` (`0.0.0.0`, `::`) make TwiML name
    /// `ws://0.0.0.0:…`.
    pub fn public_url_problem(&self) -> Option<String> {
        if !(self.config.server.public_url.trim().is_empty() && self.listen.ip().is_unspecified()) {
            return None;
        }
        let cluster = if self.config.cluster.advertise_url.trim().is_empty() {
            " and the cluster its instances"
        } else {
            ""
        };
        Some(format!(
            "server.public_url is not set and server.listen is {}, so /twiml would send bridges\
             {cluster} to {}: set public_url to the address they reach (e.g. \
             https://baton.example.com)",
            self.listen,
            self.public_url()
        ))
    }

    /// The `wss://…/twilio` (or `ws://` for an http origin) URL bridges connect to.
    pub fn twilio_stream_url(&self) -> String {
        let base = self.public_url();
        let ws = if let Some(rest) = base.strip_prefix("https://") {
            format!("wss://{rest}")
        } else if let Some(rest) = base.strip_prefix("http://") {
            format!("ws://{rest}")
        } else {
            base
        };
        format!("{ws}/twilio")
    }
}

/// Reads and validates a config file.
pub fn load(path: &Path) -> Result<Loaded, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|e| ConfigError::Read {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    parse(&text, path)
}

/// Parses and validates config text; `path` names the file in errors and anchors relative paths.
/// Every problem of the file is reported at once.
pub fn parse(text: &str, path: &Path) -> Result<Loaded, ConfigError> {
    let checked = inspect_text(text, path);
    match (checked.listen, checked.problems.is_empty()) {
        (Some(listen), true) => Ok(Loaded {
            config: checked.config,
            path: path.to_path_buf(),
            listen,
        }),
        _ => Err(ConfigError::Invalid {
            path: path.to_path_buf(),
            problems: checked.problems,
        }),
    }
}

/// A config file as far as it could be read, with every problem found in it: the config is the
/// file with each bad key taken out (so its defaults apply there), for showing what the rest
/// says.
#[derive(Clone, Debug)]
pub struct Checked {
    pub config: Config,
    pub path: PathBuf,
    /// `server.listen` (after `--listen`), when it is an address.
    pub listen: Option<SocketAddr>,
    /// Where that address was given: [`LISTEN_FLAG`] when `serve --listen` gave it, else
    /// `server.listen`. Problems of the address are listed under it.
    pub listen_key: &'static str,
    pub problems: Vec<Problem>,
}

/// The key of a problem with an address `serve --listen` gave.
pub const LISTEN_FLAG: &str = "--listen";

impl Checked {
    /// The config as [`Loaded`] (with the default address when `server.listen` is not one), for
    /// describing it.
    pub fn loaded(&self) -> Loaded {
        Loaded {
            config: self.config.clone(),
            path: self.path.clone(),
            listen: self
                .listen
                .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 8080))),
        }
    }

    /// The config when nothing is wrong, else every problem.
    pub fn into_result(self) -> Result<Loaded, ConfigError> {
        match (self.listen, self.problems.is_empty()) {
            (Some(listen), true) => Ok(Loaded {
                config: self.config,
                path: self.path,
                listen,
            }),
            _ => Err(ConfigError::Invalid {
                path: self.path,
                problems: self.problems,
            }),
        }
    }
}

/// What `check-config` and `serve` check before the daemon starts: the file's every problem
/// (syntax, keys, values, files, settings made void), then what it needs from this machine
/// (environment variables it names, the ports it binds). `listen` replaces `server.listen`
/// (`serve --listen`).
pub fn check(path: &Path, listen: Option<SocketAddr>) -> Result<Checked, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|e| ConfigError::Read {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    let mut checked = inspect_text(&text, path);
    if let Some(l) = listen {
        checked.problems.retain(|p| p.key != "server.listen");
        checked.listen = Some(l);
        checked.listen_key = LISTEN_FLAG;
        checked.config.server.listen = l.to_string();
    }
    let loaded = checked.loaded();
    environment::unset_variables(&loaded, &mut checked.problems);
    if checked.listen.is_some() {
        environment::ports(&loaded, checked.listen_key, &mut checked.problems);
    }
    Ok(checked)
}

/// The file's own problems (no look at the environment).
fn inspect_text(text: &str, path: &Path) -> Checked {
    let (config, mut problems) = decode::decode::<Config>(text, "config/baton.toml");
    let config = config.unwrap_or_default();
    let listen = validate(&config, path, &mut problems);
    // A key already wrong for what it says is not also reported as void.
    let mut void = Vec::new();
    void::check(&config, &void::Written::of(text), &mut void);
    void.retain(|v| !problems.iter().any(|p| p.key == v.key));
    problems.extend(void);
    Checked {
        config,
        path: path.to_path_buf(),
        listen,
        listen_key: "server.listen",
        problems,
    }
}

/// Empty, or letters, digits and `_`: the name of a variable, not a credential pasted in.
fn is_env_name(s: &str) -> bool {
    s.chars().all(|ch| ch.is_ascii_alphanumeric() || ch == '_')
}

/// The problems of the agent set at `path`, which `key` names: each of the set's own, or the
/// MCP servers it names that `c` does not configure.
fn set_problems(c: &Config, key: &str, path: &Path, problem: &mut impl FnMut(&str, String, &str)) {
    match crate::agents::load(path) {
        // One entry per problem of the set, so the count printed is the count listed.
        Err(e) if !e.problems().is_empty() => {
            for q in e.problems_in_file() {
                problem(&q.key, q.message, &q.fix);
            }
        }
        Err(e) => problem(
            key,
            format!("the agent set does not load: {e}"),
            "fix the agent set file (see config/agents/README.md), or remove the key to run one agent",
        ),
        Ok(reg) => {
            let missing: Vec<String> = reg
                .mcp_servers()
                .into_iter()
                .filter(|s| !c.mcp.contains_key(s))
                .collect();
            if !missing.is_empty() {
                problem(
                    key,
                    format!(
                        "the agent set names MCP servers this config does not: {}",
                        missing.join(", ")
                    ),
                    "add an [mcp.<name>] table for each (url = … or command = …)",
                );
            }
        }
    }
}

fn validate(c: &Config, path: &Path, out: &mut Vec<Problem>) -> Option<SocketAddr> {
    let mut problem = |key: &str, message: String, fix: &str| {
        out.push(Problem {
            key: key.into(),
            message,
            fix: fix.into(),
        })
    };
    let listen = c.server.listen.parse::<SocketAddr>().ok();
    if listen.is_none() {
        problem(
            "server.listen",
            format!("{:?} is not an address:port", c.server.listen),
            "write it as \"127.0.0.1:8080\" (or \"0.0.0.0:8080\" to accept other hosts)",
        );
    }
    let al = &c.audiosocket.listen;
    if !al.is_empty() && al.parse::<SocketAddr>().is_err() {
        problem(
            "audiosocket.listen",
            format!("{al:?} is not an address:port"),
            "write it as \"127.0.0.1:9092\" (the host:port of the AudioSocket() dialplan line), or remove the key",
        );
    }
    let pu = &c.server.public_url;
    if !pu.is_empty() {
        match url::Url::parse(pu) {
            Ok(u)
                if matches!(u.scheme(), "https" | "http")
                    && u.path() == "/"
                    && u.query().is_none() => {}
            _ => problem(
                "server.public_url",
                format!("{pu:?} is not an http(s) origin"),
                "write the origin bridges reach baton at, e.g. \"https://baton.example.com\" (no path)",
            ),
        }
    }
    if c.limits.max_calls == 0 {
        problem(
            "limits.max_calls",
            "is 0, so every call would be refused".into(),
            "set a positive number, e.g. 200",
        );
    }
    if c.limits.leg_queue_frames < 5 {
        problem(
            "limits.leg_queue_frames",
            format!(
                "{} frames (100 ms) is too small to absorb scheduling jitter",
                c.limits.leg_queue_frames
            ),
            "use at least 5; the default is 100 (2 s)",
        );
    }
    if let Err(e) = crate::traces::Exporter::new(&c.traces) {
        problem(
            "traces.otlp_endpoint",
            e.to_string(),
            "write an OTLP/HTTP collector's base URL, e.g. \"http://127.0.0.1:4318\", or \"\" for no traces",
        );
    }
    if tracing_subscriber::EnvFilter::try_new(&c.log.level).is_err() {
        problem(
            "log.level",
            format!("{:?} is not a log filter", c.log.level),
            "use error, warn, info, debug or e.g. \"baton=debug\"",
        );
    }
    let m = &c.model;
    if !(m.url.is_empty() || m.url.starts_with("ws://") || m.url.starts_with("wss://")) {
        problem(
            "model.url",
            format!("{:?} is not a ws:// or wss:// URL", m.url),
            url_example(m.backend),
        );
    }
    let gemini_profile = m.profile.parse::<crate::mock::Profile>().is_ok();
    let embedded = m.backend == BackendKind::Mock && m.url.is_empty();
    if !(m.profile.is_empty() || m.profile == "openai" || (gemini_profile && embedded))
        || (!m.profile.is_empty() && m.backend != BackendKind::Mock)
    {
        problem(
            "model.profile",
            format!(
                "{:?} is not a profile of backend {:?}",
                m.profile, m.backend
            )
            .to_lowercase(),
            "with backend = \"mock\": leave it out (the scenario's Gemini profile), write profile = \"openai\", or (the embedded mock only) a Gemini profile: \"gemini-3.8\", \"gemini-2.5\", \"gemini-3.1\"",
        );
    }
    match m.backend {
        BackendKind::Openai => {
            if !m
                .credential_env
                .chars()
                .all(|ch| ch.is_ascii_alphanumeric() || ch == '_')
            {
                problem(
                    "model.credential_env",
                    "must be the NAME of an environment variable, not a credential".into(),
                    "write e.g. credential_env = \"OPENAI_API_KEY\" (the default) and export the key in that variable",
                );
            }
        }
        BackendKind::Mock => {
            // Only the embedded mock reads it (a mock at model.url plays its own: see void.rs).
            if !m.scenario.is_empty() && m.url.is_empty() {
                let p = path.parent().unwrap_or(Path::new(".")).join(&m.scenario);
                if !p.exists() {
                    {
                        let p = missing_file(
                            "model.scenario",
                            &p,
                            "a scenario file (or remove the key to use the built-in script)",
                        );
                        problem(&p.key, p.message, &p.fix);
                    }
                }
            }
        }
        BackendKind::Gemini | BackendKind::Vertex => {
            let vertex = m.backend == BackendKind::Vertex;
            if m.credential_env.is_empty() && m.credential_command.is_none() {
                problem(
                    "model.credential_env",
                    format!(
                        "backend {:?} needs a credential, but neither credential_env nor \
                         credential_command is set",
                        m.backend
                    )
                    .to_lowercase(),
                    if vertex {
                        "let baton run a command that prints a fresh OAuth2 access token (sent as \
                         Authorization: Bearer) and run it again every credential_refresh_s: \
                         credential_command = [\"gcloud\", \"auth\", \"print-access-token\"]; or \
                         name a variable holding one, read once at start (such a token expires \
                         within about an hour), e.g. credential_env = \"VERTEX_ACCESS_TOKEN\" and \
                         export VERTEX_ACCESS_TOKEN=\"$(gcloud auth print-access-token)\"; baton \
                         reads no application-default credentials (never put the token in this file)"
                    } else {
                        "name the variable that holds the API key, e.g. credential_env = \
                         \"GEMINI_API_KEY\" (never put the key in this file)"
                    },
                );
            } else if !m
                .credential_env
                .chars()
                .all(|ch| ch.is_ascii_alphanumeric() || ch == '_')
            {
                problem(
                    "model.credential_env",
                    "must be the NAME of an environment variable, not a credential".into(),
                    if vertex {
                        "write e.g. credential_env = \"VERTEX_ACCESS_TOKEN\" and export an OAuth2 \
                         access token in that variable: export \
                         VERTEX_ACCESS_TOKEN=\"$(gcloud auth print-access-token)\"; or, in place of \
                         credential_env, let baton renew it: credential_command = [\"gcloud\", \
                         \"auth\", \"print-access-token\"]"
                    } else {
                        "write e.g. credential_env = \"GEMINI_API_KEY\" and export the key in that \
                         variable"
                    },
                );
            }
            if m.backend == BackendKind::Vertex && m.url.is_empty() {
                problem(
                    "model.url",
                    "vertex needs the regional endpoint".into(),
                    "e.g. url = \"wss://us-central1-aiplatform.googleapis.com\"",
                );
            }
        }
    }
    credential_problems(m, &mut problem);
    let st = &c.store;
    if !st.url.is_empty() {
        if !(st.url.starts_with("sqlite:") || st.url.starts_with("postgres")) {
            problem(
                "store.url",
                format!("{:?} is neither sqlite:// nor postgres://", st.url),
                "e.g. url = \"sqlite://out/baton.db\" or \"postgres://baton@db.internal/baton\"",
            );
        } else if url::Url::parse(&st.url).is_ok_and(|u| u.password().is_some()) {
            problem(
                "store.url",
                "holds a password".into(),
                "put the whole URL in an environment variable and name it with store.url_env",
            );
        }
    }
    if st.queue == 0 {
        problem(
            "store.queue",
            "is 0, so every write would be dropped".into(),
            "use e.g. 10000",
        );
    }
    let base = path.parent().unwrap_or(Path::new("."));
    crate::mcp::config::validate(&c.mcp, base, &mut |k, m, f| problem(k, m, f));
    if !c.agents.set.is_empty() && !base.join(&c.agents.set).exists() {
        {
            let p = missing_file(
                "agents.set",
                &base.join(&c.agents.set),
                "an agent set file (see config/agents/README.md), or remove the key to run one agent",
            );
            problem(&p.key, p.message, &p.fix);
        }
    }
    // Each set once, however many keys name it: agents.set, then (when SIP listens, as serve
    // loads them only then) the routes'. A missing route set is reported by the [sip] checks.
    let mut sets: Vec<(String, PathBuf)> = Vec::new();
    let mut named = |key: String, p: PathBuf| {
        let same = p.canonicalize().ok();
        if p.exists() && !sets.iter().any(|(_, q)| q.canonicalize().ok() == same) {
            sets.push((key, p));
        }
    };
    if !c.agents.set.is_empty() {
        named("agents.set".into(), base.join(&c.agents.set));
    }
    if !c.sip.listen.is_empty() {
        for (user, set) in &c.sip.routes {
            named(format!("sip.routes.{user}"), base.join(set));
        }
    }
    for (key, p) in &sets {
        set_problems(c, key, p, &mut problem);
    }
    crate::leg::webrtc::config::validate(&c.webrtc, &mut problem);
    let dir = path.parent().unwrap_or(Path::new("."));
    crate::leg::sip::config::validate(&c.sip, dir, &mut problem);
    crate::leg::keypad::validate(&c.keypad, &mut problem);
    let r = &c.resume;
    if r.backoff_ms.is_empty() {
        problem(
            "resume.backoff_ms",
            "is empty".into(),
            "give at least one wait, e.g. backoff_ms = [0, 100, 400]",
        );
    }
    if r.keepalive_ping_s > 0 && r.keepalive_dead_s <= r.keepalive_ping_s + 30 {
        problem(
            "resume.keepalive_dead_s",
            format!(
                "{} s would call a healthy socket dead: the service answers pings up to 30 s late",
                r.keepalive_dead_s
            ),
            "make it more than keepalive_ping_s + 30 (the default is 45 with pings every 10 s)",
        );
    }
    if !(20..=100).contains(&m.uplink_chunk_ms) || !m.uplink_chunk_ms.is_multiple_of(20) {
        problem(
            "model.uplink_chunk_ms",
            format!(
                "{} ms is not 20, 40, 60, 80 or 100: caller frames come every 20 ms, a chunk is a \
                 whole number of them, and beyond 100 the model hears the caller late",
                m.uplink_chunk_ms
            ),
            "use 20 (each frame as it comes, the default) or 40 (half the messages, up to 20 ms \
             later)",
        );
    }
    if m.compression_target_tokens > 0
        && m.compression_trigger_tokens > 0
        && m.compression_target_tokens >= m.compression_trigger_tokens
    {
        problem(
            "model.compression_target_tokens",
            "is not below compression_trigger_tokens".into(),
            "the window shrinks the context: use e.g. half of the trigger",
        );
    }
    let t = &c.twilio;
    if !is_env_name(&t.auth_token_env) {
        problem(
            "twilio.auth_token_env",
            "must be the NAME of an environment variable, not the token".into(),
            "write e.g. auth_token_env = \"TWILIO_AUTH_TOKEN\" and export the token in that variable",
        );
    }
    for (key, env, example) in [
        (
            "telnyx.stream_auth_token_env",
            &c.telnyx.stream_auth_token_env,
            "write e.g. stream_auth_token_env = \"TELNYX_STREAM_TOKEN\" and export the token there",
        ),
        (
            "exotel.basic_auth_env",
            &c.exotel.basic_auth_env,
            "write e.g. basic_auth_env = \"EXOTEL_STREAM_AUTH\" and export KEY:TOKEN there",
        ),
    ] {
        if !is_env_name(env) {
            problem(
                key,
                "must be the NAME of an environment variable, not the credential".into(),
                example,
            );
        }
    }
    if !is_env_name(&c.server.auth_tokens_env) {
        problem(
            "server.auth_tokens_env",
            "must be the NAME of an environment variable, not the tokens".into(),
            "write e.g. auth_tokens_env = \"BATON_API_TOKENS\" and export comma-separated tokens in that variable",
        );
    }
    if !m.ca_file.is_empty() {
        let p = path.parent().unwrap_or(Path::new(".")).join(&m.ca_file);
        if !p.exists() {
            {
                let p = missing_file("model.ca_file", &p, "a PEM file of CA certificates");
                problem(&p.key, p.message, &p.fix);
            }
        } else if !p.is_file() {
            problem(
                "model.ca_file",
                format!("{} is not a file", p.display()),
                "give a PEM file of CA certificates, relative to this config file",
            );
        }
    }
    validate_cluster(&c.cluster, &mut problem);
    let sid_ok = t.account_sid.starts_with("AC") && t.account_sid.len() == 34;
    if !(t.account_sid.is_empty() || sid_ok) {
        problem(
            "twilio.account_sid",
            format!("{:?} is not a Twilio account SID", t.account_sid),
            "copy it from the Twilio console: \"AC\" followed by 32 hex digits",
        );
    }
    listen
}

/// `model.credential_command` and `model.credential_refresh_s` (the mock's command is void:
/// see void.rs).
fn credential_problems(m: &ModelConfig, problem: &mut impl FnMut(&str, String, &str)) {
    if let Some(argv) = &m.credential_command
        && m.backend != BackendKind::Mock
    {
        if argv.first().is_none_or(|p| p.trim().is_empty()) {
            problem(
                "model.credential_command",
                "names no program: its first item is the program, the others its arguments".into(),
                "e.g. credential_command = [\"gcloud\", \"auth\", \"print-access-token\"], or \
                 remove the line",
            );
        } else if let [program] = argv.as_slice()
            && program.trim().contains(char::is_whitespace)
            && !Path::new(program).is_file()
        {
            let items: Vec<String> = program
                .split_whitespace()
                .map(|w| format!("{w:?}"))
                .collect();
            problem(
                "model.credential_command",
                format!(
                    "names the program {program:?}, with spaces: it runs directly, no shell \
                     splits it"
                ),
                &format!(
                    "give the program and each argument as an item of its own: \
                     credential_command = [{}]",
                    items.join(", ")
                ),
            );
        } else if !m.credential_env.is_empty() {
            problem(
                "model.credential_command",
                "is set together with model.credential_env: the credential comes from one of \
                 them"
                    .into(),
                "keep credential_command for a credential that expires (it runs again every \
                 credential_refresh_s) and remove credential_env, or keep credential_env (read \
                 once at start) and remove credential_command",
            );
        }
    }
    if m.credential_refresh_s == 0 {
        problem(
            "model.credential_refresh_s",
            "is 0: the credential command would run again without a pause".into(),
            "give the seconds between runs, e.g. 300 (the default; a Google access token lasts at \
             most an hour, and one from a metadata server may have only minutes left)",
        );
    }
}

/// A `model.url` that fits `backend`, for the fix of one that is not a WebSocket URL.
fn url_example(backend: BackendKind) -> &'static str {
    match backend {
        BackendKind::Mock => {
            "e.g. \"ws://127.0.0.1:9300\" for a separate baton mock-model, or leave it out for \
             the embedded one"
        }
        BackendKind::Gemini => {
            "leave it out for the Developer API (wss://generativelanguage.googleapis.com), or e.g. \
             \"ws://127.0.0.1:9300\" for a separate baton mock-model"
        }
        BackendKind::Vertex => {
            "your region's endpoint, e.g. url = \"wss://us-central1-aiplatform.googleapis.com\""
        }
        BackendKind::Openai => {
            "leave it out for the OpenAI service (wss://api.openai.com/v1), or e.g. \
             \"ws://127.0.0.1:9300/v1\" for a separate `baton mock-model --profile openai`"
        }
    }
}

fn validate_cluster(k: &ClusterConfig, problem: &mut impl FnMut(&str, String, &str)) {
    let id_ok = k.instance_id.len() <= 40
        && k.instance_id
            .chars()
            .all(|ch| ch.is_ascii_alphanumeric() || ch == '-' || ch == '_');
    if !id_ok {
        problem(
            "cluster.instance_id",
            format!("{:?} is not a usable instance name", k.instance_id),
            "use at most 40 letters, digits, '-' or '_' (e.g. the pod or host name), or leave it out for a random one",
        );
    }
    let au = &k.advertise_url;
    if !au.is_empty() {
        match url::Url::parse(au) {
            Ok(u)
                if matches!(u.scheme(), "https" | "http")
                    && u.query().is_none()
                    && u.fragment().is_none()
                    && u.host().is_some() => {}
            _ => problem(
                "cluster.advertise_url",
                format!("{au:?} is not an http(s) URL without a query"),
                "write where bridges reach this instance, e.g. \"https://baton-2.example.com\" or \"https://lb.example.com/i/baton-2\"",
            ),
        }
    }
    if k.heartbeat_ms < 100 {
        problem(
            "cluster.heartbeat_ms",
            format!("{} ms is too often for a database write", k.heartbeat_ms),
            "use at least 100; the default is 1000",
        );
    }
    if k.stale_after_ms < k.heartbeat_ms.saturating_mul(3) {
        problem(
            "cluster.stale_after_ms",
            format!(
                "{} ms would give up an instance after fewer than three missed heartbeats",
                k.stale_after_ms
            ),
            "make it at least 3 × heartbeat_ms; the default is 5000 with heartbeats every 1000",
        );
    }
    if k.command_timeout_ms < 100 {
        problem(
            "cluster.command_timeout_ms",
            format!(
                "{} ms is shorter than a database round trip under load",
                k.command_timeout_ms
            ),
            "use at least 100; the default is 2000",
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problems(text: &str) -> Vec<Problem> {
        match parse(text, Path::new("/tmp/x/baton.toml")) {
            Err(ConfigError::Invalid { problems, .. }) => problems,
            other => panic!("expected problems, got {other:?}"),
        }
    }

    #[test]
    fn empty_file_is_the_default_mock_setup() {
        let l = parse("", Path::new("baton.toml")).unwrap();
        assert_eq!(l.config.model.backend, BackendKind::Mock);
        assert_eq!(l.listen, "127.0.0.1:8080".parse::<SocketAddr>().unwrap());
        assert_eq!(l.twilio_stream_url(), "ws://127.0.0.1:8080/twilio");
    }

    #[test]
    fn the_model_and_its_capabilities_come_from_the_model_id() {
        use crate::model::catalog::Source;
        let l = parse(
            "[model]\nbackend = \"mock\"\nurl = \"ws://127.0.0.1:9300\"\nmodel = \"models/gemini-2.5-flash-native-audio-preview-09-2025\"\n",
            Path::new("c.toml"),
        )
        .unwrap();
        let info = l.config.model.model_info(None);
        assert_eq!((info.family, info.source), ("gemini-2.5", Source::Known));
        assert!(!info.capabilities.update_instructions);
        // The default names the embedded mock's own model, else models/gemini-3.8-live.
        let l = parse("", Path::new("c.toml")).unwrap();
        let m = &l.config.model;
        assert_eq!(
            m.model_info(Some("models/gemini-3.1-flash-live-preview"))
                .family,
            "gemini-3.1"
        );
        assert_eq!(m.model_info(None).id, "models/gemini-3.8-live");
        // An unknown model, with what the config says it takes.
        let l = parse(
            "[model]\nmodel = \"models/gemini-9-live\"\n[model.capabilities]\ncontext_update = true\n",
            Path::new("c.toml"),
        )
        .unwrap();
        let info = l.config.model.model_info(None);
        assert_eq!(info.source, Source::Configured);
        assert!(info.capabilities.update_instructions && !info.capabilities.non_blocking_tools);
        let p = problems("[model.capabilities]\ncontext_updates = true\n");
        assert_eq!(p[0].key, "model.capabilities.context_updates", "{p:?}");
    }

    #[test]
    fn public_url_makes_the_wss_stream_url() {
        let l = parse(
            "[server]\npublic_url = \"https://b.example.com/\"\n",
            Path::new("c.toml"),
        )
        .unwrap();
        assert_eq!(l.twilio_stream_url(), "wss://b.example.com/twilio");
    }

    #[test]
    fn a_wildcard_listen_without_public_url_is_said_to_be_unreachable() {
        let at = |text: &str| {
            parse(text, Path::new("c.toml"))
                .unwrap()
                .public_url_problem()
        };
        let why = at("[server]\nlisten = \"0.0.0.0:8080\"\n").expect("said");
        assert!(
            why.contains("http://0.0.0.0:8080") && why.contains("set public_url"),
            "{why}"
        );
        assert!(at("[server]\nlisten = \"[::]:8080\"\n").is_some());
        assert_eq!(at("[server]\nlisten = \"127.0.0.1:8080\"\n"), None);
        let named = "[server]\nlisten = \"0.0.0.0:8080\"\npublic_url = \"https://b.example.com\"\n";
        assert_eq!(at(named), None);
    }

    #[test]
    fn unknown_keys_name_the_key_and_line() {
        let p = problems("[server]\nlisten = \"127.0.0.1:1\"\nlisen = 3\n");
        assert_eq!(p.len(), 1);
        assert_eq!(p[0].key, "server.lisen");
        assert!(p[0].message.contains("line 3"), "{:?}", p[0]);
        let p = problems("[model]\nbackend = \"gpt\"\n");
        assert_eq!(p[0].key, "model.backend");
        let p = problems("[audiosocket]\nlisten = \"9092\"\n");
        assert_eq!(p[0].key, "audiosocket.listen");
    }

    #[test]
    fn every_semantic_problem_is_reported() {
        let p = problems(
            "[server]\nlisten = \"nowhere\"\npublic_url = \"ftp://x\"\n[model]\nbackend = \"gemini\"\n[limits]\nmax_calls = 0\n[twilio]\nauth_token_env = \"abc 123\"\n",
        );
        let keys: Vec<_> = p.iter().map(|p| p.key.as_str()).collect();
        assert_eq!(
            keys,
            [
                "server.listen",
                "server.public_url",
                "limits.max_calls",
                "model.credential_env",
                "twilio.auth_token_env"
            ]
        );
        let text = ConfigError::Invalid {
            path: "/tmp/x/baton.toml".into(),
            problems: p,
        }
        .to_string();
        assert!(
            text.starts_with("/tmp/x/baton.toml: 5 problem(s)"),
            "{text}"
        );
        assert!(text.contains("fix:"));
    }

    #[test]
    fn resume_settings_are_checked() {
        let l = parse("", Path::new("baton.toml")).unwrap();
        let p = l.config.resume.policy();
        assert_eq!((p.tries, p.backoff.len()), (3, 3));
        assert_eq!(
            l.config.resume.keepalive().dead_after,
            std::time::Duration::from_secs(45)
        );
        let p = problems(
            "[resume]\nbackoff_ms = []\nkeepalive_dead_s = 20\n[model]\ncompression_trigger_tokens = 10\ncompression_target_tokens = 20\n",
        );
        let keys: Vec<_> = p.iter().map(|p| p.key.as_str()).collect();
        assert_eq!(
            keys,
            [
                "resume.backoff_ms",
                "resume.keepalive_dead_s",
                "model.compression_target_tokens"
            ]
        );
    }

    #[test]
    fn the_uplink_chunk_is_20_to_100_ms() {
        for ms in [20, 40, 100] {
            let text = format!("[model]\nuplink_chunk_ms = {ms}\n");
            let l = parse(&text, Path::new("baton.toml")).unwrap();
            assert_eq!(l.config.model.uplink_chunk_ms, ms);
        }
        for ms in [0, 10, 30, 120] {
            let p = problems(&format!("[model]\nuplink_chunk_ms = {ms}\n"));
            assert_eq!(p.len(), 1, "{ms}: {p:?}");
            assert_eq!(p[0].key, "model.uplink_chunk_ms");
            assert!(
                p[0].message.contains("is not 20, 40, 60, 80 or 100"),
                "{p:?}"
            );
        }
    }

    #[test]
    fn cluster_settings_are_checked() {
        let l = parse(
            "[server]\npublic_url = \"https://lb.example.com\"\n[cluster]\nadvertise_url = \"https://lb.example.com/i/b2/\"\n",
            Path::new("c.toml"),
        )
        .unwrap();
        assert_eq!(l.advertise_url(), "https://lb.example.com/i/b2");
        let p = problems(
            "[cluster]\ninstance_id = \"a b\"\nadvertise_url = \"ws://x?y=1\"\nheartbeat_ms = 10\nstale_after_ms = 20\ncommand_timeout_ms = 5\n",
        );
        let keys: Vec<_> = p.iter().map(|p| p.key.as_str()).collect();
        assert_eq!(
            keys,
            [
                "cluster.instance_id",
                "cluster.advertise_url",
                "cluster.heartbeat_ms",
                "cluster.stale_after_ms",
                "cluster.command_timeout_ms"
            ]
        );
    }

    #[test]
    fn a_credential_command_replaces_credential_env_and_is_checked() {
        let vertex = "[model]\nbackend = \"vertex\"\nurl = \"wss://us-central1-aiplatform.googleapis.com\"\n";
        let l = parse(
            &format!(
                "{vertex}credential_command = [\"gcloud\", \"auth\", \"print-access-token\"]\n"
            ),
            Path::new("c.toml"),
        )
        .unwrap();
        let m = &l.config.model;
        assert_eq!(
            m.credential_command.as_deref().map(<[String]>::len),
            Some(3)
        );
        assert_eq!(m.credential_refresh_s, 300);
        let keys =
            |text: &str| -> Vec<String> { problems(text).into_iter().map(|p| p.key).collect() };
        assert_eq!(
            keys(&format!(
                "{vertex}credential_command = [\"gcloud\"]\ncredential_env = \"V\"\n"
            )),
            ["model.credential_command"]
        );
        assert_eq!(
            keys(&format!("{vertex}credential_command = []\n")),
            ["model.credential_command"]
        );
        // One item with spaces: no shell splits it; the fix lists the items.
        let p = problems(&format!(
            "{vertex}credential_command = [\"gcloud auth print-access-token\"]\n"
        ));
        assert_eq!(p.len(), 1, "{p:?}");
        assert_eq!(p[0].key, "model.credential_command");
        assert!(
            p[0].fix
                .contains(r#"credential_command = ["gcloud", "auth", "print-access-token"]"#),
            "{p:?}"
        );
        assert_eq!(
            keys(&format!("{vertex}credential_command = [\"\", \"x\"]\n")),
            ["model.credential_command"]
        );
        assert_eq!(
            keys(&format!(
                "{vertex}credential_command = [\"gcloud\"]\ncredential_refresh_s = 0\n"
            )),
            ["model.credential_refresh_s"]
        );
        assert_eq!(
            keys(
                "[model]\nbackend = \"openai\"\ncredential_command = [\"gcloud\"]\ncredential_env = \"K\"\n"
            ),
            ["model.credential_command"]
        );
    }

    #[test]
    fn syntax_errors_name_the_line() {
        let p = problems("[server]\nlisten = \n");
        assert_eq!(p[0].key, "(syntax)");
        assert!(p[0].message.contains("line 2"), "{:?}", p[0]);
    }
}
