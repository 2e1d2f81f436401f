//! MCP servers from the registries, and one that misbehaves on purpose, as tooldispatch
//! tools: started as child processes (one over Streamable HTTP), listed, called through the
//! engine's rounds, killed, hung and answered.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use dispatch_engine::{
    ApproveAll, ConfirmReply, ConfirmRequest, Confirmer, Engine, EngineConfig, Headless, Provider,
    Question, RawCall, Registry, RoundOutcome, RoundRequest, SlotResult, Status,
    register_system_tools,
};
use dispatch_mcp::client::{ClientOptions, McpClients, ServerConfig, ServerState};
use serde_json::{Value, json};

use crate::support::{missing, npm_bin};

/// An engine whose only tools are run_tool, find_tools and the servers' tools.
struct Harness {
    engine: Engine,
    clients: McpClients,
    dir: tempfile::TempDir,
    rounds: AtomicUsize,
}

fn workdir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("mcp-client-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap()
}

async fn harness_in(
    dir: tempfile::TempDir,
    servers: Vec<(&str, ServerConfig)>,
    confirmer: Arc<dyn Confirmer>,
) -> Harness {
    let mut registry = Registry::empty();
    register_system_tools(&mut registry).unwrap();
    let store = dispatch_store::open("memory:").unwrap();
    let engine = Engine::new(registry, store, confirmer, EngineConfig::new(dir.path())).unwrap();
    // Room for a loaded CI machine starting several servers at once; a test that is about
    // the start-up limit sets its own.
    let servers = servers.into_iter().map(|(n, mut c)| {
        if c.startup_timeout_s == ServerConfig::stdio("x", &[]).startup_timeout_s {
            c.startup_timeout_s = 30;
        }
        (n.to_string(), c)
    });
    let clients = McpClients::start(servers, ClientOptions::new(dir.path())).await;
    engine.update_registry(|registry| clients.register_into(registry));
    Harness {
        engine,
        clients,
        dir,
        rounds: AtomicUsize::new(0),
    }
}

async fn harness(servers: Vec<(&str, ServerConfig)>) -> Harness {
    harness_in(workdir(), servers, Arc::new(ApproveAll)).await
}

impl Harness {
    /// One round with one call of `name` through run_tool, in a run of its own (no dedupe);
    /// an MCP tool's schema is fetched first, as a model would.
    async fn call(&self, name: &str, args: Value) -> (SlotResult, RoundOutcome) {
        if name.starts_with("mcp__") {
            self.round("find_tools", json!({"query": format!("select:{name}")}))
                .await;
        }
        self.round(name, args).await
    }

    async fn round(&self, name: &str, args: Value) -> (SlotResult, RoundOutcome) {
        let n = self.rounds.fetch_add(1, Ordering::Relaxed);
        let call = RawCall::new(
            format!("call-{n}"),
            "run_tool",
            json!({"name": name, "args": args}).to_string(),
        );
        let request = RoundRequest::new("s", format!("run-{n}"), Provider::OpenAi, vec![call]);
        let outcome = self.engine.round(request).await.unwrap();
        (outcome.results[0].clone(), outcome)
    }

    /// The call's result text without the `[tool] ` prefix, which must have succeeded.
    async fn ok(&self, name: &str, args: Value) -> String {
        let (result, _) = self.call(name, args).await;
        assert_eq!(result.status, Status::Ok, "{name}: {}", result.content);
        let prefix = format!("[{name}] ");
        result
            .content
            .strip_prefix(&prefix)
            .unwrap_or(&result.content)
            .to_string()
    }

    fn tool_names(&self, server: &str) -> Vec<String> {
        let prefix = format!("mcp__{server}__");
        self.engine
            .registry()
            .iter()
            .map(|t| t.name().to_string())
            .filter(|n| n.starts_with(&prefix))
            .collect()
    }

    fn state(&self, server: &str) -> dispatch_mcp::client::ServerStatus {
        self.clients
            .statuses()
            .into_iter()
            .find(|s| s.name == server)
            .unwrap()
    }

