//! `baton serve`: the HTTP/WebSocket front door (axum). Routes bridges to legs, owns the call
//! registry (capacity limit, drain on SIGTERM/SIGINT), and hands each call its own tasks so one
//! call's failure never touches another.

pub mod bridges;
pub mod calls;
pub mod twilio;

pub mod twiml;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{Form, Query, State};
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;

use crate::call::backend::ModelBackend;
use crate::config::{BackendKind, Loaded};
use crate::leg::twilio::signature::AuthToken;
use crate::mock::{MockOptions, Scenario};
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
}

/// `serve` could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("environment variable {var} (named by {key}) is not set or empty")]
    MissingCredential { var: String, key: &'static str },
    #[error("agent set: {0}")]
    Agents(String),
    #[error("model scenario: {0}")]
    Scenario(String),
    #[error(transparent)]
    Endpoint(#[from] crate::model::gemini::endpoint::EndpointError),
    #[error("cannot listen on {addr}: {reason}")]
    Bind { addr: SocketAddr, reason: String },
    #[error("server failed: {0}")]
    Io(String),
}

fn env_secret(var: &str, key: &'static str) -> Result<Secret, ServeError> {
    std::env::var(var)
        .ok()
        .filter(|v| !v.is_empty())
        .map(Secret::new)
        .ok_or_else(|| ServeError::MissingCredential {
            var: var.to_owned(),
            key,
        })
}

/// Builds the shared state from a validated config.
pub fn state(loaded: Loaded) -> Result<Arc<AppState>, ServeError> {
    let c = &loaded.config;
    let backend = match c.model.backend {
        BackendKind::Mock if c.model.url.is_empty() => {
            let scenario = if c.model.scenario.is_empty() {
                Scenario::builtin()
            } else {
                Scenario::load(&loaded.resolve(&c.model.scenario))
                    .map_err(|e| ServeError::Scenario(e.to_string()))?
            };
            ModelBackend::InProcessMock(Arc::new(MockOptions::new(Arc::new(scenario))))
        }
        BackendKind::Mock => ModelBackend::Remote(Endpoint::new(
            &c.model.url,
            Backend::DeveloperApi,
            "v1beta",
            None,
        )?),
        BackendKind::Gemini => {
            let key = env_secret(&c.model.credential_env, "model.credential_env")?;
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
            ModelBackend::Remote(Endpoint::new(url, Backend::DeveloperApi, v, Some(key))?)
        }
        BackendKind::Vertex => {
            let token = env_secret(&c.model.credential_env, "model.credential_env")?;
            let v = if c.model.api_version.is_empty() {
                "v1beta1"
            } else {
                &c.model.api_version
            };
            ModelBackend::Remote(Endpoint::new(
                &c.model.url,
                Backend::Vertex,
                v,
                Some(token),
            )?)
        }
    };
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
        model: c.model.model.clone(),
        system_instruction: (!c.model.instruction.is_empty()).then(|| c.model.instruction.clone()),
        voice: (!c.model.voice.is_empty()).then(|| c.model.voice.clone()),
        ..Default::default()
    };
    let stream_url = loaded.twilio_stream_url();
    let calls = CallRegistry::new(c.limits.max_calls);
    let agents = if c.agents.set.is_empty() {
        None
    } else {
        let reg = crate::agents::load(&loaded.resolve(&c.agents.set))
            .map_err(|e| ServeError::Agents(e.to_string()))?;
        Some(Arc::new(reg))
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
    }))
}

/// The router: `/healthz`, `/twiml`, `/twilio`, and the other bridges (`/telnyx`, `/plivo`,
/// `/exotel`, `/vonage`, detection on `/media-stream`; see [`bridges`]).
pub fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/twiml", get(twiml_get).post(twiml_post))
        .route("/twilio", get(twilio::upgrade))
        .merge(bridges::own_auth_routes(&state))
        .merge(bridges::routes(&state))
        .with_state(state)
}

async fn healthz(State(app): State<Arc<AppState>>) -> impl IntoResponse {
    let body = serde_json::json!({
        "status": if app.calls.draining() { "draining" } else { "ok" },
        "active_calls": app.calls.active(),
        "max_calls": app.loaded.config.limits.max_calls,
    });
    let code = if app.calls.draining() {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::OK
    };
    (code, axum::Json(body))
}

/// Twilio's voice webhook fields passed on to the stream as `<Parameter>`s.
const FORWARDED: [&str; 4] = ["From", "To", "CallSid", "Direction"];

fn twiml_response(
    app: &AppState,
    fields: &std::collections::HashMap<String, String>,
) -> impl IntoResponse + use<> {
    let params: Vec<(String, String)> = FORWARDED
        .iter()
        .filter_map(|k| fields.get(*k).map(|v| ((*k).to_owned(), v.clone())))
        .collect();
    (
        [(header::CONTENT_TYPE, "text/xml; charset=utf-8")],
        twiml::connect_stream(&app.stream_url, &params),
    )
}

async fn twiml_get(
    State(app): State<Arc<AppState>>,
    Query(q): Query<std::collections::HashMap<String, String>>,
) -> impl IntoResponse {
    twiml_response(&app, &q)
}

async fn twiml_post(
    State(app): State<Arc<AppState>>,
    Form(f): Form<std::collections::HashMap<String, String>>,
) -> impl IntoResponse {
    twiml_response(&app, &f)
}

/// Serves until `shutdown` resolves, then drains: new calls are refused, active calls get up to
/// `server.drain_timeout_s` to finish, then they are hung up.
pub async fn serve(
    app: Arc<AppState>,
    listener: tokio::net::TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    let drain = Duration::from_secs(app.loaded.config.server.drain_timeout_s);
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let app2 = app.clone();
    let signal = async move {
        shutdown.await;
        app2.calls.start_draining();
        tracing::info!(active = app2.calls.active(), "draining: refusing new calls");
        let _ = stop_tx.send(());
    };
    // Every 20 ms frame goes out at once: without TCP_NODELAY each waits for the previous one's
    // delayed ACK and reaches the caller ~40 ms late.
    use axum::serve::ListenerExt;
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    let server = axum::serve(listener, router(app.clone())).with_graceful_shutdown(async move {
        let _ = stop_rx.await;
    });
    let server = tokio::spawn(server.into_future());
    signal.await;
    if !app.calls.wait_idle(drain).await {
        tracing::warn!(
            active = app.calls.active(),
            "drain deadline passed: hanging up remaining calls"
        );
        app.calls.hang_up_all();
        app.calls.wait_idle(Duration::from_secs(5)).await;
    }
    match tokio::time::timeout(Duration::from_secs(5), server).await {
        Ok(Ok(Err(e))) => Err(ServeError::Io(e.to_string())),
        _ => Ok(()),
    }
}

impl AppState {
    /// What the model can do in place: the embedded mock's profile, else a 3.8-class model.
    pub fn capabilities(&self) -> crate::model::Capabilities {
        match &self.backend {
            ModelBackend::InProcessMock(o) => o.capabilities(),
            ModelBackend::Remote(_) => crate::model::gemini::CAPABILITIES,
        }
    }

    /// Opens the model session for a new call and, with an agent set, its orchestrator.
    pub async fn open_call(
        &self,
    ) -> Result<
        (
            crate::model::gemini::session::Session,
            Option<crate::call::Agents>,
        ),
        crate::model::gemini::session::SessionError,
    > {
        let mut cfg = self.session.clone();
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
