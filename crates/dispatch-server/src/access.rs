//! Who may talk to the daemon. On a loopback bind without a token, any local program may
//! (like a local database), but web pages may not: a request from a browser page of another
//! origin is refused, and so is a Host header other than a loopback name, which closes DNS
//! rebinding. Any other bind requires `Authorization: Bearer <token>`, and so does a loopback
//! one with `serve --require-token` (then other local users are kept out too). CORS is off
//! unless origins are configured.
//!
//! With a token the web console logs in once: the daemon prints a link with a one-time code
//! (`http://127.0.0.1:7878/#login=<code>`), the console posts the code to
//! `/v1/console/login`, and gets an HttpOnly, SameSite=Strict cookie that stands for the token
//! in that browser until the daemon restarts.

use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::{Arc, Mutex};

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::ApiError;

/// The rules the middleware applies.
#[derive(Clone, Debug, Default)]
pub struct Access {
    /// Required as a bearer token when set.
    pub token: Option<String>,
    /// Origins whose pages may call the API (CORS); empty: none but the console's own.
    pub cors_origins: Vec<String>,
    /// The console's one-time login, when a token is required.
    pub console: Option<Arc<ConsoleLogin>>,
}

/// The cookie the console's login sets.
pub const CONSOLE_COOKIE: &str = "tooldispatch_console";

/// The most bytes of a login request's body read.
const LOGIN_BODY: usize = 4096;

/// A one-time code a browser trades for the console's cookie, and the cookie's value. Both
/// are random and live as long as the daemon runs.
#[derive(Debug)]
pub struct ConsoleLogin {
    code: Mutex<Option<String>>,
    cookie: String,
}

impl ConsoleLogin {
    pub fn new() -> std::io::Result<ConsoleLogin> {
        Ok(ConsoleLogin {
            code: Mutex::new(Some(random_hex(16)?)),
            cookie: random_hex(32)?,
        })
    }

    /// The one-time code, until a browser has used it.
    pub fn code(&self) -> Option<String> {
        crate::hub::lock(&self.code).clone()
    }

    /// Use the code: true once, for the right one.
    fn redeem(&self, presented: &str) -> bool {
        let mut code = crate::hub::lock(&self.code);
        let ok = code
            .as_deref()
            .is_some_and(|c| same(c.as_bytes(), presented.as_bytes()));
        if ok {
            *code = None;
        }
        ok
    }

    fn admits(&self, headers: &HeaderMap) -> bool {
        headers
            .get_all(header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(';'))
            .filter_map(|pair| pair.trim().split_once('='))
            .any(|(name, value)| {
                name == CONSOLE_COOKIE && same(value.as_bytes(), self.cookie.as_bytes())
            })
    }
}

/// `bytes` random bytes from the kernel, as hex.
fn random_hex(bytes: usize) -> std::io::Result<String> {
    let mut buf = vec![0u8; bytes];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut buf)?;
    Ok(buf.iter().map(|b| format!("{b:02x}")).collect())
}

/// `POST /v1/console/login` with `{"code": "<one-time code>"}`: the console's cookie.
async fn console_login(access: &Access, req: Request) -> Response {
    let Some(login) = &access.console else {
        return ApiError::not_found(
            "no_login",
            "this daemon requires no token, so the console needs no login; open it at /",
        )
        .into_response();
    };
    if req.method() != Method::POST {
        return ApiError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
            "POST {\"code\": \"<the code of the login link>\"} to this endpoint",
        )
        .into_response();
    }
    let body = axum::body::to_bytes(req.into_body(), LOGIN_BODY)
        .await
        .unwrap_or_default();
    let code = serde_json::from_slice::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| v.get("code").and_then(|c| c.as_str()).map(str::to_string));
    if !code.is_some_and(|c| login.redeem(&c)) {
        return ApiError::new(
            StatusCode::UNAUTHORIZED,
            "login_refused",
            "this login link was used already, or is not this daemon's; a login link works once: restart the daemon for a new one, or send `Authorization: Bearer <token>` (the token is in daemon-token in the daemon's data directory)",
        )
        .into_response();
    }
    let cookie = format!(
        "{CONSOLE_COOKIE}={}; Path=/; HttpOnly; SameSite=Strict",
        login.cookie
    );
    let mut response = axum::Json(serde_json::json!({"logged_in": true})).into_response();
    if let Ok(value) = HeaderValue::from_str(&cookie) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    response
}

