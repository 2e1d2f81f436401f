//! `background_command`: start a long-running command (a dev server, a watcher, a long build)
//! without waiting, then read its output, list the session's jobs, and stop them.
//!
//! Output is addressed by byte offset into the job's whole output, so the model can poll with
//! the `next offset` of its last read and never sees a byte twice or misses one (unless it
//! falls out of the kept window, which the reply then says). Every call is a fresh look at a
//! changing job, so results are never deduplicated.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fmt::Write as _;
use std::time::Duration;

use async_trait::async_trait;
use dispatch_engine::{
    Access, Effect, Gate, Subject, ToolContext, ToolError, ToolOutput, ToolSpec,
};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;
use std::path::Path;

use super::jobs::{Job, JobEnd, JobTable, MAX_RUNNING, RING_CAP, STOP_WAIT};
use super::process::{self, CommandArgs, SandboxConfig, describe_exit};
use super::readonly::ReadOnlyCommands;
use super::subject::CommandCall;
use crate::BuiltinTool;

/// Most bytes one `read` returns (below the engine's result budget, so it is never shaped).
pub const READ_MAX: usize = 16_000;
/// Longest `wait` of a read, in seconds.
pub const MAX_WAIT_SECS: u64 = 60;
/// Longest job id accepted.
const MAX_JOB_ID: usize = 64;

#[derive(Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
enum Mode {
    Start,
    List,
    Read,
    Stop,
}

/// Start, list, read or stop background jobs.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BackgroundCommandArgs {
    /// start: run argv in the background, returns a job id at once; list: this session's jobs;
    /// read: a job's output from offset; stop: stop a job and every process it started.
    mode: Mode,
    /// start: the program and its arguments, one item each, no shell (as run_command).
    #[serde(default)]
    argv: Option<Vec<String>>,
    /// start: directory to run in, relative to the work directory.
    #[serde(default)]
    cwd: Option<String>,
    /// start: argv is one shell command line for `sh -c`; always asks the user.
    #[serde(default)]
    shell: Option<bool>,
    /// start: extra environment variables, {"NAME": "value"}.
    #[serde(default)]
    env: Option<BTreeMap<String, String>>,
    /// start: inherited secret-looking variables to pass through, e.g. ["GITHUB_TOKEN"].
    #[serde(default)]
    pass_env: Option<Vec<String>>,
    /// start: true: the command may use the network (a dev server that fetches); always asks.
    #[serde(default)]
    network: Option<bool>,
    /// start: paths inside the work directory the command writes, e.g. ["dist"].
    #[serde(default)]
    write_paths: Option<Vec<String>>,
    /// read, stop: the job id that start returned (e.g. "job-3").
    #[serde(default)]
    job_id: Option<String>,
    /// read: byte offset into the job's output to read from (default 0); use the `next
    /// offset` of the previous read. Up to 16000 bytes per read.
    #[serde(default)]
    offset: Option<u64>,
    /// read: wait up to this many seconds (at most 60) for new output or for the job to end.
    #[serde(default)]
    #[schemars(range(max = 60))]
    wait: Option<u64>,
}

pub struct BackgroundCommand {
    jobs: JobTable,
    parent_env: Option<Vec<(OsString, OsString)>>,
    /// Commands the user declared read-only (`[commands] read_only`).
    read_only: ReadOnlyCommands,
    sandbox: SandboxConfig,
}

impl BackgroundCommand {
    pub fn new() -> Self {
        BackgroundCommand {
            jobs: JobTable::default(),
            parent_env: None,
            read_only: ReadOnlyCommands::default(),
            sandbox: SandboxConfig::default(),
        }
    }

    /// Also start these commands without asking, in the read-only sandbox.
    pub fn with_read_only_commands(mut self, commands: ReadOnlyCommands) -> Self {
        self.read_only = commands;
        self
    }

    /// Run jobs in `sandbox` instead of the machine's (detected once per process).
    pub fn with_sandbox(mut self, sandbox: SandboxConfig) -> Self {
        self.sandbox = sandbox;
        self
    }

    /// Jobs inherit `env` (scrubbed of secrets) instead of this process's environment.
    pub fn with_parent_env(mut self, env: Vec<(OsString, OsString)>) -> Self {
        self.parent_env = Some(env);
        self
    }
}

impl Default for BackgroundCommand {
    fn default() -> Self {
        Self::new()
    }
}

#[async_trait]
impl BuiltinTool for BackgroundCommand {
    const NAME: &'static str = "background_command";
    const DESCRIPTION: &'static str = "Run a long command (server, watcher, long build) in the background. mode=start returns a job id at once; read returns its output from a byte offset (plus the next offset, and the exit status once it ended); list shows this session's jobs; stop kills a job with every process it started. At most 16 running jobs per session; the last 4 MiB of each job's output is kept. Jobs stop when tooldispatch exits (the one-shot CLI exits after each round).";
    type Args = BackgroundCommandArgs;

    fn declare(&self, spec: ToolSpec) -> ToolSpec {
        spec.gate(Gate::Ask)
            .effect(Effect::Mutates)
            .no_dedupe()
            .timeout(Duration::from_secs(MAX_WAIT_SECS) + STOP_WAIT + Duration::from_secs(10))
    }

