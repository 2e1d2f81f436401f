//! The embedded default store: one SQLite file in WAL mode.
//!
//! rusqlite is blocking and a `Connection` cannot be shared between threads, so dedicated
//! threads own the connections and run boxed jobs sent over channels, answering through a
//! oneshot: one writer, which commits and nothing else that can wait, and `READERS` readers
//! (WAL lets them read while it writes), which serve loads, transcripts, events and searches
//! and run the WAL checkpoints. One writer also means no `SQLITE_BUSY` between our own
//! commits; other processes sharing the file are covered by `busy_timeout`.
//!
//! Rounds are group-committed: `commit_round` encodes its record on the caller's thread,
//! queues it and sends a job that drains the queue, so the records that piled up while the
//! writer was busy share one transaction (each in its own savepoint, so one that conflicts or
//! fails is rolled back alone). Every caller hears its own result only after the shared
//! transaction has committed, and a reader that starts after that sees it.

use std::collections::VecDeque;
use std::fmt::Display;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, mpsc};
use std::thread::JoinHandle;

use crate::clock::{Clock, SystemClock};
use crate::{Committed, StoreError, StoreResult};
use rusqlite::{Connection, OpenFlags, Transaction, TransactionBehavior};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::oneshot;

mod agents;
mod cache;
mod chat;
mod chatbots;
mod errors;
mod files;
mod maintenance;
mod pack;
mod schema;
mod secrets;
mod session;
#[cfg(test)]
mod tests;

/// The most rounds one shared transaction commits; the rest wait for the next one.
const MAX_BATCH: usize = 64;

/// Reader threads: reads never wait behind a commit, and two cores keep both busy.
const READERS: usize = 2;

/// Transcript rows the full-text index may lag behind before the writer catches it up, after
/// a commit (a search catches up first, whatever the lag). FTS5 writes a segment per
/// transaction, so indexing many rows at once writes far less than a row per round did.
const FTS_LAG: i64 = 128;

/// The WAL size (bytes) above which a reader runs a checkpoint after a commit.
const CHECKPOINT_AT: u64 = 4 * 1024 * 1024;

/// A round waiting for the writer thread, and where its caller waits for the result.
struct QueuedRound {
    round: session::EncodedRound,
    reply: oneshot::Sender<Result<Committed, JobError>>,
}

/// Rounds queued by `commit_round`, oldest first.
type CommitQueue = Arc<Mutex<VecDeque<QueuedRound>>>;

type Job = Box<dyn FnOnce(&mut Connection) + Send>;

/// A [`SessionStore`](crate::SessionStore) in one SQLite file.
pub struct SqliteStore {
    /// The writer's jobs; `None` only while dropping, so the thread sees the channel close.
    writer: Option<mpsc::Sender<Job>>,
    /// The readers' jobs, taken by whichever reader is free.
    readers: Option<mpsc::Sender<Job>>,
    /// The writer thread last: it must outlive the readers (see `Drop`).
    threads: Vec<JoinHandle<()>>,
    /// Rounds waiting to be committed; each queued round also sends a job that drains it.
    commits: CommitQueue,
    /// A checkpoint job is queued or running on a reader.
    checkpointing: Arc<AtomicBool>,
    /// What "now" is for TTLs (replaced in tests).
    clock: Arc<dyn Clock>,
    /// The secrets: their key file and the key once loaded (see secrets.rs).
    secrets: secrets::SecretKeyFile,
    /// The database file, for the size `stats` reports.
    path: PathBuf,
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
        schema::configure(&conn).map_err(|e| fail(&e))?;
        schema::migrate(&mut conn).map_err(|e| e.into_store_error(&op))?;

