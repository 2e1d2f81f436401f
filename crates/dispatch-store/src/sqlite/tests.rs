//! What only the SQLite backend promises: durability, atomic commits, schema versioning.

use std::path::Path;

use pretty_assertions::assert_eq;
use rusqlite::Connection;
use serde_json::json;
use tempfile::TempDir;

use super::SqliteStore;
use super::schema::MIGRATIONS;
use crate::suites::session::{entry, event, message, round, task, todo};
use crate::{
    PendingTask, RoundRecord, RunSnapshot, SessionSnapshot, SessionStore, StoreError, TodoStatus,
    TranscriptEntry, Validity,
};

type Everything = (
    SessionSnapshot,
    RunSnapshot,
    Vec<TranscriptEntry>,
    Vec<(u64, String)>,
    Vec<PendingTask>,
);

async fn everything(store: &dyn SessionStore) -> Everything {
    let (session, run) = store.load("s1", "r1").await.unwrap();
    (
        session,
        run,
        store.transcript("s1", None).await.unwrap(),
        store.events("s1", 0).await.unwrap(),
        store.pending("s1").await.unwrap(),
    )
}

/// A round that touches every table.
fn full_round(number: u64) -> RoundRecord {
    RoundRecord {
        write_epoch: number,
        turn_allow_all: true,
        marked: vec![format!("tool{number}")],
        todos: Some(vec![todo(&format!("step {number}"), TodoStatus::Pending)]),
        dedupe_put: vec![entry(&format!("k{number}"), "result", Validity::Always)],
        dedupe_drop: vec![format!("k{}", number - 1)],
        transcript: vec![message("r1", number, &format!("message {number}"))],
        events: vec![event(json!({"round": number}))],
        pending: Some(task("s1", "r1", &format!("task{number}"), number)),
        ..round("s1", "r1", number)
    }
}

fn user_version(path: &Path) -> i64 {
    let conn = Connection::open(path).unwrap();
    conn.query_row("PRAGMA user_version", [], |row| row.get(0))
        .unwrap()
}

#[tokio::test]
async fn reopened_store_keeps_everything() {
    let dir = TempDir::new().unwrap();
    let path = dir.path().join("not/yet/there/store.db");
    let store = SqliteStore::open(&path).unwrap();
    store.commit_round(full_round(1)).await.unwrap();
    store.commit_round(full_round(2)).await.unwrap();
    let before = everything(&store).await;
    drop(store);

    let store = SqliteStore::open(&path).unwrap();
    assert_eq!(everything(&store).await, before);

    // Sequence numbers keep increasing across a reopen.
    store.commit_round(full_round(3)).await.unwrap();
    let events = store.events("s1", 0).await.unwrap();
    assert_eq!(events.len(), 3);
    assert!(events[2].0 > events[1].0);
}

#[tokio::test]
async fn failed_commit_leaves_nothing_behind() {
    let dir = TempDir::new().unwrap();
    let store = SqliteStore::open(&dir.path().join("store.db")).unwrap();
    store.commit_round(full_round(1)).await.unwrap();
    let before = everything(&store).await;

    // The pending task is written last and breaks `CHECK (task_hash <> '')`, so every
    // earlier write of the round must be rolled back.
    let mut broken = full_round(2);
    broken.pending = Some(task("s1", "r1", "", 2));
    let Err(StoreError::Backend(reason)) = store.commit_round(broken).await else {
        panic!("a commit breaking a CHECK constraint must fail");
    };
    assert!(
        reason.starts_with("commit round s1/r1: ") && reason.contains("CHECK constraint failed"),
        "{reason}"
    );
    assert_eq!(everything(&store).await, before);

    // The connection is not left inside the failed transaction.
    store.commit_round(full_round(2)).await.unwrap();
    assert_eq!(store.load("s1", "r1").await.unwrap().1.rounds, 2);
}

#[tokio::test]
async fn failed_first_commit_creates_no_session() {
    let dir = TempDir::new().unwrap();
    let store = SqliteStore::open(&dir.path().join("store.db")).unwrap();

    // SQLite integers are signed: a u64 above i64::MAX is refused midway through the round.
    let mut broken = full_round(1);
    broken.pending = Some(task("s1", "r1", "task1", u64::MAX));
    let Err(StoreError::Backend(reason)) = store.commit_round(broken).await else {
        panic!("a creation time beyond i64::MAX must fail");
    };
    assert_eq!(
        reason,
        format!(
            "commit round s1/r1: pending task creation time {} does not fit a SQLite integer",
            u64::MAX
        )
    );
    assert_eq!(
        everything(&store).await,
        Default::default(),
        "nothing of the round may remain"
    );
}

