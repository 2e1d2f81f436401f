//! Sessions, runs, dedupe entries, transcripts, events, pending tasks and the call journal
//! (schema.rs migration 10 has the layout).
//!
//! Reads run on the reader threads. A round's record is encoded and deflated on the caller's
//! thread ([`encode`]), so the writer thread only binds and steps statements: about ten
//! statements per round, whatever its size.

use std::collections::{BTreeSet, HashMap};

use async_trait::async_trait;
use rusqlite::types::{Value as SqlValue, ValueRef};
use rusqlite::{Connection, OptionalExtension, Transaction, params};
use tokio::sync::oneshot;

use super::pack::{self, Blobs, Hash};
use super::{JobError, QueuedRound, SqliteStore, from_json, lock, to_i64, to_json, to_u64};
use crate::{
    Committed, DedupeEntry, JournalEntry, PendingTask, RoundRecord, RunSnapshot, SessionSnapshot,
    SessionStore, StoreError, StoreResult, TranscriptEntry, TranscriptMessage, Validity,
};

/// Message `i` of transcript row `id` is number `id * MESSAGES_PER_ROW + i` (ChatHit::seq,
/// the full-text index's rowid); a round with more messages takes several rows.
pub(super) const MESSAGES_PER_ROW: usize = 1024;

/// A round, ready for the writer.
pub(super) struct EncodedRound {
    pub(super) session: String,
    pub(super) run: String,
    pub(super) round: i64,
    write_epoch: i64,
    turn_allow_all: bool,
    touched_all: bool,
    marked: Vec<String>,
    todos: Option<String>,
    touched_paths: Vec<String>,
    puts: Vec<EncodedEntry>,
    drops: Vec<SqlValue>,
    transcript: Vec<TranscriptRow>,
    /// The number of events and their packed body.
    events: Option<(i64, Vec<u8>)>,
    blobs: Blobs,
    pending: Option<(String, String, i64)>,
    answered: Vec<String>,
    journal_done: Vec<String>,
    now_ms: i64,
}

struct EncodedEntry {
    key: SqlValue,
    slot: i64,
    tool: String,
    result: SqlValue,
    images: Option<String>,
    validity: Option<String>,
    is_error: bool,
}

struct TranscriptRow {
    run: String,
    round: i64,
    count: i64,
    calls: i64,
    body: Vec<u8>,
}

/// A dedupe key as stored: 64 lowercase hex digits (every key the engine makes) as their 32
/// bytes, anything else as text. SQLite never finds a BLOB equal to a TEXT, so the two
/// kinds cannot collide.
fn key_value(key: &str) -> SqlValue {
    match pack::unhex(key) {
        Some(bytes) => SqlValue::Blob(bytes.to_vec()),
        None => SqlValue::Text(key.to_string()),
    }
}

fn key_text(stored: ValueRef<'_>) -> Result<String, JobError> {
    match stored {
        ValueRef::Blob(bytes) => Ok(pack::hex(bytes)),
        ValueRef::Text(text) => String::from_utf8(text.to_vec())
            .map_err(|_| JobError::Corrupt("a dedupe key is not UTF-8".to_string())),
        _ => Err(JobError::Corrupt(
            "a dedupe key is neither text nor bytes".to_string(),
        )),
    }
}

