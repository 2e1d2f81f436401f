//! `run_command`: run a program to completion and report its exit status and output.
//!
//! An argv, never a shell string, so arguments reach the program exactly as written (`;`,
//! `$(…)` and `*` mean nothing); a shell line needs `shell: true`, which always asks the user.
//! The call enforces its own hard and idle timeouts rather than relying on the engine's, so a
//! command that runs too long is stopped gracefully and its output still comes back. A
//! non-zero exit is an answer the model needs to read, not a failure of the tool.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use dispatch_engine::{
    Access, Effect, Gate, Subject, ToolContext, ToolError, ToolOutput, ToolSpec,
};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;
use std::path::Path;
use tokio::io::AsyncWriteExt;
use tokio::process::ChildStdin;

use super::capture::{Capture, ProgressFeed};
use super::process::{
    self, CommandArgs, GRACE, Pipes, SandboxConfig, StderrTail, Stopped, Stream, describe_exit,
    safe_component, session_dir,
};
use super::readonly::ReadOnlyCommands;
use super::subject::CommandCall;
use crate::BuiltinTool;

/// Default hard limit of one command (the seed's 300 s).
pub const DEFAULT_TIMEOUT_SECS: u64 = 300;
/// Longest hard limit a call may ask for.
pub const MAX_TIMEOUT_SECS: u64 = 1800;
/// Default limit on silence.
pub const DEFAULT_IDLE_SECS: u64 = 120;
/// Largest stdin a call may send.
pub const MAX_STDIN_BYTES: usize = 1024 * 1024;
/// How often streamed output becomes a progress event.
const PROGRESS_TICK: Duration = Duration::from_millis(200);
/// After the command exits, how long its output pipes may stay open before whatever still
/// holds them (a background child in its group) is stopped.
const DRAIN_AFTER_EXIT: Duration = Duration::from_millis(200);
/// How long to keep reading after the group was stopped before giving up on the pipes.
const FINAL_DRAIN: Duration = Duration::from_secs(1);

/// Run a program and wait for it.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunCommandArgs {
    /// The program and its arguments, one item each, passed as-is with no shell: `*`, `;`,
    /// `$VAR` and quotes are literal. E.g. ["cargo", "test", "--", "--nocapture"]. 1-256 items,
    /// each at most 32 KiB.
    #[schemars(length(min = 1))]
    argv: Vec<String>,
    /// Directory to run in, relative to the work directory (default: the work directory).
    #[serde(default)]
    cwd: Option<String>,
    /// Hard limit in seconds (default 300, at most 1800); the command and everything it started
    /// are killed then. Use background_command for servers and longer jobs.
    #[serde(default)]
    #[schemars(range(min = 1, max = 1800))]
    timeout: Option<u64>,
    /// Stop the command when it prints nothing for this many seconds (default 120, at most
    /// 1800). Raise it for commands that are quiet for long.
    #[serde(default)]
    #[schemars(range(min = 1, max = 1800))]
    idle_timeout: Option<u64>,
    /// true: argv is exactly one shell command line, run with `sh -c` (pipes, redirects, &&).
    /// Always asks the user first; prefer plain argv.
    #[serde(default)]
    shell: Option<bool>,
    /// Extra environment variables, {"NAME": "value"}; at most 64.
    #[serde(default)]
    env: Option<BTreeMap<String, String>>,
    /// Inherited variables that look like secrets (names with TOKEN, SECRET, PASSWORD, KEY,
    /// AWS_…) are removed; list the ones this command needs, e.g. ["GITHUB_TOKEN", "AWS_*"].
    #[serde(default)]
    pass_env: Option<Vec<String>>,
    /// Text for the command's standard input (at most 1 MiB); by default it reads nothing.
    #[serde(default)]
    stdin: Option<String>,
    /// true: the command may use the network; always asks. Without it commands run with no
    /// network access.
    #[serde(default)]
    network: Option<bool>,
    /// Paths inside the work directory the command writes (e.g. ["target", "dist"]); a command
    /// that writes runs in the workspace sandbox, which asks. Without it, a command judged
    /// read-only runs in the read-only sandbox and cannot write.
    #[serde(default)]
    write_paths: Option<Vec<String>>,
}

