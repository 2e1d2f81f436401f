//! One housekeeping suite for every backend: the same rounds, cache traffic and error records,
//! then exact `stats` numbers and exactly what each `gc` drops.

use std::sync::Arc;
use std::time::Duration;

use pretty_assertions::assert_eq;
use serde_json::json;
use tempfile::TempDir;

use crate::maintenance::{EntryCounts, GcPolicy, GcReport, Maintenance, StoreStats};
use crate::memory::MemoryStore;
use crate::suites::session::{entry, event, message, round, task};
use crate::{
    CacheScope, Clock, ErrorMemory, ErrorRecord, JournalEntry, ManualClock, Outcome, ResultCache,
    SessionStore, SystemClock, Validity,
};

const DAY_MS: u64 = 24 * 3600 * 1000;

/// Everything the suite uses of a backend.
trait Backend: SessionStore + ResultCache + ErrorMemory + Maintenance {}
impl<T: SessionStore + ResultCache + ErrorMemory + Maintenance> Backend for T {}

/// A backend, its clock, and whatever must outlive it (dropped after the store).
struct Fixture {
    store: Arc<dyn Backend>,
    clock: Arc<ManualClock>,
    _guard: Option<Box<dyn std::any::Any>>,
}

/// The clock starts at the real time: SQLite stamps a session's `updated_ms` with the system
/// clock, and run pruning compares that stamp with the store clock.
fn clock() -> Arc<ManualClock> {
    Arc::new(ManualClock::at(SystemClock.now_ms()))
}

fn memory() -> Fixture {
    let clock = clock();
    Fixture {
        store: Arc::new(MemoryStore::with_clock(clock.clone())),
        clock,
        _guard: None,
    }
}

#[cfg(feature = "sqlite")]
fn sqlite() -> Fixture {
    let dir = TempDir::new().unwrap();
    let clock = clock();
    let store =
        crate::sqlite::SqliteStore::open_with_clock(&dir.path().join("store.db"), clock.clone())
            .unwrap();
    Fixture {
        store: Arc::new(store),
        clock,
        _guard: Some(Box::new(dir)),
    }
}

#[cfg(feature = "redis")]
fn redis() -> Fixture {
    let clock = clock();
    let (store, keys) = crate::redis::testing::store(clock.clone());
    Fixture {
        store: Arc::new(store),
        clock,
        _guard: Some(Box::new(keys)),
    }
}

fn error(symptom: &str, now_ms: u64) -> ErrorRecord {
    ErrorRecord::new(
        "read_files",
        &["pdf".to_string()],
        symptom,
        "wrong dir",
        "used find_files first",
        Outcome::Resolved,
        now_ms,
    )
}

/// Two sessions, three rounds, four dedupe entries, an open journal entry, three cache entries
/// (two of them expired by the end) and two error records (one expired by the end).
async fn fill(fixture: &Fixture) {
    let store = &fixture.store;
    let mut first = round("s1", "r1", 1);
    first.dedupe_put = vec![
        entry("k1", "one", Validity::Always),
        entry("k2", "two", Validity::Always),
    ];
    first.transcript = vec![message("r1", 1, "a"), message("r1", 1, "b")];
    first.events = vec![
        event(json!({"n": 1})),
        event(json!({"n": 2})),
        event(json!({"n": 3})),
    ];
    first.pending = Some(task("s1", "r1", "h", 1));
    store.commit_round(first).await.unwrap();
    let mut second = round("s1", "r1", 2);
    second.dedupe_put = vec![entry("k3", "three", Validity::Always)];
    second.transcript = vec![message("r1", 2, "c")];
    second.events = vec![event(json!({"n": 4}))];
    store.commit_round(second).await.unwrap();
    let mut other = round("s2", "r1", 1);
    other.dedupe_put = vec![entry("k1", "one", Validity::Always)];
    other.transcript = vec![message("r1", 1, "d")];
    other.events = vec![event(json!({"n": 1}))];
    store.commit_round(other).await.unwrap();
    store
        .journal_begin(JournalEntry {
            id: "r1|3|c9".to_string(),
            session: "s1".to_string(),
            run: "r1".to_string(),
            round: 3,
            tool_call_id: "c9".to_string(),
            tool_name: "write_file".to_string(),
            arguments: "{}".to_string(),
            started_ms: 1,
        })
        .await
        .unwrap();

    let own = CacheScope::Session {
        session: "s1".to_string(),
    };
    let minute = Duration::from_secs(60);
    // Outlives the 91 days the clock moves on below.
    let year = Duration::from_secs(365 * 24 * 3600);
    store
        .cache_put(&CacheScope::Shared, "long", "v", year)
        .await
        .unwrap();
    store.cache_put(&own, "short", "v", minute).await.unwrap();
    store
        .cache_put(&CacheScope::Shared, "short", "v", minute)
        .await
        .unwrap();
    assert!(
        store
            .cache_get(&CacheScope::Shared, "long")
            .await
            .unwrap()
            .is_some()
    );
    assert!(
        store
            .cache_get(&CacheScope::Shared, "nope")
            .await
            .unwrap()
            .is_none()
    );
    assert!(store.cache_get(&own, "nope").await.unwrap().is_none());
    fixture.clock.advance(2 * 60 * 1000);

    // Every write forgets what is due, so the old record must still be live when the new one
    // is written: 80 days apart, then 11 more days make only the first one due.
    store
        .error_write(error("file not found", fixture.clock.now_ms()))
        .await
        .unwrap();
    fixture.clock.advance(80 * DAY_MS);
    store
        .error_write(error("timed out", fixture.clock.now_ms()))
        .await
        .unwrap();
    fixture.clock.advance(11 * DAY_MS);
}