    /// Wait (up to `limit`) until `check` holds, re-registering the tools meanwhile as the
    /// daemon does when a server changes.
    async fn wait_until(&self, limit: Duration, check: impl Fn(&Harness) -> bool) -> bool {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            self.engine
                .update_registry(|registry| self.clients.register_into(registry));
            if check(self) {
                return true;
            }
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

fn python_has(module: &str) -> bool {
    std::process::Command::new("python3")
        .args(["-c", &format!("import {module}")])
        .status()
        .is_ok_and(|s| s.success())
}

fn misbehaving(mode: &str) -> ServerConfig {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/servers/misbehaving.py");
    ServerConfig::stdio("python3", &[script.to_str().unwrap(), mode])
}

fn npm_server(name: &str, args: &[&str]) -> Option<ServerConfig> {
    let bin = npm_bin(name);
    if !bin.exists() {
        return None;
    }
    Some(ServerConfig::stdio(bin.to_str().unwrap(), args))
}

/// A git repository with one commit, for mcp-server-git.
fn git_repo(dir: &Path) -> PathBuf {
    let repo = dir.join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    let git = |args: &[&str]| {
        let status = std::process::Command::new("git")
            .args(args)
            .current_dir(&repo)
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@example.invalid")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@example.invalid")
            .status()
            .unwrap();
        assert!(status.success(), "git {args:?}");
    };
    git(&["init", "-q", "-b", "main"]);
    std::fs::write(repo.join("a.txt"), "first\n").unwrap();
    git(&["add", "a.txt"]);
    git(&["commit", "-q", "-m", "the first commit"]);
    std::fs::write(repo.join("b.txt"), "untracked\n").unwrap();
    repo
}

/// Every registry server the issue names, at once: each is listed with its protocol version
/// and answers two or more calls through the engine.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_registry_servers_list_their_tools_and_answer_calls() {
    let (Some(everything), Some(memory)) = (
        npm_server("mcp-server-everything", &[]),
        npm_server("mcp-server-memory", &[]),
    ) else {
        assert!(missing("the npm MCP servers"));
        return;
    };
    if !["mcp_server_time", "mcp_server_git", "mcp_server_fetch"]
        .iter()
        .all(|m| python_has(m))
    {
        assert!(missing(
            "mcp-server-time, mcp-server-git and mcp-server-fetch (pip)"
        ));
        return;
    }
    let dir = workdir();
    let shared = dir.path().join("shared");
    std::fs::create_dir_all(&shared).unwrap();
    std::fs::write(shared.join("notes.txt"), "alpha\nbeta\n").unwrap();
    let repo = git_repo(dir.path());
    let filesystem = npm_server("mcp-server-filesystem", &[shared.to_str().unwrap()]).unwrap();
    let mut memory = memory;
    memory.env.insert(
        "MEMORY_FILE_PATH".into(),
        dir.path().join("memory.jsonl").display().to_string(),
    );
    let servers = vec![
        ("everything", everything),
        ("fs", filesystem),
        ("memory", memory),
        (
            "time",
            ServerConfig::stdio(
                "python3",
                &["-m", "mcp_server_time", "--local-timezone", "UTC"],
            ),
        ),
        (
            "git",
            ServerConfig::stdio(
                "python3",
                &[
                    "-m",
                    "mcp_server_git",
                    "--repository",
                    repo.to_str().unwrap(),
                ],
            ),
        ),
        (
            "fetch",
            ServerConfig::stdio(
                "python3",
                &[
                    "-m",
                    "mcp_server_fetch",
                    "--ignore-robots-txt",
                    "--allow-private-ips",
                ],
            ),
        ),
    ];
    let h = harness_in(dir, servers, Arc::new(ApproveAll)).await;
    for status in h.clients.statuses() {
        assert_eq!(status.state, ServerState::Ready, "{}", status.line());
        assert!(status.tools >= 1, "{}", status.line());
        let version = status.protocol_version.clone().unwrap_or_default();
        assert!(
            ["2025-06-18", "2025-11-25", "2026-07-28"].contains(&version.as_str()),
            "{}",
            status.line()
        );
        assert!(status.refused.is_empty(), "{}", status.line());
    }
    assert!(
        h.tool_names("everything")
            .contains(&"mcp__everything__get-sum".to_string())
    );

