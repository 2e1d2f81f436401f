//! The embedded default store: one SQLite file in WAL mode.
//!
//! rusqlite is blocking and a `Connection` cannot be shared between threads, so one dedicated
//! thread owns the connection and runs boxed jobs sent over a channel, answering through a
//! oneshot. One writer also means no `SQLITE_BUSY` between our own commits; other processes
//! sharing the file are covered by `busy_timeout`.
//!
//! Rounds are group-committed: `commit_round` queues its record and sends a job that drains
//! the queue, so the records that piled up while the thread was busy share one transaction
//! (each in its own savepoint, so one that conflicts or fails is rolled back alone). Every
//! caller hears its own result only after the shared transaction has committed.

use std::collections::VecDeque;
use std::fmt::Display;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError, mpsc};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::clock::{Clock, SystemClock};
use async_trait::async_trait;
use rusqlite::{Connection, OptionalExtension, Transaction, TransactionBehavior, params};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::oneshot;

use crate::{
    DedupeEntry, JournalEntry, PendingTask, RoundRecord, RunSnapshot, SessionSnapshot,
    SessionStore, StoreError, StoreResult, TranscriptEntry,
};

#[cfg(test)]
#[path = "sqlite_tests.rs"]
mod sqlite_tests;

/// Schema migrations in order; `PRAGMA user_version` holds how many have been applied.
const MIGRATIONS: &[&str] = &[
    // 1: the session store.
    r#"
    CREATE TABLE sessions (
        id         TEXT PRIMARY KEY,
        marked     TEXT NOT NULL,    -- JSON array of tool names, sorted
        todos      TEXT NOT NULL,    -- JSON array of todos
        created_ms INTEGER NOT NULL,
        updated_ms INTEGER NOT NULL
    ) STRICT;

    CREATE TABLE runs (
        session        TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
        run            TEXT NOT NULL,
        rounds         INTEGER NOT NULL,
        write_epoch    INTEGER NOT NULL,
        turn_allow_all INTEGER NOT NULL,
        PRIMARY KEY (session, run)
    ) STRICT;

    -- The rowid gives insertion order; an upsert keeps the row, so a replaced entry keeps its place.
    CREATE TABLE dedupe (
        session  TEXT NOT NULL,
        run      TEXT NOT NULL,
        key      TEXT NOT NULL CHECK (key <> ''),
        tool     TEXT NOT NULL,
        result   TEXT NOT NULL,
        images   TEXT NOT NULL,     -- JSON array
        validity TEXT NOT NULL,     -- JSON Validity
        is_error INTEGER NOT NULL DEFAULT 0,
        PRIMARY KEY (session, run, key),
        FOREIGN KEY (session, run) REFERENCES runs (session, run) ON DELETE CASCADE
    ) STRICT;

    CREATE TABLE transcript (
        seq      INTEGER PRIMARY KEY AUTOINCREMENT,
        session  TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
        run      TEXT NOT NULL,
        round    INTEGER NOT NULL,
        in_tools INTEGER NOT NULL,
        message  TEXT NOT NULL      -- JSON
    ) STRICT;
    CREATE INDEX transcript_by_session ON transcript (session, seq);
    CREATE INDEX transcript_by_run ON transcript (session, run, seq);

    -- AUTOINCREMENT: a sequence number is never reused, even after rows are deleted.
    CREATE TABLE events (
        seq     INTEGER PRIMARY KEY AUTOINCREMENT,
        session TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
        event   TEXT NOT NULL       -- JSON
    ) STRICT;
    CREATE INDEX events_by_session ON events (session, seq);

    CREATE TABLE pending (
        task_hash  TEXT PRIMARY KEY CHECK (task_hash <> ''),
        session    TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
        record     TEXT NOT NULL,   -- JSON PendingTask
        created_ms INTEGER NOT NULL
    ) STRICT;
    CREATE INDEX pending_by_session ON pending (session, created_ms);
    "#,
    // 2: the result cache and error memory.
    r#"
    -- scope is 'shared' or 'session:<id>'; expired rows are never returned and swept later.
    CREATE TABLE cache (
        scope      TEXT NOT NULL,
        key        TEXT NOT NULL,
        value      TEXT NOT NULL,
        written_ms INTEGER NOT NULL,
        expires_ms INTEGER NOT NULL,
        PRIMARY KEY (scope, key)
    ) STRICT;
    CREATE INDEX cache_by_expiry ON cache (expires_ms);

    CREATE TABLE errors (
        id           TEXT PRIMARY KEY,
        tool         TEXT NOT NULL,
        timestamp_ms INTEGER NOT NULL,
        expires_ms   INTEGER NOT NULL,
        record       TEXT NOT NULL      -- JSON ErrorRecord
    ) STRICT;
    CREATE INDEX errors_by_tool ON errors (tool, timestamp_ms);
    -- Full-text search over a record's tool, keywords, symptom, cause and action.
    CREATE VIRTUAL TABLE errors_fts USING fts5(id UNINDEXED, body);
    "#,
    // 3: the call journal (exactly-once for mutating calls).
    r#"
    CREATE TABLE journal (
        id         TEXT NOT NULL,
        session    TEXT NOT NULL,
        started_ms INTEGER NOT NULL,
        record     TEXT NOT NULL,   -- JSON JournalEntry
        PRIMARY KEY (session, id)
    ) STRICT;
    "#,
    // 4: secrets, sealed with the key in `<store file>.key` (never in this file).
    r#"
    CREATE TABLE secrets (
        name       TEXT PRIMARY KEY,
        nonce      BLOB NOT NULL,   -- 24 random bytes
        ciphertext BLOB NOT NULL,   -- XChaCha20-Poly1305 of the value, the name as associated data
        updated_ms INTEGER NOT NULL
    ) STRICT;
    "#,
    // 5: file history (versions of files before a tool changed them).
    r#"
    CREATE TABLE file_history (
        id         INTEGER PRIMARY KEY AUTOINCREMENT,
        path       TEXT NOT NULL,
        action     TEXT NOT NULL,   -- create | modify | delete | restore
        content    BLOB,            -- the bytes before the change; NULL if absent or over the cap
        truncated  INTEGER NOT NULL, -- it existed but was over the cap
        hash       TEXT NOT NULL,
        size       INTEGER NOT NULL,
        trash_path TEXT,
        session    TEXT NOT NULL,
        run        TEXT NOT NULL,
        tool       TEXT NOT NULL,
        changed_ms INTEGER NOT NULL
    ) STRICT;
    CREATE INDEX file_history_by_path ON file_history (path, id);
    CREATE INDEX file_history_by_run ON file_history (session, run, id);
    "#,
    // 6: chat history — when each message was committed, and a full-text index over what a
    // search looks in (chat.rs `searchable_text`; rows before this migration are indexed here).
    r#"
    ALTER TABLE transcript ADD COLUMN at_ms INTEGER NOT NULL DEFAULT 0;
    CREATE INDEX transcript_by_session_run ON transcript (session, run, seq);
    CREATE VIRTUAL TABLE transcript_fts USING fts5(
        body, content = '', tokenize = "unicode61 remove_diacritics 0 tokenchars '_'"
    );
    INSERT INTO transcript_fts (rowid, body)
    SELECT seq, CASE json_extract(message, '$.role')
        WHEN 'tool' THEN json_extract(message, '$.name') || char(10) || json_extract(message, '$.content')
        WHEN 'assistant' THEN (
            SELECT group_concat(json_extract(value, '$.name') || ' ' || json_extract(value, '$.arguments'), char(10))
            FROM json_each(message, '$.tool_calls'))
        ELSE '' END
    FROM transcript;
    "#,
    // 7: migration 6 created `transcript_by_session_run` on the same columns as
    // `transcript_by_run`; the duplicate only cost an extra index write per transcript row.
    r#"
    DROP INDEX IF EXISTS transcript_by_session_run;
    "#,
    // 8: the secrets generation, counted by triggers in the transaction of every change, so a
    // reader learns whether any process changed a secret without decrypting one.
    r#"
    CREATE TABLE secrets_generation (
        id         INTEGER PRIMARY KEY CHECK (id = 1),
        generation INTEGER NOT NULL
    ) STRICT;
    INSERT INTO secrets_generation (id, generation) VALUES (1, 0);
    CREATE TRIGGER secrets_generation_insert AFTER INSERT ON secrets BEGIN
        UPDATE secrets_generation SET generation = generation + 1 WHERE id = 1;
    END;
    CREATE TRIGGER secrets_generation_update AFTER UPDATE ON secrets BEGIN
        UPDATE secrets_generation SET generation = generation + 1 WHERE id = 1;
    END;
    CREATE TRIGGER secrets_generation_delete AFTER DELETE ON secrets BEGIN
        UPDATE secrets_generation SET generation = generation + 1 WHERE id = 1;
    END;
    "#,
    // 9: dedupe invalidation without a scan (lib.rs `path_entry_valid`): the write epoch each
    // entry was stored at, the epoch of the last round that may have changed anything, and
    // the epoch of the last round that touched each path. Entries stored before this
    // migration count as stored at epoch 0: every later touch has a higher epoch.
    r#"
    ALTER TABLE runs ADD COLUMN wiped_at INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE dedupe ADD COLUMN stored_at INTEGER NOT NULL DEFAULT 0;
    CREATE TABLE dedupe_touched (
        session TEXT NOT NULL,
        run     TEXT NOT NULL,
        path    TEXT NOT NULL,
        epoch   INTEGER NOT NULL,
        PRIMARY KEY (session, run, path),
        FOREIGN KEY (session, run) REFERENCES runs (session, run) ON DELETE CASCADE
    ) STRICT, WITHOUT ROWID;
    "#,
];

