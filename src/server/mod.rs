//! `baton serve`: the HTTP/WebSocket front door (axum). Routes bridges to legs, owns the call
//! registry (capacity limit; a drain on SIGTERM/SIGINT or `POST /admin/drain` that keeps
//! answering until its calls have ended), joins the other instances on a PostgreSQL store
//! ([`cluster`]), and hands each call its own tasks so one call's failure never touches another.

pub mod admin;
pub mod admission;
pub mod answer;
pub mod attach;
pub mod audiosocket;
pub mod auth;
pub mod bridges;
pub mod call_log;
pub mod calls;
pub mod cluster;
pub mod events;
pub mod health;
pub mod keypad;
mod live;
pub mod memory;
pub mod metrics;
pub mod page;
pub mod shards;
pub mod sip;
mod sip_person;
pub mod stream;
pub mod transcripts;
pub mod twilio;
mod twilio_transfer;
pub mod twiml;
pub mod whip;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;

use crate::backend::ModelBackend;
use crate::config::{BackendKind, Loaded};
use crate::leg::twilio::signature::AuthToken;
use crate::mock::{MockOptions, Scenario};
use crate::model::credential::{Credential, CredentialCommand, RenewedCredential};
use crate::model::gemini::endpoint::{Backend, DEVELOPER_API_BASE, Endpoint, Secret};
use crate::model::gemini::session::SessionConfig;
pub use calls::CallRegistry;

/// Everything request handlers share.
pub struct AppState {
    pub loaded: Loaded,
    pub backend: ModelBackend,
    pub session: SessionConfig,
    /// Twilio auth token when signatures are checked.
    pub twilio_token: Option<AuthToken>,
    /// Telnyx `stream_auth_token` when `/telnyx` upgrades are checked.
    pub telnyx_token: Option<Secret>,
    /// Exotel `KEY:TOKEN` when `/exotel` upgrades must carry it as Basic auth.
    pub exotel_basic: Option<Secret>,
    /// The public `wss://…/twilio` URL (what Twilio signs).
    pub stream_url: String,
    pub calls: CallRegistry,
    /// The agent set every call runs, if configured.
    pub agents: Option<Arc<crate::agents::Registry>>,
    /// The MCP servers (`[mcp.*]`), connected once and shared by every call.
    pub mcp: Option<Arc<crate::mcp::Hub>>,
    /// This daemon's Prometheus figures (`GET /metrics`).
    pub metrics: metrics::Metrics,
    /// Bearer tokens the protected routes require (`server.auth_tokens_env`); see [`auth`].
    pub api_tokens: Option<Arc<auth::ApiTokens>>,
    /// Where the AudioSocket listener is bound, once `serve` has bound it.
    pub audiosocket_addr: std::sync::OnceLock<SocketAddr>,
    /// The store, once `serve` has opened it (`[store]`).
    pub store: std::sync::OnceLock<attach::StoreHandle>,
    /// This instance's name (`cluster.instance_id`, else the host's name and random digits): in
    /// the registry and on the calls it records.
    pub instance_id: String,
    /// The cluster, once joined (a PostgreSQL store with `cluster.enabled`).
    pub cluster: std::sync::OnceLock<Arc<cluster::Cluster>>,
    /// The SIP side, once `serve` has started it (`[sip] listen`).
    pub sip: std::sync::OnceLock<Arc<sip::SipService>>,
}

