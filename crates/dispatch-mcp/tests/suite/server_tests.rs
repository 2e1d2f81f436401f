//! tooldispatch as an MCP server, driven by the official Python and TypeScript SDK clients.
//!
//! Each client runs one scenario as a real process (tests/clients/) against the real
//! `tooldispatch` binary — `tooldispatch mcp` on stdio, and `/mcp` on `tooldispatch serve` —
//! and prints what it saw as JSON: the tools and their hints, calculate, read_files, a write
//! approved and one declined through elicitation, progress notifications, and a cancelled
//! long call.

// Test helpers outside #[test] functions may unwrap too (as every crate's test root allows).

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;

use dispatch_engine::{Engine, EngineConfig, Headless};
use dispatch_mcp::server::{McpServer, ToolSet, new_session_id};
use pretty_assertions::assert_eq;
use rmcp::ServerHandler;
use serde_json::{Value, json};

use crate::support::{missing, npm_bin};

/// The `tooldispatch` binary of this build (`cargo test --workspace` builds it beside this
/// test's own executable), or `None` when it has not been built.
/// The `tooldispatch` binary `cargo test --workspace` built beside this test; `None` (after
/// [`missing`] says so, or fails under TOOLDISPATCH_REQUIRE_MCP=1) when it was not built.
fn tooldispatch_bin() -> Option<PathBuf> {
    // target/debug/deps/suite-HASH → target/debug/tooldispatch
    let bin = std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.parent()?.join("tooldispatch")))
        .filter(|bin| bin.is_file());
    if bin.is_none() {
        missing("the tooldispatch binary (cargo build -p tooldispatch)");
    }
    bin
}

fn clients_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/clients")
}

/// The TypeScript SDK as `npm ci` installed it in e2e/.
fn ts_sdk_dir() -> PathBuf {
    npm_bin("x")
        .parent()
        .and_then(Path::parent)
        .map(|modules| modules.join("@modelcontextprotocol/sdk"))
        .unwrap_or_default()
}

