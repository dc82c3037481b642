//! What every model session shares with the call, whatever its protocol: where the WebSocket
//! runs ([`Transport`]), what the call hands a session's writer task ([`Outbound`]) and what a
//! session reports back ([`SessionEvent`]).

use std::time::Duration;

use tokio::time::Instant;

use crate::model::ModelEvent;

/// Where the WebSocket runs.
pub enum Transport {
    /// TCP (+TLS for `wss://`) to the endpoint's host.
    Network,
    /// An in-memory stream carrying the same WebSocket frames (accelerated runs with the mock).
    InMemory(tokio::io::DuplexStream),
}

/// Something the session reports to the call.
#[derive(Debug)]
pub enum SessionEvent {
    /// A model event and when its frame arrived.
    Model(ModelEvent, Instant),
    /// A caller frame received at `received_at` was written to the socket at `written_at`.
    Written {
        received_at: Instant,
        written_at: Instant,
    },
    /// The connection ended. `code` is absent when there was no close frame (1006).
    Closed { code: Option<u16>, reason: String },
    /// Nothing at all arrived for `silent_for` although pings were sent: the socket is dead and
    /// has been abandoned (handled like a drop).
    Dead { silent_for: Duration },
}

/// What the call hands the writer task.
#[derive(Debug)]
pub enum Outbound {
    /// A ready JSON text; `received_at` is set for caller audio, to measure `uplink_added_ms`.
    Text {
        json: String,
        received_at: Option<Instant>,
    },
    /// Close the socket normally.
    Close,
    /// A WebSocket ping (sent by the keepalive).
    Ping,
}
