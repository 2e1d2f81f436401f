//! The chats a person approved for the chatbot tools (list_chatbot, send_to_chatbot): a chat
//! is usable only after `tooldispatch chatbot authorize PLATFORM ID`, so a model can never
//! pick its own target. Kept in the store so every process on it sees the same list.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::StoreResult;

/// One approved chat, keyed by `(platform, id)`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovedChat {
    /// `telegram` or `discord`.
    pub platform: String,
    /// The platform's chat or channel id, as text (Telegram ids may be negative).
    pub id: String,
    /// What the person calls it (the chat's title, a user's name, `#channel`).
    pub name: String,
    /// The platform's kind of chat: `private`, `group`, `supergroup`, `channel`,
    /// `guild_text`, `dm`, ...
    pub kind: String,
    /// When it was approved (ms since the epoch).
    pub approved_ms: u64,
}

/// The approved chats.
#[async_trait]
pub trait ApprovedChats: Send + Sync {
    /// Approve `chat`, replacing what was stored for its `(platform, id)`.
    async fn approve_chat(&self, chat: &ApprovedChat) -> StoreResult<()>;

    /// The approved chats of `platform` (all platforms for `None`), by platform, then in the
    /// order they were approved (then by id).
    async fn approved_chats(&self, platform: Option<&str>) -> StoreResult<Vec<ApprovedChat>>;

    /// Forget the approval of `(platform, id)`; `false` when there was none.
    async fn revoke_chat(&self, platform: &str, id: &str) -> StoreResult<bool>;

    /// The approved chat `(platform, id)`, if it is one.
    async fn approved_chat(&self, platform: &str, id: &str) -> StoreResult<Option<ApprovedChat>> {
        Ok(self
            .approved_chats(Some(platform))
            .await?
            .into_iter()
            .find(|chat| chat.id == id))
    }
}

/// The order [`ApprovedChats::approved_chats`] promises.
pub(crate) fn sort_chats(chats: &mut [ApprovedChat]) {
    chats.sort_by(|a, b| {
        (&a.platform, a.approved_ms, &a.id).cmp(&(&b.platform, b.approved_ms, &b.id))
    });
}