/// The token file beside the store: read it, or create it (mode 0600 from the first byte).
/// Returns the token and whether it was created now (then the caller prints it, once).
pub fn load_or_create_token(path: &Path) -> std::io::Result<(String, bool)> {
    use std::io::ErrorKind;
    use std::os::unix::fs::PermissionsExt;
    let read = |file: std::fs::File| -> std::io::Result<String> {
        let mode = file.metadata()?.permissions().mode();
        if mode & 0o077 != 0 {
            return Err(std::io::Error::other(format!(
                "{} can be read by other users (mode {:o}); run `chmod 600` on it, or delete it to have a new token generated",
                path.display(),
                mode & 0o777
            )));
        }
        let mut token = String::new();
        { file }.read_to_string(&mut token)?;
        let token = token.trim().to_string();
        if token.len() < 32 {
            return Err(std::io::Error::other(format!(
                "{} holds no usable token (expected 64 hex characters); delete it to have a new one generated",
                path.display()
            )));
        }
        Ok(token)
    };
    match std::fs::File::open(path) {
        Ok(file) => return read(file).map(|t| (t, false)),
        Err(e) if e.kind() != ErrorKind::NotFound => return Err(e),
        Err(_) => {}
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    let token: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let created = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path);
    let mut file = match created {
        Ok(file) => file,
        // Another daemon created it a moment ago: use that one.
        Err(e) if e.kind() == ErrorKind::AlreadyExists => {
            return read(std::fs::File::open(path)?).map(|t| (t, false));
        }
        Err(e) => return Err(e),
    };
    file.write_all(token.as_bytes())?;
    file.sync_all()?;
    Ok((token, true))
}

/// Whether `host` (a Host header: name or address, maybe with a port) names this machine's
/// loopback interface.
fn loopback_host(host: &str) -> bool {
    let name = if let Some(rest) = host.strip_prefix('[') {
        rest.split(']').next().unwrap_or("")
    } else {
        host.rsplit_once(':').map_or(host, |(name, _)| name)
    };
    name.eq_ignore_ascii_case("localhost")
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// Constant-time comparison: how much of a guessed token matched must not show in the timing.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn presented_token<'a>(headers: &'a HeaderMap, query: Option<&'a str>) -> Option<&'a str> {
    if let Some(value) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
    {
        return value.strip_prefix("Bearer ").map(str::trim);
    }
    // EventSource cannot send headers: the event streams also take `?access_token=`.
    query?
        .split('&')
        .find_map(|pair| pair.strip_prefix("access_token="))
}

/// The console's static files: no data in them, so no token is needed to load them.
fn public(path: &str) -> bool {
    matches!(path, "/" | "/console.js" | "/console.css")
}