/// The most rounds one shared transaction commits; the rest wait for the next one.
const MAX_BATCH: usize = 64;

/// A round waiting for the writer thread, and where its caller waits for the result.
struct QueuedRound {
    record: RoundRecord,
    reply: oneshot::Sender<Result<(), JobError>>,
}

/// Rounds queued by `commit_round`, oldest first.
type CommitQueue = Arc<Mutex<VecDeque<QueuedRound>>>;

type Job = Box<dyn FnOnce(&mut Connection) + Send>;

#[path = "sqlite_cache.rs"]
mod cache_impl;
#[path = "sqlite_chat.rs"]
mod chat_impl;
#[path = "sqlite_errors.rs"]
mod errors_impl;
#[path = "sqlite_files.rs"]
mod files_impl;
#[path = "sqlite_maintenance.rs"]
mod maintenance_impl;
#[path = "sqlite_secrets.rs"]
mod secrets_impl;

/// A [`SessionStore`] in one SQLite file; every statement runs on one dedicated thread.
pub struct SqliteStore {
    /// `None` only while dropping, so the worker sees the channel close.
    jobs: Option<mpsc::Sender<Job>>,
    /// Rounds waiting to be committed; each queued round also sends a job that drains it.
    commits: CommitQueue,
    worker: Option<JoinHandle<()>>,
    /// What "now" is for TTLs (replaced in tests).
    clock: Arc<dyn Clock>,
    /// The secrets: their key file and the key once loaded (see sqlite_secrets.rs).
    secrets: secrets_impl::SecretKeyFile,
    /// The database file, for the size `stats` reports.
    path: std::path::PathBuf,
    /// Cache hits and misses since this store was opened (for `stats`).
    cache_counters: crate::maintenance::CacheCounters,
}

