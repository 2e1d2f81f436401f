//! Approved chats in SQLite: one row per `(platform, id)`.

use async_trait::async_trait;
use rusqlite::params;

use super::{SqliteStore, from_json, to_i64, to_json};
use crate::StoreResult;
use crate::chatbots::{ApprovedChat, ApprovedChats};

#[async_trait]
impl ApprovedChats for SqliteStore {
    async fn approve_chat(&self, chat: &ApprovedChat) -> StoreResult<()> {
        let owned = chat.clone();
        self.run(
            format!("approve {} chat {}", chat.platform, chat.id),
            move |conn| {
                let record = to_json(&owned)?;
                conn.prepare_cached(
                    "INSERT INTO approved_chats (platform, id, approved_ms, record)
                     VALUES (?1, ?2, ?3, ?4)
                     ON CONFLICT (platform, id) DO UPDATE SET approved_ms = ?3, record = ?4",
                )?
                .execute(params![
                    owned.platform,
                    owned.id,
                    to_i64(owned.approved_ms, "time")?,
                    record
                ])?;
                Ok(())
            },
        )
        .await
    }

    async fn approved_chats(&self, platform: Option<&str>) -> StoreResult<Vec<ApprovedChat>> {
        let owned = platform.map(str::to_string);
        self.read("read the approved chats".to_string(), move |conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT record FROM approved_chats WHERE ?1 IS NULL OR platform = ?1
                 ORDER BY platform, approved_ms, id",
            )?;
            let texts = stmt
                .query_map(params![owned], |row| row.get::<_, String>(0))?
                .collect::<Result<Vec<_>, _>>()?;
            texts
                .iter()
                .map(|t| from_json(t, "an approved chat"))
                .collect()
        })
        .await
    }

    async fn revoke_chat(&self, platform: &str, id: &str) -> StoreResult<bool> {
        let (p, i) = (platform.to_string(), id.to_string());
        self.run(format!("revoke {platform} chat {id}"), move |conn| {
            let removed = conn
                .prepare_cached("DELETE FROM approved_chats WHERE platform = ?1 AND id = ?2")?
                .execute(params![p, i])?;
            Ok(removed > 0)
        })
        .await
    }
}
