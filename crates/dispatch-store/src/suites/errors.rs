//! One behaviour suite for every `ErrorMemory` backend, instantiated per backend at the bottom.

use std::sync::Arc;

use pretty_assertions::assert_eq;
use tempfile::TempDir;

use crate::memory::MemoryStore;
use crate::{ERROR_TTL, ErrorClass, ErrorMemory, ErrorRecord, ManualClock, Outcome};

const START_MS: u64 = 1_700_000_000_000;
const DAY_MS: u64 = 24 * 3600 * 1000;

struct Fixture {
    memory: Arc<dyn ErrorMemory>,
    clock: Arc<ManualClock>,
    _dir: Option<TempDir>,
}

fn memory() -> Fixture {
    let clock = Arc::new(ManualClock::at(START_MS));
    Fixture {
        memory: Arc::new(MemoryStore::with_clock(clock.clone())),
        clock,
        _dir: None,
    }
}

#[cfg(feature = "sqlite")]
fn sqlite() -> Fixture {
    let dir = TempDir::new().unwrap();
    let clock = Arc::new(ManualClock::at(START_MS));
    let store =
        crate::sqlite::SqliteStore::open_with_clock(&dir.path().join("store.db"), clock.clone())
            .unwrap();
    Fixture {
        memory: Arc::new(store),
        clock,
        _dir: Some(dir),
    }
}

/// A Redis store under a prefix of its own; its keys are deleted after the store drops.
#[cfg(feature = "redis")]
struct RedisFixture {
    memory: Arc<dyn ErrorMemory>,
    clock: Arc<ManualClock>,
    _keys: crate::redis::testing::KeySweeper,
}

#[cfg(feature = "redis")]
fn redis() -> RedisFixture {
    let clock = Arc::new(ManualClock::at(START_MS));
    let (store, keys) = crate::redis::testing::store(clock.clone());
    RedisFixture {
        memory: Arc::new(store),
        clock,
        _keys: keys,
    }
}

fn record(tool: &str, symptom: &str, action: &str, at: u64) -> ErrorRecord {
    ErrorRecord::new(
        tool,
        &["PDF".to_string(), "encoding".to_string()],
        symptom,
        "",
        action,
        Outcome::Resolved,
        at,
    )
}

fn ids(records: &[ErrorRecord]) -> Vec<String> {
    records.iter().map(|r| r.symptom.clone()).collect()
}

async fn search_needs_every_word_and_returns_newest_first(m: &dyn ErrorMemory, _: &ManualClock) {
    m.error_write(record(
        "read_files",
        "file not found in docs",
        "search first",
        START_MS,
    ))
    .await
    .unwrap();
    m.error_write(record(
        "read_files",
        "file not found again",
        "use glob",
        START_MS + 5,
    ))
    .await
    .unwrap();
    m.error_write(record(
        "fetch_page",
        "page blocked",
        "force refresh",
        START_MS + 9,
    ))
    .await
    .unwrap();
    let found = m.error_search(None, "FILE found", 10).await.unwrap();
    assert_eq!(
        ids(&found),
        vec!["file not found again", "file not found in docs"]
    );
    let glob = m.error_search(None, "file glob", 10).await.unwrap();
    assert_eq!(ids(&glob), vec!["file not found again"]);
    let by_tool = m.error_search(Some("fetch_page"), "", 10).await.unwrap();
    assert_eq!(ids(&by_tool), vec!["page blocked"]);
    let limited = m.error_search(None, "pdf", 2).await.unwrap();
    assert_eq!(ids(&limited), vec!["page blocked", "file not found again"]);
    assert_eq!(m.error_search(None, "docx", 10).await.unwrap(), vec![]);
}

async fn query_syntax_from_the_model_is_searched_not_obeyed(m: &dyn ErrorMemory, _: &ManualClock) {
    m.error_write(record("t", "quote \" and OR NEAR", "x", START_MS))
        .await
        .unwrap();
    for query in ["\"", "OR", "NEAR(", "*", "a\"b OR c", "-"] {
        // Must not fail, whatever it finds.
        m.error_search(None, query, 5).await.unwrap();
    }
    let found = m.error_search(None, "OR NEAR", 5).await.unwrap();
    assert_eq!(found.len(), 1);
}