impl SqliteStore {
    /// Open or create the store file at `path` (and its directories) and migrate its schema.
    pub fn open(path: &Path) -> StoreResult<SqliteStore> {
        Self::open_with_clock(path, Arc::new(SystemClock))
    }

    /// `open`, with the clock TTLs are measured by.
    pub fn open_with_clock(path: &Path, clock: Arc<dyn Clock>) -> StoreResult<SqliteStore> {
        let op = format!("open {}", path.display());
        let fail = |e: &dyn Display| StoreError::Backend(format!("{op}: {e}"));
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(|e| fail(&e))?;
        }
        create_private(path).map_err(|e| fail(&e))?;
        let mut conn = Connection::open(path).map_err(|e| fail(&e))?;
        configure(&conn).map_err(|e| fail(&e))?;
        migrate(&mut conn).map_err(|e| e.into_store_error(&op))?;

        let (jobs, queue) = mpsc::channel::<Job>();
        let worker = std::thread::Builder::new()
            .name("dispatch-store-sqlite".to_string())
            .spawn(move || {
                // Ends when every sender is gone, i.e. when the store is dropped. A job that
                // panics fails alone (its caller sees its reply channel close); the thread and
                // the connection stay up for the next job.
                for job in queue {
                    let conn = &mut conn;
                    let _ =
                        std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || job(conn)));
                }
            })
            .map_err(|e| fail(&e))?;
        Ok(SqliteStore {
            jobs: Some(jobs),
            commits: Default::default(),
            worker: Some(worker),
            clock,
            secrets: secrets_impl::SecretKeyFile::beside(path),
            path: path.to_path_buf(),
            cache_counters: Default::default(),
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Run `job` on the connection thread and wait for its answer.
    async fn run<T, F>(&self, op: String, job: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> Result<T, JobError> + Send + 'static,
    {
        let stopped = || StoreError::Backend(format!("{op}: the SQLite thread has stopped"));
        let (reply, answer) = oneshot::channel();
        let job: Job = Box::new(move |conn| {
            // The caller may have stopped waiting (its future was dropped); nothing to tell.
            let _ = reply.send(job(conn));
        });
        let jobs = self.jobs.as_ref().ok_or_else(stopped)?;
        jobs.send(job).map_err(|_| stopped())?;
        match answer.await {
            Ok(result) => result.map_err(|e| e.into_store_error(&op)),
            Err(_) => Err(stopped()),
        }
    }
}

impl Drop for SqliteStore {
    fn drop(&mut self) {
        // Close the channel, then wait for queued jobs to finish, so the file is closed (and
        // the WAL checkpointed) by the time the drop returns and a reopen sees everything.
        self.jobs = None;
        if let Some(worker) = self.worker.take() {
            let _ = worker.join();
        }
    }
}

#[async_trait]
impl SessionStore for SqliteStore {
    async fn load(&self, session: &str, run: &str) -> StoreResult<(SessionSnapshot, RunSnapshot)> {
        let op = format!("load {session}/{run}");
        let (session, run) = (session.to_string(), run.to_string());
        self.run(op, move |conn| {
            // One read transaction, so the three reads see the same commit.
            let tx = conn.transaction()?;
            let loaded = load(&tx, &session, &run, None)?;
            tx.commit()?;
            Ok(loaded)
        })
        .await
    }

    async fn load_keys(
        &self,
        session: &str,
        run: &str,
        keys: &[String],
    ) -> StoreResult<(SessionSnapshot, RunSnapshot)> {
        let op = format!("load {session}/{run}");
        let (session, run, keys) = (session.to_string(), run.to_string(), keys.to_vec());
        self.run(op, move |conn| {
            let tx = conn.transaction()?;
            let loaded = load(&tx, &session, &run, Some(&keys))?;
            tx.commit()?;
            Ok(loaded)
        })
        .await
    }

    async fn commit_round(&self, record: RoundRecord) -> StoreResult<()> {
        let op = format!("commit round {}/{}", record.session, record.run);
        let stopped = || StoreError::Backend(format!("{op}: the SQLite thread has stopped"));
        let jobs = self.jobs.as_ref().ok_or_else(stopped)?;
        let (reply, answer) = oneshot::channel();
        lock(&self.commits).push_back(QueuedRound { record, reply });
        // One drain job per queued round, sent after it is queued, so every round is drained
        // by its own job or an earlier one; a job that finds the queue empty does nothing.
        let (commits, clock) = (self.commits.clone(), self.clock.clone());
        let drain: Job = Box::new(move |conn| commit_queued(conn, &commits, clock.as_ref()));
        jobs.send(drain).map_err(|_| stopped())?;
        match answer.await {
            Ok(result) => result.map_err(|e| e.into_store_error(&op)),
            Err(_) => Err(stopped()),
        }
    }

    async fn transcript(
        &self,
        session: &str,
        run: Option<&str>,
    ) -> StoreResult<Vec<TranscriptEntry>> {
        let op = match run {
            Some(run) => format!("read transcript of {session}/{run}"),
            None => format!("read transcript of {session}"),
        };
        let (session, run) = (session.to_string(), run.map(str::to_string));
        self.run(op, move |conn| {
            let sql = match run {
                Some(_) => {
                    "SELECT run, round, in_tools, message FROM transcript
                     WHERE session = ?1 AND run = ?2 ORDER BY seq"
                }
                None => {
                    "SELECT run, round, in_tools, message FROM transcript
                     WHERE session = ?1 ORDER BY seq"
                }
            };
            let mut stmt = conn.prepare_cached(sql)?;
            let mut rows = match &run {
                Some(run) => stmt.query(params![session, run])?,
                None => stmt.query(params![session])?,
            };
            let mut entries = Vec::new();
            while let Some(row) = rows.next()? {
                entries.push(TranscriptEntry {
                    run: row.get(0)?,
                    round: to_u64(row.get(1)?, "transcript round")?,
                    in_tools: row.get(2)?,
                    message: from_json(&row.get::<_, String>(3)?, "transcript message")?,
                });
            }
            Ok(entries)
        })
        .await
    }

    async fn events(&self, session: &str, after: u64) -> StoreResult<Vec<(u64, String)>> {
        let op = format!("read events of {session}");
        let session = session.to_string();
        // Sequence numbers are rowids and never exceed i64::MAX, so clamping loses nothing.
        let after = i64::try_from(after).unwrap_or(i64::MAX);
        self.run(op, move |conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT seq, event FROM events WHERE session = ?1 AND seq > ?2 ORDER BY seq",
            )?;
            let mut rows = stmt.query(params![session, after])?;
            let mut events = Vec::new();
            while let Some(row) = rows.next()? {
                let seq = to_u64(row.get(0)?, "event sequence")?;
                events.push((seq, row.get::<_, String>(1)?));
            }
            Ok(events)
        })
        .await
    }

    async fn journal_begin(&self, entry: JournalEntry) -> StoreResult<()> {
        let op = format!("journal call {} of {}", entry.tool_call_id, entry.session);
        self.run(op, move |conn| {
            conn.prepare_cached(
                "INSERT OR REPLACE INTO journal (id, session, started_ms, record)
                 VALUES (?1, ?2, ?3, ?4)",
            )?
            .execute(params![
                entry.id,
                entry.session,
                to_i64(entry.started_ms, "journal time")?,
                to_json(&entry)?,
            ])?;
            Ok(())
        })
        .await
    }

    async fn journal_open(&self, session: &str) -> StoreResult<Vec<JournalEntry>> {
        let op = format!("read the call journal of {session}");
        let session = session.to_string();
        self.run(op, move |conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT record FROM journal WHERE session = ?1 ORDER BY started_ms, rowid",
            )?;
            let mut rows = stmt.query(params![session])?;
            let mut entries = Vec::new();
            while let Some(row) = rows.next()? {
                entries.push(from_json(&row.get::<_, String>(0)?, "journal entry")?);
            }
            Ok(entries)
        })
        .await
    }

    async fn pending(&self, session: &str) -> StoreResult<Vec<PendingTask>> {
        let op = format!("read pending tasks of {session}");
        let session = session.to_string();
        self.run(op, move |conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT record FROM pending WHERE session = ?1 ORDER BY created_ms, rowid",
            )?;
            let mut rows = stmt.query(params![session])?;
            let mut tasks = Vec::new();
            while let Some(row) = rows.next()? {
                tasks.push(from_json(&row.get::<_, String>(0)?, "pending task")?);
            }
            Ok(tasks)
        })
        .await
    }
}

