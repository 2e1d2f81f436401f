//! The tiered store over a closed port (an outage) and over the real Redis.

use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::redis::testing::{self, unavailable};
use crate::suites::session::{message, round};
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

/// A reader keeps its decrypted secrets while the generation stays put, so a switch of tier
/// must move it even when neither tier changed: the tiers hold different secrets.
#[tokio::test]
async fn the_secrets_generation_moves_when_another_tier_answers() {
    if unavailable() {
        return;
    }
    let dir = tempfile::TempDir::new().unwrap();
    let (shared, _keys) = testing::store(Arc::new(SystemClock));
    let shared = shared.with_secret_key_file(dir.path().join("redis.key"));
    let local = SqliteStore::open(&dir.path().join("store.db")).unwrap();
    let store = TieredStore::new(Arc::new(shared), Arc::new(local), testing::URL);

    let from_redis = store.secret_generation().await.unwrap();
    assert_eq!(from_redis, store.shared.secret_generation().await.unwrap());
    // An outage begins: the local tier answers.
    store.health().outage = Some(Outage {
        retry_at: Instant::now() + Duration::from_secs(60),
        backoff: FIRST_BACKOFF,
    });
    let from_local = store.secret_generation().await.unwrap();
    assert_ne!(from_local, from_redis);
    assert_eq!(
        from_local,
        store.local.secret_generation().await.unwrap() | LOCAL_GENERATION
    );
    // A secret stored during the outage is stored locally and moves the generation again.
    store
        .secret_set("TOKEN", "during-the-outage")
        .await
        .unwrap();
    assert_ne!(store.secret_generation().await.unwrap(), from_local);
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

/// Two tiered stores on one Redis prefix, as two processes would be, each with its own
/// in-process tier and the same manual clock.
fn two_processes(
    dir: &tempfile::TempDir,
) -> (
    TieredStore,
    TieredStore,
    Arc<crate::ManualClock>,
    testing::KeySweeper,
) {
    let clock = Arc::new(crate::ManualClock::at(1_700_000_000_000));
    let prefix = testing::unique_prefix();
    let open = |name: &str| {
        let shared = RedisStore::lazy(testing::URL, &prefix, clock.clone()).unwrap();
        let local = SqliteStore::open_with_clock(&dir.path().join(name), clock.clone()).unwrap();
        TieredStore::with_clock(
            Arc::new(shared),
            Arc::new(local),
            testing::URL,
            clock.clone(),
        )
    };
    let (a, b) = (open("a.db"), open("b.db"));
    (a, b, clock.clone(), testing::KeySweeper::for_prefix(prefix))
}

#[tokio::test]
async fn the_in_process_tier_serves_repeats_for_at_most_thirty_seconds() {
    if unavailable() {
        return;
    }
    let dir = tempfile::TempDir::new().unwrap();
    let (a, b, clock, _keys) = two_processes(&dir);
    let scope = CacheScope::Shared;
    a.cache_put(&scope, "page", "v1", crate::CACHE_TTL)
        .await
        .unwrap();
    // b reads it from Redis (the shared tier) …
    assert_eq!(
        b.cache_get(&scope, "page").await.unwrap().unwrap().value,
        "v1"
    );
    // … then another process drops it from Redis: b's near copy still answers, with its age.
    a.cache_remove(&scope, "page").await.unwrap();
    clock.advance(10_000);
    let near = b.cache_get(&scope, "page").await.unwrap().unwrap();
    assert_eq!((near.value.as_str(), near.age_ms), ("v1", 10_000));
    // Past the near lifetime b asks Redis again and sees the removal.
    clock.advance(20_000);
    assert_eq!(b.cache_get(&scope, "page").await.unwrap(), None);
    // a removed its own near copy with the entry.
    assert_eq!(a.cache_get(&scope, "page").await.unwrap(), None);
}

#[tokio::test]
async fn a_near_copy_never_outlives_its_entry() {
    if unavailable() {
        return;
    }
    let dir = tempfile::TempDir::new().unwrap();
    let (a, b, clock, _keys) = two_processes(&dir);
    let scope = CacheScope::Session {
        session: "s1".into(),
    };
    a.cache_put(&scope, "q", "answer", Duration::from_secs(5))
        .await
        .unwrap();
    assert!(b.cache_get(&scope, "q").await.unwrap().is_some());
    clock.advance(5_000);
    assert_eq!(a.cache_get(&scope, "q").await.unwrap(), None);
    assert_eq!(b.cache_get(&scope, "q").await.unwrap(), None);
    // Session entries stay in their session, near or far.
    let other = CacheScope::Session {
        session: "s2".into(),
    };
    a.cache_put(&scope, "k", "mine", crate::CACHE_TTL)
        .await
        .unwrap();
    assert_eq!(b.cache_get(&other, "k").await.unwrap(), None);
    assert_eq!(b.cache_get(&CacheScope::Shared, "k").await.unwrap(), None);
}
