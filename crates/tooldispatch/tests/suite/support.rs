//! A temporary work directory, data directory and SQLite store per test, and the `tooldispatch`
//! binary run against them as a real process (`serve` too, owned by a [`Served`]).

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, ExitStatus, Stdio};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use assert_cmd::Command;
use serde_json::{Value, json};
use tempfile::TempDir;

/// How long any synchronisation wait may take before the test fails.
pub const WAIT: Duration = Duration::from_secs(30);

/// One test's private world: `work/` (the --workdir), `data/` (XDG_DATA_HOME) and `store.db`.
pub struct Td {
    _dir: TempDir,
    work: PathBuf,
    data: PathBuf,
    store: PathBuf,
}

impl Td {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let work = dir.path().join("work");
        let data = dir.path().join("data");
        std::fs::create_dir_all(&work).unwrap();
        std::fs::create_dir_all(&data).unwrap();
        let store = dir.path().join("store.db");
        Td {
            _dir: dir,
            work,
            data,
            store,
        }
    }

    /// The work directory as the CLI reports it (canonical).
    pub fn workdir(&self) -> PathBuf {
        self.work.canonicalize().unwrap()
    }

    /// Write `<workdir>/.tooldispatch/rules` and trust the work directory
    /// (`tooldispatch trust`), so the rules apply.
    pub fn rules(&self, text: &str) {
        self.untrusted_rules(text);
        self.bare().arg("trust").arg(&self.work).assert().success();
    }

    /// Write `<workdir>/.tooldispatch/rules` without trusting the work directory.
    pub fn untrusted_rules(&self, text: &str) {
        let dir = self.work.join(".tooldispatch");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("rules"), text).unwrap();
    }

    /// Write a file under the temp dir (outside the work directory) and return its path.
    pub fn file(&self, name: &str, text: &str) -> PathBuf {
        let path = self.work.parent().unwrap().join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    /// `tooldispatch` with only this test's data directory in its environment.
    pub fn bare(&self) -> Command {
        Command::from_std(self.std_command())
    }

    /// The same process as `bare`, as a std command (for a test that signals it mid-round).
    pub fn std_command(&self) -> std::process::Command {
        let mut cmd = std::process::Command::new(assert_cmd::cargo::cargo_bin("tooldispatch"));
        cmd.env("XDG_DATA_HOME", &self.data)
            // No config file from the machine: a test writes its own and passes --config.
            .env("XDG_CONFIG_HOME", self.data.join("no-config"))
            .env_remove("TOOLDISPATCH_CONFIG")
            .env_remove("TOOLDISPATCH_STORE")
            .env_remove("TOOLDISPATCH_MAX_CONCURRENT_TOOLS")
            .env_remove("TOOLDISPATCH_ALLOW_HOSTS");
        cmd
    }

    /// Start `round --session S --run R --approve all` on the test's store with `reply` on
    /// stdin, without waiting for it; stderr is piped.
    pub fn spawn_round(&self, session: &str, run: &str, reply: &str) -> std::process::Child {
        use std::io::Write;
        use std::process::Stdio;
        let mut child = self
            .std_command()
            .args([
                "round",
                "--session",
                session,
                "--run",
                run,
                "--approve",
                "all",
            ])
            .arg("--workdir")
            .arg(&self.work)
            .arg("--store")
            .arg(format!("sqlite:{}", self.store.display()))
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(reply.as_bytes())
            .unwrap();
        child
    }

    /// Start `serve --addr ADDR --store sqlite:<store> --workdir <work> [extra_args]` with
    /// `envs` added to its environment, and wait (bounded) for its first stdout line
    /// `listening on http://HOST:PORT`. Its stderr goes to a file of its own under the data
    /// directory (see [`Served::stderr`]); the rest of its stdout is read in a thread so it
    /// never blocks on a full pipe.
    pub fn serve(&self, addr: &str, extra_args: &[&str], envs: &[(&str, &str)]) -> Served {
        // A fresh file per start: a test may start the daemon again on the same store.
        let stderr = (1..)
            .map(|n| self.data.join(format!("serve-{n}.stderr")))
            .find(|path| !path.exists())
            .unwrap();
        let mut child = self
            .std_command()
            .args(["serve", "--addr", addr])
            .arg("--store")
            .arg(format!("sqlite:{}", self.store.display()))
            .arg("--workdir")
            .arg(self.workdir())
            .args(extra_args)
            .envs(envs.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        let rest = std::thread::spawn(move || {
            let mut reader = BufReader::new(stdout);
            let mut first = String::new();
            let _ = reader.read_line(&mut first);
            let _ = tx.send(first);
            let mut rest = Vec::new();
            let _ = reader.read_to_end(&mut rest);
            String::from_utf8_lossy(&rest).into_owned()
        });
        let mut served = Served {
            child,
            url: String::new(),
            addr: String::new(),
            stderr,
            stdout_rest: Some(rest),
        };
        let first = match rx.recv_timeout(WAIT) {
            Ok(line) if !line.is_empty() => line,
            _ => panic!(
                "serve printed no `listening on` line (exit {:?})\nstderr: {}",
                served.child.try_wait().unwrap(),
                served.stderr()
            ),
        };
        let first = first.trim_end();
        let listening = first
            .strip_prefix("listening on http://")
            .unwrap_or_else(|| {
                panic!(
                    "the daemon's first stdout line is {first:?}, not `listening on http://...`\nstderr: {}",
                    served.stderr()
                )
            });
        let port = listening.rsplit_once(':').unwrap().1;
        served.addr = format!("127.0.0.1:{port}");
        served.url = format!("http://{listening}");
        served
    }

    /// `tooldispatch <sub>` with --workdir and --store pointing into the temp dir.
    pub fn cmd(&self, sub: &[&str]) -> Command {
        let mut cmd = self.bare();
        cmd.args(sub)
            .arg("--workdir")
            .arg(&self.work)
            .arg("--store")
            .arg(format!("sqlite:{}", self.store.display()));
        cmd
    }

    /// Run `round --session S --run R [extra]` with `reply` on stdin; exit 0; stdout as JSON.
    pub fn round(&self, session: &str, run: &str, extra: &[&str], reply: &str) -> Value {
        let mut args = vec!["round", "--session", session, "--run", run];
        args.extend_from_slice(extra);
        let output = self.cmd(&args).write_stdin(reply).output().unwrap();
        stdout_json(&output)
    }

    /// `round ... --report`.
    pub fn report(&self, session: &str, run: &str, extra: &[&str], reply: &str) -> Value {
        let mut args = extra.to_vec();
        args.push("--report");
        self.round(session, run, &args, reply)
    }

    /// `tools --session S [extra]`, parsed.
    pub fn tools(&self, session: &str, extra: &[&str]) -> Value {
        let mut args = vec!["tools", "--session", session];
        args.extend_from_slice(extra);
        let output = self.cmd(&args).output().unwrap();
        stdout_json(&output)
    }

    pub fn data_dir(&self) -> &Path {
        &self.data
    }

    /// The SQLite file `cmd` points `--store` at.
    pub fn store_path(&self) -> &Path {
        &self.store
    }
}

/// A running `tooldispatch serve` (from [`Td::serve`]); killed (SIGKILL) and reaped on drop.
pub struct Served {
    child: Child,
    /// The address of the first stdout line, as printed: `http://0.0.0.0:PORT` for that bind.
    pub url: String,
    /// `127.0.0.1:PORT` to connect to (even when bound to 0.0.0.0).
    pub addr: String,
    stderr: PathBuf,
    stdout_rest: Option<JoinHandle<String>>,
}

impl Served {
    /// Everything the daemon wrote to stderr so far.
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// Wait (bounded) until the daemon's stderr contains `text`.
    pub fn wait_stderr(&self, text: &str) {
        let deadline = Instant::now() + WAIT;
        while !self.stderr().contains(text) {
            assert!(
                Instant::now() < deadline,
                "stderr never showed {text:?}\nstderr: {}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `kill SIG PID`, e.g. `signal("-TERM")`.
    pub fn signal(&self, sig: &str) {
        let pid = self.pid().to_string();
        let status = std::process::Command::new("kill")
            .args([sig, &pid])
            .status()
            .unwrap();
        assert!(status.success(), "kill {sig} {pid} failed");
    }

    /// Wait (bounded) for the process to exit.
    pub fn wait_exit(&mut self, within: Duration) -> ExitStatus {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "the daemon did not exit\nstderr: {}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Stdout after the first line, read until it closed: call after the daemon exited.
    pub fn stdout_rest(&mut self) -> String {
        self.stdout_rest
            .take()
            .map(|rest| rest.join().unwrap())
            .unwrap_or_default()
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// On drop, kill -9 the process groups whose leaders wrote their pids to the marker file:
/// run_command puts each command in its own group, which outlives a killed `tooldispatch`.
pub struct KillGroups(pub PathBuf);

impl Drop for KillGroups {
    fn drop(&mut self) {
        // A sandboxed command prints pids of its own PID namespace, which name unrelated host
        // processes: only a group whose leader runs in the marker's directory is ours (the
        // sandbox dies with the dispatcher anyway).
        let dir = self.0.parent().and_then(|d| d.canonicalize().ok());
        if let Ok(text) = std::fs::read_to_string(&self.0) {
            for pid in text
                .split_whitespace()
                .filter(|w| w.chars().all(|c| c.is_ascii_digit()))
                .filter(|pid| std::fs::read_link(format!("/proc/{pid}/cwd")).ok() == dir)
            {
                let _ = std::process::Command::new("kill")
                    .args(["-9", "--", &format!("-{pid}")])
                    .stderr(Stdio::null())
                    .status();
            }
        }
    }
}

/// Host processes whose command line contains `marker` (pids printed inside the sandbox are
/// of its own PID namespace, so tests find their processes by a marker instead).
pub fn processes_with(marker: &str) -> Vec<i32> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        if let Ok(cmdline) = std::fs::read(entry.path().join("cmdline"))
            && String::from_utf8_lossy(&cmdline).contains(marker)
        {
            out.push(pid);
        }
    }
    out
}

/// Exit 0, stdout one JSON document.
pub fn stdout_json(output: &std::process::Output) -> Value {
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "exit {:?}\nstdout: {stdout}\nstderr: {stderr}",
        output.status.code()
    );
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {stdout}"))
}

/// An OpenAI Chat Completions assistant message calling these `(id, name, args)`.
pub fn openai(calls: &[(&str, &str, Value)]) -> String {
    let calls: Vec<Value> = calls
        .iter()
        .map(|(id, name, args)| {
            json!({"id": id, "type": "function", "function": {"name": name, "arguments": args.to_string()}})
        })
        .collect();
    json!({"role": "assistant", "content": null, "tool_calls": calls}).to_string()
}

/// `run_tool(name, args)` arguments.
pub fn run_tool(name: &str, args: Value) -> Value {
    json!({"name": name, "args": args})
}

/// The reply that fetches these schemas: `find_tools(query="select:NAMES")`.
pub fn select(id: &str, names: &str) -> String {
    openai(&[(
        id,
        "find_tools",
        json!({"query": format!("select:{names}")}),
    )])
}

pub const CALCULATE_ARGS: &str = r#"{"expressions":["2^10","1/0"]}"#;
pub const CALCULATED: &str =
    r#"{"1/0":"error: division by zero or undefined result","2^10":"1024"}"#;

/// The quick-start calculation through run_tool.
pub fn calculate_reply(id: &str) -> String {
    openai(&[(
        id,
        "run_tool",
        run_tool("calculate", serde_json::from_str(CALCULATE_ARGS).unwrap()),
    )])
}

/// The report with every timing replaced by "<ms>" (after checking it is a number ≥ 0, and that
/// a result ended no earlier than it started); nulls stay null. Timings are never compared.
pub fn timeless(mut report: Value) -> Value {
    for result in report["results"].as_array_mut().unwrap() {
        if let (Some(start), Some(end)) =
            (result["started_ms"].as_f64(), result["ended_ms"].as_f64())
        {
            assert!(start <= end, "ended before it started: {result}");
        }
        for key in ["started_ms", "ended_ms"] {
            blank_ms(&mut result[key]);
        }
    }
    for event in report["events"].as_array_mut().unwrap() {
        assert!(event["at_ms"].is_number(), "event without at_ms: {event}");
        blank_ms(&mut event["at_ms"]);
    }
    report
}

fn blank_ms(value: &mut Value) {
    match value.as_f64() {
        Some(ms) => {
            assert!(ms >= 0.0, "negative time {ms}");
            *value = json!("<ms>");
        }
        None => assert!(value.is_null(), "not a time: {value}"),
    }
}

/// `(tool_call_id, status)` of every result of a report.
pub fn statuses(report: &Value) -> Vec<(String, String)> {
    report["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["tool_call_id"].as_str().unwrap().to_string(),
                r["status"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

pub fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

/// Whether the machine's sandbox is there; without it the caller skips, saying why, unless
/// `TOOLDISPATCH_REQUIRE_SANDBOX=1` (CI) makes that a failure.
pub fn sandbox_present() -> bool {
    let missing = dispatch_sandbox::Sandbox::shared().missing();
    if let Some(why) = &missing {
        dispatch_testkit::skip(dispatch_testkit::Need::Sandbox, why);
    }
    missing.is_none()
}

/// `tooldispatch ARGS` in a real pseudo-terminal as its controlling terminal (util-linux
/// `script`), with this test's data directory; a test answers prompts as a person would, once
/// each prompt is up.
pub struct Terminal {
    script: std::process::Child,
    stdin: Option<std::process::ChildStdin>,
    output: std::sync::mpsc::Receiver<Vec<u8>>,
    shown: Vec<u8>,
}

impl Terminal {
    /// Each argument is quoted for the shell `script` runs the command with.
    pub fn start(td: &Td, args: &[&str]) -> Terminal {
        use std::io::Read;
        let quote = |a: &str| format!("'{}'", a.replace('\'', r"'\''"));
        let bin = assert_cmd::cargo::cargo_bin("tooldispatch");
        let mut command = quote(&bin.display().to_string());
        for arg in args {
            command.push(' ');
            command.push_str(&quote(arg));
        }
        let mut script = std::process::Command::new("script")
            .args(["-qec", &command, "/dev/null"])
            .env("XDG_DATA_HOME", td.data_dir())
            .env("XDG_CONFIG_HOME", td.data_dir().join("no-config"))
            .env_remove("TOOLDISPATCH_STORE")
            .env_remove("TOOLDISPATCH_CONFIG")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("`script` (util-linux) runs the command in a pseudo-terminal");
        let mut stdout = script.stdout.take().unwrap();
        let (tx, output) = std::sync::mpsc::channel::<Vec<u8>>();
        std::thread::spawn(move || {
            let mut buf = [0u8; 1024];
            while let Ok(n) = stdout.read(&mut buf) {
                if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                    break;
                }
            }
        });
        Terminal {
            stdin: script.stdin.take(),
            script,
            output,
            shown: Vec::new(),
        }
    }

    /// Wait until the terminal has shown `text` `nth` times, then type `keys`.
    pub fn answer(&mut self, text: &str, nth: usize, keys: &str) {
        use std::io::Write;
        while String::from_utf8_lossy(&self.shown).matches(text).count() < nth {
            let chunk = self
                .output
                .recv_timeout(Duration::from_secs(60))
                .unwrap_or_else(|_| {
                    panic!(
                        "{text:?} (#{nth}) never showed: {}",
                        String::from_utf8_lossy(&self.shown)
                    )
                });
            self.shown.extend(chunk);
        }
        let stdin = self.stdin.as_mut().unwrap();
        stdin.write_all(keys.as_bytes()).unwrap();
        stdin.flush().unwrap();
    }

    /// Wait for the command to end: whether it succeeded, and all the terminal showed.
    pub fn finish(mut self) -> (bool, String) {
        drop(self.stdin.take());
        let status = self.script.wait().unwrap();
        while let Ok(chunk) = self.output.recv_timeout(Duration::from_secs(5)) {
            self.shown.extend(chunk);
        }
        (
            status.success(),
            String::from_utf8_lossy(&self.shown).into_owned(),
        )
    }
}

/// What is not a model's reply, sent as one (issue 21): `(provider, input, what the error says
/// it is)`. Every provider gets a user message, a request body and another API's envelope.
pub fn not_replies() -> Vec<(&'static str, &'static str, &'static str)> {
    let user = r#"{"role":"user","content":"What is 2^10?"}"#;
    let request = r#"{"model":"gpt-5","messages":[{"role":"user","content":"What is 2^10?"}]}"#;
    let envelope = r#"{"model":"llama3","message":{"role":"assistant","tool_calls":[{"function":{"name":"calculate","arguments":{}}}]},"done":true}"#;
    let mut cases = Vec::new();
    for provider in [
        "openai",
        "anthropic",
        "claude-code",
        "openai-responses",
        "gemini",
    ] {
        cases.push((provider, user, r#"this is a "user" message"#));
        cases.push((
            provider,
            request,
            r#"this is a request body (it has "messages")"#,
        ));
        cases.push((
            provider,
            envelope,
            r#"this is a wrapper around the message"#,
        ));
    }
    cases.extend([
        (
            "gemini",
            r#"{"contents":[{"role":"user","parts":[{"text":"What is 2^10?"}]}]}"#,
            r#"this is a request body (it has "contents")"#,
        ),
        (
            "openai-responses",
            r#"{"model":"gpt-5","input":"What is 2^10?"}"#,
            r#"this is a request body (it has "input")"#,
        ),
        (
            "openai-responses",
            r#"[{"role":"user","content":"What is 2^10?"}]"#,
            r#"this is a list of input items (item 0 is a "user" message)"#,
        ),
        (
            "openai",
            r#"{"index":0,"message":{"role":"assistant","content":"4"},"finish_reason":"stop"}"#,
            r#"this is a wrapper around the message"#,
        ),
        (
            "openai",
            "{}",
            "this has none of an assistant message's fields",
        ),
    ]);
    cases
}

/// An assistant reply without tool calls in each provider's format: the model's answer.
pub fn answers_without_calls() -> Vec<(&'static str, &'static str)> {
    vec![
        (
            "openai",
            r#"{"role":"assistant","content":"It is 1024.","tool_calls":[]}"#,
        ),
        (
            "openai",
            r#"{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"It is 1024."},"finish_reason":"stop"}]}"#,
        ),
        (
            "anthropic",
            r#"{"role":"assistant","content":[{"type":"text","text":"It is 1024."}]}"#,
        ),
        ("claude-code", "It is 1024."),
        (
            "openai-responses",
            r#"[{"type":"message","role":"assistant","content":[{"type":"output_text","text":"It is 1024."}]}]"#,
        ),
        (
            "gemini",
            r#"{"candidates":[{"content":{"role":"model","parts":[{"text":"It is 1024."}]}}]}"#,
        ),
    ]
}