/// `serve` could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("environment variable {var} (named by {key}) is not set or empty")]
    MissingCredential { var: String, key: String },
    #[error("agent set: {0}")]
    Agents(String),
    #[error(transparent)]
    Tokens(#[from] auth::TokensError),
    #[error(transparent)]
    Exposure(#[from] auth::ExposureError),

    #[error("model.credential_command: {0}; fix: {fix}", fix = .0.fix())]
    Credential(#[from] crate::model::credential::CredentialError),
    #[error("model scenario: {0}")]
    Scenario(String),
    #[error("model endpoint: {0}")]
    Model(String),
    #[error(transparent)]
    Endpoint(#[from] crate::model::gemini::endpoint::EndpointError),
    #[error("cannot listen on {addr}: {reason}")]
    Bind { addr: SocketAddr, reason: String },
    #[error("server failed: {0}")]
    Io(String),
    #[error("store: {0}")]
    Store(String),
}

/// The value of the variable `var` that `key` names, or which variable is missing.
pub(super) fn env_secret(var: &str, key: &str) -> Result<Secret, ServeError> {
    std::env::var(var)
        .ok()
        .filter(|v| !v.is_empty())
        .map(Secret::new)
        .ok_or_else(|| ServeError::MissingCredential {
            var: var.to_owned(),
            key: key.to_owned(),
        })
}

/// `[model]` for OpenAI Realtime: the service (`backend = "openai"`, key from `credential_env`,
/// default `OPENAI_API_KEY`) or a separate `baton mock-model --profile openai` (`backend =
/// "mock"`, `profile = "openai"`, `url`).
fn openai_backend(
    m: &crate::config::ModelConfig,
    model: crate::model::catalog::ModelInfo,
    renewed: Option<Arc<RenewedCredential>>,
) -> Result<ModelBackend, ServeError> {
    use crate::model::openai::endpoint::{
        DEFAULT_KEY_ENV, Endpoint as OpenAiEndpoint, OPENAI_BASE,
    };
    let service = m.backend == BackendKind::Openai;
    let key = if service && renewed.is_none() {
        let var = if m.credential_env.is_empty() {
            DEFAULT_KEY_ENV
        } else {
            &m.credential_env
        };
        Some(env_secret(var, "model.credential_env")?)
    } else {
        None
    };
    let url = match (m.url.as_str(), service) {
        ("", true) => OPENAI_BASE.to_owned(),
        (u, true) => u.to_owned(),
        (u, false) => format!("{}/v1", u.trim_end_matches('/')),
    };
    let api = if m.beta {
        crate::model::openai::wire::Api::Beta
    } else {
        crate::model::openai::wire::Api::Ga
    };
    let mut endpoint = OpenAiEndpoint::new(&url, &model.id, api, key)
        .map_err(|e| ServeError::Model(e.to_string()))?;
    if let Some(r) = renewed {
        endpoint = endpoint.with_renewed(r);
    }
    Ok(ModelBackend::OpenAi { endpoint, model })
}

/// The credential `model.credential_command` prints, when a remote backend has one: the command
/// runs once here (blocking; this is start-up), and [`serve`] keeps it renewed.
fn renewed_credential(
    m: &crate::config::ModelConfig,
) -> Result<Option<Arc<RenewedCredential>>, ServeError> {
    let Some(argv) = m.credential_command.as_ref() else {
        return Ok(None);
    };
    if m.backend == BackendKind::Mock {
        return Ok(None);
    }
    let command = CredentialCommand::new(argv.clone())?;
    let refresh = Duration::from_secs(m.credential_refresh_s);
    let renewed = RenewedCredential::start(command, refresh)?;
    tracing::info!(
        program = renewed.command().program(),
        refresh_s = m.credential_refresh_s,
        "model credential from credential_command"
    );
    Ok(Some(Arc::new(renewed)))
}

/// How long a stop waits, once the drain's deadline has passed, for the calls it then hangs up.
pub const HANG_UP_WAIT: Duration = Duration::from_secs(5);
/// How long a stop waits for the store's queued writes.
pub const FLUSH_WAIT: Duration = Duration::from_secs(5);
/// How long a stop waits for the store to record this instance leaving the cluster.
pub const LEAVE_WAIT: Duration = Duration::from_secs(5);
/// How long a stop waits for the HTTP listener's connections to close.
pub const HTTP_CLOSE_WAIT: Duration = Duration::from_secs(5);
/// How long a stop waits for the traces of the last calls to be exported.
pub const TRACES_FLUSH_WAIT: Duration = Duration::from_secs(5);
/// How long a runtime (each shard's, then serve's own) is given for what still runs on it once
/// serve is over (a recording's last write, a credential command's end).
pub const RUNTIME_CLOSE_WAIT: Duration = Duration::from_secs(2);

/// The longest a stop takes after the drain, each step at its bound: the calls hung up, the
/// store's writes flushed, then side by side leaving the cluster, the MCP servers closed and
/// SIP stopped, then the HTTP listener, the store closed, the shards' runtimes closed, the
/// traces exported and serve's own runtime closed. A platform's
/// stop timeout (systemd's `TimeoutStopSec`, Kubernetes' `terminationGracePeriodSeconds`)
/// must exceed `server.drain_timeout_s` by at least this.
pub const STOP_AFTER_DRAIN: Duration = Duration::from_secs(
    HANG_UP_WAIT.as_secs()
        + FLUSH_WAIT.as_secs()
        + longest(&[
            LEAVE_WAIT.as_secs(),
            crate::mcp::hub::SHUTDOWN_WAIT.as_secs(),
            sip::STOP_MAX.as_secs(),
        ])
        + HTTP_CLOSE_WAIT.as_secs()
        + crate::store::CLOSE_WAIT.as_secs()
        + TRACES_FLUSH_WAIT.as_secs()
        + 2 * RUNTIME_CLOSE_WAIT.as_secs(),
);

const fn longest(secs: &[u64]) -> u64 {
    let mut i = 0;
    let mut max = 0;
    while i < secs.len() {
        if secs[i] > max {
            max = secs[i];
        }
        i += 1;
    }
    max
}

/// Builds the shared state from a validated config. With `model.credential_command`, the command
/// runs once here.
pub fn state(loaded: Loaded) -> Result<Arc<AppState>, ServeError> {
    let c = &loaded.config;
    let renewed = renewed_credential(&c.model)?;
    let backend = match c.model.backend {
        BackendKind::Mock if c.model.url.is_empty() => {
            let scenario = if c.model.scenario.is_empty() {
                Scenario::builtin()
            } else {
                Scenario::load(&loaded.resolve(&c.model.scenario))
                    .map_err(|e| ServeError::Scenario(e.to_string()))?
            };
            let mut scenario = scenario;
            if let Ok(p) = c.model.profile.parse::<crate::mock::Profile>() {
                scenario.profile = p;
            }
            let mut opts = MockOptions::new(Arc::new(scenario));
            if c.model.openai() {
                opts.openai = Some(crate::mock::openai::OpenAiOptions::default());
            }
            let model = c.model.model_info(Some(opts.model_id()));
            ModelBackend::in_process_as(Arc::new(opts), model)
        }
        BackendKind::Openai => openai_backend(&c.model, c.model.model_info(None), renewed)?,
        BackendKind::Mock if c.model.openai() => {
            openai_backend(&c.model, c.model.model_info(None), None)?
        }
        BackendKind::Mock => ModelBackend::Gemini {
            endpoint: Endpoint::new(&c.model.url, Backend::DeveloperApi, "v1beta", None)?,
            model: c.model.model_info(None),
        },
        BackendKind::Gemini => {
            let key = match renewed {
                Some(_) => None,
                None => Some(env_secret(&c.model.credential_env, "model.credential_env")?),
            };
            let url = if c.model.url.is_empty() {
                DEVELOPER_API_BASE
            } else {
                &c.model.url
            };
            let v = if c.model.api_version.is_empty() {
                "v1beta"
            } else {
                &c.model.api_version
            };
            ModelBackend::Gemini {
                endpoint: renewed_by(Endpoint::new(url, Backend::DeveloperApi, v, key)?, renewed),
                model: c.model.model_info(None),
            }
        }
        BackendKind::Vertex => {
            let token = match renewed {
                Some(_) => None,
                None => Some(env_secret(&c.model.credential_env, "model.credential_env")?),
            };
            let v = if c.model.api_version.is_empty() {
                "v1beta1"
            } else {
                &c.model.api_version
            };
            ModelBackend::Gemini {
                endpoint: renewed_by(
                    Endpoint::new(&c.model.url, Backend::Vertex, v, token)?,
                    renewed,
                ),
                model: c.model.model_info(None),
            }
        }
    };
    let backend = match backend {
        ModelBackend::Gemini { endpoint, model } if !c.model.ca_file.is_empty() => {
            ModelBackend::Gemini {
                endpoint: endpoint.with_ca_file(&loaded.resolve(&c.model.ca_file))?,
                model,
            }
        }
        ModelBackend::OpenAi { endpoint, model } if !c.model.ca_file.is_empty() => {
            ModelBackend::OpenAi {
                endpoint: endpoint
                    .with_ca_file(&loaded.resolve(&c.model.ca_file))
                    .map_err(|e| ServeError::Model(e.to_string()))?,
                model,
            }
        }
        other => other,
    };
    if backend.model().source == crate::model::catalog::Source::Unknown {
        tracing::warn!(
            model = %backend.model().id,
            "baton does not know this model: handoffs use only what every model takes \
             (set [model.capabilities] to use more)"
        );
    }
    let twilio_token = if c.twilio.auth_token_env.is_empty() || c.twilio.disable_signature_check {
        None
    } else {
        Some(env_secret(
            &c.twilio.auth_token_env,
            "twilio.auth_token_env",
        )?)
    };
    let telnyx_token = match c.telnyx.stream_auth_token_env.as_str() {
        "" => None,
        var => Some(env_secret(var, "telnyx.stream_auth_token_env")?),
    };
    let exotel_basic = match c.exotel.basic_auth_env.as_str() {
        "" => None,
        var => Some(env_secret(var, "exotel.basic_auth_env")?),
    };
    let session = SessionConfig {
        model: backend.model().id.clone(),
        system_instruction: (!c.model.instruction.is_empty()).then(|| c.model.instruction.clone()),
        voice: (!c.model.voice.is_empty()).then(|| c.model.voice.clone()),
        compression: (c.model.compression_trigger_tokens > 0).then(|| {
            crate::model::gemini::session::Compression {
                trigger_tokens: Some(c.model.compression_trigger_tokens),
                target_tokens: (c.model.compression_target_tokens > 0)
                    .then_some(c.model.compression_target_tokens),
            }
        }),
        keepalive: c.resume.keepalive(),
        ..Default::default()
    };
    let stream_url = loaded.twilio_stream_url();
    if let Some(why) = loaded.public_url_problem() {
        tracing::warn!("{why}");
    }
    let calls = CallRegistry::new(c.limits.max_calls);
    let mcp = (!c.mcp.is_empty()).then(|| {
        let (specs, _) = crate::mcp::config::problems(&c.mcp, loaded.resolve(".").as_path());
        crate::mcp::Hub::start(specs)
    });
    let agents = if c.agents.set.is_empty() {
        None
    } else {
        let mut reg = crate::agents::load(&loaded.resolve(&c.agents.set))
            .map_err(|e| ServeError::Agents(e.to_string()))?;
        let catalog = mcp.as_ref().map(|h| h.catalog()).unwrap_or_default();
        reg.bind_mcp(catalog).map_err(|missing| {
            ServeError::Agents(format!(
                "agents name MCP servers that are not configured: {} (add [mcp.<name>] tables)",
                missing.join(", ")
            ))
        })?;
        Some(Arc::new(reg))
    };
    let api_tokens = if c.server.auth_tokens_env.is_empty() {
        None
    } else {
        Some(Arc::new(auth::ApiTokens::from_env(
            &c.server.auth_tokens_env,
        )?))
    };
    let instance_id = match c.cluster.instance_id.as_str() {
        "" => default_instance_id(),
        id => id.to_owned(),
    };
    Ok(Arc::new(AppState {
        loaded,
        backend,
        session,
        twilio_token,
        telnyx_token,
        exotel_basic,
        stream_url,
        calls,
        agents,
        mcp,
        metrics: metrics::Metrics::new(),
        api_tokens,
        audiosocket_addr: std::sync::OnceLock::new(),
        store: std::sync::OnceLock::new(),
        instance_id,
        cluster: std::sync::OnceLock::new(),
        sip: std::sync::OnceLock::new(),
    }))
}

/// A Gemini `endpoint`, sending `renewed`'s value when there is one.
fn renewed_by(endpoint: Endpoint, renewed: Option<Arc<RenewedCredential>>) -> Endpoint {
    match renewed {
        Some(r) => endpoint.with_renewed(r),
        None => endpoint,
    }
}

/// The credential a command renews for the model endpoint, if it has one.
pub(crate) fn renewed_of(backend: &ModelBackend) -> Option<Arc<RenewedCredential>> {
    let credential = match backend {
        ModelBackend::Gemini { endpoint, .. } => endpoint.credential.as_ref(),
        ModelBackend::OpenAi { endpoint, .. } => endpoint.credential.as_ref(),
        ModelBackend::InProcessMock { .. } => None,
    };
    credential.and_then(Credential::renewed).cloned()
}

/// A task that lives as long as [`serve`], however it returns.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The router: `/healthz`, `/twiml`, `/twilio`, the call page `/`; the other telephony bridges
/// (`/telnyx`, `/plivo`, `/exotel`, `/vonage`, detection on `/media-stream`; see [`bridges`]);
/// browser callers (`/whip`), generic WebSocket callers (`/stream`), live calls (`/calls`,
/// `/calls/{id}/events`) and the admin API (`/admin/…`) among the protected routes; its OpenAPI
/// document (`/openapi.json`) is open.
///
/// Each route has one authenticator (see [`auth`]): `/healthz` is open; `/twiml` and
/// `/twilio` check X-Twilio-Signature when a Twilio auth token is configured, else they are
/// protected like the rest; `/telnyx` and `/exotel` check their provider's credential when one is
/// configured ([`bridges::own_auth_routes`]), else they are protected like the rest; every route
/// of [`protected_routes`] needs a bearer token when `server.auth_tokens_env` is set.
pub fn router(state: Arc<AppState>) -> Router {
    let twilio_routes = Router::new()
        .route("/twiml", get(answer::twiml_get).post(answer::twiml_post))
        .route("/twilio", get(twilio::upgrade));
    let (signed, protected) = if state.twilio_token.is_some() {
        (twilio_routes, protected_routes(&state))
    } else {
        (Router::new(), protected_routes(&state).merge(twilio_routes))
    };
    Router::new()
        // Probes are open: load balancers and orchestrators send no credentials.
        .merge(health::routes())
        // The call page (and its recorded caller) is static, with no data in it; what it calls
        // is protected.
        .merge(page::routes())
        .route("/openapi.json", get(admin::openapi))
        .merge(signed)
        .merge(bridges::own_auth_routes(&state))
        // A protected route's 405 is given behind the token check, like everything it answers.
        .merge(auth::protect(
            protected.method_not_allowed_fallback(method_not_allowed),
            state.api_tokens.clone(),
        ))
        // Errors are JSON (`{"error": …}`, as the admin API documents), an unknown path or
        // method included.
        .method_not_allowed_fallback(method_not_allowed)
        .fallback(not_found)
        .with_state(state)
}

async fn not_found(method: axum::http::Method, uri: axum::http::Uri) -> impl IntoResponse {
    (
        StatusCode::NOT_FOUND,
        axum::Json(serde_json::json!({
            "error": format!("no route {method} {}: see GET /openapi.json", uri.path())
        })),
    )
}

async fn method_not_allowed(method: axum::http::Method, uri: axum::http::Uri) -> impl IntoResponse {
    (
        StatusCode::METHOD_NOT_ALLOWED,
        axum::Json(serde_json::json!({
            "error": format!("{} does not take {method} (the allow header says what it takes)", uri.path())
        })),
    )
}

/// **Every HTTP route baton adds goes here** (`/metrics`, `/calls`, `/whip`, admin, the bridges
/// without a credential of their own): these sit behind the bearer-token layer, so a new route is
/// protected by being placed in this list.
pub fn protected_routes(app: &AppState) -> Router<Arc<AppState>> {
    Router::new()
        .route("/metrics", get(metrics_text))
        .merge(bridges::routes(app))
        .merge(whip::routes())
        .merge(stream::routes())
        .merge(events::routes())
        .merge(admin::routes())
        .merge(answer::routes())
        .merge(sip::routes())
}

async fn metrics_text(State(app): State<Arc<AppState>>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, metrics::CONTENT_TYPE)],
        app.metrics.render(app.calls.active()),
    )
}

