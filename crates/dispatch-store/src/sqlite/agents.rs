//! The agent loop's conversations and background legs in SQLite: one row per conversation
//! message, one row per leg (replaced in place as it progresses).

use async_trait::async_trait;
use rusqlite::params;

use super::{SqliteStore, from_json, to_i64, to_json};
use crate::StoreResult;
use crate::agents::{AgentStore, ConversationEntry, LegRecord};

#[async_trait]
impl AgentStore for SqliteStore {
    async fn conversation(&self, session: &str) -> StoreResult<Vec<ConversationEntry>> {
        let owned = session.to_string();
        self.read(format!("read the conversation of {session}"), move |conn| {
            let mut stmt = conn
                .prepare_cached("SELECT entry FROM conversation WHERE session = ?1 ORDER BY seq")?;
            let texts = stmt
                .query_map(params![owned], |row| row.get::<_, String>(0))?
                .collect::<Result<Vec<_>, _>>()?;
            texts
                .iter()
                .map(|t| from_json(t, "a conversation message"))
                .collect()
        })
        .await
    }

    async fn append_conversation(
        &self,
        session: &str,
        entries: Vec<ConversationEntry>,
    ) -> StoreResult<()> {
        let owned = session.to_string();
        self.run(
            format!("add to the conversation of {session}"),
            move |conn| {
                let tx = conn.transaction()?;
                {
                    let mut stmt = tx.prepare_cached(
                        "INSERT INTO conversation (session, entry) VALUES (?1, ?2)",
                    )?;
                    for entry in &entries {
                        stmt.execute(params![owned, to_json(entry)?])?;
                    }
                }
                tx.commit()?;
                Ok(())
            },
        )
        .await
    }

    async fn clear_conversation(&self, session: &str) -> StoreResult<()> {
        let owned = session.to_string();
        self.run(
            format!("clear the conversation of {session}"),
            move |conn| {
                conn.prepare_cached("DELETE FROM conversation WHERE session = ?1")?
                    .execute(params![owned])?;
                Ok(())
            },
        )
        .await
    }

    async fn put_leg(&self, leg: &LegRecord) -> StoreResult<()> {
        let owned = leg.clone();
        self.run(
            format!("record leg {} of {}", leg.id, leg.parent),
            move |conn| {
                let record = to_json(&owned)?;
                conn.prepare_cached(
                    "INSERT INTO legs (parent, id, started_ms, record) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (parent, id) DO UPDATE SET started_ms = ?3, record = ?4",
                )?
                .execute(params![
                    owned.parent,
                    owned.id,
                    to_i64(owned.started_ms, "time")?,
                    record
                ])?;
                Ok(())
            },
        )
        .await
    }

    async fn legs(&self, parent: &str) -> StoreResult<Vec<LegRecord>> {
        let owned = parent.to_string();
        self.read(format!("read the legs of {parent}"), move |conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT record FROM legs WHERE parent = ?1 ORDER BY started_ms, id",
            )?;
            let texts = stmt
                .query_map(params![owned], |row| row.get::<_, String>(0))?
                .collect::<Result<Vec<_>, _>>()?;
            texts.iter().map(|t| from_json(t, "a leg")).collect()
        })
        .await
    }
}
