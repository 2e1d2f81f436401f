//! Redis-only behaviour, beyond the shared suites: key layout and escaping, pub/sub, several
//! processes on one Redis, native TTLs, and search parity with the memory store.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use pretty_assertions::assert_eq;
use serde_json::json;

use super::testing::{self, KeySweeper, unavailable};
use super::{DEFAULT_PREFIX, RedisStore};
use crate::memory::MemoryStore;
use crate::suites::session::{entry, event, message, round, task};
use crate::{
    CACHE_TTL, CacheScope, Clock, ErrorMemory, ErrorRecord, ManualClock, Outcome, ResultCache,
    SessionStore, StoreError, SystemClock, Validity,
};

const START_MS: u64 = 1_700_000_000_000;

fn store() -> (RedisStore, KeySweeper) {
    testing::store(Arc::new(SystemClock))
}

/// The names of the keys under the store's prefix, without it.
fn key_names(store: &RedisStore, keys: &KeySweeper) -> BTreeSet<String> {
    keys.keys()
        .unwrap()
        .into_iter()
        .map(|key| key[store.keys.prefix.len()..].to_string())
        .collect()
}

#[tokio::test]
async fn a_round_writes_the_documented_keys() {
    if unavailable() {
        return;
    }
    let (store, keys) = store();
    let mut first = round("s1", "r1", 1);
    first.marked = vec!["grep".to_string()];
    first.todos = Some(Vec::new());
    first.dedupe_put = vec![entry("k1", "one", Validity::Always)];
    first.transcript = vec![message("r1", 1, "a")];
    first.events = vec![event(json!({"type": "round_started"}))];
    first.pending = Some(task("s1", "r1", "h", 1));
    store.commit_round(first).await.unwrap();
    let expected: BTreeSet<String> = [
        "session:s1",
        "marked:s1",
        "run:s1:r1",
        "dedupe:s1:r1",
        "dedupe-order:s1:r1",
        "transcript:s1",
        "events:s1",
        "pending:s1",
        "pending-order:s1",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    assert_eq!(key_names(&store, &keys), expected);
}

#[tokio::test]
async fn ids_with_colons_name_different_keys() {
    if unavailable() {
        return;
    }
    let (store, keys) = store();
    let mut left = round("a:b", "c", 1);
    left.dedupe_put = vec![entry("k", "left", Validity::Always)];
    store.commit_round(left).await.unwrap();
    let mut right = round("a", "b:c", 1);
    right.dedupe_put = vec![entry("k", "right", Validity::Always)];
    store.commit_round(right).await.unwrap();
    let mut percent = round("a%3Ab", "c", 1);
    percent.dedupe_put = vec![entry("k", "percent", Validity::Always)];
    store.commit_round(percent).await.unwrap();

    let mut seen = Vec::new();
    for (session, run) in [("a:b", "c"), ("a", "b:c"), ("a%3Ab", "c")] {
        let (_, snapshot) = store.load(session, run).await.unwrap();
        seen.push(snapshot.dedupe[0].result.clone());
    }
    assert_eq!(seen, vec!["left", "right", "percent"]);
    assert!(key_names(&store, &keys).contains("run:a%3Ab:c"));

    let (left, right) = (
        CacheScope::Session {
            session: "a:b".to_string(),
        },
        CacheScope::Session {
            session: "a".to_string(),
        },
    );
    store
        .cache_put(&left, "c", "left", CACHE_TTL)
        .await
        .unwrap();
    assert_eq!(store.cache_get(&right, "b:c").await.unwrap(), None);
    assert_eq!(store.cache_get(&right, "c").await.unwrap(), None);
}

#[tokio::test]
async fn each_committed_round_publishes_its_events_once_with_their_sequence_numbers() {
    if unavailable() {
        return;
    }
    let (store, _keys) = store();
    let mut subscriber = ::redis::Client::open(testing::URL)
        .unwrap()
        .get_connection()
        .unwrap();
    let mut pubsub = subscriber.as_pubsub();
    pubsub.subscribe(store.keys.events("s1")).unwrap();
    pubsub
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();

    let mut first = round("s1", "r1", 1);
    first.events = vec![event(json!({"type": "a"})), event(json!({"type": "b"}))];
    let committed = store.commit_round(first).await.unwrap();
    assert_eq!(committed.events, 1..3);
    // A refused round publishes nothing.
    let mut stale = round("s1", "r1", 1);
    stale.events = vec![event(json!({"type": "lost"}))];
    assert!(store.commit_round(stale).await.is_err());
    let mut second = round("s1", "r1", 2);
    second.events = vec![event(json!({"type": "c"}))];
    assert_eq!(store.commit_round(second).await.unwrap().events, 3..4);

    let mut published = Vec::new();
    for _ in 0..2 {
        let payload: String = pubsub.get_message().unwrap().get_payload().unwrap();
        published.push(serde_json::from_str::<serde_json::Value>(&payload).unwrap());
    }
    assert_eq!(
        published,
        vec![
            json!({"first_seq": 1, "events": [{"type": "a"}, {"type": "b"}]}),
            json!({"first_seq": 3, "events": [{"type": "c"}]}),
        ]
    );
    let stored: Vec<u64> = store
        .events("s1", 0)
        .await
        .unwrap()
        .into_iter()
        .map(|(seq, _)| seq)
        .collect();
    assert_eq!(stored, vec![1, 2, 3]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_processes_share_a_session_and_only_one_commits_a_round() {
    if unavailable() {
        return;
    }
    let (one, _keys) = store();
    let two = RedisStore::lazy(testing::URL, &one.keys.prefix, Arc::new(SystemClock)).unwrap();
    let two = Arc::new(two);
    let one = Arc::new(one);

    let mut first = round("s1", "r1", 1);
    first.marked = vec!["grep".to_string()];
    one.commit_round(first).await.unwrap();
    let (session, run) = two.load("s1", "r1").await.unwrap();
    assert_eq!(session.marked.len(), 1);
    assert_eq!(run.rounds, 1);

    // Both "processes" commit round 2 at once, many times over: exactly one wins each time.
    for n in 2..12 {
        let tasks = [Arc::clone(&one), Arc::clone(&two)].map(|store| {
            tokio::spawn(async move {
                let mut record = round("s1", "r1", n);
                record.transcript = vec![message("r1", n, "x")];
                store.commit_round(record).await
            })
        });
        let mut outcomes = Vec::new();
        for task in tasks {
            outcomes.push(task.await.unwrap());
        }
        let won = outcomes.iter().filter(|o| o.is_ok()).count();
        let refused = outcomes
            .iter()
            .filter(|o| matches!(o, Err(StoreError::Conflict { round, .. }) if *round == n))
            .count();
        assert_eq!((won, refused), (1, 1), "round {n}: {outcomes:?}");
    }
    assert_eq!(one.transcript("s1", None).await.unwrap().len(), 10);
}

#[tokio::test]
async fn open_by_url_picks_redis_without_connecting() {
    if unavailable() {
        return;
    }
    // A local fallback file of the test's own: never the user's default store.
    let dir = tempfile::tempdir().unwrap();
    let url = format!(
        "{}?local={}",
        testing::URL,
        dir.path().join("local.db").display()
    );
    let store = crate::open(&url).unwrap();
    // Only a read, of a session nobody has: the default prefix may hold real data.
    let nobody = testing::unique_prefix();
    assert_eq!(store.load(&nobody, "r").await.unwrap(), Default::default());

    let bad = crate::open("redis://127.0.0.1:not-a-port/0");
    assert!(
        matches!(bad, Err(StoreError::BadUrl { .. })),
        "{:?}",
        bad.err()
    );
    // Opening is lazy: an unreachable Redis is an `Unavailable` error at the first call
    // (`open` itself would fall back to a local store: see tiered.rs).
    let down = RedisStore::open("redis://127.0.0.1:1/0").unwrap();
    assert!(matches!(
        down.load("s", "r").await,
        Err(StoreError::Unavailable(_))
    ));
    assert_eq!(DEFAULT_PREFIX, "td:v1:");
}

#[tokio::test]
async fn cache_entries_carry_a_native_ttl_and_hashed_names() {
    if unavailable() {
        return;
    }
    let (store, keys) = store();
    let scope = CacheScope::Session {
        session: "s1".to_string(),
    };
    let key = "GET https://api.example.com/me Authorization: Bearer secret";
    store.cache_put(&scope, key, "v", CACHE_TTL).await.unwrap();
    store
        .cache_put(&CacheScope::Shared, "forever", "v", Duration::MAX)
        .await
        .unwrap();

    let names = key_names(&store, &keys);
    assert!(
        names.iter().all(|name| !name.contains("secret")),
        "{names:?}"
    );
    let mut conn = store.connection().await.unwrap();
    let session_key = store.cache_key(&scope, key);
    let ttl: i64 = ::redis::cmd("PTTL")
        .arg(&session_key)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(ttl > 0 && ttl <= 30 * 60 * 1000, "{ttl}");
    let forever: i64 = ::redis::cmd("PTTL")
        .arg(store.cache_key(&CacheScope::Shared, "forever"))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(forever, -1, "no expiry");
}

fn record(tool: &str, symptom: &str, at: u64) -> ErrorRecord {
    ErrorRecord::new(
        tool,
        &["PDF".to_string(), "Ünïcode".to_string()],
        symptom,
        "wrong dir: see /tmp/x",
        "used find_files first",
        Outcome::Resolved,
        at,
    )
}

#[tokio::test]
async fn error_search_finds_what_the_memory_store_finds() {
    if unavailable() {
        return;
    }
    let clock = Arc::new(ManualClock::at(START_MS));
    let (redis, _keys) = testing::store(clock.clone());
    let memory = MemoryStore::with_clock(clock.clone());
    let records = [
        record("read_files", "file not found in docs", START_MS),
        record("read_files", "permission denied", START_MS + 1),
        record("fetch_page", "HTTP 403 Forbidden", START_MS + 2),
        record("fetch_page", "request timed out", START_MS + 3),
    ];
    for r in &records {
        redis.error_write(r.clone()).await.unwrap();
        memory.error_write(r.clone()).await.unwrap();
    }
    // Substrings, short words, case, punctuation and non-ASCII, as `matches` reads them.
    let queries = [
        "",
        "ound",
        "no",
        "FOUND docs",
        "403",
        "forbid",
        "ünï",
        "ÜNÏCODE",
        "dir:",
        "/tmp/x",
        "error_type:permission",
        "read_files denied",
        "fetch timed",
        "absent",
        "x",
    ];
    for query in queries {
        for tool in [None, Some("read_files"), Some("fetch_page"), Some("nope")] {
            let want = memory.error_search(tool, query, 10).await.unwrap();
            let got = redis.error_search(tool, query, 10).await.unwrap();
            assert_eq!(got, want, "query {query:?}, tool {tool:?}");
        }
    }
}

#[tokio::test]
async fn replacing_an_error_record_drops_its_old_index_entries() {
    if unavailable() {
        return;
    }
    let clock = Arc::new(ManualClock::at(START_MS));
    let (store, keys) = testing::store(clock.clone());
    let mut r = record("read_files", "zzzqqq", START_MS);
    store.error_write(r.clone()).await.unwrap();
    r.symptom = "something else".to_string();
    r.tool_name = "other_tool".to_string();
    store.error_write(r.clone()).await.unwrap();
    let names = key_names(&store, &keys);
    assert!(!names.contains("errors:gram:zzz"), "{names:?}");
    assert!(!names.contains("errors:tool:read_files"), "{names:?}");
    assert_eq!(store.error_search(None, "zzz", 5).await.unwrap(), vec![]);

    // A write after the record is due forgets it and every one of its index entries.
    clock.advance(u64::try_from(crate::ERROR_TTL.as_millis()).unwrap());
    let other = record("t", "new", clock.now_ms());
    store.error_write(other.clone()).await.unwrap();
    let names = key_names(&store, &keys);
    assert!(!names.contains("errors:tool:other_tool"), "{names:?}");
    assert!(!names.contains(&format!("errors:id:{}", r.id)), "{names:?}");
    assert_eq!(store.error_search(None, "", 5).await.unwrap(), vec![other]);
}

#[tokio::test]
async fn a_fixture_deletes_its_keys_and_no_others() {
    if unavailable() {
        return;
    }
    let (store, keys) = store();
    let (neighbour, neighbour_keys) = testing::store(Arc::new(SystemClock));
    store.commit_round(round("s1", "r1", 1)).await.unwrap();
    neighbour.commit_round(round("s1", "r1", 1)).await.unwrap();
    let probe = KeySweeper::for_prefix(store.keys.prefix.clone());
    drop(store);
    drop(keys);
    assert_eq!(probe.keys().unwrap(), Vec::<String>::new());
    assert_eq!(neighbour_keys.keys().unwrap().len(), 1);
}

/// The env var that turns `another_process_writes_cache_entries` from a no-op into the child
/// half of `two_os_processes_share_fetch_entries_and_not_session_entries`.
const CHILD_PREFIX_VAR: &str = "TOOLDISPATCH_TEST_CHILD_REDIS_PREFIX";

/// The child half: run by the parent test in a separate OS process (this test binary, started
/// again with `--ignored --exact`), it writes a shared and a session entry under the prefix
/// the parent chose.
#[tokio::test]
#[ignore = "run by two_os_processes_share_fetch_entries_and_not_session_entries as a child"]
async fn another_process_writes_cache_entries() {
    let Ok(prefix) = std::env::var(CHILD_PREFIX_VAR) else {
        return;
    };
    let store = RedisStore::lazy(testing::URL, &prefix, Arc::new(SystemClock)).unwrap();
    let child = CacheScope::Session {
        session: "child-session".into(),
    };
    store
        .cache_put(
            &CacheScope::Shared,
            "fetch_page|https://example.org/",
            "page body",
            CACHE_TTL,
        )
        .await
        .unwrap();
    store
        .cache_put(&child, "search_web|rust", "child's results", CACHE_TTL)
        .await
        .unwrap();
    // And it must see what the parent wrote before starting it, and not the parent's session.
    let seen = store
        .cache_get(&CacheScope::Shared, "fetch_page|https://parent.example/")
        .await
        .unwrap()
        .map(|hit| hit.value);
    assert_eq!(seen.as_deref(), Some("parent's page"));
    let parent = CacheScope::Session {
        session: "parent-session".into(),
    };
    assert_eq!(
        store.cache_get(&parent, "search_web|rust").await.unwrap(),
        None
    );
    assert_eq!(
        store.cache_get(&child, "search_web|parent").await.unwrap(),
        None
    );
}

#[tokio::test]
async fn two_os_processes_share_fetch_entries_and_not_session_entries() {
    if unavailable() {
        return;
    }
    let prefix = testing::unique_prefix();
    let _keys = KeySweeper::for_prefix(prefix.clone());
    let store = RedisStore::lazy(testing::URL, &prefix, Arc::new(SystemClock)).unwrap();
    let parent = CacheScope::Session {
        session: "parent-session".into(),
    };
    store
        .cache_put(
            &CacheScope::Shared,
            "fetch_page|https://parent.example/",
            "parent's page",
            CACHE_TTL,
        )
        .await
        .unwrap();
    store
        .cache_put(&parent, "search_web|parent", "parent's results", CACHE_TTL)
        .await
        .unwrap();

    let exe = std::env::current_exe().unwrap();
    let out = std::process::Command::new(exe)
        .args([
            "--ignored",
            "--exact",
            "redis::tests::another_process_writes_cache_entries",
            "--nocapture",
        ])
        .env(CHILD_PREFIX_VAR, &prefix)
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the child process failed:\n{text}");
    assert!(
        text.contains("1 passed"),
        "the child test did not run:\n{text}"
    );

    // The child's shared fetch entry is visible here; its session entry is not.
    let hit = store
        .cache_get(&CacheScope::Shared, "fetch_page|https://example.org/")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(hit.value, "page body");
    assert_eq!(
        store.cache_get(&parent, "search_web|rust").await.unwrap(),
        None
    );
    let child = CacheScope::Session {
        session: "child-session".into(),
    };
    assert_eq!(
        store
            .cache_get(&child, "search_web|rust")
            .await
            .unwrap()
            .map(|h| h.value)
            .as_deref(),
        Some("child's results"),
        "the child's session entry is there for the child's session"
    );
}
