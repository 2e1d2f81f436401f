//! One behaviour suite for every `Secrets` backend, instantiated per backend at the bottom.

use std::sync::Arc;

use pretty_assertions::assert_eq;
use tempfile::TempDir;

use crate::memory::MemoryStore;
use crate::{Secrets, StoreError};

struct Fixture {
    secrets: Arc<dyn Secrets>,
    /// A second handle on the same store, as another process would open it.
    other: Arc<dyn Secrets>,
    _dir: Option<TempDir>,
    #[cfg(feature = "redis")]
    _keys: Option<crate::redis::testing::KeySweeper>,
}

fn memory() -> Fixture {
    // A memory store cannot be opened twice: its one handle stands in for both.
    let store: Arc<dyn Secrets> = Arc::new(MemoryStore::default());
    Fixture {
        secrets: store.clone(),
        other: store,
        _dir: None,
        #[cfg(feature = "redis")]
        _keys: None,
    }
}

#[cfg(feature = "sqlite")]
fn sqlite() -> Fixture {
    let dir = TempDir::new().unwrap();
    let open = || crate::sqlite::SqliteStore::open(&dir.path().join("store.db")).unwrap();
    Fixture {
        secrets: Arc::new(open()),
        other: Arc::new(open()),
        _dir: Some(dir),
        #[cfg(feature = "redis")]
        _keys: None,
    }
}

/// A Redis store under a prefix of its own, with a key file in a temp dir (never the user's).
#[cfg(feature = "redis")]
fn redis() -> Fixture {
    use crate::redis::{RedisStore, testing};
    let dir = TempDir::new().unwrap();
    let prefix = testing::unique_prefix();
    let keys = testing::KeySweeper::for_prefix(prefix.clone());
    let open = || {
        RedisStore::lazy(testing::URL, &prefix, Arc::new(crate::SystemClock))
            .unwrap()
            .with_secret_key_file(dir.path().join("redis.key"))
    };
    Fixture {
        secrets: Arc::new(open()),
        other: Arc::new(open()),
        _dir: Some(dir),
        _keys: Some(keys),
    }
}

async fn set_get_overwrite_and_delete(s: &dyn Secrets) {
    assert_eq!(s.secret_get("API_TOKEN").await.unwrap(), None);
    s.secret_set("API_TOKEN", "first").await.unwrap();
    assert_eq!(
        s.secret_get("API_TOKEN").await.unwrap().as_deref(),
        Some("first")
    );
    s.secret_set("API_TOKEN", "second ✓ with spaces")
        .await
        .unwrap();
    assert_eq!(
        s.secret_get("API_TOKEN").await.unwrap().as_deref(),
        Some("second ✓ with spaces")
    );
    assert!(s.secret_delete("API_TOKEN").await.unwrap());
    assert!(!s.secret_delete("API_TOKEN").await.unwrap());
    assert_eq!(s.secret_get("API_TOKEN").await.unwrap(), None);
}

async fn empty_and_long_values_round_trip(s: &dyn Secrets) {
    s.secret_set("EMPTY", "").await.unwrap();
    assert_eq!(s.secret_get("EMPTY").await.unwrap().as_deref(), Some(""));
    let long = "x".repeat(100_000);
    s.secret_set("LONG", &long).await.unwrap();
    assert_eq!(s.secret_get("LONG").await.unwrap(), Some(long));
}

async fn names_are_listed_sorted(s: &dyn Secrets) {
    assert_eq!(s.secret_names().await.unwrap(), Vec::<String>::new());
    for name in ["ZETA", "alpha.key", "MIDDLE_ONE", "B-2"] {
        s.secret_set(name, "v").await.unwrap();
    }
    s.secret_delete("MIDDLE_ONE").await.unwrap();
    assert_eq!(
        s.secret_names().await.unwrap(),
        vec!["B-2", "ZETA", "alpha.key"]
    );
}

async fn bad_names_are_refused(s: &dyn Secrets) {
    for name in ["", "with space", "a:b", "x/y"] {
        let err = s.secret_set(name, "v").await.unwrap_err();
        assert!(
            matches!(&err, StoreError::Backend(m) if m.contains("invalid secret name")),
            "{err}"
        );
        assert!(s.secret_get(name).await.is_err());
        assert!(s.secret_delete(name).await.is_err());
    }
    assert_eq!(s.secret_names().await.unwrap(), Vec::<String>::new());
}

/// The generation moves with every change made through either handle and stays put otherwise,
/// so a reader can skip decrypting when it has not moved.
async fn the_generation_changes_with_every_change_by_any_handle(
    s: &dyn Secrets,
    other: &dyn Secrets,
) {
    let start = s.secret_generation().await.unwrap();
    assert_eq!(
        s.secret_generation().await.unwrap(),
        start,
        "reading changes nothing"
    );
    s.secret_names().await.unwrap();
    s.secret_get("API_TOKEN").await.unwrap();
    assert_eq!(s.secret_generation().await.unwrap(), start);

    let mut seen = vec![start];
    let mut changed = |generation: u64, what: &str| {
        assert!(
            !seen.contains(&generation),
            "{what}: generation {generation} seen before"
        );
        seen.push(generation);
    };
    s.secret_set("API_TOKEN", "one").await.unwrap();
    changed(s.secret_generation().await.unwrap(), "set");
    assert_eq!(
        other.secret_generation().await.unwrap(),
        s.secret_generation().await.unwrap(),
        "both handles read the same generation"
    );
    other.secret_set("API_TOKEN", "two").await.unwrap();
    changed(
        s.secret_generation().await.unwrap(),
        "overwrite by the other handle",
    );
    other.secret_delete("API_TOKEN").await.unwrap();
    changed(
        s.secret_generation().await.unwrap(),
        "remove by the other handle",
    );
    let after = s.secret_generation().await.unwrap();
    assert_eq!(s.secret_generation().await.unwrap(), after);
}

macro_rules! suite {
    ($backend:ident, $open:path) => {
        suite!($backend, $open, skip_if false);
    };
    // `$skip` is checked first by every test: a backend whose server is not there skips.
    ($backend:ident, $open:path, skip_if $skip:expr) => {
        mod $backend {
            suite!(@each $open, $skip;
                set_get_overwrite_and_delete,
                empty_and_long_values_round_trip,
                names_are_listed_sorted,
                bad_names_are_refused,
            );

            #[tokio::test]
            async fn the_generation_changes_with_every_change_by_any_handle() {
                if $skip {
                    return;
                }
                let fixture = $open();
                super::the_generation_changes_with_every_change_by_any_handle(
                    &*fixture.secrets,
                    &*fixture.other,
                )
                .await;
            }
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
                super::$check(&*fixture.secrets).await;
            }
        )*
    };
}

suite!(memory_backend, super::memory);
#[cfg(feature = "sqlite")]
suite!(sqlite_backend, super::sqlite);
#[cfg(feature = "redis")]
suite!(redis_backend, super::redis, skip_if crate::redis::testing::unavailable());
