//! What both protocols' endpoints share: the checks on a model URL (a WebSocket URL that carries
//! no credentials), the TLS trust for `wss://`, and the upgrade request with its credential
//! header, marked sensitive. Credentials go only into that header — never into URLs, logs,
//! errors or events.

use std::path::Path;
use std::sync::Arc;

use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::{HeaderValue, Request};

pub use crate::secret::Secret;

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
    #[error("environment variable {var} (the {what}) is not set or empty")]
    KeyEnv { var: String, what: &'static str },
}

/// Parses a model base URL: `ws://` or `wss://`, with no query or user info (a credential put
/// there would travel in the URL; the error shows the URL without them).
pub fn parse_base(base: &str) -> Result<url::Url, EndpointError> {
    let parsed = url::Url::parse(base).map_err(|e| EndpointError::BadUrl {
        url: base.to_owned(),
        reason: e.to_string(),
    })?;
    if !matches!(parsed.scheme(), "ws" | "wss") {
        return Err(EndpointError::BadScheme(base.to_owned()));
    }
    if parsed.query().is_some() || !parsed.username().is_empty() || parsed.password().is_some() {
        let shown = format!(
            "{}://{}{}",
            parsed.scheme(),
            parsed.host_str().unwrap_or(""),
            parsed.path()
        );
        return Err(EndpointError::CredentialInUrl(shown));
    }
    Ok(parsed)
}

/// The trust for `wss://`: the platform's roots, and a private gateway's CA when one is given.
/// Certificates are always verified.
#[derive(Clone, Default)]
pub struct Trust(Option<Arc<rustls::ClientConfig>>);

impl Trust {
    /// The platform's roots and the CA certificates in the PEM file `ca_file`.
    pub fn with_ca_file(ca_file: &Path) -> Result<Self, EndpointError> {
        Ok(Trust(Some(crate::model::tls::client_config(Some(
            ca_file,
        ))?)))
    }

    /// The TLS connector for `wss://` (unused for `ws://`).
    pub fn connector(&self) -> Result<tokio_tungstenite::Connector, EndpointError> {
        let config = match &self.0 {
            Some(c) => c.clone(),
            None => crate::model::tls::default_client_config()?,
        };
        Ok(tokio_tungstenite::Connector::Rustls(config))
    }
}

impl std::fmt::Debug for Trust {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Trust")
            .field("extra_ca", &self.0.is_some())
            .finish()
    }
}

/// The WebSocket upgrade request for `url`, with the credential header `(name, value)` if any.
pub fn request(
    url: &str,
    credential: Option<(&'static str, String)>,
) -> Result<Request<()>, EndpointError> {
    let mut req = url
        .into_client_request()
        .map_err(|e| EndpointError::BadUrl {
            url: url.to_owned(),
            reason: e.to_string(),
        })?;
    if let Some((name, value)) = credential {
        let mut v = HeaderValue::from_str(&value).map_err(|_| EndpointError::BadCredential)?;
        v.set_sensitive(true);
        req.headers_mut().insert(name, v);
    }
    Ok(req)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_base_with_a_credential_is_refused_without_showing_it() {
        for url in ["wss://h/ws/x?key=SECRET123", "wss://user:SECRET123@h/ws/x"] {
            let e = parse_base(url).unwrap_err().to_string();
            assert!(
                !e.contains("SECRET123") && e.contains("wss://h/ws/x"),
                "{e}"
            );
        }
        assert!(matches!(
            parse_base("https://h"),
            Err(EndpointError::BadScheme(_))
        ));
        assert!(matches!(
            parse_base("::"),
            Err(EndpointError::BadUrl { .. })
        ));
        assert_eq!(parse_base("ws://h:9/v1").unwrap().path(), "/v1");
    }

    #[test]
    fn the_credential_goes_only_into_a_sensitive_header() {
        let req = request("ws://h/x", Some(("authorization", "Bearer k9".into()))).unwrap();
        assert_eq!(req.headers()["authorization"], "Bearer k9");
        assert!(req.headers()["authorization"].is_sensitive());
        assert!(!req.uri().to_string().contains("k9"));
        assert!(matches!(
            request("ws://h/x", Some(("x-goog-api-key", "a\nb".into()))),
            Err(EndpointError::BadCredential)
        ));
    }
}