    // everything: echo, a sum, structured content.
    assert!(
        h.ok("mcp__everything__echo", json!({"message": "hi there"}))
            .await
            .contains("hi there")
    );
    assert!(
        h.ok("mcp__everything__get-sum", json!({"a": 2, "b": 40}))
            .await
            .contains("42")
    );
    // filesystem: list, read, write (then read back from disk).
    let listed = h
        .ok("mcp__fs__list_directory", json!({"path": shared}))
        .await;
    assert!(listed.contains("notes.txt"), "{listed}");
    let read = h
        .ok(
            "mcp__fs__read_text_file",
            json!({"path": shared.join("notes.txt")}),
        )
        .await;
    assert!(read.contains("alpha") && read.contains("beta"), "{read}");
    h.ok(
        "mcp__fs__write_file",
        json!({"path": shared.join("new.txt"), "content": "written"}),
    )
    .await;
    assert_eq!(
        std::fs::read_to_string(shared.join("new.txt")).unwrap(),
        "written"
    );
    // memory: create, then read the graph back.
    h.ok(
        "mcp__memory__create_entities",
        json!({"entities": [{"name": "Ada", "entityType": "person", "observations": ["wrote the first program"]}]}),
    )
    .await;
    let graph = h.ok("mcp__memory__read_graph", json!({})).await;
    assert!(
        graph.contains("Ada") && graph.contains("first program"),
        "{graph}"
    );
    // time: now, and a conversion.
    let now = h
        .ok("mcp__time__get_current_time", json!({"timezone": "UTC"}))
        .await;
    assert!(now.contains("UTC"), "{now}");
    let converted = h
        .ok(
            "mcp__time__convert_time",
            json!({"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"}),
        )
        .await;
    assert!(converted.contains("21:00"), "{converted}");
    // git: status and log of the repository.
    let status = h
        .ok(
            "mcp__git__git_status",
            json!({"repo_path": h.dir.path().join("repo")}),
        )
        .await;
    assert!(status.contains("b.txt"), "{status}");
    let log = h
        .ok(
            "mcp__git__git_log",
            json!({"repo_path": h.dir.path().join("repo")}),
        )
        .await;
    assert!(log.contains("the first commit"), "{log}");
    // fetch: a page from a server on 127.0.0.1 (fetch refuses nothing local), and a URL
    // that cannot be reached, which comes back as a failure with the server's words.
    let page =
        serve_page("<html><body><h1>Local page</h1><p>served for fetch</p></body></html>").await;
    let fetched = h.ok("mcp__fetch__fetch", json!({"url": page})).await;
    assert!(fetched.contains("served for fetch"), "{fetched}");
    let (failed, _) = h
        .call(
            "mcp__fetch__fetch",
            json!({"url": "http://127.0.0.1:9/nothing"}),
        )
        .await;
    assert_eq!(failed.status, Status::Failed, "{}", failed.content);
    assert!(failed.is_error);
}

/// A one-page HTTP server on 127.0.0.1; its URL.
async fn serve_page(html: &'static str) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        while let Ok((mut socket, _)) = listener.accept().await {
            let mut buf = [0u8; 4096];
            let _ = socket.read(&mut buf).await;
            let reply = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: text/html\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{html}",
                html.len()
            );
            let _ = socket.write_all(reply.as_bytes()).await;
        }
    });
    format!("http://{addr}/page")
}

/// isError, images, progress and the gate, on server-everything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_images_progress_and_the_gate() {
    let Some(everything) = npm_server("mcp-server-everything", &[]) else {
        assert!(missing("@modelcontextprotocol/server-everything"));
        return;
    };
    let Some(filesystem) = npm_server("mcp-server-filesystem", &[env!("CARGO_TARGET_TMPDIR")])
    else {
        assert!(missing("@modelcontextprotocol/server-filesystem"));
        return;
    };
    let h = harness(vec![("everything", everything.clone()), ("fs", filesystem)]).await;

    // A call the server answers with isError: a failure with its words and a next: hint.
    let (denied, _) = h
        .call("mcp__fs__read_text_file", json!({"path": "/etc/hostname"}))
        .await;
    assert_eq!(denied.status, Status::Failed, "{}", denied.content);
    assert!(denied.is_error);
    assert!(
        denied.content.contains("denied") || denied.content.contains("outside"),
        "{}",
        denied.content
    );
    assert!(denied.content.contains("next:"), "{}", denied.content);

    // An image comes back as an image part.
    let (image, _) = h.call("mcp__everything__get-tiny-image", json!({})).await;
    assert_eq!(image.status, Status::Ok, "{}", image.content);
    assert_eq!(image.images.len(), 1);
    assert!(image.images[0].starts_with("data:image/png;base64,"));

    // Progress notifications become ToolProgress events of the call.
    let (slow, outcome) = h
        .call(
            "mcp__everything__trigger-long-running-operation",
            json!({"duration": 2, "steps": 4}),
        )
        .await;
    assert_eq!(slow.status, Status::Ok, "{}", slow.content);
    let progress: Vec<String> = outcome
        .events
        .iter()
        .map(|e| serde_json::to_value(&**e).unwrap())
        .filter(|e| e["type"] == "ToolProgress")
        .map(|e| e["text"].as_str().unwrap_or("").to_string())
        .collect();
    assert!(progress.len() >= 3, "{progress:?}");
    assert!(progress.iter().any(|p| p.contains("/4")), "{progress:?}");

    // Headless: an MCP tool asks, so without a confirmer it is declined with the reason.
    let headless = harness_in(
        workdir(),
        vec![("everything", everything)],
        Arc::new(Headless),
    )
    .await;
    let (declined, _) = headless
        .call("mcp__everything__echo", json!({"message": "x"}))
        .await;
    assert_eq!(declined.status, Status::Declined, "{}", declined.content);
    assert!(
        declined.content.contains("MCP server everything"),
        "{}",
        declined.content
    );
}

