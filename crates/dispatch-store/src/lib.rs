//! Storage for tooldispatch: the records a round reads and writes, the `SessionStore` trait,
//! and its backends (`memory:` for tests and benchmarks, `sqlite:PATH` for the embedded default,
//! `redis://HOST:PORT/DB` to share state across machines).
//!
//! The engine loads a session and a run once per round ([`SessionStore::load_keys`], with
//! only the dedupe entries the round's calls look up) and writes
//! everything the round changed in one call ([`SessionStore::commit_round`]), so a backend can
//! make a round's commit atomic.

use std::collections::BTreeSet;
use std::sync::Arc;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub mod agents;
pub mod cache;
pub mod chat;
pub mod chatbots;
pub mod clock;
pub mod errors;
pub mod file_history;
pub mod maintenance;
pub mod memory;
pub mod near_cache;
#[cfg(feature = "redis")]
pub mod redis;
pub mod secrets;
#[cfg(feature = "sqlite")]
pub mod sqlite;
#[cfg(all(feature = "redis", feature = "sqlite"))]
pub mod tiered;

/// The behaviour every backend must share, run against each of them.
#[cfg(test)]
mod suites;

pub use agents::{AgentStore, ConversationEntry, LegRecord, LegStatus};
pub use cache::{CACHE_TTL, CacheHit, CacheScope, ResultCache};
pub use chat::{ChatHistory, ChatHit, RunSummary};
pub use chatbots::{ApprovedChat, ApprovedChats};
pub use clock::{Clock, ManualClock, SystemClock};
pub use errors::{ERROR_TTL, ErrorClass, ErrorMemory, ErrorRecord, Outcome, classify};
pub use file_history::{FileAction, FileHistory, FileVersion, NewFileVersion, VersionQuery};
pub use maintenance::{
    EntryCounts, GcPolicy, GcReport, Maintenance, SWEEP_EVERY, StoreStats, spawn_sweeper,
};
pub use secrets::{SecretKey, Secrets};

/// What can go wrong in a store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("store backend failed: {0}")]
    Backend(String),
    /// The backend could not be reached (connection refused, reset or timed out): another
    /// store may serve the call instead (DESIGN §7), unlike `Backend`, which is an answer.
    #[error("store backend unreachable: {0}")]
    Unavailable(String),
    #[error("stored data is corrupt: {0}")]
    Corrupt(String),
    #[error("cannot open store {url:?}: {reason}")]
    BadUrl { url: String, reason: String },
    /// Another round of the same run committed first (another process on the same store).
    #[error(
        "round {round} of {session}/{run} was not committed: another round of that run was committed meanwhile (by another process on this store); dispatch the reply again"
    )]
    Conflict {
        session: String,
        run: String,
        round: u64,
    },
}

pub type StoreResult<T> = Result<T, StoreError>;

/// One item of a todo list (`write_todo`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Todo {
    pub content: String,
    pub status: TodoStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_form: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TodoStatus {
    Pending,
    InProgress,
    Completed,
}

/// When a remembered (deduplicated) result stops being valid.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Validity {
    /// Depends only on the arguments: valid for the whole run.
    Always,
    /// Depends on these files (resolved absolute paths): dies when a mutating call touches one.
    Paths { paths: Vec<String> },
    /// Observes the world at large: valid only while the run's write epoch is unchanged.
    Epoch { epoch: u64 },
}

/// A committed result remembered for dedupe, keyed by the hash of `name|canonical args`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DedupeEntry {
    pub key: String,
    pub tool: String,
    /// The committed result text, without the `[name] ` prefix.
    pub result: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<String>,
    pub validity: Validity,
    /// The remembered result is a failure (the model should read it as one again).
    #[serde(default)]
    pub is_error: bool,
}

/// Session-wide state a round needs.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionSnapshot {
    /// Tools whose schema the model has been shown in this session.
    pub marked: BTreeSet<String>,
    pub todos: Vec<Todo>,
}

/// Run-wide state a round needs (a run is one user turn).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunSnapshot {
    /// Rounds already committed in this run.
    pub rounds: u64,
    /// Bumped by every successful mutating call; epoch-scoped dedupe entries die with it.
    pub write_epoch: u64,
    /// The user approved a confirmation with "allow for this turn".
    pub turn_allow_all: bool,
    pub dedupe: Vec<DedupeEntry>,
}

/// One message of the session transcript, in the engine's provider-neutral shape.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TranscriptEntry {
    pub run: String,
    pub round: u64,
    /// Also part of the `tools` list (every message except dedupe hits and the assistant message).
    pub in_tools: bool,
    pub message: TranscriptMessage,
}

impl TranscriptEntry {
    /// The message as JSON (`{"role": ..., ...}`).
    pub fn message_json(&self) -> Value {
        serde_json::to_value(&self.message).unwrap_or(Value::Null)
    }
}

/// A transcript message. Typed rather than a `Value`: one is built for every call of every
/// round, and a `Value` map costs an allocation per key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum TranscriptMessage {
    /// The model's reply that carried the calls.
    Assistant { tool_calls: Vec<RecordedCall> },
    /// One call's result.
    Tool {
        tool_call_id: String,
        name: String,
        content: String,
    },
    /// Images returned by the round's calls, after its tool messages.
    User { images: Vec<String> },
}