        let mut threads = Vec::with_capacity(READERS + 1);
        let (readers, shared) = mpsc::channel::<Job>();
        let shared = Arc::new(Mutex::new(shared));
        for i in 0..READERS {
            let mut reader = Connection::open_with_flags(
                path,
                OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
            )
            .map_err(|e| fail(&e))?;
            schema::configure_reader(&reader).map_err(|e| fail(&e))?;
            let shared = shared.clone();
            let thread = std::thread::Builder::new()
                .name(format!("dispatch-store-sqlite-read-{i}"))
                .spawn(move || {
                    loop {
                        // The lock is held only to take the next job, never while running it.
                        let next = shared.lock().unwrap_or_else(PoisonError::into_inner).recv();
                        let Ok(job) = next else { break };
                        run_job(job, &mut reader);
                    }
                })
                .map_err(|e| fail(&e))?;
            threads.push(thread);
        }
        let (writer, queue) = mpsc::channel::<Job>();
        let thread = std::thread::Builder::new()
            .name("dispatch-store-sqlite".to_string())
            .spawn(move || {
                // Ends when every sender is gone, i.e. when the store is dropped.
                for job in queue {
                    run_job(job, &mut conn);
                }
            })
            .map_err(|e| fail(&e))?;
        threads.push(thread);
        Ok(SqliteStore {
            writer: Some(writer),
            readers: Some(readers),
            threads,
            commits: Default::default(),
            checkpointing: Default::default(),
            clock,
            secrets: secrets::SecretKeyFile::beside(path),
            path: path.to_path_buf(),
            cache_counters: Default::default(),
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Run `job` on the writer thread and wait for its answer.
    async fn run<T, F>(&self, op: String, job: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> Result<T, JobError> + Send + 'static,
    {
        Self::send(self.writer.as_ref(), op, job).await
    }

    /// Run `job`, which only reads, on a reader thread and wait for its answer.
    async fn read<T, F>(&self, op: String, job: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> Result<T, JobError> + Send + 'static,
    {
        Self::send(self.readers.as_ref(), op, job).await
    }

    async fn send<T, F>(jobs: Option<&mpsc::Sender<Job>>, op: String, job: F) -> StoreResult<T>
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
        jobs.ok_or_else(stopped)?.send(job).map_err(|_| stopped())?;
        match answer.await {
            Ok(result) => result.map_err(|e| e.into_store_error(&op)),
            Err(_) => Err(stopped()),
        }
    }

    /// The job that commits the queued rounds, then does what may follow a commit.
    fn drain_job(&self) -> Job {
        let commits = self.commits.clone();
        let after = AfterCommit {
            readers: self.readers.clone(),
            checkpointing: self.checkpointing.clone(),
            wal: wal_path(&self.path),
        };
        Box::new(move |conn| {
            if commit_queued(conn, &commits) {
                after.run(conn);
            }
        })
    }
}

/// A job that panics fails alone (its caller sees its reply channel close); the thread and
/// the connection stay up for the next job.
fn run_job(job: Job, conn: &mut Connection) {
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || job(conn)));
}

fn wal_path(db: &Path) -> PathBuf {
    let mut wal = db.as_os_str().to_owned();
    wal.push("-wal");
    PathBuf::from(wal)
}

/// Upkeep after a commit, off the commit path: the full-text index catches up when it lags,
/// and a reader checkpoints the WAL when it has grown.
struct AfterCommit {
    readers: Option<mpsc::Sender<Job>>,
    checkpointing: Arc<AtomicBool>,
    wal: PathBuf,
}

impl AfterCommit {
    fn run(&self, conn: &mut Connection) {
        // Failures here lose nothing: the index catches up next time (or before a search),
        // and the WAL is checkpointed next time (or when the last connection closes).
        if session::unindexed_rows(conn).is_ok_and(|lag| lag >= FTS_LAG) {
            let _ = session::index_transcript(conn);
        }
        let grown = std::fs::metadata(&self.wal).is_ok_and(|m| m.len() >= CHECKPOINT_AT);
        if grown && !self.checkpointing.swap(true, Ordering::AcqRel) {
            let done = self.checkpointing.clone();
            let job: Job = Box::new(move |reader| {
                // PASSIVE: copies what it can without waiting for, or blocking, anyone.
                let _ = reader.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()));
                done.store(false, Ordering::Release);
            });
            let sent = self.readers.as_ref().is_some_and(|r| r.send(job).is_ok());
            if !sent {
                self.checkpointing.store(false, Ordering::Release);
            }
        }
    }
}

