//! Where an OpenAI Realtime session connects and how it authenticates:
//! `wss://api.openai.com/v1/realtime?model=…` with `Authorization: Bearer <key>`, plus
//! `OpenAI-Beta: realtime=v1` for the beta dialect. The key lives in [`Secret`] (never shown by
//! `Debug`/`Display`) and goes only into the request header — never into URLs, logs, errors or
//! events. A custom base URL (the mock, a gateway) replaces the host part.

use std::path::Path;
use std::sync::Arc;

use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::{HeaderValue, Request};

use super::wire::Api;
use crate::model::gemini::endpoint::EndpointError as UrlError;
pub use crate::secret::Secret;

/// An endpoint could not be built.
#[derive(Debug, thiserror::Error)]
pub enum EndpointError {
    /// A bad URL, credential characters or CA file (the same rules as for Gemini).
    #[error(transparent)]
    Url(#[from] UrlError),
    #[error("environment variable {var} (the OpenAI API key) is not set or empty")]
    KeyEnv { var: String },
}

/// The public service's WebSocket base (the SDK's `websocket_base_url` default).
pub const OPENAI_BASE: &str = "wss://api.openai.com/v1";

/// The environment variable the key is read from unless configured otherwise.
pub const DEFAULT_KEY_ENV: &str = "OPENAI_API_KEY";

/// A resolved endpoint: the full WebSocket URL (no credentials in it), the key, the dialect, and
/// the TLS trust for `wss://`.
#[derive(Clone)]
pub struct Endpoint {
    pub url: String,
    pub api: Api,
    pub credential: Option<Secret>,
    /// Trust for `wss://`; `None`: the platform's roots. Verification is always on.
    pub tls: Option<Arc<rustls::ClientConfig>>,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("url", &self.url)
            .field("api", &self.api)
            .field("credential", &self.credential)
            .field("extra_ca", &self.tls.is_some())
            .finish()
    }
}

impl Endpoint {
    /// `base` is a WebSocket base such as `wss://api.openai.com/v1` or `ws://127.0.0.1:9300/v1`
    /// (`/realtime` is appended, as the SDK does, unless the path already ends with it); `model`
    /// goes in the `model` query parameter.
    pub fn new(
        base: &str,
        model: &str,
        api: Api,
        credential: Option<Secret>,
    ) -> Result<Self, EndpointError> {
        let mut parsed = url::Url::parse(base).map_err(|e| UrlError::BadUrl {
            url: base.to_owned(),
            reason: e.to_string(),
        })?;
        if !matches!(parsed.scheme(), "ws" | "wss") {
            return Err(UrlError::BadScheme(base.to_owned()).into());
        }
        if parsed.query().is_some() || !parsed.username().is_empty() || parsed.password().is_some()
        {
            let shown = format!(
                "{}://{}{}",
                parsed.scheme(),
                parsed.host_str().unwrap_or(""),
                parsed.path()
            );
            return Err(UrlError::CredentialInUrl(shown).into());
        }
        let path = parsed.path().trim_end_matches('/').to_owned();
        if !path.ends_with("/realtime") {
            parsed.set_path(&format!("{path}/realtime"));
        }
        parsed.query_pairs_mut().append_pair("model", model);
        Ok(Endpoint {
            url: parsed.into(),
            api,
            credential,
            tls: None,
        })
    }

    /// The public service, the key read from the environment variable `key_env`.
    pub fn openai(model: &str, api: Api, key_env: &str) -> Result<Self, EndpointError> {
        Self::new(OPENAI_BASE, model, api, Some(key_from_env(key_env)?))
    }

    /// Trusts the CA certificates in the PEM file `ca_file` too, besides the platform's roots.
    pub fn with_ca_file(mut self, ca_file: &Path) -> Result<Self, EndpointError> {
        self.tls = Some(crate::model::tls::client_config(Some(ca_file)).map_err(UrlError::from)?);
        Ok(self)
    }

