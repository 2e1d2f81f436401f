//! The client examples (`examples/python/agent.py`, `examples/typescript/agent.ts`) run end to
//! end against the real daemon (`tooldispatch serve`) and a model that replays a recorded
//! exchange (`tests/fixtures/examples/turnN.json`, shaped like OpenAI chat.completion
//! responses): the model is the one peer that cannot run offline.
//!
//! The exchange: (1) find_tools fetches calculate's schema; (2) two calculations in parallel
//! through run_tool; (3) ask_user parks the run and the example asks at the terminal (stdin
//! answers "2", the second option); (4) the model answers with text. The fake model checks
//! every request it gets: the turn context in the system message, the tools array, and after
//! each turn the tool messages, by tool_call_id in call order, carrying the tools' results.
//!
//! When a peer fails — nothing listens at the daemon's or the model's URL, or one answers with
//! an error — each example exits non-zero with one line on stderr naming what failed and what
//! to do (the server's own message for an HTTP error), never a traceback or stack trace.
//!
//! Each example skips (saying why) when its toolchain is missing — the `openai` Python package,
//! or `e2e/node_modules` (`npm ci` in e2e/) — unless TOOLDISPATCH_REQUIRE_EXAMPLES=1.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use super::support::*;

const PROMPT: &str = "What are 2^10 and sqrt(2)?";
const FINAL_TEXT: &str = "2^10 is 1024, and sqrt(2) is 1.4142 to four decimal places.";
const QUESTION: &str = "How many decimal places should sqrt(2) have?";
const API_KEY: &str = "sk-example-test";
const MODEL: &str = "fake-model";

/// The tool messages each turn's calls must come back as, in call order: `(tool_call_id,
/// text the content must contain)`. Turn 4 is the text answer.
fn expected_results(turn: usize) -> Vec<(&'static str, &'static str)> {
    match turn {
        1 => vec![("call_find", r#""name":"calculate""#)],
        2 => vec![
            ("call_pow", r#""2^10":"1024""#),
            ("call_sqrt", r#""sqrt(2)":"1.41421356237""#),
        ],
        // stdin answered "2": the second option.
        3 => vec![("call_ask", "→ 4")],
        _ => vec![],
    }
}

const TURNS: usize = 4;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

fn fixture(turn: usize) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(format!("tests/fixtures/examples/turn{turn}.json"));
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

/// Whether a missing toolchain skips the test (true, after saying why) or fails it.
fn skip(reason: &str) -> bool {
    dispatch_testkit::skip(dispatch_testkit::Need::Examples, reason);
    true
}

// ---------------------------------------------------------------------------------------------
// The fake model

/// What the fake model saw: every request body, and every way one differed from the exchange.
#[derive(Default)]
struct Seen {
    requests: Vec<Value>,
    problems: Vec<String>,
}

/// An OpenAI-compatible server on 127.0.0.1 replaying the exchange; its base URL (`…/v1`).
fn fake_model(seen: Arc<Mutex<Seen>>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}/v1", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            serve_one(stream, &seen);
        }
    });
    base
}

/// Read one request, check it, answer with the next turn (or a 400 naming what was wrong), and
/// close the connection (clients open a new one per request then).
fn serve_one(mut stream: TcpStream, seen: &Mutex<Seen>) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut request_line = String::new();
    if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
        return;
    }
    let (mut length, mut authorization) = (0, String::new());
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
            break;
        }
        let (name, value) = line.split_once(':').unwrap_or((&line, ""));
        match name.to_ascii_lowercase().as_str() {
            "content-length" => length = value.trim().parse().unwrap(),
            "authorization" => authorization = value.trim().to_string(),
            _ => {}
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).unwrap();

    let mut seen = seen.lock().unwrap();
    let turn = seen.requests.len() + 1;
    let body: Value = serde_json::from_slice(&body).unwrap_or_else(
        |e| json!({"unparsable": format!("{e}: {}", String::from_utf8_lossy(&body))}),
    );
    let mut problems = Vec::new();
    if !request_line.starts_with("POST /v1/chat/completions ") {
        problems.push(format!("unexpected request line {request_line:?}"));
    }
    if authorization != format!("Bearer {API_KEY}") {
        problems.push(format!("Authorization is {authorization:?}"));
    }
    if turn > TURNS {
        problems.push(format!(
            "request {turn}: the exchange has only {TURNS} turns"
        ));
    } else {
        problems.extend(check_request(turn, &body, seen.requests.last()));
    }
    seen.requests.push(body);
    let (status, reply) = if problems.is_empty() {
        ("200 OK", fixture(turn))
    } else {
        let message = format!("fake model, request {turn}: {}", problems.join("; "));
        seen.problems.extend(problems);
        let error = json!({"error": {"message": message, "type": "invalid_request_error", "param": null, "code": null}});
        ("400 Bad Request", error)
    };
    drop(seen);
    let reply = reply.to_string();
    let _ = write!(
        stream,
        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{reply}",
        reply.len()
    );
}