/// What tooldispatch tells a server about itself: roots (the work directory) and the
/// elicitation capability, for which server-everything offers tools of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn roots_are_the_work_directory() {
    let Some(everything) = npm_server("mcp-server-everything", &[]) else {
        assert!(missing("@modelcontextprotocol/server-everything"));
        return;
    };
    let h = harness(vec![("everything", everything)]).await;
    let names = h.tool_names("everything");
    assert!(
        names.contains(&"mcp__everything__get-roots-list".to_string()),
        "{names:?}"
    );
    assert!(
        names.contains(&"mcp__everything__trigger-elicitation-request".to_string()),
        "{names:?}"
    );
    // No model to lend: the sampling tool is not offered.
    assert!(
        !names.contains(&"mcp__everything__trigger-sampling-request".to_string()),
        "{names:?}"
    );
    let roots = h.ok("mcp__everything__get-roots-list", json!({})).await;
    let workdir = h.dir.path().display().to_string();
    assert!(roots.contains(&format!("file://{workdir}")), "{roots}");
}

/// trust_annotations lets a read-only-annotated tool run without asking; rules work on MCP
/// names.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trusted_annotations_and_rules_decide_who_asks() {
    let Some(everything) = npm_server("mcp-server-everything", &[]) else {
        assert!(missing("@modelcontextprotocol/server-everything"));
        return;
    };
    let trusted = ServerConfig {
        trust_annotations: true,
        ..everything.clone()
    };
    let h = harness_in(workdir(), vec![("everything", trusted)], Arc::new(Headless)).await;
    // echo is annotated readOnlyHint: true, destructiveHint: false.
    assert!(
        h.ok("mcp__everything__echo", json!({"message": "trusted"}))
            .await
            .contains("trusted")
    );
    // toggle-simulated-logging is not read-only: still asks (and headless declines).
    let (asked, _) = h
        .call("mcp__everything__toggle-simulated-logging", json!({}))
        .await;
    assert_eq!(asked.status, Status::Declined, "{}", asked.content);

    // A rule in a trusted work directory allows one MCP tool by name.
    let dir = workdir();
    std::fs::create_dir_all(dir.path().join(".tooldispatch")).unwrap();
    std::fs::write(
        dir.path().join(".tooldispatch/rules"),
        "allow mcp__everything__get-sum\n",
    )
    .unwrap();
    let mut registry = Registry::empty();
    register_system_tools(&mut registry).unwrap();
    let mut config = EngineConfig::new(dir.path());
    config.trust_workdir = true;
    let engine = Engine::new(
        registry,
        dispatch_store::open("memory:").unwrap(),
        Arc::new(Headless),
        config,
    )
    .unwrap();
    let clients = McpClients::start(
        [("everything".to_string(), everything)],
        ClientOptions::new(dir.path()),
    )
    .await;
    engine.update_registry(|r| clients.register_into(r));
    let ruled = Harness {
        engine,
        clients,
        dir,
        rounds: AtomicUsize::new(0),
    };
    assert!(
        ruled
            .ok("mcp__everything__get-sum", json!({"a": 1, "b": 2}))
            .await
            .contains('3')
    );
    let (other, _) = ruled
        .call("mcp__everything__echo", json!({"message": "x"}))
        .await;
    assert_eq!(other.status, Status::Declined, "{}", other.content);
}