/// Why a job on the connection thread failed; the caller adds the operation's name.
#[derive(Debug)]
enum JobError {
    Sql(rusqlite::Error),
    /// Stored data we cannot read back.
    Corrupt(String),
    /// Data we were asked to write but cannot.
    Rejected(String),
    /// The shared transaction of a group commit failed, so this round was not committed.
    Batch(String),
    /// The run's last committed round is not the one before this record's.
    Conflict {
        session: String,
        run: String,
        round: u64,
    },
}

impl From<rusqlite::Error> for JobError {
    fn from(e: rusqlite::Error) -> Self {
        JobError::Sql(e)
    }
}

impl JobError {
    /// What went wrong, without the operation's name.
    fn describe(self) -> String {
        match self {
            JobError::Sql(e) => e.to_string(),
            JobError::Corrupt(why) => format!("stored data is corrupt: {why}"),
            JobError::Rejected(why) | JobError::Batch(why) => why,
            conflict @ JobError::Conflict { .. } => conflict.into_store_error("").to_string(),
        }
    }

    fn into_store_error(self, op: &str) -> StoreError {
        match self {
            JobError::Sql(e) => StoreError::Backend(format!("{op}: {e}")),
            JobError::Rejected(why) | JobError::Batch(why) => {
                StoreError::Backend(format!("{op}: {why}"))
            }
            JobError::Corrupt(why) => StoreError::Corrupt(format!("{op}: {why}")),
            JobError::Conflict {
                session,
                run,
                round,
            } => StoreError::Conflict {
                session,
                run,
                round,
            },
        }
    }
}

