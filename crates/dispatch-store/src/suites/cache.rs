//! One behaviour suite for every `ResultCache` backend: each check is written once, as an async
//! fn over `&dyn ResultCache` and the `ManualClock` the backend reads, and instantiated per
//! backend at the bottom.

use std::sync::Arc;
use std::time::Duration;

use pretty_assertions::assert_eq;
use tempfile::TempDir;

use crate::memory::MemoryStore;
use crate::{CACHE_TTL, CacheHit, CacheScope, ManualClock, ResultCache};

/// An arbitrary start, far from zero, so an age computed from the epoch would show.
const START_MS: u64 = 1_700_000_000_000;

/// A backend plus its clock and whatever must outlive it; the cache drops first.
struct Fixture {
    cache: Arc<dyn ResultCache>,
    clock: Arc<ManualClock>,
    _dir: Option<TempDir>,
}

fn memory() -> Fixture {
    let clock = Arc::new(ManualClock::at(START_MS));
    Fixture {
        cache: Arc::new(MemoryStore::with_clock(clock.clone())),
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
        cache: Arc::new(store),
        clock,
        _dir: Some(dir),
    }
}

/// A Redis store under a prefix of its own; its keys are deleted after the store drops.
#[cfg(feature = "redis")]
struct RedisFixture {
    cache: Arc<dyn ResultCache>,
    clock: Arc<ManualClock>,
    _keys: crate::redis::testing::KeySweeper,
}

#[cfg(feature = "redis")]
fn redis() -> RedisFixture {
    let clock = Arc::new(ManualClock::at(START_MS));
    let (store, keys) = crate::redis::testing::store(clock.clone());
    RedisFixture {
        cache: Arc::new(store),
        clock,
        _keys: keys,
    }
}

fn session(id: &str) -> CacheScope {
    CacheScope::Session {
        session: id.to_string(),
    }
}

/// A hit on an entry put with `CACHE_TTL`, `age_ms` ago.
fn hit(value: &str, age_ms: u64, scope: &CacheScope) -> Option<CacheHit> {
    hit_with_ttl(value, age_ms, CACHE_TTL, scope)
}

/// A hit on an entry put with `ttl`, `age_ms` ago.
fn hit_with_ttl(value: &str, age_ms: u64, ttl: Duration, scope: &CacheScope) -> Option<CacheHit> {
    let ttl = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
    Some(CacheHit {
        value: value.to_string(),
        age_ms,
        expires_in_ms: ttl.saturating_sub(age_ms),
        scope: scope.clone(),
    })
}

fn ms(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap()
}

async fn an_unknown_key_is_a_miss(cache: &dyn ResultCache, _clock: &ManualClock) {
    assert_eq!(
        cache
            .cache_get(&CacheScope::Shared, "https://example.com/")
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        cache.cache_get(&session("a"), "anything").await.unwrap(),
        None
    );
}

async fn a_hit_reports_its_age_by_the_clock(cache: &dyn ResultCache, clock: &ManualClock) {
    let scope = session("a");
    cache
        .cache_put(&scope, "q=rust", "results", CACHE_TTL)
        .await
        .unwrap();
    assert_eq!(
        cache.cache_get(&scope, "q=rust").await.unwrap(),
        hit("results", 0, &scope)
    );

    clock.advance(7 * 60 * 1000 + 123);
    assert_eq!(
        cache.cache_get(&scope, "q=rust").await.unwrap(),
        hit("results", 7 * 60 * 1000 + 123, &scope)
    );
}

async fn an_entry_is_served_until_its_ttl_and_not_at_it(
    cache: &dyn ResultCache,
    clock: &ManualClock,
) {
    let scope = CacheScope::Shared;
    cache
        .cache_put(&scope, "page", "body", CACHE_TTL)
        .await
        .unwrap();

    clock.advance(ms(CACHE_TTL) - 1);
    assert_eq!(
        cache.cache_get(&scope, "page").await.unwrap(),
        hit("body", ms(CACHE_TTL) - 1, &scope)
    );

    clock.advance(1);
    assert_eq!(cache.cache_get(&scope, "page").await.unwrap(), None);
}

async fn an_expired_entry_is_dropped_when_read(cache: &dyn ResultCache, clock: &ManualClock) {
    let scope = session("a");
    cache
        .cache_put(&scope, "k", "v", Duration::from_secs(1))
        .await
        .unwrap();
    clock.advance(1000);
    assert_eq!(cache.cache_get(&scope, "k").await.unwrap(), None);
    // The read already dropped it, so the sweep finds nothing left.
    assert_eq!(cache.cache_sweep().await.unwrap(), 0);
}

