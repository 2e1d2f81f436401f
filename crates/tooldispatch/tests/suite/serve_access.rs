//! `tooldispatch serve` kept to its user, and quiet about its insides (issue 18): a store
//! failure is a 500 whose body has an id and none of the store's text (the daemon's log has
//! it), `--require-token` on loopback with the console's one-time login, and `--unix PATH`.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use super::support::*;

/// `err-` and 12 hex digits.
fn is_error_id(id: &str) -> bool {
    id.strip_prefix("err-")
        .is_some_and(|hex| hex.len() == 12 && hex.chars().all(|c| c.is_ascii_hexdigit()))
}

#[test]
fn a_store_failure_is_a_500_with_an_id_and_its_text_goes_only_to_the_daemons_log() {
    let td = Td::new();
    let daemon = td.serve("127.0.0.1:0", &[], &[]);
    let resp = daemon.post("/v1/sessions/s/rounds", &calculate_reply("c1"));
    assert_eq!(resp.status, 200, "{}\n{}", resp.body, daemon.stderr());

    // The store breaks under the running daemon: another connection moves the events table.
    let conn = rusqlite::Connection::open(td.store_path()).unwrap();
    conn.busy_timeout(Duration::from_secs(20)).unwrap();
    conn.execute_batch("ALTER TABLE event_log RENAME TO event_log_moved")
        .unwrap();

    let resp = daemon.get("/v1/sessions/s/events");
    resp.assert_error(500, "internal", &daemon.stderr());
    let body = resp.json();
    let id = body["error"]["id"].as_str().unwrap_or_default().to_string();
    assert!(is_error_id(&id), "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains(&format!("see the daemon's log for {id}")),
        "{message}"
    );
    // Nothing of the store's own text reaches the client: no table, no SQL error, no path.
    for leak in [
        "event_log",
        "no such table",
        "store",
        td.store_path().to_str().unwrap(),
    ] {
        assert!(!resp.body.contains(leak), "{leak:?} leaked: {}", resp.body);
    }
    // The daemon's log has it, under the id the client got.
    daemon.wait_stderr(&id);
    let stderr = daemon.stderr();
    let line = stderr.lines().find(|l| l.contains(&id)).unwrap();
    assert!(
        line.contains("no such table: event_log") && line.starts_with("tooldispatch: err-"),
        "{line}"
    );
    // Each failure gets an id of its own.
    let again = daemon.get("/v1/sessions/s/events").json();
    assert_ne!(again["error"]["id"], json!(id), "{again}");
}

/// The one-time code of the login link the daemon printed.
fn login_code(stderr: &str) -> String {
    let at = stderr
        .find("#login=")
        .unwrap_or_else(|| panic!("no login link printed: {stderr}"));
    stderr[at + "#login=".len()..]
        .chars()
        .take_while(char::is_ascii_hexdigit)
        .collect()
}

#[test]
fn require_token_keeps_loopback_clients_out_and_the_console_logs_in_once() {
    let td = Td::new();
    let daemon = td.serve("127.0.0.1:0", &["--require-token"], &[]);
    daemon.wait_stderr("#login=");
    let path = td.data_dir().join("tooldispatch/daemon-token");
    let stderr = daemon.stderr();
    assert!(stderr.contains(path.to_str().unwrap()), "{stderr}");
    let mode = std::fs::metadata(&path).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    let token = std::fs::read_to_string(&path).unwrap().trim().to_string();

    // On loopback, and still no entry without the token; the refusal says how to get it.
    let resp = daemon.get("/v1/sessions");
    resp.assert_error(401, "unauthorized", &stderr);
    let message = resp.json()["error"]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        message.contains("daemon-token") && message.contains("login link"),
        "{message}"
    );
    let bearer = format!("Bearer {token}");
    let resp = daemon.call("GET", "/v1/sessions", &[("Authorization", &bearer)], None);
    resp.json_ok(&stderr);
    // The console's page itself holds no data and loads without it.
    assert_eq!(daemon.get("/").status, 200);

    let login = |code: &str| {
        daemon.call(
            "POST",
            "/v1/console/login",
            &[("Content-Type", "application/json")],
            Some(&json!({"code": code}).to_string()),
        )
    };
    let code = login_code(&stderr);
    assert_eq!(code.len(), 32, "{stderr}");
    login("0123456789abcdef0123456789abcdef").assert_error(401, "login_refused", &stderr);
    let resp = login(&code);
    assert_eq!(resp.status, 200, "{}", resp.body);
    let set_cookie = resp.header("set-cookie").unwrap().to_string();
    for part in [
        "tooldispatch_console=",
        "HttpOnly",
        "SameSite=Strict",
        "Path=/",
    ] {
        assert!(set_cookie.contains(part), "{set_cookie}");
    }
    let cookie = set_cookie.split(';').next().unwrap().to_string();
    // The cookie stands for the token, in this browser.
    let resp = daemon.call("GET", "/v1/sessions", &[("Cookie", &cookie)], None);
    resp.json_ok(&stderr);
    let last = if cookie.ends_with('0') { '1' } else { '0' };
    let forged = format!("{}{last}", &cookie[..cookie.len() - 1]);
    let resp = daemon.call("GET", "/v1/sessions", &[("Cookie", &forged)], None);
    resp.assert_error(401, "unauthorized", &stderr);
    // The link works once.
    login(&code).assert_error(401, "login_refused", &stderr);
}