/// The stats without `bytes`, which the caller checks by backend.
fn without_bytes(mut stats: StoreStats) -> StoreStats {
    stats.bytes = None;
    stats.bytes_by_table = None;
    stats
}

fn expected_stats(
    backend: &'static str,
    dedupe: u64,
    cache: EntryCounts,
    errors: EntryCounts,
) -> StoreStats {
    StoreStats {
        backend,
        sessions: 2,
        runs: 2,
        transcript_entries: 4,
        events: 5,
        pending_tasks: 1,
        open_journal_entries: 1,
        dedupe_entries: dedupe,
        cache_entries: cache,
        error_records: errors,
        bytes: None,
        bytes_by_table: None,
        cache_hits: 1,
        cache_misses: 2,
        cache_hit_rate: Some(1.0 / 3.0),
    }
}

async fn stats_count_everything_and_gc_drops_exactly_what_is_due(fixture: Fixture) {
    fill(&fixture).await;
    let store = &fixture.store;
    let stats = store.stats().await.unwrap();
    let backend = stats.backend;
    match backend {
        "memory" => assert_eq!(stats.bytes, None),
        _ => assert!(stats.bytes.is_some_and(|b| b > 0), "{stats:?}"),
    }
    match backend {
        "sqlite" => {
            let tables = stats.bytes_by_table.as_ref().unwrap();
            for table in ["sessions", "event_log", "transcript_log", "dedupe_entries"] {
                assert!(
                    tables.get(table).is_some_and(|b| *b > 0),
                    "{table}: {tables:?}"
                );
            }
        }
        _ => assert_eq!(stats.bytes_by_table, None),
    }
    assert_eq!(
        without_bytes(stats),
        expected_stats(
            backend,
            4,
            EntryCounts {
                live: 1,
                expired: 2
            },
            EntryCounts {
                live: 1,
                expired: 1
            },
        )
    );

    // Runs committed 91 days ago are younger than 100 days: only the sweeps drop anything.
    let long = GcPolicy {
        finished_runs_older_than: Duration::from_secs(100 * 24 * 3600),
    };
    let pruned_none = (backend != "redis").then_some(0);
    let first = store.gc(&long).await.unwrap();
    assert_eq!(
        (
            first.cache_entries_swept,
            first.error_records_dropped,
            first.runs_pruned,
            first.dedupe_entries_dropped
        ),
        (2, 1, pruned_none, pruned_none)
    );
    assert_eq!(first.compacted, backend == "sqlite");

    // The default week: both runs are older, and lose their dedupe entries (only those).
    let second = store.gc(&GcPolicy::default()).await.unwrap();
    let (runs, dedupe, notes) = match backend {
        "redis" => (None, None, 1),
        _ => (Some(2), Some(4), 0),
    };
    assert_eq!(
        second,
        GcReport {
            backend,
            cache_entries_swept: 0,
            error_records_dropped: 0,
            runs_pruned: runs,
            dedupe_entries_dropped: dedupe,
            compacted: backend == "sqlite",
            notes: second.notes.clone(),
        }
    );
    assert_eq!(second.notes.len(), notes);

    let after = store.stats().await.unwrap();
    assert_eq!(
        without_bytes(after),
        expected_stats(
            backend,
            if backend == "redis" { 4 } else { 0 },
            EntryCounts {
                live: 1,
                expired: 0
            },
            EntryCounts {
                live: 1,
                expired: 0
            },
        )
    );
    // Pruning leaves the run itself: its rounds still count, so the next round follows on.
    let (_, run) = store.load("s1", "r1").await.unwrap();
    assert_eq!(run.rounds, 2);
    store.commit_round(round("s1", "r1", 3)).await.unwrap();
}

#[tokio::test]
async fn memory_stats_and_gc() {
    stats_count_everything_and_gc_drops_exactly_what_is_due(memory()).await;
}

#[cfg(feature = "sqlite")]
#[tokio::test]
async fn sqlite_stats_and_gc() {
    stats_count_everything_and_gc_drops_exactly_what_is_due(sqlite()).await;
}

#[cfg(feature = "redis")]
#[tokio::test]
async fn redis_stats_and_gc() {
    if crate::redis::testing::unavailable() {
        return;
    }
    stats_count_everything_and_gc_drops_exactly_what_is_due(redis()).await;
}

#[tokio::test]
async fn hit_rate_is_null_before_the_first_lookup() {
    let stats = memory().store.stats().await.unwrap();
    assert_eq!(
        (stats.cache_hits, stats.cache_misses, stats.cache_hit_rate),
        (0, 0, None)
    );
}

#[test]
fn the_default_policy_prunes_runs_older_than_a_week() {
    assert_eq!(
        GcPolicy::default().finished_runs_older_than,
        Duration::from_secs(7 * 24 * 3600)
    );
}
