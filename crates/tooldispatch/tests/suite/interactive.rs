//! ask_user and store_secret across processes: one `tooldispatch round` parks the run on the
//! SQLite store, a second process (`tooldispatch answer`) finishes the call with the answer.

use pretty_assertions::assert_eq;
use serde_json::json;

use super::support::*;

fn ask_reply() -> String {
    openai(&[(
        "q1",
        "ask_user",
        json!({
            "questions": [{"question": "Which database?", "options": ["SQLite", "Postgres"]}],
            "state": {"objective": "set up storage", "completed": [], "next_steps": ["write the config"]}
        }),
    )])
}

#[test]
fn ask_user_parks_in_one_process_and_is_answered_from_another() {
    let td = Td::new();
    let output = td
        .cmd(&["round", "--session", "s", "--run", "r"])
        .write_stdin(ask_reply())
        .output()
        .unwrap();
    // Nothing to append yet: the asking call's result is the answer, later.
    assert_eq!(stdout_json(&output), json!([]));
    let stderr = String::from_utf8_lossy(&output.stderr);
    let listed = stdout_json(&td.cmd(&["answer", "--session", "s"]).output().unwrap());
    let task = listed[0]["task"].as_str().unwrap().to_string();
    assert_eq!(
        stderr.trim(),
        format!(
            "tooldispatch: the run waits on the user (ask_user, task {task}); answer with `tooldispatch answer --session s --task {task}`, whose output is the result of call q1"
        )
    );
    assert_eq!(
        listed,
        json!([{
            "task": task, "run": "r", "tool": "ask_user", "tool_call_id": "q1",
            "questions": [{"question": "Which database?", "options": ["SQLite", "Postgres"]}],
            "state": {"objective": "set up storage", "completed": [], "next_steps": ["write the config"]}
        }])
    );

    let answered = td
        .cmd(&["answer", "--session", "s", "--task", &task, "--answer", "1"])
        .output()
        .unwrap();
    assert_eq!(
        stdout_json(&answered),
        json!([{"role": "tool", "tool_call_id": "q1",
                "content": "[ask_user] The user answered:\n1. Which database?\n   → SQLite"}])
    );
    assert_eq!(
        stdout_json(&td.cmd(&["answer", "--session", "s"]).output().unwrap()),
        json!([])
    );

    // A second answer to the same task is bad input that says why.
    let again = td
        .cmd(&["answer", "--session", "s", "--task", &task, "--answer", "2"])
        .output()
        .unwrap();
    assert_eq!(again.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&again.stderr).trim(),
        format!(
            "tooldispatch: session s has no pending task {task}; it has none (already answered, or never parked)"
        )
    );
}

#[test]
fn answers_come_from_stdin_as_a_json_array_or_plain_text() {
    let td = Td::new();
    let two = openai(&[(
        "q",
        "ask_user",
        json!({
            "questions": [{"question": "Name?"}, {"question": "Port?"}],
            "state": {"objective": "o", "completed": [], "next_steps": []}
        }),
    )]);
    let report = td.report("s", "r", &[], &two);
    let task = report["pending"]["task_hash"].as_str().unwrap().to_string();
    let plain = td
        .cmd(&["answer", "--session", "s", "--task", &task])
        .write_stdin("just one line\n")
        .output()
        .unwrap();
    assert_eq!(plain.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&plain.stderr).trim(),
        "tooldispatch: this task asks 2 questions: pipe a JSON array with one answer per question, or use --answer once per question"
    );
    let answered = td
        .cmd(&["answer", "--session", "s", "--task", &task, "--report"])
        .write_stdin(r#"["api", "8080"]"#)
        .output()
        .unwrap();
    let report = stdout_json(&answered);
    assert_eq!(
        (
            report["run"].clone(),
            report["round"].clone(),
            report["results"][0]["content"].clone()
        ),
        (
            json!("r"),
            json!(2),
            json!("[ask_user] The user answered:\n1. Name?\n   → api\n2. Port?\n   → 8080")
        )
    );
}

