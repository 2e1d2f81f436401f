//! A `script_` tool (or an extension's script `ext_` tool): the user's program, run in the OS
//! sandbox with the call's arguments as JSON on stdin; its stdout is the result.
//!
//! The program runs in the work directory, like run_command. Its own folder lives under
//! tooldispatch's config or data directory, which the sandbox hides, so the folder is shown
//! read-only at [`TOOL_DIR_INSIDE`] and every argv item naming a file of the folder points
//! there. A tool declared `read_only` (and not `network`) runs in the read-only sandbox and,
//! when it is the user's own, without asking; anything else runs in the workspace sandbox and
//! asks. A project's tool asks the first time in a session whatever it declares.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use dispatch_engine::{
    Access, Effect, Gate, Origin, Subject, Tool, ToolContext, ToolError, ToolOutput, ToolSpec,
};
use dispatch_sandbox::Level;
use serde_json::Value;
use tokio::io::AsyncWriteExt;

use super::definition::{Body, Definition, Scope, find_on_path, in_folder};
use crate::shell::capture::{Capture, ProgressFeed};
use crate::shell::process::{
    self, Pipes, Prepared, SandboxConfig, StderrTail, Stream, describe_exit, safe_component,
    session_dir,
};

/// Where the tool's folder appears inside the sandbox (beneath its private /tmp).
pub const TOOL_DIR_INSIDE: &str = "/tmp/tooldispatch-tool";
/// Bytes of stderr a failure shows.
const STDERR_SHOWN: usize = 2048;
/// How often stderr becomes a progress event.
const PROGRESS_TICK: Duration = Duration::from_millis(200);
/// After the program exits, how long what it started may keep its output open.
const DRAIN_AFTER_EXIT: Duration = Duration::from_millis(200);

/// How a run ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ended {
    Exited,
    TimedOut,
    Cancelled,
}

/// What one run of a script left.
pub struct ScriptRun {
    pub ended: Ended,
    /// The exit status, as if the program were our child (not the sandbox's).
    pub status: Option<ExitStatus>,
    pub stdout: Capture,
    /// The last bytes of stderr, lossily decoded.
    pub stderr_tail: String,
    /// `sandbox: …` when the way it ended points at the sandbox (a refused write or connection).
    pub sandbox_note: Option<String>,
    /// The sandbox level it ran at; `None`: unconfined (no sandbox on this machine, or off).
    pub level: Option<Level>,
    pub timeout: Duration,
}

impl ScriptRun {
    pub fn succeeded(&self) -> bool {
        self.ended == Ended::Exited && self.status.is_some_and(|s| s.success())
    }

    /// `exit code 1`, `timed out after 60 s`, …
    pub fn describe_end(&self) -> String {
        match self.ended {
            Ended::Exited => self
                .status
                .map(describe_exit)
                .unwrap_or_else(|| "ended".into()),
            Ended::TimedOut => format!(
                "timed out after {} s; it and every process it started were stopped",
                self.timeout.as_secs()
            ),
            Ended::Cancelled => {
                "cancelled; it and every process it started were stopped".to_string()
            }
        }
    }

    /// The result text of a successful run: stdout, pretty-printed when it is JSON.
    pub fn result_text(&self) -> String {
        match self.stdout.whole() {
            Some(bytes) => match serde_json::from_slice::<Value>(&bytes) {
                Ok(json) => serde_json::to_string_pretty(&json).unwrap_or_default(),
                Err(_) => String::from_utf8_lossy(&bytes).trim_end().to_string(),
            },
            // Over a few MiB: its head, its tail and where the rest was spilled.
            None => self.stdout.render(),
        }
    }
}

