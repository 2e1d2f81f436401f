//! The web console in a real browser: `tooldispatch serve` on a free port, and
//! `e2e/console.spec.mjs` (playwright-core driving /usr/bin/chromium) posting rounds to it and
//! clicking through the console — lanes, approve/decline, an ask_user answer, the todo list;
//! then `e2e/lanes.spec.mjs` against the same daemon: the lane charts' layout (no label over another
//! label or another call's bar, at 1400 px and 390 px), their durations and finished state.
//! Skips with a printed reason when chromium or e2e/node_modules is missing, unless
//! TOOLDISPATCH_REQUIRE_BROWSER=1.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;

use super::support::{Served, Td};

const CHROMIUM: &str = "/usr/bin/chromium";
/// How many calls of a round the daemon runs at once (TOOLDISPATCH_MAX_CONCURRENT_TOOLS): the
/// lane chart script queues calls behind this many long ones.
const MAX_CONCURRENT: &str = "3";
/// The screenshots the script saves, with the viewport width each is taken at.
const SHOTS: &[(&str, u32)] = &[
    ("console-1-session.png", 1280),
    ("console-2-concurrent.png", 1280),
    ("console-3-confirmation.png", 1280),
    ("console-4-ask.png", 1280),
    ("console-5-todos.png", 1280),
    ("console-6-mobile.png", 390),
    ("console-7-agent.png", 1280),
    ("console-8-lanes.png", 1400),
    ("console-9-lanes-mobile.png", 390),
];

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// What this machine lacks to run the browser test, if anything.
fn missing_parts(root: &Path) -> Vec<String> {
    let mut missing = Vec::new();
    if !Path::new(CHROMIUM).exists() {
        missing.push(format!("{CHROMIUM} (apt-get install chromium)"));
    }
    if !root.join("e2e/node_modules/playwright-core").is_dir() {
        missing.push("e2e/node_modules/playwright-core (run `npm ci` in e2e/)".to_string());
    }
    let node = Command::new("node").arg("--version").output();
    if !node.is_ok_and(|o| o.status.success()) {
        missing.push("node on PATH (Node 20 or newer)".to_string());
    }
    missing
}

/// Width and height from a PNG's IHDR chunk, after checking the signature.
fn png_size(bytes: &[u8]) -> Option<(u32, u32)> {
    let signature = b"\x89PNG\r\n\x1a\n";
    if bytes.len() < 24 || &bytes[..8] != signature || &bytes[12..16] != b"IHDR" {
        return None;
    }
    let word =
        |at: usize| u32::from_be_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]);
    Some((word(16), word(20)))
}

/// Wait for a node script; a guard against a hung browser, not a timing assertion.
fn wait_node(mut node: Child, what: &str, daemon: &Served) -> ExitStatus {
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        if let Some(status) = node.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > deadline {
            let _ = node.kill();
            let _ = node.wait();
            panic!(
                "{what} ran for 5 minutes without finishing; daemon stderr: {}",
                daemon.stderr()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn the_console_drives_rounds_confirmations_and_answers_in_a_browser() {
    let root = repo_root();
    let missing = missing_parts(&root);
    if !missing.is_empty() {
        let what = missing.join(", ");
        dispatch_testkit::skip(dispatch_testkit::Need::Browser, &format!("missing {what}"));
        return;
    }

    let td = Td::new();
    // The agent prompt's model: it selects edit_file, writes a file (approved in the page) and
    // answers.
    let (model, seen) = super::agent::model_server(vec![
        super::agent::calling(&[("a1", "find_tools", json!({"query": "select:edit_file"}))]),
        super::agent::calling(&[(
            "a2",
            "run_tool",
            json!({"name": "edit_file", "args": {"path": "agent-wrote.txt", "content": "written by the agent\n"}}),
        )]),
        super::agent::answer("Wrote agent-wrote.txt after your approval."),
    ]);
    let config = td.file(
        "config.toml",
        &format!("[models.fake]\nprovider = \"openai\"\nmodel = \"fake-1\"\nbase_url = \"{model}\"\nkey = \"none\"\n"),
    );
    let config = config.display().to_string();
    // The concurrent rounds call http_request against the scripts' slow local servers.
    let mut daemon = td.serve(
        "127.0.0.1:0",
        &["--config", &config],
        &[
            ("TOOLDISPATCH_ALLOW_HOSTS", "127.0.0.1"),
            ("TOOLDISPATCH_MAX_CONCURRENT_TOOLS", MAX_CONCURRENT),
        ],
    );
    let url = daemon.url.clone();
    assert!(url.starts_with("http://127.0.0.1:"), "listening on {url}");

    let artifacts = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .unwrap()
        .join("e2e-artifacts");
    std::fs::create_dir_all(&artifacts).unwrap();
    for (name, _) in SHOTS {
        let _ = std::fs::remove_file(artifacts.join(name));
    }

    let spec = Command::new("node")
        .arg(root.join("e2e/console.spec.mjs"))
        .arg(&url)
        .arg(&artifacts)
        .current_dir(&root)
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let status = wait_node(spec, "e2e/console.spec.mjs", &daemon);
    // The lane charts, in the sessions the spec left and one of their own.
    let lanes = Command::new("node")
        .arg(root.join("e2e/lanes.spec.mjs"))
        .arg(&url)
        .arg(&artifacts)
        .arg(root.join("e2e/node_modules/playwright-core/index.mjs"))
        .arg(CHROMIUM)
        .arg(MAX_CONCURRENT)
        .current_dir(&root)
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let lanes_status = wait_node(lanes, "the lane chart script", &daemon);

    daemon.signal("-TERM");
    let exit = daemon.wait_exit(Duration::from_secs(60));
    let rest = daemon.stdout_rest();

    assert!(
        status.success(),
        "e2e/console.spec.mjs exited with {status} (its output above says which step failed; screenshots in {}); daemon stderr: {}",
        artifacts.display(),
        daemon.stderr()
    );
    assert!(
        lanes_status.success(),
        "e2e/lanes.spec.mjs exited with {lanes_status} (its output above says which step failed; screenshots in {}); daemon stderr: {}",
        artifacts.display(),
        daemon.stderr()
    );
    for (name, width) in SHOTS {
        let path = artifacts.join(name);
        let bytes = std::fs::read(&path)
            .unwrap_or_else(|e| panic!("screenshot {} is missing: {e}", path.display()));
        let size = png_size(&bytes)
            .unwrap_or_else(|| panic!("{} is not a PNG ({} bytes)", path.display(), bytes.len()));
        assert_eq!(
            size.0,
            *width,
            "{} is {}x{}",
            path.display(),
            size.0,
            size.1
        );
        assert!(
            size.1 > 0 && bytes.len() > 1000,
            "{} is empty",
            path.display()
        );
    }
    assert_eq!(
        seen.lock().unwrap().len(),
        3,
        "the agent turn made three model requests (select, edit, answer)"
    );
    assert!(
        exit.success(),
        "the daemon exited with {exit} after SIGTERM; stdout after the first line: {rest}; stderr: {}",
        daemon.stderr()
    );
}
