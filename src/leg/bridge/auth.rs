//! Credentials bridges put on the WebSocket upgrade, checked before any message is read, in
//! constant time:
//! * Telnyx: the `stream_auth_token` given when the stream was set up comes back in the
//!   `x-telnyx-streaming-auth-token` header (and in `connected`);
//! * Exotel: a stream URL `wss://KEY:TOKEN@host/path` arrives as `Authorization: Basic
//!   base64(KEY:TOKEN)`.

use axum::http::HeaderMap;
use axum::http::header::AUTHORIZATION;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;

use crate::secret::Secret;

/// The upgrade header carrying Telnyx's `stream_auth_token`.
pub const TELNYX_TOKEN_HEADER: &str = "x-telnyx-streaming-auth-token";

/// Why an upgrade was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    #[error("no {TELNYX_TOKEN_HEADER} header")]
    Missing,
    #[error("{TELNYX_TOKEN_HEADER} does not match the configured token")]
    Mismatch,
    #[error("no Authorization: Basic header")]
    MissingBasic,
    #[error("Authorization: Basic does not match the configured KEY:TOKEN")]
    BasicMismatch,
}

/// Checks an Exotel upgrade's `Authorization: Basic` against `key_token` (`KEY:TOKEN`).
pub fn verify_basic(headers: &HeaderMap, key_token: &Secret) -> Result<(), TokenError> {
    let got = headers
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            let (scheme, rest) = v.trim().split_once(' ')?;
            scheme.eq_ignore_ascii_case("basic").then_some(rest.trim())
        })
        .ok_or(TokenError::MissingBasic)?;
    let want = STANDARD.encode(key_token.expose().as_bytes());
    if constant_time_eq(got.as_bytes(), want.as_bytes()) {
        Ok(())
    } else {
        Err(TokenError::BasicMismatch)
    }
}

/// Checks the upgrade's Telnyx streaming token against `token`.
pub fn verify_telnyx_token(headers: &HeaderMap, token: &Secret) -> Result<(), TokenError> {
    let got = headers
        .get(TELNYX_TOKEN_HEADER)
        .ok_or(TokenError::Missing)?
        .as_bytes();
    if constant_time_eq(got, token.expose().as_bytes()) {
        Ok(())
    } else {
        Err(TokenError::Mismatch)
    }
}

/// Equality whose time depends only on the lengths.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_must_be_present_and_equal() {
        let token = Secret::new("s3cret-token");
        let mut h = HeaderMap::new();
        assert_eq!(verify_telnyx_token(&h, &token), Err(TokenError::Missing));
        h.insert(TELNYX_TOKEN_HEADER, "s3cret-tokeX".parse().unwrap());
        assert_eq!(verify_telnyx_token(&h, &token), Err(TokenError::Mismatch));
        h.insert(TELNYX_TOKEN_HEADER, "s3cret".parse().unwrap());
        assert_eq!(verify_telnyx_token(&h, &token), Err(TokenError::Mismatch));
        h.insert(TELNYX_TOKEN_HEADER, "s3cret-token".parse().unwrap());
        assert_eq!(verify_telnyx_token(&h, &token), Ok(()));
    }

    #[test]
    fn basic_auth_must_carry_the_key_and_token() {
        let kt = Secret::new("KEY:TOKEN");
        let mut h = HeaderMap::new();
        assert_eq!(verify_basic(&h, &kt), Err(TokenError::MissingBasic));
        h.insert(AUTHORIZATION, "Bearer S0VZOlRPS0VO".parse().unwrap());
        assert_eq!(verify_basic(&h, &kt), Err(TokenError::MissingBasic));
        h.insert(AUTHORIZATION, "Basic S0VZOlRPS0VP".parse().unwrap());
        assert_eq!(verify_basic(&h, &kt), Err(TokenError::BasicMismatch));
        // base64("KEY:TOKEN")
        h.insert(AUTHORIZATION, "Basic S0VZOlRPS0VO".parse().unwrap());
        assert_eq!(verify_basic(&h, &kt), Ok(()));
    }
}
