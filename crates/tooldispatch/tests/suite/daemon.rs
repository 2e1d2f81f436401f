//! `tooldispatch serve` as a real process: a kill -9 in the middle of a round, graceful
//! shutdown on SIGTERM, the token on a non-loopback bind, and a confirmation approved through
//! the API. HTTP goes through a minimal std TcpStream HTTP/1.1 client (one request per
//! connection) and an SSE reader over the same.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::support::*;

/// The daemon's HTTP API, for the tests of this file.
impl Served {
    /// A request that must get an answer; panics with the daemon's stderr otherwise.
    pub(super) fn call(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<&str>,
    ) -> Resp {
        request(&self.addr, method, path, headers, body).unwrap_or_else(|e| {
            panic!(
                "{method} {path}: no HTTP answer: {e}\nstderr: {}",
                self.stderr()
            )
        })
    }

    pub(super) fn get(&self, path: &str) -> Resp {
        self.call("GET", path, &[], None)
    }

    pub(super) fn post(&self, path: &str, body: &str) -> Resp {
        self.call(
            "POST",
            path,
            &[("Content-Type", "application/json")],
            Some(body),
        )
    }

    /// POST, then assert 200 and return the body as JSON.
    fn post_ok(&self, path: &str, body: &str) -> Value {
        let resp = self.post(path, body);
        resp.json_ok(&self.stderr())
    }

    fn events(&self, session: &str, query: &str) -> Sse {
        Sse::open(
            &self.addr,
            &format!("/v1/sessions/{session}/events{query}"),
            &[],
        )
        .unwrap_or_else(|e| panic!("events of {session}: {e}\nstderr: {}", self.stderr()))
    }
}

/// One HTTP response.
#[derive(Debug)]
pub(super) struct Resp {
    pub(super) status: u16,
    headers: Vec<(String, String)>,
    pub(super) body: String,
}

impl Resp {
    pub(super) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub(super) fn json(&self) -> Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("body is not JSON ({e}): {}", self.body))
    }

    pub(super) fn json_ok(&self, stderr: &str) -> Value {
        assert_eq!(
            self.status, 200,
            "body: {}\ndaemon stderr: {stderr}",
            self.body
        );
        self.json()
    }

    /// Assert the error shape `{"error": {"code", "message"}}` with this status and code.
    pub(super) fn assert_error(&self, status: u16, code: &str, stderr: &str) {
        assert_eq!(
            self.status, status,
            "body: {}\ndaemon stderr: {stderr}",
            self.body
        );
        let body = self.json();
        assert_eq!(body["error"]["code"], code, "{body}");
        let message = body["error"]["message"].as_str().unwrap_or("");
        assert!(!message.is_empty(), "error without a message: {body}");
        assert_eq!(body.as_object().unwrap().len(), 1, "{body}");
    }
}

fn write_request(
    stream: &mut TcpStream,
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&str>,
) -> std::io::Result<()> {
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    let body = body.unwrap_or("");
    if method == "POST" {
        head.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes())?;
    stream.write_all(body.as_bytes())?;
    stream.flush()
}

/// Status line and headers.
fn read_head<R: BufRead>(reader: &mut R) -> std::io::Result<(u16, Vec<(String, String)>)> {
    let mut line = String::new();
    if reader.read_line(&mut line)? == 0 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "connection closed before a response",
        ));
    }
    let status = line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("bad status line {line:?}")))?;
    let mut headers = Vec::new();
    loop {
        line.clear();
        reader.read_line(&mut line)?;
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        if let Some((k, v)) = l.split_once(':') {
            headers.push((k.trim().to_string(), v.trim().to_string()));
        }
    }
    Ok((status, headers))
}

fn chunked(headers: &[(String, String)]) -> bool {
    headers.iter().any(|(k, v)| {
        k.eq_ignore_ascii_case("transfer-encoding") && v.to_ascii_lowercase().contains("chunked")
    })
}

/// The next chunk of a chunked body; `None` at its end.
fn read_chunk<R: BufRead>(reader: &mut R) -> std::io::Result<Option<Vec<u8>>> {
    let mut line = String::new();
    if reader.read_line(&mut line)? == 0 {
        return Ok(None);
    }
    let size = usize::from_str_radix(line.trim().split(';').next().unwrap_or(""), 16)
        .map_err(|_| std::io::Error::other(format!("bad chunk size {line:?}")))?;
    if size == 0 {
        return Ok(None);
    }
    let mut data = vec![0u8; size + 2];
    reader.read_exact(&mut data)?;
    data.truncate(size);
    Ok(Some(data))
}

/// One request on a fresh connection (`Connection: close`), read to the end.
pub(super) fn request(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&str>,
) -> std::io::Result<Resp> {
    let mut stream = TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(Duration::from_secs(120)))?;
    write_request(&mut stream, addr, method, path, headers, body)?;
    let mut reader = BufReader::new(stream);
    let (status, headers) = read_head(&mut reader)?;
    let mut bytes = Vec::new();
    if chunked(&headers) {
        while let Some(chunk) = read_chunk(&mut reader)? {
            bytes.extend(chunk);
        }
    } else {
        reader.read_to_end(&mut bytes)?;
    }
    Ok(Resp {
        status,
        headers,
        body: String::from_utf8_lossy(&bytes).into_owned(),
    })
}

