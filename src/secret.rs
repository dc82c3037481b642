//! Credentials (model API keys and tokens, the Twilio auth token) as one type whose `Debug` and
//! `Display` never show the value; only the code that puts it in a header or a MAC reads it. And
//! URLs as they may be shown, without the parts a credential can hide in.

use std::fmt;

/// `url` as logs and errors may show it: without user info, query or fragment, where a
/// credential may sit.
pub fn url_shown(url: &url::Url) -> String {
    let mut u = url.clone();
    let _ = u.set_username("");
    let _ = u.set_password(None);
    u.set_query(None);
    u.set_fragment(None);
    u.to_string()
}

/// A credential. Printing it shows `***`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(s: impl Into<String>) -> Self {
        Secret(s.into())
    }
    /// The raw value, for the one place that puts it in a header.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

/// Log directives applied after `BATON_LOG`, whatever it says: libraries that write raw wire
/// bytes at trace level would print credentials (tungstenite's client handshake logs the whole
/// upgrade request, `x-goog-api-key` and `Authorization` headers included). A directive sets its
/// target's level whatever the default, so each cap is `info`: below what would leak, and no
/// louder than the default levels (a cap at `debug` put the handshakes' debug lines into every
/// command's output). `tests/secrets_sentinel.rs` runs baton at trace and fails on any
/// credential in its output.
///
/// `rsipstack` logs every SIP message it sends or receives, raw, at `info` (Authorization
/// headers, callers' numbers): capped at `warn`. Its dialog module warns on every answer whose
/// ACK arrives before the answer's own state change (routine on loopback): capped at `error`.
pub const LOG_CAPS: &[&str] = &[
    "tungstenite::handshake=info",
    "rsipstack=warn",
    "rsipstack::dialog::dialog=error",
];
