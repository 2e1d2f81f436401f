//! The `Tool` contract: what a tool receives when it runs and what it hands back.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use dispatch_store::{CacheScope, Todo};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::events::{EventKind, EventLog};
use crate::gate::{Confirmer, Question};
use crate::redact::ToolSecrets;
use crate::registry::Registry;
use crate::spec::{Effect, ToolSpec};
use crate::subject::Subject;

/// A tool the engine can dispatch.
#[async_trait]
pub trait Tool: Send + Sync + 'static {
    fn spec(&self) -> &ToolSpec;
    /// Run one call. `args` has already passed the tool's JSON Schema.
    async fn call(&self, cx: ToolContext, args: Value) -> Result<ToolOutput, ToolError>;

    /// What this call does to the world. Most tools declare one effect for every call
    /// (`spec().effect`); a tool whose arguments decide it (http_request: GET reads, POST
    /// changes) says so per call, so a read is not journalled and ends nothing remembered.
    fn effect(&self, _args: &Value) -> Effect {
        self.spec().effect
    }

    /// What this call touches: the paths, URLs, command line and environment it uses and
    /// whether it only reads. The confirm gate and the rules read only this. `args` are the
    /// parsed arguments before schema validation, so a tool must expect anything; `workdir`
    /// is where relative paths start. The default declares nothing but the spec's gate.
    fn subject(&self, _args: &Value, _workdir: &Path) -> Subject {
        Subject::from_gate(self.spec().gate)
    }

    /// A tool that needs the user (`spec().asks_user`): the questions a call with these
    /// arguments puts to them when the run parks instead (ask_user's own `questions`).
    fn questions(&self, _args: &Value) -> Vec<Question> {
        Vec::new()
    }

    /// A tool that needs the user: what the model said about its progress when the run
    /// parked (ask_user's `state`), kept with the pending task for whoever answers.
    fn parked_state(&self, _args: &Value) -> Value {
        Value::Null
    }

    /// Finish a parked call with the user's answers, one per question in order. Only tools
    /// that ask the user can be parked, so the default is never reached through the engine.
    async fn answered(
        &self,
        _cx: ToolContext,
        _args: Value,
        _answers: Vec<String>,
    ) -> Result<ToolOutput, ToolError> {
        Err(ToolError::failed(format!(
            "{} does not take answers from the user",
            self.spec().name
        )))
    }
}

/// What a call hands back on success.
#[derive(Clone, Debug, Default)]
pub struct ToolOutput {
    pub text: String,
    /// Images as `data:` URLs; the wire format decides how the model sees them.
    pub images: Vec<String>,
    /// Resolved absolute paths the call read or changed (drives dedupe invalidation).
    pub paths: Vec<PathBuf>,
    /// The session's whole new todo list (write_todo).
    pub todos: Option<Vec<Todo>>,
    /// Tools whose schema this call showed the model (find_tools).
    pub marks: Vec<String>,
    /// An entry for the result cache, written in pass 3 once the result is committed
    /// (http_request GET, seed §5); the tool decides key, scope and whether it may be cached.
    pub cache_put: Option<CachePut>,
}

/// A result cache entry a call asks pass 3 to write.
#[derive(Clone, Debug)]
pub struct CachePut {
    pub scope: CacheScope,
    pub key: String,
    pub value: String,
    pub ttl: std::time::Duration,
}

impl ToolOutput {
    pub fn text(text: impl Into<String>) -> Self {
        ToolOutput {
            text: text.into(),
            ..ToolOutput::default()
        }
    }
    pub fn with_paths(mut self, paths: Vec<PathBuf>) -> Self {
        self.paths = paths;
        self
    }
    pub fn with_images(mut self, images: Vec<String>) -> Self {
        self.images = images;
        self
    }
}

/// Why a call failed. Every variant becomes the call's own result; siblings are never affected.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ToolError {
    /// Tell the model; it can act on the message.
    #[error("{0}")]
    Failed(String),
    /// A credential is missing or was rejected; the hint points to store_secret.
    #[error("{message}")]
    Credential {
        key: Option<String>,
        message: String,
    },
    /// Something is broken beyond this call: the round finishes, then the run should stop.
    #[error("{0}")]
    Fatal(String),
}

impl ToolError {
    pub fn failed(message: impl Into<String>) -> Self {
        ToolError::Failed(message.into())
    }
}

