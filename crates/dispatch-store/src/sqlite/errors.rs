//! Error memory in SQLite: one row per record plus an FTS5 index over its text.

use async_trait::async_trait;
use rusqlite::params;

use super::{JobError, SqliteStore, from_json, to_i64, to_json};
use crate::errors::ERROR_TTL_MS;
use crate::{ErrorClass, ErrorMemory, ErrorRecord, StoreResult};

/// Expiry arithmetic happens in SQLite's integers. (Ninety days of milliseconds fits easily.)
const TTL_MS: i64 = ERROR_TTL_MS as i64;

/// Every word must match, each as a prefix; words are quoted so FTS5 syntax in the model's
/// query (`OR`, `NEAR`, `*`, `"`) is searched for, never obeyed.
fn fts_query(query: &str) -> String {
    query
        .split_whitespace()
        .map(|word| format!("\"{}\"*", word.replace('"', "\"\"")))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Give the records found their 90 days again.
fn refresh(tx: &rusqlite::Transaction<'_>, ids: &[String], now: i64) -> Result<(), JobError> {
    let mut update = tx.prepare_cached("UPDATE errors SET expires_ms = ?2 WHERE id = ?1")?;
    for id in ids {
        update.execute(params![id, now.saturating_add(TTL_MS)])?;
    }
    Ok(())
}

impl SqliteStore {
    fn now_i64(&self) -> Result<i64, crate::StoreError> {
        Ok(super::clamp_ms(self.clock.now_ms()))
    }

    /// Records selected by `sql` (which yields the `record` column and binds `?1` to now),
    /// filtered, newest first, at most `limit`, refreshed.
    async fn error_hits(
        &self,
        op: String,
        sql: &'static str,
        extra: Vec<String>,
        keep: Option<String>,
        limit: usize,
    ) -> StoreResult<Vec<ErrorRecord>> {
        let now = self.now_i64()?;
        self.run(op, move |conn| {
            let tx = conn.transaction()?;
            let mut records: Vec<ErrorRecord> = {
                let mut stmt = tx.prepare_cached(sql)?;
                let mut values: Vec<&dyn rusqlite::ToSql> = vec![&now];
                for e in &extra {
                    values.push(e);
                }
                let rows = stmt.query_map(values.as_slice(), |row| row.get::<_, String>(0))?;
                let mut out = Vec::new();
                for text in rows {
                    out.push(from_json::<ErrorRecord>(&text?, "error record")?);
                }
                out
            };
            if let Some(keyword) = &keep {
                records.retain(|r| r.keywords.contains(keyword));
            }
            records.sort_by_key(|r| std::cmp::Reverse(r.timestamp_ms));
            records.truncate(limit);
            let ids: Vec<String> = records.iter().map(|r| r.id.clone()).collect();
            refresh(&tx, &ids, now)?;
            tx.commit()?;
            Ok(records)
        })
        .await
    }
}

#[async_trait]
impl ErrorMemory for SqliteStore {
    async fn error_write(&self, record: ErrorRecord) -> StoreResult<()> {
        let now = self.now_i64()?;
        let op = format!("write error record for {}", record.tool_name);
        self.run(op, move |conn| {
            let tx = conn.transaction()?;
            // Expired records go on every write: error memory is small and written rarely.
            tx.execute(
                "DELETE FROM errors_fts WHERE id IN (SELECT id FROM errors WHERE expires_ms <= ?1)",
                params![now],
            )?;
            tx.execute("DELETE FROM errors WHERE expires_ms <= ?1", params![now])?;
            tx.execute("DELETE FROM errors_fts WHERE id = ?1", params![record.id])?;
            tx.execute(
                "INSERT OR REPLACE INTO errors (id, tool, timestamp_ms, expires_ms, record)
                 VALUES (?1, ?2, ?3, ?4, ?5)",
                params![
                    record.id,
                    record.tool_name,
                    to_i64(record.timestamp_ms, "error timestamp")?,
                    now.saturating_add(TTL_MS),
                    to_json(&record)?,
                ],
            )?;
            tx.execute(
                "INSERT INTO errors_fts (id, body) VALUES (?1, ?2)",
                params![record.id, record.searched_text()],
            )?;
            tx.commit()?;
            Ok(())
        })
        .await
    }

    async fn error_search(
        &self,
        tool: Option<&str>,
        query: &str,
        limit: usize,
    ) -> StoreResult<Vec<ErrorRecord>> {
        let op = format!("search error memory for {query:?}");
        let fts = fts_query(query);
        match (tool, fts.is_empty()) {
            (None, true) => {
                let sql = "SELECT record FROM errors WHERE expires_ms > ?1";
                self.error_hits(op, sql, vec![], None, limit).await
            }
            (Some(tool), true) => {
                let sql = "SELECT record FROM errors WHERE expires_ms > ?1 AND tool = ?2";
                self.error_hits(op, sql, vec![tool.to_string()], None, limit)
                    .await
            }
            (None, false) => {
                let sql = "SELECT e.record FROM errors_fts f JOIN errors e ON e.id = f.id
                           WHERE e.expires_ms > ?1 AND errors_fts MATCH ?2";
                self.error_hits(op, sql, vec![fts], None, limit).await
            }
            (Some(tool), false) => {
                let sql = "SELECT e.record FROM errors_fts f JOIN errors e ON e.id = f.id
                           WHERE e.expires_ms > ?1 AND errors_fts MATCH ?2 AND e.tool = ?3";
                self.error_hits(op, sql, vec![fts, tool.to_string()], None, limit)
                    .await
            }
        }
    }

    async fn error_related(
        &self,
        tool: &str,
        class: ErrorClass,
        limit: usize,
    ) -> StoreResult<Vec<ErrorRecord>> {
        let op = format!("find related errors of {tool}");
        let sql = "SELECT record FROM errors WHERE expires_ms > ?1 AND tool = ?2";
        self.error_hits(
            op,
            sql,
            vec![tool.to_string()],
            Some(class.keyword()),
            limit,
        )
        .await
    }

    async fn error_read(&self, id: &str) -> StoreResult<Option<ErrorRecord>> {
        let id = id.trim().to_lowercase();
        // Ids are hex: anything else (including LIKE wildcards) matches nothing.
        if id.len() < 8 || !id.chars().all(|c| c.is_ascii_hexdigit()) {
            return Ok(None);
        }
        let now = self.now_i64()?;
        self.run(format!("read error record {id}"), move |conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT record FROM errors WHERE id LIKE ?1 || '%' AND expires_ms > ?2 LIMIT 2",
            )?;
            let found: Vec<String> = stmt
                .query_map(params![id, now], |row| row.get(0))?
                .collect::<Result<_, _>>()?;
            // A prefix that two records share names neither.
            match found.as_slice() {
                [only] => Ok(Some(from_json(only, "error record")?)),
                _ => Ok(None),
            }
        })
        .await
    }
}
