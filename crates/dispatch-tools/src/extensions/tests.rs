//! Script, ext and test_tool end to end: real programs in the real sandbox, real files,
//! a real HTTP server on 127.0.0.1, through real rounds of the engine.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use dispatch_engine::{
    ApproveAll, ConfirmReply, ConfirmRequest, Confirmer, Engine, EngineConfig, Headless, Provider,
    RawCall, RoundOutcome, RoundRequest, Status,
};
use dispatch_store::Store;
use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use tempfile::TempDir;

use super::definition::{self, Scope};
use super::{ExtensionTools, ToolDirs};
use crate::test_support::{call, run_tool, sandbox_present};
use crate::web::NetPolicy;

/// An engine with the built-ins and the script/ext tools of its own user, project and
/// extensions folders.
struct Fixture {
    engine: Engine,
    store: Arc<dyn Store>,
    ext: Arc<ExtensionTools>,
    user: PathBuf,
    project: PathBuf,
    extensions: PathBuf,
    workdir: PathBuf,
    _dirs: TempDir,
}

/// Approves everything and counts the questions.
#[derive(Default)]
struct Counting {
    asked: AtomicUsize,
}

#[async_trait]
impl Confirmer for Counting {
    async fn confirm(&self, _request: &ConfirmRequest) -> ConfirmReply {
        self.asked.fetch_add(1, Ordering::SeqCst);
        ConfirmReply {
            approve: true,
            ..ConfirmReply::default()
        }
    }
}

impl Fixture {
    fn new(confirmer: Arc<dyn Confirmer>) -> Fixture {
        Fixture::with(confirmer, true, NetPolicy::default())
    }

    fn with(confirmer: Arc<dyn Confirmer>, trusted: bool, net: NetPolicy) -> Fixture {
        Fixture::build(confirmer, trusted, net, Default::default())
    }

    fn build(
        confirmer: Arc<dyn Confirmer>,
        trusted: bool,
        net: NetPolicy,
        sandbox: crate::shell::process::SandboxConfig,
    ) -> Fixture {
        let dirs = tempfile::tempdir().unwrap();
        let root = dirs.path().canonicalize().unwrap();
        let workdir = root.join("work");
        std::fs::create_dir_all(&workdir).unwrap();
        let data = root.join("data");
        std::fs::create_dir_all(&data).unwrap();
        let user = root.join("config/tools");
        let project = workdir.join(".tooldispatch/tools");
        let extensions = root.join("data/extensions");
        let net = Arc::new(net);
        let store = dispatch_store::open("memory:").unwrap();
        let stores = crate::Stores::all(&store);
        let ext = Arc::new(ExtensionTools::new(
            ToolDirs {
                user: Some(user.clone()),
                project: trusted.then(|| project.clone()),
                extensions: Some(extensions.clone()),
            },
            sandbox.clone(),
            net.clone(),
            stores.clone(),
        ));
        let config = crate::ToolsConfig {
            sandbox,
            net,
            extensions: Some(ext.clone()),
            ..crate::ToolsConfig::default()
        };
        let registry = crate::builtin_registry_with(&config, &stores).unwrap();
        let mut engine_config = EngineConfig::new(workdir.clone());
        engine_config.data_dir = Some(data);
        engine_config.trust_workdir = trusted;
        let engine = Engine::new(registry, store.clone(), confirmer, engine_config)
            .unwrap()
            .with_result_cache(store.clone())
            .with_secrets(store.clone())
            .with_tool_source(ext.clone());
        Fixture {
            engine,
            store,
            ext,
            user,
            project,
            extensions,
            workdir,
            _dirs: dirs,
        }
    }

    /// One round, in a run of its own (so nothing is deduplicated across rounds).
    async fn round(&self, session: &str, calls: Vec<RawCall>) -> RoundOutcome {
        static RUN: AtomicUsize = AtomicUsize::new(0);
        let run = format!("r{}", RUN.fetch_add(1, Ordering::SeqCst));
        self.engine
            .round(RoundRequest::new(session, &run, Provider::OpenAi, calls))
            .await
            .unwrap()
    }

    /// Fetch `name`'s schema, so run_tool runs it.
    async fn select(&self, session: &str, name: &str) {
        let out = self
            .round(
                session,
                vec![call(
                    "s",
                    "find_tools",
                    json!({"query": format!("select:{name}")}),
                )],
            )
            .await;
        assert_eq!(out.results[0].status, Status::Ok);
    }

    /// One `run_tool` call of `name`, its schema fetched first.
    async fn run(&self, session: &str, name: &str, args: Value) -> (Status, String) {
        self.select(session, name).await;
        let out = self.round(session, vec![run_tool("c", name, args)]).await;
        let r = &out.results[0];
        // A result reads `[name] text` (seed §1.3); the text is what the tool answered.
        let prefix = format!("[{name}] ");
        let text = r.content.strip_prefix(&prefix).unwrap_or(&r.content);
        (r.status, text.to_string())
    }
}

/// Write a tool folder: `tool.json` and `files` (name, text, executable).
fn write_tool(parent: &Path, folder: &str, def: Value, files: &[(&str, &str, bool)]) -> PathBuf {
    let dir = parent.join(folder);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("tool.json"),
        serde_json::to_vec_pretty(&def).unwrap(),
    )
    .unwrap();
    for (name, text, executable) in files {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        if *executable {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
    }
    dir
}

