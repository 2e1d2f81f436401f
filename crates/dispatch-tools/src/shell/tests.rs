//! run_command and background_command end to end: real child processes through a real engine.

use std::ffi::OsString;
use std::sync::Arc;
use std::time::{Duration, Instant};

use dispatch_engine::{
    ApproveAll, Engine, EngineConfig, EventKind, Provider, Registry, RoundOutcome, RoundRequest,
    Status, register_system_tools,
};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use super::process::{SandboxConfig, looks_secret};
use super::{BackgroundCommand, RunCommand};
use crate::test_support::*;
use dispatch_sandbox::Sandbox;

const BOTH: &str = "run_command,background_command";

async fn approving() -> Harness {
    let h = Harness::with_confirmer(Arc::new(ApproveAll));
    h.select("s", BOTH).await;
    h
}

/// Approving, with the sandbox off: the process-group tests read the pids a command prints,
/// which inside the sandbox's PID namespace are not the host's.
async fn approving_unconfined() -> Harness {
    let config = crate::ToolsConfig {
        sandbox: SandboxConfig::new(Arc::new(Sandbox::off())),
        ..Default::default()
    };
    let h = Harness::with_config(&config, Arc::new(ApproveAll));
    h.select("s", BOTH).await;
    h
}

/// One run_command call in its own run; returns (status, content).
async fn run(h: &Harness, args: Value) -> (Status, String) {
    let run = format!("r-{}", rand_id());
    let out = h
        .round("s", &run, vec![run_tool("c1", "run_command", args)])
        .await;
    (out.results[0].status, out.results[0].content.clone())
}

async fn bg(h: &Harness, args: Value) -> (Status, String) {
    let run = format!("r-{}", rand_id());
    let out = h
        .round("s", &run, vec![run_tool("c1", "background_command", args)])
        .await;
    (out.results[0].status, out.results[0].content.clone())
}

fn rand_id() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// True once `pid` has exited (gone, or a zombie nobody reaped yet).
fn exited(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with(['Z', 'X'])),
    }
}

