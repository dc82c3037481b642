//! One MCP server's session slot and state, shared by the supervisor that keeps the session open
//! and every call that goes through it: the live session ([`Conn`], swapped without locks), the
//! status `/healthz` and `check-config` report, and the bound on calls in flight.

use std::sync::Arc;

use arc_swap::{ArcSwap, ArcSwapOption};
use serde::Serialize;

use super::client::Handler;

/// Whether a server can be called now.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    /// Not tried yet: the first attempt is under way.
    Connecting,
    Connected,
    /// The last attempt failed or the session ended; retried with back-off.
    Down,
}

/// A tool the server offers that baton refuses to declare.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Refusal {
    pub server: String,
    pub tool: String,
    /// The schema keyword (or `name`) that cannot be declared.
    pub keyword: String,
    pub reason: String,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "MCP server '{}', tool '{}': refused at load: {}",
            self.server, self.tool, self.reason
        )
    }
}

/// What `/healthz` and `check-config` say about one server.
#[derive(Clone, Debug, Serialize)]
pub struct ServerStatus {
    pub name: String,
    /// URL or command line (never a credential).
    pub endpoint: String,
    pub state: State,
    /// Tools offered and declarable.
    pub tools: Vec<String>,
    pub refused: Vec<Refusal>,
    /// Why it is down, or the last reconnect's reason.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Sessions opened so far (1 while the first holds).
    pub sessions: u64,
    /// `tools/list` fetches so far.
    pub tool_lists: u64,
}

/// The live session with a server, as calls use it.
pub struct Conn {
    pub peer: rmcp::Peer<rmcp::service::RoleClient>,
    pub handler: Handler,
    /// Cancelled by a call whose request could not reach the server (its transport failed): a
    /// Streamable HTTP session notices a dead server only when it is used, so the call tells the
    /// supervisor, which marks the server down and reconnects.
    pub lost: tokio_util::sync::CancellationToken,
}

/// One server's session slot and state, shared by its supervisor and every call.
pub struct Link {
    pub(super) conn: ArcSwapOption<Conn>,
    pub(super) status: ArcSwap<ServerStatus>,
    /// Calls in flight at once on the session (HTTP: `max_concurrent`, since HTTP/1.1 carries
    /// one request per connection); more wait for a slot within their deadline.
    pub(super) slots: tokio::sync::Semaphore,
}

impl Link {
    /// The open session, if any.
    pub fn current(&self) -> Option<Arc<Conn>> {
        self.conn.load_full()
    }

    /// The state and its reason, in words.
    pub fn state_text(&self) -> String {
        let s = self.status.load();
        match (&s.state, &s.error) {
            (State::Connected, _) => "connected".into(),
            (State::Connecting, _) => "connecting".into(),
            (State::Down, Some(e)) => format!("down: {e}"),
            (State::Down, None) => "down".into(),
        }
    }

    pub(super) fn update(&self, f: impl Fn(&mut ServerStatus)) {
        self.status.rcu(|s| {
            let mut s = (**s).clone();
            f(&mut s);
            s
        });
    }
}
