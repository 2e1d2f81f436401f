//! Chat history in Redis: a scan of the session's transcript list (newest first), matched with
//! the same word rule as SQLite's FTS5 index (chat.rs).
//!
//! No inverted index here, unlike error memory: a transcript message can be a large tool
//! result, and indexing its words would cost thousands of set writes in every round's commit
//! for a search the model runs rarely. A search reads at most the newest
//! [`SCAN_WINDOW`] messages of the session instead.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use super::{RedisStore, backend, from_json};
use crate::chat::{ChatHistory, ChatHit, RunSummary, read_scan, runs_scan, search_scan};
use crate::{StoreResult, TranscriptEntry};

/// How many of a session's newest transcript messages a search or listing reads.
pub const SCAN_WINDOW: i64 = 20_000;

/// A transcript entry as stored: the entry's own fields plus when it was committed.
#[derive(Serialize)]
pub(super) struct Stamped<'a> {
    pub(super) at_ms: u64,
    #[serde(flatten)]
    pub(super) entry: &'a TranscriptEntry,
}

#[derive(Deserialize)]
struct StoredEntry {
    /// Entries written before commit times were stored read as 0 (the epoch).
    #[serde(default)]
    at_ms: u64,
    #[serde(flatten)]
    entry: TranscriptEntry,
}

impl RedisStore {
    /// The newest `SCAN_WINDOW` entries of the session as `(seq, at_ms, entry)`, oldest first.
    async fn stamped_transcript(
        &self,
        session: &str,
    ) -> StoreResult<Vec<(u64, u64, TranscriptEntry)>> {
        let mut conn = self.connection().await?;
        let key = self.keys.transcript(session);
        let op = || backend(format!("read the chat history of {session}"));
        let len: i64 = ::redis::cmd("LLEN")
            .arg(&key)
            .query_async(&mut conn)
            .await
            .map_err(op())?;
        let start = (len - SCAN_WINDOW).max(0);
        let texts: Vec<String> = ::redis::cmd("LRANGE")
            .arg(&key)
            .arg(start)
            .arg(-1)
            .query_async(&mut conn)
            .await
            .map_err(op())?;
        let first_seq = u64::try_from(start).unwrap_or(0) + 1;
        texts
            .iter()
            .enumerate()
            .map(|(i, text)| {
                let stored: StoredEntry = from_json(text, "transcript entry")?;
                Ok((first_seq + i as u64, stored.at_ms, stored.entry))
            })
            .collect()
    }
}

#[async_trait]
impl ChatHistory for RedisStore {
    async fn chat_search(
        &self,
        session: &str,
        query: &str,
        since_ms: Option<u64>,
        limit: usize,
    ) -> StoreResult<Vec<ChatHit>> {
        if crate::chat::query_words(query).is_empty() || limit == 0 {
            return Ok(Vec::new());
        }
        let entries = self.stamped_transcript(session).await?;
        Ok(search_scan(
            entries.iter().map(|(seq, at, e)| (*seq, *at, e)),
            query,
            since_ms,
            limit,
        ))
    }

    async fn chat_runs(
        &self,
        session: &str,
        since_ms: Option<u64>,
        limit: usize,
    ) -> StoreResult<Vec<RunSummary>> {
        let entries = self.stamped_transcript(session).await?;
        Ok(runs_scan(
            entries.iter().map(|(seq, at, e)| (*seq, *at, e)),
            since_ms,
            limit,
        ))
    }

    async fn chat_read(&self, session: &str, run: &str, limit: usize) -> StoreResult<Vec<ChatHit>> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let entries = self.stamped_transcript(session).await?;
        Ok(read_scan(
            entries.iter().map(|(seq, at, e)| (*seq, *at, e)),
            run,
            limit,
        ))
    }
}