    /// The TLS connector for `wss://` (unused for `ws://`): certificates always verified.
    pub fn connector(&self) -> Result<tokio_tungstenite::Connector, EndpointError> {
        let config = match &self.tls {
            Some(c) => c.clone(),
            None => crate::model::tls::default_client_config().map_err(UrlError::from)?,
        };
        Ok(tokio_tungstenite::Connector::Rustls(config))
    }

    /// The WebSocket upgrade request: the key as `Authorization: Bearer`, the beta header when
    /// the beta dialect is asked for.
    pub fn request(&self) -> Result<Request<()>, EndpointError> {
        let mut req = self
            .url
            .as_str()
            .into_client_request()
            .map_err(|e| UrlError::BadUrl {
                url: self.url.clone(),
                reason: e.to_string(),
            })?;
        if let Some(secret) = &self.credential {
            let mut v = HeaderValue::from_str(&format!("Bearer {}", secret.expose()))
                .map_err(|_| UrlError::BadCredential)?;
            v.set_sensitive(true);
            req.headers_mut().insert("authorization", v);
        }
        if self.api == Api::Beta {
            req.headers_mut()
                .insert("openai-beta", HeaderValue::from_static("realtime=v1"));
        }
        Ok(req)
    }
}

/// The key in environment variable `var`; an unset or empty variable is an error naming it (never
/// its value).
pub fn key_from_env(var: &str) -> Result<Secret, EndpointError> {
    match std::env::var(var) {
        Ok(k) if !k.trim().is_empty() => Ok(Secret::new(k.trim())),
        _ => Err(EndpointError::KeyEnv {
            var: var.to_owned(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn public_url_bearer_and_no_leak() {
        let ep = Endpoint::new(
            OPENAI_BASE,
            "gpt-realtime",
            Api::Ga,
            Some(Secret::new("sk-123")),
        )
        .unwrap();
        assert_eq!(
            ep.url,
            "wss://api.openai.com/v1/realtime?model=gpt-realtime"
        );
        let req = ep.request().unwrap();
        assert_eq!(req.headers()["authorization"], "Bearer sk-123");
        assert!(req.headers().get("openai-beta").is_none());
        assert!(!req.uri().to_string().contains("sk-123"));
        assert!(!format!("{ep:?}").contains("sk-123"));
    }

    #[test]
    fn custom_base_and_beta_header() {
        let ep = Endpoint::new("ws://127.0.0.1:9300/v1/", "gpt realtime", Api::Beta, None).unwrap();
        assert_eq!(ep.url, "ws://127.0.0.1:9300/v1/realtime?model=gpt+realtime");
        let req = ep.request().unwrap();
        assert_eq!(req.headers()["openai-beta"], "realtime=v1");
        assert!(req.headers().get("authorization").is_none());
        let full = Endpoint::new("ws://h/v1/realtime", "m", Api::Ga, None).unwrap();
        assert_eq!(full.url, "ws://h/v1/realtime?model=m");
    }

    #[test]
    fn bad_urls_and_keys_are_named_without_the_secret() {
        assert!(Endpoint::new("https://x", "m", Api::Ga, None).is_err());
        let leaky = Endpoint::new("wss://h/v1?api_key=SECRET9", "m", Api::Ga, None)
            .unwrap_err()
            .to_string();
        assert!(
            !leaky.contains("SECRET9") && leaky.contains("wss://h/v1"),
            "{leaky}"
        );
        let bad = Endpoint::new("ws://h", "m", Api::Ga, Some(Secret::new("a\nb"))).unwrap();
        assert!(matches!(
            bad.request(),
            Err(EndpointError::Url(UrlError::BadCredential))
        ));
        let missing = key_from_env("BATON_TEST_SURELY_UNSET_OPENAI_KEY").unwrap_err();
        assert!(
            missing
                .to_string()
                .contains("BATON_TEST_SURELY_UNSET_OPENAI_KEY")
        );
    }
}