async fn related_matches_tool_and_error_class_newest_first(m: &dyn ErrorMemory, _: &ManualClock) {
    m.error_write(record("read_files", "file not found", "a", START_MS))
        .await
        .unwrap();
    m.error_write(record("read_files", "request timed out", "b", START_MS + 1))
        .await
        .unwrap();
    m.error_write(record("read_files", "no data in file", "c", START_MS + 2))
        .await
        .unwrap();
    m.error_write(record("other", "not found", "d", START_MS + 3))
        .await
        .unwrap();
    let related = m
        .error_related("read_files", ErrorClass::NoResult, 3)
        .await
        .unwrap();
    assert_eq!(ids(&related), vec!["no data in file", "file not found"]);
    let timeouts = m
        .error_related("read_files", ErrorClass::Timeout, 3)
        .await
        .unwrap();
    assert_eq!(ids(&timeouts), vec!["request timed out"]);
}

async fn read_takes_the_id_or_an_unambiguous_prefix(m: &dyn ErrorMemory, _: &ManualClock) {
    let r = record("t", "boom", "x", START_MS);
    m.error_write(r.clone()).await.unwrap();
    assert_eq!(m.error_read(&r.id).await.unwrap(), Some(r.clone()));
    assert_eq!(
        m.error_read(&r.id[..8].to_uppercase()).await.unwrap(),
        Some(r.clone())
    );
    assert_eq!(m.error_read(&r.id[..7]).await.unwrap(), None, "too short");
    assert_eq!(m.error_read("%%%%%%%%").await.unwrap(), None);
    assert_eq!(m.error_read("0123456789abcdef").await.unwrap(), None);
}

async fn records_expire_after_90_days_unless_found_again(m: &dyn ErrorMemory, c: &ManualClock) {
    m.error_write(record("t", "kept alive", "x", START_MS))
        .await
        .unwrap();
    m.error_write(record("t", "forgotten", "y", START_MS))
        .await
        .unwrap();
    let ttl = u64::try_from(ERROR_TTL.as_millis()).unwrap();
    c.advance(ttl - DAY_MS);
    // Finding a record starts its 90 days again.
    assert_eq!(
        ids(&m.error_search(None, "kept", 5).await.unwrap()),
        vec!["kept alive"]
    );
    c.advance(2 * DAY_MS);
    let left = m.error_search(Some("t"), "", 5).await.unwrap();
    assert_eq!(ids(&left), vec!["kept alive"]);
}

async fn writing_the_same_id_replaces_the_record(m: &dyn ErrorMemory, _: &ManualClock) {
    let mut r = record("t", "boom", "x", START_MS);
    m.error_write(r.clone()).await.unwrap();
    r.action = "something better".into();
    m.error_write(r.clone()).await.unwrap();
    let all = m.error_search(None, "", 10).await.unwrap();
    assert_eq!(all, vec![r]);
}

macro_rules! suite {
    ($backend:ident, $open:path) => {
        suite!($backend, $open, skip_if false);
    };
    // `$skip` is checked first by every test: a backend whose server is not there skips.
    ($backend:ident, $open:path, skip_if $skip:expr) => {
        mod $backend {
            suite!(@each $open, $skip;
                search_needs_every_word_and_returns_newest_first,
                query_syntax_from_the_model_is_searched_not_obeyed,
                related_matches_tool_and_error_class_newest_first,
                read_takes_the_id_or_an_unambiguous_prefix,
                records_expire_after_90_days_unless_found_again,
                writing_the_same_id_replaces_the_record,
            );
        }
    };
    (@each $open:path, $skip:expr; $($check:ident),* $(,)?) => {
        $(
            #[tokio::test]
            async fn $check() {
                if $skip {
                    return;
                }
                let fixture = $open();
                super::$check(&*fixture.memory, &fixture.clock).await;
            }
        )*
    };
}

suite!(memory_backend, super::memory);
#[cfg(feature = "sqlite")]
suite!(sqlite_backend, super::sqlite);
#[cfg(feature = "redis")]
suite!(redis_backend, super::redis, skip_if crate::redis::testing::unavailable());