/// How the wait for the command ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum End {
    Exited,
    TimedOut,
    Idle,
    Cancelled,
}

pub struct RunCommand {
    /// What commands inherit (scrubbed); `None`: this process's environment at call time.
    parent_env: Option<Vec<(OsString, OsString)>>,
    /// Commands the user declared read-only (`[commands] read_only`).
    read_only: ReadOnlyCommands,
    sandbox: SandboxConfig,
}

impl RunCommand {
    pub fn new() -> Self {
        RunCommand {
            parent_env: None,
            read_only: ReadOnlyCommands::default(),
            sandbox: SandboxConfig::default(),
        }
    }

    /// Also run these commands without asking, in the read-only sandbox.
    pub fn with_read_only_commands(mut self, commands: ReadOnlyCommands) -> Self {
        self.read_only = commands;
        self
    }

    /// Run commands in `sandbox` instead of the machine's (detected once per process).
    pub fn with_sandbox(mut self, sandbox: SandboxConfig) -> Self {
        self.sandbox = sandbox;
        self
    }

    /// Commands inherit `env` (scrubbed of secrets) instead of this process's environment.
    pub fn with_parent_env(mut self, env: Vec<(OsString, OsString)>) -> Self {
        self.parent_env = Some(env);
        self
    }
}

impl Default for RunCommand {
    fn default() -> Self {
        Self::new()
    }
}

#[async_trait]
impl BuiltinTool for RunCommand {
    const NAME: &'static str = "run_command";
    const DESCRIPTION: &'static str = "Run a program in the work directory and wait for it; returns the exit code, stdout and stderr (long output keeps its head, tail and error lines; the full text is saved to a file). argv is passed without a shell. A non-zero exit is reported, not an error. Commands that only read (ls, cat, git status/log/diff, …) run without asking; others ask the user. Stopped after `timeout` s (default 300) or `idle_timeout` s without output (default 120), with every process it started.";
    type Args = RunCommandArgs;

    fn declare(&self, spec: ToolSpec) -> ToolSpec {
        spec.gate(Gate::Ask)
            .effect(Effect::Mutates)
            // The call enforces `timeout` itself (stopping gracefully, keeping the output);
            // the engine's limit is a backstop above the largest one a call may ask for.
            .timeout(Duration::from_secs(MAX_TIMEOUT_SECS) + 2 * GRACE + Duration::from_secs(10))
            .elide_args(&["stdin"])
    }

    fn subject(&self, args: &Value, workdir: &Path) -> Option<Subject> {
        Some(match CommandCall::from_args(args) {
            Some(call) => {
                call.subject(
                    "run_command",
                    workdir,
                    &self.read_only,
                    self.sandbox.missing().as_deref(),
                )
                .0
            }
            None => Subject::new(Access::Changes),
        })
    }

    async fn run(&self, cx: ToolContext, args: RunCommandArgs) -> Result<ToolOutput, ToolError> {
        let timeout = Duration::from_secs(
            args.timeout
                .unwrap_or(DEFAULT_TIMEOUT_SECS)
                .clamp(1, MAX_TIMEOUT_SECS),
        );
        let idle = Duration::from_secs(
            args.idle_timeout
                .unwrap_or(DEFAULT_IDLE_SECS)
                .clamp(1, MAX_TIMEOUT_SECS),
        );
        if let Some(stdin) = &args.stdin
            && stdin.len() > MAX_STDIN_BYTES
        {
            return Err(ToolError::failed(format!(
                "stdin is {} bytes, over the limit of {MAX_STDIN_BYTES}; write it to a file and pass the path instead",
                stdin.len()
            )));
        }
        let inherited;
        let parent_env = match &self.parent_env {
            Some(env) => env,
            None => {
                inherited = process::process_env();
                &inherited
            }
        };
        let prepared = process::prepare(
            &cx,
            CommandArgs {
                argv: &args.argv,
                cwd: args.cwd.as_deref(),
                shell: args.shell.unwrap_or(false),
                env: args.env.as_ref(),
                pass_env: args.pass_env.as_deref(),
                network: args.network.unwrap_or(false),
                write_paths: args.write_paths.as_deref(),
            },
            parent_env,
        )?;
        let read_only =
            process::judged_read_only(&prepared, args.shell.unwrap_or(false), &self.read_only);
        let report = execute(
            &cx,
            &prepared,
            &self.sandbox,
            read_only,
            args.stdin,
            timeout,
            idle,
        )
        .await?;
        Ok(ToolOutput::text(report))
    }
}

