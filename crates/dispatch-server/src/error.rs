//! One error shape for every endpoint: an HTTP status and
//! `{"error": {"code": "<stable code>", "message": "<what to do>"}}`.
//!
//! An internal error (a store that failed, a round's task that died) never shows its text to
//! the client: that text can name files, SQL or another session's data. The daemon's log
//! (stderr) gets it under a fresh id, and the body carries only the id:
//! `{"error": {"code": "internal", "id": "err-…", "message": "… see the daemon's log for err-…"}}`.

use axum::Json;
use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    /// Stable: clients match on it.
    pub code: &'static str,
    pub message: String,
    /// Set for `internal` errors: the id under which the daemon's log has the full text.
    pub id: Option<String>,
}

impl ApiError {
    /// An error with `code` and `message`. An `internal` one is logged here, under a fresh
    /// id, and its message becomes a pointer to that log line: whatever reads the error
    /// later (the response, an SSE event, an MCP client) never sees the internal text.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        let message = message.into();
        if code == "internal" {
            let id = log_internal(&message);
            return ApiError {
                status,
                code,
                message: format!(
                    "the daemon failed to answer this request (an internal error, not a problem with the request); see the daemon's log for {id}, and retry once the cause is fixed"
                ),
                id: Some(id),
            };
        }
        ApiError {
            status,
            code,
            message,
            id: None,
        }
    }

    pub fn bad_request(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, code, message)
    }

    pub fn not_found(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, code, message)
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", message)
    }

    pub fn shutting_down() -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "shutting_down",
            "the daemon is shutting down and takes no new rounds; retry against the restarted daemon",
        )
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = match &self.id {
            Some(id) => json!({"error": {"code": self.code, "id": id, "message": self.message}}),
            None => json!({"error": {"code": self.code, "message": self.message}}),
        };
        (self.status, Json(body)).into_response()
    }
}

/// A fresh id for one internal error: `err-` and 12 hex digits.
pub fn error_id() -> String {
    use std::io::Read;
    let mut bytes = [0u8; 6];
    let random = std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut bytes));
    if random.is_err() {
        // Unique within this process is all the id needs (it is matched against this log).
        static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mixed = crate::hub::now_ms() ^ n.rotate_left(40);
        bytes.copy_from_slice(&mixed.to_be_bytes()[2..]);
    }
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("err-{hex}")
}

/// Write an internal error's full text to the daemon's log (stderr) under a fresh id, and
/// return the id for the client.
pub fn log_internal(text: &str) -> String {
    let id = error_id();
    eprintln!("tooldispatch: {id}: {text}");
    id
}

impl From<JsonRejection> for ApiError {
    fn from(rejection: JsonRejection) -> Self {
        match rejection {
            JsonRejection::MissingJsonContentType(_) => ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                "send the body as JSON with the header `Content-Type: application/json`",
            ),
            JsonRejection::BytesRejection(e) if e.status() == StatusCode::PAYLOAD_TOO_LARGE => {
                too_large()
            }
            other => ApiError::bad_request(
                "bad_json",
                format!(
                    "the request body is not the JSON this endpoint takes: {}",
                    other.body_text()
                ),
            ),
        }
    }
}

impl From<QueryRejection> for ApiError {
    fn from(rejection: QueryRejection) -> Self {
        ApiError::bad_request(
            "bad_request",
            format!("bad query string: {}", rejection.body_text()),
        )
    }
}

pub fn too_large() -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "payload_too_large",
        format!(
            "the request body is larger than {} MiB; send smaller tool arguments (large content belongs in files the tools read)",
            crate::BODY_LIMIT / (1024 * 1024)
        ),
    )
}

/// Most bytes of a framework error's own text kept in the message.
const FRAMEWORK_TEXT: usize = 512;

/// Gives every error the API's one shape, also those answered before a handler runs: a wrong
/// method (405, its `Allow` header kept), a path segment that is not UTF-8, a body over the
/// limit. A response that is already JSON, or not an error, passes unchanged.
pub async fn json_errors(response: Response) -> Response {
    let status = response.status();
    if !(status.is_client_error() || status.is_server_error()) {
        return response;
    }
    let is_json = response
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if is_json {
        return response;
    }
    let (parts, body) = response.into_parts();
    let text = axum::body::to_bytes(body, FRAMEWORK_TEXT * 4)
        .await
        .map(|b| String::from_utf8_lossy(&b).trim().to_string())
        .unwrap_or_default();
    let mut said: String = text.chars().take(FRAMEWORK_TEXT).collect();
    if said.is_empty() {
        said = status.canonical_reason().unwrap_or("error").to_lowercase();
    }
    let error = match status {
        StatusCode::METHOD_NOT_ALLOWED => ApiError::new(
            status,
            "method_not_allowed",
            "this endpoint does not take that method; the README's HTTP API section lists each endpoint's method",
        ),
        StatusCode::PAYLOAD_TOO_LARGE => too_large(),
        StatusCode::NOT_FOUND => ApiError::not_found("not_found", said),
        StatusCode::BAD_REQUEST => {
            ApiError::bad_request("bad_request", format!("the request cannot be read: {said}"))
        }
        _ if status.is_server_error() => ApiError::new(status, "internal", said),
        _ => ApiError::new(status, "bad_request", said),
    };
    let mut shaped = error.into_response();
    if let Some(allow) = parts.headers.get(axum::http::header::ALLOW) {
        shaped
            .headers_mut()
            .insert(axum::http::header::ALLOW, allow.clone());
    }
    shaped
}