/// One call as the transcript keeps it (arguments may be elided after a write).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordedCall {
    pub id: String,
    pub name: String,
    pub arguments: String,
}

/// A run parked by a call that needs the user (ask_user, store_secret), waiting for the answer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PendingTask {
    pub task_hash: String,
    pub session: String,
    pub run: String,
    /// The id of the call whose result the answer becomes.
    pub tool_call_id: String,
    /// The provider sent the call without an id and `tool_call_id` was made up for it: the
    /// answer's result then goes back without one.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub id_made_up: bool,
    /// The name exactly as the model called it, when that is not `tool` (`run_tool`, or
    /// spaces around it): formats that match a result by name answer with this one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub called_as: Option<String>,
    /// The parked tool and its arguments, to finish the call with the answer.
    #[serde(default = "ask_user_name")]
    pub tool: String,
    #[serde(default)]
    pub args: Value,
    /// The questions, one answer each (`[{question, detail, options, multi_select, secret}]`).
    pub questions: Value,
    pub state: Value,
    /// `{name, id, args, result}` of every result committed so far in the run.
    pub tool_results: Vec<Value>,
    pub todos: Vec<Todo>,
    pub created_at_ms: u64,
}

fn ask_user_name() -> String {
    "ask_user".to_string()
}

/// An event the store writes as JSON text when it needs the text: SQLite at commit, the memory
/// store only when the events are read back.
pub trait EventJson: Send + Sync + std::fmt::Debug {
    fn to_json(&self) -> String;
    /// Call `each` with the texts inside the JSON that may be large (a result, arguments),
    /// so a store can keep one copy of a text that other records of the round also carry.
    /// The texts are the event's own, lent for as long as the event: a store keeps the
    /// references rather than copies.
    fn for_each_text<'a>(&'a self, each: &mut dyn FnMut(&'a str)) {
        let _ = each;
    }
}

impl EventJson for String {
    fn to_json(&self) -> String {
        self.clone()
    }
}

impl EventJson for Value {
    fn to_json(&self) -> String {
        self.to_string()
    }
}

/// A mutating call that started and whose result has not been committed yet (DESIGN §4.7).
/// One still open when a later round of its session starts was interrupted (the process died):
/// it is reported, never run again.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JournalEntry {
    /// `<run>|<round>|<call id>`: unique within the session.
    pub id: String,
    pub session: String,
    pub run: String,
    pub round: u64,
    pub tool_call_id: String,
    pub tool_name: String,
    pub arguments: String,
    pub started_ms: u64,
}

/// Everything one round changed, written in one go.
#[derive(Clone, Debug, Default)]
pub struct RoundRecord {
    pub session: String,
    pub run: String,
    /// The round number just committed (also the run's new `rounds`).
    pub round: u64,
    pub write_epoch: u64,
    pub turn_allow_all: bool,
    /// Names newly marked in this round.
    pub marked: Vec<String>,
    /// The whole new todo list, when it changed.
    pub todos: Option<Vec<Todo>>,
    /// Dedupe entries added or replaced (by key).
    pub dedupe_put: Vec<DedupeEntry>,
    /// Dedupe keys removed.
    pub dedupe_drop: Vec<String>,
    /// Paths a mutating call of this round changed: path-scoped entries stored before this
    /// round that cover one of them are no longer valid (see [`path_entry_valid`]).
    pub touched_paths: Vec<String>,
    /// A mutating call of this round may have changed anything (it reported no paths, or it
    /// was interrupted): every path-scoped entry stored before this round is no longer valid.
    pub touched_all: bool,
    pub transcript: Vec<TranscriptEntry>,
    /// The round's events, in order.
    pub events: Vec<Arc<dyn EventJson>>,
    pub pending: Option<PendingTask>,
    /// Pending tasks (by hash) this round answered: they are gone once it commits.
    pub answered: Vec<String>,
    /// Journal entries (by id) whose calls this round committed or reported: they are closed.
    pub journal_done: Vec<String>,
}

/// What a committed round was given by the store.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Committed {
    /// The sequence numbers of the round's events, in order (empty when it had none): what
    /// [`SessionStore::events`] returns them under, so a caller that follows the log learns
    /// where the round ended without reading it back.
    pub events: std::ops::Range<u64>,
}

/// Whether a path-scoped dedupe entry stored at write epoch `stored_at` (the `write_epoch`
/// of the round that put it) is still valid: no round after it changed everything
/// (`wiped_at`, the epoch of the last `touched_all` round) or one of its paths (`touched_at`,
/// the epoch of the last round that touched the path; 0 for never). Rounds record both at
/// their own `write_epoch`, which only grows, and a round's own puts are already checked by
/// the engine, so "after it" is "at a higher epoch".
pub fn path_entry_valid(
    validity: &Validity,
    stored_at: u64,
    wiped_at: u64,
    mut touched_at: impl FnMut(&str) -> u64,
) -> bool {
    match validity {
        Validity::Paths { paths } => {
            wiped_at <= stored_at && paths.iter().all(|p| touched_at(p) <= stored_at)
        }
        Validity::Always | Validity::Epoch { .. } => true,
    }
}

