//! One behaviour suite for every `AgentStore` backend, instantiated per backend at the bottom.

use std::sync::Arc;

use pretty_assertions::assert_eq;
use serde_json::json;
use tempfile::TempDir;

use crate::agents::{AgentStore, ConversationEntry, LegRecord, LegStatus};
use crate::memory::MemoryStore;

struct Fixture {
    store: Arc<dyn AgentStore>,
    /// A second handle on the same store, as the next process would open it.
    reopened: Arc<dyn AgentStore>,
    _dir: Option<TempDir>,
    #[cfg(feature = "redis")]
    _keys: Option<crate::redis::testing::KeySweeper>,
}

fn memory() -> Fixture {
    let store: Arc<dyn AgentStore> = Arc::new(MemoryStore::default());
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

fn entry(api: &str, message: serde_json::Value, at_ms: u64) -> ConversationEntry {
    ConversationEntry {
        api: api.to_string(),
        message,
        at_ms,
    }
}

fn leg(parent: &str, id: &str, started_ms: u64) -> LegRecord {
    LegRecord {
        parent: parent.to_string(),
        id: id.to_string(),
        session: format!("{parent}/{id}"),
        task: format!("task {id}"),
        model: "m".to_string(),
        status: LegStatus::Running,
        progress: None,
        result: None,
        input_tokens: 0,
        output_tokens: 0,
        started_ms,
        ended_ms: None,
        owner: "process-1".to_string(),
    }
}

async fn a_conversation_is_kept_in_order_per_session_and_read_by_the_next_process(f: &Fixture) {
    let s = &*f.store;
    assert_eq!(s.conversation("s").await.unwrap(), Vec::new());
    let user = entry(
        "gemini",
        json!({"role": "user", "parts": [{"text": "hi"}]}),
        1,
    );
    // A model turn as Gemini sent it, thought signature and all, then its results.
    let model = entry(
        "gemini",
        json!({"role": "model", "parts": [{"functionCall": {"name": "x", "args": {}}, "thoughtSignature": "c2ln"}]}),
        2,
    );
    let results = entry(
        "gemini",
        json!({"role": "user", "parts": [{"functionResponse": {"name": "x", "response": {"output": "é \u{0} ✓"}}}]}),
        3,
    );
    s.append_conversation("s", vec![user.clone()])
        .await
        .unwrap();
    s.append_conversation("s", vec![model.clone(), results.clone()])
        .await
        .unwrap();
    s.append_conversation("other", vec![user.clone()])
        .await
        .unwrap();
    s.append_conversation("s", Vec::new()).await.unwrap();
    assert_eq!(
        f.reopened.conversation("s").await.unwrap(),
        vec![user.clone(), model, results]
    );
    s.clear_conversation("s").await.unwrap();
    assert_eq!(f.reopened.conversation("s").await.unwrap(), Vec::new());
    assert_eq!(s.conversation("other").await.unwrap(), vec![user]);
}

async fn legs_are_replaced_in_place_and_listed_in_start_order(f: &Fixture) {
    let s = &*f.store;
    assert_eq!(s.legs("p").await.unwrap(), Vec::new());
    let (a, b, c) = (leg("p", "b-late", 30), leg("p", "a", 10), leg("p", "c", 20));
    for l in [&a, &b, &c] {
        s.put_leg(l).await.unwrap();
    }
    s.put_leg(&leg("elsewhere", "a", 5)).await.unwrap();
    let done = LegRecord {
        status: LegStatus::Done,
        result: Some("the answer".to_string()),
        input_tokens: 120,
        output_tokens: 7,
        ended_ms: Some(40),
        ..c.clone()
    };
    s.put_leg(&done).await.unwrap();
    assert_eq!(f.reopened.legs("p").await.unwrap(), vec![b, done, a]);
}

/// A leg still running under a process that is gone reads as interrupted; one running here
/// reads as running.
async fn a_running_leg_of_another_process_reads_as_interrupted(f: &Fixture) {
    f.store.put_leg(&leg("p", "x", 1)).await.unwrap();
    let stored = f.reopened.legs("p").await.unwrap().remove(0);
    assert_eq!(
        stored.clone().seen_by("process-1").status,
        LegStatus::Running
    );
    assert_eq!(stored.seen_by("process-2").status, LegStatus::Interrupted);
}

macro_rules! suite {
    ($backend:ident, $open:path) => {
        suite!($backend, $open, skip_if false);
    };
    ($backend:ident, $open:path, skip_if $skip:expr) => {
        mod $backend {
            suite!(@each $open, $skip;
                a_conversation_is_kept_in_order_per_session_and_read_by_the_next_process,
                legs_are_replaced_in_place_and_listed_in_start_order,
                a_running_leg_of_another_process_reads_as_interrupted,
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