/// Deferred like the built-ins: listed by name in the turn context, found by find_tools.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_tools_are_deferred_and_found_by_find_tools() {
    let Some(everything) = npm_server("mcp-server-everything", &[]) else {
        assert!(missing("@modelcontextprotocol/server-everything"));
        return;
    };
    let h = harness(vec![("everything", everything)]).await;
    let (tools, context) = h
        .engine
        .tools("s", Provider::OpenAi, &[], &[])
        .await
        .unwrap();
    let names: Vec<&str> = tools
        .iter()
        .filter_map(|t| t["function"]["name"].as_str())
        .collect();
    assert!(!names.iter().any(|n| n.starts_with("mcp__")), "{names:?}");
    assert!(context.contains("mcp__everything__get-sum"), "{context}");
    let (found, _) = h
        .call(
            "find_tools",
            json!({"query": "select:mcp__everything__get-sum"}),
        )
        .await;
    assert!(
        found.content.contains("\"a\""),
        "the schema is shown: {}",
        found.content
    );
}

/// A server that dies mid-call fails that call with its last words, is restarted, and the
/// next call works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_killed_mid_call_is_restarted() {
    if !python_has("mcp") {
        assert!(missing("the Python MCP SDK (pip mcp)"));
        return;
    }
    let dir = workdir();
    let mut config = misbehaving("normal");
    config.env.insert(
        "STARTS_FILE".into(),
        dir.path().join("starts").display().to_string(),
    );
    let h = harness_in(dir, vec![("odd", config)], Arc::new(ApproveAll)).await;
    assert_eq!(
        h.state("odd").state,
        ServerState::Ready,
        "{}",
        h.state("odd").line()
    );
    assert_eq!(h.ok("mcp__odd__starts", json!({})).await, "1");
    let (crashed, _) = h.call("mcp__odd__crash", json!({})).await;
    assert_eq!(crashed.status, Status::Failed, "{}", crashed.content);
    assert!(
        crashed.content.contains("stopped while running"),
        "{}",
        crashed.content
    );
    assert!(
        crashed.content.contains("about to crash on purpose"),
        "{}",
        crashed.content
    );
    // Back after the first back-off (1 s).
    assert!(
        h.wait_until(Duration::from_secs(20), |h| h.state("odd").state
            == ServerState::Ready
            && !h.tool_names("odd").is_empty())
            .await,
        "{}",
        h.state("odd").line()
    );
    assert_eq!(h.ok("mcp__odd__starts", json!({})).await, "2");
}

/// A server that never finishes the handshake: its tools are absent and the reason is one line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_never_initializes_is_left_out_with_the_reason() {
    let config = ServerConfig {
        startup_timeout_s: 2,
        ..misbehaving("hang")
    };
    let started = std::time::Instant::now();
    let h = harness(vec![("stuck", config)]).await;
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "start waited {:?}",
        started.elapsed()
    );
    let status = h.state("stuck");
    assert_eq!(status.state, ServerState::Failed);
    assert!(h.tool_names("stuck").is_empty());
    let line = status.line();
    assert!(line.contains("within 2 s"), "{line}");
    assert!(!line.contains('\n'), "{line}");
    // A command that does not exist is reported the same way.
    let h = harness(vec![(
        "nothing",
        ServerConfig::stdio("/nonexistent/mcp-server", &[]),
    )])
    .await;
    assert!(
        h.state("nothing")
            .line()
            .contains("cannot start /nonexistent/mcp-server"),
        "{}",
        h.state("nothing").line()
    );
}

/// A server that floods progress notifications gets a bounded number of events.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_progress_flood_is_thinned() {
    if !python_has("mcp") {
        assert!(missing("the Python MCP SDK (pip mcp)"));
        return;
    }
    let h = harness(vec![("odd", misbehaving("normal"))]).await;
    let (result, outcome) = h.call("mcp__odd__flood", json!({"count": 3000})).await;
    assert_eq!(result.status, Status::Ok, "{}", result.content);
    let progress = outcome
        .events
        .iter()
        .filter(|e| serde_json::to_value(&***e).unwrap()["type"] == "ToolProgress")
        .count();
    assert!(
        (1..=500).contains(&progress),
        "{progress} progress events for 3000 notifications"
    );
}

/// Lines on stdout that are not JSON-RPC do not stop a server from being used.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_on_stdout_is_skipped() {
    if !python_has("mcp") {
        assert!(missing("the Python MCP SDK (pip mcp)"));
        return;
    }
    let h = harness(vec![("noisy", misbehaving("garbage"))]).await;
    assert_eq!(
        h.state("noisy").state,
        ServerState::Ready,
        "{}",
        h.state("noisy").line()
    );
    assert!(
        h.ok("mcp__noisy__slow", json!({"seconds": 0.2}))
            .await
            .contains("slept")
    );
}