/// How request `turn` differs from the exchange (empty when it matches).
fn check_request(turn: usize, body: &Value, previous: Option<&Value>) -> Vec<String> {
    let mut problems = Vec::new();
    let mut expect = |ok: bool, what: String| {
        if !ok {
            problems.push(what);
        }
    };
    expect(
        body["model"] == json!(MODEL),
        format!("model is {}", body["model"]),
    );
    let names: Vec<&str> = body["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .filter_map(|t| t["function"]["name"].as_str())
                .collect()
        })
        .unwrap_or_default();
    expect(
        ["find_tools", "run_tool", "ask_user"]
            .iter()
            .all(|n| names.contains(n))
            && !names.contains(&"calculate"),
        format!("tools array names {names:?}: want the core tools, calculate deferred"),
    );
    let empty = Vec::new();
    let messages = body["messages"].as_array().unwrap_or(&empty);
    if turn == 1 {
        let system = messages.first().map(|m| &m["content"]);
        expect(
            system.and_then(Value::as_str).is_some_and(|s| {
                s.contains("Tools (call through run_tool):") && s.contains("calculate")
            }),
            format!("the system message lacks the turn context: {system:?}"),
        );
        expect(
            messages.len() == 2 && messages[1] == json!({"role": "user", "content": PROMPT}),
            format!("the first request is not system + user prompt: {messages:?}"),
        );
        return problems;
    }
    // The conversation so far, then the assistant message of the last turn, then its results.
    let before = previous
        .and_then(|p| p["messages"].as_array())
        .unwrap_or(&empty);
    let calls = &fixture(turn - 1)["choices"][0]["message"]["tool_calls"];
    let want = expected_results(turn - 1);
    expect(
        messages.len() == before.len() + 1 + want.len() && messages.starts_with(before),
        format!(
            "request {turn} does not extend request {} by the assistant message and {} tool message(s): {messages:#?}",
            turn - 1,
            want.len()
        ),
    );
    if messages.len() != before.len() + 1 + want.len() {
        return problems;
    }
    let assistant = &messages[before.len()];
    expect(
        assistant["role"] == json!("assistant") && assistant["tool_calls"] == *calls,
        format!("the assistant message is not the model's reply: {assistant}"),
    );
    for (n, (id, text)) in want.iter().enumerate() {
        let message = &messages[before.len() + 1 + n];
        let content = message["content"].as_str().unwrap_or_default();
        expect(
            message["role"] == json!("tool")
                && message["tool_call_id"] == json!(id)
                && content.contains(text),
            format!("tool message {n} should answer {id} with {text:?}, got {message}"),
        );
    }
    problems
}

// ---------------------------------------------------------------------------------------------
// The daemon and the example

/// `program args PROMPT` as the agent, in the repository root, talking to the daemon at
/// `daemon` and the model at `model` (a base URL, `…/v1`) with `api_key`; all pipes captured.
fn agent(program: &str, args: &[&Path], daemon: &str, model: &str, api_key: &str) -> Command {
    let mut command = Command::new(program);
    command
        .args(args)
        .arg(PROMPT)
        .current_dir(repo_root())
        .env("OPENAI_BASE_URL", model)
        .env("OPENAI_API_KEY", api_key)
        .env("MODEL", MODEL)
        .env("TOOLDISPATCH_URL", daemon)
        .env_remove("OPENAI_ORG_ID")
        .env_remove("OPENAI_PROJECT_ID")
        // Both servers are local: no proxy may sit in between.
        .env("NO_PROXY", "127.0.0.1,localhost")
        .env("no_proxy", "127.0.0.1,localhost")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

/// Run `program args` as the agent against a fresh daemon and fake model, with "2" on stdin for
/// ask_user's question; check the exchange and the example's output.
fn run_example(program: &str, args: &[&Path]) {
    let td = Td::new();
    let daemon = td.serve("127.0.0.1:0", &[], &[]);
    let seen = Arc::new(Mutex::new(Seen::default()));
    let model = fake_model(seen.clone());

    let mut child = agent(program, args, &daemon.url, &model, API_KEY)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {program}: {e}"));
    // One answer (the second option), then end of input.
    child.stdin.take().unwrap().write_all(b"2\n").unwrap();
    let output = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let seen = seen.lock().unwrap();
    let context = format!(
        "{program} {args:?}: exit {:?}\nstdout:\n{stdout}\nstderr:\n{stderr}\nfake model problems: {:#?}\ndaemon stderr:\n{}",
        output.status.code(),
        seen.problems,
        daemon.stderr()
    );
    assert!(seen.problems.is_empty(), "{context}");
    assert!(output.status.success(), "{context}");
    assert_eq!(seen.requests.len(), TURNS, "{context}");
    // The question was put at the terminal with its options, and the answer ends the output
    // (after the prompt "> ", since a piped answer is not echoed).
    assert!(
        stdout.contains(QUESTION) && stdout.contains("  2. 4"),
        "{context}"
    );
    assert!(stdout.trim_end().ends_with(FINAL_TEXT), "{context}");
}

// ---------------------------------------------------------------------------------------------
// Failures

/// A URL on 127.0.0.1 where nothing listens: a port just bound and let go.
fn closed_url() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    format!("http://{}", listener.local_addr().unwrap())
}

