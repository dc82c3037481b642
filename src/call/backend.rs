//! Where a call's model session comes from: the embedded mock in-process (an in-memory stream
//! carrying real WebSocket frames) or a remote Live endpoint. Shared by `demo` and `serve`.

use std::sync::Arc;

use crate::mock::MockOptions;
use crate::model::gemini::endpoint::Endpoint;
use crate::model::gemini::session::{self, Session, SessionConfig, SessionError, Transport};

/// A source of model sessions, one per call.
#[derive(Clone, Debug)]
pub enum ModelBackend {
    /// The embedded mock model, in this process.
    InProcessMock(Arc<MockOptions>),
    /// A Live endpoint over the network (the real service or a separate `baton mock-model`).
    Remote(Endpoint),
}

impl ModelBackend {
    /// Opens a session and waits for `setupComplete`.
    pub async fn open(&self, config: &SessionConfig) -> Result<Session, SessionError> {
        match self {
            ModelBackend::InProcessMock(opts) => {
                let stream = crate::mock::connect_in_memory(opts.clone());
                let endpoint = Endpoint::new(
                    "ws://mock.in-process",
                    crate::model::gemini::endpoint::Backend::DeveloperApi,
                    "v1beta",
                    None,
                )?;
                session::connect(&endpoint, Transport::InMemory(stream), config).await
            }
            ModelBackend::Remote(endpoint) => {
                session::connect(endpoint, Transport::Network, config).await
            }
        }
    }

    /// A short description for logs (never a credential).
    pub fn describe(&self) -> String {
        match self {
            ModelBackend::InProcessMock(o) => {
                format!("embedded mock (scenario {:?})", o.scenario.name)
            }
            ModelBackend::Remote(e) => e.url.clone(),
        }
    }
}
