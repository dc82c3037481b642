//! Whether a new call is taken here, and where it goes if not: the one place every leg asks.
//! A refusal says why in words a person can act on and when to try again (`Retry-After`), and is
//! counted (`baton_calls_refused_total{reason}`). Placement (see [`super::cluster::placement`])
//! picks this instance while it takes calls, else the least loaded ready instance of the
//! cluster.

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::AppState;
use super::calls::Unready;
use super::cluster::placement::Place;

/// Seconds a refused caller is told to wait.
pub const RETRY_AFTER_S: u64 = 5;

/// Where a new call goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// This instance, reached at this URL (its advertised origin, without a trailing `/`).
    Here(String),
    /// Another instance of the cluster.
    There { id: String, url: String },
    /// Nowhere now: why.
    Nowhere(String),
}

/// Why this instance takes no new call now, in words; `None` when it takes them.
pub fn refusal(app: &AppState) -> Option<(Unready, String)> {
    let u = app.calls.unready()?;
    let why = match u {
        Unready::Draining => {
            "baton is draining (shutting down or restarting): it takes no new calls; \
             try another instance or again later"
                .to_owned()
        }
        Unready::Full => format!(
            "baton is at its call limit ({} calls, limits.max_calls); try again later",
            app.calls.max()
        ),
    };
    Some((u, why))
}

/// Chooses where a new call goes.
pub fn place(app: &AppState) -> Target {
    let here = || Target::Here(app.loaded.advertise_url());
    match app.cluster.get() {
        Some(c) => match c.place() {
            Place::Here => here(),
            Place::There { id, url } => Target::There { id, url },
            Place::Nowhere => Target::Nowhere(match refusal(app) {
                Some((_, why)) => format!("{why}; no other instance is ready with room"),
                None => "no instance is ready with room".into(),
            }),
        },
        None => match refusal(app) {
            None => here(),
            Some((_, why)) => Target::Nowhere(why),
        },
    }
}

/// A refused call, before any upgrade: 503, the reason, `Retry-After`, counted by reason.
/// (A load balancer may retry it on another instance: HAProxy's `retry-on 503`.)
pub fn refuse(app: &AppState, leg: &str) -> Response {
    unavailable(&count_refusal(app, leg))
}

/// Logs and counts a refused call on `leg`; the reason, for the leg to say in its own way (an
/// AudioSocket call gets a hang-up frame).
pub fn count_refusal(app: &AppState, leg: &str) -> String {
    let (reason, why) =
        refusal(app).unwrap_or((Unready::Full, "baton is at its call limit".into()));
    tracing::warn!(leg, active = app.calls.active(), "refused a call: {why}");
    app.metrics.refused(match reason {
        Unready::Draining => "draining",
        Unready::Full => "capacity",
    });
    why
}

/// 503 with `why` and `Retry-After`.
pub fn unavailable(why: &str) -> Response {
    (
        StatusCode::SERVICE_UNAVAILABLE,
        [
            (header::RETRY_AFTER, RETRY_AFTER_S.to_string()),
            (header::CONTENT_TYPE, "text/plain; charset=utf-8".to_owned()),
        ],
        format!("{why}\n"),
    )
        .into_response()
}

/// The WebSocket origin of an http(s) URL (`https://x/p` → `wss://x/p`).
pub fn ws_url(http: &str) -> String {
    if let Some(rest) = http.strip_prefix("https://") {
        format!("wss://{rest}")
    } else if let Some(rest) = http.strip_prefix("http://") {
        format!("ws://{rest}")
    } else {
        http.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn websocket_urls_follow_the_scheme() {
        assert_eq!(
            ws_url("https://a.example.com/i/b2"),
            "wss://a.example.com/i/b2"
        );
        assert_eq!(ws_url("http://127.0.0.1:8080"), "ws://127.0.0.1:8080");
    }
}
