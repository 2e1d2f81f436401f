//! The schema of the SQLite store and how a connection is set up.

use std::time::Duration;

use rusqlite::{Connection, TransactionBehavior};

use super::JobError;

/// Schema migrations in order; `PRAGMA user_version` holds how many have been applied.
pub(super) const MIGRATIONS: &[&str] = &[
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
    // 10: a smaller commit (pack.rs). A round's events are one `event_log` row and its
    // transcript messages one `transcript_log` row, each body deflated; a text of BLOB_MIN bytes
    // or more (a large result, arguments, an image) is cut out of them into `blobs` once, under
    // its hash. Dedupe entries are keyed by the binary hash in a table without rowids. The
    // full-text index is filled after commits, in batches (`fts_done`), not inside them.
    // Rows written before this migration keep their text: a TEXT body is read as it is.
    r#"
    CREATE TABLE counters (
        id        INTEGER PRIMARY KEY CHECK (id = 1),
        event_seq INTEGER NOT NULL,   -- the last event sequence number handed out
        fts_done  INTEGER NOT NULL    -- transcript_log rows up to this id are in transcript_fts
    ) STRICT;
    INSERT INTO counters (id, event_seq, fts_done) VALUES (1,
        COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'events'), 0),
        COALESCE((SELECT MAX(seq) FROM transcript), 0));

    CREATE TABLE blobs (
        hash BLOB PRIMARY KEY,        -- BLAKE3 of the text
        body BLOB NOT NULL            -- the text, deflated
    ) STRICT;

    CREATE TABLE event_log (
        last_seq INTEGER PRIMARY KEY, -- the sequence number of the row's last event
        session  TEXT NOT NULL,
        count    INTEGER NOT NULL,    -- its events are numbered last_seq - count + 1 ..= last_seq
        body     ANY NOT NULL         -- pack.rs
    ) STRICT;
    CREATE INDEX event_log_by_session ON event_log (session, last_seq);
    INSERT INTO event_log (last_seq, session, count, body)
    SELECT seq, session, 1, length(CAST(event AS BLOB)) || ';' || char(10) || event FROM events;
    DROP TABLE events;

    CREATE TABLE transcript_log (
        id      INTEGER PRIMARY KEY AUTOINCREMENT, -- message i of the row is number id * 1024 + i
        session TEXT NOT NULL,
        run     TEXT NOT NULL,
        round   INTEGER NOT NULL,
        at_ms   INTEGER NOT NULL,
        count   INTEGER NOT NULL,     -- messages
        calls   INTEGER NOT NULL,     -- tool calls of its assistant messages
        body    ANY NOT NULL          -- pack.rs: a JSON array of the messages
    ) STRICT;
    CREATE INDEX transcript_log_by_run ON transcript_log (session, run, id);
    INSERT INTO transcript_log (id, session, run, round, at_ms, count, calls, body)
    SELECT seq, session, run, round, at_ms, 1,
        CASE WHEN json_extract(message, '$.role') = 'assistant'
             THEN json_array_length(message, '$.tool_calls') ELSE 0 END,
        body_len || ';' || char(10) || body
    FROM (SELECT *, length(CAST(body AS BLOB)) AS body_len FROM (
        SELECT *, json_array(json_object(
            'run', run, 'round', round,
            'in_tools', json(CASE WHEN in_tools THEN 'true' ELSE 'false' END),
            'message', json(message))) AS body
        FROM transcript));

    -- columnsize = 0: the per-row token counts only serve ranking (bm25), and a search
    -- returns the newest matches, not the best ranked.
    DROP TABLE transcript_fts;
    CREATE VIRTUAL TABLE transcript_fts USING fts5(
        body, content = '', columnsize = 0,
        tokenize = "unicode61 remove_diacritics 0 tokenchars '_'"
    );
    INSERT INTO transcript_fts (rowid, body)
    SELECT seq * 1024, CASE json_extract(message, '$.role')
        WHEN 'tool' THEN json_extract(message, '$.name') || char(10) || json_extract(message, '$.content')
        WHEN 'assistant' THEN (
            SELECT group_concat(json_extract(value, '$.name') || ' ' || json_extract(value, '$.arguments'), char(10))
            FROM json_each(message, '$.tool_calls'))
        ELSE '' END
    FROM transcript;
    DROP TABLE transcript;

    -- Runs get an integer id, which their dedupe entries and path touches are keyed by
    -- instead of repeating the session and run names in every row.
    -- AUTOINCREMENT: an id is never handed out again, so a new run can never meet entries
    -- left under the id of one that was deleted.
    CREATE TABLE runs_by_id (
        id             INTEGER PRIMARY KEY AUTOINCREMENT,
        session        TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
        run            TEXT NOT NULL,
        rounds         INTEGER NOT NULL,
        write_epoch    INTEGER NOT NULL,
        turn_allow_all INTEGER NOT NULL,
        wiped_at       INTEGER NOT NULL DEFAULT 0,
        UNIQUE (session, run)
    ) STRICT;
    INSERT INTO runs_by_id (session, run, rounds, write_epoch, turn_allow_all, wiped_at)
    SELECT session, run, rounds, write_epoch, turn_allow_all, wiped_at FROM runs ORDER BY rowid;

    CREATE TABLE touched_by_run (
        run_id INTEGER NOT NULL,
        path   TEXT NOT NULL,
        epoch  INTEGER NOT NULL,
        PRIMARY KEY (run_id, path)
    ) STRICT, WITHOUT ROWID;
    INSERT INTO touched_by_run (run_id, path, epoch)
    SELECT r.id, t.path, t.epoch FROM dedupe_touched t JOIN runs_by_id r USING (session, run);
    DROP TABLE dedupe_touched;

    CREATE TABLE dedupe_entries (
        run_id    INTEGER NOT NULL,   -- runs.id
        key       ANY NOT NULL,       -- a 64-digit hex key as its 32 bytes (BLOB), another as TEXT
        slot      INTEGER NOT NULL,   -- insertion order; a replaced entry keeps its slot
        tool      TEXT NOT NULL,
        result    ANY NOT NULL,       -- the text, or the hash of the blob that holds it
        images    TEXT,               -- JSON array; NULL for none
        validity  TEXT,               -- JSON Validity; NULL for always
        is_error  INTEGER NOT NULL,
        stored_at INTEGER NOT NULL,
        PRIMARY KEY (run_id, key)
    ) STRICT, WITHOUT ROWID;
    INSERT INTO dedupe_entries
    SELECT r.id,
        CASE WHEN length(d.key) = 64 AND d.key NOT GLOB '*[^0-9a-f]*'
             THEN unhex(d.key) ELSE d.key END,
        d.rowid, d.tool, d.result, NULLIF(d.images, '[]'),
        NULLIF(d.validity, '{"kind":"always"}'), d.is_error, d.stored_at
    FROM dedupe d JOIN runs_by_id r USING (session, run);
    DROP TABLE dedupe;

    -- Nothing refers to the old table any more, so dropping it deletes nothing else.
    DROP TABLE runs;
    ALTER TABLE runs_by_id RENAME TO runs;
    ALTER TABLE touched_by_run RENAME TO dedupe_touched;
    "#,
    // 11: the agent loop (agents.rs): each session's conversation with its model, and the
    // background legs each session started. No foreign key to `sessions`: a conversation
    // starts before the session's first round is committed.
    r#"
    CREATE TABLE conversation (
        seq     INTEGER PRIMARY KEY AUTOINCREMENT,
        session TEXT NOT NULL,
        entry   TEXT NOT NULL           -- JSON ConversationEntry
    ) STRICT;
    CREATE INDEX conversation_by_session ON conversation (session, seq);

    CREATE TABLE legs (
        parent TEXT NOT NULL,
        id     TEXT NOT NULL,
        started_ms INTEGER NOT NULL,
        record TEXT NOT NULL,           -- JSON LegRecord
        PRIMARY KEY (parent, id)
    ) STRICT, WITHOUT ROWID;
    "#,
    // 12: the chats a person approved for the chatbot tools (chatbots.rs).
    r#"
    CREATE TABLE approved_chats (
        platform    TEXT NOT NULL,
        id          TEXT NOT NULL,
        approved_ms INTEGER NOT NULL,
        record      TEXT NOT NULL,      -- JSON ApprovedChat
        PRIMARY KEY (platform, id)
    ) STRICT, WITHOUT ROWID;
    "#,
];

