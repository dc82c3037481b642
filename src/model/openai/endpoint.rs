//! Where an OpenAI Realtime session connects and how it authenticates:
//! `wss://api.openai.com/v1/realtime?model=…` with `Authorization: Bearer <key>`, plus
//! `OpenAI-Beta: realtime=v1` for the beta dialect. The key lives in [`Secret`] (never shown by
//! `Debug`/`Display`) and goes only into the request header — never into URLs, logs, errors or
//! events. A custom base URL (the mock, a gateway) replaces the host part. A key a command
//! renews ([`RenewedCredential`]) is read afresh for each upgrade.

use std::path::Path;
use std::sync::Arc;

use tokio_tungstenite::tungstenite::http::{HeaderValue, Request};

use super::wire::Api;
use crate::model::credential::{Credential, RenewedCredential};
pub use crate::model::endpoint::{EndpointError, Secret};
use crate::model::endpoint::{Trust, parse_base, request};

/// The public service's WebSocket base (the SDK's `websocket_base_url` default).
pub const OPENAI_BASE: &str = "wss://api.openai.com/v1";

/// The environment variable the key is read from unless configured otherwise.
pub const DEFAULT_KEY_ENV: &str = "OPENAI_API_KEY";

/// A resolved endpoint: the full WebSocket URL (no credentials in it), the key, the dialect, and
/// the TLS trust for `wss://`.
#[derive(Clone, Debug)]
pub struct Endpoint {
    pub url: String,
    pub api: Api,
    pub credential: Option<Credential>,
    pub tls: Trust,
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
        let mut parsed = parse_base(base)?;
        let path = parsed.path().trim_end_matches('/').to_owned();
        if !path.ends_with("/realtime") {
            parsed.set_path(&format!("{path}/realtime"));
        }
        parsed.query_pairs_mut().append_pair("model", model);
        Ok(Endpoint {
            url: parsed.into(),
            api,
            credential: credential.map(Credential::Fixed),
            tls: Trust::default(),
        })
    }

    /// Sends the current value of `credential` (renewed by a command) on every upgrade, in place
    /// of the fixed key.
    pub fn with_renewed(mut self, credential: Arc<RenewedCredential>) -> Self {
        self.credential = Some(Credential::Renewed(credential));
        self
    }

    /// The public service, the key read from the environment variable `key_env`.
    pub fn openai(model: &str, api: Api, key_env: &str) -> Result<Self, EndpointError> {
        Self::new(OPENAI_BASE, model, api, Some(key_from_env(key_env)?))
    }

    /// Trusts the CA certificates in the PEM file `ca_file` too, besides the platform's roots.
    pub fn with_ca_file(mut self, ca_file: &Path) -> Result<Self, EndpointError> {
        self.tls = Trust::with_ca_file(ca_file)?;
        Ok(self)
    }

    /// The WebSocket upgrade request: the key (the renewed one's value now, when there is one)
    /// as `Authorization: Bearer`, the beta header when the beta dialect is asked for.
    pub fn request(&self) -> Result<Request<()>, EndpointError> {
        let header = self
            .credential
            .as_ref()
            .map(|c| ("authorization", format!("Bearer {}", c.current().expose())));
        let mut req = request(&self.url, header)?;
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
            what: "OpenAI API key",
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
    fn a_renewed_key_is_read_at_each_request() {
        use crate::model::credential::CredentialCommand;
        let command =
            CredentialCommand::new(vec!["sh".into(), "-c".into(), "echo sk-1".into()]).unwrap();
        let renewed = Arc::new(
            RenewedCredential::start(command, std::time::Duration::from_secs(60)).unwrap(),
        );
        let ep = Endpoint::new(OPENAI_BASE, "gpt-realtime", Api::Ga, None)
            .unwrap()
            .with_renewed(renewed.clone());
        assert_eq!(
            ep.request().unwrap().headers()["authorization"],
            "Bearer sk-1"
        );
        renewed.set(Secret::new("sk-2"));
        assert_eq!(
            ep.request().unwrap().headers()["authorization"],
            "Bearer sk-2"
        );
        assert!(!format!("{ep:?}").contains("sk-2"));
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
        assert!(matches!(bad.request(), Err(EndpointError::BadCredential)));
        let missing = key_from_env("BATON_TEST_SURELY_UNSET_OPENAI_KEY").unwrap_err();
        assert!(
            missing
                .to_string()
                .contains("BATON_TEST_SURELY_UNSET_OPENAI_KEY")
        );
    }
}
