//! Where a Gemini Live session connects and how it authenticates: Developer API
//! (`x-goog-api-key` header) or Vertex AI (`Authorization: Bearer`). Credentials live in
//! [`Secret`], whose `Debug`/`Display` never show the value, and go only into request headers —
//! never into URLs, logs, errors or events.

use std::path::Path;
use std::sync::Arc;

use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::{HeaderValue, Request};

pub use crate::secret::Secret;

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
#[derive(Clone)]
pub struct Endpoint {
    pub url: String,
    pub backend: Backend,
    pub credential: Option<Secret>,
    /// Trust for `wss://`; `None`: the platform's roots. Verification is always on.
    pub tls: Option<Arc<rustls::ClientConfig>>,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("url", &self.url)
            .field("backend", &self.backend)
            .field("credential", &self.credential)
            .field("extra_ca", &self.tls.is_some())
            .finish()
    }
}

/// An endpoint could not be built.
#[derive(Debug, thiserror::Error)]
pub enum EndpointError {
    #[error("model URL {0:?} is not a ws:// or wss:// URL")]
    BadScheme(String),
    #[error("model URL {url:?} is not valid: {reason}")]
    BadUrl { url: String, reason: String },
    #[error("credential contains characters that cannot go in an HTTP header")]
    BadCredential,
    #[error(transparent)]
    Tls(#[from] crate::model::tls::TlsError),
    #[error(
        "the model URL must not carry a query or user info (credentials go in an environment variable, sent as a header): {0}"
    )]
    CredentialInUrl(String),
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
        let parsed = url::Url::parse(base).map_err(|e| EndpointError::BadUrl {
            url: base.to_owned(),
            reason: e.to_string(),
        })?;
        if !matches!(parsed.scheme(), "ws" | "wss") {
            return Err(EndpointError::BadScheme(base.to_owned()));
        }
        if parsed.query().is_some() || !parsed.username().is_empty() || parsed.password().is_some()
        {
            let shown = format!(
                "{}://{}{}",
                parsed.scheme(),
                parsed.host_str().unwrap_or(""),
                parsed.path()
            );
            return Err(EndpointError::CredentialInUrl(shown));
        }
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
            credential,
            tls: None,
        })
    }

    /// Trusts the CA certificates in the PEM file `ca_file` too (a private gateway), besides the
    /// platform's roots.
    pub fn with_ca_file(mut self, ca_file: &Path) -> Result<Self, EndpointError> {
        self.tls = Some(crate::model::tls::client_config(Some(ca_file))?);
        Ok(self)
    }

    /// The TLS connector for `wss://` (unused for `ws://`): certificates always verified.
    pub fn connector(&self) -> Result<tokio_tungstenite::Connector, EndpointError> {
        let config = match &self.tls {
            Some(c) => c.clone(),
            None => crate::model::tls::default_client_config()?,
        };
        Ok(tokio_tungstenite::Connector::Rustls(config))
    }

    /// The WebSocket upgrade request, credential in its header.
    pub fn request(&self) -> Result<Request<()>, EndpointError> {
        let mut req =
            self.url
                .as_str()
                .into_client_request()
                .map_err(|e| EndpointError::BadUrl {
                    url: self.url.clone(),
                    reason: e.to_string(),
                })?;
        if let Some(secret) = &self.credential {
            let (name, value) = match self.backend {
                Backend::DeveloperApi => ("x-goog-api-key", secret.expose().to_owned()),
                Backend::Vertex => ("authorization", format!("Bearer {}", secret.expose())),
            };
            let mut v = HeaderValue::from_str(&value).map_err(|_| EndpointError::BadCredential)?;
            v.set_sensitive(true);
            req.headers_mut().insert(name, v);
        }
        Ok(req)
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