/// Where a stream spills: `sessions/<session>/results/<call>-<time>.<stream>.out`.
fn spill_target(cx: &ToolContext, stream: &str) -> Option<std::path::PathBuf> {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    session_dir(cx, "results").map(|dir| {
        dir.join(format!(
            "{}-{nanos}.{stream}.out",
            safe_component(&cx.call_id)
        ))
    })
}

async fn execute(
    cx: &ToolContext,
    prepared: &process::Prepared,
    sandbox: &SandboxConfig,
    read_only: bool,
    stdin: Option<String>,
    timeout: Duration,
    idle: Duration,
) -> Result<String, ToolError> {
    let started = Instant::now();
    let (mut child, mut group) = process::spawn(prepared, stdin.is_some(), sandbox, read_only)?;
    let mut stderr_tail = StderrTail::default();
    let mut pipes = Pipes::take(&mut child);
    let mut stdout = Capture::with_quota("stdout", spill_target(cx, "stdout"), cx.spill_quota);
    let mut stderr = Capture::with_quota("stderr", spill_target(cx, "stderr"), cx.spill_quota);
    let mut feed = ProgressFeed::new(cx.progress.clone());
    let mut stdin_write = std::pin::pin!(write_stdin(child.stdin.take(), stdin));
    let mut stdin_done = false;
    let mut ticker = tokio::time::interval(PROGRESS_TICK);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);

    let hard_deadline = tokio::time::Instant::now() + timeout;
    let mut last_output = tokio::time::Instant::now();
    let mut status = None;
    // After the exit: when to stop leftovers holding the pipes, then when to give up on them.
    let mut pipes_deadline: Option<tokio::time::Instant> = None;
    let mut leftovers: Option<Stopped> = None;
    let mut abandoned = false;

    let end = loop {
        if status.is_some() && pipes.done() {
            break End::Exited;
        }
        let idle_deadline = last_output + idle;
        tokio::select! {
            (stream, chunk) = pipes.next(), if !pipes.done() => {
                if !chunk.is_empty() {
                    last_output = tokio::time::Instant::now();
                    feed.push(chunk);
                    match stream {
                        Stream::Stdout => stdout.push(chunk),
                        Stream::Stderr => {
                            stderr_tail.push(chunk);
                            stderr.push(chunk);
                        }
                    }
                }
            }
            exit = child.wait(), if status.is_none() => {
                status = Some(exit.map_err(|e| ToolError::failed(format!("waiting for the command failed: {e}")))?);
                pipes_deadline = Some(tokio::time::Instant::now() + DRAIN_AFTER_EXIT);
            }
            () = &mut stdin_write, if !stdin_done => stdin_done = true,
            _ = ticker.tick() => feed.flush(),
            () = tokio::time::sleep_until(hard_deadline), if status.is_none() => break End::TimedOut,
            () = tokio::time::sleep_until(idle_deadline), if status.is_none() => break End::Idle,
            () = sleep_until_opt(pipes_deadline), if pipes_deadline.is_some() => {
                if leftovers.is_none() {
                    // Something the command started still holds its output open.
                    leftovers = Some(group.stop(&mut child).await);
                    pipes_deadline = Some(tokio::time::Instant::now() + FINAL_DRAIN);
                } else {
                    // Only a process outside the group (setsid) can still hold them.
                    pipes.abandon();
                    abandoned = true;
                }
            }
            () = cx.cancel.cancelled() => break End::Cancelled,
        }
    };

    if end == End::Exited {
        if leftovers.is_none() {
            // Processes that detached from the pipes but stayed in the group.
            leftovers = Some(group.stop(&mut child).await);
        }
    } else {
        group.stop(&mut child).await;
        status = tokio::time::timeout(Duration::from_secs(1), child.wait())
            .await
            .ok()
            .and_then(Result::ok);
        // What was written before the kill is still in the pipes.
        let until = tokio::time::Instant::now() + FINAL_DRAIN;
        while !pipes.done() {
            tokio::select! {
                (stream, chunk) = pipes.next() => match stream {
                    Stream::Stdout => stdout.push(chunk),
                    Stream::Stderr => stderr.push(chunk),
                },
                () = tokio::time::sleep_until(until) => {
                    pipes.abandon();
                    abandoned = true;
                }
            }
        }
    }
    feed.flush();
    let status = status.map(|s| group.reported_status(s));
    let elapsed = started.elapsed();

    let mut report = match end {
        End::Exited => match status {
            Some(s) => format!("{} ({})", describe_exit(s), seconds(elapsed)),
            None => format!("finished ({})", seconds(elapsed)),
        },
        End::TimedOut => format!(
            "timed out after {} s: the command and every process it started were stopped (raise timeout, up to {MAX_TIMEOUT_SECS} s, or use background_command for long-running commands)",
            timeout.as_secs()
        ),
        End::Idle => format!(
            "stopped after {} s without output (idle_timeout): the command and every process it started were stopped; pass a larger idle_timeout if it is expected to be quiet that long",
            idle.as_secs()
        ),
        End::Cancelled => {
            "cancelled: the command and every process it started were stopped".to_string()
        }
    };
    if end != End::Exited
        && let Some(s) = status
    {
        report.push_str(&format!(" [{}]", describe_exit(s)));
    }
    report.push_str(&format!(
        "\n$ {}  (in {})",
        prepared.display, prepared.cwd_display
    ));
    if matches!(leftovers, Some(Stopped::Terminated | Stopped::Killed)) {
        report.push_str("\nnote: the command left processes running; they were stopped (use background_command for servers and other long-running processes)");
    }
    if abandoned {
        report.push_str("\nnote: a process outside the command's process group still held its output; output after that point was not collected");
    }
    if !prepared.write_paths_display.is_empty() {
        report.push_str(&format!(
            "\nwrite_paths: {}",
            prepared.write_paths_display.join(", ")
        ));
    }
    if end == End::Exited
        && let Some(note) = group.sandbox_note(status, stderr_tail.bytes())
    {
        report.push('\n');
        report.push_str(&note);
    }
    let failed = end != End::Exited || status.is_none_or(|s| !s.success());
    if failed && !prepared.withheld.is_empty() {
        let mut names = prepared
            .withheld
            .iter()
            .take(20)
            .cloned()
            .collect::<Vec<_>>()
            .join(", ");
        if prepared.withheld.len() > 20 {
            names.push_str(", …");
        }
        report.push_str(&format!(
            "\nnote: inherited variables that look like secrets were not passed: {names} (list the ones it needs in pass_env)"
        ));
    }
    if stdout.total() == 0 && stderr.total() == 0 {
        report.push_str("\n(no output)");
    }
    for capture in [&stdout, &stderr] {
        if capture.total() > 0 {
            report.push('\n');
            report.push_str(&capture.render());
        }
    }
    if end == End::Cancelled {
        return Err(ToolError::failed(report));
    }
    Ok(report)
}

async fn write_stdin(pipe: Option<ChildStdin>, text: Option<String>) {
    if let (Some(mut pipe), Some(text)) = (pipe, text) {
        // A command that exits without reading its input closes the pipe: not an error.
        let _ = pipe.write_all(text.as_bytes()).await;
        let _ = pipe.shutdown().await;
    }
}

async fn sleep_until_opt(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

fn seconds(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}
