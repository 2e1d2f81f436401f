//! The agent loop's conversations (a list per session) and background legs (a hash per parent
//! session) in Redis.

use async_trait::async_trait;

use super::{RedisStore, backend, from_json, to_json};
use crate::StoreResult;
use crate::agents::{AgentStore, ConversationEntry, LegRecord};

#[async_trait]
impl AgentStore for RedisStore {
    async fn conversation(&self, session: &str) -> StoreResult<Vec<ConversationEntry>> {
        let mut conn = self.connection().await?;
        let texts: Vec<String> = ::redis::cmd("LRANGE")
            .arg(self.keys.conversation(session))
            .arg(0)
            .arg(-1)
            .query_async(&mut conn)
            .await
            .map_err(backend(format!("read the conversation of {session}")))?;
        texts
            .iter()
            .map(|t| from_json(t, "a conversation message"))
            .collect()
    }

    async fn append_conversation(
        &self,
        session: &str,
        entries: Vec<ConversationEntry>,
    ) -> StoreResult<()> {
        if entries.is_empty() {
            return Ok(());
        }
        let texts = entries
            .iter()
            .map(to_json)
            .collect::<StoreResult<Vec<_>>>()?;
        let mut conn = self.connection().await?;
        // One RPUSH of every message: all or none.
        let _: i64 = ::redis::cmd("RPUSH")
            .arg(self.keys.conversation(session))
            .arg(texts)
            .query_async(&mut conn)
            .await
            .map_err(backend(format!("add to the conversation of {session}")))?;
        Ok(())
    }

    async fn clear_conversation(&self, session: &str) -> StoreResult<()> {
        let mut conn = self.connection().await?;
        let _: i64 = ::redis::cmd("DEL")
            .arg(self.keys.conversation(session))
            .query_async(&mut conn)
            .await
            .map_err(backend(format!("clear the conversation of {session}")))?;
        Ok(())
    }

    async fn put_leg(&self, leg: &LegRecord) -> StoreResult<()> {
        let text = to_json(leg)?;
        let mut conn = self.connection().await?;
        let _: i64 = ::redis::cmd("HSET")
            .arg(self.keys.legs(&leg.parent))
            .arg(&leg.id)
            .arg(text)
            .query_async(&mut conn)
            .await
            .map_err(backend(format!("record leg {} of {}", leg.id, leg.parent)))?;
        Ok(())
    }

    async fn legs(&self, parent: &str) -> StoreResult<Vec<LegRecord>> {
        let mut conn = self.connection().await?;
        let texts: Vec<String> = ::redis::cmd("HVALS")
            .arg(self.keys.legs(parent))
            .query_async(&mut conn)
            .await
            .map_err(backend(format!("read the legs of {parent}")))?;
        let mut legs = texts
            .iter()
            .map(|t| from_json::<LegRecord>(t, "a leg"))
            .collect::<StoreResult<Vec<_>>>()?;
        legs.sort_by(|a, b| (a.started_ms, &a.id).cmp(&(b.started_ms, &b.id)));
        Ok(legs)
    }
}