/// Run `def`'s command with `input` on stdin, in `level` of `sandbox` (network as `network`),
/// stopping it after `timeout` or when the call is cancelled.
pub async fn run(
    cx: &ToolContext,
    def: &Definition,
    input: &[u8],
    sandbox: &SandboxConfig,
    level: Level,
    timeout: Duration,
) -> Result<ScriptRun, ToolError> {
    let Body::Script { command } = &def.body else {
        return Err(ToolError::failed(format!(
            "{} is not a script tool",
            def.tool_name()
        )));
    };
    // An installed tool's folder lies under a directory the sandbox hides, so it is shown on
    // its own. A draft lies in the work directory, which the sandbox shows already, with every
    // hidden place inside it still hidden; a bind would show those too.
    let bind = sandbox.sandbox().available() && def.scope != Scope::Draft;
    let inside = if bind {
        PathBuf::from(TOOL_DIR_INSIDE)
    } else {
        def.dir.clone()
    };
    let mut argv = Vec::with_capacity(command.len());
    for item in command {
        argv.push(match in_folder(&def.dir, item) {
            Some(path) => {
                let relative = path.strip_prefix(&def.dir).unwrap_or(&path);
                inside.join(relative).display().to_string()
            }
            None => item.clone(),
        });
    }
    let program = match argv.first() {
        Some(p) if p.starts_with('/') => PathBuf::from(p),
        Some(p) => find_on_path(p).ok_or_else(|| {
            ToolError::failed(format!(
                "{}: its program {p:?} is not on PATH any more; install it, or change `command` in {}",
                def.tool_name(),
                def.file().display()
            ))
        })?,
        None => return Err(ToolError::failed("the tool's command is empty")),
    };
    let workdir = cx.workdir.to_path_buf();
    let (mut env, _withheld) = process::child_env(&process::process_env(), &[]);
    for (name, value) in [
        ("TOOLDISPATCH_TOOL_DIR", inside.clone().into_os_string()),
        ("TOOLDISPATCH_WORKDIR", workdir.clone().into_os_string()),
        ("PWD", workdir.clone().into_os_string()),
    ] {
        env.retain(|(n, _)| n != name);
        env.push((OsString::from(name), value));
    }
    let binds = if bind {
        vec![(def.dir.clone(), inside.clone())]
    } else {
        Vec::new()
    };
    let network = def.network && level == Level::Workspace;
    let prepared = Prepared::declared(cx, program, argv[1..].to_vec(), env, network, binds)?;
    let (mut child, mut group) =
        process::spawn(&prepared, true, sandbox, level == Level::ReadOnly)?;
    let mut pipes = Pipes::take(&mut child);
    let mut stdout = Capture::with_quota("stdout", spill_target(cx), cx.spill_quota);
    let mut stderr_tail = StderrTail::default();
    let mut feed = ProgressFeed::new(cx.progress.clone());
    // A program that never reads its stdin must not stall the run: written on the side.
    let mut stdin = child.stdin.take();
    let input = input.to_vec();
    let writer = tokio::spawn(async move {
        if let Some(pipe) = stdin.as_mut() {
            let _ = pipe.write_all(&input).await;
            let _ = pipe.shutdown().await;
        }
    });
    let mut ticker = tokio::time::interval(PROGRESS_TICK);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let deadline = tokio::time::Instant::now() + timeout;
    let mut status = None;
    let mut drain_until: Option<tokio::time::Instant> = None;
    let ended = loop {
        if status.is_some() && pipes.done() {
            break Ended::Exited;
        }
        tokio::select! {
            (stream, chunk) = pipes.next(), if !pipes.done() => match stream {
                Stream::Stdout => stdout.push(chunk),
                Stream::Stderr => {
                    stderr_tail.push(chunk);
                    feed.push(chunk);
                }
            },
            exit = child.wait(), if status.is_none() => {
                status = Some(exit.map_err(|e| ToolError::failed(format!("waiting for the script failed: {e}")))?);
                drain_until = Some(tokio::time::Instant::now() + DRAIN_AFTER_EXIT);
            }
            _ = ticker.tick() => feed.flush(),
            () = tokio::time::sleep_until(deadline), if status.is_none() => break Ended::TimedOut,
            () = sleep_until(drain_until), if drain_until.is_some() => {
                // Something it started still holds the output open.
                pipes.abandon();
            }
            () = cx.cancel.cancelled() => break Ended::Cancelled,
        }
    };
    writer.abort();
    group.stop(&mut child).await;
    if status.is_none() {
        status = tokio::time::timeout(Duration::from_secs(1), child.wait())
            .await
            .ok()
            .and_then(Result::ok);
    }
    feed.flush();
    let status = status.map(|s| group.reported_status(s));
    let sandbox_note = if ended == Ended::Exited {
        group.sandbox_note(status, stderr_tail.bytes())
    } else {
        None
    };
    let tail = stderr_tail.bytes();
    let shown = &tail[tail.len().saturating_sub(STDERR_SHOWN)..];
    Ok(ScriptRun {
        ended,
        status,
        stdout,
        stderr_tail: String::from_utf8_lossy(shown).trim_end().to_string(),
        sandbox_note,
        level: group.level(),
        timeout,
    })
}

async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Where a large stdout spills: `sessions/<session>/results/<call>-<time>.stdout.out`.
fn spill_target(cx: &ToolContext) -> Option<PathBuf> {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    session_dir(cx, "results").map(|dir| {
        dir.join(format!(
            "{}-{nanos}.stdout.out",
            safe_component(&cx.call_id)
        ))
    })
}

/// Most bytes hashed for a folder's fingerprint; a bigger folder is fingerprinted by its
/// files' sizes and times beyond that.
const FINGERPRINT_BYTES: u64 = 16 * 1024 * 1024;
/// Most files and folders fingerprinted.
const FINGERPRINT_ENTRIES: usize = 2000;

/// The key a project tool's once-per-session approval is kept under: its name and a hash of
/// every file of its folder as it is now, so an approval covers the code that was approved and
/// a `git pull` that changes the script asks again.
pub(crate) fn ask_once_key(def: &Definition) -> String {
    format!("{}:{}", def.tool_name(), folder_fingerprint(&def.dir))
}