async fn all_exit_within(pids: &[i32], within: Duration) -> bool {
    let deadline = Instant::now() + within;
    loop {
        if pids.iter().all(|p| exited(*p)) {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The numbers that are whole lines of `text` (pids a command printed).
fn pids_in(text: &str) -> Vec<i32> {
    text.lines()
        .filter_map(|l| l.trim().parse::<i32>().ok())
        .filter(|p| *p > 1)
        .collect()
}

#[tokio::test]
async fn arguments_reach_the_program_literally_without_a_shell() {
    let h = approving().await;
    let (status, content) = run(
        &h,
        json!({"argv": ["echo", "a;b", "$(whoami)", "*", "|", "'q'", "$HOME", "&&", "x y"]}),
    )
    .await;
    assert_eq!(status, Status::Ok, "{content}");
    let stdout = content.split("--- stdout ---\n").nth(1).unwrap();
    assert_eq!(stdout, "a;b $(whoami) * | 'q' $HOME && x y");
    assert!(
        content.starts_with("[run_command] exit code 0 ("),
        "{content}"
    );
}

#[tokio::test]
async fn a_non_zero_exit_is_a_result_with_the_code_and_both_streams() {
    let h = approving().await;
    let (status, content) = run(
        &h,
        json!({"argv": ["sh", "-c", "echo out; echo err >&2; exit 3"]}),
    )
    .await;
    assert_eq!(status, Status::Ok, "{content}");
    assert!(
        content.starts_with("[run_command] exit code 3 ("),
        "{content}"
    );
    assert!(
        content.ends_with("--- stdout ---\nout\n--- stderr ---\nerr"),
        "{content}"
    );
    assert!(content.contains("\n$ sh -c \"echo out; echo err >&2; exit 3\"  (in .)"));
}

#[tokio::test]
async fn a_missing_program_fails_with_what_to_do() {
    let h = approving().await;
    let (status, content) = run(&h, json!({"argv": ["no-such-program-4242", "x"]})).await;
    assert_eq!(status, Status::Failed);
    assert!(
        content.contains("command not found: \"no-such-program-4242\" is not on PATH"),
        "{content}"
    );
    std::fs::write(h.root().join("script.sh"), "echo hi\n").unwrap();
    let (status, content) = run(&h, json!({"argv": ["./script.sh"]})).await;
    assert_eq!(status, Status::Failed);
    assert!(content.contains("permission denied"), "{content}");
    // Both ways forward are named: make it executable, or run it through its interpreter.
    assert!(
        content.contains("[\"chmod\", \"+x\", \"./script.sh\"]"),
        "{content}"
    );
    assert!(content.contains("[\"sh\", \"./script.sh\"]"), "{content}");
    let (status, content) = run(&h, json!({"argv": ["ls"], "cwd": "nope"})).await;
    assert_eq!(status, Status::Failed);
    assert!(content.contains("cwd \"nope\" does not exist"), "{content}");
}

#[tokio::test]
async fn a_cwd_outside_the_work_directory_is_refused() {
    // Headless, a read-only command runs only inside the OS sandbox.
    if !sandbox_present() {
        return;
    }
    let h = Harness::new(); // `ls` needs no approval: the refusal is the tool's
    h.select("s", BOTH).await;
    for cwd in ["..", "../", "/", "/tmp", "sub/../.."] {
        let (status, content) = run(&h, json!({"argv": ["ls"], "cwd": cwd})).await;
        assert_eq!(status, Status::Failed, "{cwd}: {content}");
        assert!(
            content.contains("outside the work directory"),
            "{cwd}: {content}"
        );
    }
    std::fs::create_dir(h.root().join("sub")).unwrap();
    std::fs::write(h.root().join("sub/marker.txt"), "").unwrap();
    let (status, content) = run(&h, json!({"argv": ["ls"], "cwd": "sub"})).await;
    assert_eq!(status, Status::Ok, "{content}");
    assert!(content.contains("marker.txt"));
    assert!(content.contains("(in sub)"));
}

#[tokio::test]
async fn a_command_that_ignores_sigterm_is_killed_on_timeout() {
    let h = approving_unconfined().await;
    let started = Instant::now();
    let (status, content) = run(
        &h,
        json!({
            "argv": ["sh", "-c", "trap '' TERM; sleep 100 & echo $!; echo $$; wait; wait"],
            "timeout": 1
        }),
    )
    .await;
    assert_eq!(status, Status::Ok, "{content}");
    assert!(
        content.starts_with("[run_command] timed out after 1 s"),
        "{content}"
    );
    assert!(
        content.contains("[killed by signal 9 (SIGKILL)]"),
        "{content}"
    );
    let pids = pids_in(&content);
    assert_eq!(pids.len(), 2, "{content}");
    assert!(
        all_exit_within(&pids, Duration::from_secs(2)).await,
        "{pids:?} survived"
    );
    // One second of timeout plus the two-second grace, not the 100 s of sleep.
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn every_child_of_the_process_group_is_killed_on_timeout() {
    let h = approving_unconfined().await;
    let (status, content) = run(
        &h,
        json!({
            "argv": ["sh", "-c", "for i in $(seq 20); do sleep 100 & echo $!; done; wait"],
            "timeout": 1
        }),
    )
    .await;
    assert_eq!(status, Status::Ok, "{content}");
    assert!(content.contains("timed out after 1 s"), "{content}");
    let pids = pids_in(&content);
    assert_eq!(pids.len(), 20, "{content}");
    assert!(
        all_exit_within(&pids, Duration::from_secs(3)).await,
        "some of {pids:?} survived"
    );
}

#[tokio::test]
async fn processes_left_behind_after_the_exit_are_stopped_and_do_not_hold_the_call() {
    let h = approving_unconfined().await;
    let started = Instant::now();
    let (status, content) = run(
        &h,
        json!({"argv": ["sh", "-c", "sleep 100 & echo $!; nohup sleep 100 >/dev/null 2>&1 & echo $!"]}),
    )
    .await;
    assert_eq!(status, Status::Ok, "{content}");
    assert!(
        content.starts_with("[run_command] exit code 0"),
        "{content}"
    );
    assert!(content.contains("note: the command left processes running; they were stopped"));
    let pids = pids_in(&content);
    assert_eq!(pids.len(), 2, "{content}");
    assert!(all_exit_within(&pids, Duration::from_secs(2)).await);
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn a_silent_command_stops_at_its_idle_timeout() {
    let h = approving().await;
    let (status, content) = run(
        &h,
        json!({"argv": ["sh", "-c", "echo begun; sleep 100"], "idle_timeout": 1}),
    )
    .await;
    assert_eq!(status, Status::Ok, "{content}");
    assert!(
        content.starts_with("[run_command] stopped after 1 s without output (idle_timeout)"),
        "{content}"
    );
    assert!(content.ends_with("--- stdout ---\nbegun"), "{content}");
}

#[tokio::test]
async fn a_cancelled_round_kills_the_process_group() {
    let h = approving_unconfined().await;
    let marker = h.root().join("pids");
    let req = RoundRequest::new(
        "s",
        "cancel",
        Provider::OpenAi,
        vec![run_tool(
            "c1",
            "run_command",
            json!({"argv": ["sh", "-c", format!("sleep 100 & echo $! > {0}; echo $$ >> {0}; wait", marker.display())]}),
        )],
    );
    let cancel = req.cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(700)).await;
        cancel.cancel();
    });
    let _ = h.engine.round(req).await;
    let pids = pids_in(&std::fs::read_to_string(&marker).unwrap());
    assert_eq!(pids.len(), 2);
    // The engine dropped the call: the group guard stops the group from its own thread.
    assert!(
        all_exit_within(&pids, Duration::from_secs(4)).await,
        "{pids:?} survived"
    );
}

#[tokio::test]
async fn output_is_streamed_as_coalesced_progress_events() {
    let h = approving().await;
    let out = h
        .round(
            "s",
            "r",
            vec![run_tool(
                "c1",
                "run_command",
                json!({"argv": ["sh", "-c", "for i in 1 2 3 4 5; do echo tick $i; sleep 0.3; done; seq 1 20000"]}),
            )],
        )
        .await;
    assert_eq!(out.results[0].status, Status::Ok);
    let texts: Vec<String> = events_of(&out.events, "ToolProgress")
        .into_iter()
        .map(|k| match k {
            EventKind::ToolProgress { text, .. } => text.to_string(),
            other => panic!("{other:?}"),
        })
        .collect();
    let joined = texts.concat();
    for i in 1..=5 {
        assert!(joined.contains(&format!("tick {i}\n")), "{texts:?}");
    }
    assert!(joined.contains("20000\n"));
    // The ticks come apart, the 109 KB burst of `seq` comes as few events, each bounded.
    assert!(texts.len() >= 3 && texts.len() <= 15, "{}", texts.len());
    assert!(texts.iter().all(|t| t.len() <= 4096 + 64));
    assert!(joined.contains("bytes not shown"));
}

#[tokio::test]
async fn stdin_is_sent_when_given_and_empty_otherwise() {
    // Headless, a read-only command runs only inside the OS sandbox.
    if !sandbox_present() {
        return;
    }
    let h = Harness::new(); // cat is read-only
    h.select("s", BOTH).await;
    let (status, content) = run(&h, json!({"argv": ["cat"], "stdin": "piped text\n"})).await;
    assert_eq!(status, Status::Ok, "{content}");
    assert!(content.ends_with("--- stdout ---\npiped text"), "{content}");
    let (status, content) = run(&h, json!({"argv": ["cat"]})).await;
    assert_eq!(status, Status::Ok);
    assert!(
        content.contains("exit code 0") && content.ends_with("(no output)"),
        "{content}"
    );
}

#[tokio::test]
async fn a_shell_line_runs_once_approved() {
    let h = approving().await;
    let (status, content) = run(
        &h,
        json!({"argv": ["echo abc | tr a-c x-z && echo $((6*7))"], "shell": true}),
    )
    .await;
    assert_eq!(status, Status::Ok, "{content}");
    assert!(content.ends_with("--- stdout ---\nxyz\n42"), "{content}");

    let headless = Harness::new();
    headless.select("s", BOTH).await;
    let (status, _) = run(&headless, json!({"argv": ["ls"], "shell": true})).await;
    assert_eq!(status, Status::Declined);
}

#[tokio::test]
async fn read_only_commands_run_headless_and_others_are_declined() {
    // Headless, a read-only command runs only inside the OS sandbox.
    if !sandbox_present() {
        return;
    }
    let h = Harness::new();
    h.select("s", BOTH).await;
    std::fs::write(h.root().join("present.txt"), "").unwrap();
    let (status, content) = run(&h, json!({"argv": ["ls"]})).await;
    assert_eq!(status, Status::Ok, "{content}");
    assert!(content.contains("present.txt"));
    let (status, content) = run(&h, json!({"argv": ["touch", "x"]})).await;
    assert_eq!(status, Status::Declined, "{content}");
    assert!(
        content.contains("no one is available to approve it"),
        "{content}"
    );
    assert!(!h.root().join("x").exists());
    // Environment variables make even a listed command ask.
    let (status, _) = run(&h, json!({"argv": ["ls"], "env": {"LD_PRELOAD": "x.so"}})).await;
    assert_eq!(status, Status::Declined);
}

/// An engine whose command tools inherit `env` instead of the test process's environment.
async fn engine_with_parent_env(env: Vec<(OsString, OsString)>) -> (Engine, tempfile::TempDir) {
    let workdir = tempfile::tempdir().unwrap();
    let store = dispatch_store::open("memory:").unwrap();
    let mut registry = Registry::empty();
    register_system_tools(&mut registry).unwrap();
    registry
        .register(crate::builtin(
            RunCommand::new().with_parent_env(env.clone()),
        ))
        .unwrap();
    registry
        .register(crate::builtin(
            BackgroundCommand::new().with_parent_env(env),
        ))
        .unwrap();
    let engine = Engine::new(
        registry,
        store,
        Arc::new(ApproveAll),
        EngineConfig::new(workdir.path().canonicalize().unwrap()),
    )
    .unwrap();
    let out = engine
        .round(RoundRequest::new(
            "s",
            "select",
            Provider::OpenAi,
            vec![call(
                "sel",
                "find_tools",
                json!({"query": format!("select:{BOTH}")}),
            )],
        ))
        .await
        .unwrap();
    assert_eq!(out.results[0].status, Status::Ok);
    (engine, workdir)
}

async fn engine_run(engine: &Engine, name: &str, args: Value) -> RoundOutcome {
    let run = format!("r-{}", rand_id());
    engine
        .round(RoundRequest::new(
            "s",
            run,
            Provider::OpenAi,
            vec![run_tool("c1", name, args)],
        ))
        .await
        .unwrap()
}

#[tokio::test]
async fn inherited_secrets_are_scrubbed_unless_passed_by_name() {
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into());
    let parent: Vec<(OsString, OsString)> = vec![
        ("PATH".into(), path),
        ("MY_API_TOKEN".into(), "hunter2-token".into()),
        ("AWS_SECRET_ACCESS_KEY".into(), "aws-secret-value".into()),
        ("DATABASE_URL".into(), "postgres://u:pw-in-url@db/x".into()),
        ("PLAIN_SETTING".into(), "visible".into()),
    ];
    let (engine, _dir) = engine_with_parent_env(parent).await;
    let out = engine_run(&engine, "run_command", json!({"argv": ["env"]})).await;
    let content = &out.results[0].content;
    assert!(content.contains("PLAIN_SETTING=visible"), "{content}");
    for secret in [
        "hunter2-token",
        "aws-secret-value",
        "pw-in-url",
        "MY_API_TOKEN",
    ] {
        assert!(!content.contains(secret), "{secret} leaked: {content}");
    }
    assert!(content.contains("\nPWD="), "{content}");

    let out = engine_run(
        &engine,
        "run_command",
        json!({"argv": ["env"], "pass_env": ["MY_API_TOKEN"], "env": {"EXTRA_FLAG": "on", "PLAIN_SETTING": "overridden"}}),
    )
    .await;
    let content = &out.results[0].content;
    assert!(content.contains("MY_API_TOKEN=hunter2-token"), "{content}");
    assert!(content.contains("EXTRA_FLAG=on"));
    assert!(content.contains("PLAIN_SETTING=overridden"));
    assert!(!content.contains("aws-secret-value"));

    // A failing command says which names were withheld (never their values).
    let out = engine_run(
        &engine,
        "run_command",
        json!({"argv": ["sh", "-c", "exit 1"]}),
    )
    .await;
    let content = &out.results[0].content;
    assert!(
        content.contains("not passed: AWS_SECRET_ACCESS_KEY, DATABASE_URL, MY_API_TOKEN (list the ones it needs in pass_env)"),
        "{content}"
    );

    // Background jobs get the same scrubbed environment.
    let out = engine_run(
        &engine,
        "background_command",
        json!({"mode": "start", "argv": ["env"]}),
    )
    .await;
    let job = job_id(&out.results[0].content);
    let out = engine_run(
        &engine,
        "background_command",
        json!({"mode": "read", "job_id": job, "wait": 5}),
    )
    .await;
    let content = &out.results[0].content;
    assert!(content.contains("PLAIN_SETTING=visible"), "{content}");
    assert!(!content.contains("hunter2-token"));
}

#[tokio::test]
async fn the_real_environment_reaches_commands_without_anything_secret_looking() {
    let h = approving().await;
    let (status, content) = run(&h, json!({"argv": ["env"]})).await;
    assert_eq!(status, Status::Ok);
    let stdout = content.split("--- stdout ---\n").nth(1).unwrap_or("");
    assert!(stdout.lines().any(|l| l.starts_with("PATH=")), "{content}");
    for line in stdout.lines() {
        if let Some((name, value)) = line.split_once('=') {
            assert!(!looks_secret(name, value), "{name} was passed");
        }
    }
}

fn vm_hwm_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

#[tokio::test]
async fn a_hundred_megabytes_of_output_are_capped_in_memory_and_spilled_whole() {
    let h = approving().await;
    let before = vm_hwm_kib();
    // 100,000,000 bytes in lines of 26 bytes, the last one cut short.
    const LINE: &[u8; 26] = b"line of output 0123456789\n";
    let lines = 100_000_000u64.div_ceil(LINE.len() as u64);
    let (status, content) = run(
        &h,
        json!({"argv": ["sh", "-c", "yes 'line of output 0123456789' | head -c 100000000; echo done >&2"]}),
    )
    .await;
    let grown_mib = vm_hwm_kib().saturating_sub(before) / 1024;
    assert_eq!(
        status,
        Status::Ok,
        "{}",
        &content[..content.len().min(2000)]
    );
    assert!(content.contains("exit code 0"), "{}", &content[..2000]);
    // The tool's notice survives the engine's own shaping (it is in the head).
    let notice = content
        .lines()
        .find(|l| l.starts_with(&format!("--- stdout: 100000000 bytes in {lines} lines, middle omitted; the full stdout is in ")))
        .unwrap_or_else(|| panic!("{}", &content[..3000]));
    let path = notice
        .split(" is in ")
        .nth(1)
        .and_then(|rest| rest.split(" (read it").next())
        .unwrap();
    assert!(path.ends_with(".stdout.out"), "{path}");
    assert!(
        path.starts_with(
            &h.data_dir
                .path()
                .canonicalize()
                .unwrap()
                .display()
                .to_string()
        )
    );
    assert!(content.contains("line of output 0123456789\n"));
    assert!(
        content.contains("--- stderr ---\ndone"),
        "{}",
        &content[content.len() - 500..]
    );
    // The whole stream, readable at any offset.
    use std::io::{Read, Seek, SeekFrom};
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::metadata(path).unwrap();
    assert_eq!(meta.len(), 100_000_000);
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    let mut file = std::fs::File::open(path).unwrap();
    file.seek(SeekFrom::Start(26 * 2_000_000)).unwrap();
    let mut buf = [0u8; 26];
    file.read_exact(&mut buf).unwrap();
    assert_eq!(&buf, LINE);
    // Capture keeps 2 MiB per stream; 100 MB held in memory would show here.
    assert!(grown_mib < 64, "peak memory grew by {grown_mib} MiB");
}

fn job_id(content: &str) -> String {
    content
        .split("started ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .unwrap_or_else(|| panic!("no job id in {content}"))
        .to_string()
}

fn job_pid(content: &str) -> i32 {
    content
        .split("(pid ")
        .nth(1)
        .and_then(|rest| rest.split(')').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no pid in {content}"))
}

#[tokio::test]
async fn a_background_job_starts_at_once_and_is_read_listed_and_stopped() {
    let h = approving().await;
    let started = Instant::now();
    let (status, content) = bg(
        &h,
        json!({"mode": "start", "argv": ["sh", "-c", "echo first; sleep 0.5; echo second; sleep 100"]}),
    )
    .await;
    assert_eq!(status, Status::Ok, "{content}");
    assert!(started.elapsed() < Duration::from_secs(2));
    let id = job_id(&content);
    let pid = job_pid(&content);
    assert!(content.contains(&format!(
        "background_command(mode=\"read\", job_id=\"{id}\", offset=0)"
    )));

    let (_, content) = bg(&h, json!({"mode": "read", "job_id": id, "wait": 5})).await;
    assert!(
        content.contains(&format!("{id}: running for ")),
        "{content}"
    );
    assert!(content.contains("--- output ---\nfirst"), "{content}");
    assert!(content.contains("next offset 6;"), "{content}");

    let (_, content) = bg(
        &h,
        json!({"mode": "read", "job_id": id, "offset": 6, "wait": 5}),
    )
    .await;
    assert!(content.contains("--- output ---\nsecond"), "{content}");
    assert!(
        content.contains("output bytes 6-13 of 13; next offset 13; no more output yet"),
        "{content}"
    );

    let (_, content) = bg(&h, json!({"mode": "list"})).await;
    assert!(
        content.contains("1 job(s) in this session, 1 running (at most 16):"),
        "{content}"
    );
    assert!(content.contains(&format!("{id}  running for ")));
    assert!(content.contains("13 bytes of output  $ sh -c"));

    let (status, content) = bg(&h, json!({"mode": "stop", "job_id": id})).await;
    assert_eq!(status, Status::Ok, "{content}");
    assert!(
        content.contains(&format!(
            "{id} stopped with every process it started: killed by signal 15 (SIGTERM)"
        )),
        "{content}"
    );
    assert!(all_exit_within(&[pid], Duration::from_secs(2)).await);
    let (_, content) = bg(&h, json!({"mode": "read", "job_id": id, "offset": 13})).await;
    assert!(content.contains("(stopped with mode=stop)"), "{content}");
    assert!(
        content.contains("that is all: the job has ended"),
        "{content}"
    );
    let (_, content) = bg(&h, json!({"mode": "stop", "job_id": id})).await;
    assert!(content.contains("had already ended"), "{content}");
}

#[tokio::test]
async fn reading_from_an_offset_returns_the_rest_and_the_exit_status() {
    let h = approving().await;
    let (_, content) = bg(
        &h,
        json!({"mode": "start", "argv": ["printf", "0123456789"]}),
    )
    .await;
    let id = job_id(&content);
    let (_, content) = bg(
        &h,
        json!({"mode": "read", "job_id": id, "offset": 4, "wait": 5}),
    )
    .await;
    // The read may see the output before the exit is recorded; wait for the end.
    let content = if content.contains("running") {
        tokio::time::sleep(Duration::from_millis(500)).await;
        bg(&h, json!({"mode": "read", "job_id": id, "offset": 4}))
            .await
            .1
    } else {
        content
    };
    assert!(
        content.contains(&format!("{id}: exit code 0 after ")),
        "{content}"
    );
    assert!(
        content.contains("output bytes 4-10 of 10; next offset 10; that is all"),
        "{content}"
    );
    assert!(content.ends_with("--- output ---\n456789"), "{content}");
    let (status, content) = bg(&h, json!({"mode": "read", "job_id": id, "offset": 11})).await;
    assert_eq!(status, Status::Failed);
    assert!(
        content.contains("offset 11 is past the end of"),
        "{content}"
    );
}

#[tokio::test]
async fn a_session_runs_at_most_sixteen_jobs_and_dropping_the_tool_kills_them() {
    let h = approving().await;
    let mut pids = Vec::new();
    let mut ids = Vec::new();
    for i in 0..16 {
        let (status, content) = bg(
            &h,
            json!({"mode": "start", "argv": ["sleep", format!("{}", 100 + i)]}),
        )
        .await;
        assert_eq!(status, Status::Ok, "{content}");
        ids.push(job_id(&content));
        pids.push(job_pid(&content));
    }
    let (status, content) = bg(&h, json!({"mode": "start", "argv": ["sleep", "99"]})).await;
    assert_eq!(status, Status::Failed);
    assert!(
        content.contains("16 background jobs are already running in this session (the limit)"),
        "{content}"
    );
    // Another session has its own allowance.
    let out = h
        .round(
            "other",
            "r",
            vec![call(
                "sel",
                "find_tools",
                json!({"query": "select:background_command"}),
            )],
        )
        .await;
    assert_eq!(out.results[0].status, Status::Ok);
    let out = h
        .round(
            "other",
            "r2",
            vec![run_tool(
                "c",
                "background_command",
                json!({"mode": "start", "argv": ["sleep", "98"]}),
            )],
        )
        .await;
    assert_eq!(
        out.results[0].status,
        Status::Ok,
        "{}",
        out.results[0].content
    );
    pids.push(job_pid(&out.results[0].content));
    // ...and cannot see this session's jobs.
    let out = h
        .round(
            "other",
            "r3",
            vec![run_tool(
                "c",
                "background_command",
                json!({"mode": "read", "job_id": ids[0]}),
            )],
        )
        .await;
    assert!(
        out.results[0].content.contains("no job"),
        "{}",
        out.results[0].content
    );

    // Stopping one makes room.
    let (_, content) = bg(&h, json!({"mode": "stop", "job_id": ids[3]})).await;
    assert!(content.contains("stopped"), "{content}");
    let (status, content) = bg(&h, json!({"mode": "start", "argv": ["sleep", "97"]})).await;
    assert_eq!(status, Status::Ok, "{content}");
    pids.push(job_pid(&content));

    drop(h);
    assert!(
        all_exit_within(&pids, Duration::from_secs(3)).await,
        "jobs outlived the tool: {:?}",
        pids.iter().filter(|p| !exited(**p)).collect::<Vec<_>>()
    );
}

#[tokio::test]
async fn listing_and_reading_need_no_approval() {
    // Headless, a read-only command runs only inside the OS sandbox.
    if !sandbox_present() {
        return;
    }
    let h = Harness::new();
    h.select("s", BOTH).await;
    let (status, content) = bg(&h, json!({"mode": "list"})).await;
    assert_eq!(status, Status::Ok);
    assert_eq!(
        content,
        "[background_command] no background jobs in this session; start one with mode=start"
    );
    // A read-only command may start headless; anything else asks.
    let (status, content) = bg(&h, json!({"mode": "start", "argv": ["ls"]})).await;
    assert_eq!(status, Status::Ok, "{content}");
    let (status, _) = bg(&h, json!({"mode": "start", "argv": ["touch", "x"]})).await;
    assert_eq!(status, Status::Declined);
    let (status, content) = bg(
        &h,
        json!({"mode": "read", "job_id": job_id(&content), "wait": 5}),
    )
    .await;
    assert_eq!(status, Status::Ok, "{content}");
}

/// The security review's payloads against the default headless mode: each is judged not
/// read-only (or sensitive) and declined, and none of them ran. Closes the class "the gate
/// guessed from argument names": the judgement refuses unknown options and reads glued values.
#[tokio::test]
async fn review_payloads_are_declined_headless_and_nothing_runs() {
    let h = Harness::new();
    h.select("s", BOTH).await;
    let root = h.root().to_path_buf();
    std::fs::write(root.join("x"), "log\n").unwrap();
    std::fs::write(root.join(".env"), "TOKEN=1\n").unwrap();
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .current_dir(&root)
            .output()
            .unwrap()
    };
    git(&["init", "-q"]);
    let marker = tempfile::tempdir().unwrap();
    let touched = marker.path().join("pwned");
    let payload = format!("-Osh -c \"id; touch {}\" x", touched.display());
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("id_rsa"), "KEY").unwrap();
    std::os::unix::fs::symlink(outside.path().join("id_rsa"), root.join("notes")).unwrap();
    let cases: Vec<(&str, Value)> = vec![
        (
            "git grep -O through an unknown global option",
            json!({"argv": ["git", "--no-literal-pathspecs", "grep", payload, "--max-depth=5", "log"]}),
        ),
        (
            "git -c pager",
            json!({"argv": ["git", "-c", format!("core.pager=touch {}", touched.display()), "log"]}),
        ),
        (
            "fsmonitor through env",
            json!({"argv": ["git", "status"], "env": {"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "core.fsmonitor", "GIT_CONFIG_VALUE_0": format!("touch {}", touched.display())}}),
        ),
        (
            "glued short option value",
            json!({"argv": ["date", "-f.env"]}),
        ),
        ("glued /dev/zero", json!({"argv": ["date", "-f/dev/zero"]})),
        (
            "file -f outside",
            json!({"argv": ["file", "-f/etc/passwd"]}),
        ),
        ("symlink to a key", json!({"argv": ["cat", "notes"]})),
        (
            "git config in cwd .git",
            json!({"argv": ["cat", "config"], "cwd": ".git"}),
        ),
        ("network", json!({"argv": ["ls"], "network": true})),
        (
            "shell line",
            json!({"argv": [format!("touch {}", touched.display())], "shell": true}),
        ),
    ];
    for (what, args) in cases {
        let (status, content) = run(&h, args.clone()).await;
        assert_eq!(status, Status::Declined, "{what}: {content}");
        // background_command start judges the same argv the same way.
        let mut start = args;
        start["mode"] = json!("start");
        let (status, content) = bg(&h, start).await;
        assert_eq!(status, Status::Declined, "background {what}: {content}");
    }
    assert!(!touched.exists(), "a declined payload ran");
}

/// Host processes whose command line contains `marker`.
fn processes_with(marker: &str) -> Vec<i32> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
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

async fn none_left_within(marker: &str, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    while !processes_with(marker).is_empty() {
        if Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    true
}

#[tokio::test]
async fn a_sandboxed_command_and_everything_it_started_stop_on_timeout() {
    if !sandbox_present() {
        return;
    }
    let h = approving().await;
    let marker = format!("100.{}{}", std::process::id(), rand_id());
    let started = Instant::now();
    let (status, content) = run(
        &h,
        json!({
            "argv": ["sh", "-c", format!("trap '' TERM; sleep {marker} & setsid sleep {marker} & sleep {marker}")],
            "timeout": 1
        }),
    )
    .await;
    assert_eq!(status, Status::Ok, "{content}");
    assert!(content.contains("timed out after 1 s"), "{content}");
    assert!(
        none_left_within(&format!("sleep {marker}"), Duration::from_secs(3)).await,
        "{:?} survived",
        processes_with(&marker)
    );
    assert!(started.elapsed() < Duration::from_secs(8));
}

#[tokio::test]
async fn a_cancelled_sandboxed_round_stops_everything() {
    if !sandbox_present() {
        return;
    }
    let h = approving().await;
    let marker = format!("101.{}{}", std::process::id(), rand_id());
    let req = RoundRequest::new(
        "s",
        "cancel-sandboxed",
        Provider::OpenAi,
        vec![run_tool(
            "c1",
            "run_command",
            json!({"argv": ["sh", "-c", format!("sleep {marker} & sleep {marker}")]}),
        )],
    );
    let cancel = req.cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(700)).await;
        cancel.cancel();
    });
    let _ = h.engine.round(req).await;
    assert!(none_left_within(&format!("sleep {marker}"), Duration::from_secs(4)).await);
}

/// Spawns its argv exactly as run_command does for a command judged read-only, whatever the
/// judgment would say: what a wrong judgment meets.
struct JudgedReadOnly {
    spec: dispatch_engine::ToolSpec,
}

#[async_trait::async_trait]
impl dispatch_engine::Tool for JudgedReadOnly {
    fn spec(&self) -> &dispatch_engine::ToolSpec {
        &self.spec
    }
    async fn call(
        &self,
        cx: dispatch_engine::ToolContext,
        args: Value,
    ) -> Result<dispatch_engine::ToolOutput, dispatch_engine::ToolError> {
        let argv: Vec<String> = serde_json::from_value(args["argv"].clone()).unwrap();
        let prepared = super::process::prepare(
            &cx,
            super::process::CommandArgs {
                argv: &argv,
                cwd: None,
                shell: false,
                env: None,
                pass_env: None,
                network: false,
                write_paths: None,
            },
            &super::process::process_env(),
        )?;
        let (child, group) =
            super::process::spawn(&prepared, false, &SandboxConfig::default(), true)?;
        let out = child.wait_with_output().await.unwrap();
        let note = group
            .sandbox_note(Some(out.status), &out.stderr)
            .unwrap_or_default();
        Ok(dispatch_engine::ToolOutput::text(format!(
            "{:?}\n{note}\n{}",
            group.level(),
            String::from_utf8_lossy(&out.stderr)
        )))
    }
}

#[tokio::test]
async fn a_read_only_judgment_that_was_wrong_cannot_write() {
    if !sandbox_present() {
        return;
    }
    let schema = json!({"type": "object", "properties": {"argv": {"type": "array", "items": {"type": "string"}}}});
    let spec = dispatch_engine::ToolSpec::new("judged_read_only", "test", schema).read_only();
    let registry = |stores: &crate::Stores| {
        let mut registry =
            crate::builtin_registry_with(&crate::ToolsConfig::default(), stores).unwrap();
        registry
            .register(Arc::new(JudgedReadOnly { spec }))
            .unwrap();
        registry
    };
    let h = Harness::with_registry(registry, Arc::new(dispatch_engine::Headless));
    h.select("s", "judged_read_only").await;
    let outside = tempfile::tempdir_in("/var/tmp").unwrap();
    for (argv, file) in [
        (
            vec!["touch".to_string(), "made.txt".to_string()],
            h.root().join("made.txt"),
        ),
        (
            vec![
                "touch".to_string(),
                outside.path().join("x").display().to_string(),
            ],
            outside.path().join("x"),
        ),
    ] {
        let out = h
            .round(
                "s",
                &format!("r-{}", rand_id()),
                vec![run_tool("c1", "judged_read_only", json!({"argv": argv}))],
            )
            .await;
        let content = &out.results[0].content;
        assert!(content.contains("Some(ReadOnly)"), "{content}");
        assert!(
            content.contains("sandbox: blocked: the read-only sandbox allows no writes"),
            "{content}"
        );
        assert!(content.contains("ask again with write_paths"), "{content}");
        assert!(!file.exists());
    }
}

#[tokio::test]
async fn a_read_only_command_cannot_read_tooldispatch_files_through_a_link() {
    if !sandbox_present() {
        return;
    }
    // The gate asks first (the link resolves into .tooldispatch); approved past that question,
    // the sandbox still hides the file: each layer holds when the one before it failed.
    let h = approving().await;
    std::fs::create_dir(h.root().join(".tooldispatch")).unwrap();
    std::fs::write(h.root().join(".tooldispatch/rules.toml"), "RULES-SECRET").unwrap();
    std::os::unix::fs::symlink(
        h.root().join(".tooldispatch/rules.toml"),
        h.root().join("notes"),
    )
    .unwrap();
    let (status, content) = run(&h, json!({"argv": ["cat", "notes"]})).await;
    assert_eq!(status, Status::Ok, "{content}");
    assert!(!content.contains("RULES-SECRET"), "{content}");
    assert!(content.contains("Permission denied"), "{content}");
    assert!(content.contains("hidden in the sandbox"), "{content}");
}

#[tokio::test]
async fn an_approved_command_writes_in_the_work_dir_and_nowhere_else() {
    if !sandbox_present() {
        return;
    }
    let h = approving().await;
    // Not under /tmp: the sandbox's /tmp is its own, which would hide the directory anyway.
    let outside = tempfile::tempdir_in("/var/tmp").unwrap();
    let (status, content) = run(
        &h,
        json!({
            "argv": ["sh", "-c", "echo ok > made.txt && mkdir -p out && echo x > out/f && echo no > \"$OUTSIDE/x\""],
            "env": {"OUTSIDE": outside.path().display().to_string()},
            "write_paths": ["out"]
        }),
    )
    .await;
    assert_eq!(status, Status::Ok, "{content}");
    assert!(
        content.starts_with("[run_command] exit code 2"),
        "{content}"
    );
    assert!(content.contains("\nwrite_paths: out"), "{content}");
    assert!(
        content.contains(
            "sandbox: blocked: the workspace sandbox allows writes only in the work directory"
        ),
        "{content}"
    );
    assert_eq!(
        std::fs::read_to_string(h.root().join("made.txt")).unwrap(),
        "ok\n"
    );
    assert!(!outside.path().join("x").exists());

    let (status, content) = run(&h, json!({"argv": ["true"], "write_paths": ["../x"]})).await;
    assert_eq!(status, Status::Failed, "{content}");
    assert!(
        content.contains("write_paths: path \"../x\" refused"),
        "{content}"
    );
}

#[tokio::test]
async fn the_network_is_there_only_when_the_call_asks_for_it() {
    if !sandbox_present() || !std::path::Path::new("/usr/bin/curl").exists() {
        return;
    }
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        use std::io::{Read, Write};
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut buf = [0u8; 1024];
            let _ = stream.read(&mut buf);
            let _ = stream.write_all(b"HTTP/1.0 200 OK\r\nContent-Length: 4\r\n\r\npong");
        }
    });
    let h = approving().await;
    let url = format!("http://127.0.0.1:{port}/");
    let (_, content) = run(&h, json!({"argv": ["curl", "-sS", "--max-time", "5", url]})).await;
    assert!(
        content.contains("ask again with network: true"),
        "{content}"
    );
    let (_, content) = run(
        &h,
        json!({"argv": ["curl", "-sS", "--max-time", "5", url], "network": true}),
    )
    .await;
    assert!(content.ends_with("--- stdout ---\npong"), "{content}");
}