fn def(name: &str, extra: Value) -> Value {
    let mut d = json!({
        "name": name,
        "description": format!("test tool {name}"),
        "parameters": {"type": "object", "properties": {"text": {"type": "string"}}},
    });
    for (k, v) in extra.as_object().unwrap() {
        d[k] = v.clone();
    }
    d
}

const PY_COUNT: &str = "import json, sys\nargs = json.load(sys.stdin)\nprint(json.dumps({'words': len(args.get('text', '').split())}))\n";

#[tokio::test]
async fn python_and_sh_tools_read_json_on_stdin_and_answer_on_stdout() {
    if !sandbox_present() {
        return;
    }
    let f = Fixture::new(Arc::new(Headless));
    write_tool(
        &f.user,
        "count",
        def("count", json!({"read_only": true})),
        &[("script.py", PY_COUNT, false)],
    );
    write_tool(
        &f.user,
        "shout",
        def("shout", json!({"read_only": true})),
        &[(
            "script.sh",
            "read -r line\nprintf '%s' \"$line\" | tr a-z A-Z\necho\necho \"dir=$TOOLDISPATCH_TOOL_DIR pwd=$(pwd)\"\n",
            false,
        )],
    );
    let (status, text) = f
        .run("s", "script_count", json!({"text": "one two three"}))
        .await;
    assert_eq!(
        (status, text.as_str()),
        (Status::Ok, "{\n  \"words\": 3\n}")
    );
    let (status, text) = f.run("s", "script_shout", json!({"text": "hi"})).await;
    assert_eq!(status, Status::Ok, "{text}");
    assert_eq!(
        text,
        format!(
            "{{\"TEXT\":\"HI\"}}\ndir=/tmp/tooldispatch-tool pwd={}",
            f.workdir.display()
        )
    );
}

#[tokio::test]
async fn concurrency_is_what_the_definition_declares() {
    if !sandbox_present() {
        return;
    }
    let f = Fixture::new(Arc::new(Headless));
    let sleepy = "import time, sys\nsys.stdin.read()\ntime.sleep(0.6)\nprint('done')\n";
    write_tool(
        &f.user,
        "par",
        def("par", json!({"read_only": true, "concurrent": true})),
        &[("script.py", sleepy, false)],
    );
    write_tool(
        &f.user,
        "ser",
        def("ser", json!({"read_only": true})),
        &[("script.py", sleepy, false)],
    );
    let overlapped = |out: &RoundOutcome| {
        let a = &out.results[0];
        let b = &out.results[1];
        assert_eq!(
            (a.status, b.status),
            (Status::Ok, Status::Ok),
            "{a:?} {b:?}"
        );
        a.started_ms.unwrap() < b.ended_ms.unwrap() && b.started_ms.unwrap() < a.ended_ms.unwrap()
    };
    for (name, concurrent) in [("script_par", true), ("script_ser", false)] {
        f.select(name, name).await;
        let out = f
            .round(
                name,
                vec![
                    run_tool("a", name, json!({"text": "a"})),
                    run_tool("b", name, json!({"text": "b"})),
                ],
            )
            .await;
        assert_eq!(overlapped(&out), concurrent, "{name}: {:?}", out.results);
    }
}

/// No process whose command line holds `marker` is left on the machine.
fn survivors(marker: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        if let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) {
            let text = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            if text.contains(marker) {
                found.push(text);
            }
        }
    }
    found
}

