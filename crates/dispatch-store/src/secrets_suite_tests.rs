//! One behaviour suite for every `Secrets` backend, instantiated per backend at the bottom.

use std::sync::Arc;

use pretty_assertions::assert_eq;
use tempfile::TempDir;

use crate::memory::MemoryStore;
use crate::{Secrets, StoreError};

struct Fixture {
    secrets: Arc<dyn Secrets>,
    _dir: Option<TempDir>,
    #[cfg(feature = "redis")]
    _keys: Option<crate::redis::testing::KeySweeper>,
}

fn memory() -> Fixture {
    Fixture {
        secrets: Arc::new(MemoryStore::default()),
        _dir: None,
        #[cfg(feature = "redis")]
        _keys: None,
    }
}

#[cfg(feature = "sqlite")]
fn sqlite() -> Fixture {
    let dir = TempDir::new().unwrap();
    let store = crate::sqlite::SqliteStore::open(&dir.path().join("store.db")).unwrap();
    Fixture {
        secrets: Arc::new(store),
        _dir: Some(dir),
        #[cfg(feature = "redis")]
        _keys: None,
    }
}

/// A Redis store under a prefix of its own, with a key file in a temp dir (never the user's).
#[cfg(feature = "redis")]
fn redis() -> Fixture {
    let dir = TempDir::new().unwrap();
    let (store, keys) = crate::redis::testing::store(Arc::new(crate::SystemClock));
    let store = store.with_secret_key_file(dir.path().join("redis.key"));
    Fixture {
        secrets: Arc::new(store),
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