    fn subject(&self, args: &Value, workdir: &Path) -> Option<Subject> {
        // Listing and reading jobs only read; stopping one and starting one change things.
        Some(
            match args.get("mode").and_then(Value::as_str).map(str::trim) {
                Some("list" | "read") => Subject::new(Access::Reads),
                Some("start") => match CommandCall::from_args(args) {
                    Some(call) => {
                        call.subject(
                            "background_command",
                            workdir,
                            &self.read_only,
                            self.sandbox.missing().as_deref(),
                        )
                        .0
                    }
                    None => Subject::new(Access::Changes),
                },
                _ => Subject::new(Access::Changes),
            },
        )
    }

    async fn run(
        &self,
        cx: ToolContext,
        args: BackgroundCommandArgs,
    ) -> Result<ToolOutput, ToolError> {
        check_fields(&args)?;
        let text = match args.mode {
            Mode::Start => self.start(&cx, &args)?,
            Mode::List => self.list(&cx),
            Mode::Read => {
                let job = self.job(&cx, args.job_id.as_deref())?;
                read(&job, args.offset.unwrap_or(0), args.wait.unwrap_or(0)).await?
            }
            Mode::Stop => {
                let job = self.job(&cx, args.job_id.as_deref())?;
                stop(&job).await
            }
        };
        Ok(ToolOutput::text(text))
    }
}

/// Arguments that mean nothing in the chosen mode are refused, so a mistake is not silently
/// ignored (and a `read` cannot carry a command past the gate's reading-mode rule).
fn check_fields(args: &BackgroundCommandArgs) -> Result<(), ToolError> {
    let given: [(&str, bool, &[Mode]); 10] = [
        ("argv", args.argv.is_some(), &[Mode::Start]),
        ("cwd", args.cwd.is_some(), &[Mode::Start]),
        ("shell", args.shell.is_some(), &[Mode::Start]),
        ("env", args.env.is_some(), &[Mode::Start]),
        ("pass_env", args.pass_env.is_some(), &[Mode::Start]),
        ("network", args.network.is_some(), &[Mode::Start]),
        ("write_paths", args.write_paths.is_some(), &[Mode::Start]),
        ("job_id", args.job_id.is_some(), &[Mode::Read, Mode::Stop]),
        ("offset", args.offset.is_some(), &[Mode::Read]),
        ("wait", args.wait.is_some(), &[Mode::Read]),
    ];
    let mode = mode_name(args.mode);
    for (name, present, modes) in given {
        if present && !modes.contains(&args.mode) {
            let used: Vec<&str> = modes.iter().map(|m| mode_name(*m)).collect();
            return Err(ToolError::failed(format!(
                "{name} is only used with mode={}, not mode={mode}; drop it",
                used.join(" or mode=")
            )));
        }
    }
    if args.mode == Mode::Start && args.argv.is_none() {
        return Err(ToolError::failed(
            "mode=start needs argv: the program and its arguments, e.g. [\"npm\", \"run\", \"dev\"]",
        ));
    }
    if matches!(args.mode, Mode::Read | Mode::Stop) && args.job_id.is_none() {
        return Err(ToolError::failed(format!(
            "mode={mode} needs job_id (the id start returned); list the jobs with mode=list"
        )));
    }
    Ok(())
}

fn mode_name(mode: Mode) -> &'static str {
    match mode {
        Mode::Start => "start",
        Mode::List => "list",
        Mode::Read => "read",
        Mode::Stop => "stop",
    }
}

