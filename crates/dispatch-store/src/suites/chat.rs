//! One behaviour suite for every `ChatHistory` backend, instantiated per backend at the bottom.

use std::sync::Arc;

use pretty_assertions::assert_eq;
use tempfile::TempDir;

use crate::chat::{ChatHistory, RunSummary};
use crate::memory::MemoryStore;
use crate::suites::session::round;
use crate::{ManualClock, RecordedCall, SessionStore, TranscriptEntry, TranscriptMessage};

const START_MS: u64 = 1_700_000_000_000;

trait ChatStore: SessionStore + ChatHistory {}
impl<T: SessionStore + ChatHistory> ChatStore for T {}

struct Fixture {
    store: Arc<dyn ChatStore>,
    clock: Arc<ManualClock>,
    _dir: Option<TempDir>,
    #[cfg(feature = "redis")]
    _keys: Option<crate::redis::testing::KeySweeper>,
}

fn memory() -> Fixture {
    let clock = Arc::new(ManualClock::at(START_MS));
    Fixture {
        store: Arc::new(MemoryStore::with_clock(clock.clone())),
        clock,
        _dir: None,
        #[cfg(feature = "redis")]
        _keys: None,
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
        store: Arc::new(store),
        clock,
        _dir: Some(dir),
        #[cfg(feature = "redis")]
        _keys: None,
    }
}

#[cfg(feature = "redis")]
fn redis() -> Fixture {
    let clock = Arc::new(ManualClock::at(START_MS));
    let (store, keys) = crate::redis::testing::store(clock.clone());
    Fixture {
        store: Arc::new(store),
        clock,
        _dir: None,
        _keys: Some(keys),
    }
}

fn call(run: &str, round: u64, name: &str, args: &str) -> TranscriptEntry {
    TranscriptEntry {
        run: run.to_string(),
        round,
        in_tools: false,
        message: TranscriptMessage::Assistant {
            tool_calls: vec![RecordedCall {
                id: format!("c{round}"),
                name: name.to_string(),
                arguments: args.to_string(),
            }],
        },
    }
}

fn result(run: &str, round: u64, name: &str, content: &str) -> TranscriptEntry {
    TranscriptEntry {
        run: run.to_string(),
        round,
        in_tools: true,
        message: TranscriptMessage::Tool {
            tool_call_id: format!("c{round}"),
            name: name.to_string(),
            content: content.to_string(),
        },
    }
}

/// Commit one round of `run` in session s1 with a call and its result.
async fn exchange(f: &Fixture, run: &str, n: u64, name: &str, args: &str, content: &str) {
    let mut record = round("s1", run, n);
    record.transcript = vec![call(run, n, name, args), result(run, n, name, content)];
    f.store.commit_round(record).await.unwrap();
}

fn texts(hits: &[crate::chat::ChatHit]) -> Vec<String> {
    hits.iter()
        .map(|h| match &h.entry.message {
            TranscriptMessage::Tool { content, .. } => content.clone(),
            TranscriptMessage::Assistant { tool_calls } => tool_calls[0].arguments.clone(),
            TranscriptMessage::User { .. } => String::new(),
        })
        .collect()
}