/// Serves until `shutdown` resolves (SIGTERM/SIGINT) or `POST /admin/drain` asks, then drains
/// while still answering: `/readyz` turns 503 at once (and the registry says `draining`), new
/// calls are refused with the reason, `/livez`, `/healthz`, `/metrics` and the admin API keep
/// working, calls in progress get up to `server.drain_timeout_s` to finish, then are hung up;
/// the store is flushed, the instance leaves the cluster, and only then does the listener close.
pub async fn serve(
    app: Arc<AppState>,
    listener: tokio::net::TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    if app.store.get().is_none() {
        match attach::open_store(&app.loaded.config.store, Some(&app.instance_id)).await {
            Ok(Some(h)) => {
                let _ = app.store.set(h);
                admin::join_cluster(&app).await;
            }
            Ok(None) => {}
            // Calls go on without a store; it is attached once it answers.
            Err(ServeError::Store(e)) => {
                tracing::error!(error = %e, "store unavailable; calls run without it until it answers");
                let app = app.clone();
                tokio::spawn(async move {
                    if attach::reopen_store(&app).await {
                        admin::join_cluster(&app).await;
                    }
                });
            }
            Err(e) => return Err(e),
        }
    }
    // A credential from `model.credential_command` is run again every credential_refresh_s
    // while the daemon serves.
    let renewal = renewed_of(&app.backend).map(|r| AbortOnDrop(tokio::spawn(r.keep_renewed())));
    if let Some(hub) = &app.mcp {
        // The first calls should see the servers' tools: give the servers a moment to connect
        // (one that is down is retried in the background; calls do not wait for it).
        hub.ready(Duration::from_secs(5)).await;
    }
    let drain = Duration::from_secs(app.loaded.config.server.drain_timeout_s);
    let shards = Arc::new(
        shards::Shards::start(app.loaded.config.server.shards)
            .map_err(|e| ServeError::Io(format!("cannot start the call shards: {e}")))?,
    );
    tracing::info!(shards = shards.len(), "calls run on one shard per core");
    let audiosocket = audiosocket::start(&app, shards.clone()).await?;
    if let Some(s) = sip::start(&app).await? {
        let _ = app.sip.set(s);
    }
    let stop_http = tokio_util::sync::CancellationToken::new();
    let server = tokio::spawn(shards::serve_http(
        listener,
        router(app.clone()),
        shards.clone(),
        stop_http.clone(),
    ));
    // Histogram samples are folded into buckets here too, so an unscraped daemon keeps none; once
    // the last call has ended, freed memory goes back to the system.
    let upkeep = tokio::spawn({
        let app = app.clone();
        async move {
            let mut every = tokio::time::interval(Duration::from_secs(5));
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut trimmer = memory::Trimmer::default();
            loop {
                every.tick().await;
                app.metrics.upkeep();
                if trimmer.due(app.calls.active(), app.calls.ended()) {
                    tokio::task::spawn_blocking(memory::give_back);
                }
            }
        }
    });
    tokio::select! {
        _ = shutdown => {}
        _ = app.calls.drain_started() => {}
    }
    app.calls.start_draining();
    if let Some(c) = app.cluster.get() {
        c.wake();
    }
    tracing::info!(
        active = app.calls.active(),
        drain_timeout_s = drain.as_secs(),
        "draining: refusing new calls, still answering probes, metrics and the admin API"
    );
    if !app.calls.wait_idle(drain).await {
        tracing::warn!(
            active = app.calls.active(),
            "drain deadline passed: hanging up remaining calls"
        );
        app.calls.hang_up_all();
        app.calls.wait_idle(HANG_UP_WAIT).await;
    }
    if let Some(s) = app.store.get()
        && !s.writer.flush(FLUSH_WAIT).await
    {
        tracing::warn!("store writes still queued at shutdown");
    }
    upkeep.abort();
    drop(renewal);
    if let Some(task) = audiosocket {
        task.abort();
    }
    // Independent of each other, so side by side: the registry told this instance is gone,
    // the MCP servers' sessions closed, SIP's registrations withdrawn and CANCELs settled.
    let leave = async {
        if let Some(c) = app.cluster.get()
            && tokio::time::timeout(LEAVE_WAIT, c.leave()).await.is_err()
        {
            tracing::warn!("the store did not record this instance leaving in time");
        }
    };
    let mcp = async {
        if let Some(hub) = &app.mcp {
            hub.shutdown().await;
        }
    };
    let sip = async {
        if let Some(s) = app.sip.get() {
            s.stop().await;
        }
    };
    tokio::join!(leave, mcp, sip);
    stop_http.cancel();
    let _ = tokio::time::timeout(HTTP_CLOSE_WAIT, server).await;
    // Last: the admin API reads the store until the listener has closed.
    if let Some(s) = app.store.get() {
        s.store.close().await;
    }
    Ok(())
}