#[tokio::test]
async fn user_version_counts_migrations() {
    let dir = TempDir::new().unwrap();
    let path = dir.path().join("store.db");
    drop(SqliteStore::open(&path).unwrap());
    assert_eq!(
        user_version(&path),
        i64::try_from(MIGRATIONS.len()).unwrap()
    );

    // Reopening an up-to-date file applies nothing twice.
    drop(SqliteStore::open(&path).unwrap());
    assert_eq!(
        user_version(&path),
        i64::try_from(MIGRATIONS.len()).unwrap()
    );
    let conn = Connection::open(&path).unwrap();
    let mode: String = conn
        .query_row("PRAGMA journal_mode", [], |row| row.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
}

#[tokio::test]
async fn newer_schema_asks_to_upgrade() {
    let dir = TempDir::new().unwrap();
    let path = dir.path().join("store.db");
    let newer = i64::try_from(MIGRATIONS.len()).unwrap() + 1;
    Connection::open(&path)
        .unwrap()
        .pragma_update(None, "user_version", newer)
        .unwrap();

    let Err(StoreError::Backend(reason)) = SqliteStore::open(&path) else {
        panic!("a schema newer than ours must not open");
    };
    assert_eq!(
        reason,
        format!(
            "open {}: the store has schema version {newer} but this tooldispatch knows only up \
             to {}; upgrade tooldispatch",
            path.display(),
            MIGRATIONS.len()
        )
    );
    assert_eq!(user_version(&path), newer, "the file is left as it was");
}

#[cfg(unix)]
#[tokio::test]
async fn new_store_file_is_private() {
    use std::os::unix::fs::PermissionsExt;
    let dir = TempDir::new().unwrap();
    let path = dir.path().join("store.db");
    let store = SqliteStore::open(&path).unwrap();
    store.commit_round(full_round(1)).await.unwrap();
    for file in ["store.db", "store.db-wal"] {
        let mode = std::fs::metadata(dir.path().join(file))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "{file}");
    }
}

#[tokio::test]
async fn open_by_url_picks_sqlite() {
    let dir = TempDir::new().unwrap();
    let path = dir.path().join("store.db");
    let store = crate::open(&format!("sqlite:{}", path.display())).unwrap();
    store.commit_round(full_round(1)).await.unwrap();
    drop(store);
    assert!(path.exists());
    assert!(matches!(
        crate::open("sqlite:"),
        Err(StoreError::BadUrl { .. })
    ));
}

#[tokio::test]
async fn a_store_from_before_chat_search_is_indexed_when_migrated() {
    use crate::ChatHistory;
    let dir = TempDir::new().unwrap();
    let path = dir.path().join("store.db");
    // A store at schema 5: every migration before chat history, and a committed round.
    {
        let mut conn = Connection::open(&path).unwrap();
        let tx = conn.transaction().unwrap();
        for migration in &MIGRATIONS[..5] {
            tx.execute_batch(migration).unwrap();
        }
        tx.pragma_update(None, "user_version", 5).unwrap();
        tx.execute(
            "INSERT INTO sessions (id, marked, todos, created_ms, updated_ms) VALUES ('s1', '[]', '[]', 0, 0)",
            [],
        )
        .unwrap();
        let message =
            serde_json::to_string(&message("r1", 1, "the old build failed").message).unwrap();
        tx.execute(
            "INSERT INTO transcript (session, run, round, in_tools, message) VALUES ('s1', 'r1', 1, 1, ?1)",
            [message],
        )
        .unwrap();
        tx.commit().unwrap();
    }
    let store = SqliteStore::open(&path).unwrap();
    assert_eq!(
        user_version(&path),
        i64::try_from(MIGRATIONS.len()).unwrap()
    );
    let hits = store
        .chat_search("s1", "OLD build", None, 10)
        .await
        .unwrap();
    assert_eq!(
        hits.len(),
        1,
        "the pre-existing message was indexed by the migration"
    );
    assert_eq!(hits[0].at_ms, 0, "its commit time is unknown");
    assert_eq!(store.transcript("s1", None).await.unwrap().len(), 1);
}

/// A round of `session`/`run` with one transcript message and one event, both saying `text`.
fn tagged_round(session: &str, run: &str, number: u64, text: &str) -> RoundRecord {
    RoundRecord {
        transcript: vec![message(run, number, text)],
        events: vec![event(json!({ "text": text }))],
        ..round(session, run, number)
    }
}