#[tokio::test]
async fn a_hanging_script_is_killed_with_everything_it_started_at_its_timeout() {
    if !sandbox_present() {
        return;
    }
    let f = Fixture::new(Arc::new(Headless));
    let marker = format!("{}.{}", std::process::id() % 1000 + 1000, 4321);
    write_tool(
        &f.user,
        "hang",
        def("hang", json!({"read_only": true, "timeout_s": 1})),
        &[(
            "script.sh",
            &format!("sleep {marker} &\necho started >&2\nsleep {marker}\n"),
            false,
        )],
    );
    let started = std::time::Instant::now();
    let (status, text) = f.run("s", "script_hang", json!({})).await;
    assert_eq!(status, Status::Failed, "{text}");
    assert!(
        text.contains("timed out after 1 s; it and every process it started were stopped")
            && text.contains("started")
            && text.contains("timeout_s"),
        "{text}"
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(20));
    // The group is stopped before the call returns; give the kernel a moment to reap.
    for _ in 0..50 {
        if survivors(&marker).is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(survivors(&marker), Vec::<String>::new());
}

#[tokio::test]
async fn a_flood_of_output_is_capped_and_spilled_and_a_failure_carries_stderr() {
    if !sandbox_present() {
        return;
    }
    let f = Fixture::new(Arc::new(Headless));
    write_tool(
        &f.user,
        "flood",
        def("flood", json!({"read_only": true, "timeout_s": 120})),
        &[(
            "script.sh",
            "head -c 100000000 /dev/zero | tr '\\0' 'a' | fold -w 99\n",
            false,
        )],
    );
    write_tool(
        &f.user,
        "fails",
        def("fails", json!({"read_only": true})),
        &[(
            "script.py",
            "import sys\nprint('partial')\nprint('Traceback: ValueError: bad input', file=sys.stderr)\nsys.exit(1)\n",
            false,
        )],
    );
    let (status, text) = f.run("s", "script_flood", json!({})).await;
    assert_eq!(status, Status::Ok, "{}", &text[..text.len().min(500)]);
    assert!(text.len() < 100_000, "{} bytes came back", text.len());
    let spilled = text
        .split_whitespace()
        .find(|w| w.contains(".stdout.out"))
        .map(|w| w.trim_matches(|c: char| !(c.is_alphanumeric() || "/._-".contains(c))))
        .unwrap_or_else(|| panic!("no spill path in: {}", &text[..text.len().min(800)]));
    // 100 MB and a newline every 99 bytes, all of it.
    assert_eq!(
        std::fs::metadata(spilled).unwrap().len(),
        100_000_000 + 100_000_000 / 99
    );

    let (status, text) = f.run("s", "script_fails", json!({})).await;
    assert_eq!(status, Status::Failed);
    assert!(
        text.contains("script_fails failed: exit code 1")
            && text.contains("Traceback: ValueError: bad input"),
        "{text}"
    );
}

#[tokio::test]
async fn the_sandbox_stops_writes_outside_and_the_network_unless_declared() {
    if !sandbox_present() {
        return;
    }
    let f = Fixture::new(Arc::new(ApproveAll));
    // Outside the work directory and not under /tmp (the sandbox's own /tmp is private).
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let base = if manifest.starts_with("/tmp") {
        Path::new("/var/tmp")
    } else {
        manifest
    };
    let outside = tempfile::tempdir_in(base).unwrap();
    let target = outside.path().join("escaped.txt");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let script = format!(
        "import socket, sys\nsys.stdin.read()\ntry:\n    open({target:?}, 'w').write('x')\n    print('wrote')\nexcept OSError as e:\n    print('write refused')\ntry:\n    socket.create_connection(('127.0.0.1', {port}), timeout=3)\n    print('connected')\nexcept OSError:\n    print('network refused')\n",
        target = target.display().to_string()
    );
    write_tool(
        &f.user,
        "escape",
        def("escape", json!({})),
        &[("script.py", &script, false)],
    );
    write_tool(
        &f.user,
        "online",
        def("online", json!({"network": true})),
        &[("script.py", &script, false)],
    );
    let (status, text) = f.run("s", "script_escape", json!({})).await;
    assert_eq!(
        (status, text.as_str()),
        (Status::Ok, "write refused\nnetwork refused")
    );
    assert!(!target.exists());
    let (status, text) = f.run("s", "script_online", json!({})).await;
    assert_eq!(
        (status, text.as_str()),
        (Status::Ok, "write refused\nconnected")
    );
    assert!(!target.exists());
    drop(listener);
}

#[tokio::test]
async fn who_asks_a_users_read_only_tool_runs_a_changing_one_asks_a_project_one_asks_once() {
    if !sandbox_present() {
        return;
    }
    let headless = Fixture::new(Arc::new(Headless));
    write_tool(
        &headless.user,
        "reader",
        def("reader", json!({"read_only": true})),
        &[("script.sh", "echo read\n", false)],
    );
    write_tool(
        &headless.user,
        "writer",
        def("writer", json!({})),
        &[("script.sh", "echo wrote\n", false)],
    );
    write_tool(
        &headless.user,
        "net",
        def("net", json!({"read_only": true, "network": true})),
        &[("script.sh", "echo net\n", false)],
    );
    assert_eq!(
        headless.run("s", "script_reader", json!({})).await,
        (Status::Ok, "read".to_string())
    );
    for name in ["script_writer", "script_net"] {
        let (status, text) = headless.run("s", name, json!({})).await;
        assert_eq!(status, Status::Declined, "{name}: {text}");
        assert!(text.contains(name), "{text}");
    }

    let counting = Arc::new(Counting::default());
    let f = Fixture::new(counting.clone());
    write_tool(
        &f.project,
        "local",
        def("local", json!({"read_only": true})),
        &[("script.sh", "echo local\n", false)],
    );
    for (session, asked) in [("a", 1), ("a", 1), ("b", 2)] {
        let (status, text) = f.run(session, "script_local", json!({})).await;
        assert_eq!((status, text.as_str()), (Status::Ok, "local"));
        assert_eq!(
            counting.asked.load(Ordering::SeqCst),
            asked,
            "session {session}"
        );
    }
    // An edit makes it a new tool, asked about again.
    write_tool(
        &f.project,
        "local",
        def(
            "local",
            json!({"read_only": true, "description": "changed"}),
        ),
        &[],
    );
    f.run("a", "script_local", json!({})).await;
    assert_eq!(counting.asked.load(Ordering::SeqCst), 3);
    // So does a change to its program alone (a `git pull` in the project, say).
    std::fs::write(f.project.join("local/script.sh"), "echo pulled\n").unwrap();
    assert_eq!(
        f.run("a", "script_local", json!({})).await,
        (Status::Ok, "pulled".to_string())
    );
    assert_eq!(counting.asked.load(Ordering::SeqCst), 4);
    f.run("a", "script_local", json!({})).await;
    assert_eq!(counting.asked.load(Ordering::SeqCst), 4);
    // test_tool runs it only after the same once-per-session question.
    for asked in [5, 5] {
        let (status, text) = f.run("c", "test_tool", json!({"name": "local"})).await;
        assert_eq!(status, Status::Ok, "{text}");
        assert!(text.contains("\"stdout\": \"pulled\""), "{text}");
        assert_eq!(counting.asked.load(Ordering::SeqCst), asked);
    }

    // An untrusted work directory's tools are not loaded at all.
    let untrusted = Fixture::with(Arc::new(ApproveAll), false, NetPolicy::default());
    write_tool(
        &untrusted.project,
        "local",
        def("local", json!({"read_only": true})),
        &[("script.sh", "echo local\n", false)],
    );
    let (status, _) = untrusted.run("s", "script_local", json!({})).await;
    assert_eq!(status, Status::NotFound);
}

#[tokio::test]
async fn definitions_reload_when_their_files_change() {
    let f = Fixture::new(Arc::new(Headless));
    let describe = |out: &RoundOutcome| out.results[0].content.clone();
    let find = |name: &str| {
        vec![call(
            "f",
            "find_tools",
            json!({"query": format!("select:{name}")}),
        )]
    };
    write_tool(
        &f.user,
        "t",
        def("t", json!({})),
        &[("script.sh", "echo\n", false)],
    );
    assert!(describe(&f.round("s", find("script_t")).await).contains("test tool t"));
    write_tool(
        &f.user,
        "t",
        def("t", json!({"description": "now it counts words"})),
        &[],
    );
    assert!(describe(&f.round("s", find("script_t")).await).contains("now it counts words"));
    // Broken: left out, with the reason kept for `tools --check`.
    std::fs::write(f.user.join("t/tool.json"), "{\"name\": \"t\",").unwrap();
    let out = f.round("s", find("script_t")).await;
    assert!(
        !describe(&out).contains("now it counts words"),
        "{}",
        describe(&out)
    );
    assert!(!f.engine.registry().contains("script_t"));
    let problems: Vec<String> = f.ext.problems().iter().map(ToString::to_string).collect();
    assert!(
        problems
            .iter()
            .any(|p| p.contains("t/tool.json: (file): is not valid JSON")),
        "{problems:?}"
    );
    // Nothing changed: no reload (the same registry is kept).
    let before = f.engine.registry();
    f.round("s", find("calculate")).await;
    assert!(Arc::ptr_eq(&before, &f.engine.registry()));
}

/// Every bad definition is refused with its field and a reason; none crashes the loader.
#[test]
fn bad_definitions_are_refused_with_file_field_and_reason() {
    let root = tempfile::tempdir().unwrap();
    let ok_params = json!({"type": "object", "properties": {}});
    let base = |extra: Value| {
        let mut d = json!({"name": "t", "description": "d", "parameters": ok_params});
        for (k, v) in extra.as_object().unwrap() {
            if v.is_null() {
                d.as_object_mut().unwrap().remove(k);
            } else {
                d[k] = v.clone();
            }
        }
        d.to_string()
    };
    let cases: Vec<(&str, String, &str, &str)> = vec![
        (
            "not json",
            "{\"name\": ".into(),
            "(file)",
            "is not valid JSON",
        ),
        (
            "array root",
            "[1, 2]".into(),
            "(file)",
            "must be a JSON object",
        ),
        (
            "unknown field",
            base(json!({"read-only": true})),
            "read-only",
            "unknown field",
        ),
        ("no name", base(json!({"name": null})), "name", "missing"),
        (
            "name not text",
            base(json!({"name": 7})),
            "name",
            "must be a string",
        ),
        (
            "empty name",
            base(json!({"name": ""})),
            "name",
            "must be 1-57 characters",
        ),
        (
            "dotted name",
            base(json!({"name": "my.tool"})),
            "name",
            "may use only",
        ),
        (
            "long name",
            base(json!({"name": "x".repeat(58)})),
            "name",
            "must be 1-57",
        ),
        (
            "name not folder",
            base(json!({"name": "other"})),
            "name",
            "differs from its folder",
        ),
        (
            "no description",
            base(json!({"description": null})),
            "description",
            "missing or empty",
        ),
        (
            "blank description",
            base(json!({"description": "  "})),
            "description",
            "missing or empty",
        ),
        (
            "long description",
            base(json!({"description": "d".repeat(2049)})),
            "description",
            "over 2048",
        ),
        (
            "description number",
            base(json!({"description": 1})),
            "description",
            "must be a string",
        ),
        (
            "parameters text",
            base(json!({"parameters": "object"})),
            "parameters",
            "must be a JSON Schema object",
        ),
        (
            "parameters not object root",
            base(json!({"parameters": {"type": "array"}})),
            "parameters",
            "top level must be",
        ),
        (
            "parameters too big",
            base(json!({"parameters": {"type": "object", "description": "x".repeat(70_000)}})),
            "parameters",
            "over 65536",
        ),
        (
            "concurrent text",
            base(json!({"concurrent": "yes"})),
            "concurrent",
            "must be true or false",
        ),
        (
            "read_only number",
            base(json!({"read_only": 1})),
            "read_only",
            "must be true or false",
        ),
        (
            "both read_only names",
            base(json!({"read_only": true, "always_allow": true})),
            "always_allow",
            "give only one",
        ),
        (
            "network text",
            base(json!({"network": "no"})),
            "network",
            "must be true or false",
        ),
        (
            "timeout zero",
            base(json!({"timeout_s": 0})),
            "timeout_s",
            "from 1 to 1800",
        ),
        (
            "timeout huge",
            base(json!({"timeout_s": 99999})),
            "timeout_s",
            "from 1 to 1800",
        ),
        (
            "timeout text",
            base(json!({"timeout": "60"})),
            "timeout",
            "from 1 to 1800",
        ),
        (
            "both timeouts",
            base(json!({"timeout": 5, "timeout_s": 5})),
            "timeout",
            "give only one",
        ),
        (
            "command line",
            base(json!({"command": "python3 x.py"})),
            "command",
            "must be an argv array, not a command line",
        ),
        (
            "empty command",
            base(json!({"command": []})),
            "command",
            "must hold 1-64 items",
        ),
        (
            "command with number",
            base(json!({"command": ["python3", 3]})),
            "command",
            "every item must be a non-empty string",
        ),
        (
            "program missing",
            base(json!({"command": ["no-such-program-xyz"]})),
            "command",
            "is not on PATH",
        ),
        (
            "program path outside",
            base(json!({"command": ["/bin/../bin/sh", "x"]})),
            "command",
            "is not a file of the tool's folder",
        ),
        (
            "no default program",
            base(json!({})),
            "command",
            "has no script.py, script.sh or run",
        ),
        (
            "script outside the folder",
            base(json!({"command": ["python3", "main.py"]})),
            "command",
            "\"main.py\" is not a file of the tool's folder",
        ),
        (
            "path outside the folder",
            base(json!({"command": ["sh", "../x/run.sh"]})),
            "command",
            "is not a file of the tool's folder",
        ),
        (
            "endpoint in a script tool",
            base(json!({"endpoint": {"url": "https://example.com"}})),
            "endpoint",
            "come only with extensions",
        ),
    ];
    assert!(cases.len() >= 25);
    for (case, text, field, reason) in cases {
        let dir = root.path().join(case.replace(' ', "_")).join("t");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("tool.json"), &text).unwrap();
        let problems = definition::load(&dir, Scope::User).expect_err(case);
        assert!(
            problems.iter().any(|p| p.field == field
                && p.reason.contains(reason)
                && p.file.ends_with("t/tool.json")),
            "{case}: expected {field}: …{reason}…, got {problems:#?}"
        );
    }
    // A `run` that is not executable, and a schema that does not compile (found when the tool
    // is registered, which the loader does).
    let dir = root.path().join("run").join("t");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("tool.json"), base(json!({}))).unwrap();
    std::fs::write(dir.join("run"), "#!/bin/sh\n").unwrap();
    let problems = definition::load(&dir, Scope::User).unwrap_err();
    assert!(problems[0].reason.contains("chmod +x"), "{problems:?}");
    // A script that is a link out of the folder: what it runs could change under an approval.
    let dir = root.path().join("link").join("t");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("tool.json"), base(json!({}))).unwrap();
    std::fs::write(root.path().join("link/outside.py"), "print(1)\n").unwrap();
    std::os::unix::fs::symlink("../outside.py", dir.join("script.py")).unwrap();
    let problems = definition::load(&dir, Scope::User).unwrap_err();
    assert!(
        problems[0].reason.contains(
            "\"script.py\" is not a file of the tool's folder (a link out of it does not count)"
        ),
        "{problems:?}"
    );

    let user = root.path().join("schemas");
    for (folder, property) in [
        ("objekt", json!({"type": "objekt"})),
        ("regex", json!({"type": "string", "pattern": "(unclosed"})),
    ] {
        let schema = json!({"type": "object", "properties": {"a": property}});
        let d = json!({"name": folder, "description": "d", "parameters": schema});
        write_tool(&user, folder, d, &[("script.sh", "echo\n", false)]);
    }
    let ext = ExtensionTools::new(
        ToolDirs {
            user: Some(user),
            ..ToolDirs::default()
        },
        Default::default(),
        Default::default(),
        Default::default(),
    );
    let mut registry = dispatch_engine::Registry::empty();
    dispatch_engine::ToolSource::apply(&ext, &mut registry);
    let problems = ext.problems();
    assert_eq!(problems.len(), 2, "{problems:#?}");
    for p in &problems {
        assert_eq!(p.field, "parameters", "{p}");
        assert!(
            p.reason.contains("is not a JSON Schema that compiles"),
            "{p}"
        );
    }
    assert!(registry.is_empty());
}