impl AppState {
    /// What the model can do in place (baton's model table for the configured model).
    pub fn capabilities(&self) -> crate::model::Capabilities {
        self.backend.capabilities()
    }

    /// How a call reopens its session after `goAway` or a drop.
    pub fn call_options(&self) -> crate::call::CallOptions {
        crate::call::CallOptions {
            model: Some(crate::call::ModelSource {
                backend: self.backend.clone(),
                config: self.session.clone(),
            }),
            reconnect: self.loaded.config.resume.policy(),
            resample_input: self.loaded.config.model.resample_input,
            uplink_chunk: std::time::Duration::from_millis(
                self.loaded.config.model.uplink_chunk_ms,
            ),
            dialer: self.sip.get().map(|svc| {
                Arc::new(sip_person::SipDialer(svc.clone())) as Arc<dyn crate::call::warm::Dialer>
            }),
            ..Default::default()
        }
    }

    /// The G.711 law the model may take and speak straight from `leg`: a leg in one law at
    /// 8 kHz for the whole call (an OpenAI session then resamples nothing), unless `[model]
    /// resample_input` asks for PCM at the model's own rate.
    pub fn phone_law(&self, leg: &crate::leg::LegHandle) -> Option<crate::audio::g711::Law> {
        if self.loaded.config.model.resample_input || leg.rate != crate::audio::g711::RATE {
            return None;
        }
        leg.law
    }

