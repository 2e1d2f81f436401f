//! `tooldispatch agent` as a real process against a scripted OpenAI-compatible model server on
//! 127.0.0.1: rounds until the answer (on stdout), the key from the secret store, a session
//! continued by the next process, max rounds, a missing key.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use super::support::*;

/// A streamed Chat Completions answer: plain text, or these `(id, name, arguments)` calls.
pub(super) fn answer(text: &str) -> String {
    sse(json!({"role": "assistant", "content": text}), "stop")
}

pub(super) fn calling(calls: &[(&str, &str, Value)]) -> String {
    let tool_calls: Vec<Value> = calls
        .iter()
        .enumerate()
        .map(|(index, (id, name, args))| {
            json!({"index": index, "id": id, "type": "function",
                   "function": {"name": name, "arguments": args.to_string()}})
        })
        .collect();
    sse(
        json!({"role": "assistant", "content": null, "tool_calls": tool_calls}),
        "tool_calls",
    )
}

fn sse(delta: Value, finish: &str) -> String {
    let chunk = |delta: Value, finish: Option<&str>| {
        json!({"object": "chat.completion.chunk",
               "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    };
    let usage = json!({"object": "chat.completion.chunk", "choices": [],
                       "usage": {"prompt_tokens": 100, "completion_tokens": 10}});
    [chunk(delta, None), chunk(json!({}), Some(finish)), usage]
        .iter()
        .map(|v| format!("data: {v}\n\n"))
        .collect::<String>()
        + "data: [DONE]\n\n"
}

/// What the model server was sent: each request's Authorization header and body.
pub(super) type Seen = Arc<Mutex<Vec<(String, Value)>>>;

/// A model server answering each request with the next of `replies`; its base URL.
pub(super) fn model_server(replies: Vec<String>) -> (String, Seen) {
    model_server_paced(replies.into_iter().map(|r| (Duration::ZERO, r)).collect())
}

/// A model server answering each request, one at a time, with the next of `replies` after
/// that reply's wait (a model thinking); its base URL.
pub(super) fn model_server_paced(replies: Vec<(Duration, String)>) -> (String, Seen) {
    let replies = replies
        .into_iter()
        .map(|(wait, body)| {
            let mut reply = Scripted::new(200, "text/event-stream", body.into_bytes());
            reply.wait = wait;
            reply
        })
        .collect();
    let (base, seen, _) = scripted_server(replies, || {
        Scripted::new(
            200,
            "text/event-stream",
            answer("no scripted reply left").into_bytes(),
        )
    });
    (base, seen)
}

/// One scripted HTTP answer of the fake OpenAI server, sent after `wait` (a model thinking).
pub(super) struct Scripted {
    status: u16,
    content_type: &'static str,
    body: Vec<u8>,
    wait: Duration,
}

impl Scripted {
    pub(super) fn new(status: u16, content_type: &'static str, body: Vec<u8>) -> Self {
        Scripted {
            status,
            content_type,
            body,
            wait: Duration::ZERO,
        }
    }
}

/// Each request as sent: path, headers (names in lower case), body.
pub(super) type Heard = Arc<Mutex<Vec<(String, Vec<(String, String)>, Vec<u8>)>>>;

/// An OpenAI-compatible server answering each request with the next of `replies` (then with
/// `left_over()`): its base URL, each request's Authorization and JSON body (`Null` when the
/// body is no JSON), and each request whole.
pub(super) fn scripted_server(
    replies: Vec<Scripted>,
    left_over: impl Fn() -> Scripted + Send + 'static,
) -> (String, Seen, Heard) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}/v1", listener.local_addr().unwrap());
    let seen: Seen = Arc::default();
    let heard: Heard = Arc::default();
    let (log, whole) = (seen.clone(), heard.clone());
    std::thread::spawn(move || {
        let mut replies = replies.into_iter();
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let (mut length, mut authorization) = (0, String::new());
            let mut headers = Vec::new();
            let mut line = String::new();
            reader.read_line(&mut line).unwrap();
            let path = line.split(' ').nth(1).unwrap_or("").to_string();
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                let (name, value) = line.split_once(':').unwrap_or((&line, ""));
                let name = name.to_ascii_lowercase();
                match name.as_str() {
                    "content-length" => length = value.trim().parse().unwrap(),
                    "authorization" => authorization = value.trim().to_string(),
                    _ => {}
                }
                headers.push((name, value.trim().to_string()));
            }
            let mut body = vec![0; length];
            reader.read_exact(&mut body).unwrap();
            log.lock().unwrap().push((
                authorization,
                serde_json::from_slice(&body).unwrap_or(Value::Null),
            ));
            whole.lock().unwrap().push((path, headers, body));
            let reply = replies.next().unwrap_or_else(&left_over);
            std::thread::sleep(reply.wait);
            let mut answer = format!(
                "HTTP/1.1 {} Scripted\r\ncontent-type: {}\r\nconnection: close\r\n\r\n",
                reply.status, reply.content_type
            )
            .into_bytes();
            answer.extend_from_slice(&reply.body);
            let _ = stream.write_all(&answer);
        }
    });
    (base, seen, heard)
}

