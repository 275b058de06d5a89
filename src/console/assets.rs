//! The console's stylesheet, script and icon, compiled into the binary (no build step, no
//! files to deploy) and served under `/console/assets/`.

use axum::extract::Path;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

const CSS: &str = include_str!("assets/console.css");
const JS: &str = include_str!("assets/console.js");
const ICON: &str = include_str!("assets/icon.svg");

/// `GET /console/assets/{name}`.
pub async fn serve(Path(name): Path<String>) -> Response {
    let (body, content_type) = match name.as_str() {
        "console.css" => (CSS, "text/css; charset=utf-8"),
        "console.js" => (JS, "text/javascript; charset=utf-8"),
        "icon.svg" => (ICON, "image/svg+xml"),
        _ => return super::page::ConsoleError::not_found("asset").into_response(),
    };
    (
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, content_type),
            // Short: a new binary's assets are picked up within minutes, no fingerprinting.
            (header::CACHE_CONTROL, "public, max-age=300"),
        ],
        body,
    )
        .into_response()
}