/// Create a new store file readable only by its owner: sessions hold prompts and tool output.
/// SQLite gives the `-wal` and `-shm` files the same mode as the database file.
#[cfg(unix)]
fn create_private(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
    {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(not(unix))]
fn create_private(_path: &Path) -> std::io::Result<()> {
    Ok(())
}

fn configure(conn: &Connection) -> rusqlite::Result<()> {
    conn.busy_timeout(Duration::from_millis(5000))?;
    // WAL lets readers (another process, the CLI) run while we write; NORMAL is durable in WAL
    // mode except for the last commits before a power loss.
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    // Each round of a group commit runs in a savepoint, whose undo journal would otherwise
    // spill to a temporary file; it is only needed while the transaction is open.
    conn.pragma_update(None, "temp_store", "MEMORY")?;
    // A round alone uses a dozen cached statements; the default cache (16) would keep
    // evicting and re-preparing them once reads and the other tables' statements join in.
    conn.set_prepared_statement_cache_capacity(128);
    Ok(())
}

/// Bring the schema up to `MIGRATIONS.len()`, all in one transaction.
fn migrate(conn: &mut Connection) -> Result<(), JobError> {
    // IMMEDIATE, so two processes opening a new file at once do not both migrate it.
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let version: i64 = tx.query_row("PRAGMA user_version", [], |row| row.get(0))?;
    let known = MIGRATIONS.len();
    let applied = usize::try_from(version)
        .map_err(|_| JobError::Corrupt(format!("negative schema version {version}")))?;
    let Some(missing) = MIGRATIONS.get(applied..) else {
        return Err(JobError::Rejected(format!(
            "the store has schema version {applied} but this tooldispatch knows only up to \
             {known}; upgrade tooldispatch"
        )));
    };
    if missing.is_empty() {
        return Ok(());
    }
    for migration in missing {
        tx.execute_batch(migration)?;
    }
    // A handful of migrations always fits; the conversion only satisfies the type.
    let latest = i64::try_from(known).map_err(|e| JobError::Rejected(e.to_string()))?;
    tx.pragma_update(None, "user_version", latest)?;
    tx.commit()?;
    Ok(())
}

/// The session, the run and its valid dedupe entries: all of them (in insertion order) when
/// `keys` is `None`, else only those under `keys`.
fn load(
    tx: &Transaction,
    session: &str,
    run: &str,
    keys: Option<&[String]>,
) -> Result<(SessionSnapshot, RunSnapshot), JobError> {
    let mut snapshot = SessionSnapshot::default();
    let stored: Option<(String, String)> = tx
        .prepare_cached("SELECT marked, todos FROM sessions WHERE id = ?1")?
        .query_row(params![session], |row| Ok((row.get(0)?, row.get(1)?)))
        .optional()?;
    if let Some((marked, todos)) = stored {
        snapshot.marked = from_json(&marked, "marked tools")?;
        snapshot.todos = from_json(&todos, "todos")?;
    }

    let mut run_snapshot = RunSnapshot::default();
    let stored: Option<(i64, i64, bool, i64)> = tx
        .prepare_cached(
            "SELECT rounds, write_epoch, turn_allow_all, wiped_at FROM runs
             WHERE session = ?1 AND run = ?2",
        )?
        .query_row(params![session, run], |row| {
            Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?))
        })
        .optional()?;
    let Some((rounds, write_epoch, turn_allow_all, wiped_at)) = stored else {
        // No run, no entries.
        return Ok((snapshot, run_snapshot));
    };
    run_snapshot.rounds = to_u64(rounds, "rounds")?;
    run_snapshot.write_epoch = to_u64(write_epoch, "write epoch")?;
    run_snapshot.turn_allow_all = turn_allow_all;
    let wiped_at = to_u64(wiped_at, "wipe epoch")?;

    let mut touched = tx.prepare_cached(
        "SELECT epoch FROM dedupe_touched WHERE session = ?1 AND run = ?2 AND path = ?3",
    )?;
    // A lookup error is kept and reported after the check, which cannot return one.
    let mut failed: Option<rusqlite::Error> = None;
    let mut keep = |entry: DedupeEntry, stored_at: i64| -> Result<Option<DedupeEntry>, JobError> {
        let stored_at = to_u64(stored_at, "dedupe epoch")?;
        let valid = crate::path_entry_valid(&entry.validity, stored_at, wiped_at, |path| {
            match touched
                .query_row(params![session, run, path], |row| row.get::<_, i64>(0))
                .optional()
            {
                Ok(epoch) => epoch.map_or(0, |e| u64::try_from(e).unwrap_or(u64::MAX)),
                Err(e) => {
                    failed.get_or_insert(e);
                    u64::MAX
                }
            }
        });
        if let Some(e) = failed.take() {
            return Err(e.into());
        }
        Ok(valid.then_some(entry))
    };
    let decode = |row: &rusqlite::Row<'_>| -> Result<(DedupeEntry, i64), JobError> {
        Ok((
            DedupeEntry {
                key: row.get(0)?,
                tool: row.get(1)?,
                result: row.get(2)?,
                images: from_json(&row.get::<_, String>(3)?, "dedupe images")?,
                validity: from_json(&row.get::<_, String>(4)?, "dedupe validity")?,
                is_error: row.get(5)?,
            },
            row.get(6)?,
        ))
    };
    match keys {
        None => {
            let mut stmt = tx.prepare_cached(
                "SELECT key, tool, result, images, validity, is_error, stored_at FROM dedupe
                 WHERE session = ?1 AND run = ?2 ORDER BY rowid",
            )?;
            let mut rows = stmt.query(params![session, run])?;
            while let Some(row) = rows.next()? {
                let (entry, stored_at) = decode(row)?;
                run_snapshot.dedupe.extend(keep(entry, stored_at)?);
            }
        }
        Some(keys) => {
            let mut stmt = tx.prepare_cached(
                "SELECT key, tool, result, images, validity, is_error, stored_at FROM dedupe
                 WHERE session = ?1 AND run = ?2 AND key = ?3",
            )?;
            for key in keys {
                let mut rows = stmt.query(params![session, run, key])?;
                if let Some(row) = rows.next()? {
                    let (entry, stored_at) = decode(row)?;
                    run_snapshot.dedupe.extend(keep(entry, stored_at)?);
                }
            }
        }
    }
    Ok((snapshot, run_snapshot))
}

