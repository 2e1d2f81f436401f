//! Who may talk to the daemon. On a loopback bind without a token, any local program may
//! (like a local database), but web pages may not: a request from a browser page of another
//! origin is refused, and so is a Host header other than a loopback name, which closes DNS
//! rebinding. Any other bind requires `Authorization: Bearer <token>`. CORS is off unless
//! origins are configured.

use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

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
            let ok = presented.is_some_and(|t| same(t.as_bytes(), token.as_bytes()));
            if !ok && !public(req.uri().path()) && req.method() != Method::OPTIONS {
                return ApiError::new(
                    StatusCode::UNAUTHORIZED,
                    "unauthorized",
                    "send `Authorization: Bearer <token>`; the token is in daemon-token in the daemon's data directory (printed when it was created)",
                )
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
