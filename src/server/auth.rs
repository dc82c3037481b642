//! Who may use baton's HTTP endpoints.
//!
//! Every endpoint has exactly one authenticator:
//! * the probes `GET /livez`, `/readyz` and `/healthz` are open (load balancers, orchestrators);
//! * the Twilio-facing endpoints (`/twiml`, `/twilio`) are authenticated by `X-Twilio-Signature`
//!   when a Twilio auth token is configured (Twilio cannot send a bearer token); with signature
//!   checking off they are ordinary protected routes;
//! * everything else is a **protected route**: [`protect`] puts it behind [`require_bearer`], which
//!   wants `Authorization: Bearer <token>` with one of the tokens named by
//!   `server.auth_tokens_env` (comma-separated in that environment variable, never in the file).
//!   A browser cannot set headers on a WebSocket, so a WebSocket upgrade may carry the token as
//!   the subprotocol `baton.bearer.<token>` instead, offered beside the route's own protocol
//!   (`baton.events`, `baton.stream`), which the server selects; the token is never echoed.
//!
//! Tokens are compared as SHA-256 digests with `subtle`'s constant-time equality, against every
//! configured token without an early exit, so the time taken tells nothing about where a guess
//! differs nor about the configured tokens' lengths.
//!
//! [`exposure`] is the start-up rule (secure by default): on a loopback address baton may run
//! without tokens; on any other address it refuses to start without them unless the operator
//! passes `--insecure-no-auth`.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use subtle::ConstantTimeEq;

/// The bearer tokens clients of the protected routes must present. Never printed.
pub struct ApiTokens {
    digests: Vec<[u8; 32]>,
}

impl std::fmt::Debug for ApiTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ApiTokens({} token(s), ***)", self.digests.len())
    }
}

/// Why the configured tokens cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokensError {
    #[error(
        "environment variable {var} (named by server.auth_tokens_env) is not set or holds no \
         token: export it as one or more comma-separated tokens"
    )]
    Empty { var: String },
    #[error(
        "a token in {var} is shorter than {MIN_TOKEN_LEN} characters: use long random tokens \
         (e.g. `openssl rand -hex 32`)"
    )]
    TooShort { var: String },
    #[error("a token in {var} has characters an Authorization header cannot carry")]
    NotHeaderSafe { var: String },
}

/// Shortest token accepted: guessable tokens are no protection.
pub const MIN_TOKEN_LEN: usize = 16;

fn digest(token: &[u8]) -> [u8; 32] {
    let d = ring::digest::digest(&ring::digest::SHA256, token);
    let mut out = [0u8; 32];
    out.copy_from_slice(d.as_ref());
    out
}

impl ApiTokens {
    /// Tokens from the value of the variable `var`: comma-separated, surrounding spaces ignored.
    pub fn parse(value: &str, var: &str) -> Result<Self, TokensError> {
        let tokens: Vec<&str> = value
            .split(',')
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .collect();
        if tokens.is_empty() {
            return Err(TokensError::Empty {
                var: var.to_owned(),
            });
        }
        for t in &tokens {
            if t.len() < MIN_TOKEN_LEN {
                return Err(TokensError::TooShort {
                    var: var.to_owned(),
                });
            }
            if !t.bytes().all(|b| b.is_ascii_graphic()) {
                return Err(TokensError::NotHeaderSafe {
                    var: var.to_owned(),
                });
            }
        }
        Ok(ApiTokens {
            digests: tokens.iter().map(|t| digest(t.as_bytes())).collect(),
        })
    }

    /// Reads the tokens from the environment variable `var`.
    pub fn from_env(var: &str) -> Result<Self, TokensError> {
        Self::parse(&std::env::var(var).unwrap_or_default(), var)
    }

    /// Whether `presented` is one of the tokens, in time independent of its content.
    pub fn accepts(&self, presented: &[u8]) -> bool {
        let d = digest(presented);
        let mut any = subtle::Choice::from(0);
        for t in &self.digests {
            any |= t.ct_eq(&d);
        }
        any.into()
    }
}

/// The prefix of the WebSocket subprotocol that carries a bearer token from a browser.
pub const SUBPROTOCOL_PREFIX: &str = "baton.bearer.";