/// A confirmer whose user answers questions with fixed answers.
struct Answering {
    answers: Option<Vec<String>>,
    asked: std::sync::Mutex<Vec<Question>>,
}

#[async_trait]
impl Confirmer for Answering {
    async fn confirm(&self, _request: &ConfirmRequest) -> ConfirmReply {
        ConfirmReply {
            approve: true,
            ..ConfirmReply::default()
        }
    }
    async fn ask(&self, questions: &[Question]) -> Option<Vec<String>> {
        self.asked.lock().unwrap().extend(questions.iter().cloned());
        self.answers.clone()
    }
    fn interactive(&self) -> bool {
        true
    }
}

/// elicitation/create reaches the user: answered, declined by them, declined headless.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elicitation_goes_to_the_user_or_is_declined() {
    if !python_has("mcp") {
        assert!(missing("the Python MCP SDK (pip mcp)"));
        return;
    }
    let user = Arc::new(Answering {
        answers: Some(vec!["teal".into()]),
        asked: Default::default(),
    });
    let h = harness_in(
        workdir(),
        vec![("odd", misbehaving("normal"))],
        user.clone(),
    )
    .await;
    assert_eq!(
        h.ok("mcp__odd__ask_color", json!({})).await,
        "the user chose teal"
    );
    let asked = user.asked.lock().unwrap().clone();
    assert_eq!(asked.len(), 1);
    assert!(asked[0].question.contains("Which colour"), "{asked:?}");

    let silent = Arc::new(Answering {
        answers: None,
        asked: Default::default(),
    });
    let h = harness_in(workdir(), vec![("odd", misbehaving("normal"))], silent).await;
    assert_eq!(
        h.ok("mcp__odd__ask_color", json!({})).await,
        "the user answered: decline"
    );

    // Headless: the call itself asks first, so allow it by rule-free approval and let no one
    // answer the server's question.
    struct ApproveOnly;
    #[async_trait]
    impl Confirmer for ApproveOnly {
        async fn confirm(&self, _request: &ConfirmRequest) -> ConfirmReply {
            ConfirmReply {
                approve: true,
                ..ConfirmReply::default()
            }
        }
    }
    let h = harness_in(
        workdir(),
        vec![("odd", misbehaving("normal"))],
        Arc::new(ApproveOnly),
    )
    .await;
    let (result, outcome) = h.call("mcp__odd__ask_color", json!({})).await;
    assert_eq!(
        result.content,
        "[mcp__odd__ask_color] the user answered: decline"
    );
    let said = outcome
        .events
        .iter()
        .map(|e| serde_json::to_value(&**e).unwrap())
        .any(|e| {
            e["type"] == "ToolProgress"
                && e["text"]
                    .as_str()
                    .unwrap_or("")
                    .contains("no one is available")
        });
    assert!(said, "the progress says why it was declined");
}

/// notifications/tools/list_changed refreshes the server's tools.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_tool_list_is_picked_up() {
    if !python_has("mcp") {
        assert!(missing("the Python MCP SDK (pip mcp)"));
        return;
    }
    let h = harness(vec![("odd", misbehaving("normal"))]).await;
    assert!(!h.tool_names("odd").contains(&"mcp__odd__late".to_string()));
    // As the daemon and `tooldispatch mcp` do: follow the servers' changes, nothing else
    // re-registers the tools here.
    let appeared = async {
        h.ok("mcp__odd__add_tool", json!({})).await;
        for _ in 0..100 {
            if h.tool_names("odd").contains(&"mcp__odd__late".to_string()) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        false
    };
    let appeared = tokio::select! {
        () = h.clients.follow(&h.engine) => unreachable!("follow returns only when dropped"),
        appeared = appeared => appeared,
    };
    assert!(appeared, "{:?}", h.tool_names("odd"));
    assert_eq!(h.ok("mcp__odd__late", json!({})).await, "late and present");
}

