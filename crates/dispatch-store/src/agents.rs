//! What an agent keeps between processes: a session's conversation with its model, in the
//! provider's own message format (so a session continues where it stopped, thought signatures
//! and all), and the background legs a session started (so their state and results survive a
//! daemon restart).

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::StoreResult;

/// One message of a session's conversation with its model.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ConversationEntry {
    /// The model API whose format `message` is in (`openai`, `openai-responses`,
    /// `anthropic`, `gemini`): a conversation cannot be replayed to another one.
    pub api: String,
    /// The message exactly as it goes back to that API (a user message, the model's reply, a
    /// round's results).
    pub message: Value,
    /// When it was appended (ms since the epoch, by the store's clock or the caller's).
    pub at_ms: u64,
}

/// Where a background leg is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LegStatus {
    Running,
    Done,
    Failed,
    Stopped,
    /// Its process ended while it ran (a crash or a restart): it was not finished and will
    /// not be resumed.
    Interrupted,
}

/// One background leg of a parent session.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LegRecord {
    /// The session that started it.
    pub parent: String,
    /// Its id, unique within the parent.
    pub id: String,
    /// The session the leg itself runs in.
    pub session: String,
    pub task: String,
    pub model: String,
    pub status: LegStatus,
    /// The last progress line while it runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<String>,
    /// The final answer, or why it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<String>,
    #[serde(default)]
    pub input_tokens: u64,
    #[serde(default)]
    pub output_tokens: u64,
    pub started_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_ms: Option<u64>,
    /// The process running it: a leg still `Running` under another owner than the reader's
    /// was interrupted (see [`LegRecord::seen_by`]).
    pub owner: String,
}

impl LegRecord {
    /// The leg as a process named `owner` should report it: `Running` under an owner that is
    /// not this process means the process that ran it is gone.
    pub fn seen_by(mut self, owner: &str) -> Self {
        if self.status == LegStatus::Running && self.owner != owner {
            self.status = LegStatus::Interrupted;
        }
        self
    }
}

/// The agent loop's storage.
#[async_trait]
pub trait AgentStore: Send + Sync {
    /// The session's conversation, oldest first (empty for a session that has none).
    async fn conversation(&self, session: &str) -> StoreResult<Vec<ConversationEntry>>;

    /// Append `entries` to the session's conversation, all or none.
    async fn append_conversation(
        &self,
        session: &str,
        entries: Vec<ConversationEntry>,
    ) -> StoreResult<()>;

    /// Forget the session's conversation (its rounds and events stay).
    async fn clear_conversation(&self, session: &str) -> StoreResult<()>;

    /// Insert or replace the leg `(leg.parent, leg.id)`.
    async fn put_leg(&self, leg: &LegRecord) -> StoreResult<()>;

    /// The legs `parent` started, in the order they started (`started_ms`, then `id`).
    async fn legs(&self, parent: &str) -> StoreResult<Vec<LegRecord>>;
}