/// The token of an `Authorization: Bearer <token>` header (scheme case-insensitive), or else of
/// a `baton.bearer.<token>` WebSocket subprotocol.
fn bearer(req: &Request) -> Option<&[u8]> {
    if let Some(v) = req.headers().get(header::AUTHORIZATION) {
        let v = v.as_bytes();
        let (scheme, rest) = v.split_at(v.iter().position(|&b| b == b' ')?);
        return scheme
            .eq_ignore_ascii_case(b"bearer")
            .then(|| rest.trim_ascii());
    }
    req.headers()
        .get_all(header::SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .flat_map(|v| v.as_bytes().split(|&b| b == b','))
        .map(<[u8]>::trim_ascii)
        .find_map(|p| p.strip_prefix(SUBPROTOCOL_PREFIX.as_bytes()))
        .filter(|t| !t.is_empty())
}

/// A browser's CORS preflight: `OPTIONS` with an `Origin` and the method it asks about.
fn is_preflight(req: &Request) -> bool {
    req.method() == axum::http::Method::OPTIONS
        && req.headers().contains_key(header::ORIGIN)
        && req
            .headers()
            .contains_key(header::ACCESS_CONTROL_REQUEST_METHOD)
}

/// The middleware in front of every protected route: 401 without a valid bearer token (a CORS
/// preflight excepted).
pub async fn require_bearer(
    State(tokens): State<Arc<ApiTokens>>,
    req: Request,
    next: Next,
) -> Response {
    let refuse = |why: &'static str| {
        (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Bearer realm=\"baton\"")],
            axum::Json(serde_json::json!({ "error": why })),
        )
            .into_response()
    };
    // A CORS preflight never carries credentials (the browser sends it on its own, before the
    // request that does): it goes through to the route, which answers it with what it allows
    // (`/whip` for `webrtc.allow_origins`) and nothing else.
    if is_preflight(&req) {
        return next.run(req).await;
    }
    match bearer(&req) {
        None => {
            tracing::warn!(path = %req.uri().path(), "refused a request without a bearer token");
            refuse(
                "this endpoint needs an API token: send \"Authorization: Bearer <token>\" (or, \
                 from a browser's WebSocket, the subprotocol \"baton.bearer.<token>\") with a \
                 token from baton's server.auth_tokens_env variable",
            )
        }
        Some(t) if tokens.accepts(t) => next.run(req).await,
        Some(_) => {
            tracing::warn!(path = %req.uri().path(), "refused a request with a wrong bearer token");
            refuse("the bearer token is not one of baton's API tokens")
        }
    }
}

/// `routes` behind the bearer layer when tokens are configured; unchanged otherwise (allowed only
/// where [`exposure`] allows it).
pub fn protect<S: Clone + Send + Sync + 'static>(
    routes: axum::Router<S>,
    tokens: Option<Arc<ApiTokens>>,
) -> axum::Router<S> {
    match tokens {
        Some(t) => routes.layer(axum::middleware::from_fn_with_state(t, require_bearer)),
        None => routes,
    }
}

/// How the daemon is exposed, as decided at start-up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exposure {
    /// Bearer tokens guard the protected routes.
    Tokens,
    /// No tokens, but only this machine can connect.
    LoopbackOnly,
    /// No tokens on a reachable address, because the operator said so.
    InsecureNoAuth,
}

/// The daemon must not start this way.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}; {fix}", refusal(*.addr))]
pub struct ExposureError {
    pub addr: SocketAddr,
    fix: &'static str,
}

impl ExposureError {
    /// Why it must not (the config check's message).
    pub fn refusal(&self) -> String {
        refusal(self.addr)
    }

    /// What to do about it (the config check's fix).
    pub fn fix(&self) -> &'static str {
        self.fix
    }
}

fn refusal(addr: SocketAddr) -> String {
    format!(
        "refusing to listen on {addr} without API tokens: any host that reaches it could use baton"
    )
}

/// The start-up rule. `tokens`: bearer tokens are configured; `twilio_signed`: `/twilio` and
/// `/twiml` check `X-Twilio-Signature`. Without tokens, a signed Twilio endpoint is not enough:
/// the other routes would be open.
pub fn exposure(
    addr: SocketAddr,
    tokens: bool,
    twilio_signed: bool,
    insecure_no_auth: bool,
) -> Result<Exposure, ExposureError> {
    if tokens {
        Ok(Exposure::Tokens)
    } else if addr.ip().is_loopback() {
        Ok(Exposure::LoopbackOnly)
    } else if insecure_no_auth {
        Ok(Exposure::InsecureNoAuth)
    } else {
        Err(ExposureError {
            addr,
            fix: if twilio_signed {
                "set server.auth_tokens_env to a variable holding comma-separated tokens, \
                 listen on 127.0.0.1, or pass --insecure-no-auth to run open on purpose"
            } else {
                "set server.auth_tokens_env to a variable holding comma-separated tokens (and \
                 twilio.auth_token_env so Twilio's signature guards /twilio), listen on \
                 127.0.0.1, or pass --insecure-no-auth to run open on purpose"
            },
        })
    }
}