pub async fn guard(
    State(access): State<std::sync::Arc<Access>>,
    req: Request,
    next: Next,
) -> Response {
    let headers = req.headers();
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("");
    let origin = headers
        .get(header::ORIGIN)
        .and_then(|o| o.to_str().ok())
        .map(str::to_string);
    let cors_allowed = origin
        .as_deref()
        .is_some_and(|o| access.cors_origins.iter().any(|allowed| allowed == o));
    // Browsers say where a request comes from even when they send no Origin (an <iframe> or
    // <img> of an API URL): only the console itself, or a typed address, may open a stream
    // and make a session look watched.
    let fetched_from_elsewhere = headers
        .get("sec-fetch-site")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|site| !matches!(site, "same-origin" | "none"));
    if fetched_from_elsewhere && !cors_allowed {
        return ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden_origin",
            "requests from other web sites are refused; add the site to [server] cors_origins in the config file to allow it",
        )
        .into_response();
    }
    if let Some(origin) = &origin {
        let same_origin = origin
            .strip_prefix("http://")
            .or_else(|| origin.strip_prefix("https://"))
            .is_some_and(|o| o.eq_ignore_ascii_case(host));
        if !same_origin && !cors_allowed {
            return ApiError::new(
                StatusCode::FORBIDDEN,
                "forbidden_origin",
                format!(
                    "requests from web pages of {origin} are refused; add the origin to [server] cors_origins in the config file to allow it"
                ),
            )
            .into_response();
        }
    }
    if req.uri().path() == "/v1/console/login" {
        return console_login(&access, req).await;
    }
    match &access.token {
        None => {
            if !loopback_host(host) {
                return ApiError::new(
                    StatusCode::FORBIDDEN,
                    "forbidden_host",
                    "this daemon answers only to a loopback Host (127.0.0.1, [::1], localhost); address it by one of those",
                )
                .into_response();
            }
        }
        Some(token) => {
            let is_events = req.method() == Method::GET && req.uri().path().ends_with("/events");
            let query = if is_events { req.uri().query() } else { None };
            let presented = presented_token(headers, query);
            let ok = presented.is_some_and(|t| same(t.as_bytes(), token.as_bytes()))
                || access.console.as_ref().is_some_and(|c| c.admits(headers));
            if !ok && !public(req.uri().path()) && req.method() != Method::OPTIONS {
                let message = if access.console.is_some() {
                    "send `Authorization: Bearer <token>`; the token is in daemon-token in the daemon's data directory (its path is printed when the daemon starts). In a browser, open the one-time login link the daemon printed when it started"
                } else {
                    "send `Authorization: Bearer <token>`; the token is in daemon-token in the daemon's data directory (printed when it was created)"
                };
                return ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", message)
                    .into_response();
            }
        }
    }
    if cors_allowed && req.method() == Method::OPTIONS {
        let mut response = StatusCode::NO_CONTENT.into_response();
        cors_headers(response.headers_mut(), origin.as_deref());
        let h = response.headers_mut();
        h.insert(
            header::ACCESS_CONTROL_ALLOW_METHODS,
            // DELETE ends an MCP session on /mcp.
            HeaderValue::from_static("GET, POST, DELETE"),
        );
        h.insert(
            header::ACCESS_CONTROL_ALLOW_HEADERS,
            HeaderValue::from_static(
                "authorization, content-type, last-event-id, mcp-session-id, mcp-protocol-version",
            ),
        );
        h.insert(
            header::ACCESS_CONTROL_MAX_AGE,
            HeaderValue::from_static("600"),
        );
        return response;
    }
    let mut response = next.run(req).await;
    if cors_allowed {
        cors_headers(response.headers_mut(), origin.as_deref());
    }
    response
}

fn cors_headers(headers: &mut HeaderMap, origin: Option<&str>) {
    if let Some(value) = origin.and_then(|o| HeaderValue::from_str(o).ok()) {
        headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, value);
        headers.insert(header::VARY, HeaderValue::from_static("origin"));
        headers.insert(
            header::ACCESS_CONTROL_EXPOSE_HEADERS,
            // The last one is the MCP session on /mcp, which a browser client must read back.
            HeaderValue::from_static(
                "x-tooldispatch-round, x-tooldispatch-pending, mcp-session-id",
            ),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_hosts_are_recognised_and_others_are_not() {
        for host in [
            "127.0.0.1:7878",
            "localhost:7878",
            "LOCALHOST",
            "[::1]:7878",
            "127.0.0.2:1",
        ] {
            assert!(loopback_host(host), "{host}");
        }
        for host in [
            "evil.example:7878",
            "10.0.0.1:7878",
            "",
            "[::2]:80",
            "localhost.evil.example",
        ] {
            assert!(!loopback_host(host), "{host}");
        }
    }

    #[test]
    fn token_file_is_private_and_stable() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/daemon-token");
        let (token, created) = load_or_create_token(&path).unwrap();
        assert!(created);
        assert_eq!(token.len(), 64);
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let (again, created) = load_or_create_token(&path).unwrap();
        assert!(!created);
        assert_eq!(again, token);
        // A token others can read is no secret: refused, with what to do.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let err = load_or_create_token(&path).unwrap_err().to_string();
        assert!(err.contains("chmod 600"), "{err}");
    }
}
