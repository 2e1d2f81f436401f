//! Housekeeping for the SQLite store: counts by SQL, the file size from the file system, and a
//! `gc` that ends with a WAL checkpoint so the space it freed shows up on disk.

use async_trait::async_trait;
use rusqlite::{Connection, TransactionBehavior, params};

use super::{JobError, SqliteStore, clamp_ms, to_u64};
use crate::StoreResult;
use crate::cache::ResultCache;
use crate::maintenance::{EntryCounts, GcPolicy, GcReport, Maintenance, StoreStats, duration_ms};

/// `COUNT(*)` of a table (the names are ours, never input).
fn rows(conn: &Connection, table: &str) -> Result<u64, JobError> {
    let n: i64 = conn.query_row(&format!("SELECT COUNT(*) FROM {table}"), [], |row| {
        row.get(0)
    })?;
    to_u64(n, "row count")
}

/// The bytes of each table's pages and its indexes' (a virtual table's under its shadow
/// tables' names).
fn bytes_by_table(conn: &Connection) -> Result<std::collections::BTreeMap<String, u64>, JobError> {
    let mut stmt = conn.prepare(
        "SELECT COALESCE(s.tbl_name, d.name), SUM(d.pgsize) FROM dbstat d
         LEFT JOIN sqlite_schema s ON s.name = d.name GROUP BY 1",
    )?;
    let mut rows = stmt.query([])?;
    let mut tables = std::collections::BTreeMap::new();
    while let Some(row) = rows.next()? {
        tables.insert(row.get::<_, String>(0)?, to_u64(row.get(1)?, "table size")?);
    }
    Ok(tables)
}

/// The sum of `column` over `table`'s rows.
fn sum(conn: &Connection, table: &str, column: &str) -> Result<u64, JobError> {
    let n: i64 = conn.query_row(
        &format!("SELECT COALESCE(SUM({column}), 0) FROM {table}"),
        [],
        |row| row.get(0),
    )?;
    to_u64(n, "row count")
}

/// Rows of `table` still valid at `now` by their `expires_ms`, and those already expired.
fn by_expiry(conn: &Connection, table: &str, now: i64) -> Result<EntryCounts, JobError> {
    let (live, expired): (i64, i64) = conn.query_row(
        &format!(
            "SELECT COALESCE(SUM(expires_ms > ?1), 0), COALESCE(SUM(expires_ms <= ?1), 0)
             FROM {table}"
        ),
        params![now],
        |row| Ok((row.get(0)?, row.get(1)?)),
    )?;
    Ok(EntryCounts {
        live: to_u64(live, "row count")?,
        expired: to_u64(expired, "row count")?,
    })
}

impl SqliteStore {
    /// The database file plus its WAL; a file that is missing (no WAL yet) counts as 0.
    fn bytes_on_disk(&self) -> u64 {
        let size = |path: &std::path::Path| std::fs::metadata(path).map_or(0, |m| m.len());
        let mut wal = self.path.clone().into_os_string();
        wal.push("-wal");
        size(&self.path) + size(std::path::Path::new(&wal))
    }
}

#[async_trait]
impl Maintenance for SqliteStore {
    async fn stats(&self) -> StoreResult<StoreStats> {
        let now = clamp_ms(self.clock.now_ms());
        let mut stats = self
            .read("read store statistics".to_string(), move |conn| {
                // One read transaction, so every count sees the same commit.
                let tx = conn.transaction()?;
                let stats = StoreStats {
                    backend: "sqlite",
                    sessions: rows(&tx, "sessions")?,
                    runs: rows(&tx, "runs")?,
                    transcript_entries: sum(&tx, "transcript_log", "count")?,
                    events: sum(&tx, "event_log", "count")?,
                    pending_tasks: rows(&tx, "pending")?,
                    open_journal_entries: rows(&tx, "journal")?,
                    dedupe_entries: rows(&tx, "dedupe_entries")?,
                    cache_entries: by_expiry(&tx, "cache", now)?,
                    error_records: by_expiry(&tx, "errors", now)?,
                    bytes_by_table: Some(bytes_by_table(&tx)?),
                    ..StoreStats::default()
                };
                tx.commit()?;
                Ok(stats)
            })
            .await?;
        stats.bytes = Some(self.bytes_on_disk());
        self.cache_counters.fill(&mut stats);
        Ok(stats)
    }

    async fn gc(&self, policy: &GcPolicy) -> StoreResult<GcReport> {
        let now = clamp_ms(self.clock.now_ms());
        let cache_entries_swept = self.cache_sweep().await?;
        let error_records_dropped = self
            .run("drop expired error records".to_string(), move |conn| {
                let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
                tx.execute(
                    "DELETE FROM errors_fts WHERE id IN (SELECT id FROM errors WHERE expires_ms <= ?1)",
                    params![now],
                )?;
                let dropped = tx.execute("DELETE FROM errors WHERE expires_ms <= ?1", params![now])?;
                tx.commit()?;
                Ok(u64::try_from(dropped).unwrap_or(u64::MAX))
            })
            .await?;
        // Runs have no commit time of their own: the session's `updated_ms` is the latest
        // commit of any of its runs, so a run is never judged older than it is (at worst an
        // old run of a busy session is kept).
        let cutoff = now.saturating_sub(clamp_ms(duration_ms(policy.finished_runs_older_than)));
        let (runs_pruned, dedupe_dropped) = self
            .run(
                "prune the dedupe entries of old runs".to_string(),
                move |conn| {
                    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
                    let runs: i64 = tx.query_row(
                        "SELECT COUNT(DISTINCT run_id) FROM dedupe_entries WHERE run_id IN
                     (SELECT id FROM runs WHERE session IN
                         (SELECT id FROM sessions WHERE updated_ms < ?1))",
                        params![cutoff],
                        |row| row.get(0),
                    )?;
                    let dropped = tx.execute(
                        "DELETE FROM dedupe_entries WHERE run_id IN
                     (SELECT id FROM runs WHERE session IN
                         (SELECT id FROM sessions WHERE updated_ms < ?1))",
                        params![cutoff],
                    )?;
                    // What invalidated the dropped entries goes with them: an entry stored
                    // later is stored at a later epoch than any of these touches.
                    tx.execute(
                        "DELETE FROM dedupe_touched WHERE run_id IN
                     (SELECT id FROM runs WHERE session IN
                         (SELECT id FROM sessions WHERE updated_ms < ?1))",
                        params![cutoff],
                    )?;
                    tx.commit()?;
                    Ok((
                        to_u64(runs, "run count")?,
                        u64::try_from(dropped).unwrap_or(u64::MAX),
                    ))
                },
            )
            .await?;
        let busy = self
            .run("checkpoint and optimize".to_string(), |conn| {
                // TRUNCATE empties the -wal file, so what gc freed is visible on disk; busy is
                // 1 when another process's reader kept it from finishing.
                let busy: i64 =
                    conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |row| row.get(0))?;
                conn.execute_batch("PRAGMA optimize")?;
                Ok(busy != 0)
            })
            .await?;
        let mut notes = Vec::new();
        if busy {
            notes.push(
                "the WAL checkpoint could not finish: another connection was reading; run gc again later"
                    .to_string(),
            );
        }
        Ok(GcReport {
            backend: "sqlite",
            cache_entries_swept,
            error_records_dropped,
            runs_pruned: Some(runs_pruned),
            dedupe_entries_dropped: Some(dedupe_dropped),
            compacted: !busy,
            notes,
        })
    }
}