/// The commit queue, even if a thread panicked while holding it (a push or a drain of a
/// `VecDeque` leaves it consistent).
fn lock(commits: &CommitQueue) -> std::sync::MutexGuard<'_, VecDeque<QueuedRound>> {
    commits.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Commit up to `MAX_BATCH` queued rounds in one transaction and answer each caller.
fn commit_queued(conn: &mut Connection, commits: &CommitQueue, clock: &dyn Clock) {
    let batch: Vec<QueuedRound> = {
        let mut queue = lock(commits);
        let take = queue.len().min(MAX_BATCH);
        queue.drain(..take).collect()
    };
    if batch.is_empty() {
        return;
    }
    let records: Vec<&RoundRecord> = batch.iter().map(|queued| &queued.record).collect();
    let results = match commit_batch(conn, &records, clock) {
        Ok(results) => results,
        Err(e) => {
            // Nothing of the batch was committed; every caller gets the same reason.
            let why = match e {
                JobError::Batch(why) => why,
                other => format!(
                    "{}; the round was not committed, retry it",
                    other.describe()
                ),
            };
            batch
                .iter()
                .map(|_| Err(JobError::Batch(why.clone())))
                .collect()
        }
    };
    for (queued, result) in batch.into_iter().zip(results) {
        // The caller may have stopped waiting (its future was dropped); nothing to tell.
        let _ = queued.reply.send(result);
    }
}