/// Logs what [`exposure`] decided, loudly when it is open.
pub fn log_exposure(e: Exposure, addr: SocketAddr, twilio_signed: bool) {
    let twilio = if twilio_signed {
        "X-Twilio-Signature"
    } else {
        "the API tokens (signature checking is off, so Twilio itself cannot connect)"
    };
    match e {
        Exposure::Tokens => tracing::info!(
            %addr,
            "API tokens required on every endpoint but the probes (/livez, /readyz, /healthz), the call page (/, /caller.wav) and /openapi.json; /twilio and /twiml use {twilio}"
        ),
        Exposure::LoopbackOnly => tracing::info!(
            %addr,
            "no API tokens: listening on a loopback address, so only this machine can connect"
        ),
        Exposure::InsecureNoAuth => tracing::warn!(
            %addr,
            "INSECURE: --insecure-no-auth given; every endpoint is open to anyone who reaches \
             this address. Set server.auth_tokens_env before exposing baton"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "tok-aaaaaaaaaaaaaaaaaaaaaaaa";
    const B: &str = "tok-bbbbbbbbbbbbbbbbbbbbbbbb";

    #[test]
    fn tokens_parse_and_compare() {
        let t = ApiTokens::parse(&format!(" {A} ,{B},"), "V").unwrap();
        assert!(t.accepts(A.as_bytes()));
        assert!(t.accepts(B.as_bytes()));
        assert!(!t.accepts(b""));
        assert!(!t.accepts(&A.as_bytes()[..A.len() - 1]));
        assert!(!t.accepts(format!("{A}x").as_bytes()));
        assert!(!format!("{t:?}").contains("aaaa"));
        assert_eq!(
            ApiTokens::parse(" , ", "V").unwrap_err(),
            TokensError::Empty { var: "V".into() }
        );
        assert!(matches!(
            ApiTokens::parse("short", "V"),
            Err(TokensError::TooShort { .. })
        ));
        assert!(matches!(
            ApiTokens::parse("tok with spaces inside it", "V"),
            Err(TokensError::NotHeaderSafe { .. })
        ));
    }

    /// The comparison's cost does not depend on how much of a guess is right. Timing assertions
    /// are noisy, so this compares medians of many rounds with a wide margin: an early-exit
    /// comparison of a 4 KiB token differs by ~100× between a first-byte and a last-byte miss.
    #[test]
    fn comparison_time_does_not_depend_on_the_matching_prefix() {
        let secret = "s".repeat(4096);
        let tokens = ApiTokens::parse(&secret, "V").unwrap();
        let mut early = secret.clone().into_bytes();
        early[0] = b'x';
        let mut late = secret.into_bytes();
        late[4095] = b'x';
        let time = |guess: &[u8]| {
            let t = std::time::Instant::now();
            for _ in 0..20 {
                std::hint::black_box(tokens.accepts(std::hint::black_box(guess)));
            }
            t.elapsed().as_nanos()
        };
        // Interleaved, so a change in the machine's load affects both alike.
        let (mut early_ns, mut late_ns): (Vec<u128>, Vec<u128>) =
            (0..201).map(|_| (time(&early), time(&late))).unzip();
        early_ns.sort_unstable();
        late_ns.sort_unstable();
        let (e, l) = (early_ns[100], late_ns[100]);
        let ratio = e.max(l) as f64 / e.min(l).max(1) as f64;
        assert!(ratio < 3.0, "first-byte miss {e} ns, last-byte miss {l} ns");
    }

    #[test]
    fn bearer_header_forms() {
        let req = |v: &str| {
            axum::http::Request::builder()
                .header(header::AUTHORIZATION, v)
                .body(axum::body::Body::empty())
                .unwrap()
        };
        assert_eq!(bearer(&req("Bearer abc")), Some(&b"abc"[..]));
        assert_eq!(bearer(&req("bearer  abc ")), Some(&b"abc"[..]));
        assert_eq!(bearer(&req("Basic abc")), None);
        assert_eq!(bearer(&req("Bearer")), None);
        let ws = |v: &str| {
            axum::http::Request::builder()
                .header(header::SEC_WEBSOCKET_PROTOCOL, v)
                .body(axum::body::Body::empty())
                .unwrap()
        };
        assert_eq!(
            bearer(&ws("baton.events, baton.bearer.abc123")),
            Some(&b"abc123"[..])
        );
        assert_eq!(bearer(&ws("baton.bearer.")), None);
        assert_eq!(bearer(&ws("baton.events")), None);
    }

    #[test]
    fn secure_by_default() {
        let lo: SocketAddr = "127.0.0.1:8080".parse().unwrap();
        let lo6: SocketAddr = "[::1]:8080".parse().unwrap();
        let any: SocketAddr = "0.0.0.0:8080".parse().unwrap();
        let lan: SocketAddr = "192.0.2.7:8080".parse().unwrap();
        assert_eq!(
            exposure(lo, false, false, false),
            Ok(Exposure::LoopbackOnly)
        );
        assert_eq!(
            exposure(lo6, false, false, false),
            Ok(Exposure::LoopbackOnly)
        );
        assert_eq!(exposure(any, true, false, false), Ok(Exposure::Tokens));
        let e = exposure(any, false, true, false).unwrap_err().to_string();
        assert!(
            e.contains("0.0.0.0:8080") && e.contains("--insecure-no-auth"),
            "{e}"
        );
        assert!(exposure(lan, false, false, false).is_err());
        assert_eq!(
            exposure(lan, false, false, true),
            Ok(Exposure::InsecureNoAuth)
        );
    }
}