/// A config file naming the fake model, its key in the secret store.
fn config(td: &Td, base_url: &str) -> std::path::PathBuf {
    td.file(
        "config.toml",
        &format!(
            "[models.fake]\nprovider = \"openai\"\nmodel = \"fake-1\"\nbase_url = \"{base_url}\"\nkey = \"{{{{secret:FAKE_KEY}}}}\"\n"
        ),
    )
}

fn agent(td: &Td, config: &std::path::Path, extra: &[&str], task: &str) -> std::process::Output {
    td.cmd(&["agent", "--approve", "none"])
        .arg("--config")
        .arg(config)
        .args(extra)
        .arg(task)
        .output()
        .unwrap()
}

fn store_key(td: &Td) {
    td.bare()
        .args(["secret", "set", "FAKE_KEY", "--store"])
        .arg(format!("sqlite:{}", td.store_path().display()))
        .write_stdin("sk-fake-key")
        .assert()
        .success();
}

#[test]
fn the_agent_runs_rounds_and_prints_the_answer() {
    let td = Td::new();
    let (base, seen) = model_server(vec![
        calling(&[("c1", "find_tools", json!({"query": "select:calculate"}))]),
        calling(&[(
            "c2",
            "run_tool",
            json!({"name": "calculate", "args": {"expressions": ["6*7"]}}),
        )]),
        answer("It is 42."),
    ]);
    store_key(&td);
    let config = config(&td, &base);
    let out = agent(&td, &config, &["--session", "a1"], "What is 6*7?");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "It is 42.\n");
    assert!(
        stderr.contains("← calculate ok: [calculate] {\"6*7\":\"42\"}"),
        "{stderr}"
    );
    assert!(
        stderr.contains("done in 2 round(s), 300 input / 30 output tokens"),
        "{stderr}"
    );
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 3);
    // The key came from the secret store and went in the header only.
    assert!(seen.iter().all(|(auth, _)| auth == "Bearer sk-fake-key"));
    assert!(!stderr.contains("sk-fake-key"));
    let last = seen[2].1["messages"].as_array().unwrap();
    assert_eq!(
        last.last().unwrap(),
        &json!({"role": "tool", "tool_call_id": "c2", "content": "[calculate] {\"6*7\":\"42\"}"})
    );
}