#[test]
fn a_secret_is_answered_on_stdin_stored_encrypted_and_never_shown() {
    const VALUE: &str = "sk-test-51HcQ2eZvKYlo2C";
    let td = Td::new();
    td.round("s", "m", &[], &select("m", "store_secret"));
    let reply = openai(&[(
        "k",
        "run_tool",
        run_tool(
            "store_secret",
            json!({"key": "STRIPE_KEY", "question": "Test-mode key"}),
        ),
    )]);
    let report = td.report("s", "r", &[], &reply);
    let task = report["pending"]["task_hash"].as_str().unwrap().to_string();

    // Never on the command line.
    let refused = td
        .cmd(&[
            "answer",
            "--session",
            "s",
            "--task",
            &task,
            "--answer",
            VALUE,
        ])
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&refused.stderr).trim(),
        "tooldispatch: this task asks for a secret: type it at the prompt, or pipe it on stdin; never pass it with --answer"
    );

    let answered = td
        .cmd(&["answer", "--session", "s", "--task", &task])
        .write_stdin(format!("{VALUE}\n"))
        .output()
        .unwrap();
    assert_eq!(
        stdout_json(&answered),
        json!([{"role": "tool", "tool_call_id": "k",
                "content": r#"[store_secret] {"ok":true,"key":"STRIPE_KEY"}"#}])
    );

    // Every byte the store keeps (the database, its WAL, the key file beside it) is free of
    // the value: it is sealed, not written.
    let dir = td.store_path().parent().unwrap();
    let mut scanned = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            let bytes = std::fs::read(&path).unwrap();
            scanned += bytes.len();
            assert!(
                !bytes.windows(VALUE.len()).any(|w| w == VALUE.as_bytes()),
                "{} holds the secret",
                path.display()
            );
        }
    }
    assert!(scanned > 0);
    // The store deflates events and transcripts, so the raw bytes alone could hide the value:
    // everything the session's records read back as is free of it too.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let (events, transcript) = runtime.block_on(async {
        let store = dispatch_store::open(&format!("sqlite:{}", td.store_path().display())).unwrap();
        (
            store.events("s", 0).await.unwrap(),
            store.transcript("s", None).await.unwrap(),
        )
    });
    assert!(!events.is_empty() && !transcript.is_empty());
    let read_back = format!("{events:?} {transcript:?}");
    assert!(!read_back.contains(VALUE), "{read_back}");
    // Yet it is there for the next process: a command that prints it shows its name.
    td.round("s", "m2", &[], &select("m2", "run_command"));
    std::fs::write(td.workdir().join("k.txt"), VALUE).unwrap();
    let shown = td.round(
        "s",
        "r2",
        &[],
        &openai(&[(
            "c",
            "run_tool",
            run_tool("run_command", json!({"argv": ["cat", "k.txt"]})),
        )]),
    );
    // How long the command took varies with the machine's load; the rest is exact.
    let content = shown[0]["content"].as_str().unwrap();
    let (head, rest) = content
        .split_once(" s)\n")
        .unwrap_or_else(|| panic!("{content}"));
    assert!(head.starts_with("[run_command] exit code 0 ("), "{content}");
    assert_eq!(
        rest,
        "$ cat k.txt  (in .)\n--- stdout ---\n[secret:STRIPE_KEY]"
    );
}

/// An upstream API on 127.0.0.1 that echoes the Authorization header it got (the worst case:
/// the secret comes back in the response). Returns its `host:port` and what it received.
fn echoing_api() -> (String, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    use std::io::{BufRead, BufReader, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = seen.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut auth = String::new();
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("authorization:") {
                    auth = line[line.len() - v.len()..].trim().to_string();
                }
            }
            log.lock().unwrap().push(auth.clone());
            let body = json!({"you_sent": auth}).to_string();
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    (addr, seen)
}

