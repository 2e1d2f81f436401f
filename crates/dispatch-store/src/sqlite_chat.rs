//! Chat history in SQLite: full-text search through `transcript_fts` (FTS5, filled in the
//! round's commit transaction) and run summaries grouped from the transcript.

use async_trait::async_trait;
use rusqlite::params;

use super::{SqliteStore, from_json, to_i64, to_u64};
use crate::chat::{ChatHistory, ChatHit, RunSummary, query_words};
use crate::{StoreResult, TranscriptEntry};

fn limit_i64(limit: usize) -> i64 {
    i64::try_from(limit).unwrap_or(i64::MAX)
}

#[async_trait]
impl ChatHistory for SqliteStore {
    async fn chat_search(
        &self,
        session: &str,
        query: &str,
        since_ms: Option<u64>,
        limit: usize,
    ) -> StoreResult<Vec<ChatHit>> {
        let words = query_words(query);
        if words.is_empty() || limit == 0 {
            return Ok(Vec::new());
        }
        // Each word quoted: an FTS5 phrase of one token, so no word is read as an operator;
        // words hold only letters, digits and `_`, so no quote can be inside one.
        let expression = words
            .iter()
            .map(|w| format!("\"{w}\""))
            .collect::<Vec<_>>()
            .join(" ");
        let session = session.to_string();
        self.run(
            format!("search the chat history of {session}"),
            move |conn| {
                let since = to_i64(since_ms.unwrap_or(0), "time")?;
                let mut stmt = conn.prepare_cached(
                    "SELECT t.seq, t.at_ms, t.run, t.round, t.in_tools, t.message
                 FROM transcript_fts f JOIN transcript t ON t.seq = f.rowid
                 WHERE transcript_fts MATCH ?1 AND t.session = ?2 AND t.at_ms >= ?3
                 ORDER BY t.seq DESC LIMIT ?4",
                )?;
                let mut rows = stmt.query(params![expression, session, since, limit_i64(limit)])?;
                let mut hits = Vec::new();
                while let Some(row) = rows.next()? {
                    hits.push(ChatHit {
                        seq: to_u64(row.get(0)?, "transcript seq")?,
                        at_ms: to_u64(row.get(1)?, "transcript time")?,
                        entry: TranscriptEntry {
                            run: row.get(2)?,
                            round: to_u64(row.get(3)?, "transcript round")?,
                            in_tools: row.get(4)?,
                            message: from_json(&row.get::<_, String>(5)?, "transcript message")?,
                        },
                    });
                }
                Ok(hits)
            },
        )
        .await
    }

    async fn chat_runs(
        &self,
        session: &str,
        since_ms: Option<u64>,
        limit: usize,
    ) -> StoreResult<Vec<RunSummary>> {
        let session = session.to_string();
        self.run(format!("list the runs of {session}"), move |conn| {
            let since = to_i64(since_ms.unwrap_or(0), "time")?;
            let mut stmt = conn.prepare_cached(
                "SELECT run, COUNT(DISTINCT round), MIN(at_ms), MAX(at_ms),
                        SUM(CASE WHEN json_extract(message, '$.role') = 'assistant'
                                 THEN json_array_length(message, '$.tool_calls') ELSE 0 END)
                 FROM transcript WHERE session = ?1 AND at_ms >= ?2
                 GROUP BY run ORDER BY MAX(seq) DESC LIMIT ?3",
            )?;
            let mut rows = stmt.query(params![session, since, limit_i64(limit)])?;
            let mut runs = Vec::new();
            while let Some(row) = rows.next()? {
                runs.push(RunSummary {
                    run: row.get(0)?,
                    rounds: to_u64(row.get(1)?, "rounds")?,
                    first_ms: to_u64(row.get(2)?, "time")?,
                    last_ms: to_u64(row.get(3)?, "time")?,
                    calls: to_u64(row.get(4)?, "calls")?,
                });
            }
            Ok(runs)
        })
        .await
    }

    async fn chat_read(&self, session: &str, run: &str, limit: usize) -> StoreResult<Vec<ChatHit>> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let (session, run) = (session.to_string(), run.to_string());
        self.run(format!("read run {run} of {session}"), move |conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT seq, at_ms, run, round, in_tools, message FROM transcript
                 WHERE session = ?1 AND run = ?2 ORDER BY seq LIMIT ?3",
            )?;
            let mut rows = stmt.query(params![session, run, limit_i64(limit)])?;
            let mut hits = Vec::new();
            while let Some(row) = rows.next()? {
                hits.push(ChatHit {
                    seq: to_u64(row.get(0)?, "transcript seq")?,
                    at_ms: to_u64(row.get(1)?, "transcript time")?,
                    entry: TranscriptEntry {
                        run: row.get(2)?,
                        round: to_u64(row.get(3)?, "transcript round")?,
                        in_tools: row.get(4)?,
                        message: from_json(&row.get::<_, String>(5)?, "transcript message")?,
                    },
                });
            }
            Ok(hits)
        })
        .await
    }
}