/// Apply `records` in order in one IMMEDIATE transaction, each in its own savepoint, and
/// commit. The outer error means nothing was committed; otherwise one result per record.
fn commit_batch(
    conn: &mut Connection,
    records: &[&RoundRecord],
    clock: &dyn Clock,
) -> Result<Vec<Result<(), JobError>>, JobError> {
    // IMMEDIATE takes the write lock up front: a deferred transaction that later needs to
    // write can fail with SQLITE_BUSY without waiting for busy_timeout.
    let mut tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let mut results = Vec::with_capacity(records.len());
    for record in records {
        match commit_one(&mut tx, record, clamp_ms(clock.now_ms())) {
            // Some errors (disk full, I/O) make SQLite roll back the whole transaction; going
            // on would write the remaining rounds outside of it.
            Err(e) if tx.is_autocommit() => {
                return Err(JobError::Batch(format!(
                    "{} (in round {} of {}/{}, committed together with this one); SQLite \
                     rolled back the shared transaction, so the round was not committed, \
                     retry it",
                    e.describe(),
                    record.round,
                    record.session,
                    record.run
                )));
            }
            result => results.push(result),
        }
    }
    tx.commit()?;
    Ok(results)
}

/// One round inside the shared transaction, in a savepoint that is rolled back if it fails.
fn commit_one(tx: &mut Transaction, record: &RoundRecord, now_ms: i64) -> Result<(), JobError> {
    let sp = tx.savepoint()?;
    // The run moves from round N-1 to N, or nothing is written: two processes dispatching
    // rounds of one run must not both build on round N-1. The write lock taken by the
    // transaction makes this read and the writes below one step.
    let last: i64 = sp
        .prepare_cached("SELECT rounds FROM runs WHERE session = ?1 AND run = ?2")?
        .query_row(params![record.session, record.run], |row| row.get(0))
        .optional()?
        .unwrap_or(0);
    if to_u64(last, "rounds")? + 1 != record.round {
        return Err(JobError::Conflict {
            session: record.session.clone(),
            run: record.run.clone(),
            round: record.round,
        });
    }
    // On an error `sp` is dropped, which rolls the savepoint back.
    apply_round(&sp, record, now_ms)?;
    sp.commit()?;
    Ok(())
}