fn python_sdk_installed() -> bool {
    Command::new("python3")
        .args(["-c", "import mcp, mcp.client.client"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn node_installed() -> bool {
    Command::new("node")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// A work directory with the file the scenario reads, and private data and config
/// directories for the server (its spills and trust list stay out of the user's).
struct Fixture {
    dir: tempfile::TempDir,
}

impl Fixture {
    fn new() -> Fixture {
        let dir = tempfile::Builder::new()
            .prefix("mcp-server-")
            .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
            .unwrap();
        for sub in ["work", "data", "config"] {
            std::fs::create_dir_all(dir.path().join(sub)).unwrap();
        }
        std::fs::write(dir.path().join("work/hello.txt"), "hello from the test\n").unwrap();
        Fixture { dir }
    }

    fn workdir(&self) -> PathBuf {
        self.dir.path().join("work")
    }

    /// The server's environment: its data and config directories inside the fixture.
    fn server_env(&self, cmd: &mut Command) {
        cmd.env("XDG_DATA_HOME", self.dir.path().join("data"))
            .env("XDG_CONFIG_HOME", self.dir.path().join("config"))
            .env_remove("TOOLDISPATCH_STORE")
            .env_remove("TOOLDISPATCH_CONFIG");
    }

    /// `tooldispatch mcp` as the client will start it.
    fn stdio_command(&self, bin: &Path) -> Vec<String> {
        vec![
            bin.display().to_string(),
            "mcp".into(),
            "--workdir".into(),
            self.workdir().display().to_string(),
            "--store".into(),
            "memory:".into(),
        ]
    }

    /// `tooldispatch serve` on a free loopback port, and the `/mcp` URL.
    fn start_daemon(&self, bin: &Path) -> Daemon {
        let mut cmd = Command::new(bin);
        cmd.args([
            "serve",
            "--addr",
            "127.0.0.1:0",
            "--store",
            "memory:",
            "--workdir",
        ])
        .arg(self.workdir())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
        self.server_env(&mut cmd);
        let mut child = cmd.spawn().unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let base = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("unexpected first line from serve: {line:?}"))
            .to_string();
        Daemon { child, base }
    }
}

struct Daemon {
    child: Child,
    base: String,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Run a client script to its end and parse the JSON line it prints.
fn run_client(mut cmd: Command, fixture: &Fixture) -> Value {
    fixture.server_env(&mut cmd);
    let out = cmd.stderr(Stdio::inherit()).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "the client failed: {stdout}");
    let last = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(last).unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}"))
}

fn python_client(fixture: &Fixture, server: &[String]) -> Value {
    let mut cmd = Command::new("python3");
    cmd.arg(clients_dir().join("py_client.py"))
        .arg(fixture.workdir())
        .args(server);
    run_client(cmd, fixture)
}

fn ts_client(fixture: &Fixture, server: &[String]) -> Value {
    let mut cmd = Command::new("node");
    cmd.arg(clients_dir().join("ts_client.mjs"))
        .arg(ts_sdk_dir())
        .arg(fixture.workdir())
        .args(server);
    run_client(cmd, fixture)
}

/// How the client reached the server.
#[derive(Clone, Copy, PartialEq)]
enum Transport {
    Stdio,
    Http,
}

/// What every client must have seen, whatever its language and transport.
fn check_scenario(out: &Value, transport: Transport) {
    let tools = out["tools"].as_object().unwrap();
    assert!(
        !tools.contains_key("run_tool") && !tools.contains_key("find_tools"),
        "{tools:?}"
    );
    assert_eq!(tools["calculate"]["readOnlyHint"], json!(true));
    assert_eq!(tools["calculate"]["openWorldHint"], json!(false));
    assert_eq!(tools["read_files"]["readOnlyHint"], json!(true));
    assert_eq!(tools["edit_file"]["readOnlyHint"], json!(false));
    assert_eq!(tools["edit_file"]["destructiveHint"], json!(true));
    assert_eq!(tools["remove_file"]["destructiveHint"], json!(true));

    let ok = |step: &str| {
        let r = &out[step];
        assert_eq!(r["is_error"], json!(false), "{step}: {r}");
        assert_eq!(r["status"], json!("ok"), "{step}: {r}");
        r["text"].as_str().unwrap().to_string()
    };
    assert!(ok("calculate").contains("42"), "{}", out["calculate"]);
    assert!(ok("read_files").contains("hello from the test"));

    // The approved write happened; the declined one did not, and the model is told why.
    ok("write_approved");
    assert_eq!(out["approved_exists"], json!(true));
    assert_eq!(out["declined_exists"], json!(false));
    assert_eq!(out["write_declined"]["is_error"], json!(true));
    assert_eq!(out["write_declined"]["status"], json!("declined"));
    let asked: Vec<&str> = out["asked"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        asked.iter().filter(|m| m.contains("edit_file")).count() == 2,
        "{asked:?}"
    );

    // Progress: the command's output came as notifications/progress, increasing.
    assert!(ok("progress_call").contains("line 3"));
    let progress = out["progress"].as_array().unwrap();
    assert!(!progress.is_empty(), "no progress notifications");
    assert!(
        progress
            .iter()
            .any(|p| p["message"].as_str().is_some_and(|m| m.contains("line"))),
        "{progress:?}"
    );
    let values: Vec<f64> = progress
        .iter()
        .map(|p| p["progress"].as_f64().unwrap())
        .collect();
    assert!(values.windows(2).all(|w| w[0] < w[1]), "{values:?}");

    // Cancelled: the client gave up, the command was stopped before it wrote, and the session
    // goes on.
    assert_eq!(out["cancel_raised"], json!(true));
    assert!(out["cancel_seconds"].as_f64().unwrap() < 4.0);
    assert_eq!(
        out["late_exists"],
        json!(false),
        "the cancelled command ran on"
    );
    assert!(ok("after_cancel").contains('2'));

    // ask_user through elicitation: the client's answer comes back to the model.
    assert!(ok("ask_user").contains("→ blue"), "{}", out["ask_user"]);

    // A client without elicitation: the write is declined with a reason naming what the user
    // can change (stdio: the headless rule; /mcp: the daemon's own confirmations, which need
    // a watcher), and ask_user tells the model to ask in the conversation.
    let plain = &out["plain_write"];
    assert_eq!(plain["status"], json!("declined"), "{plain}");
    assert_eq!(plain["is_error"], json!(true));
    let why = match transport {
        Transport::Stdio => "this MCP client does not support elicitation",
        Transport::Http => "no client is watching this session",
    };
    assert!(plain["text"].as_str().unwrap().contains(why), "{plain}");
    assert_eq!(out["plain_exists"], json!(false));
    assert_eq!(out["plain_ask"]["status"], json!("pending"));
    assert!(
        out["plain_ask"]["text"]
            .as_str()
            .unwrap()
            .contains("Ask the user yourself in the conversation")
    );

    // One MCP session is one tooldispatch session.
    let sessions: Vec<&Value> = ["calculate", "read_files", "write_approved", "after_cancel"]
        .iter()
        .map(|s| &out[*s]["session"])
        .collect();
    assert!(sessions[0].is_string());
    assert!(sessions.iter().all(|s| *s == sessions[0]), "{sessions:?}");
    // … and another connection is another session.
    assert_ne!(out["plain_write"]["session"], *sessions[0]);
}

#[test]
fn python_sdk_client_over_stdio() {
    if !python_sdk_installed() && missing("the Python MCP SDK (pip install mcp==2.3.0)") {
        return;
    }
    let Some(bin) = tooldispatch_bin() else {
        return;
    };
    let fixture = Fixture::new();
    let mut server = vec!["--".to_string()];
    server.extend(fixture.stdio_command(&bin));
    let out = python_client(&fixture, &server);
    // The SDK probed server/discover at 2026-07-28, was told our versions, and fell back
    // to initialize.
    assert_eq!(out["protocol_version"], json!("2025-11-25"));
    check_scenario(&out, Transport::Stdio);
}

#[test]
fn typescript_sdk_client_over_stdio() {
    if (!node_installed() || !ts_sdk_dir().is_dir())
        && missing("node and @modelcontextprotocol/sdk (npm ci in e2e/)")
    {
        return;
    }
    let Some(bin) = tooldispatch_bin() else {
        return;
    };
    let fixture = Fixture::new();
    let mut server = vec!["--".to_string()];
    server.extend(fixture.stdio_command(&bin));
    check_scenario(&ts_client(&fixture, &server), Transport::Stdio);
}

#[test]
fn python_sdk_client_over_http() {
    if !python_sdk_installed() && missing("the Python MCP SDK (pip install mcp==2.3.0)") {
        return;
    }
    let Some(bin) = tooldispatch_bin() else {
        return;
    };
    let fixture = Fixture::new();
    let daemon = fixture.start_daemon(&bin);
    let url = format!("{}/mcp", daemon.base);
    let out = python_client(&fixture, &["--url".into(), url]);
    assert_eq!(out["protocol_version"], json!("2025-11-25"));
    check_scenario(&out, Transport::Http);
    // The MCP session's rounds ran like the API's: the daemon lists the session with them.
    let sessions = http_get_json(&daemon.base, "/v1/sessions");
    let session = out["calculate"]["session"].as_str().unwrap();
    let listed = sessions["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == json!(session))
        .unwrap_or_else(|| panic!("{session} not in {sessions}"));
    assert!(listed["rounds"].as_u64().unwrap() >= 6, "{listed}");
}

#[test]
fn typescript_sdk_client_over_http() {
    if (!node_installed() || !ts_sdk_dir().is_dir())
        && missing("node and @modelcontextprotocol/sdk (npm ci in e2e/)")
    {
        return;
    }
    let Some(bin) = tooldispatch_bin() else {
        return;
    };
    let fixture = Fixture::new();
    let daemon = fixture.start_daemon(&bin);
    let url = format!("{}/mcp", daemon.base);
    check_scenario(
        &ts_client(&fixture, &["--url".into(), url]),
        Transport::Http,
    );
}

/// `GET path` on the daemon, as JSON.
fn http_get_json(base: &str, path: &str) -> Value {
    let addr = base.strip_prefix("http://").unwrap();
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    let (_, body) = answer.split_once("\r\n\r\n").unwrap();
    serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {answer}"))
}

/// One raw HTTP/1.1 request; the status code of the answer.
fn http_status(base: &str, request_head: &str, body: &str) -> u16 {
    let addr = base.strip_prefix("http://").unwrap();
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    let request = format!(
        "{request_head}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).unwrap();
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    answer
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {answer:?}"))
}

#[test]
fn mcp_endpoint_refuses_cross_origin_and_foreign_host_requests() {
    let Some(bin) = tooldispatch_bin() else {
        return;
    };
    let fixture = Fixture::new();
    let daemon = fixture.start_daemon(&bin);
    let host = daemon.base.strip_prefix("http://").unwrap().to_string();
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "raw", "version": "1"}}})
    .to_string();
    let head = |extra: &str| {
        format!(
            "POST /mcp HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream{extra}"
        )
    };
    // A web page of another site, through the visitor's browser: refused.
    assert_eq!(
        http_status(
            &daemon.base,
            &head("\r\nOrigin: http://evil.example"),
            &initialize
        ),
        403
    );
    // DNS rebinding (a foreign name resolving to 127.0.0.1): refused.
    let rebound = "POST /mcp HTTP/1.1\r\nHost: evil.example\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream";
    assert_eq!(http_status(&daemon.base, rebound, &initialize), 403);
    // A local program: served.
    assert_eq!(http_status(&daemon.base, &head(""), &initialize), 200);
}