/// Sessions, runs, transcripts, events and pending tasks.
#[async_trait]
pub trait SessionStore: Send + Sync {
    /// The session's and the run's state; empty snapshots when they do not exist yet. The
    /// run's dedupe map holds every entry still valid (path-scoped entries whose paths a later
    /// round touched are left out), in insertion order.
    async fn load(&self, session: &str, run: &str) -> StoreResult<(SessionSnapshot, RunSnapshot)>;
    /// `load`, with only the dedupe entries under `keys` (hex dedupe keys): what a round
    /// needs, read in O(keys) rather than O(entries in the run).
    async fn load_keys(
        &self,
        session: &str,
        run: &str,
        keys: &[String],
    ) -> StoreResult<(SessionSnapshot, RunSnapshot)> {
        let (snapshot, mut run) = self.load(session, run).await?;
        run.dedupe.retain(|entry| keys.contains(&entry.key));
        Ok((snapshot, run))
    }
    /// Apply one round's changes atomically. `record.round` must follow the run's last
    /// committed round, else nothing is written and the result is `StoreError::Conflict`.
    async fn commit_round(&self, record: RoundRecord) -> StoreResult<Committed>;
    /// The session transcript in commit order, optionally narrowed to one run.
    async fn transcript(
        &self,
        session: &str,
        run: Option<&str>,
    ) -> StoreResult<Vec<TranscriptEntry>>;
    /// The session's events (JSON text) with a sequence number above `after`, oldest first.
    async fn events(&self, session: &str, after: u64) -> StoreResult<Vec<(u64, String)>>;
    /// Pending tasks of the session, oldest first.
    async fn pending(&self, session: &str) -> StoreResult<Vec<PendingTask>>;
    /// Record that a mutating call is about to run; durable before the call starts.
    async fn journal_begin(&self, entry: JournalEntry) -> StoreResult<()>;
    /// The session's journal entries not yet closed by a commit, oldest first.
    async fn journal_open(&self, session: &str) -> StoreResult<Vec<JournalEntry>>;
    /// A warning to show once, when the store has started working in a degraded way (a
    /// tiered store whose shared tier is unreachable). Lets the engine report an outage
    /// without knowing the backend; a store that cannot degrade never has one.
    fn health_notice(&self) -> Option<String> {
        None
    }
}

/// Everything a backend keeps: sessions and runs (and their chat history), the result cache,
/// the error memory, secrets, file history.
pub trait Store:
    SessionStore
    + ResultCache
    + ErrorMemory
    + Secrets
    + Maintenance
    + FileHistory
    + ChatHistory
    + AgentStore
    + ApprovedChats
{
}

impl<T> Store for T where
    T: SessionStore
        + ResultCache
        + ErrorMemory
        + Secrets
        + Maintenance
        + FileHistory
        + ChatHistory
        + AgentStore
        + ApprovedChats
{
}

/// Open a store by URL: `memory:`, `sqlite:PATH` or `redis://HOST:PORT/DB`.
///
/// A `redis://` URL opens a [`tiered::TieredStore`]: Redis while it answers, and the local
/// SQLite store while it does not (DESIGN §7). The local store is
/// `$XDG_DATA_HOME/tooldispatch/store.db` (else `~/.local/share/tooldispatch/store.db`), or
/// the file given by a `local=PATH` query parameter, e.g.
/// `redis://10.0.0.5:6379/0?local=/var/lib/td/store.db` (`PATH` percent-decoded, removed from
/// the URL Redis sees).
pub fn open(url: &str) -> StoreResult<Arc<dyn Store>> {
    let bad = |reason: &str| StoreError::BadUrl {
        url: url.to_string(),
        reason: reason.to_string(),
    };
    if url == "memory:" {
        return Ok(Arc::new(memory::MemoryStore::default()));
    }
    if let Some(path) = url.strip_prefix("sqlite:") {
        if path.is_empty() {
            return Err(bad("sqlite: needs a file path, e.g. sqlite:/tmp/td.db"));
        }
        #[cfg(feature = "sqlite")]
        {
            return Ok(Arc::new(sqlite::SqliteStore::open(std::path::Path::new(
                path,
            ))?));
        }
        #[cfg(not(feature = "sqlite"))]
        return Err(bad("this build has no SQLite backend"));
    }
    if url.starts_with("redis://") {
        // Connects on first use, so opening needs no runtime and a down Redis shows up as a
        // backend error on the first call, not here.
        #[cfg(all(feature = "redis", feature = "sqlite"))]
        {
            return Ok(Arc::new(tiered::TieredStore::open(url)?));
        }
        // File history (and the outage fallback) live in local SQLite: Redis needs it.
        #[cfg(not(all(feature = "redis", feature = "sqlite")))]
        return Err(bad(
            "this build lacks the Redis or the SQLite backend (redis:// needs both)",
        ));
    }
    Err(bad("use memory:, sqlite:PATH or redis://HOST:PORT/DB"))
}