/// A hash of every regular file in `dir` (names and contents, sorted, subfolders included).
fn folder_fingerprint(dir: &Path) -> String {
    let mut hasher = blake3::Hasher::new();
    let mut budget = FINGERPRINT_BYTES;
    let mut entries_left = FINGERPRINT_ENTRIES;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(folder) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&folder) else {
            hasher.update(b"\0unreadable");
            continue;
        };
        let mut entries: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
        entries.sort();
        for path in entries {
            if entries_left == 0 {
                // Past the cap the fingerprint says so, and still differs from a smaller folder.
                hasher.update(b"\0too many entries");
                break;
            }
            entries_left -= 1;
            let Ok(meta) = std::fs::symlink_metadata(&path) else {
                continue;
            };
            hasher.update(
                path.strip_prefix(dir)
                    .unwrap_or(&path)
                    .as_os_str()
                    .as_encoded_bytes(),
            );
            if meta.is_dir() {
                stack.push(path);
            } else if meta.is_file() && meta.len() <= budget {
                budget -= meta.len();
                match std::fs::read(&path) {
                    Ok(bytes) => hasher.update(&bytes),
                    Err(_) => hasher.update(b"\0unreadable"),
                };
            } else {
                let modified = meta
                    .modified()
                    .ok()
                    .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
                    .map_or(0, |d| d.as_nanos());
                hasher.update(format!("{}:{modified}", meta.len()).as_bytes());
            }
        }
    }
    hasher.finalize().to_hex()[..16].to_string()
}

/// A registered script tool.
pub struct ScriptTool {
    spec: ToolSpec,
    def: Arc<Definition>,
    sandbox: SandboxConfig,
}

impl ScriptTool {
    pub fn new(def: Arc<Definition>, sandbox: SandboxConfig) -> ScriptTool {
        let reads = def.read_only && !def.network;
        let mut spec = ToolSpec::new(
            def.tool_name(),
            def.description.clone(),
            def.parameters.clone(),
        )
        .origin(match def.scope {
            Scope::Extension(_) => Origin::Ext,
            _ => Origin::Script,
        })
        .gate(if reads { Gate::ReadOnly } else { Gate::Ask })
        .effect(if reads {
            Effect::Observes
        } else {
            Effect::Mutates
        })
        // The run stops itself at the declared timeout and says so; this is the backstop.
        .timeout(def.timeout + Duration::from_secs(5));
        if def.concurrent {
            spec = spec.concurrent();
        }
        ScriptTool { spec, def, sandbox }
    }

    pub fn definition(&self) -> &Arc<Definition> {
        &self.def
    }

    /// The sandbox level its calls run at: read-only for a read-only tool without network.
    fn level(&self) -> Level {
        if self.def.read_only && !self.def.network {
            Level::ReadOnly
        } else {
            Level::Workspace
        }
    }
}

#[async_trait]
impl Tool for ScriptTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn subject(&self, _args: &Value, _workdir: &Path) -> Subject {
        let def = &self.def;
        let access = if self.level() == Level::ReadOnly {
            Access::Reads
        } else {
            Access::Changes
        };
        let mut why = format!(
            "{} runs the {} {} ({})",
            def.tool_name(),
            def.scope.describe(),
            def.dir.display(),
            match (self.level(), def.network) {
                (Level::ReadOnly, _) => "read-only sandbox",
                (_, true) => "workspace sandbox, with network access",
                _ => "workspace sandbox: it can change files in the work directory",
            }
        );
        let mut subject = Subject::new(access);
        if def.scope == Scope::Project {
            why.push_str("; it came with this work directory and has not run in this session");
            subject = subject.ask_once(ask_once_key(def));
        }
        subject.why(why)
    }

    async fn call(&self, cx: ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        let input = serde_json::to_vec(&args).unwrap_or_else(|_| b"{}".to_vec());
        let run = run(
            &cx,
            &self.def,
            &input,
            &self.sandbox,
            self.level(),
            self.def.timeout,
        )
        .await?;
        if run.succeeded() {
            return Ok(ToolOutput::text(run.result_text()));
        }
        let mut message = format!("{} failed: {}", self.def.tool_name(), run.describe_end());
        if let Some(note) = &run.sandbox_note {
            message.push('\n');
            message.push_str(note);
        }
        if run.stderr_tail.is_empty() {
            message.push_str("\n(no stderr)");
        } else {
            message.push_str("\nstderr (last lines):\n");
            message.push_str(&run.stderr_tail);
        }
        if run.ended == Ended::TimedOut {
            message.push_str(&format!(
                "\nIts definition allows {} s (timeout_s in {}); send less work per call, or ask the user to raise it.",
                self.def.timeout.as_secs(),
                self.def.file().display()
            ));
        }
        Err(ToolError::failed(message))
    }
}