#[tokio::test]
async fn relative_path_entries_are_ignored_when_finding_the_program() {
    let h = approving().await;
    std::fs::create_dir(h.root().join("bin")).unwrap();
    std::fs::write(h.root().join("bin/mytool"), "#!/bin/sh\necho planted\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(
        h.root().join("bin/mytool"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    let env = json!({"PATH": "bin:/usr/local/bin:/usr/bin:/bin"});
    let (status, content) = run(&h, json!({"argv": ["mytool"], "env": env})).await;
    assert_eq!(status, Status::Failed, "{content}");
    assert!(
        content
            .contains("command not found: \"mytool\" is only in the relative PATH entry \"bin\""),
        "{content}"
    );
    assert!(content.contains("[\"./bin/mytool\"]"), "{content}");
    let (status, content) = run(&h, json!({"argv": ["./bin/mytool"]})).await;
    assert_eq!(status, Status::Ok, "{content}");
    assert!(content.ends_with("planted"), "{content}");
    // Nested lookups see only the absolute entries.
    let (_, content) = run(
        &h,
        json!({"argv": ["sh", "-c", "echo \"$PATH\""], "env": env}),
    )
    .await;
    assert!(
        content.ends_with("--- stdout ---\n/usr/local/bin:/usr/bin:/bin"),
        "{content}"
    );
}

#[tokio::test]
async fn a_background_job_refused_by_the_sandbox_says_so_when_read() {
    if !sandbox_present() {
        return;
    }
    let h = approving().await;
    let (status, content) = bg(
        &h,
        json!({"mode": "start", "argv": ["sh", "-c", "echo started; echo x > /etc/td-sandbox-probe"]}),
    )
    .await;
    assert_eq!(status, Status::Ok, "{content}");
    let id = job_id(&content);
    let deadline = Instant::now() + Duration::from_secs(10);
    let content = loop {
        let (_, content) = bg(&h, json!({"mode": "read", "job_id": id, "wait": 2})).await;
        if content.contains("that is all") || Instant::now() > deadline {
            break content;
        }
    };
    assert!(content.contains("exit code 2"), "{content}");
    assert!(
        content.contains("; sandbox: blocked: the workspace sandbox allows writes only in"),
        "{content}"
    );
    assert!(!std::path::Path::new("/etc/td-sandbox-probe").exists());
}

#[tokio::test]
async fn a_sandboxed_command_gets_sigterm_and_its_grace_before_sigkill() {
    if !sandbox_present() {
        return;
    }
    if !Sandbox::shared().cgroups() {
        dispatch_testkit::skipped(
            "no per-command cgroup, so a sandboxed command is stopped at once",
        );
        return;
    }
    let h = approving().await;
    let (status, content) = run(
        &h,
        json!({
            "argv": ["sh", "-c", "trap 'echo got-term; exit 0' TERM; echo ready; sleep 100 & wait"],
            "timeout": 1
        }),
    )
    .await;
    assert_eq!(status, Status::Ok, "{content}");
    assert!(content.contains("timed out after 1 s"), "{content}");
    assert!(content.contains("ready\ngot-term"), "{content}");
}

/// A repository's own config cannot make git run a program: the review's `core.fsmonitor`
/// (and a pager and a hook) in `.git/config` are neutralised on every git a command starts,
/// read-only or approved.
#[tokio::test]
async fn a_repositorys_fsmonitor_pager_and_hooks_never_run() {
    let h = approving().await;
    let root = h.root().to_path_buf();
    let git = |args: &[&str]| {
        let out = std::process::Command::new("git")
            .args(args)
            .current_dir(&root)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
    };
    git(&["init", "-q"]);
    std::fs::write(root.join("a.txt"), "a\n").unwrap();
    let marker = root.join("ran");
    let planted = format!("touch {}", marker.display());
    git(&["config", "core.fsmonitor", &planted]);
    git(&["config", "core.pager", &planted]);
    std::fs::create_dir_all(root.join("hooks")).unwrap();
    std::fs::write(
        root.join("hooks/pre-commit"),
        format!("#!/bin/sh\n{planted}\n"),
    )
    .unwrap();
    std::fs::set_permissions(
        root.join("hooks/pre-commit"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    git(&["config", "core.hooksPath", "hooks"]);
    for argv in [
        json!(["git", "status"]),
        json!(["git", "-P", "log"]),
        json!(["git", "add", "a.txt"]),
        json!([
            "git",
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "commit",
            "-qm",
            "x"
        ]),
    ] {
        let (status, content) = run(&h, json!({"argv": argv})).await;
        assert_eq!(status, Status::Ok, "{argv}: {content}");
        assert!(
            !marker.exists(),
            "{argv} ran the repository's program: {content}"
        );
    }
}

/// Review finding: `allow run_command(git status **)` plus `env` setting core.fsmonitor (and
/// `pass_env` leaking a variable) ran code. A call that sets or passes variables asks unless
/// the rule names them.
#[tokio::test]
async fn an_allow_rule_does_not_let_unnamed_environment_variables_through() {
    let h = Harness::with_rules(
        |stores| crate::builtin_registry_with(&crate::ToolsConfig::default(), stores).unwrap(),
        Arc::new(dispatch_engine::Headless),
        "allow run_command(git status **)\nallow run_command(git log **) env(GIT_PAGER)\n",
    );
    h.select("s", BOTH).await;
    let root = h.root().to_path_buf();
    assert!(
        std::process::Command::new("git")
            .args(["init", "-q"])
            .current_dir(&root)
            .status()
            .unwrap()
            .success()
    );
    let marker = root.join("ran");
    let cases = [
        (
            json!({"argv": ["git", "status", "-s"], "env": {"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "core.fsmonitor", "GIT_CONFIG_VALUE_0": format!("touch {}", marker.display())}}),
            Status::Declined,
        ),
        (
            json!({"argv": ["git", "status", "-s"], "pass_env": ["HOME"]}),
            Status::Declined,
        ),
        (
            json!({"argv": ["git", "log", "-n1"], "env": {"GIT_PAGER": "cat"}}),
            Status::Ok,
        ),
        (json!({"argv": ["git", "status", "-s"]}), Status::Ok),
    ];
    for (args, want) in cases {
        let (status, content) = run(&h, args.clone()).await;
        assert_eq!(status, want, "{args}: {content}");
    }
    assert!(!marker.exists());
}

/// Where no sandbox can be set up, a command that would have run without asking asks, with
/// the reason; with `[sandbox] mode = "off"` (the user's own choice) it runs as before.
#[tokio::test]
async fn without_a_sandbox_a_read_only_command_asks_with_the_reason() {
    let headless = |sandbox: Sandbox| {
        let config = crate::ToolsConfig {
            sandbox: SandboxConfig::new(Arc::new(sandbox)),
            ..Default::default()
        };
        Harness::with_config(&config, Arc::new(dispatch_engine::Headless))
    };
    let h = headless(Sandbox::unavailable("bubblewrap is not installed"));
    h.select("s", BOTH).await;
    std::fs::write(h.root().join("a.txt"), "hello\n").unwrap();
    let (status, content) = run(&h, json!({"argv": ["cat", "a.txt"]})).await;
    assert_eq!(status, Status::Declined, "{content}");
    assert!(
        content.contains("only reads, but no OS sandbox is available here to hold it to that (bubblewrap is not installed)"),
        "{content}"
    );
    let h = headless(Sandbox::off());
    h.select("s", BOTH).await;
    std::fs::write(h.root().join("a.txt"), "hello\n").unwrap();
    let (status, content) = run(&h, json!({"argv": ["cat", "a.txt"]})).await;
    assert_eq!(status, Status::Ok, "{content}");
    assert!(content.contains("hello"), "{content}");
}
