//! Where a call's model sessions come from: the embedded mock in-process (an in-memory stream
//! carrying real WebSocket frames, in the Gemini Live or the OpenAI Realtime protocol as its
//! options say), a remote Gemini Live endpoint, or a remote OpenAI Realtime endpoint — each with
//! the model it addresses and what that model takes in place ([`ModelInfo`], from the model id:
//! [`crate::model::catalog`]). Every session is opened from baton's session settings (the Gemini
//! `SessionConfig`; translated for OpenAI) and handed to the call as a protocol-neutral
//! [`ModelSession`]. Shared by `demo` and `serve`.

use std::sync::Arc;

use crate::mock::MockOptions;
use crate::model::Capabilities;
use crate::model::catalog::{self, ModelInfo};
use crate::model::gemini::endpoint::Endpoint;
use crate::model::gemini::session::{self, Dialed, SessionConfig, Transport};
use crate::model::handle::{ModelSession, OpenError, Protocol};
use crate::model::openai;

/// What a dial waits for, as a timeout names it.
const UPGRADE: &str = "WebSocket upgrade";

/// The OpenAI model an in-process mock session names (the mock serves any).
pub const MOCK_OPENAI_MODEL: &str = crate::mock::openai::MODEL_ID;

/// A source of model sessions, one per call.
#[derive(Clone, Debug)]
pub enum ModelBackend {
    /// The embedded mock model, in this process, addressed as `model`.
    InProcessMock {
        opts: Arc<MockOptions>,
        model: ModelInfo,
    },
    /// A Gemini Live endpoint over the network (the real service or a separate `baton
    /// mock-model`).
    Gemini {
        endpoint: Endpoint,
        model: ModelInfo,
    },
    /// An OpenAI Realtime endpoint over the network (the service or `baton mock-model --profile
    /// openai`); the model is in the endpoint's URL.
    OpenAi {
        endpoint: openai::endpoint::Endpoint,
        model: ModelInfo,
    },
}

impl ModelBackend {
    /// The embedded mock, addressed by the id of the real model its profile imitates.
    pub fn in_process(opts: Arc<MockOptions>) -> Self {
        let model = catalog::lookup(protocol_of(&opts), opts.model_id());
        ModelBackend::InProcessMock { opts, model }
    }

    /// The embedded mock, addressed as `model` (which may claim more than the mock takes: the
    /// mock then refuses as the service would).
    pub fn in_process_as(opts: Arc<MockOptions>, model: ModelInfo) -> Self {
        ModelBackend::InProcessMock { opts, model }
    }

    /// The wire protocol of this backend's sessions.
    pub fn protocol(&self) -> Protocol {
        match self {
            ModelBackend::InProcessMock { opts, .. } => protocol_of(opts),
            ModelBackend::Gemini { .. } => Protocol::Gemini,
            ModelBackend::OpenAi { .. } => Protocol::OpenAi,
        }
    }

    /// The model sessions address, and where its capabilities came from.
    pub fn model(&self) -> &ModelInfo {
        match self {
            ModelBackend::InProcessMock { model, .. }
            | ModelBackend::Gemini { model, .. }
            | ModelBackend::OpenAi { model, .. } => model,
        }
    }

    /// What this backend's model can do in place.
    pub fn capabilities(&self) -> Capabilities {
        self.model().capabilities
    }

    /// Opens a session and waits until it is set up (`setupComplete` / `session.updated`).
    /// Gemini sessions name the backend's model in `setup`, whatever `config` says. The dial
    /// (transport, TLS, upgrade) and the setup each get `config.setup_timeout`: a peer that
    /// accepts TCP and never answers cannot hold a call.
    pub async fn open(&self, config: &SessionConfig) -> Result<ModelSession, OpenError> {
        let dialed =
            crate::model::session::open_within(config.setup_timeout, UPGRADE, self.dial()).await?;
        self.start(dialed, config).await
    }