#[tokio::test]
async fn a_user_tool_wins_over_a_project_tool_of_the_same_name() {
    let f = Fixture::new(Arc::new(Headless));
    write_tool(
        &f.user,
        "dup",
        def("dup", json!({})),
        &[("script.sh", "echo user\n", false)],
    );
    write_tool(
        &f.project,
        "dup",
        def("dup", json!({})),
        &[("script.sh", "echo project\n", false)],
    );
    f.round(
        "s",
        vec![call("f", "find_tools", json!({"query": "calculate"}))],
    )
    .await;
    let defs = f.ext.definitions();
    assert_eq!(defs.len(), 1);
    assert_eq!(defs[0].scope, Scope::User);
    let problems = f.ext.problems();
    assert_eq!(problems.len(), 1);
    assert!(
        problems[0]
            .reason
            .contains("already defined by the user tool"),
        "{}",
        problems[0]
    );
}

#[tokio::test]
async fn test_tool_runs_a_draft_checks_its_input_and_reports_a_crash() {
    if !sandbox_present() {
        return;
    }
    let f = Fixture::new(Arc::new(Headless));
    let drafts = f.workdir.join("drafts");
    write_tool(
        &drafts,
        "count",
        json!({
            "name": "count",
            "description": "count words",
            "parameters": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
        }),
        &[("script.py", PY_COUNT, false)],
    );
    write_tool(
        &drafts,
        "crash",
        json!({"name": "crash", "parameters": {"type": "object"}}),
        &[("script.py", "raise RuntimeError('boom')\n", false)],
    );
    let test = |input: Value, path: &str| json!({"path": path, "input": input});
    let (status, text) = f
        .run(
            "s",
            "test_tool",
            test(json!({"text": "a b"}), "drafts/count"),
        )
        .await;
    assert_eq!(status, Status::Ok, "{text}");
    let report: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(report["ok"], true, "{report:#}");
    assert_eq!(report["exit_code"], 0);
    assert_eq!(report["stdout"], "{\n  \"words\": 2\n}");
    assert_eq!(report["input_valid"], true);
    assert_eq!(report["ran_in"], "read-only sandbox");
    assert_eq!(report["problems"], json!([]));

    let (_, text) = f
        .run(
            "s",
            "test_tool",
            test(json!("{\"text\": 5}"), "drafts/count"),
        )
        .await;
    let report: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(report["input_valid"], false, "{report:#}");
    assert!(
        report["input_errors"]
            .as_str()
            .unwrap()
            .contains("/text: 5 is not of type \"string\""),
        "{report:#}"
    );

    let (status, text) = f
        .run("s", "test_tool", test(json!({}), "drafts/crash"))
        .await;
    assert_eq!(status, Status::Ok, "{text}");
    let report: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(report["ok"], false);
    assert_eq!(report["exit_code"], 1);
    assert!(
        report["stderr_tail"]
            .as_str()
            .unwrap()
            .contains("RuntimeError: boom")
    );
    assert_eq!(
        report["problems"],
        json!([
            "tool.json: description: missing or empty; say what the tool does and when to use it (the model chooses tools by it)"
        ])
    );

    // A draft's script cannot write in the work directory unless allowed (and then it asks).
    write_tool(
        &drafts,
        "writes",
        json!({"name": "writes", "description": "d"}),
        &[(
            "script.sh",
            "echo x > \"$TOOLDISPATCH_WORKDIR/out.txt\" && echo wrote\n",
            false,
        )],
    );
    let (_, text) = f
        .run("s", "test_tool", test(json!({}), "drafts/writes"))
        .await;
    let report: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(report["ok"], false, "{report:#}");
    assert!(!f.workdir.join("out.txt").exists());
    let (status, _) = f
        .run(
            "s",
            "test_tool",
            json!({"path": "drafts/writes", "allow_writes": true}),
        )
        .await;
    assert_eq!(status, Status::Declined);

    // Installed tools by name; unknown names and paths outside the work directory refused.
    write_tool(
        &f.user,
        "count",
        def("count", json!({})),
        &[("script.py", PY_COUNT, false)],
    );
    f.round(
        "s",
        vec![call("f", "find_tools", json!({"query": "calculate"}))],
    )
    .await;
    let (_, text) = f
        .run(
            "s",
            "test_tool",
            json!({"name": "count", "input": {"text": "x y z"}}),
        )
        .await;
    let report: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(report["stdout"], "{\n  \"words\": 3\n}", "{report:#}");
    let (status, text) = f.run("s", "test_tool", json!({"name": "nope"})).await;
    assert_eq!(status, Status::Failed);
    assert!(
        text.contains("no installed script tool is named \"nope\""),
        "{text}"
    );
    let (status, text) = f.run("s", "test_tool", json!({"path": "../.."})).await;
    assert_eq!(status, Status::Failed, "{text}");
    assert!(text.contains("path: path \"../..\" refused"), "{text}");

    // The work directory itself as a draft: its hidden places stay hidden (a draft is run
    // from where it is, not shown through a bind).
    std::fs::create_dir_all(f.workdir.join(".tooldispatch")).unwrap();
    std::fs::write(f.workdir.join(".tooldispatch/secret.txt"), "SECRET-RULES").unwrap();
    write_tool(
        f.workdir.parent().unwrap(),
        "work",
        json!({"name": "work", "description": "d"}),
        &[(
            "script.sh",
            "cat \"$TOOLDISPATCH_TOOL_DIR/.tooldispatch/secret.txt\" 2>/dev/null || echo hidden\nls /tmp/tooldispatch-tool 2>/dev/null || echo no-bind\n",
            false,
        )],
    );
    let (_, text) = f.run("s", "test_tool", json!({"path": "."})).await;
    let report: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(report["stdout"], "hidden\nno-bind", "{report:#}");
}