async fn search_needs_every_word_whole_and_lists_newest_first(f: Fixture) {
    exchange(
        &f,
        "r1",
        1,
        "read_files",
        r#"{"path":"src/main.rs"}"#,
        "fn main() { panic!(\"Boom\") }",
    )
    .await;
    f.clock.advance(1_000);
    exchange(
        &f,
        "r1",
        2,
        "run_command",
        r#"{"argv":["cargo","test"]}"#,
        "test result: FAILED. boom in main",
    )
    .await;

    let hits = f
        .store
        .chat_search("s1", "BOOM main", None, 10)
        .await
        .unwrap();
    assert_eq!(
        texts(&hits),
        vec![
            "test result: FAILED. boom in main",
            "fn main() { panic!(\"Boom\") }"
        ]
    );
    assert!(hits[0].seq > hits[1].seq);
    assert_eq!((hits[0].at_ms, hits[1].at_ms), (START_MS + 1_000, START_MS));
    assert_eq!((hits[0].entry.run.as_str(), hits[0].entry.round), ("r1", 2));

    // Whole words only: "mai" is not "main"; every word must be there.
    assert!(
        f.store
            .chat_search("s1", "mai", None, 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        f.store
            .chat_search("s1", "boom nowhere", None, 10)
            .await
            .unwrap()
            .is_empty()
    );
    // Call names and arguments are searched too; underscores stay inside words.
    let by_call = f
        .store
        .chat_search("s1", "run_command cargo", None, 10)
        .await
        .unwrap();
    assert_eq!(
        texts(&by_call),
        vec![r#"{"argv":["cargo","test"]}"#],
        "only the call says cargo"
    );
    let named = f
        .store
        .chat_search("s1", "run_command", None, 10)
        .await
        .unwrap();
    assert_eq!(
        named.len(),
        2,
        "the call and its result both name run_command"
    );
    // The limit keeps the newest.
    let one = f.store.chat_search("s1", "main", None, 1).await.unwrap();
    assert_eq!(texts(&one), vec!["test result: FAILED. boom in main"]);
}

async fn search_honours_time_session_and_hostile_queries(f: Fixture) {
    exchange(
        &f,
        "r1",
        1,
        "fetch_page",
        r#"{"url":"https://a.example"}"#,
        "old page about rust",
    )
    .await;
    f.clock.advance(10_000);
    exchange(
        &f,
        "r1",
        2,
        "fetch_page",
        r#"{"url":"https://b.example"}"#,
        "new page about rust",
    )
    .await;
    let recent = f
        .store
        .chat_search("s1", "rust", Some(START_MS + 5_000), 10)
        .await
        .unwrap();
    assert_eq!(texts(&recent), vec!["new page about rust"]);
    assert!(
        f.store
            .chat_search("s2", "rust", None, 10)
            .await
            .unwrap()
            .is_empty()
    );
    // FTS syntax from the model is searched as words, never obeyed or an error.
    for query in [
        "rust OR x",
        "\"rust",
        "rust*",
        "NEAR(rust page)",
        "-rust",
        "page:rust",
        "",
    ] {
        let hits = f.store.chat_search("s1", query, None, 10).await;
        assert!(hits.is_ok(), "{query:?}: {hits:?}");
    }
    assert!(
        f.store
            .chat_search("s1", "  !! ", None, 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        f.store
            .chat_search("s1", "\"rust", None, 10)
            .await
            .unwrap()
            .len(),
        2
    );
}

async fn runs_are_listed_most_recent_first_with_counts(f: Fixture) {
    exchange(&f, "r1", 1, "calculate", "{}", "2").await;
    f.clock.advance(1_000);
    exchange(&f, "r2", 1, "calculate", "{}", "3").await;
    f.clock.advance(1_000);
    exchange(&f, "r1", 2, "calculate", "{}", "4").await;

    let runs = f.store.chat_runs("s1", None, 10).await.unwrap();
    assert_eq!(
        runs,
        vec![
            RunSummary {
                run: "r1".into(),
                rounds: 2,
                calls: 2,
                first_ms: START_MS,
                last_ms: START_MS + 2_000
            },
            RunSummary {
                run: "r2".into(),
                rounds: 1,
                calls: 1,
                first_ms: START_MS + 1_000,
                last_ms: START_MS + 1_000
            },
        ]
    );
    assert_eq!(f.store.chat_runs("s1", None, 1).await.unwrap().len(), 1);
    let since = f
        .store
        .chat_runs("s1", Some(START_MS + 1_500), 10)
        .await
        .unwrap();
    assert_eq!(since.len(), 1);
    assert_eq!((since[0].run.as_str(), since[0].rounds), ("r1", 1));
    assert!(
        f.store
            .chat_runs("nobody", None, 10)
            .await
            .unwrap()
            .is_empty()
    );
}

async fn a_run_is_read_in_commit_order_within_its_session(f: Fixture) {
    exchange(&f, "r1", 1, "calculate", "{\"e\":\"1+1\"}", "2").await;
    exchange(&f, "r2", 1, "calculate", "{}", "other run").await;
    f.clock.advance(1_000);
    exchange(&f, "r1", 2, "read_files", "{}", "contents").await;
    let mut elsewhere = round("s2", "r1", 1);
    elsewhere.transcript = vec![result("r1", 1, "calculate", "other session")];
    f.store.commit_round(elsewhere).await.unwrap();

    let hits = f.store.chat_read("s1", "r1", 10).await.unwrap();
    assert_eq!(texts(&hits), ["{\"e\":\"1+1\"}", "2", "{}", "contents"]);
    assert_eq!(
        hits.iter().map(|h| h.entry.round).collect::<Vec<_>>(),
        [1, 1, 2, 2]
    );
    assert!(hits.windows(2).all(|w| w[0].seq < w[1].seq));
    assert_eq!(hits[3].at_ms, START_MS + 1_000);
    assert_eq!(
        texts(&f.store.chat_read("s1", "r1", 2).await.unwrap()),
        ["{\"e\":\"1+1\"}", "2"]
    );
    assert!(f.store.chat_read("s1", "r1", 0).await.unwrap().is_empty());
    assert!(
        f.store
            .chat_read("s1", "nope", 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        f.store
            .chat_read("nobody", "r1", 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        texts(&f.store.chat_read("s2", "r1", 10).await.unwrap()),
        ["other session"]
    );
}

macro_rules! suite {
    ($backend:ident, $open:path) => {
        suite!($backend, $open, skip_if false);
    };
    ($backend:ident, $open:path, skip_if $skip:expr) => {
        mod $backend {
            suite!(@each $open, $skip;
                search_needs_every_word_whole_and_lists_newest_first,
                search_honours_time_session_and_hostile_queries,
                runs_are_listed_most_recent_first_with_counts,
                a_run_is_read_in_commit_order_within_its_session,
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
                super::$check($open()).await;
            }
        )*
    };
}

suite!(memory_backend, super::memory);
#[cfg(feature = "sqlite")]
suite!(sqlite_backend, super::sqlite);
#[cfg(feature = "redis")]
suite!(redis_backend, super::redis, skip_if crate::redis::testing::unavailable());