    /// Dials a socket for a later session (transport, TLS and WebSocket upgrade; nothing sent).
    /// No timeout of its own ([`open`](Self::open) and the standby give it one).
    pub async fn dial(&self) -> Result<Dialed, OpenError> {
        Ok(match self {
            ModelBackend::InProcessMock { opts, model } if opts.openai.is_some() => {
                let stream = crate::mock::connect_in_memory(opts.clone());
                openai::session::dial(
                    &mock_openai_endpoint(&model.id)?,
                    Transport::InMemory(stream),
                )
                .await?
            }
            ModelBackend::InProcessMock { opts, .. } => {
                let stream = crate::mock::connect_in_memory(opts.clone());
                session::dial(&mock_gemini_endpoint()?, Transport::InMemory(stream)).await?
            }
            ModelBackend::Gemini { endpoint, .. } => {
                session::dial(endpoint, Transport::Network).await?
            }
            ModelBackend::OpenAi { endpoint, .. } => {
                openai::session::dial(endpoint, Transport::Network).await?
            }
        })
    }

    /// Starts a session on a socket [`dial`](Self::dial)ed by this backend: sends the setup and
    /// waits until it is done, within `config.setup_timeout`.
    pub async fn start(
        &self,
        dialed: Dialed,
        config: &SessionConfig,
    ) -> Result<ModelSession, OpenError> {
        let caps = self.capabilities();
        let model = &self.model().id;
        match self {
            ModelBackend::InProcessMock { opts, .. } if opts.openai.is_some() => {
                let cfg = openai::translate::session_config(config, model);
                let s = openai::session::start_dialed(dialed, openai::wire::Api::Ga, &cfg).await?;
                Ok(ModelSession::openai(
                    s,
                    caps,
                    config.history_in_client_content,
                ))
            }
            ModelBackend::InProcessMock { .. } | ModelBackend::Gemini { .. } => {
                let s = session::start_dialed(dialed, &named(config, model)).await?;
                Ok(ModelSession::gemini(s, caps))
            }
            ModelBackend::OpenAi { endpoint, .. } => {
                let cfg = openai::translate::session_config(config, model);
                let s = openai::session::start_dialed(dialed, endpoint.api, &cfg).await?;
                Ok(ModelSession::openai(
                    s,
                    caps,
                    config.history_in_client_content,
                ))
            }
        }
    }

    /// Where [`dial`](Self::dial) connects: backends with the same target dial interchangeable
    /// sockets (never a credential).
    pub fn dial_target(&self) -> String {
        match self {
            ModelBackend::InProcessMock { opts, model } => format!(
                "in-process {:p} {}",
                Arc::as_ptr(opts),
                if opts.openai.is_some() {
                    model.id.as_str()
                } else {
                    "gemini"
                }
            ),
            ModelBackend::Gemini { endpoint, .. } => format!("gemini {}", endpoint.url),
            ModelBackend::OpenAi { endpoint, .. } => format!("openai {}", endpoint.url),
        }
    }

    /// A short description for logs (never a credential).
    pub fn describe(&self) -> String {
        match self {
            ModelBackend::InProcessMock { opts, model } => format!(
                "embedded mock{} as {} (scenario {:?})",
                if opts.openai.is_some() {
                    ", openai"
                } else {
                    ""
                },
                model.id,
                opts.scenario.name
            ),
            ModelBackend::Gemini { endpoint, model } => format!("{} ({})", endpoint.url, model.id),
            ModelBackend::OpenAi { endpoint, .. } => endpoint.url.clone(),
        }
    }
}

/// The in-process OpenAI mock, addressed as `model`.
fn mock_openai_endpoint(model: &str) -> Result<openai::endpoint::Endpoint, OpenError> {
    Ok(openai::endpoint::Endpoint::new(
        "ws://mock.in-process/v1",
        model,
        openai::wire::Api::Ga,
        None,
    )?)
}

/// The in-process Gemini mock.
fn mock_gemini_endpoint() -> Result<Endpoint, OpenError> {
    Endpoint::new(
        "ws://mock.in-process",
        crate::model::gemini::endpoint::Backend::DeveloperApi,
        "v1beta",
        None,
    )
    .map_err(OpenError::from)
}

fn protocol_of(opts: &MockOptions) -> Protocol {
    if opts.openai.is_some() {
        Protocol::OpenAi
    } else {
        Protocol::Gemini
    }
}

/// `config` naming `model` in its setup.
fn named(config: &SessionConfig, model: &str) -> SessionConfig {
    if config.model == model {
        return config.clone();
    }
    SessionConfig {
        model: model.to_owned(),
        ..config.clone()
    }
}
