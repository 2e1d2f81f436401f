//! The tiered store over a closed port (an outage) and over the real Redis.

use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::memory::suite_tests::{message, round};
use crate::redis::testing::{self, unavailable};
use crate::{Outcome, SystemClock};

/// Nothing listens on port 1, so every connection is refused at once.
const CLOSED: &str = "redis://127.0.0.1:1/0";

fn down_store(dir: &tempfile::TempDir) -> TieredStore {
    let shared = RedisStore::open(CLOSED).unwrap();
    let local = SqliteStore::open(&dir.path().join("store.db")).unwrap();
    TieredStore::new(Arc::new(shared), Arc::new(local), CLOSED)
}

#[tokio::test]
async fn an_unreachable_redis_degrades_to_the_local_store_with_one_notice() {
    let dir = tempfile::TempDir::new().unwrap();
    let store = down_store(&dir);

    let (_, run) = store.load("s", "r").await.unwrap();
    assert_eq!(run.rounds, 0);
    let notice = store
        .take_degraded_notice()
        .expect("a notice for the outage");
    assert!(notice.contains("redis://127.0.0.1:1/0"), "{notice}");
    assert!(
        notice.contains(&dir.path().display().to_string()),
        "{notice}"
    );
    assert!(notice.contains("retrying in 1 s"), "{notice}");
    assert_eq!(store.take_degraded_notice(), None);

    let mut record = round("s", "r", 1);
    record.transcript.push(message("r", 1, "hello"));
    store.commit_round(record).await.unwrap();
    let (_, run) = store.load("s", "r").await.unwrap();
    assert_eq!(run.rounds, 1);
    assert_eq!(store.transcript("s", None).await.unwrap().len(), 1);

    let scope = CacheScope::Shared;
    store
        .cache_put(&scope, "k", "v", Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(
        store.cache_get(&scope, "k").await.unwrap().unwrap().value,
        "v"
    );

    let record = ErrorRecord::new(
        "read_file",
        &[],
        "file not found",
        "",
        "",
        Outcome::Failed,
        1,
    );
    let id = record.id.clone();
    store.error_write(record).await.unwrap();
    assert!(store.error_read(&id).await.unwrap().is_some());

    // The local store really holds it all.
    let (_, run) = store.local.load("s", "r").await.unwrap();
    assert_eq!(run.rounds, 1);
    // Still the same outage: no second notice, also through the trait.
    assert_eq!(SessionStore::health_notice(&store), None);
}

#[tokio::test]
async fn the_back_off_doubles_while_redis_stays_down() {
    let dir = tempfile::TempDir::new().unwrap();
    let store = down_store(&dir);
    store.load("s", "r").await.unwrap();
    assert_eq!(
        store.health().outage.as_ref().unwrap().backoff,
        FIRST_BACKOFF
    );
    // Pretend the window ended: the next call retries Redis, fails, and waits longer.
    store.health().outage.as_mut().unwrap().retry_at = Instant::now();
    store.load("s", "r").await.unwrap();
    assert_eq!(
        store.health().outage.as_ref().unwrap().backoff,
        FIRST_BACKOFF * 2
    );
    assert_eq!(store.take_degraded_notice().map(|_| ()), Some(()));
    assert_eq!(store.take_degraded_notice(), None);
}

#[tokio::test]
async fn a_reachable_redis_serves_everything_and_gives_no_notice() {
    if unavailable() {
        return;
    }
    let dir = tempfile::TempDir::new().unwrap();
    let (shared, _keys) = testing::store(Arc::new(SystemClock));
    let local = SqliteStore::open(&dir.path().join("store.db")).unwrap();
    let store = TieredStore::new(Arc::new(shared), Arc::new(local), testing::URL);

    store.load("s", "r").await.unwrap();
    store.commit_round(round("s", "r", 1)).await.unwrap();
    let scope = CacheScope::Shared;
    store
        .cache_put(&scope, "k", "v", Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(store.take_degraded_notice(), None);

    // Served by Redis: the shared tier has the round and the entry, the local one has not.
    assert_eq!(store.shared.load("s", "r").await.unwrap().1.rounds, 1);
    assert!(store.shared.cache_get(&scope, "k").await.unwrap().is_some());
    assert_eq!(store.local.load("s", "r").await.unwrap().1.rounds, 0);
    assert!(store.local.cache_get(&scope, "k").await.unwrap().is_none());
}

#[test]
fn the_local_path_comes_out_of_the_url_and_credentials_out_of_notices() {
    assert_eq!(
        split_local("redis://h:6379/0?local=/tmp/a%20b.db"),
        (
            "redis://h:6379/0".to_string(),
            Some(PathBuf::from("/tmp/a b.db"))
        )
    );
    assert_eq!(
        split_local("redis://h/0?protocol=resp3&local=x.db"),
        (
            "redis://h/0?protocol=resp3".to_string(),
            Some(PathBuf::from("x.db"))
        )
    );
    assert_eq!(
        split_local("redis://h/0"),
        ("redis://h/0".to_string(), None)
    );
    assert_eq!(
        without_credentials("redis://u:secret@h:6379/0"),
        "redis://h:6379/0"
    );
    assert_eq!(without_credentials("redis://h:6379/0"), "redis://h:6379/0");
}