/// Everything a call may use while it runs.
#[derive(Clone)]
pub struct ToolContext {
    pub session_id: Arc<str>,
    pub run_id: Arc<str>,
    pub call_id: Arc<str>,
    pub workdir: Arc<Path>,
    /// Where results, spills and other per-session files live; `None` for in-memory use.
    pub data_dir: Option<Arc<Path>>,
    pub registry: Arc<Registry>,
    pub exclude: Arc<Exclude>,
    pub progress: Progress,
    /// Cancelled when the call times out or the round is cancelled.
    pub cancel: CancellationToken,
    /// The bytes of result text pass 3 keeps before shaping (head, tail and error lines, the
    /// rest spilled). A tool that can page (read_files) fits its answer to it instead.
    pub result_budget: usize,
    /// Bytes of spilled output the session keeps (results and command output); older spills
    /// are removed to stay under it.
    pub spill_quota: u64,
    /// The stored secrets (`{{secret:NAME}}` in arguments, store_secret); `None` when the
    /// engine has none. Unlike the other stores, which a tool is given when it is built, these
    /// come with the call: a secret a tool stores must be hidden from the rest of this round,
    /// so the handle is tied to the round's redactor, and a tool can only see the secrets the
    /// engine also redacts.
    pub secrets: Option<ToolSecrets>,
    /// Whoever answers the user's side now: ask_user and store_secret ask through it when it
    /// is interactive.
    pub user: Arc<dyn Confirmer>,
}

/// Names not available in a session; a trailing `*` is a prefix match.
#[derive(Clone, Debug, Default)]
pub struct Exclude {
    entries: Vec<String>,
}

impl Exclude {
    pub fn new(entries: impl IntoIterator<Item = String>) -> Self {
        Exclude {
            entries: entries
                .into_iter()
                .map(|e| e.trim().to_string())
                .filter(|e| !e.is_empty())
                .collect(),
        }
    }
    /// The entries as given (trimmed), to pass on (a subagent inherits its parent's).
    pub fn entries(&self) -> &[String] {
        &self.entries
    }
    pub fn contains(&self, name: &str) -> bool {
        self.entries.iter().any(|e| match e.strip_suffix('*') {
            Some(prefix) => name.starts_with(prefix),
            None => e == name,
        })
    }
}

/// Streams progress of one call as `ToolProgress` events; each one resets the idle timeout.
#[derive(Clone)]
pub struct Progress {
    pub(crate) log: Arc<EventLog>,
    pub(crate) tool_id: Arc<str>,
    pub(crate) tool_name: Arc<str>,
    pub(crate) state: Arc<ProgressState>,
}

/// What the scheduler reads back from a call's progress.
#[derive(Default)]
pub(crate) struct ProgressState {
    /// Nanoseconds since the round started at the last sign of life.
    pub(crate) last_activity: AtomicU64,
    /// Progress text so far, returned with a timeout (capped).
    pub(crate) partial: std::sync::Mutex<String>,
    /// The call has its result; later progress is dropped.
    pub(crate) done: std::sync::atomic::AtomicBool,
}

/// Partial output kept for a timed-out call.
const PARTIAL_CAP: usize = 8 * 1024;

impl Progress {
    /// A sign of life without an event: the idle timeout starts again (a call waiting on the
    /// user, or progress too frequent to show).
    pub fn touch(&self) {
        if !self.state.done.load(Ordering::Relaxed) {
            self.state
                .last_activity
                .store(self.log.elapsed_nanos(), Ordering::Relaxed);
        }
    }

    pub fn emit(&self, text: impl Into<String>) {
        if self.state.done.load(Ordering::Relaxed) {
            return;
        }
        let text = text.into();
        self.state
            .last_activity
            .store(self.log.elapsed_nanos(), Ordering::Relaxed);
        if let Ok(mut partial) = self.state.partial.lock() {
            partial.push_str(&text);
            if partial.len() > PARTIAL_CAP {
                let cut = partial.len() - PARTIAL_CAP;
                let cut = (cut..partial.len())
                    .find(|i| partial.is_char_boundary(*i))
                    .unwrap_or(partial.len());
                partial.drain(..cut);
            }
        }
        self.log.emit(EventKind::ToolProgress {
            tool_id: self.tool_id.clone(),
            tool_name: self.tool_name.clone(),
            text,
        });
    }
}