/// A daemon on a Unix socket; killed (SIGKILL) and reaped on drop.
struct UnixDaemon {
    child: Child,
    stderr: PathBuf,
}

impl UnixDaemon {
    fn start(td: &Td, socket: &Path, n: usize) -> (UnixDaemon, String) {
        let stderr = td.data_dir().join(format!("unix-{n}.stderr"));
        let mut child = td
            .std_command()
            .arg("serve")
            .arg("--unix")
            .arg(socket)
            .arg("--store")
            .arg(format!("sqlite:{}", td.store_path().display()))
            .arg("--workdir")
            .arg(td.workdir())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .spawn()
            .unwrap();
        let mut first = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut first)
            .unwrap();
        (UnixDaemon { child, stderr }, first.trim_end().to_string())
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    fn wait(&mut self) -> std::process::ExitStatus {
        let deadline = std::time::Instant::now() + WAIT;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(std::time::Instant::now() < deadline, "{}", self.stderr());
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for UnixDaemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One HTTP/1.1 request over the socket; the status and the body (the daemon answers these
/// with a Content-Length body).
fn unix_request(socket: &Path, method: &str, path: &str, body: Option<&str>) -> (u16, Value) {
    let mut stream = UnixStream::connect(socket).unwrap();
    stream.set_read_timeout(Some(WAIT)).unwrap();
    let body = body.unwrap_or("");
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut text = String::new();
    stream.read_to_string(&mut text).unwrap();
    let status = text.split_whitespace().nth(1).unwrap().parse().unwrap();
    let (_, body) = text.split_once("\r\n\r\n").unwrap();
    (status, serde_json::from_str(body).unwrap_or(Value::Null))
}

#[test]
fn a_unix_socket_serves_the_api_to_its_user_only_and_replaces_only_a_stale_socket() {
    let td = Td::new();
    let socket = td.data_dir().join("daemon.sock");
    let (mut first, line) = UnixDaemon::start(&td, &socket, 1);
    assert_eq!(
        line,
        format!("listening on unix:{}", socket.display()),
        "{}",
        first.stderr()
    );
    let meta = std::fs::symlink_metadata(&socket).unwrap();
    assert!(meta.file_type().is_socket());
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);

    // A real client over the socket: the API answers as on TCP.
    assert_eq!(
        unix_request(&socket, "GET", "/v1/health", None),
        (200, json!({"status": "ok"}))
    );
    let (status, body) = unix_request(&socket, "POST", "/v1/sessions", Some(r#"{"id":"u1"}"#));
    assert_eq!(status, 201, "{body}");
    let (status, body) = unix_request(&socket, "GET", "/v1/sessions", None);
    assert_eq!(status, 200);
    assert_eq!(body["sessions"][0]["id"], "u1", "{body}");

    // A second daemon does not take a live socket over.
    let (mut second, line) = UnixDaemon::start(&td, &socket, 2);
    assert_eq!(line, "");
    assert!(!second.wait().success());
    assert!(
        second
            .stderr()
            .contains("is the socket of a daemon that is running"),
        "{}",
        second.stderr()
    );
    assert_eq!(unix_request(&socket, "GET", "/v1/health", None).0, 200);

    // Killed, the daemon leaves its socket file behind; the next start replaces it.
    first.child.kill().unwrap();
    first.wait();
    assert!(socket.exists());
    let (mut third, line) = UnixDaemon::start(&td, &socket, 3);
    assert!(line.starts_with("listening on unix:"), "{}", third.stderr());
    assert_eq!(unix_request(&socket, "GET", "/v1/health", None).0, 200);
    // Stopped cleanly, it removes its socket.
    let pid = third.child.id().to_string();
    assert!(
        std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    assert!(third.wait().success(), "{}", third.stderr());
    assert!(!socket.exists());

    // Anything else at the path is refused and left alone.
    let file = td.data_dir().join("notes.txt");
    std::fs::write(&file, "keep me").unwrap();
    let (mut refused, line) = UnixDaemon::start(&td, &file, 4);
    assert_eq!(line, "");
    assert!(!refused.wait().success());
    assert!(
        refused.stderr().contains("exists and is not a socket"),
        "{}",
        refused.stderr()
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "keep me");
}