/// A call that times out, and a round cancelled while its call runs (Ctrl-C), send
/// notifications/cancelled: the server stops the call, and stays usable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timed_out_and_cancelled_calls_are_cancelled_on_the_server() {
    if !python_has("mcp") {
        assert!(missing("the Python MCP SDK (pip mcp)"));
        return;
    }
    let dir = workdir();
    let cancels = dir.path().join("cancels");
    let mut config = ServerConfig {
        timeout_s: 1,
        ..misbehaving("normal")
    };
    config
        .env
        .insert("CANCELS_FILE".into(), cancels.display().to_string());
    let h = harness_in(dir, vec![("odd", config)], Arc::new(ApproveAll)).await;
    let cancelled_calls = || {
        std::fs::read_to_string(&cancels)
            .unwrap_or_default()
            .lines()
            .count()
    };

    // Progress every 2.5 s is slower than the 1 s idle limit.
    let (timed_out, _) = h.call("mcp__odd__slow", json!({"seconds": 10})).await;
    assert_eq!(timed_out.status, Status::TimedOut, "{}", timed_out.content);
    assert!(
        timed_out.content.contains("without progress"),
        "{}",
        timed_out.content
    );
    assert!(
        h.wait_until(Duration::from_secs(5), |_| cancelled_calls() == 1)
            .await,
        "the server never heard of the timeout"
    );
    assert!(!h.ok("mcp__odd__starts", json!({})).await.is_empty());

    // The round is cancelled once the call is running on the server (its first progress).
    h.round("find_tools", json!({"query": "select:mcp__odd__slow"}))
        .await;
    let call = RawCall::new(
        "cancelled",
        "run_tool",
        json!({"name": "mcp__odd__slow", "args": {"seconds": 2.4}}).to_string(),
    );
    let mut request = RoundRequest::new("s", "cancelled-run", Provider::OpenAi, vec![call]);
    request.live = Some(Arc::new(CancelOnProgress(request.cancel.clone())));
    assert!(
        h.engine.round(request).await.is_err(),
        "a cancelled round commits nothing"
    );
    assert!(
        h.wait_until(Duration::from_secs(5), |_| cancelled_calls() == 2)
            .await,
        "the server never heard of the cancelled round"
    );
    assert_eq!(h.state("odd").state, ServerState::Ready);
    assert!(
        h.ok("mcp__odd__slow", json!({"seconds": 0.1}))
            .await
            .contains("slept")
    );
}

/// Cancels a round at its first progress event, as Ctrl-C would mid-call.
struct CancelOnProgress(tokio_util::sync::CancellationToken);

impl dispatch_engine::EventSink for CancelOnProgress {
    fn send(&self, event: &Arc<dispatch_engine::Event>) {
        if serde_json::to_value(&**event).is_ok_and(|e| e["type"] == "ToolProgress") {
            self.0.cancel();
        }
    }
}

/// A Streamable HTTP server (server-everything in its streamableHttp mode).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamable_http_server() {
    let bin = npm_bin("mcp-server-everything");
    if !bin.exists() {
        assert!(missing("@modelcontextprotocol/server-everything"));
        return;
    }
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let mut server = tokio::process::Command::new(&bin)
        .arg("streamableHttp")
        .env("PORT", port.to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let url = format!("http://127.0.0.1:{port}/mcp");
    for _ in 0..100 {
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let h = harness(vec![("web", ServerConfig::http(&url))]).await;
    let status = h.state("web");
    assert_eq!(status.state, ServerState::Ready, "{}", status.line());
    assert_eq!(status.transport, "http");
    assert!(
        h.ok("mcp__web__get-sum", json!({"a": 20, "b": 22}))
            .await
            .contains("42")
    );
    assert!(
        h.ok("mcp__web__echo", json!({"message": "over http"}))
            .await
            .contains("over http")
    );
    let _ = server.kill().await;
}

/// A server written against 2025-06-18 alone: the discovery probe falls back to `initialize`,
/// and that revision is what is spoken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2025_06_18_server_is_spoken_to_in_its_revision() {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/servers/raw_2025_06_18.py");
    let h = harness(vec![(
        "old",
        ServerConfig::stdio("python3", &[script.to_str().unwrap()]),
    )])
    .await;
    let status = h.state("old");
    assert_eq!(status.state, ServerState::Ready, "{}", status.line());
    assert_eq!(
        status.protocol_version.as_deref(),
        Some("2025-06-18"),
        "{}",
        status.line()
    );
    assert_eq!(h.ok("mcp__old__add", json!({"a": 19, "b": 23})).await, "42");
}