/// Encode and pack `record` (on the caller's thread).
pub(super) fn encode(record: RoundRecord, now_ms: i64) -> Result<EncodedRound, JobError> {
    let mut blobs = Blobs::default();
    let round = to_i64(record.round, "round")?;

    let mut puts = Vec::with_capacity(record.dedupe_put.len());
    for (i, entry) in record.dedupe_put.iter().enumerate() {
        let result = if entry.result.len() >= pack::BLOB_MIN {
            SqlValue::Blob(blobs.add(&entry.result)?.to_vec())
        } else {
            SqlValue::Text(entry.result.clone())
        };
        puts.push(EncodedEntry {
            key: key_value(&entry.key),
            // After every slot of rows migrated from before (their old rowids), in round
            // order, then call order.
            slot: (1_i64 << 40) + (round << 16) + i64::try_from(i).unwrap_or(0xffff).min(0xffff),
            tool: entry.tool.clone(),
            result,
            images: (!entry.images.is_empty())
                .then(|| to_json(&entry.images))
                .transpose()?,
            validity: (entry.validity != Validity::Always)
                .then(|| to_json(&entry.validity))
                .transpose()?,
            is_error: entry.is_error,
        });
    }

    // A large result is in the round's transcript and events as well: cut out first, it takes
    // the dedupe entry's blob instead of a second one for `[tool] result`.
    let shared: Vec<&str> = record
        .dedupe_put
        .iter()
        .map(|entry| entry.result.as_str())
        .filter(|result| result.len() >= pack::BLOB_MIN)
        .collect();

    let mut transcript = Vec::new();
    let mut rest = record.transcript.as_slice();
    while let Some(first) = rest.first() {
        let same_run = rest
            .iter()
            .take(MESSAGES_PER_ROW)
            .take_while(|e| e.run == first.run && e.round == first.round)
            .count();
        let (row, later) = rest.split_at(same_run);
        rest = later;
        let mut large = shared.clone();
        let mut calls = 0;
        for entry in row {
            match &entry.message {
                TranscriptMessage::Assistant { tool_calls } => {
                    calls += tool_calls.len();
                    large.extend(tool_calls.iter().map(|c| c.arguments.as_str()));
                }
                TranscriptMessage::Tool { content, .. } => large.push(content.as_str()),
                TranscriptMessage::User { images } => {
                    large.extend(images.iter().map(String::as_str));
                }
            }
        }
        let json = to_json(row)?;
        let body = blobs.pack([(json.as_str(), large)])?;
        transcript.push(TranscriptRow {
            run: first.run.clone(),
            round: to_i64(first.round, "transcript round")?,
            count: i64::try_from(row.len()).unwrap_or(i64::MAX),
            calls: i64::try_from(calls).unwrap_or(i64::MAX),
            body,
        });
    }

    let events = if record.events.is_empty() {
        None
    } else {
        // One event's JSON at a time, its large texts lent by the event: a round whose
        // events carry 50 MB of arguments does not hold them twice more here.
        let body = blobs.pack(record.events.iter().map(|event| {
            let mut texts = shared.clone();
            event.for_each_text(&mut |text| {
                if text.len() >= pack::BLOB_MIN {
                    texts.push(text);
                }
            });
            (event.to_json(), texts)
        }))?;
        Some((i64::try_from(record.events.len()).unwrap_or(i64::MAX), body))
    };

    let pending = match &record.pending {
        Some(task) => Some((
            task.task_hash.clone(),
            to_json(task)?,
            to_i64(task.created_at_ms, "pending task creation time")?,
        )),
        None => None,
    };

    Ok(EncodedRound {
        session: record.session,
        run: record.run,
        round,
        write_epoch: to_i64(record.write_epoch, "write epoch")?,
        turn_allow_all: record.turn_allow_all,
        touched_all: record.touched_all,
        marked: record.marked,
        todos: record.todos.as_ref().map(to_json).transpose()?,
        touched_paths: record.touched_paths,
        puts,
        drops: record.dedupe_drop.iter().map(|k| key_value(k)).collect(),
        transcript,
        events,
        blobs,
        pending,
        answered: record.answered,
        journal_done: record.journal_done,
        now_ms,
    })
}