    /// Opens the model session for a new call and, with an agent set, its orchestrator; a
    /// caller whose leg is G.711 throughout is heard and answered in `law` where the model
    /// takes it ([`AppState::phone_law`]).
    pub async fn open_call(
        &self,
        law: Option<crate::audio::g711::Law>,
    ) -> Result<
        (
            crate::model::handle::ModelSession,
            Option<crate::call::Agents>,
        ),
        crate::model::handle::OpenError,
    > {
        let mut cfg = self.session.clone();
        cfg.phone_law = law;
        let agents = self.agents.as_ref().map(|reg| {
            crate::call::Agents::start(
                reg.clone(),
                self.capabilities(),
                self.backend.clone(),
                &mut cfg,
            )
        });
        let session = self.backend.open(&cfg).await?;
        Ok((session, agents))
    }
}

/// The host's name (a pod's name on Kubernetes) and six random hex digits, so instances on one
/// host differ and a restart is a new instance: `baton-7d9f-0-3fa91c`.
fn default_instance_id() -> String {
    let host: String = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '-'
            }
        })
        .take(30)
        .collect();
    let tail = calls::random_hex(3).unwrap_or_else(|_| crate::store::new_id("")[11..17].to_owned());
    if host.is_empty() {
        format!("i-{tail}")
    } else {
        format!("{host}-{tail}")
    }
}

/// Resolves on SIGTERM or SIGINT.
pub async fn termination_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! { _ = ctrl_c => {}, _ = term => {} }
}