impl BackgroundCommand {
    fn start(&self, cx: &ToolContext, args: &BackgroundCommandArgs) -> Result<String, ToolError> {
        self.jobs
            .ensure_room(&cx.session_id)
            .map_err(ToolError::failed)?;
        let inherited;
        let parent_env = match &self.parent_env {
            Some(env) => env,
            None => {
                inherited = process::process_env();
                &inherited
            }
        };
        let prepared = process::prepare(
            cx,
            CommandArgs {
                argv: args.argv.as_deref().unwrap_or_default(),
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
        let (child, group) = process::spawn(&prepared, false, &self.sandbox, read_only)?;
        let job = self
            .jobs
            .start(
                &cx.session_id,
                child,
                group,
                prepared.display.clone(),
                prepared.cwd_display.clone(),
            )
            .map_err(ToolError::failed)?;
        let mut text = format!(
            "started {} (pid {}): $ {}  (in {})\nread its output with background_command(mode=\"read\", job_id=\"{}\", offset=0); stop it with mode=\"stop\"",
            job.id, job.pid, job.command, job.cwd, job.id
        );
        if !prepared.withheld.is_empty() {
            let _ = write!(
                text,
                "\nnote: {} inherited variable(s) that look like secrets were not passed (list the ones it needs in pass_env)",
                prepared.withheld.len()
            );
        }
        Ok(text)
    }

    fn list(&self, cx: &ToolContext) -> String {
        let jobs = self.jobs.list(&cx.session_id);
        if jobs.is_empty() {
            return "no background jobs in this session; start one with mode=start".to_string();
        }
        let running = jobs.iter().filter(|j| j.is_running()).count();
        let mut text = format!(
            "{} job(s) in this session, {running} running (at most {MAX_RUNNING}):",
            jobs.len()
        );
        for job in &jobs {
            let snap = job.snapshot();
            let state = match &snap.end {
                None => format!("running for {} (pid {})", secs(snap.running_for), job.pid),
                Some(end) => describe_end(end),
            };
            let _ = write!(
                text,
                "\n{}  {state}  {} bytes of output  $ {}  (in {})",
                job.id, snap.total, job.command, job.cwd
            );
        }
        text
    }

    fn job(&self, cx: &ToolContext, id: Option<&str>) -> Result<std::sync::Arc<Job>, ToolError> {
        let id = id.map(str::trim).unwrap_or_default();
        if id.is_empty() || id.len() > MAX_JOB_ID {
            return Err(ToolError::failed(
                "job_id must be the id start returned (e.g. \"job-3\"); list the jobs with mode=list",
            ));
        }
        self.jobs.get(&cx.session_id, id).ok_or_else(|| {
            let known: Vec<String> = self
                .jobs
                .list(&cx.session_id)
                .iter()
                .map(|j| j.id.clone())
                .collect();
            let known = if known.is_empty() {
                "this session has no jobs".to_string()
            } else {
                format!("this session's jobs: {}", known.join(", "))
            };
            let mut shown = id.to_string();
            process::clip(&mut shown, 40);
            ToolError::failed(format!(
                "no job {shown:?} in this session ({known}); list them with mode=list"
            ))
        })
    }
}

async fn read(job: &Job, offset: u64, wait: u64) -> Result<String, ToolError> {
    if wait > 0 {
        job.wait_for(offset, Duration::from_secs(wait.min(MAX_WAIT_SECS)))
            .await;
    }
    let snap = job.snapshot();
    if offset > snap.total {
        return Err(ToolError::failed(format!(
            "offset {offset} is past the end of {}'s output ({} bytes so far); read from the next offset a read returned, or from 0",
            job.id, snap.total
        )));
    }
    let mut chunk = job.read(offset, READ_MAX);
    // Do not split a character at the end of a full read; the next read starts at it.
    if chunk.bytes.len() == READ_MAX
        && let Err(e) = std::str::from_utf8(&chunk.bytes)
        && e.error_len().is_none()
        && e.valid_up_to() > 0
    {
        chunk.bytes.truncate(e.valid_up_to());
    }
    let next = chunk.from + chunk.bytes.len() as u64;
    let mut text = match &snap.end {
        None => format!(
            "{}: running for {} (pid {})",
            job.id,
            secs(snap.running_for),
            job.pid
        ),
        Some(end) => format!("{}: {}", job.id, describe_end(end)),
    };
    let _ = write!(text, "\n$ {}  (in {})", job.command, job.cwd);
    if chunk.dropped_before > 0 {
        let _ = write!(
            text,
            "\nnote: bytes {offset}-{} are no longer kept (only the last {} MiB of output is); reading from {}",
            chunk.from,
            RING_CAP >> 20,
            chunk.from
        );
    }
    let more = if next < chunk.total {
        format!("more: read again with offset={next}")
    } else if snap.end.is_some() {
        "that is all: the job has ended".to_string()
    } else {
        format!(
            "no more output yet: read again later with offset={next} (wait makes the read wait for it)"
        )
    };
    let _ = write!(
        text,
        "\noutput bytes {}-{next} of {}; next offset {next}; {more}",
        chunk.from, chunk.total
    );
    if chunk.bytes.is_empty() {
        text.push_str("\n(no new output)");
    } else {
        text.push_str("\n--- output ---\n");
        text.push_str(String::from_utf8_lossy(&chunk.bytes).trim_end_matches('\n'));
    }
    Ok(text)
}

async fn stop(job: &Job) -> String {
    if !job.is_running() {
        let snap = job.snapshot();
        let end = snap.end.as_ref().map_or_else(String::new, describe_end);
        return format!(
            "{} had already ended: {end}; {} bytes of output (read them with mode=read)",
            job.id, snap.total
        );
    }
    let stopped = job.stop(STOP_WAIT).await;
    let snap = job.snapshot();
    match (&snap.end, stopped) {
        (Some(end), true) => format!(
            "{} stopped with every process it started: {}; {} bytes of output (read them with mode=read)",
            job.id,
            describe_end(end),
            snap.total
        ),
        _ => format!(
            "{} was signalled but has not ended yet; check with mode=list",
            job.id
        ),
    }
}

fn describe_end(end: &JobEnd) -> String {
    let what = end
        .status
        .map_or_else(|| "ended (status unknown)".to_string(), describe_exit);
    let mut text = format!("{what} after {}", secs(end.after));
    if end.stopped_by_request {
        text.push_str(" (stopped with mode=stop)");
    }
    if end.leftovers {
        text.push_str(" (processes it left running were stopped)");
    }
    if let Some(note) = &end.sandbox_note {
        text.push_str("; ");
        text.push_str(note);
    }
    text
}

fn secs(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}
