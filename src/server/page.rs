//! `GET /`: the call page (`web/call.html`, plain HTML and JavaScript compiled into the binary;
//! no build step). It calls through `POST /whip`, plays the agent, and shows the live
//! transcript, the active agent and handoffs from `WS /calls/{id}/events`, then the call's
//! figures and timeline. `GET /caller.wav`: seed 000's recorded caller, also compiled in, which
//! the page can play into a call instead of the microphone.

use std::sync::Arc;

use axum::Router;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;

use super::AppState;

/// The page's source.
pub const CALL_PAGE: &str = include_str!("../../web/call.html");

/// The recorded caller the page offers (seed 000's conversation, 16 kHz mono).
pub const CALLER_WAV: &[u8] =
    include_bytes!("../../audio-fixtures/clips/seed000/caller_conversation.wav");

/// The page routes, to be merged into the server's router.
pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/", get(page))
        .route("/caller.wav", get(caller))
}

async fn caller() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "audio/wav"),
            (header::CACHE_CONTROL, "max-age=3600"),
        ],
        CALLER_WAV,
    )
}

async fn page() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        CALL_PAGE,
    )
}
