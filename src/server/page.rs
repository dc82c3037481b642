//! `GET /`: the call page (`web/call.html`, plain HTML and JavaScript compiled into the binary;
//! no build step). It calls through `POST /whip`, plays the agent, and shows the live
//! transcript, the active agent and handoffs from `WS /calls/{id}/events`.

use std::sync::Arc;

use axum::Router;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;

use super::AppState;

/// The page's source.
pub const CALL_PAGE: &str = include_str!("../../web/call.html");

/// The page route, to be merged into the server's router.
pub fn routes() -> Router<Arc<AppState>> {
    Router::new().route("/", get(page))
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
