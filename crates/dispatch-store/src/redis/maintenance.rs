//! Housekeeping for the Redis store: counts by `SCAN`ning this store's prefix (never `KEYS`,
//! which blocks a shared Redis), and a `gc` that runs the cache and error sweeps.
//!
//! Runs are not pruned here: a run's hash keeps no commit time, and adding one would mean
//! changing the commit script that every worker on the Redis runs.

use std::collections::HashSet;

use ::redis::aio::ConnectionManager;
use async_trait::async_trait;

use super::{RedisStore, backend};
use crate::StoreResult;
use crate::cache::ResultCache;
use crate::maintenance::{EntryCounts, GcPolicy, GcReport, Maintenance, StoreStats};

/// Keys one `SCAN` step asks for.
const SCAN_COUNT: usize = 1000;

/// `text` matched literally by a `SCAN MATCH` pattern (a prefix may hold glob characters).
fn glob_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

fn count(n: usize) -> u64 {
    u64::try_from(n).unwrap_or(u64::MAX)
}

impl RedisStore {
    /// Every key of kind `kind` (see the key table in redis/mod.rs), in batches passed to `each`.
    async fn scan_kind(
        &self,
        conn: &mut ConnectionManager,
        kind: &str,
        mut each: impl FnMut(Vec<String>),
    ) -> StoreResult<()> {
        let pattern = format!("{}{kind}:*", glob_escape(&self.keys.prefix));
        let mut cursor: u64 = 0;
        loop {
            let (next, batch): (u64, Vec<String>) = ::redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(SCAN_COUNT)
                .query_async(conn)
                .await
                .map_err(backend(format!("list the {kind} keys")))?;
            each(batch);
            if next == 0 {
                return Ok(());
            }
            cursor = next;
        }
    }

    /// Every key of kind `kind`.
    async fn keys_of(&self, conn: &mut ConnectionManager, kind: &str) -> StoreResult<Vec<String>> {
        let mut keys = Vec::new();
        self.scan_kind(conn, kind, |batch| keys.extend(batch))
            .await?;
        Ok(keys)
    }

    /// The sum of `length` (`LLEN`, `HLEN`) over every key of kind `kind`.
    async fn total_length(
        &self,
        conn: &mut ConnectionManager,
        kind: &str,
        length: &str,
    ) -> StoreResult<u64> {
        let keys = self.keys_of(conn, kind).await?;
        let mut total: u64 = 0;
        for chunk in keys.chunks(SCAN_COUNT) {
            let mut pipe = ::redis::pipe();
            for key in chunk {
                pipe.cmd(length).arg(key);
            }
            let lengths: Vec<u64> = pipe
                .query_async(conn)
                .await
                .map_err(backend(format!("count the {kind} entries")))?;
            total += lengths.iter().sum::<u64>();
        }
        Ok(total)
    }

    /// Cache entries present, split by whether the store's clock says they are due.
    async fn cache_counts(
        &self,
        conn: &mut ConnectionManager,
        now: u64,
    ) -> StoreResult<EntryCounts> {
        let mut present = self.keys_of(conn, "cache:shared").await?;
        present.extend(self.keys_of(conn, "cache:session").await?);
        let due: HashSet<String> = ::redis::cmd("ZRANGEBYSCORE")
            .arg(self.keys.cache_expiry())
            .arg("-inf")
            .arg(now)
            .query_async(conn)
            .await
            .map_err(backend("count the expired cache entries"))?;
        let expired = count(present.iter().filter(|key| due.contains(*key)).count());
        Ok(EntryCounts {
            live: count(present.len()) - expired,
            expired,
        })
    }

    async fn error_counts(
        &self,
        conn: &mut ConnectionManager,
        now: u64,
    ) -> StoreResult<EntryCounts> {
        let (live, expired): (u64, u64) = ::redis::pipe()
            .cmd("ZCOUNT")
            .arg(self.keys.error_expiry())
            .arg(format!("({now}"))
            .arg("+inf")
            .cmd("ZCOUNT")
            .arg(self.keys.error_expiry())
            .arg("-inf")
            .arg(now)
            .query_async(conn)
            .await
            .map_err(backend("count the error records"))?;
        Ok(EntryCounts { live, expired })
    }

    /// The server's `used_memory`: Redis reports it for the whole server, not per prefix.
    async fn used_memory(&self, conn: &mut ConnectionManager) -> StoreResult<Option<u64>> {
        let info: String = ::redis::cmd("INFO")
            .arg("memory")
            .query_async(conn)
            .await
            .map_err(backend("read INFO memory"))?;
        Ok(info
            .lines()
            .find_map(|line| line.strip_prefix("used_memory:"))
            .and_then(|n| n.trim().parse().ok()))
    }
}

#[async_trait]
impl Maintenance for RedisStore {
    async fn stats(&self) -> StoreResult<StoreStats> {
        let now = self.clock.now_ms();
        let mut conn = self.connection().await?;
        // Every round writes its run hash, but the session hash only when the round sets todos
        // or parks a task: sessions are counted by the session ids of the run keys.
        let runs = self.keys_of(&mut conn, "run").await?;
        let run_prefix = format!("{}run:", self.keys.prefix);
        let sessions: HashSet<&str> = runs
            .iter()
            .filter_map(|key| key.strip_prefix(&run_prefix))
            // Escaped parts hold no `:`, so the first one ends the session id.
            .filter_map(|rest| rest.split(':').next())
            .collect();
        let mut stats = StoreStats {
            backend: "redis",
            sessions: count(sessions.len()),
            runs: count(runs.len()),
            transcript_entries: self.total_length(&mut conn, "transcript", "LLEN").await?,
            events: self.total_length(&mut conn, "events", "LLEN").await?,
            pending_tasks: self.total_length(&mut conn, "pending", "HLEN").await?,
            open_journal_entries: self.total_length(&mut conn, "journal", "HLEN").await?,
            dedupe_entries: self.total_length(&mut conn, "dedupe", "HLEN").await?,
            cache_entries: self.cache_counts(&mut conn, now).await?,
            error_records: self.error_counts(&mut conn, now).await?,
            bytes: self.used_memory(&mut conn).await?,
            ..StoreStats::default()
        };
        self.cache_counters.fill(&mut stats);
        Ok(stats)
    }

    async fn gc(&self, _policy: &GcPolicy) -> StoreResult<GcReport> {
        let now = self.clock.now_ms();
        let cache_entries_swept = self.cache_sweep().await?;
        let error_records_dropped = self.forget_due(now).await?;
        Ok(GcReport {
            backend: "redis",
            cache_entries_swept,
            error_records_dropped,
            runs_pruned: None,
            dedupe_entries_dropped: None,
            compacted: false,
            notes: vec![
                "runs not pruned: a Redis run keeps no commit time, so its age is unknown"
                    .to_string(),
            ],
        })
    }
}
