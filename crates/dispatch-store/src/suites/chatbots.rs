//! One behaviour suite for every `ApprovedChats` backend, instantiated per backend at the
//! bottom.

use std::sync::Arc;

use pretty_assertions::assert_eq;
use tempfile::TempDir;

use crate::chatbots::{ApprovedChat, ApprovedChats};
use crate::memory::MemoryStore;

struct Fixture {
    store: Arc<dyn ApprovedChats>,
    /// A second handle on the same store, as the next process would open it.
    reopened: Arc<dyn ApprovedChats>,
    _dir: Option<TempDir>,
    #[cfg(feature = "redis")]
    _keys: Option<crate::redis::testing::KeySweeper>,
}

fn memory() -> Fixture {
    let store: Arc<dyn ApprovedChats> = Arc::new(MemoryStore::default());
    Fixture {
        store: store.clone(),
        reopened: store,
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
        store: Arc::new(open()),
        reopened: Arc::new(open()),
        _dir: Some(dir),
        #[cfg(feature = "redis")]
        _keys: None,
    }
}

#[cfg(feature = "redis")]
fn redis() -> Fixture {
    use crate::redis::{RedisStore, testing};
    let prefix = testing::unique_prefix();
    let keys = testing::KeySweeper::for_prefix(prefix.clone());
    let open = || RedisStore::lazy(testing::URL, &prefix, Arc::new(crate::SystemClock)).unwrap();
    Fixture {
        store: Arc::new(open()),
        reopened: Arc::new(open()),
        _dir: None,
        _keys: Some(keys),
    }
}

fn chat(platform: &str, id: &str, name: &str, approved_ms: u64) -> ApprovedChat {
    ApprovedChat {
        platform: platform.to_string(),
        id: id.to_string(),
        name: name.to_string(),
        kind: "group".to_string(),
        approved_ms,
    }
}

async fn approved_chats_are_listed_per_platform_in_approval_order_by_the_next_process(f: &Fixture) {
    let s = &*f.store;
    assert_eq!(s.approved_chats(None).await.unwrap(), Vec::new());
    let late = chat("telegram", "-1001", "Team", 30);
    let early = chat("telegram", "42", "Ann", 10);
    let discord = chat("discord", "9001", "#general", 20);
    for c in [&late, &early, &discord] {
        s.approve_chat(c).await.unwrap();
    }
    assert_eq!(
        f.reopened.approved_chats(Some("telegram")).await.unwrap(),
        vec![early.clone(), late.clone()]
    );
    assert_eq!(
        f.reopened.approved_chats(None).await.unwrap(),
        vec![discord.clone(), early.clone(), late.clone()]
    );
    assert_eq!(
        f.reopened.approved_chat("discord", "9001").await.unwrap(),
        Some(discord)
    );
    // The same id on another platform is another chat.
    assert_eq!(
        f.reopened.approved_chat("discord", "42").await.unwrap(),
        None
    );
}

async fn approving_again_replaces_the_name_and_kind(f: &Fixture) {
    let s = &*f.store;
    s.approve_chat(&chat("telegram", "42", "Ann", 10))
        .await
        .unwrap();
    let renamed = ApprovedChat {
        kind: "private".to_string(),
        ..chat("telegram", "42", "Ann B.", 50)
    };
    s.approve_chat(&renamed).await.unwrap();
    assert_eq!(
        f.reopened.approved_chats(None).await.unwrap(),
        vec![renamed]
    );
}

async fn a_revoked_chat_is_gone_and_revoking_it_again_says_so(f: &Fixture) {
    let s = &*f.store;
    s.approve_chat(&chat("telegram", "42", "Ann", 10))
        .await
        .unwrap();
    // Ids with the key separator in them stay apart from their neighbours.
    let odd = chat("telegram", "4:2", "odd", 11);
    s.approve_chat(&odd).await.unwrap();
    assert!(!s.revoke_chat("discord", "42").await.unwrap());
    assert!(s.revoke_chat("telegram", "42").await.unwrap());
    assert!(!f.reopened.revoke_chat("telegram", "42").await.unwrap());
    assert_eq!(f.reopened.approved_chats(None).await.unwrap(), vec![odd]);
}

macro_rules! suite {
    ($backend:ident, $open:path) => {
        suite!($backend, $open, skip_if false);
    };
    ($backend:ident, $open:path, skip_if $skip:expr) => {
        mod $backend {
            suite!(@each $open, $skip;
                approved_chats_are_listed_per_platform_in_approval_order_by_the_next_process,
                approving_again_replaces_the_name_and_kind,
                a_revoked_chat_is_gone_and_revoking_it_again_says_so,
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
                super::$check(&fixture).await;
            }
        )*
    };
}

suite!(memory_backend, super::memory);
#[cfg(feature = "sqlite")]
suite!(sqlite_backend, super::sqlite);
#[cfg(feature = "redis")]
suite!(redis_backend, super::redis, skip_if crate::redis::testing::unavailable());