/// One SSE message.
#[derive(Debug, Clone, PartialEq)]
struct Msg {
    id: Option<String>,
    data: String,
}

impl Msg {
    fn json(&self) -> Value {
        serde_json::from_str(&self.data).unwrap_or_else(|e| panic!("not JSON ({e}): {self:?}"))
    }

    fn kind(&self) -> String {
        self.json()["type"].as_str().unwrap_or("").to_string()
    }
}

/// An open event stream, read message by message.
struct Sse {
    status: u16,
    headers: Vec<(String, String)>,
    reader: BufReader<TcpStream>,
    chunked: bool,
    buf: String,
}

impl Sse {
    fn open(addr: &str, path: &str, headers: &[(&str, &str)]) -> std::io::Result<Sse> {
        let mut stream = TcpStream::connect(addr)?;
        stream.set_read_timeout(Some(WAIT))?;
        write_request(&mut stream, addr, "GET", path, headers, None)?;
        let mut reader = BufReader::new(stream);
        let (status, headers) = read_head(&mut reader)?;
        let chunked = chunked(&headers);
        Ok(Sse {
            status,
            headers,
            reader,
            chunked,
            buf: String::new(),
        })
    }

    /// The next message, or `None` when the stream ended. A read that waits longer than
    /// [`WAIT`] is an error.
    fn next(&mut self) -> std::io::Result<Option<Msg>> {
        loop {
            if let Some(end) = self.buf.find("\n\n") {
                let block: String = self.buf.drain(..end + 2).collect();
                let mut id = None;
                let mut data = Vec::new();
                for line in block.lines() {
                    if let Some(v) = line.strip_prefix("id:") {
                        id = Some(v.trim().to_string());
                    } else if let Some(v) = line.strip_prefix("data:") {
                        data.push(v.strip_prefix(' ').unwrap_or(v).to_string());
                    }
                }
                if data.is_empty() {
                    continue; // a keep-alive comment
                }
                return Ok(Some(Msg {
                    id,
                    data: data.join("\n"),
                }));
            }
            let more = if self.chunked {
                read_chunk(&mut self.reader)?
            } else {
                let mut bytes = vec![0u8; 4096];
                let n = self.reader.read(&mut bytes)?;
                bytes.truncate(n);
                (n > 0).then_some(bytes)
            };
            match more {
                Some(bytes) => self
                    .buf
                    .push_str(&String::from_utf8_lossy(&bytes).replace("\r\n", "\n")),
                None => return Ok(None),
            }
        }
    }

    /// The next message; panics (with the daemon's stderr) if the stream ends or stalls.
    fn expect(&mut self, daemon: &Served) -> Msg {
        match self.next() {
            Ok(Some(msg)) => msg,
            Ok(None) => panic!("the event stream ended\nstderr: {}", daemon.stderr()),
            Err(e) => panic!("reading the event stream: {e}\nstderr: {}", daemon.stderr()),
        }
    }

    /// Messages up to and including the first whose JSON type is `kind`.
    fn until(&mut self, daemon: &Served, kind: &str) -> Vec<Msg> {
        let mut seen = Vec::new();
        loop {
            let msg = self.expect(daemon);
            let done = msg.kind() == kind;
            seen.push(msg);
            if done {
                return seen;
            }
        }
    }

    /// Replayed messages up to and including the one with id `last`.
    fn replay_until(&mut self, daemon: &Served, last: &str) -> Vec<Msg> {
        let mut seen = Vec::new();
        loop {
            let msg = self.expect(daemon);
            assert!(
                msg.id.is_some(),
                "a message without an id before replayed id {last}: {msg:?}\nreplayed so far: {seen:?}"
            );
            let done = msg.id.as_deref() == Some(last);
            seen.push(msg);
            if done {
                return seen;
            }
        }
    }
}

