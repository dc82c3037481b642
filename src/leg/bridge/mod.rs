//! Telephony bridges that stream a call over a WebSocket — Twilio Media Streams, Telnyx, Plivo,
//! Exotel and Vonage — spoken by one leg: a [`Dialect`] says how messages look, and everything
//! else is shared.
//!
//! Layers, each owning one thing:
//! * [`audio`]: the payload encodings (μ-law, A-law, L16 either byte order) at 8/16/24 kHz;
//! * [`wire`]: each dialect's messages read into one vocabulary ([`wire::Inbound`]) and baton's
//!   ([`wire::Transmit`]) written in the dialect's shapes, text or binary;
//! * [`detect`]: which dialect a socket speaks, from its first messages;
//! * [`reorder`]: putting out-of-order media back in order (Telnyx does not promise order);
//! * [`stream`]: [`MediaStream`], the sans-IO core of one stream (re-framing, gaps, marks and
//!   their acknowledgements, clear, batching where a bridge wants larger chunks);
//! * [`server`]: the async shell over an axum WebSocket that hands the call a `LegHandle`;
//! * [`caller`]: a client that behaves like any of the bridges, for tests, `baton dial` and load.
//!
//! The Twilio leg (`leg::twilio`) is this leg with [`Dialect::Twilio`] fixed, plus Twilio's own
//! typed wire parser and signature check.

pub mod audio;
pub mod auth;
pub mod caller;
pub mod detect;
pub mod reorder;
pub mod server;
pub mod stream;
pub mod wire;

use std::fmt;
use std::str::FromStr;

pub use audio::{AudioFormat, Encoding};
pub use stream::{EndReason, MediaStream, StartInfo, StreamError, StreamOptions, StreamStats};

/// A telephony bridge's WebSocket protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Dialect {
    Twilio,
    Telnyx,
    Plivo,
    Exotel,
    Vonage,
}

impl Dialect {
    pub const ALL: [Dialect; 5] = [
        Dialect::Twilio,
        Dialect::Telnyx,
        Dialect::Plivo,
        Dialect::Exotel,
        Dialect::Vonage,
    ];

    /// Lower-case name: `twilio`, `telnyx`, ...; also the route's path segment.
    pub fn name(self) -> &'static str {
        match self {
            Dialect::Twilio => "twilio",
            Dialect::Telnyx => "telnyx",
            Dialect::Plivo => "plivo",
            Dialect::Exotel => "exotel",
            Dialect::Vonage => "vonage",
        }
    }

    /// The bridge's name as people write it.
    pub fn label(self) -> &'static str {
        match self {
            Dialect::Twilio => "Twilio",
            Dialect::Telnyx => "Telnyx",
            Dialect::Plivo => "Plivo",
            Dialect::Exotel => "Exotel",
            Dialect::Vonage => "Vonage",
        }
    }

    /// The route baton serves this dialect on.
    pub fn path(self) -> &'static str {
        match self {
            Dialect::Twilio => "/twilio",
            Dialect::Telnyx => "/telnyx",
            Dialect::Plivo => "/plivo",
            Dialect::Exotel => "/exotel",
            Dialect::Vonage => "/vonage",
        }
    }

    /// Caller audio arrives in binary messages (Vonage) rather than base64 in JSON.
    pub fn binary_audio(self) -> bool {
        self == Dialect::Vonage
    }

    /// Media may arrive out of order and is put back in order by `media.chunk` (Telnyx).
    pub fn reorders(self) -> bool {
        self == Dialect::Telnyx
    }

    /// `media.timestamp` is wall-clock epoch ms, not ms since the stream started (Plivo).
    pub fn epoch_timestamps(self) -> bool {
        self == Dialect::Plivo
    }

    /// 20 ms frames per outbound media message: Exotel wants chunks of 100 ms or more in
    /// multiples of 320 bytes; the others take (Vonage requires) one frame per message.
    pub fn frames_per_message(self) -> usize {
        if self == Dialect::Exotel { 5 } else { 1 }
    }
}

impl fmt::Display for Dialect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

impl FromStr for Dialect {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Dialect::ALL
            .into_iter()
            .find(|d| d.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| {
                format!(
                    "unknown telephony dialect {s:?}: use twilio, telnyx, plivo, exotel or vonage"
                )
            })
    }
}

/// Which dialect a stream is read in: fixed by its route, or detected from its first messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DialectChoice {
    Fixed(Dialect),
    Detect,
}
