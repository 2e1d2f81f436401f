//! Chat history in SQLite: full-text search through `transcript_fts` (FTS5, filled after
//! commits in batches, and caught up before every search) and run summaries grouped from the
//! transcript rows.

use std::collections::HashMap;

use async_trait::async_trait;
use rusqlite::params;

use super::session::{MESSAGES_PER_ROW, index_transcript, transcript_row};
use super::{JobError, SqliteStore, to_i64, to_u64};
use crate::chat::{ChatHistory, ChatHit, RunSummary, query_words};
use crate::{StoreResult, TranscriptEntry};

fn limit_i64(limit: usize) -> i64 {
    i64::try_from(limit).unwrap_or(i64::MAX)
}

/// The position of message `index` of transcript row `id` (the full-text rowid).
fn message_seq(id: i64, index: usize) -> Result<u64, JobError> {
    let per_row = u64::try_from(MESSAGES_PER_ROW).unwrap_or(1024);
    Ok(to_u64(id, "transcript row")? * per_row + u64::try_from(index).unwrap_or(0))
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
        // On the writer: the index first catches up with every committed round.
        self.run(
            format!("search the chat history of {session}"),
            move |conn| {
                index_transcript(conn)?;
                let since = to_i64(since_ms.unwrap_or(0), "time")?;
                let per_row = i64::try_from(MESSAGES_PER_ROW).unwrap_or(1024);
                let mut stmt = conn.prepare_cached(
                    "SELECT f.rowid, t.id, t.at_ms, t.body
                     FROM transcript_fts f JOIN transcript_log t ON t.id = f.rowid / ?5
                     WHERE transcript_fts MATCH ?1 AND t.session = ?2 AND t.at_ms >= ?3
                     ORDER BY f.rowid DESC LIMIT ?4",
                )?;
                let mut rows =
                    stmt.query(params![expression, session, since, limit_i64(limit), per_row])?;
                let mut decoded: HashMap<i64, Vec<TranscriptEntry>> = HashMap::new();
                let mut hits = Vec::new();
                while let Some(row) = rows.next()? {
                    let rowid: i64 = row.get(0)?;
                    let id: i64 = row.get(1)?;
                    let at_ms = to_u64(row.get(2)?, "transcript time")?;
                    let index = usize::try_from(rowid - id * per_row).unwrap_or(usize::MAX);
                    let entries = match decoded.entry(id) {
                        std::collections::hash_map::Entry::Occupied(known) => known.into_mut(),
                        std::collections::hash_map::Entry::Vacant(slot) => {
                            slot.insert(transcript_row(conn, row.get_ref(3)?)?)
                        }
                    };
                    let entry = entries
                        .get(index)
                        .ok_or_else(|| {
                            JobError::Corrupt(format!(
                                "the full-text index names message {index} of transcript row {id}, which has no such message"
                            ))
                        })?;
                    hits.push(ChatHit {
                        seq: message_seq(id, index)?,
                        at_ms,
                        entry: entry.clone(),
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
        self.read(format!("list the runs of {session}"), move |conn| {
            let since = to_i64(since_ms.unwrap_or(0), "time")?;
            let mut stmt = conn.prepare_cached(
                "SELECT run, COUNT(DISTINCT round), MIN(at_ms), MAX(at_ms), SUM(calls)
                 FROM transcript_log WHERE session = ?1 AND at_ms >= ?2
                 GROUP BY run ORDER BY MAX(id) DESC LIMIT ?3",
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
        self.read(format!("read run {run} of {session}"), move |conn| {
            let tx = conn.transaction()?;
            let mut hits = Vec::new();
            {
                let mut stmt = tx.prepare_cached(
                    "SELECT id, at_ms, body FROM transcript_log
                     WHERE session = ?1 AND run = ?2 ORDER BY id",
                )?;
                let mut rows = stmt.query(params![session, run])?;
                'rows: while let Some(row) = rows.next()? {
                    let id: i64 = row.get(0)?;
                    let at_ms = to_u64(row.get(1)?, "transcript time")?;
                    for (index, entry) in transcript_row(&tx, row.get_ref(2)?)?
                        .into_iter()
                        .enumerate()
                    {
                        if hits.len() == limit {
                            break 'rows;
                        }
                        hits.push(ChatHit {
                            seq: message_seq(id, index)?,
                            at_ms,
                            entry,
                        });
                    }
                }
            }
            tx.commit()?;
            Ok(hits)
        })
        .await
    }
}