impl Drop for SqliteStore {
    fn drop(&mut self) {
        // Close the channels, then wait for the queued jobs to finish. A queued commit may
        // still hand a reader a checkpoint, so the readers end once the writer's jobs are
        // done; whichever connection closes last checkpoints the WAL into the file, so a
        // reopen sees everything.
        self.readers = None;
        self.writer = None;
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

/// The commit queue, even if a thread panicked while holding it (a push or a drain of a
/// `VecDeque` leaves it consistent).
fn lock(commits: &CommitQueue) -> std::sync::MutexGuard<'_, VecDeque<QueuedRound>> {
    commits.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Commit up to `MAX_BATCH` queued rounds in one transaction and answer each caller; whether
/// there were any.
fn commit_queued(conn: &mut Connection, commits: &CommitQueue) -> bool {
    let batch: Vec<QueuedRound> = {
        let mut queue = lock(commits);
        let take = queue.len().min(MAX_BATCH);
        queue.drain(..take).collect()
    };
    if batch.is_empty() {
        return false;
    }
    let rounds: Vec<&session::EncodedRound> = batch.iter().map(|queued| &queued.round).collect();
    let results = match commit_batch(conn, &rounds) {
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
    true
}

/// Apply `rounds` in order in one IMMEDIATE transaction, each in its own savepoint, and
/// commit. The outer error means nothing was committed; otherwise one result per round.
fn commit_batch(
    conn: &mut Connection,
    rounds: &[&session::EncodedRound],
) -> Result<Vec<Result<Committed, JobError>>, JobError> {
    // IMMEDIATE takes the write lock up front: a deferred transaction that later needs to
    // write can fail with SQLITE_BUSY without waiting for busy_timeout.
    let mut tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let mut results = Vec::with_capacity(rounds.len());
    for round in rounds {
        match commit_one(&mut tx, round) {
            // Some errors (disk full, I/O) make SQLite roll back the whole transaction; going
            // on would write the remaining rounds outside of it.
            Err(e) if tx.is_autocommit() => {
                return Err(JobError::Batch(format!(
                    "{} (in round {} of {}/{}, committed together with this one); SQLite \
                     rolled back the shared transaction, so the round was not committed, \
                     retry it",
                    e.describe(),
                    round.round,
                    round.session,
                    round.run
                )));
            }
            result => results.push(result),
        }
    }
    tx.commit()?;
    Ok(results)
}

/// One round inside the shared transaction, in a savepoint that is rolled back if it fails.
fn commit_one(tx: &mut Transaction, round: &session::EncodedRound) -> Result<Committed, JobError> {
    let sp = tx.savepoint()?;
    // The run moves from round N-1 to N, or nothing is written: two processes dispatching
    // rounds of one run must not both build on round N-1. The write lock taken by the
    // transaction makes this read and the writes below one step.
    let last: i64 = sp
        .prepare_cached("SELECT rounds FROM runs WHERE session = ?1 AND run = ?2")?
        .query_row(rusqlite::params![round.session, round.run], |row| {
            row.get(0)
        })
        .or_else(|e| match e {
            rusqlite::Error::QueryReturnedNoRows => Ok(0),
            e => Err(e),
        })?;
    if last + 1 != round.round {
        return Err(JobError::Conflict {
            session: round.session.clone(),
            run: round.run.clone(),
            round: u64::try_from(round.round).unwrap_or(0),
        });
    }
    // On an error `sp` is dropped, which rolls the savepoint back.
    let committed = session::apply_round(&sp, round)?;
    sp.commit()?;
    Ok(committed)
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