/// Run the agent where something fails; check that it exits non-zero with exactly one line on
/// stderr, no traceback or stack trace, containing each of `wanted`.
fn fails_in_one_line(agent: &mut Command, wanted: &[&str]) {
    let output = agent.stdin(Stdio::null()).output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let context = format!(
        "{agent:?}: exit {:?}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        output.status.code()
    );
    assert!(!output.status.success(), "{context}");
    let line = stderr.strip_suffix('\n').unwrap_or(&stderr);
    assert!(
        !line.trim().is_empty() && !line.contains(['\n', '\r']),
        "stderr is not one line: {context}"
    );
    for unwanted in ["Traceback", "fetch failed", "    at "] {
        assert!(
            !line.contains(unwanted),
            "stderr has {unwanted:?}: {context}"
        );
    }
    for text in wanted {
        assert!(line.contains(text), "stderr lacks {text:?}: {context}");
    }
}

/// The ways a run can fail — a peer unreachable, a peer answering with an error — each ending
/// the run with one line naming what failed.
fn check_failures(program: &str, args: &[&Path]) {
    // Nothing listens at the daemon's URL.
    let nowhere = closed_url();
    fails_in_one_line(
        &mut agent(program, args, &nowhere, &format!("{nowhere}/v1"), API_KEY),
        &[
            &format!("cannot reach the tooldispatch daemon at {nowhere} ("),
            "start it with `cargo run --release -- serve`",
            "TOOLDISPATCH_URL",
        ],
    );

    let td = Td::new();
    let daemon = td.serve("127.0.0.1:0", &[], &[]);
    // The daemon answers (the session is created), but nothing listens at the model's URL.
    let nowhere = format!("{}/v1", closed_url());
    fails_in_one_line(
        &mut agent(program, args, &daemon.url, &nowhere, API_KEY),
        &[
            &format!("cannot reach the model at {nowhere} ("),
            "OPENAI_BASE_URL",
        ],
    );

    // The daemon answers with an error: the example passes on its message, out of the JSON.
    let refused = daemon.post("/nope/v1/sessions", "{}");
    assert_eq!(refused.status, 404, "{}", refused.body);
    let message = refused.json()["error"]["message"]
        .as_str()
        .unwrap()
        .to_string();
    fails_in_one_line(
        &mut agent(
            program,
            args,
            &format!("{}/nope", daemon.url),
            &nowhere,
            API_KEY,
        ),
        &[
            &format!(
                "the tooldispatch daemon answered 404 to {}/nope/v1/sessions: ",
                daemon.url
            ),
            &message,
        ],
    );

    // The model answers with an error (the fake model rejects the wrong key): its message.
    let model = fake_model(Arc::new(Mutex::new(Seen::default())));
    fails_in_one_line(
        &mut agent(program, args, &daemon.url, &model, "sk-wrong"),
        &[
            &format!("the model answered 400 to {model}/chat/completions: "),
            r#"fake model, request 1: Authorization is "Bearer sk-wrong""#,
        ],
    );
}

// ---------------------------------------------------------------------------------------------
// The tests

/// `python3 examples/python/agent.py`, or None (after saying why) when it cannot run.
fn python_agent() -> Option<PathBuf> {
    let has_openai = Command::new("python3")
        .args(["-c", "import openai"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !has_openai
        && skip("python3 with the `openai` package is not available (pip install openai)")
    {
        return None;
    }
    Some(repo_root().join("examples/python/agent.py"))
}

#[test]
fn the_python_example_runs_a_session_through_the_daemon() {
    if let Some(agent) = python_agent() {
        run_example("python3", &[&agent]);
    }
}

#[test]
fn the_python_example_says_in_one_line_what_failed() {
    if let Some(agent) = python_agent() {
        check_failures("python3", &[&agent]);
    }
}

/// Compiling takes seconds, so one test compiles the example once and runs it both ways.
#[test]
fn the_typescript_example_compiles_strict_runs_a_session_and_says_in_one_line_what_failed() {
    let root = repo_root();
    let tsc = root.join("e2e/node_modules/.bin/tsc");
    let has_node = Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !(tsc.exists() && has_node)
        && skip("node or e2e/node_modules/.bin/tsc is missing (run `npm ci` in e2e/)")
    {
        return;
    }
    let out = tempfile::tempdir().unwrap();
    let compiled = Command::new(&tsc)
        .arg("--project")
        .arg(root.join("examples/typescript"))
        .arg("--strict")
        .arg("--outDir")
        .arg(out.path())
        .output()
        .unwrap();
    assert!(
        compiled.status.success(),
        "tsc failed:\n{}{}",
        String::from_utf8_lossy(&compiled.stdout),
        String::from_utf8_lossy(&compiled.stderr)
    );
    let agent = out.path().join("agent.js");
    assert!(agent.exists(), "tsc wrote no {}", agent.display());
    run_example("node", &[&agent]);
    check_failures("node", &[&agent]);
}