/// The hints come from each tool's spec; the list follows `--tools`.
#[test]
fn tools_are_listed_with_hints_from_their_specs() {
    let dir = tempfile::Builder::new()
        .prefix("mcp-list-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap();
    let registry = dispatch_tools::builtin_registry().unwrap();
    let store = Arc::new(dispatch_store::memory::MemoryStore::default());
    let engine = Arc::new(
        Engine::new(
            registry,
            store,
            Arc::new(Headless),
            EngineConfig::new(dir.path()),
        )
        .unwrap(),
    );
    let elicitation = dispatch_mcp::server::Elicitation::new(Arc::new(Headless));
    let all = McpServer::single(
        engine.clone(),
        ToolSet::All,
        new_session_id(),
        elicitation.clone(),
    );
    let listed = all.list();
    let hints = |name: &str| {
        let tool = listed
            .iter()
            .find(|t| t.name == name)
            .unwrap_or_else(|| panic!("{name} is not listed"));
        serde_json::to_value(tool.annotations.as_ref().unwrap()).unwrap()
    };
    assert_eq!(
        hints("calculate"),
        json!({"readOnlyHint": true, "idempotentHint": true, "openWorldHint": false})
    );
    assert_eq!(
        hints("remove_file"),
        json!({"readOnlyHint": false, "destructiveHint": true, "idempotentHint": false, "openWorldHint": true})
    );
    assert_eq!(
        hints("search_web"),
        json!({"readOnlyHint": true, "idempotentHint": true, "openWorldHint": true})
    );
    assert!(
        listed
            .iter()
            .all(|t| t.name != "run_tool" && t.name != "find_tools")
    );
    // Every listed schema is an object schema, as MCP requires.
    assert!(
        listed
            .iter()
            .all(|t| t.input_schema.get("type") == Some(&json!("object"))),
    );

    // --exclude leaves tools out of the list (and the engine refuses their calls).
    let trimmed = McpServer::single(
        engine.clone(),
        ToolSet::All,
        new_session_id(),
        elicitation.clone(),
    )
    .with_exclude(["remove_*".to_string()]);
    let trimmed: Vec<String> = trimmed.list().iter().map(|t| t.name.to_string()).collect();
    assert!(trimmed.contains(&"read_files".to_string()));
    assert!(
        !trimmed.iter().any(|n| n.starts_with("remove_")),
        "{trimmed:?}"
    );

    let core = McpServer::single(engine, ToolSet::Core, new_session_id(), elicitation);
    let mut names: Vec<String> = core.list().iter().map(|t| t.name.to_string()).collect();
    names.sort();
    let mut expected: Vec<String> = dispatch_engine::CORE_TOOLS
        .iter()
        .map(|s| s.to_string())
        .collect();
    expected.sort();
    assert_eq!(names, expected);
    // The model learns the other names from the instructions, as from a turn context.
    let instructions = core.get_info().instructions.unwrap();
    assert!(
        instructions.contains("call through run_tool") && instructions.contains("read_files"),
        "{instructions}"
    );
    assert!(
        !instructions.contains("ask_user"),
        "core tools are called directly"
    );
}