/// Write `round` inside the writer's transaction; the caller commits (or rolls back).
pub(super) fn apply_round(tx: &Connection, r: &EncodedRound) -> Result<Committed, JobError> {
    let (session, run) = (r.session.as_str(), r.run.as_str());

    // The marked set only grows, so merge with what is stored rather than overwrite it; a
    // round that marked nothing leaves the stored set as it is (NULL below).
    let marked = if r.marked.is_empty() {
        None
    } else {
        let stored: Option<String> = tx
            .prepare_cached("SELECT marked FROM sessions WHERE id = ?1")?
            .query_row(params![session], |row| row.get(0))
            .optional()?;
        let mut marked: BTreeSet<String> = match stored {
            Some(text) => from_json(&text, "marked tools")?,
            None => BTreeSet::new(),
        };
        marked.extend(r.marked.iter().cloned());
        Some(to_json(&marked)?)
    };
    tx.prepare_cached(
        "INSERT INTO sessions (id, marked, todos, created_ms, updated_ms)
         VALUES (?1, COALESCE(?2, '[]'), COALESCE(?3, '[]'), ?4, ?4)
         ON CONFLICT (id) DO UPDATE SET
             marked = COALESCE(?2, marked),
             todos = COALESCE(?3, todos),
             updated_ms = excluded.updated_ms",
    )?
    .execute(params![session, marked, r.todos, r.now_ms])?;

    let run_id: i64 = tx
        .prepare_cached(
            "INSERT INTO runs (session, run, rounds, write_epoch, turn_allow_all, wiped_at)
             VALUES (?1, ?2, ?3, ?4, ?5, CASE WHEN ?6 THEN ?4 ELSE 0 END)
             ON CONFLICT (session, run) DO UPDATE SET
                 rounds = excluded.rounds,
                 write_epoch = excluded.write_epoch,
                 turn_allow_all = excluded.turn_allow_all,
                 wiped_at = CASE WHEN ?6 THEN excluded.write_epoch ELSE wiped_at END
             RETURNING id",
        )?
        .query_row(
            params![
                session,
                run,
                r.round,
                r.write_epoch,
                r.turn_allow_all,
                r.touched_all
            ],
            |row| row.get(0),
        )?;
    if !r.touched_paths.is_empty() {
        let mut touch = tx.prepare_cached(
            "INSERT INTO dedupe_touched (run_id, path, epoch) VALUES (?1, ?2, ?3)
             ON CONFLICT (run_id, path) DO UPDATE SET epoch = excluded.epoch",
        )?;
        for path in &r.touched_paths {
            touch.execute(params![run_id, path, r.write_epoch])?;
        }
    }

    if !r.blobs.new.is_empty() {
        let mut blob =
            tx.prepare_cached("INSERT OR IGNORE INTO blobs (hash, body) VALUES (?1, ?2)")?;
        for (hash, body) in &r.blobs.new {
            blob.execute(params![&hash[..], body])?;
        }
    }

    // Drops after puts: when a round both stores and invalidates a key, serving a stale result
    // is worse than running the call again. The memory store does the same.
    if !r.puts.is_empty() {
        let mut put = tx.prepare_cached(
            "INSERT INTO dedupe_entries
                 (run_id, key, slot, tool, result, images, validity, is_error, stored_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
             ON CONFLICT (run_id, key) DO UPDATE SET
                 tool = excluded.tool,
                 result = excluded.result,
                 images = excluded.images,
                 validity = excluded.validity,
                 is_error = excluded.is_error,
                 stored_at = excluded.stored_at",
        )?;
        for e in &r.puts {
            put.execute(params![
                run_id,
                e.key,
                e.slot,
                e.tool,
                e.result,
                e.images,
                e.validity,
                e.is_error,
                r.write_epoch,
            ])?;
        }
    }
    if !r.drops.is_empty() {
        let mut remove =
            tx.prepare_cached("DELETE FROM dedupe_entries WHERE run_id = ?1 AND key = ?2")?;
        for key in &r.drops {
            remove.execute(params![run_id, key])?;
        }
    }

    if !r.transcript.is_empty() {
        let mut append = tx.prepare_cached(
            "INSERT INTO transcript_log (session, run, round, at_ms, count, calls, body)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        )?;
        for row in &r.transcript {
            append.execute(params![
                session, row.run, row.round, r.now_ms, row.count, row.calls, row.body
            ])?;
        }
    }

    let mut committed = Committed::default();
    if let Some((count, body)) = &r.events {
        let last: i64 = tx
            .prepare_cached(
                "UPDATE counters SET event_seq = event_seq + ?1 WHERE id = 1 RETURNING event_seq",
            )?
            .query_row(params![count], |row| row.get(0))?;
        tx.prepare_cached(
            "INSERT INTO event_log (last_seq, session, count, body) VALUES (?1, ?2, ?3, ?4)",
        )?
        .execute(params![last, session, count, body])?;
        let last = to_u64(last, "event sequence")?;
        let count = to_u64(*count, "event count")?;
        committed.events = last + 1 - count..last + 1;
    }

    if let Some((hash, json, created)) = &r.pending {
        tx.prepare_cached(
            "INSERT INTO pending (task_hash, session, record, created_ms) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT (task_hash) DO UPDATE SET
                 session = excluded.session,
                 record = excluded.record,
                 created_ms = excluded.created_ms",
        )?
        .execute(params![hash, session, json, created])?;
    }
    if !r.answered.is_empty() {
        let mut answered =
            tx.prepare_cached("DELETE FROM pending WHERE session = ?1 AND task_hash = ?2")?;
        for hash in &r.answered {
            answered.execute(params![session, hash])?;
        }
    }
    if !r.journal_done.is_empty() {
        let mut close = tx.prepare_cached("DELETE FROM journal WHERE session = ?1 AND id = ?2")?;
        for id in &r.journal_done {
            close.execute(params![session, id])?;
        }
    }
    Ok(committed)
}

/// A blob's deflated text.
pub(super) fn read_blob(conn: &Connection, hash: &Hash) -> Result<Vec<u8>, JobError> {
    conn.prepare_cached("SELECT body FROM blobs WHERE hash = ?1")?
        .query_row(params![&hash[..]], |row| row.get(0))
        .optional()?
        .ok_or_else(|| JobError::Corrupt(format!("blob {} is missing", pack::hex(hash))))
}

/// The messages of a stored transcript row.
pub(super) fn transcript_row(
    conn: &Connection,
    body: ValueRef<'_>,
) -> Result<Vec<TranscriptEntry>, JobError> {
    let docs = pack::unpack(body, |hash| read_blob(conn, hash))?;
    let [doc] = docs.as_slice() else {
        return Err(JobError::Corrupt(
            "a transcript row holds more than one document".to_string(),
        ));
    };
    from_json(doc, "transcript messages")
}

/// Index the transcript rows not yet in the full-text index, in one transaction.
pub(super) fn index_transcript(conn: &mut Connection) -> Result<(), JobError> {
    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    let done: i64 = tx.query_row("SELECT fts_done FROM counters WHERE id = 1", [], |row| {
        row.get(0)
    })?;
    let mut last = done;
    {
        let mut rows =
            tx.prepare_cached("SELECT id, body FROM transcript_log WHERE id > ?1 ORDER BY id")?;
        let mut rows = rows.query(params![done])?;
        let mut insert =
            tx.prepare_cached("INSERT INTO transcript_fts (rowid, body) VALUES (?1, ?2)")?;
        let per_row = i64::try_from(MESSAGES_PER_ROW).unwrap_or(1024);
        while let Some(row) = rows.next()? {
            let id: i64 = row.get(0)?;
            last = id;
            // A row that cannot be read is left out of the index (reading it reports the
            // corruption) rather than stopping every later row from being indexed.
            let Ok(entries) = transcript_row(&tx, row.get_ref(1)?) else {
                continue;
            };
            for (i, entry) in entries.iter().enumerate() {
                let text = crate::chat::searchable_text(&entry.message);
                if !text.is_empty() {
                    insert.execute(params![id * per_row + i64::try_from(i).unwrap_or(0), text])?;
                }
            }
        }
    }
    if last != done {
        tx.execute(
            "UPDATE counters SET fts_done = ?1 WHERE id = 1",
            params![last],
        )?;
    }
    tx.commit()?;
    Ok(())
}

/// How many transcript rows wait for the full-text index.
pub(super) fn unindexed_rows(conn: &Connection) -> Result<i64, JobError> {
    Ok(conn
        .prepare_cached(
            "SELECT COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'transcript_log'), 0)
                    - fts_done FROM counters WHERE id = 1",
        )?
        .query_row([], |row| row.get(0))?)
}

#[async_trait]
impl SessionStore for SqliteStore {
    async fn load(&self, session: &str, run: &str) -> StoreResult<(SessionSnapshot, RunSnapshot)> {
        let op = format!("load {session}/{run}");
        let (session, run) = (session.to_string(), run.to_string());
        self.read(op, move |conn| {
            // One read transaction, so the reads see the same commit.
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
        self.read(op, move |conn| {
            let tx = conn.transaction()?;
            let loaded = load(&tx, &session, &run, Some(&keys))?;
            tx.commit()?;
            Ok(loaded)
        })
        .await
    }

    async fn commit_round(&self, record: RoundRecord) -> StoreResult<Committed> {
        let op = format!("commit round {}/{}", record.session, record.run);
        let now_ms = super::clamp_ms(self.clock.now_ms());
        let round = encode(record, now_ms).map_err(|e| e.into_store_error(&op))?;
        let (reply, answer) = oneshot::channel();
        lock(&self.commits).push_back(QueuedRound { round, reply });
        // One drain job per queued round, sent after it is queued, so every round is drained
        // by its own job or an earlier one; a job that finds the queue empty does nothing.
        let drain = self.drain_job();
        let stopped = || StoreError::Backend(format!("{op}: the SQLite thread has stopped"));
        self.writer
            .as_ref()
            .ok_or_else(stopped)?
            .send(drain)
            .map_err(|_| stopped())?;
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
        self.read(op, move |conn| {
            let tx = conn.transaction()?;
            let mut entries = Vec::new();
            {
                let sql = match run {
                    Some(_) => {
                        "SELECT body FROM transcript_log WHERE session = ?1 AND run = ?2 ORDER BY id"
                    }
                    None => "SELECT body FROM transcript_log WHERE session = ?1 ORDER BY id",
                };
                let mut stmt = tx.prepare_cached(sql)?;
                let mut rows = match &run {
                    Some(run) => stmt.query(params![session, run])?,
                    None => stmt.query(params![session])?,
                };
                while let Some(row) = rows.next()? {
                    entries.extend(transcript_row(&tx, row.get_ref(0)?)?);
                }
            }
            tx.commit()?;
            Ok(entries)
        })
        .await
    }

    async fn events(&self, session: &str, after: u64) -> StoreResult<Vec<(u64, String)>> {
        let op = format!("read events of {session}");
        let session = session.to_string();
        self.read(op, move |conn| {
            let tx = conn.transaction()?;
            let mut events = Vec::new();
            {
                // Sequence numbers never exceed i64::MAX, so clamping loses nothing.
                let after_sql = i64::try_from(after).unwrap_or(i64::MAX);
                let mut stmt = tx.prepare_cached(
                    "SELECT last_seq, count, body FROM event_log
                     WHERE session = ?1 AND last_seq > ?2 ORDER BY last_seq",
                )?;
                let mut rows = stmt.query(params![session, after_sql])?;
                while let Some(row) = rows.next()? {
                    let last = to_u64(row.get(0)?, "event sequence")?;
                    let count = to_u64(row.get(1)?, "event count")?;
                    let docs = pack::unpack(row.get_ref(2)?, |hash| read_blob(&tx, hash))?;
                    if u64::try_from(docs.len()).ok() != Some(count) {
                        return Err(JobError::Corrupt(format!(
                            "the events ending at {last} hold {} events, not {count}",
                            docs.len()
                        )));
                    }
                    let first = last + 1 - count;
                    events.extend((first..=last).zip(docs).filter(|(seq, _)| *seq > after));
                }
            }
            tx.commit()?;
            Ok(events)
        })
        .await
    }

    async fn journal_begin(&self, entry: JournalEntry) -> StoreResult<()> {
        let op = format!("journal call {} of {}", entry.tool_call_id, entry.session);
        let record = to_json(&entry).map_err(|e| e.into_store_error(&op))?;
        self.run(op, move |conn| {
            conn.prepare_cached(
                "INSERT OR REPLACE INTO journal (id, session, started_ms, record)
                 VALUES (?1, ?2, ?3, ?4)",
            )?
            .execute(params![
                entry.id,
                entry.session,
                to_i64(entry.started_ms, "journal time")?,
                record,
            ])?;
            Ok(())
        })
        .await
    }

    async fn journal_open(&self, session: &str) -> StoreResult<Vec<JournalEntry>> {
        let op = format!("read the call journal of {session}");
        let session = session.to_string();
        self.read(op, move |conn| {
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
        self.read(op, move |conn| {
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
    let stored: Option<(i64, i64, i64, bool, i64)> = tx
        .prepare_cached(
            "SELECT id, rounds, write_epoch, turn_allow_all, wiped_at FROM runs
             WHERE session = ?1 AND run = ?2",
        )?
        .query_row(params![session, run], |row| {
            Ok((
                row.get(0)?,
                row.get(1)?,
                row.get(2)?,
                row.get(3)?,
                row.get(4)?,
            ))
        })
        .optional()?;
    let Some((run_id, rounds, write_epoch, turn_allow_all, wiped_at)) = stored else {
        // No run, no entries.
        return Ok((snapshot, run_snapshot));
    };
    run_snapshot.rounds = to_u64(rounds, "rounds")?;
    run_snapshot.write_epoch = to_u64(write_epoch, "write epoch")?;
    run_snapshot.turn_allow_all = turn_allow_all;
    let wiped_at = to_u64(wiped_at, "wipe epoch")?;

    // Each path's last touch, looked up once however many entries cover it.
    let mut touched_at: HashMap<String, u64> = HashMap::new();
    let mut keep = |entry: DedupeEntry, stored_at: i64| -> Result<Option<DedupeEntry>, JobError> {
        let stored_at = to_u64(stored_at, "dedupe epoch")?;
        if let Validity::Paths { paths } = &entry.validity {
            let mut lookup = tx.prepare_cached(
                "SELECT epoch FROM dedupe_touched WHERE run_id = ?1 AND path = ?2",
            )?;
            for path in paths {
                if !touched_at.contains_key(path) {
                    let epoch: Option<i64> = lookup
                        .query_row(params![run_id, path], |row| row.get(0))
                        .optional()?;
                    let epoch = epoch.map_or(0, |e| u64::try_from(e).unwrap_or(u64::MAX));
                    touched_at.insert(path.clone(), epoch);
                }
            }
        }
        let valid = crate::path_entry_valid(&entry.validity, stored_at, wiped_at, |path| {
            touched_at.get(path).copied().unwrap_or(u64::MAX)
        });
        Ok(valid.then_some(entry))
    };
    let decode = |row: &rusqlite::Row<'_>| -> Result<(DedupeEntry, i64), JobError> {
        let result = match row.get_ref(2)? {
            ValueRef::Text(text) => String::from_utf8(text.to_vec())
                .map_err(|_| JobError::Corrupt("a dedupe result is not UTF-8".to_string()))?,
            ValueRef::Blob(hash) => {
                let hash: Hash = hash.try_into().map_err(|_| {
                    JobError::Corrupt("a dedupe result's blob hash is not 32 bytes".to_string())
                })?;
                String::from_utf8(pack::inflate(&read_blob(tx, &hash)?)?)
                    .map_err(|_| JobError::Corrupt("a blob is not UTF-8".to_string()))?
            }
            _ => {
                return Err(JobError::Corrupt(
                    "a dedupe result is neither text nor a blob hash".to_string(),
                ));
            }
        };
        Ok((
            DedupeEntry {
                key: key_text(row.get_ref(0)?)?,
                tool: row.get(1)?,
                result,
                images: match row.get::<_, Option<String>>(3)? {
                    Some(images) => from_json(&images, "dedupe images")?,
                    None => Vec::new(),
                },
                validity: match row.get::<_, Option<String>>(4)? {
                    Some(validity) => from_json(&validity, "dedupe validity")?,
                    None => Validity::Always,
                },
                is_error: row.get(5)?,
            },
            row.get(6)?,
        ))
    };
    const COLUMNS: &str = "key, tool, result, images, validity, is_error, stored_at";
    match keys {
        None => {
            let mut stmt = tx.prepare_cached(&format!(
                "SELECT {COLUMNS} FROM dedupe_entries WHERE run_id = ?1 ORDER BY slot"
            ))?;
            let mut rows = stmt.query(params![run_id])?;
            while let Some(row) = rows.next()? {
                let (entry, stored_at) = decode(row)?;
                run_snapshot.dedupe.extend(keep(entry, stored_at)?);
            }
        }
        Some(keys) => {
            let mut stmt = tx.prepare_cached(&format!(
                "SELECT {COLUMNS} FROM dedupe_entries WHERE run_id = ?1 AND key = ?2"
            ))?;
            for key in keys {
                let mut rows = stmt.query(params![run_id, key_value(key)])?;
                if let Some(row) = rows.next()? {
                    let (entry, stored_at) = decode(row)?;
                    run_snapshot.dedupe.extend(keep(entry, stored_at)?);
                }
            }
        }
    }
    Ok((snapshot, run_snapshot))
}