/// `sandbox = true`: the server writes in the work directory only and cannot read what the
/// sandbox hides (here the work directory's `.tooldispatch/`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandboxed_server_is_confined() {
    if !python_has("mcp") {
        assert!(missing("the Python MCP SDK (pip mcp)"));
        return;
    }
    if let Some(why) = dispatch_sandbox::Sandbox::shared().missing() {
        dispatch_testkit::skip(dispatch_testkit::Need::Sandbox, &why);
        return;
    }
    let dir = workdir();
    let outside = workdir();
    std::fs::create_dir_all(dir.path().join(".tooldispatch")).unwrap();
    std::fs::write(dir.path().join(".tooldispatch/rules"), "allow *\n").unwrap();
    // The sandbox shows the server little of the machine (its /tmp is its own, and a clone
    // of this repository may live there): the script runs from the work directory.
    let script = dir.path().join("misbehaving.py");
    std::fs::copy(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/servers/misbehaving.py"),
        &script,
    )
    .unwrap();
    let config = ServerConfig {
        sandbox: true,
        network: false,
        ..ServerConfig::stdio("python3", &[script.to_str().unwrap(), "normal"])
    };
    let h = harness_in(dir, vec![("boxed", config)], Arc::new(ApproveAll)).await;
    assert_eq!(
        h.state("boxed").state,
        ServerState::Ready,
        "{}",
        h.state("boxed").line()
    );
    let inside = h.dir.path().join("inside.txt");
    assert_eq!(
        h.ok("mcp__boxed__write", json!({"path": inside, "text": "ok"}))
            .await,
        "written"
    );
    assert_eq!(std::fs::read_to_string(&inside).unwrap(), "ok");
    let escaped = outside.path().join("escaped.txt");
    let refused = h
        .ok("mcp__boxed__write", json!({"path": escaped, "text": "no"}))
        .await;
    assert!(refused.starts_with("refused"), "{refused}");
    assert!(!escaped.exists());
    let hidden = h
        .ok(
            "mcp__boxed__read",
            json!({"path": h.dir.path().join(".tooldispatch/rules")}),
        )
        .await;
    assert!(hidden.starts_with("refused"), "{hidden}");
    assert_eq!(
        h.ok("mcp__boxed__cwd", json!({})).await,
        h.dir.path().display().to_string()
    );

    // Outside a trusted work directory a server without `cwd` starts in our own directory,
    // which the sandbox hides: a sandboxed one starts at `/` instead, and still runs.
    let mut options = ClientOptions::new(h.dir.path());
    options.start_dir = outside.path().to_path_buf();
    let untrusted = ServerConfig {
        sandbox: true,
        network: false,
        ..ServerConfig::stdio("python3", &[script.to_str().unwrap(), "normal"])
    };
    let clients = McpClients::start([("boxed".to_string(), untrusted)], options).await;
    h.engine.update_registry(|r| clients.register_into(r));
    let status = clients.statuses().remove(0);
    assert_eq!(status.state, ServerState::Ready, "{}", status.line());
    assert_eq!(h.ok("mcp__boxed__cwd", json!({})).await, "/");
}

/// Servers slower to start than the discovery probe's ten seconds answer it after `initialize`
/// went out. That late answer tells which revision each speaks: the modern one is started
/// again with discovery alone, the 2025-06-18 one with `initialize` alone, and both are up on
/// the first start of the harness.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_slower_than_the_discovery_probe_start_in_their_own_revision() {
    if !python_has("mcp") {
        assert!(missing("the Python MCP SDK (pip mcp)"));
        return;
    }
    let dir = workdir();
    let slow = |name: &str, mut config: ServerConfig| {
        config.env.insert(
            "SLOW_FIRST_START".into(),
            dir.path()
                .join(format!("{name}.started"))
                .display()
                .to_string(),
        );
        config.env.insert(
            "STARTS_FILE".into(),
            dir.path()
                .join(format!("{name}.starts"))
                .display()
                .to_string(),
        );
        config.startup_timeout_s = 60;
        config
    };
    let raw = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/servers/raw_2025_06_18.py");
    let servers = vec![
        ("modern", slow("modern", misbehaving("normal"))),
        (
            "old",
            slow(
                "old",
                ServerConfig::stdio("python3", &[raw.to_str().unwrap()]),
            ),
        ),
    ];
    let h = harness_in(dir, servers, Arc::new(ApproveAll)).await;
    for (server, version) in [("modern", "2026-07-28"), ("old", "2025-06-18")] {
        let status = h.state(server);
        assert_eq!(status.state, ServerState::Ready, "{}", status.line());
        assert_eq!(
            status.protocol_version.as_deref(),
            Some(version),
            "{}",
            status.line()
        );
    }
    // The slow first start was abandoned and the second one serves.
    assert_eq!(h.ok("mcp__modern__starts", json!({})).await, "2");
    assert_eq!(h.ok("mcp__old__add", json!({"a": 19, "b": 23})).await, "42");
}
