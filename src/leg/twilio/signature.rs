//! `X-Twilio-Signature`: signing and validating a request the way Twilio and its official
//! libraries do. `data = url + for each param name (sorted) each distinct value (sorted): name +
//! value`; the signature is `base64(HMAC-SHA1(auth token, data))`, compared in constant time.
//!
//! Twilio is inconsistent about default ports when it signs, so a URL is accepted if the signature
//! matches it either without its port or with the scheme's default port added (`:443` for `wss`
//! and `https`, `:80` for `ws` and `http`), as twilio-python's `RequestValidator` does (which only
//! knows https/443 and otherwise 80, so a `wss` URL gets the `:443` variant here explicitly).
//!
//! The URL checked must be the **configured public URL** of the stream endpoint (the one in the
//! TwiML `<Stream url>`), never one rebuilt from `Host` or `X-Forwarded-*` headers, which the
//! client controls. The auth token lives in [`AuthToken`], which never prints its value; no error
//! here carries the token or the expected signature.

use std::collections::{BTreeMap, BTreeSet};

use axum::http::HeaderMap;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, KeyInit, Mac};
use sha1::Sha1;

/// The header Twilio signs its requests with (lower case, as `http` names headers).
pub const SIGNATURE_HEADER: &str = "x-twilio-signature";

/// A Twilio account auth token: a [`Secret`](crate::secret::Secret), so printing it shows `***`.
pub type AuthToken = crate::secret::Secret;

/// Why a request's signature was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    #[error(
        "no X-Twilio-Signature header: only Twilio, signing with the account's auth token, may \
         open a media stream here"
    )]
    Missing,
    #[error("the X-Twilio-Signature header is not readable text")]
    Unreadable,
    #[error(
        "X-Twilio-Signature does not match {url} (also tried {other}): check that the configured \
         public URL is exactly the TwiML <Stream url> and that the auth token is this account's"
    )]
    Mismatch { url: String, other: String },
}

/// `base64(HMAC-SHA1(token, url + sorted params))`: the value Twilio puts in `X-Twilio-Signature`.
/// `params` are name/value pairs; a name may repeat (every distinct value counts once).
pub fn sign(url: &str, params: &[(&str, &str)], token: &AuthToken) -> String {
    let mut sorted: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for (name, value) in params {
        sorted.entry(name).or_default().insert(value);
    }
    // HMAC takes a key of any length.
    let mut mac = <Hmac<Sha1> as KeyInit>::new_from_slice(token.expose().as_bytes())
        .unwrap_or_else(|_| unreachable!("HMAC accepts keys of any length"));
    mac.update(url.as_bytes());
    for (name, values) in &sorted {
        for value in values {
            mac.update(name.as_bytes());
            mac.update(value.as_bytes());
        }
    }
    STANDARD.encode(mac.finalize().into_bytes())
}

/// Checks `signature` against `url` without its port and with the scheme's default port.
pub fn validate(
    url: &str,
    params: &[(&str, &str)],
    signature: &str,
    token: &AuthToken,
) -> Result<(), SignatureError> {
    let without = url_without_port(url);
    let with = url_with_default_port(url);
    let ok_without = constant_time_eq(
        sign(&without, params, token).as_bytes(),
        signature.as_bytes(),
    );
    let ok_with = constant_time_eq(sign(&with, params, token).as_bytes(), signature.as_bytes());
    if ok_without | ok_with {
        Ok(())
    } else {
        Err(SignatureError::Mismatch {
            url: without,
            other: with,
        })
    }
}

/// Validates the `X-Twilio-Signature` of a WebSocket upgrade request against the configured public
/// `wss://` URL of the stream endpoint. A WebSocket upgrade carries no form parameters.
pub fn verify_upgrade(
    headers: &HeaderMap,
    public_url: &str,
    token: &AuthToken,
) -> Result<(), SignatureError> {
    let value = headers
        .get(SIGNATURE_HEADER)
        .ok_or(SignatureError::Missing)?;
    let signature = value.to_str().map_err(|_| SignatureError::Unreadable)?;
    validate(public_url, &[], signature, token)
}

/// Equal lengths and equal bytes, without an early exit on the first difference.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

/// The parts of `scheme://netloc/rest` around the port, if the URL has an authority.
struct Authority<'a> {
    /// Up to and including the host.
    head: &'a str,
    /// The port digits, if any.
    port: Option<&'a str>,
    /// Path, query and fragment.
    tail: &'a str,
    scheme: &'a str,
}

fn split_authority(url: &str) -> Option<Authority<'_>> {
    let (scheme, after) = url.split_once("://")?;
    let netloc_len = after.find(['/', '?', '#']).unwrap_or(after.len());
    let netloc = &after[..netloc_len];
    let host_start = netloc.rfind('@').map_or(0, |i| i + 1);
    let host_port = &netloc[host_start..];
    // An IPv6 literal's colons are inside brackets.
    let search_from = host_port.rfind(']').unwrap_or(0);
    let head_len = scheme.len() + 3 + host_start;
    let (host_len, port) = match host_port[search_from..].rfind(':') {
        Some(i) => {
            let at = search_from + i;
            let digits = &host_port[at + 1..];
            if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
                (at, Some(digits))
            } else {
                (at, None)
            }
        }
        None => (host_port.len(), None),
    };
    Some(Authority {
        head: &url[..head_len + host_len],
        port,
        tail: &after[netloc_len..],
        scheme,
    })
}

/// The URL with any port removed.
pub fn url_without_port(url: &str) -> String {
    match split_authority(url) {
        Some(a) if a.port.is_some() => format!("{}{}", a.head, a.tail),
        _ => url.to_owned(),
    }
}

/// The URL with the scheme's default port added when it has none (443 for wss/https, else 80).
pub fn url_with_default_port(url: &str) -> String {
    match split_authority(url) {
        Some(a) if a.port.is_none() => {
            let port = match a.scheme.to_ascii_lowercase().as_str() {
                "https" | "wss" => 443,
                _ => 80,
            };
            format!("{}:{port}{}", a.head, a.tail)
        }
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn port_variants() {
        let u = "wss://baton.example.com/twilio/media";
        assert_eq!(url_without_port(u), u);
        assert_eq!(
            url_with_default_port(u),
            "wss://baton.example.com:443/twilio/media"
        );
        let p = "wss://baton.example.com:8443/a?b=c";
        assert_eq!(url_without_port(p), "wss://baton.example.com/a?b=c");
        assert_eq!(url_with_default_port(p), p);
        assert_eq!(url_with_default_port("http://h"), "http://h:80");
        assert_eq!(url_without_port("wss://[::1]:9/x"), "wss://[::1]/x");
        assert_eq!(url_with_default_port("wss://[::1]/x"), "wss://[::1]:443/x");
        assert_eq!(url_without_port("not a url"), "not a url");
    }

    #[test]
    fn token_never_prints() {
        let t = AuthToken::new("s3cr3t");
        assert!(!format!("{t:?} {t}").contains("s3cr3t"));
    }

    #[test]
    fn constant_time_eq_basics() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"ab"));
    }
}
