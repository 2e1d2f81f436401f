//! The web console: three static files compiled into the binary (no build step).

use axum::http::header;
use axum::response::{Html, IntoResponse};

/// The console has buttons that approve tool calls: no other site may frame it and trick a
/// click (clickjacking).
pub async fn index() -> impl IntoResponse {
    (
        [
            (header::X_FRAME_OPTIONS, "DENY"),
            (header::CONTENT_SECURITY_POLICY, "frame-ancestors 'none'"),
        ],
        Html(include_str!("../console/index.html")),
    )
}

pub async fn script() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        include_str!("../console/console.js"),
    )
}

pub async fn style() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/css; charset=utf-8")],
        include_str!("../console/console.css"),
    )
}
