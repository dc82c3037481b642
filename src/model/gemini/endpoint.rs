//! Where a Gemini Live session connects and how it authenticates: Developer API
//! (`x-goog-api-key` header) or Vertex AI (`Authorization: Bearer`). Credentials live in
//! [`Secret`], whose `Debug`/`Display` never show the value, and go only into request headers —
//! never into URLs, logs, errors or events. A credential a command renews
//! ([`RenewedCredential`]) is read afresh for each upgrade.

use std::path::Path;
use std::sync::Arc;

use tokio_tungstenite::tungstenite::http::Request;

use crate::model::credential::{Credential, RenewedCredential};
pub use crate::model::endpoint::{EndpointError, Secret};
use crate::model::endpoint::{Trust, parse_base, request};

/// Which Gemini Live service family.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// generativelanguage.googleapis.com (API key).
    DeveloperApi,
    /// {location}-aiplatform.googleapis.com (OAuth2 bearer token).
    Vertex,
}

/// Default Developer API host.
pub const DEVELOPER_API_BASE: &str = "wss://generativelanguage.googleapis.com";

/// A resolved endpoint: full WebSocket URL (no credentials in it), the credential header, and the
/// TLS trust for `wss://` (see [`crate::model::tls`]).
#[derive(Clone, Debug)]
pub struct Endpoint {
    pub url: String,
    pub backend: Backend,
    pub credential: Option<Credential>,
    pub tls: Trust,
}

impl Endpoint {
    /// `base` is a scheme+host(+port) such as `wss://generativelanguage.googleapis.com` or
    /// `ws://127.0.0.1:9300`; a base that already has a `/ws/...` path is used verbatim.
    /// `version` is `v1beta` (Developer API default) or `v1beta1` (Vertex default).
    pub fn new(
        base: &str,
        backend: Backend,
        version: &str,
        credential: Option<Secret>,
    ) -> Result<Self, EndpointError> {
        let parsed = parse_base(base)?;
        let url = if parsed.path().starts_with("/ws/") {
            base.to_owned()
        } else {
            let root = base.trim_end_matches('/');
            match backend {
                Backend::DeveloperApi => format!(
                    "{root}/ws/google.ai.generativelanguage.{version}.GenerativeService.BidiGenerateContent"
                ),
                Backend::Vertex => format!(
                    "{root}/ws/google.cloud.aiplatform.{version}.LlmBidiService/BidiGenerateContent"
                ),
            }
        };
        Ok(Endpoint {
            url,
            backend,
            credential: credential.map(Credential::Fixed),
            tls: Trust::default(),
        })
    }

    /// Sends the current value of `credential` (renewed by a command) on every upgrade, in place
    /// of the fixed one.
    pub fn with_renewed(mut self, credential: Arc<RenewedCredential>) -> Self {
        self.credential = Some(Credential::Renewed(credential));
        self
    }

    /// Trusts the CA certificates in the PEM file `ca_file` too (a private gateway), besides the
    /// platform's roots.
    pub fn with_ca_file(mut self, ca_file: &Path) -> Result<Self, EndpointError> {
        self.tls = Trust::with_ca_file(ca_file)?;
        Ok(self)
    }

    /// The WebSocket upgrade request, credential in its header (the renewed one's value now,
    /// when there is one).
    pub fn request(&self) -> Result<Request<()>, EndpointError> {
        let secret = self.credential.as_ref().map(Credential::current);
        let header = secret.map(|secret| match self.backend {
            Backend::DeveloperApi => ("x-goog-api-key", secret.expose().to_owned()),
            Backend::Vertex => ("authorization", format!("Bearer {}", secret.expose())),
        });
        request(&self.url, header)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn developer_api_path_and_header() {
        let ep = Endpoint::new(
            DEVELOPER_API_BASE,
            Backend::DeveloperApi,
            "v1beta",
            Some(Secret::new("k123")),
        )
        .unwrap();
        assert_eq!(
            ep.url,
            "wss://generativelanguage.googleapis.com/ws/google.ai.generativelanguage.v1beta.GenerativeService.BidiGenerateContent"
        );
        let req = ep.request().unwrap();
        assert_eq!(req.headers()["x-goog-api-key"], "k123");
        assert!(!req.uri().to_string().contains("k123"));
        assert!(!format!("{ep:?}").contains("k123"));
    }

    #[test]
    fn vertex_path_and_bearer() {
        let ep = Endpoint::new(
            "wss://us-central1-aiplatform.googleapis.com/",
            Backend::Vertex,
            "v1beta1",
            Some(Secret::new("tok")),
        )
        .unwrap();
        assert!(
            ep.url.ends_with(
                "/ws/google.cloud.aiplatform.v1beta1.LlmBidiService/BidiGenerateContent"
            )
        );
        assert_eq!(
            ep.request().unwrap().headers()["authorization"],
            "Bearer tok"
        );
    }

    #[test]
    fn a_renewed_credential_is_read_at_each_request() {
        use crate::model::credential::CredentialCommand;
        let command =
            CredentialCommand::new(vec!["sh".into(), "-c".into(), "echo tok-1".into()]).unwrap();
        let renewed = Arc::new(
            RenewedCredential::start(command, std::time::Duration::from_secs(60)).unwrap(),
        );
        let ep = Endpoint::new(
            "wss://us-central1-aiplatform.googleapis.com",
            Backend::Vertex,
            "v1beta1",
            Some(Secret::new("fixed")),
        )
        .unwrap()
        .with_renewed(renewed.clone());
        assert_eq!(
            ep.request().unwrap().headers()["authorization"],
            "Bearer tok-1"
        );
        renewed.set(Secret::new("tok-2"));
        let req = ep.request().unwrap();
        assert_eq!(req.headers()["authorization"], "Bearer tok-2");
        assert!(req.headers()["authorization"].is_sensitive());
        assert!(!format!("{ep:?}").contains("tok-2"));
        let dev = Endpoint::new("ws://h", Backend::DeveloperApi, "v1beta", None)
            .unwrap()
            .with_renewed(renewed);
        assert_eq!(dev.request().unwrap().headers()["x-goog-api-key"], "tok-2");
    }

    #[test]
    fn bad_urls_are_named() {
        let e = Endpoint::new("http://x", Backend::DeveloperApi, "v1beta", None).unwrap_err();
        assert!(e.to_string().contains("http://x"));
        assert!(Endpoint::new("::", Backend::DeveloperApi, "v1beta", None).is_err());
        let bad = Endpoint::new(
            "ws://h",
            Backend::DeveloperApi,
            "v1beta",
            Some(Secret::new("a\nb")),
        )
        .unwrap();
        assert!(matches!(bad.request(), Err(EndpointError::BadCredential)));
        let leaky = Endpoint::new(
            "wss://h/ws/x?key=SECRET123",
            Backend::DeveloperApi,
            "v1beta",
            None,
        )
        .unwrap_err()
        .to_string();
        assert!(
            !leaky.contains("SECRET123") && leaky.contains("wss://h/ws/x"),
            "{leaky}"
        );
    }
}