async fn a_zero_ttl_entry_is_never_served(cache: &dyn ResultCache, _clock: &ManualClock) {
    let scope = session("a");
    cache
        .cache_put(&scope, "k", "v", Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(cache.cache_get(&scope, "k").await.unwrap(), None);
}

async fn a_ttl_beyond_the_clock_range_never_expires(cache: &dyn ResultCache, clock: &ManualClock) {
    let scope = session("a");
    cache
        .cache_put(&scope, "k", "v", Duration::MAX)
        .await
        .unwrap();
    clock.advance(10 * 365 * 24 * 3600 * 1000);
    assert_eq!(
        cache.cache_get(&scope, "k").await.unwrap(),
        Some(CacheHit {
            value: "v".to_string(),
            age_ms: 10 * 365 * 24 * 3600 * 1000,
            expires_in_ms: u64::MAX,
            scope: scope.clone(),
        })
    );
    assert_eq!(cache.cache_sweep().await.unwrap(), 0);
}

async fn a_session_entry_is_invisible_to_other_sessions_and_to_shared(
    cache: &dyn ResultCache,
    _clock: &ManualClock,
) {
    let (a, b) = (session("a"), session("b"));
    cache
        .cache_put(&a, "GET https://api.example.com/me", "alice", CACHE_TTL)
        .await
        .unwrap();

    let seen = (
        cache
            .cache_get(&a, "GET https://api.example.com/me")
            .await
            .unwrap(),
        cache
            .cache_get(&b, "GET https://api.example.com/me")
            .await
            .unwrap(),
        cache
            .cache_get(&CacheScope::Shared, "GET https://api.example.com/me")
            .await
            .unwrap(),
    );
    assert_eq!(seen, (hit("alice", 0, &a), None, None));
}

async fn a_session_named_shared_is_not_the_shared_scope(
    cache: &dyn ResultCache,
    _clock: &ManualClock,
) {
    let named_shared = session("shared");
    cache
        .cache_put(&named_shared, "k", "private", CACHE_TTL)
        .await
        .unwrap();
    assert_eq!(
        (
            cache.cache_get(&named_shared, "k").await.unwrap(),
            cache.cache_get(&CacheScope::Shared, "k").await.unwrap(),
        ),
        (hit("private", 0, &named_shared), None)
    );
}

async fn a_shared_entry_is_read_through_the_shared_scope_only(
    cache: &dyn ResultCache,
    _clock: &ManualClock,
) {
    cache
        .cache_put(&CacheScope::Shared, "page", "public", CACHE_TTL)
        .await
        .unwrap();
    assert_eq!(
        (
            cache.cache_get(&CacheScope::Shared, "page").await.unwrap(),
            cache.cache_get(&session("a"), "page").await.unwrap(),
        ),
        (hit("public", 0, &CacheScope::Shared), None)
    );
}

async fn the_same_key_in_each_scope_holds_its_own_value(
    cache: &dyn ResultCache,
    _clock: &ManualClock,
) {
    let scopes = [session("a"), session("b"), CacheScope::Shared];
    for (i, scope) in scopes.iter().enumerate() {
        cache
            .cache_put(scope, "k", &format!("value {i}"), CACHE_TTL)
            .await
            .unwrap();
    }
    cache.cache_remove(&session("b"), "k").await.unwrap();

    let mut seen = Vec::new();
    for scope in &scopes {
        seen.push(cache.cache_get(scope, "k").await.unwrap());
    }
    assert_eq!(
        seen,
        vec![
            hit("value 0", 0, &scopes[0]),
            None,
            hit("value 2", 0, &scopes[2]),
        ]
    );
}

async fn a_put_replaces_the_value_and_restarts_age_and_ttl(
    cache: &dyn ResultCache,
    clock: &ManualClock,
) {
    let scope = CacheScope::Shared;
    cache
        .cache_put(&scope, "page", "old", CACHE_TTL)
        .await
        .unwrap();
    clock.advance(20 * 60 * 1000);
    cache
        .cache_put(&scope, "page", "new", CACHE_TTL)
        .await
        .unwrap();
    assert_eq!(
        cache.cache_get(&scope, "page").await.unwrap(),
        hit("new", 0, &scope)
    );

    // 45 minutes after the first write, 25 after the second: alive only by the second's TTL.
    clock.advance(25 * 60 * 1000);
    assert_eq!(
        cache.cache_get(&scope, "page").await.unwrap(),
        hit("new", 25 * 60 * 1000, &scope)
    );
}

async fn remove_drops_only_that_entry(cache: &dyn ResultCache, _clock: &ManualClock) {
    let scope = session("a");
    cache
        .cache_put(&scope, "gone", "1", CACHE_TTL)
        .await
        .unwrap();
    cache
        .cache_put(&scope, "kept", "2", CACHE_TTL)
        .await
        .unwrap();
    cache.cache_remove(&scope, "gone").await.unwrap();
    // Removing what is not there is not an error.
    cache.cache_remove(&scope, "never-written").await.unwrap();

    assert_eq!(
        (
            cache.cache_get(&scope, "gone").await.unwrap(),
            cache.cache_get(&scope, "kept").await.unwrap(),
        ),
        (None, hit("2", 0, &scope))
    );
}

async fn sweep_drops_and_counts_only_expired_entries(cache: &dyn ResultCache, clock: &ManualClock) {
    let short = Duration::from_secs(60);
    cache
        .cache_put(&session("a"), "short", "1", short)
        .await
        .unwrap();
    cache
        .cache_put(&CacheScope::Shared, "short", "2", short)
        .await
        .unwrap();
    cache
        .cache_put(&session("b"), "long", "3", CACHE_TTL)
        .await
        .unwrap();

    assert_eq!(cache.cache_sweep().await.unwrap(), 0);
    clock.advance(ms(short));
    assert_eq!(cache.cache_sweep().await.unwrap(), 2);
    assert_eq!(cache.cache_sweep().await.unwrap(), 0);
    assert_eq!(
        cache.cache_get(&session("b"), "long").await.unwrap(),
        hit("3", ms(short), &session("b"))
    );

    // Expired entries stay unreadable whether or not a sweep ran.
    clock.advance(ms(CACHE_TTL));
    assert_eq!(cache.cache_sweep().await.unwrap(), 1);
    assert_eq!(cache.cache_get(&session("b"), "long").await.unwrap(), None);
}

async fn concurrent_puts_and_gets_on_distinct_keys_all_land(
    cache: Arc<dyn ResultCache>,
    _clock: &ManualClock,
) {
    let tasks: Vec<_> = (0..64)
        .map(|i| {
            let cache = Arc::clone(&cache);
            tokio::spawn(async move {
                // Alternate scopes so both the shared and the per-session paths are exercised.
                let scope = if i % 2 == 0 {
                    CacheScope::Shared
                } else {
                    session(&format!("s{i}"))
                };
                let key = format!("key {i}");
                cache
                    .cache_put(&scope, &key, &format!("value {i}"), CACHE_TTL)
                    .await
                    .unwrap();
                let read = cache.cache_get(&scope, &key).await.unwrap();
                (scope, key, read)
            })
        })
        .collect();

    let mut read_back = Vec::new();
    let mut expected = Vec::new();
    let mut written = Vec::new();
    for (i, task) in tasks.into_iter().enumerate() {
        let (scope, key, read) = task.await.unwrap();
        expected.push(hit(&format!("value {i}"), 0, &scope));
        read_back.push(read);
        written.push((scope, key));
    }
    assert_eq!(read_back, expected);

    // And every write is still there once all the tasks are done.
    let mut after = Vec::new();
    for (scope, key) in &written {
        after.push(cache.cache_get(scope, key).await.unwrap());
    }
    assert_eq!(after, expected);
}

#[cfg(feature = "sqlite")]
#[tokio::test]
async fn sqlite_an_entry_survives_reopening_the_file() {
    let dir = TempDir::new().unwrap();
    let path = dir.path().join("store.db");
    let clock = Arc::new(ManualClock::at(START_MS));
    let scope = session("a");
    {
        let store = crate::sqlite::SqliteStore::open_with_clock(&path, clock.clone()).unwrap();
        store
            .cache_put(&scope, "q=rust", "results", CACHE_TTL)
            .await
            .unwrap();
    }

    clock.advance(90_000);
    let store = crate::sqlite::SqliteStore::open_with_clock(&path, clock.clone()).unwrap();
    assert_eq!(
        store.cache_get(&scope, "q=rust").await.unwrap(),
        hit("results", 90_000, &scope)
    );
}

/// Instantiate the suite for one backend: `$open` builds a fresh [`Fixture`] per test.
macro_rules! suite {
    ($backend:ident, $open:path) => {
        suite!($backend, $open, skip_if false);
    };
    // `$skip` is checked first by every test: a backend whose server is not there skips.
    ($backend:ident, $open:path, skip_if $skip:expr) => {
        mod $backend {
            suite!(@shared $open, $skip;
                an_unknown_key_is_a_miss,
                a_hit_reports_its_age_by_the_clock,
                an_entry_is_served_until_its_ttl_and_not_at_it,
                an_expired_entry_is_dropped_when_read,
                a_zero_ttl_entry_is_never_served,
                a_ttl_beyond_the_clock_range_never_expires,
                a_session_entry_is_invisible_to_other_sessions_and_to_shared,
                a_session_named_shared_is_not_the_shared_scope,
                a_shared_entry_is_read_through_the_shared_scope_only,
                the_same_key_in_each_scope_holds_its_own_value,
                a_put_replaces_the_value_and_restarts_age_and_ttl,
                remove_drops_only_that_entry,
                sweep_drops_and_counts_only_expired_entries,
            );

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn concurrent_puts_and_gets_on_distinct_keys_all_land() {
                if $skip {
                    return;
                }
                let fixture = $open();
                super::concurrent_puts_and_gets_on_distinct_keys_all_land(
                    std::sync::Arc::clone(&fixture.cache),
                    &fixture.clock,
                )
                .await;
            }
        }
    };
    (@shared $open:path, $skip:expr; $($check:ident),* $(,)?) => {
        $(
            #[tokio::test]
            async fn $check() {
                if $skip {
                    return;
                }
                let fixture = $open();
                super::$check(&*fixture.cache, &fixture.clock).await;
            }
        )*
    };
}

suite!(memory_backend, super::memory);
#[cfg(feature = "sqlite")]
suite!(sqlite_backend, super::sqlite);
#[cfg(feature = "redis")]
suite!(redis_backend, super::redis, skip_if crate::redis::testing::unavailable());