/// Write everything `record` changed on `tx` (inside a transaction); the caller commits.
fn apply_round(tx: &Connection, record: &RoundRecord, now_ms: i64) -> Result<(), JobError> {
    let session = record.session.as_str();
    let run = record.run.as_str();

    // The marked set only grows, so merge with what is stored rather than overwrite it.
    let stored: Option<String> = tx
        .prepare_cached("SELECT marked FROM sessions WHERE id = ?1")?
        .query_row(params![session], |row| row.get(0))
        .optional()?;
    let mut marked: std::collections::BTreeSet<String> = match stored {
        Some(text) => from_json(&text, "marked tools")?,
        None => Default::default(),
    };
    marked.extend(record.marked.iter().cloned());
    let todos = record.todos.as_ref().map(to_json).transpose()?;
    tx.prepare_cached(
        "INSERT INTO sessions (id, marked, todos, created_ms, updated_ms)
         VALUES (?1, ?2, COALESCE(?3, '[]'), ?4, ?4)
         ON CONFLICT (id) DO UPDATE SET
             marked = excluded.marked,
             todos = COALESCE(?3, todos),
             updated_ms = excluded.updated_ms",
    )?
    .execute(params![session, to_json(&marked)?, todos, now_ms])?;

    tx.prepare_cached(
        "INSERT INTO runs (session, run, rounds, write_epoch, turn_allow_all, wiped_at)
         VALUES (?1, ?2, ?3, ?4, ?5, CASE WHEN ?6 THEN ?4 ELSE 0 END)
         ON CONFLICT (session, run) DO UPDATE SET
             rounds = excluded.rounds,
             write_epoch = excluded.write_epoch,
             turn_allow_all = excluded.turn_allow_all,
             wiped_at = CASE WHEN ?6 THEN excluded.write_epoch ELSE wiped_at END",
    )?
    .execute(params![
        session,
        run,
        to_i64(record.round, "round")?,
        to_i64(record.write_epoch, "write epoch")?,
        record.turn_allow_all,
        record.touched_all,
    ])?;
    let epoch = to_i64(record.write_epoch, "write epoch")?;
    let mut touch = tx.prepare_cached(
        "INSERT INTO dedupe_touched (session, run, path, epoch) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT (session, run, path) DO UPDATE SET epoch = excluded.epoch",
    )?;
    for path in &record.touched_paths {
        touch.execute(params![session, run, path, epoch])?;
    }

    // Drops after puts: when a round both stores and invalidates a key, serving a stale result
    // is worse than running the call again. The memory store does the same.
    let mut put = tx.prepare_cached(
        "INSERT INTO dedupe (session, run, key, tool, result, images, validity, is_error, stored_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
         ON CONFLICT (session, run, key) DO UPDATE SET
             tool = excluded.tool,
             result = excluded.result,
             images = excluded.images,
             validity = excluded.validity,
             is_error = excluded.is_error,
             stored_at = excluded.stored_at",
    )?;
    for entry in &record.dedupe_put {
        put.execute(params![
            session,
            run,
            entry.key,
            entry.tool,
            entry.result,
            to_json(&entry.images)?,
            to_json(&entry.validity)?,
            entry.is_error,
            epoch,
        ])?;
    }
    let mut remove =
        tx.prepare_cached("DELETE FROM dedupe WHERE session = ?1 AND run = ?2 AND key = ?3")?;
    for key in &record.dedupe_drop {
        remove.execute(params![session, run, key])?;
    }

    let mut append = tx.prepare_cached(
        "INSERT INTO transcript (session, run, round, in_tools, message, at_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )?;
    let mut index =
        tx.prepare_cached("INSERT INTO transcript_fts (rowid, body) VALUES (?1, ?2)")?;
    for entry in &record.transcript {
        append.execute(params![
            session,
            entry.run,
            to_i64(entry.round, "transcript round")?,
            entry.in_tools,
            to_json(&entry.message)?,
            now_ms,
        ])?;
        let text = crate::chat::searchable_text(&entry.message);
        if !text.is_empty() {
            index.execute(params![tx.last_insert_rowid(), text])?;
        }
    }

    let mut event = tx.prepare_cached("INSERT INTO events (session, event) VALUES (?1, ?2)")?;
    for item in &record.events {
        event.execute(params![session, item.to_json()])?;
    }

    if let Some(task) = &record.pending {
        tx.prepare_cached(
            "INSERT INTO pending (task_hash, session, record, created_ms) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT (task_hash) DO UPDATE SET
                 session = excluded.session,
                 record = excluded.record,
                 created_ms = excluded.created_ms",
        )?
        .execute(params![
            task.task_hash,
            session,
            to_json(task)?,
            to_i64(task.created_at_ms, "pending task creation time")?,
        ])?;
    }

    let mut answered =
        tx.prepare_cached("DELETE FROM pending WHERE session = ?1 AND task_hash = ?2")?;
    for hash in &record.answered {
        answered.execute(params![session, hash])?;
    }

    let mut close = tx.prepare_cached("DELETE FROM journal WHERE session = ?1 AND id = ?2")?;
    for id in &record.journal_done {
        close.execute(params![session, id])?;
    }
    Ok(())
}

/// A time in ms as SQLite's integer; past i64 (never, in practice) it saturates.
fn clamp_ms(ms: u64) -> i64 {
    i64::try_from(ms).unwrap_or(i64::MAX)
}

fn to_json<T: Serialize + ?Sized>(value: &T) -> Result<String, JobError> {
    serde_json::to_string(value).map_err(|e| JobError::Rejected(format!("cannot encode JSON: {e}")))
}

fn from_json<T: DeserializeOwned>(text: &str, what: &str) -> Result<T, JobError> {
    serde_json::from_str(text).map_err(|e| JobError::Corrupt(format!("{what}: {e}")))
}

/// SQLite integers are signed 64-bit; rusqlite (without `fallible_uint`) has no u64 binding.
fn to_i64(value: u64, what: &str) -> Result<i64, JobError> {
    i64::try_from(value)
        .map_err(|_| JobError::Rejected(format!("{what} {value} does not fit a SQLite integer")))
}

fn to_u64(value: i64, what: &str) -> Result<u64, JobError> {
    u64::try_from(value).map_err(|_| JobError::Corrupt(format!("negative {what} {value}")))
}