#[tokio::test]
async fn without_a_sandbox_test_tool_asks() {
    let f = Fixture::build(
        Arc::new(Headless),
        true,
        NetPolicy::default(),
        crate::shell::process::SandboxConfig::new(Arc::new(dispatch_sandbox::Sandbox::off())),
    );
    write_tool(
        &f.workdir.join("drafts"),
        "x",
        json!({"name": "x", "description": "d"}),
        &[("script.sh", "echo ran\n", false)],
    );
    let (status, text) = f.run("s", "test_tool", json!({"path": "drafts/x"})).await;
    assert_eq!(status, Status::Declined, "{text}");
    assert!(
        text.contains(
            "there is no OS sandbox to keep it read-only: it is turned off in the config"
        ),
        "{text}"
    );
}

#[tokio::test]
async fn an_ext_api_tool_sends_its_secret_to_its_host_only_caches_gets_and_asks_for_posts() {
    use crate::web::test_server::{Reply, TestServer};
    let server = TestServer::start(|seen| {
        Reply::new(
            200,
            "application/json",
            format!(
                "{{\"path\": {:?}, \"method\": {:?}}}",
                seen.path, seen.method
            ),
        )
    })
    .await;
    let net = NetPolicy::from_list(&[server.host_port()]).unwrap();
    let f = Fixture::with(Arc::new(Headless), true, net);
    f.store
        .secret_set("WEATHER_KEY", "sk-weather-123456789")
        .await
        .unwrap();
    let ext = f.extensions.join("weather");
    write_tool(
        &ext,
        "forecast",
        json!({
            "name": "forecast",
            "description": "the forecast for a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}, "required": ["city"]},
            "endpoint": {"url": server.url("/v1/{city}/forecast"), "query": {"units": "metric"}},
            "auth": {"type": "bearer", "secret": "WEATHER_KEY"},
        }),
        &[],
    );
    write_tool(
        &ext,
        "report",
        json!({
            "name": "report",
            "description": "report the weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "temp": {"type": "number"}}, "required": ["city"]},
            "endpoint": {"url": server.url("/v1/reports"), "method": "POST"},
            "auth": {"type": "header", "header": "X-Api-Key", "secret": "WEATHER_KEY"},
        }),
        &[],
    );
    f.select("s", "ext_forecast").await;
    let out = f
        .round(
            "s",
            vec![run_tool(
                "a",
                "ext_forecast",
                json!({"city": "São Paulo/../x", "days": 2}),
            )],
        )
        .await;
    let r = &out.results[0];
    assert_eq!(r.status, Status::Ok, "{}", r.content);
    assert!(
        r.content
            .contains("/v1/S%C3%A3o%20Paulo%2F..%2Fx/forecast?units=metric&days=2"),
        "{}",
        r.content
    );
    let seen = server.requests();
    assert_eq!(seen.len(), 1);
    assert_eq!(
        seen[0].header("authorization"),
        Some("Bearer sk-weather-123456789")
    );
    let events = serde_json::to_string(&out.events).unwrap();
    for text in [&r.content, &events] {
        assert!(!text.contains("sk-weather-123456789"));
    }
    // `..` would move the request to another path of the host, with the credential.
    let (status, text) = f.run("s", "ext_forecast", json!({"city": ".."})).await;
    assert_eq!(status, Status::Failed);
    assert!(
        text.contains("(city) may not make a path segment \".\" or \"..\""),
        "{text}"
    );
    assert_eq!(server.requests().len(), 1);
    // Cached for the session: a second call does not reach the server.
    let (status, text) = f.run("s", "ext_forecast", json!({"city": "Lima"})).await;
    assert_eq!(status, Status::Ok);
    let (status, text2) = f.run("s", "ext_forecast", json!({"city": "Lima"})).await;
    assert_eq!(status, Status::Ok);
    assert_eq!(server.requests().len(), 2, "{text}\n{text2}");
    assert!(text2.contains("cached"), "{text2}");
    // A POST asks; headless, it is declined and nothing is sent.
    let (status, text) = f
        .run("s", "ext_report", json!({"city": "Lima", "temp": 21.5}))
        .await;
    assert_eq!(status, Status::Declined, "{text}");
    assert_eq!(server.requests().len(), 2);

    let approving = Fixture::with(
        Arc::new(ApproveAll),
        true,
        NetPolicy::from_list(&[server.host_port()]).unwrap(),
    );
    approving
        .store
        .secret_set("WEATHER_KEY", "sk-weather-123456789")
        .await
        .unwrap();
    copy_dir(&ext, &approving.extensions.join("weather"));
    let (status, text) = approving
        .run("s", "ext_report", json!({"city": "Lima", "temp": 21.5}))
        .await;
    assert_eq!(status, Status::Ok, "{text}");
    let post = server.requests().pop().unwrap();
    assert_eq!(post.method, "POST");
    assert_eq!(post.header("x-api-key"), Some("sk-weather-123456789"));
    assert_eq!(
        serde_json::from_slice::<Value>(&post.body).unwrap(),
        json!({"city": "Lima", "temp": 21.5})
    );
    assert!(!text.contains("sk-weather-123456789"));
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap().flatten() {
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

#[test]
fn api_definitions_are_checked_too() {
    let root = tempfile::tempdir().unwrap();
    let params =
        json!({"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]});
    let cases: Vec<(Value, &str, &str)> = vec![
        (
            json!({"url": "https://{id}.example.com/x"}),
            "endpoint.url",
            "never the host",
        ),
        (
            json!({"url": "https://example.com/{other}"}),
            "endpoint.url",
            "required property",
        ),
        (
            json!({"url": "ftp://example.com/x"}),
            "endpoint.url",
            "http or https",
        ),
        (
            json!({"url": "https://example.com", "method": "TRACE"}),
            "endpoint.method",
            "must be one of",
        ),
        (
            json!({"url": "https://example.com", "verb": "GET"}),
            "endpoint.verb",
            "unknown field",
        ),
        (
            json!({"url": "https://example.com", "headers": {"X": "{{secret:K}}"}}),
            "endpoint.headers.X",
            "must not carry a secret",
        ),
        (
            json!({"url": "https://example.com", "timeout_s": 0}),
            "endpoint.timeout_s",
            "from 1 to 300",
        ),
        (
            json!({"url": "https://example.com", "content_type": "xml"}),
            "endpoint.content_type",
            "\"json\" or \"form\"",
        ),
    ];
    for (i, (endpoint, field, reason)) in cases.into_iter().enumerate() {
        let dir = write_tool(
            &root.path().join(i.to_string()),
            "t",
            json!({"name": "t", "description": "d", "parameters": params, "endpoint": endpoint}),
            &[],
        );
        let problems = definition::load(&dir, Scope::Extension("e".into())).unwrap_err();
        assert!(
            problems
                .iter()
                .any(|p| p.field == field && p.reason.contains(reason)),
            "{field}: {problems:#?}"
        );
    }
    let dir = write_tool(
        &root.path().join("auth"),
        "t",
        json!({"name": "t", "description": "d", "endpoint": {"url": "https://example.com"}, "auth": {"type": "basic", "secret": "my key"}}),
        &[],
    );
    let problems = definition::load(&dir, Scope::Extension("e".into())).unwrap_err();
    assert!(
        problems.iter().any(|p| p.field == "auth.secret"),
        "{problems:#?}"
    );
}

#[test]
fn install_copies_files_only_and_refuses_links_bad_archives_and_bad_tools() {
    use super::install::{self, InstallError};
    let root = tempfile::tempdir().unwrap();
    let user = root.path().join("tools");
    let draft = write_tool(
        &root.path().join("drafts"),
        "count",
        def("count", json!({})),
        &[("script.py", PY_COUNT, false)],
    );
    assert_eq!(
        install::install_tool(&draft, &user, false).unwrap(),
        "script_count"
    );
    assert_eq!(
        std::fs::read_to_string(user.join("count/script.py")).unwrap(),
        PY_COUNT
    );
    assert!(matches!(
        install::install_tool(&draft, &user, false),
        Err(InstallError::Refused(m)) if m.contains("--replace")
    ));
    std::os::unix::fs::symlink("/etc/passwd", draft.join("data")).unwrap();
    assert!(matches!(
        install::install_tool(&draft, &user, true),
        Err(InstallError::Refused(m)) if m.contains("is a link")
    ));
    // The failed replace left the installed copy as it was.
    assert!(user.join("count/script.py").is_file());
    assert!(!user.join("count/data").exists());

    // An extension from a .tar.gz with a top folder; then listed and removed.
    let extensions = root.path().join("extensions");
    let archive = root.path().join("weather-1.0.tar.gz");
    {
        let file = std::fs::File::create(&archive).unwrap();
        let mut tar = tar::Builder::new(flate2::write::GzEncoder::new(
            file,
            flate2::Compression::fast(),
        ));
        let mut add = |path: &str, data: &[u8]| {
            let mut header = tar::Header::new_gnu();
            header.set_size(data.len() as u64);
            header.set_mode(0o644);
            header.set_cksum();
            tar.append_data(&mut header, path, data).unwrap();
        };
        add(
            "weather/extension.json",
            br#"{"name": "weather", "version": "1.0", "description": "forecasts"}"#,
        );
        add(
            "weather/forecast/tool.json",
            br#"{"name": "forecast", "description": "d", "endpoint": {"url": "https://api.example.com/f"}}"#,
        );
        tar.into_inner().unwrap().finish().unwrap();
    }
    let ext = install::install_extension(&archive, &extensions, false).unwrap();
    assert_eq!(
        (ext.name.as_str(), ext.tools.clone()),
        ("weather", vec!["ext_forecast".to_string()])
    );
    let listed = install::list_extensions(&extensions);
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].version.as_deref(), Some("1.0"));
    install::remove_extension(&extensions, "weather").unwrap();
    assert!(install::list_extensions(&extensions).is_empty());

    // An archive that climbs out, and an extension with a broken tool: nothing installed.
    let evil = root.path().join("evil.tar.gz");
    {
        let file = std::fs::File::create(&evil).unwrap();
        let mut tar = tar::Builder::new(flate2::write::GzEncoder::new(
            file,
            flate2::Compression::fast(),
        ));
        let mut header = tar::Header::new_gnu();
        header.set_size(1);
        header.set_mode(0o644);
        // Written raw: the builder itself refuses `..`.
        header.as_gnu_mut().unwrap().name[..9].copy_from_slice(b"../x.json");
        header.set_cksum();
        tar.append(&header, &b"x"[..]).unwrap();
        tar.into_inner().unwrap().finish().unwrap();
    }
    assert!(matches!(
        install::install_extension(&evil, &extensions, false),
        Err(InstallError::Refused(m)) if m.contains("leaves the extension's folder")
    ));
    assert!(!root.path().join("x.json").exists());
    let broken = root.path().join("broken");
    write_tool(&broken, "t", json!({"name": "t"}), &[]);
    assert!(matches!(
        install::install_extension(&broken, &extensions, false),
        Err(InstallError::Problems(p)) if p.iter().any(|p| p.field == "description")
    ));
    assert!(install::list_extensions(&extensions).is_empty());
}
