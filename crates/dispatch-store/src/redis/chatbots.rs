//! Approved chats in Redis: one hash, `{platform}:{id}` → `ApprovedChat` JSON.

use async_trait::async_trait;

use super::{RedisStore, backend, escape, from_json, to_json};
use crate::StoreResult;
use crate::chatbots::{ApprovedChat, ApprovedChats, sort_chats};

/// The hash field of a chat: both parts escaped, so `:` inside one cannot make two chats meet.
fn field(platform: &str, id: &str) -> String {
    format!("{}:{}", escape(platform), escape(id))
}

#[async_trait]
impl ApprovedChats for RedisStore {
    async fn approve_chat(&self, chat: &ApprovedChat) -> StoreResult<()> {
        let text = to_json(chat)?;
        let mut conn = self.connection().await?;
        let _: i64 = ::redis::cmd("HSET")
            .arg(self.keys.approved_chats())
            .arg(field(&chat.platform, &chat.id))
            .arg(text)
            .query_async(&mut conn)
            .await
            .map_err(backend(format!(
                "approve {} chat {}",
                chat.platform, chat.id
            )))?;
        Ok(())
    }

    async fn approved_chats(&self, platform: Option<&str>) -> StoreResult<Vec<ApprovedChat>> {
        let mut conn = self.connection().await?;
        let texts: Vec<String> = ::redis::cmd("HVALS")
            .arg(self.keys.approved_chats())
            .query_async(&mut conn)
            .await
            .map_err(backend("read the approved chats".to_string()))?;
        let mut chats = texts
            .iter()
            .map(|t| from_json::<ApprovedChat>(t, "an approved chat"))
            .collect::<StoreResult<Vec<_>>>()?;
        chats.retain(|c| platform.is_none_or(|p| c.platform == p));
        sort_chats(&mut chats);
        Ok(chats)
    }

    async fn revoke_chat(&self, platform: &str, id: &str) -> StoreResult<bool> {
        let mut conn = self.connection().await?;
        let removed: i64 = ::redis::cmd("HDEL")
            .arg(self.keys.approved_chats())
            .arg(field(platform, id))
            .query_async(&mut conn)
            .await
            .map_err(backend(format!("revoke {platform} chat {id}")))?;
        Ok(removed > 0)
    }
}