#[test]
fn a_stored_secret_used_in_a_header_appears_nowhere_but_at_the_server() {
    const VALUE: &str = "ghp_R3alLo0kingT0kenValue42";
    let td = Td::new();
    let (api, seen) = echoing_api();
    // The user lets secrets go to this API (without the rule, sending one asks).
    td.rules(&format!("allow http_request(http://{api}/**)\n"));
    let mut shown = String::new();
    let mut run = |args: &[&str], stdin: &str| {
        let output = td
            .cmd(args)
            .env("TOOLDISPATCH_ALLOW_HOSTS", &api)
            .write_stdin(stdin.to_string())
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        shown.push_str(&String::from_utf8_lossy(&output.stdout));
        shown.push_str(&String::from_utf8_lossy(&output.stderr));
        String::from_utf8_lossy(&output.stdout).into_owned()
    };

    run(
        &["round", "--session", "s", "--run", "m"],
        &select("m", "store_secret,http_request"),
    );
    let store_reply = openai(&[(
        "k",
        "run_tool",
        run_tool("store_secret", json!({"key": "GH_TOKEN"})),
    )]);
    let report: serde_json::Value = serde_json::from_str(&run(
        &["round", "--session", "s", "--run", "r", "--report"],
        &store_reply,
    ))
    .unwrap();
    let task = report["pending"]["task_hash"].as_str().unwrap().to_string();
    run(
        &["answer", "--session", "s", "--task", &task],
        &format!("{VALUE}\n"),
    );

    let get = openai(&[(
        "g",
        "run_tool",
        run_tool(
            "http_request",
            json!({"url": format!("http://{api}/user"), "headers": {"Authorization": "Bearer {{secret:GH_TOKEN}}"}}),
        ),
    )]);
    let result = run(&["round", "--session", "s", "--run", "r2"], &get);
    // The same call again (remembered), and a report of a fresh run (from the cache).
    run(&["round", "--session", "s", "--run", "r2"], &get);
    run(
        &["round", "--session", "s", "--run", "r3", "--report"],
        &get,
    );

    // The secret did its job: the server got it, once per request that was sent.
    assert_eq!(seen.lock().unwrap()[0], format!("Bearer {VALUE}"));
    let result: serde_json::Value = serde_json::from_str(&result).unwrap();
    let content = result[0]["content"].as_str().unwrap();
    assert!(
        content.contains("\"you_sent\": \"Bearer [secret:GH_TOKEN]\""),
        "{content}"
    );

    // Everything else: every process's output, and every file under the test's directory
    // (the SQLite store and its WAL, the data directory with spills and sessions).
    assert!(
        !shown.contains(VALUE),
        "a command printed the secret: {shown}"
    );
    let mut files = 0;
    let mut stack = vec![td.store_path().parent().unwrap().to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                files += 1;
                let bytes = std::fs::read(&path).unwrap();
                assert!(
                    !bytes.windows(VALUE.len()).any(|w| w == VALUE.as_bytes()),
                    "{} holds the secret",
                    path.display()
                );
            }
        }
    }
    assert!(files >= 2, "scanned only {files} files");
}

#[test]
fn answer_cancel_removes_the_task_and_prints_the_result_that_tells_the_model() {
    let td = Td::new();
    td.cmd(&["round", "--session", "s", "--run", "r"])
        .write_stdin(ask_reply())
        .output()
        .unwrap();
    let listed = stdout_json(&td.cmd(&["answer", "--session", "s"]).output().unwrap());
    let task = listed[0]["task"].as_str().unwrap().to_string();

    let cancelled = td
        .cmd(&["answer", "--session", "s", "--task", &task, "--cancel"])
        .output()
        .unwrap();
    assert_eq!(cancelled.status.code(), Some(0), "{cancelled:?}");
    // The output is the asking call's result, to send with the next model call.
    assert_eq!(
        stdout_json(&cancelled),
        json!([{"role": "tool", "tool_call_id": "q1",
                "content": "The user cancelled this ask_user instead of answering it, so there is no answer. Do not ask it again; go on without it, or end the turn and say what you could not do without it."}])
    );
    assert_eq!(
        stdout_json(&td.cmd(&["answer", "--session", "s"]).output().unwrap()),
        json!([])
    );
    // A task is cancelled once.
    let again = td
        .cmd(&["answer", "--session", "s", "--task", &task, "--cancel"])
        .output()
        .unwrap();
    assert_eq!(again.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&again.stderr).trim(),
        format!(
            "tooldispatch: session s has no pending task {task}; it has none (already answered, or never parked)"
        )
    );
    // --cancel names the task, and gives no answers.
    let bare = td
        .cmd(&["answer", "--session", "s", "--cancel"])
        .output()
        .unwrap();
    assert_eq!(bare.status.code(), Some(2));
    let mixed = td
        .cmd(&[
            "answer",
            "--session",
            "s",
            "--task",
            &task,
            "--cancel",
            "--answer",
            "1",
        ])
        .output()
        .unwrap();
    assert_eq!(mixed.status.code(), Some(2));
}
