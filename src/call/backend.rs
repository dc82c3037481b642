//! Where a call's model sessions come from: the embedded mock in-process (an in-memory stream
//! carrying real WebSocket frames, in the Gemini Live or the OpenAI Realtime protocol as its
//! options say), a remote Gemini Live endpoint, or a remote OpenAI Realtime endpoint. Every
//! session is opened from baton's session settings (the Gemini `SessionConfig`; translated for
//! OpenAI) and handed to the call as a protocol-neutral [`ModelSession`]. Shared by `demo` and
//! `serve`.

use std::sync::Arc;

use crate::mock::MockOptions;
use crate::model::Capabilities;
use crate::model::gemini::endpoint::Endpoint;
use crate::model::gemini::session::{self, SessionConfig, Transport};
use crate::model::handle::{ModelSession, OpenError, Protocol};
use crate::model::openai;

/// The OpenAI model an in-process mock session names (the mock serves any).
pub const MOCK_OPENAI_MODEL: &str = "gpt-realtime";

/// A remote OpenAI Realtime endpoint and the model its sessions use.
#[derive(Clone, Debug)]
pub struct OpenAiRemote {
    pub endpoint: openai::endpoint::Endpoint,
    /// What the OpenAI model can do (the service's, or a separate mock's profile).
    pub capabilities: Capabilities,
}

/// A source of model sessions, one per call.
#[derive(Clone, Debug)]
pub enum ModelBackend {
    /// The embedded mock model, in this process.
    InProcessMock(Arc<MockOptions>),
    /// A Gemini Live endpoint over the network (the real service or a separate `baton mock-model`).
    Remote(Endpoint),
    /// An OpenAI Realtime endpoint over the network (the service or `baton mock-model --profile
    /// openai`).
    OpenAi(OpenAiRemote),
}

impl ModelBackend {
    /// The wire protocol of this backend's sessions.
    pub fn protocol(&self) -> Protocol {
        match self {
            ModelBackend::InProcessMock(o) if o.openai.is_some() => Protocol::OpenAi,
            ModelBackend::InProcessMock(_) | ModelBackend::Remote(_) => Protocol::Gemini,
            ModelBackend::OpenAi(_) => Protocol::OpenAi,
        }
    }

    /// What this backend's sessions can do in place (a remote Gemini endpoint: a 3.8-class
    /// model).
    pub fn capabilities(&self) -> Capabilities {
        match self {
            ModelBackend::InProcessMock(o) => o.capabilities(),
            ModelBackend::Remote(_) => crate::model::gemini::CAPABILITIES,
            ModelBackend::OpenAi(r) => r.capabilities,
        }
    }

    /// Opens a session and waits until it is set up (`setupComplete` / `session.updated`).
    pub async fn open(&self, config: &SessionConfig) -> Result<ModelSession, OpenError> {
        let caps = self.capabilities();
        match self {
            ModelBackend::InProcessMock(opts) if opts.openai.is_some() => {
                let stream = crate::mock::connect_in_memory(opts.clone());
                let endpoint = openai::endpoint::Endpoint::new(
                    "ws://mock.in-process/v1",
                    MOCK_OPENAI_MODEL,
                    openai::wire::Api::Ga,
                    None,
                )?;
                let cfg = openai::translate::session_config(config, MOCK_OPENAI_MODEL);
                let s =
                    openai::session::connect(&endpoint, Transport::InMemory(stream), &cfg).await?;
                Ok(ModelSession::openai(
                    s,
                    caps,
                    config.history_in_client_content,
                ))
            }
            ModelBackend::InProcessMock(opts) => {
                let stream = crate::mock::connect_in_memory(opts.clone());
                let endpoint = Endpoint::new(
                    "ws://mock.in-process",
                    crate::model::gemini::endpoint::Backend::DeveloperApi,
                    "v1beta",
                    None,
                )
                .map_err(session::SessionError::from)?;
                let s = session::connect(&endpoint, Transport::InMemory(stream), config).await?;
                Ok(ModelSession::gemini(s, caps))
            }
            ModelBackend::Remote(endpoint) => {
                let s = session::connect(endpoint, Transport::Network, config).await?;
                Ok(ModelSession::gemini(s, caps))
            }
            ModelBackend::OpenAi(r) => {
                let model = model_of(&r.endpoint.url).unwrap_or(MOCK_OPENAI_MODEL.to_owned());
                let cfg = openai::translate::session_config(config, &model);
                let s = openai::session::connect(&r.endpoint, Transport::Network, &cfg).await?;
                Ok(ModelSession::openai(
                    s,
                    caps,
                    config.history_in_client_content,
                ))
            }
        }
    }

    /// A short description for logs (never a credential).
    pub fn describe(&self) -> String {
        match self {
            ModelBackend::InProcessMock(o) => format!(
                "embedded mock{} (scenario {:?})",
                if o.openai.is_some() { ", openai" } else { "" },
                o.scenario.name
            ),
            ModelBackend::Remote(e) => e.url.clone(),
            ModelBackend::OpenAi(r) => r.endpoint.url.clone(),
        }
    }
}

/// The `model` query parameter of an OpenAI Realtime URL.
fn model_of(url: &str) -> Option<String> {
    let parsed = url::Url::parse(url).ok()?;
    parsed
        .query_pairs()
        .find(|(k, _)| k == "model")
        .map(|(_, v)| v.into_owned())
}