#[tokio::test]
async fn rounds_queued_together_commit_together_and_each_caller_gets_its_own_result() {
    use std::sync::Arc;

    let dir = TempDir::new().unwrap();
    let store = Arc::new(SqliteStore::open(&dir.path().join("store.db")).unwrap());

    // Hold the writer thread, so every round below is queued before it commits any: the first
    // drain then takes `MAX_BATCH` of them into one transaction and the next one the rest.
    let (release, gate) = std::sync::mpsc::channel::<()>();
    let hold: super::Job = Box::new(move |_conn| {
        let _ = gate.recv();
    });
    store.writer.as_ref().unwrap().send(hold).unwrap();

    let mut broken = tagged_round("bad", "r1", 1, "broken");
    broken.pending = Some(task("bad", "r1", "", 1)); // breaks CHECK (task_hash <> '')
    let mut records = vec![
        (tagged_round("c", "r1", 1, "first"), "ok"),
        (tagged_round("c", "r1", 1, "second"), "conflict"), // round 1 was just taken
        (tagged_round("c", "r1", 2, "third"), "ok"),        // follows "first" in the batch
        (broken, "check"),
        (tagged_round("c", "r1", 2, "fourth"), "conflict"), // round 2 was just taken
    ];
    let sessions = 70;
    for i in 0..sessions {
        records.push((
            tagged_round(&format!("s{i}"), "r1", 1, &format!("s{i}")),
            "ok",
        ));
    }
    assert!(records.len() > super::MAX_BATCH, "two batches");

    let mut callers = Vec::new();
    for (queued, (record, expected)) in records.into_iter().enumerate() {
        let caller = store.clone();
        let label = record.transcript[0].message.clone();
        callers.push((
            tokio::spawn(async move { caller.commit_round(record).await }),
            expected,
            label,
        ));
        // Queue in this order: wait until this caller has queued its round.
        while super::lock(&store.commits).len() <= queued {
            tokio::task::yield_now().await;
        }
    }
    release.send(()).unwrap();

    for (caller, expected, label) in callers {
        let result = caller.await.unwrap();
        match expected {
            "ok" => assert!(result.is_ok(), "{label:?}: {result:?}"),
            "conflict" => assert!(
                matches!(result, Err(StoreError::Conflict { ref session, .. }) if session == "c"),
                "{label:?}: {result:?}"
            ),
            _ => assert!(
                matches!(result, Err(StoreError::Backend(ref reason))
                    if reason.starts_with("commit round bad/r1: ")
                        && reason.contains("CHECK constraint failed")),
                "{label:?}: {result:?}"
            ),
        }
    }
    assert!(super::lock(&store.commits).is_empty());

    // Exactly what committed is stored: "first" and "third" for c, nothing of the broken
    // round, and every other session's round.
    let texts = |entries: Vec<TranscriptEntry>| -> Vec<String> {
        entries
            .into_iter()
            .map(|entry| match entry.message {
                crate::TranscriptMessage::Tool { content, .. } => content,
                other => panic!("unexpected message {other:?}"),
            })
            .collect()
    };
    assert_eq!(store.load("c", "r1").await.unwrap().1.rounds, 2);
    assert_eq!(
        texts(store.transcript("c", None).await.unwrap()),
        ["first", "third"]
    );
    let events: Vec<String> = store
        .events("c", 0)
        .await
        .unwrap()
        .into_iter()
        .map(|(_, event)| event)
        .collect();
    assert_eq!(events, [r#"{"text":"first"}"#, r#"{"text":"third"}"#]);

    assert_eq!(
        store.load("bad", "r1").await.unwrap(),
        Default::default(),
        "nothing of the broken round may remain"
    );
    assert!(store.transcript("bad", None).await.unwrap().is_empty());
    assert!(store.events("bad", 0).await.unwrap().is_empty());
    assert!(store.pending("bad").await.unwrap().is_empty());

    for i in 0..sessions {
        let session = format!("s{i}");
        assert_eq!(store.load(&session, "r1").await.unwrap().1.rounds, 1);
        assert_eq!(
            texts(store.transcript(&session, None).await.unwrap()),
            [session.as_str()]
        );
        assert_eq!(store.events(&session, 0).await.unwrap().len(), 1);
    }

    // Everything above is on disk, not only in this connection.
    drop(Arc::try_unwrap(store).ok().unwrap());
    let conn = Connection::open(dir.path().join("store.db")).unwrap();
    let (runs, transcript): (i64, i64) = conn
        .query_row(
            "SELECT (SELECT count(*) FROM runs), (SELECT sum(count) FROM transcript_log)",
            [],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )
        .unwrap();
    assert_eq!((runs, transcript), (1 + sessions, 2 + sessions));
}

#[tokio::test]
async fn the_transcript_and_event_logs_have_one_index_each() {
    let dir = TempDir::new().unwrap();
    let path = dir.path().join("store.db");
    drop(SqliteStore::open(&path).unwrap());
    let conn = Connection::open(&path).unwrap();
    let mut stmt = conn
        .prepare(
            "SELECT name FROM sqlite_master WHERE type = 'index'
             AND tbl_name IN ('transcript_log', 'event_log') AND sql IS NOT NULL ORDER BY name",
        )
        .unwrap();
    let names: Vec<String> = stmt
        .query_map([], |row| row.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(names, ["event_log_by_session", "transcript_log_by_run"]);
}

/// A store written before migration 9 (no epochs on dedupe entries, no path index) opens, its
/// entries load by key, and a later touch of a path they cover invalidates them.
#[tokio::test]
async fn a_store_from_before_the_path_index_keeps_working() {
    let dir = TempDir::new().unwrap();
    let path = dir.path().join("store.db");
    {
        let mut conn = Connection::open(&path).unwrap();
        let tx = conn.transaction().unwrap();
        for migration in &MIGRATIONS[..8] {
            tx.execute_batch(migration).unwrap();
        }
        tx.execute_batch(
            r#"
            INSERT INTO sessions VALUES ('s1', '[]', '[]', 0, 0);
            INSERT INTO runs VALUES ('s1', 'r1', 3, 5, 0);
            INSERT INTO dedupe VALUES ('s1', 'r1', 'ka', 'read_file', 'A', '[]',
                '{"kind":"paths","paths":["/w/a"]}', 0);
            INSERT INTO dedupe VALUES ('s1', 'r1', 'kb', 'read_file', 'B', '[]',
                '{"kind":"paths","paths":["/w/b"]}', 0);
            PRAGMA user_version = 8;
            "#,
        )
        .unwrap();
        tx.commit().unwrap();
    }
    let store = SqliteStore::open(&path).unwrap();
    assert_eq!(
        user_version(&path),
        i64::try_from(MIGRATIONS.len()).unwrap()
    );
    let keys = vec!["ka".to_string(), "kb".to_string()];
    let (_, run) = store.load_keys("s1", "r1", &keys).await.unwrap();
    assert_eq!((run.rounds, run.write_epoch, run.dedupe.len()), (3, 5, 2));

    let mut touch = round("s1", "r1", 4);
    touch.write_epoch = 6;
    touch.touched_paths = vec!["/w/a".to_string()];
    store.commit_round(touch).await.unwrap();
    let (_, run) = store.load_keys("s1", "r1", &keys).await.unwrap();
    let kept: Vec<&str> = run.dedupe.iter().map(|e| e.key.as_str()).collect();
    assert_eq!(kept, vec!["kb"]);
}

/// A store written by an older binary (fixtures/README.md) opens, migrates, reads back exactly
/// what that binary wrote (events with their sequence numbers byte for byte, transcript,
/// dedupe entries, pending tasks) and keeps working: new rounds continue the sequences.
#[tokio::test]
async fn a_store_written_before_migration_10_reads_back_the_same_and_keeps_working() {
    use crate::{ChatHistory, TranscriptEntry};
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures");
    let dir = TempDir::new().unwrap();
    let path = dir.path().join("store.db");
    std::fs::copy(fixtures.join("schema-9.db"), &path).unwrap();
    let expected: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(fixtures.join("schema-9.expected.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(user_version(&path), 9);

    let store = SqliteStore::open(&path).unwrap();
    assert_eq!(
        user_version(&path),
        i64::try_from(MIGRATIONS.len()).unwrap()
    );
    for session in ["s1", "s2"] {
        let events: Vec<(u64, String)> =
            serde_json::from_value(expected["events"][session].clone()).unwrap();
        assert!(!events.is_empty());
        assert_eq!(store.events(session, 0).await.unwrap(), events);
        let middle = events[events.len() / 2].0;
        let after: Vec<_> = events
            .iter()
            .filter(|(seq, _)| *seq > middle)
            .cloned()
            .collect();
        assert_eq!(store.events(session, middle).await.unwrap(), after);

        let transcript: Vec<TranscriptEntry> =
            serde_json::from_value(expected["transcript"][session].clone()).unwrap();
        assert_eq!(store.transcript(session, None).await.unwrap(), transcript);
    }

    let (snapshot, run) = store.load("s1", "r1").await.unwrap();
    let marked: Vec<String> = snapshot.marked.into_iter().collect();
    assert_eq!(marked, ["calculate", "edit_file", "read_files"]);
    assert_eq!((run.rounds, run.write_epoch), (4, 1));
    let want: Vec<serde_json::Value> = expected["dedupe"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["session"] == "s1" && e["run"] == "r1")
        .map(|e| {
            json!({"key": e["key"], "tool": e["tool"], "result": e["result"],
                   "validity": e["validity"], "is_error": e["is_error"]})
        })
        .collect();
    let got: Vec<serde_json::Value> = run
        .dedupe
        .iter()
        .map(|e| {
            json!({"key": e.key, "tool": e.tool, "result": e.result,
                   "validity": e.validity, "is_error": e.is_error})
        })
        .collect();
    assert_eq!(got, want, "every entry, in the order it was stored");
    assert!(
        want.iter()
            .any(|e| e["result"].as_str().unwrap().len() > 3000),
        "the fixture has a large result"
    );
    let keys: Vec<String> = run.dedupe.iter().map(|e| e.key.clone()).collect();
    let (_, by_key) = store.load_keys("s1", "r1", &keys[1..2]).await.unwrap();
    assert_eq!(by_key.dedupe, run.dedupe[1..2]);

    let pending = store.pending("s2").await.unwrap();
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].task_hash, expected["pending"][0]);
    let hits = store.chat_search("s1", "big", None, 10).await.unwrap();
    assert!(!hits.is_empty(), "the migrated transcript is searchable");

    // It keeps working: a new round's events follow the old ones, its transcript follows too.
    let last_seq = expected["events"]["s2"]
        .as_array()
        .unwrap()
        .iter()
        .chain(expected["events"]["s1"].as_array().unwrap())
        .map(|e| e[0].as_u64().unwrap())
        .max()
        .unwrap();
    let committed = store
        .commit_round(tagged_round("s1", "r1", 5, "after the migration"))
        .await
        .unwrap();
    assert_eq!(committed.events, last_seq + 1..last_seq + 2);
    let events = store.events("s1", last_seq).await.unwrap();
    assert_eq!(
        events,
        [(
            last_seq + 1,
            r#"{"text":"after the migration"}"#.to_string()
        )]
    );
    let transcript = store.transcript("s1", Some("r1")).await.unwrap();
    assert_eq!(transcript.len(), 12 + 1);
    let hits = store
        .chat_search("s1", "migration", None, 10)
        .await
        .unwrap();
    assert_eq!(hits.len(), 1);
    let old_hits = store.chat_search("s1", "big", None, 10).await.unwrap();
    assert!(
        hits[0].seq > old_hits[0].seq,
        "message positions keep increasing"
    );
}

/// An event that, like the engine's, says which of its texts may be large.
#[derive(Debug)]
struct ResultEvent {
    result: String,
}

impl crate::EventJson for ResultEvent {
    fn to_json(&self) -> String {
        json!({"type": "ToolResult", "result": self.result}).to_string()
    }
    fn for_each_text<'a>(&'a self, each: &mut dyn FnMut(&'a str)) {
        each(&self.result);
    }
}

/// A 20 KB result that a round's transcript, event and dedupe entry all carry is written
/// once (as one deflated blob); each of them keeps a reference and reads back the full text.
#[tokio::test]
async fn a_large_result_is_written_once_per_call() {
    let dir = TempDir::new().unwrap();
    let path = dir.path().join("store.db");
    let store = SqliteStore::open(&path).unwrap();
    // Text that deflate cannot shrink to nothing: pseudo-random hex digits.
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    let large: String = (0..20_000)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            char::from(b"0123456789abcdef"[usize::try_from(state % 16).unwrap()])
        })
        .collect();
    // As the engine writes them: the message and the event carry `[tool] result`, the dedupe
    // entry the bare result.
    let shown = format!("[read_files] {large}");
    let mut record = round("s1", "r1", 1);
    record.transcript = vec![message("r1", 1, &shown)];
    record.events = vec![std::sync::Arc::new(ResultEvent {
        result: shown.clone(),
    })];
    record.dedupe_put = vec![entry("k1", &large, crate::Validity::Always)];
    store.commit_round(record).await.unwrap();

    let (_, run) = store.load("s1", "r1").await.unwrap();
    assert_eq!(run.dedupe[0].result, large);
    let transcript = store.transcript("s1", None).await.unwrap();
    assert!(matches!(
        &transcript[0].message,
        crate::TranscriptMessage::Tool { content, .. } if *content == shown
    ));
    let events = store.events("s1", 0).await.unwrap();
    assert_eq!(
        events[0].1,
        json!({"type": "ToolResult", "result": shown}).to_string()
    );

    drop(store);
    let conn = Connection::open(&path).unwrap();
    let (blobs, blob_bytes): (i64, i64) = conn
        .query_row("SELECT count(*), sum(length(body)) FROM blobs", [], |row| {
            Ok((row.get(0)?, row.get(1)?))
        })
        .unwrap();
    assert_eq!(blobs, 1, "one copy of the text");
    assert!(blob_bytes < 20_000, "deflated: {blob_bytes} bytes");
    let bodies: i64 = conn
        .query_row(
            "SELECT (SELECT sum(length(body)) FROM transcript_log)
                  + (SELECT sum(length(body)) FROM event_log)",
            [],
            |row| row.get(0),
        )
        .unwrap();
    assert!(
        bodies < 400,
        "the transcript and the event keep references: {bodies} bytes"
    );
    let result_kind: String = conn
        .query_row("SELECT typeof(result) FROM dedupe_entries", [], |row| {
            row.get(0)
        })
        .unwrap();
    assert_eq!(
        result_kind, "blob",
        "the dedupe entry keeps the blob's hash"
    );
}

/// gc drops an old run's path touches with its dedupe entries (nothing is left to
/// invalidate), and keeps those of a recent run.
#[tokio::test]
async fn gc_drops_the_path_touches_of_the_runs_it_prunes() {
    use crate::{GcPolicy, Maintenance, ManualClock, Validity};
    let dir = TempDir::new().unwrap();
    let path = dir.path().join("store.db");
    let clock = std::sync::Arc::new(ManualClock::at(1_000_000));
    let store = SqliteStore::open_with_clock(&path, clock.clone()).unwrap();
    for session in ["old", "new"] {
        let mut first = round(session, "r1", 1);
        first.dedupe_put = vec![entry(
            "k",
            "A",
            Validity::Paths {
                paths: vec!["/w/a".into()],
            },
        )];
        store.commit_round(first).await.unwrap();
        let mut touch = round(session, "r1", 2);
        touch.write_epoch = 1;
        touch.touched_paths = vec!["/w/a".to_string(), "/w/b".to_string()];
        store.commit_round(touch).await.unwrap();
        clock.advance(10 * 24 * 3600 * 1000);
    }
    let touches = |path: &Path| -> i64 {
        Connection::open(path)
            .unwrap()
            .query_row("SELECT count(*) FROM dedupe_touched", [], |row| row.get(0))
            .unwrap()
    };
    assert_eq!(touches(&path), 4);
    let report = store
        .gc(&GcPolicy {
            finished_runs_older_than: std::time::Duration::from_secs(15 * 24 * 3600),
        })
        .await
        .unwrap();
    assert_eq!(report.runs_pruned, Some(1));
    assert_eq!(touches(&path), 2, "the recent run keeps its touches");
}

/// A transcript row that cannot be read is left out of the search index; the rows after it
/// are still indexed and found, and reading the damaged run reports the corruption.
#[tokio::test]
async fn a_damaged_transcript_row_does_not_stop_search() {
    use crate::ChatHistory;
    let dir = TempDir::new().unwrap();
    let path = dir.path().join("store.db");
    let store = SqliteStore::open(&path).unwrap();
    store
        .commit_round(tagged_round("s1", "r1", 1, "alpha"))
        .await
        .unwrap();
    store
        .commit_round(tagged_round("s1", "r2", 1, "bravo"))
        .await
        .unwrap();
    Connection::open(&path)
        .unwrap()
        .execute(
            "UPDATE transcript_log SET body = X'00' WHERE run = 'r1'",
            [],
        )
        .unwrap();
    assert_eq!(
        store
            .chat_search("s1", "bravo", None, 10)
            .await
            .unwrap()
            .len(),
        1
    );
    assert!(
        store
            .chat_search("s1", "alpha", None, 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(matches!(
        store.transcript("s1", Some("r1")).await,
        Err(StoreError::Corrupt(_))
    ));
}