/// Wait (bounded) until `marker` holds a whole line; the round thread must still be running.
fn wait_for_line(marker: &Path, daemon: &Served) {
    let deadline = Instant::now() + WAIT;
    while !std::fs::read_to_string(marker).is_ok_and(|t| t.ends_with('\n')) {
        assert!(
            Instant::now() < deadline,
            "the command never started\nstderr: {}",
            daemon.stderr()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Post a round in a thread of its own (it blocks until the round ends).
fn post_in_background(
    addr: &str,
    path: &str,
    body: String,
) -> std::thread::JoinHandle<std::io::Result<Resp>> {
    let addr = addr.to_string();
    let path = path.to_string();
    std::thread::spawn(move || {
        request(
            &addr,
            "POST",
            &path,
            &[("Content-Type", "application/json")],
            Some(&body),
        )
    })
}

#[test]
fn a_daemon_killed_mid_round_reports_the_call_interrupted_and_keeps_the_events_before_it() {
    let td = Td::new();
    td.rules("allow run_command\n");
    let marker = td.workdir().join("started.txt");
    let _groups = KillGroups(marker.clone());
    let mut daemon = td.serve("127.0.0.1:0", &[], &[]);

    // Round 1 commits; a watcher connected before it gets the Committed marker's last id.
    let mut live = daemon.events("s", "");
    assert_eq!(live.status, 200, "stderr: {}", daemon.stderr());
    daemon.post_ok(
        "/v1/sessions/s/rounds?run=r1",
        &select("c1", "calculate,run_command"),
    );
    let round1 = live.until(&daemon, "Committed");
    let last = round1.last().unwrap().json()["last_event_id"].clone();
    let last = last
        .as_u64()
        .unwrap_or_else(|| panic!("Committed without last_event_id: {round1:?}"))
        .to_string();
    drop(live);
    let mut replay = daemon.events("s", "?after=0");
    let before = replay.replay_until(&daemon, &last);
    drop(replay);
    assert!(
        before.iter().any(|m| m.kind() == "ToolResult"),
        "round 1 committed no ToolResult: {before:?}"
    );

    // Round 2 runs a slow mutating command; the daemon dies while it runs.
    let script = "sleep 30 & echo $$ >> started.txt; wait";
    let reply = openai(&[(
        "w1",
        "run_tool",
        run_tool("run_command", json!({"argv": ["sh", "-c", script]})),
    )]);
    let killed_round = post_in_background(&daemon.addr, "/v1/sessions/s/rounds?run=r1", reply);
    wait_for_line(&marker, &daemon);
    daemon.signal("-KILL");
    let status = daemon.wait_exit(WAIT);
    assert_eq!(status.code(), None, "SIGKILL, not an exit: {status:?}");
    let answer = killed_round.join().unwrap();
    assert!(
        answer.as_ref().is_err(),
        "the killed round got an answer: {answer:?}"
    );
    drop(daemon);

    // Restarted on the same store: the next round of the session reports the call.
    let daemon = td.serve("127.0.0.1:0", &[], &[]);
    let mut stream = daemon.events("s", "?after=0");
    let replayed = stream.replay_until(&daemon, &last);
    assert_eq!(
        replayed, before,
        "the replay after the restart differs from before the kill"
    );
    let resp = daemon.post(
        "/v1/sessions/s/rounds?run=r2&report=1",
        &openai(&[(
            "c3",
            "run_tool",
            run_tool("calculate", json!({"expressions": ["1+1"]})),
        )]),
    );
    let report = resp.json_ok(&daemon.stderr());
    let interrupted = report["interrupted"]
        .as_array()
        .unwrap_or_else(|| panic!("no interrupted list: {report}"));
    assert_eq!(interrupted.len(), 1, "{report}");
    assert_eq!(interrupted[0]["tool_call_id"], "w1", "{report}");
    assert_eq!(interrupted[0]["tool_name"], "run_command", "{report}");
    assert_eq!(report["results"][0]["status"], "ok", "{report}");

    // The new round's live events end with its marker; nothing else was replayed first.
    let round3 = stream.until(&daemon, "Committed");
    assert!(
        round3[..round3.len() - 1].iter().all(|m| m.id.is_none()),
        "events with ids (replayed) after the known last id {last}: {round3:?}"
    );
    let new_last = round3.last().unwrap().json()["last_event_id"]
        .as_u64()
        .unwrap()
        .to_string();
    drop(stream);

    // A full replay now: the events from before the kill, unchanged, then the new round's
    // (none of the killed call's).
    let mut replay = daemon.events("s", "?after=0");
    let all = replay.replay_until(&daemon, &new_last);
    assert_eq!(&all[..before.len()], &before[..], "{all:?}");
    let after: Vec<Value> = all[before.len()..].iter().map(Msg::json).collect();
    assert!(
        after.iter().any(|e| e["tool_id"] == "c3"),
        "the new round's events are missing: {after:?}"
    );
    assert!(
        all.iter().all(|m| m.json()["tool_id"] != "w1"),
        "the killed call left events: {all:?}"
    );

    // Never re-run: the command started exactly once.
    let starts = std::fs::read_to_string(&marker).unwrap();
    assert_eq!(starts.lines().count(), 1, "{starts}");
}

#[test]
fn sigterm_lets_the_round_in_flight_finish_refuses_new_ones_and_exits_0() {
    let td = Td::new();
    td.rules("allow run_command\n");
    let marker = td.workdir().join("started.txt");
    let _groups = KillGroups(marker.clone());
    let mut daemon = td.serve("127.0.0.1:0", &[], &[]);
    daemon.post_ok("/v1/sessions/s/rounds?run=r1", &select("c1", "run_command"));

    let mut events = daemon.events("s", "?after=0");
    let script = "echo $$ >> started.txt; sleep 3; echo slept";
    let reply = openai(&[(
        "w1",
        "run_tool",
        run_tool("run_command", json!({"argv": ["sh", "-c", script]})),
    )]);
    let slow = post_in_background(&daemon.addr, "/v1/sessions/s/rounds?run=r1&report=1", reply);
    // Running: its start is on the live stream (no id: not replayed) and the command wrote
    // its line.
    loop {
        let msg = events.expect(&daemon);
        if msg.kind() == "ToolCallStart" && msg.json()["tool_id"] == "w1" {
            assert_eq!(msg.id, None, "{msg:?}");
            break;
        }
    }
    wait_for_line(&marker, &daemon);
    daemon.signal("-TERM");

    // The shutdown ends the event streams: then the daemon has stopped taking rounds.
    loop {
        match events.next() {
            Ok(Some(_)) => continue,
            Ok(None) => break,
            Err(e) => panic!(
                "the event stream did not end after SIGTERM: {e}\nstderr: {}",
                daemon.stderr()
            ),
        }
    }
    // A new round now is refused: 503 shutting_down, or no connection at all once the
    // listener is closed. A connection the kernel accepted just as the listener closed is
    // reset without an answer: try again.
    let deadline = Instant::now() + WAIT;
    let refused = loop {
        match request(
            &daemon.addr,
            "POST",
            "/v1/sessions/s/rounds?run=r2",
            &[("Content-Type", "application/json")],
            Some(&calculate_reply("c2")),
        ) {
            Ok(resp) => {
                resp.assert_error(503, "shutting_down", &daemon.stderr());
                break "503";
            }
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => break "refused",
            Err(e) => {
                assert!(
                    Instant::now() < deadline,
                    "a round after SIGTERM got neither 503 nor a refused connection: {e}\nstderr: {}",
                    daemon.stderr()
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    };
    eprintln!("a round posted after SIGTERM: {refused}");

    // The round in flight still answers, with its call's result.
    let resp = slow.join().unwrap().unwrap_or_else(|e| {
        panic!(
            "the round in flight got no answer: {e}\nstderr: {}",
            daemon.stderr()
        )
    });
    let report = resp.json_ok(&daemon.stderr());
    assert_eq!(
        statuses(&report),
        pairs(&[("w1", "ok")]),
        "{report}\nstderr: {}",
        daemon.stderr()
    );
    assert!(
        report["results"][0]["content"]
            .as_str()
            .unwrap()
            .contains("slept"),
        "{report}"
    );

    let status = daemon.wait_exit(Duration::from_secs(60));
    assert_eq!(status.code(), Some(0), "stderr: {}", daemon.stderr());
}

#[test]
fn a_non_loopback_bind_requires_the_token_it_stores_and_prints_once() {
    let td = Td::new();
    let mut daemon = td.serve("0.0.0.0:0", &[], &[]);
    assert!(daemon.url.starts_with("http://0.0.0.0:"), "{}", daemon.url);
    let path = td.data_dir().join("tooldispatch/daemon-token");
    let meta = std::fs::metadata(&path)
        .unwrap_or_else(|e| panic!("{}: {e}\nstderr: {}", path.display(), daemon.stderr()));
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    let token = std::fs::read_to_string(&path).unwrap().trim().to_string();
    assert!(token.len() >= 32, "{token:?}");
    daemon.wait_stderr(&token);
    assert_eq!(
        daemon.stderr().matches(&token).count(),
        1,
        "{}",
        daemon.stderr()
    );

    let resp = daemon.get("/v1/sessions");
    resp.assert_error(401, "unauthorized", &daemon.stderr());
    let resp = daemon.call(
        "GET",
        "/v1/sessions",
        &[("Authorization", "Bearer not-the-token")],
        None,
    );
    resp.assert_error(401, "unauthorized", &daemon.stderr());
    let bearer = format!("Bearer {token}");
    let resp = daemon.call("GET", "/v1/sessions", &[("Authorization", &bearer)], None);
    let body = resp.json_ok(&daemon.stderr());
    assert!(body["sessions"].is_array(), "{body}");

    // The event stream takes the token in the query (EventSource sends no headers)...
    let stream = Sse::open(
        &daemon.addr,
        &format!("/v1/sessions/s/events?access_token={token}"),
        &[],
    )
    .unwrap();
    assert_eq!(stream.status, 200, "stderr: {}", daemon.stderr());
    let kind = stream
        .headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("content-type"))
        .map(|(_, v)| v.clone());
    assert_eq!(kind.as_deref(), Some("text/event-stream"));
    drop(stream);
    // ...and without it refuses too.
    let resp = daemon.get("/v1/sessions/s/events");
    resp.assert_error(401, "unauthorized", &daemon.stderr());
    // Only the event streams take it from the query.
    let resp = daemon.get(&format!("/v1/sessions?access_token={token}"));
    resp.assert_error(401, "unauthorized", &daemon.stderr());

    daemon.signal("-TERM");
    let status = daemon.wait_exit(Duration::from_secs(60));
    assert_eq!(status.code(), Some(0), "stderr: {}", daemon.stderr());
    drop(daemon);

    // A second start reuses the token and does not show it again.
    let daemon = td.serve("0.0.0.0:0", &[], &[]);
    daemon.wait_stderr("the web console is at");
    assert!(
        !daemon.stderr().contains(&token),
        "the token was shown again: {}",
        daemon.stderr()
    );
    assert_eq!(
        std::fs::read_to_string(&path).unwrap().trim(),
        token,
        "the token file changed"
    );
    let resp = daemon.call("GET", "/v1/sessions", &[("Authorization", &bearer)], None);
    resp.json_ok(&daemon.stderr());
    let resp = daemon.get("/v1/sessions");
    resp.assert_error(401, "unauthorized", &daemon.stderr());
}

#[test]
fn a_confirmation_waits_for_a_watcher_and_is_approved_through_the_api() {
    let td = Td::new();
    let daemon = td.serve("127.0.0.1:0", &[], &[]);
    let write = |id: &str, path: &str| {
        openai(&[(
            id,
            "run_tool",
            run_tool(
                "edit_file",
                json!({"path": path, "mode": "write", "content": "hello\n"}),
            ),
        )])
    };

    // Watched: the call waits until the API approves it.
    daemon.post_ok("/v1/sessions/c/rounds?run=r1", &select("f1", "edit_file"));
    let mut events = daemon.events("c", "?after=0");
    assert_eq!(events.status, 200, "stderr: {}", daemon.stderr());
    let round = post_in_background(
        &daemon.addr,
        "/v1/sessions/c/rounds?run=r1&report=1",
        write("e1", "new.txt"),
    );
    let deadline = Instant::now() + WAIT;
    let confirmation = loop {
        let list = daemon
            .get("/v1/confirmations?session=c")
            .json_ok(&daemon.stderr());
        let found = list["confirmations"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["tool_id"] == "e1")
            .cloned();
        if let Some(c) = found {
            break c;
        }
        assert!(
            !round.is_finished(),
            "the round ended without waiting for approval: {:?}\nstderr: {}",
            round.join().unwrap(),
            daemon.stderr()
        );
        assert!(
            Instant::now() < deadline,
            "the call never waited for confirmation: {list}\nstderr: {}",
            daemon.stderr()
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(confirmation["session"], "c", "{confirmation}");
    assert_eq!(confirmation["tool_name"], "edit_file", "{confirmation}");
    assert!(
        !td.workdir().join("new.txt").exists(),
        "written before approval"
    );
    let id = confirmation["id"].as_str().unwrap();
    let reply = daemon.post_ok(&format!("/v1/confirmations/{id}"), r#"{"approve": true}"#);
    assert_eq!(reply, json!({"id": id, "approve": true}));
    let resp = round.join().unwrap().unwrap_or_else(|e| {
        panic!(
            "the approved round got no answer: {e}\nstderr: {}",
            daemon.stderr()
        )
    });
    assert!(resp.header("x-tooldispatch-round").is_some(), "{resp:?}");
    let report = resp.json_ok(&daemon.stderr());
    assert_eq!(statuses(&report), pairs(&[("e1", "ok")]), "{report}");
    assert_eq!(
        std::fs::read_to_string(td.workdir().join("new.txt")).unwrap(),
        "hello\n"
    );
    // The watcher saw it asked and answered.
    let seen = events.until(&daemon, "Committed");
    let kinds: Vec<String> = seen.iter().map(Msg::kind).collect();
    assert!(
        kinds.contains(&"ConfirmationRequested".to_string())
            && kinds.contains(&"ConfirmationResolved".to_string()),
        "{kinds:?}"
    );
    // Answered: it waits no more.
    daemon
        .post(&format!("/v1/confirmations/{id}"), r#"{"approve": true}"#)
        .assert_error(404, "no_such_confirmation", &daemon.stderr());

    // Unwatched (no client on this session or on /v1/events): declined at once.
    daemon.post_ok("/v1/sessions/d/rounds?run=r1", &select("f2", "edit_file"));
    let report = daemon.post_ok(
        "/v1/sessions/d/rounds?run=r1&report=1",
        &write("e2", "other.txt"),
    );
    assert_eq!(statuses(&report), pairs(&[("e2", "declined")]), "{report}");
    let content = report["results"][0]["content"].as_str().unwrap();
    assert!(
        content.contains("no one is available to approve"),
        "{content}"
    );
    assert!(!td.workdir().join("other.txt").exists());
    let list = daemon.get("/v1/confirmations").json_ok(&daemon.stderr());
    assert_eq!(list["confirmations"], json!([]), "{list}");
}

/// A job's own children too: the shell's child `sleep` is what must not outlive the daemon.
#[test]
fn shutdown_stops_the_background_jobs_the_daemon_started() {
    let td = Td::new();
    td.rules("allow background_command\n");
    let marker = td.workdir().join("job.pid");
    let _groups = KillGroups(marker.clone());
    // Found by its command line: a pid printed inside the sandbox is not the host's.
    let sleeper = format!("sleep 300.{}2", std::process::id());
    let mut daemon = td.serve("127.0.0.1:0", &[], &[]);
    daemon.post_ok("/v1/sessions/s/rounds", &select("c1", "background_command"));
    let start = openai(&[(
        "b1",
        "run_tool",
        run_tool(
            "background_command",
            json!({"mode": "start", "argv": ["sh", "-c", format!("{sleeper} & echo $! > job.pid; wait")]}),
        ),
    )]);
    let results = daemon.post_ok("/v1/sessions/s/rounds", &start);
    assert!(
        results[0]["content"].as_str().unwrap_or("").contains("job"),
        "{results}"
    );
    wait_for_line(&marker, &daemon);
    assert!(
        !processes_with(&sleeper).is_empty(),
        "the job is not running: {}",
        daemon.stderr()
    );

    daemon.signal("-TERM");
    let status = daemon.wait_exit(Duration::from_secs(60));
    assert_eq!(status.code(), Some(0), "stderr: {}", daemon.stderr());
    let deadline = Instant::now() + WAIT;
    while !processes_with(&sleeper).is_empty() {
        assert!(
            Instant::now() < deadline,
            "the background job {sleeper} outlived the daemon\nstderr: {}",
            daemon.stderr()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `max_calls_per_round` from the config file: a larger reply is `400 too_many_calls`, before
/// the session is registered or anything of the round runs or is committed.
#[test]
fn a_round_over_max_calls_per_round_is_refused_with_400_and_leaves_no_trace() {
    use super::limits::calculations;
    let td = Td::new();
    let config = td.file("config.toml", "max_calls_per_round = 2\n");
    let daemon = td.serve("127.0.0.1:0", &["--config", config.to_str().unwrap()], &[]);
    daemon.post_ok("/v1/sessions/m/rounds?run=r1", &select("f1", "calculate"));
    let refused = daemon.post("/v1/sessions/m/rounds?run=r1", &calculations(3));
    refused.assert_error(400, "too_many_calls", &daemon.stderr());
    assert_eq!(
        refused.json()["error"]["message"],
        "the reply has 3 tool calls; a round takes at most 2 (max_calls_per_round in the config file)"
    );
    daemon
        .post("/v1/sessions/fresh/rounds?run=r1", &calculations(3))
        .assert_error(400, "too_many_calls", &daemon.stderr());
    let listed = daemon.get("/v1/sessions").json_ok(&daemon.stderr());
    assert!(
        !listed.to_string().contains("fresh"),
        "a refused round registered its session: {listed}"
    );
    // Exactly at the limit: round 2 of the run, as if the refused one never came.
    let answered = daemon.post("/v1/sessions/m/rounds?run=r1", &calculations(2));
    assert_eq!(answered.header("x-tooldispatch-round"), Some("2"));
    assert_eq!(
        answered.json_ok(&daemon.stderr()).as_array().unwrap().len(),
        2
    );
}

/// `serve --config` with a scripted OpenAI-compatible model named `fake` (no key).
fn serve_with_model(td: &Td, base: &str) -> Served {
    let config = td.file(
        "config.toml",
        &format!(
            "[models.fake]\nprovider = \"openai\"\nmodel = \"fake-1\"\nbase_url = \"{base}\"\nkey = \"none\"\n"
        ),
    );
    td.serve(
        "127.0.0.1:0",
        &["--config", &config.display().to_string()],
        &[],
    )
}

#[test]
fn the_daemon_runs_agent_turns_on_the_session_stream_and_goes_on_after_an_answer() {
    use super::agent::{answer, calling, model_server};
    let td = Td::new();
    let ask = json!({"questions": [{"question": "Which database?"}],
                     "state": {"objective": "set up storage", "completed": [], "next_steps": ["migrate"]}});
    let (base, seen) = model_server(vec![
        calling(&[("c1", "find_tools", json!({"query": "select:calculate"}))]),
        calling(&[(
            "c2",
            "run_tool",
            json!({"name": "calculate", "args": {"expressions": ["2+2"]}}),
        )]),
        answer("It is 4."),
        calling(&[("q1", "ask_user", ask)]),
        answer("Noted: Postgres."),
    ]);
    let daemon = serve_with_model(&td, &base);
    let version = daemon.get("/v1/version").json();
    assert_eq!(version["agent_models"], json!(["fake"]), "{version}");

    let mut events = daemon.events("a", "?after=0");
    let outcome = daemon.post_ok("/v1/sessions/a/agent", r#"{"task": "what is 2+2?"}"#);
    assert_eq!(
        outcome["end"],
        json!({"kind": "answer", "text": "It is 4."}),
        "{outcome}"
    );
    assert_eq!(
        (outcome["run"].as_str(), outcome["rounds"].as_u64()),
        (Some("turn-1"), Some(2))
    );
    // The model's side and the rounds, in order, on the session's stream.
    let kinds: Vec<String> = events
        .until(&daemon, "AgentFinished")
        .iter()
        .map(Msg::kind)
        .filter(|k| k.starts_with("Agent") || k == "Committed")
        .collect();
    assert_eq!(
        kinds,
        [
            "AgentStarted",
            "AgentModelCall",
            "AgentModelDone",
            "Committed",
            "AgentModelCall",
            "AgentModelDone",
            "Committed",
            "AgentModelCall",
            "AgentModelText",
            "AgentModelDone",
            "AgentFinished",
        ],
    );

    // ask_user with no one to answer now: the turn waits, and a new task cannot start.
    let outcome = daemon.post_ok("/v1/sessions/a/agent", r#"{"task": "set up storage"}"#);
    assert_eq!(outcome["end"]["kind"], "waiting", "{outcome}");
    let task = outcome["end"]["task"]["task_hash"]
        .as_str()
        .unwrap()
        .to_string();
    daemon
        .post("/v1/sessions/a/agent", r#"{"task": "something else"}"#)
        .assert_error(409, "agent_waiting", &daemon.stderr());
    let outcome = daemon.post_ok(
        "/v1/sessions/a/agent",
        &json!({"answer": {"task": task, "answers": ["Postgres"]}}).to_string(),
    );
    assert_eq!(
        outcome["end"],
        json!({"kind": "answer", "text": "Noted: Postgres."}),
        "{outcome}"
    );
    // The answer went back to the model as the asking call's result.
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 5, "model requests");
    let last = seen[4].1["messages"].as_array().unwrap();
    let result = last
        .iter()
        .find(|m| m["role"] == "tool" && m["tool_call_id"] == "q1")
        .unwrap_or_else(|| panic!("no result for q1 in {last:#?}"));
    assert!(
        result["content"].as_str().unwrap().contains("Postgres"),
        "{result}"
    );
    drop(seen);

    // Requests the endpoint refuses, each saying what to send instead.
    let stderr = daemon.stderr();
    daemon
        .post("/v1/sessions/a/agent", r#"{"task": "  "}"#)
        .assert_error(400, "bad_request", &stderr);
    daemon
        .post("/v1/sessions/a/agent", r#"{"task": "x", "model": "nope"}"#)
        .assert_error(400, "unknown_model", &stderr);
    daemon
        .post(
            "/v1/sessions/a/agent",
            r#"{"task": "x", "answer": {"task": "t", "answers": []}}"#,
        )
        .assert_error(400, "bad_request", &stderr);
}

#[test]
fn without_a_model_the_agent_endpoint_says_how_to_add_one() {
    let td = Td::new();
    let daemon = td.serve("127.0.0.1:0", &[], &[]);
    assert_eq!(daemon.get("/v1/version").json()["agent_models"], json!([]));
    let resp = daemon.post("/v1/sessions/a/agent", r#"{"task": "hello"}"#);
    resp.assert_error(501, "no_model", &daemon.stderr());
    assert!(resp.body.contains("[models."), "{}", resp.body);
}

/// One background_subagents call through the daemon in session `s`: its status and content.
fn background(daemon: &Served, call_id: &str, args: Value) -> (String, String) {
    let report = daemon.post_ok(
        "/v1/sessions/s/rounds?run=r1&report=1",
        &openai(&[(call_id, "run_tool", run_tool("background_subagents", args))]),
    );
    let result = &report["results"][0];
    (
        result["status"].as_str().unwrap_or_default().to_string(),
        result["content"].as_str().unwrap_or_default().to_string(),
    )
}

/// The id in a start's answer.
fn started_id(content: &str) -> String {
    content
        .split("started background subagent ")
        .nth(1)
        .and_then(|t| t.split_once(' '))
        .unwrap_or_else(|| panic!("not a start: {content}"))
        .0
        .to_string()
}

#[test]
fn a_background_subagent_running_when_the_daemon_dies_reads_interrupted_after_the_restart() {
    let td = Td::new();
    let (base, seen) = super::agent::model_server_paced(vec![
        (Duration::ZERO, super::agent::answer("the quick answer")),
        // The second leg's model is still thinking when the daemon dies.
        (
            Duration::from_secs(600),
            super::agent::answer("never delivered"),
        ),
    ]);
    let config = td.file(
        "config.toml",
        &format!(
            "[models.fake]\nprovider = \"openai\"\nmodel = \"fake-1\"\nbase_url = \"{base}\"\nkey = \"none\"\n"
        ),
    );
    let config = config.to_str().unwrap();
    let mut daemon = td.serve("127.0.0.1:0", &["--config", config], &[]);
    daemon.post_ok(
        "/v1/sessions/s/rounds?run=r1",
        &select("c0", "background_subagents"),
    );

    // The first leg finishes before the restart.
    let (status, started) = background(&daemon, "c1", json!({"task": "a quick one"}));
    assert_eq!(status, "ok", "{started}");
    let quick = started_id(&started);
    let deadline = Instant::now() + WAIT;
    let done = loop {
        let (_, text) = background(&daemon, "c2", json!({"mode": "read", "id": quick}));
        if text.contains("status: done") {
            break text;
        }
        assert!(
            Instant::now() < deadline,
            "never done: {text}\nstderr: {}",
            daemon.stderr()
        );
        std::thread::sleep(Duration::from_millis(50));
    };

    // The second is waiting on its model when the daemon is killed.
    let (status, started) = background(&daemon, "c3", json!({"task": "a slow one"}));
    assert_eq!(status, "ok", "{started}");
    let slow = started_id(&started);
    let deadline = Instant::now() + WAIT;
    while seen.lock().unwrap().len() < 2 {
        assert!(
            Instant::now() < deadline,
            "the slow leg never asked its model\nstderr: {}",
            daemon.stderr()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let (_, running) = background(&daemon, "c4", json!({"mode": "read", "id": slow}));
    assert!(running.contains("status: running"), "{running}");
    daemon.signal("-KILL");
    daemon.wait_exit(WAIT);
    drop(daemon);

    // Restarted on the same store: the slow leg is reported interrupted, the quick one done.
    let daemon = td.serve("127.0.0.1:0", &["--config", config], &[]);
    let (status, interrupted) = background(&daemon, "c5", json!({"mode": "read", "id": slow}));
    assert_eq!(status, "ok", "{interrupted}");
    assert!(
        interrupted.contains(&format!("background subagent {slow} · status: interrupted"))
            && interrupted.contains("it will not resume"),
        "{interrupted}"
    );
    let (_, list) = background(&daemon, "c6", json!({"mode": "list"}));
    let list: Value = serde_json::from_str(
        list.strip_prefix("[background_subagents] ")
            .unwrap_or(&list),
    )
    .unwrap_or_else(|e| panic!("{e}: {list}"));
    let rows: Vec<(String, String, String)> = list["background_subagents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            (
                l["id"].as_str().unwrap().to_string(),
                l["status"].as_str().unwrap().to_string(),
                l["task"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        rows,
        vec![
            (quick.clone(), "done".to_string(), "a quick one".to_string()),
            (slow, "interrupted".to_string(), "a slow one".to_string()),
        ]
    );
    assert_eq!(list["running"], 0, "{list}");
    let (_, again) = background(&daemon, "c7", json!({"mode": "read", "id": quick}));
    let header = format!(
        "\n[subagent · fake · session=s:sub:{quick} · usage: 100/10 tokens]\nthe quick answer"
    );
    assert!(done.ends_with(&header), "{done}");
    assert!(again.ends_with(&header), "{again}");
    assert_eq!(seen.lock().unwrap().len(), 2, "a leg was re-run");
}

/// A subagent leg runs in a session of its own that no one watches; its calls that ask reach
/// whoever watches the parent session, and are listed under both sessions.
#[test]
fn a_subagent_legs_confirmation_goes_to_the_parent_sessions_watcher() {
    use super::agent::{answer, calling, model_server};
    let td = Td::new();
    let (base, seen) = model_server(vec![
        calling(&[("l1", "find_tools", json!({"query": "select:run_command"}))]),
        calling(&[(
            "l2",
            "run_tool",
            json!({"name": "run_command", "args": {"argv": ["echo leg-ran"], "shell": true}}),
        )]),
        answer("the leg is done"),
    ]);
    let daemon = serve_with_model(&td, &base);
    daemon.post_ok("/v1/sessions/p/rounds?run=r1", &select("c0", "subagents"));
    // Only the parent's stream is open: the leg's own session has no watcher.
    let mut events = daemon.events("p", "?after=0");
    assert_eq!(events.status, 200, "stderr: {}", daemon.stderr());
    let round = post_in_background(
        &daemon.addr,
        "/v1/sessions/p/rounds?run=r1&report=1",
        openai(&[(
            "c1",
            "run_tool",
            run_tool(
                "subagents",
                json!({"task": "say leg-ran", "name": "helper"}),
            ),
        )]),
    );
    let deadline = Instant::now() + WAIT;
    let confirmation = loop {
        let list = daemon
            .get("/v1/confirmations?session=p")
            .json_ok(&daemon.stderr());
        if let Some(c) = list["confirmations"].as_array().unwrap().first().cloned() {
            break c;
        }
        assert!(
            !round.is_finished() && Instant::now() < deadline,
            "the leg's call never waited for the parent's watcher: {list}\nstderr: {}",
            daemon.stderr()
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(
        (
            &confirmation["session"],
            &confirmation["parent_session"],
            &confirmation["tool_name"]
        ),
        (&json!("p:sub:helper"), &json!("p"), &json!("run_command")),
        "{confirmation}"
    );
    let id = confirmation["id"].as_str().unwrap();
    daemon.post_ok(&format!("/v1/confirmations/{id}"), r#"{"approve": true}"#);
    let report = round
        .join()
        .unwrap()
        .unwrap_or_else(|e| panic!("no answer: {e}\nstderr: {}", daemon.stderr()))
        .json_ok(&daemon.stderr());
    let result = &report["results"][0];
    assert_eq!(result["status"], "ok", "{report}");
    let content = result["content"].as_str().unwrap();
    assert!(
        content.contains("session=p:sub:helper") && content.ends_with("the leg is done"),
        "{content}"
    );
    // The approved command ran: its output went back to the leg's model.
    let seen = seen.lock().unwrap();
    let last = seen.last().unwrap().1["messages"]
        .as_array()
        .unwrap()
        .clone();
    let output = last
        .iter()
        .find(|m| m["role"] == "tool" && m["tool_call_id"] == "l2")
        .unwrap_or_else(|| panic!("no result for l2 in {last:#?}"));
    assert!(
        output["content"].as_str().unwrap().contains("leg-ran"),
        "{output}"
    );
    // The parent's watcher saw the request and its answer.
    let kinds: Vec<String> = events
        .until(&daemon, "ConfirmationResolved")
        .iter()
        .map(Msg::kind)
        .collect();
    assert!(
        kinds.contains(&"ConfirmationRequested".to_string()),
        "{kinds:?}"
    );
}

/// Issue 21: over HTTP too, only an assistant reply is a round: anything else is
/// `400 bad_reply` naming what was sent, an answer without calls is `200 []` with round 0, and
/// neither registers the session or moves its round count.
#[test]
fn only_an_assistant_reply_is_a_round_over_http() {
    let td = Td::new();
    let daemon = td.serve("127.0.0.1:0", &[], &[]);
    for (provider, input, says) in not_replies() {
        let refused = daemon.post(&format!("/v1/sessions/w/rounds?provider={provider}"), input);
        refused.assert_error(400, "bad_reply", &daemon.stderr());
        let body = refused.json();
        let message = body["error"]["message"].as_str().unwrap();
        assert!(
            message.contains(&format!("{provider}: {says}")) && message.contains("; send the "),
            "{provider} {input}: {message}"
        );
    }
    for (provider, answer) in answers_without_calls() {
        let answered = daemon.post(
            &format!("/v1/sessions/w/rounds?provider={provider}"),
            answer,
        );
        assert_eq!(
            answered.header("x-tooldispatch-round"),
            Some("0"),
            "{provider}"
        );
        assert_eq!(answered.json_ok(&daemon.stderr()), json!([]), "{provider}");
    }
    let listed = daemon.get("/v1/sessions").json_ok(&daemon.stderr());
    assert!(
        !listed.to_string().contains("\"w\""),
        "registered: {listed}"
    );
    let first = daemon.post("/v1/sessions/w/rounds", &select("f1", "calculate"));
    assert_eq!(first.header("x-tooldispatch-round"), Some("1"));
}
