//! Telnyx's streaming token: the `stream_auth_token` given when the stream was set up comes back
//! in the `x-telnyx-streaming-auth-token` header of the WebSocket upgrade (and in `connected`).
//! Checked on the upgrade, before any message is read, in constant time.

use axum::http::HeaderMap;

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
}