/// Set up the writer's connection.
pub(super) fn configure(conn: &Connection) -> rusqlite::Result<()> {
    configure_common(conn)?;
    // WAL lets readers (our reader threads, another process, the CLI) run while we write;
    // NORMAL is durable in WAL mode except for the last commits before a power loss.
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    // Checkpoints run on a reader thread (mod.rs `AfterCommit`), not inside a commit. They
    // start when the -wal file reaches CHECKPOINT_AT; a WAL that is reused after a checkpoint
    // is cut back to half that, so the file's size keeps saying how much is new.
    conn.pragma_update(None, "wal_autocheckpoint", 0)?;
    conn.pragma_update(None, "journal_size_limit", 2 * 1024 * 1024)?;
    // Each round of a group commit runs in a savepoint, whose undo journal would otherwise
    // spill to a temporary file; it is only needed while the transaction is open.
    conn.pragma_update(None, "temp_store", "MEMORY")?;
    Ok(())
}

/// Set up a reader thread's connection (the file is already in WAL mode).
pub(super) fn configure_reader(conn: &Connection) -> rusqlite::Result<()> {
    configure_common(conn)
}

fn configure_common(conn: &Connection) -> rusqlite::Result<()> {
    conn.busy_timeout(Duration::from_millis(5000))?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    // 8 MiB of page cache per connection (the default is 2 MiB): a busy daemon's working
    // set (sessions, runs, the recent log rows and index pages) stays in it.
    conn.pragma_update(None, "cache_size", -8192)?;
    // No mmap: it made a single cached read slower (cargo bench -p dispatch-store, cache get
    // 4 -> 7 us) and the page cache above already holds the working set.
    // A round alone uses a dozen cached statements; the default cache (16) would keep
    // evicting and re-preparing them once reads and the other tables' statements join in.
    conn.set_prepared_statement_cache_capacity(128);
    Ok(())
}

/// Bring the schema up to `MIGRATIONS.len()`, all in one transaction.
pub(super) fn migrate(conn: &mut Connection) -> Result<(), JobError> {
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