#[test]
fn the_next_process_continues_the_session_and_json_reports_the_outcome() {
    let td = Td::new();
    let (base, seen) = model_server(vec![answer("first"), answer("second")]);
    store_key(&td);
    let config = config(&td, &base);
    let first = agent(&td, &config, &["--session", "s1"], "one");
    assert_eq!(first.status.code(), Some(0), "{first:?}");
    let second = agent(&td, &config, &["--session", "s1", "--json"], "two");
    assert_eq!(second.status.code(), Some(0), "{second:?}");
    let outcome: Value = serde_json::from_slice(&second.stdout).unwrap();
    assert_eq!(
        (&outcome["run"], &outcome["model"], &outcome["end"]),
        (
            &json!("turn-2"),
            &json!("fake"),
            &json!({"kind": "answer", "text": "second"})
        )
    );
    let history: Vec<Value> = seen.lock().unwrap()[1].1["messages"]
        .as_array()
        .unwrap()
        .iter()
        .skip(1)
        .cloned()
        .collect();
    assert_eq!(
        history,
        [
            json!({"role": "user", "content": "one"}),
            json!({"role": "assistant", "content": "first"}),
            json!({"role": "user", "content": "two"}),
        ]
    );
}

#[test]
fn a_model_that_keeps_calling_tools_is_stopped_at_max_rounds() {
    let td = Td::new();
    let todo = |id: &str| {
        calling(&[(
            id,
            "write_todo",
            json!({"todos": [{"content": id, "status": "pending"}]}),
        )])
    };
    let (base, seen) = model_server(vec![todo("a"), todo("b"), todo("c")]);
    store_key(&td);
    let config = config(&td, &base);
    let out = agent(&td, &config, &["--max-rounds", "2"], "never stop");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("stopped after 2 rounds without an answer"),
        "{stderr}"
    );
    assert!(
        stderr.contains("continue with `tooldispatch agent --session agent-"),
        "{stderr}"
    );
    assert_eq!(seen.lock().unwrap().len(), 3);
}

#[test]
fn a_missing_key_is_bad_input_that_says_where_to_put_it() {
    let td = Td::new();
    let (base, seen) = model_server(vec![]);
    let config = config(&td, &base);
    let out = agent(&td, &config, &[], "anything");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("tooldispatch secret set FAKE_KEY"),
        "{stderr}"
    );
    assert!(seen.lock().unwrap().is_empty());
}

/// At a terminal (a real pseudo-terminal, through `script`), the agent asks before each call
/// that needs approval: the first edit is approved and made, the second declined and not made,
/// and the model reads both outcomes.
#[test]
fn at_a_terminal_one_call_is_approved_and_one_declined() {
    let td = Td::new();
    let edit = |id: &str, path: &str| {
        (
            id.to_string(),
            json!({"name": "edit_file", "args": {"path": path, "content": "written"}}),
        )
    };
    let (e1, a1) = edit("e1", "approved.txt");
    let (e2, a2) = edit("e2", "declined.txt");
    let (base, seen) = model_server(vec![
        calling(&[("c1", "find_tools", json!({"query": "select:edit_file"}))]),
        calling(&[(&e1, "run_tool", a1), (&e2, "run_tool", a2)]),
        answer("One file written."),
    ]);
    store_key(&td);
    let config = config(&td, &base);
    let (workdir, store) = (
        td.workdir().display().to_string(),
        format!("sqlite:{}", td.store_path().display()),
    );
    let config = config.display().to_string();
    let mut terminal = Terminal::start(
        &td,
        &[
            "agent",
            "--session",
            "pty",
            "--workdir",
            &workdir,
            "--store",
            &store,
            "--config",
            &config,
            "write two files",
        ],
    );
    terminal.answer("wants to run", 1, "y\n");
    terminal.answer("wants to run", 2, "n not now\n");
    let (ok, shown) = terminal.finish();
    assert!(ok, "{shown}");
    assert!(shown.contains("One file written."), "{shown}");
    let work = td.workdir();
    assert_eq!(
        std::fs::read_to_string(work.join("approved.txt"))
            .ok()
            .as_deref(),
        Some("written")
    );
    assert!(!work.join("declined.txt").exists());
    let seen = seen.lock().unwrap();
    let results: Vec<(String, String)> = seen[2].1["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .skip(1)
        .map(|m| {
            (
                m["tool_call_id"].as_str().unwrap().to_string(),
                m["content"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(results.len(), 2, "{results:?}");
    assert!(results[0].1.starts_with("[edit_file]"), "{results:?}");
    assert!(results[1].1.contains("not now"), "{results:?}");
}
