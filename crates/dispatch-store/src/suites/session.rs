//! One behaviour suite for every `SessionStore` backend: each check is written once, as an
//! async fn over `&dyn SessionStore`, and instantiated per backend at the bottom.

use std::collections::BTreeSet;
use std::sync::Arc;

use pretty_assertions::assert_eq;
use serde_json::json;
use tempfile::TempDir;

use crate::memory::MemoryStore;
use crate::{
    DedupeEntry, PendingTask, RoundRecord, RunSnapshot, SessionSnapshot, SessionStore, StoreError,
    Todo, TodoStatus, TranscriptEntry, TranscriptMessage, Validity,
};

/// A store plus whatever must outlive it; the store drops first.
struct Fixture {
    store: Arc<dyn SessionStore>,
    _dir: Option<TempDir>,
}

fn memory() -> Fixture {
    Fixture {
        store: Arc::new(MemoryStore::default()),
        _dir: None,
    }
}

#[cfg(feature = "sqlite")]
fn sqlite() -> Fixture {
    let dir = TempDir::new().unwrap();
    let store = crate::sqlite::SqliteStore::open(&dir.path().join("store.db")).unwrap();
    Fixture {
        store: Arc::new(store),
        _dir: Some(dir),
    }
}

/// A Redis store under a prefix of its own; its keys are deleted after the store drops.
#[cfg(feature = "redis")]
struct RedisFixture {
    store: Arc<dyn SessionStore>,
    _keys: crate::redis::testing::KeySweeper,
}

#[cfg(feature = "redis")]
fn redis() -> RedisFixture {
    let (store, keys) = crate::redis::testing::store(Arc::new(crate::SystemClock));
    RedisFixture {
        store: Arc::new(store),
        _keys: keys,
    }
}

pub(crate) fn round(session: &str, run: &str, round: u64) -> RoundRecord {
    RoundRecord {
        session: session.to_string(),
        run: run.to_string(),
        round,
        ..RoundRecord::default()
    }
}

pub(crate) fn entry(key: &str, result: &str, validity: Validity) -> DedupeEntry {
    DedupeEntry {
        key: key.to_string(),
        tool: "read_file".to_string(),
        result: result.to_string(),
        images: Vec::new(),
        validity,
        is_error: false,
    }
}

pub(crate) fn todo(content: &str, status: TodoStatus) -> Todo {
    Todo {
        content: content.to_string(),
        status,
        active_form: None,
    }
}

/// An event for a round record.
pub(crate) fn event(value: serde_json::Value) -> std::sync::Arc<dyn crate::EventJson> {
    std::sync::Arc::new(value)
}

pub(crate) fn message(run: &str, round: u64, text: &str) -> TranscriptEntry {
    TranscriptEntry {
        run: run.to_string(),
        round,
        in_tools: true,
        message: TranscriptMessage::Tool {
            tool_call_id: "c".to_string(),
            name: "t".to_string(),
            content: text.to_string(),
        },
    }
}

pub(crate) fn task(session: &str, run: &str, hash: &str, created_at_ms: u64) -> PendingTask {
    PendingTask {
        task_hash: hash.to_string(),
        session: session.to_string(),
        run: run.to_string(),
        tool_call_id: format!("call-{hash}"),
        id_made_up: false,
        called_as: None,
        tool: "ask_user".to_string(),
        args: json!({"questions": [{"question": "Proceed?"}]}),
        questions: json!([{"question": "Proceed?"}]),
        state: json!({"round": 1}),
        tool_results: vec![json!({"name": "ask_user", "id": format!("call-{hash}")})],
        todos: vec![todo("ask", TodoStatus::InProgress)],
        created_at_ms,
    }
}

fn names(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|name| name.to_string()).collect()
}

async fn unknown_session_and_run_load_empty(store: &dyn SessionStore) {
    let empty = (SessionSnapshot::default(), RunSnapshot::default());
    assert_eq!(store.load("nobody", "nothing").await.unwrap(), empty);
    assert_eq!(store.transcript("nobody", None).await.unwrap(), vec![]);
    assert_eq!(store.events("nobody", 0).await.unwrap(), vec![]);
    assert_eq!(store.pending("nobody").await.unwrap(), vec![]);

    // A known session with an unknown run: session state, but an empty run.
    let mut first = round("s1", "r1", 1);
    first.marked = vec!["grep".to_string()];
    first.write_epoch = 3;
    first.dedupe_put = vec![entry("k1", "one", Validity::Always)];
    store.commit_round(first).await.unwrap();
    let (session, run) = store.load("s1", "r2").await.unwrap();
    assert_eq!(session.marked, names(&["grep"]));
    assert_eq!(run, RunSnapshot::default());
}

async fn session_state_accumulates_across_rounds(store: &dyn SessionStore) {
    let listed = vec![
        todo("read", TodoStatus::Completed),
        todo("write", TodoStatus::Pending),
    ];
    let mut first = round("s1", "r1", 1);
    first.marked = vec!["grep".to_string(), "edit_file".to_string()];
    first.todos = Some(listed.clone());
    store.commit_round(first).await.unwrap();

    // No todos in this round: the list stays; marked names add up, duplicates collapse.
    let mut second = round("s1", "r1", 2);
    second.marked = vec!["grep".to_string(), "web_search".to_string()];
    store.commit_round(second).await.unwrap();
    let (session, _) = store.load("s1", "r1").await.unwrap();
    assert_eq!(
        session,
        SessionSnapshot {
            marked: names(&["edit_file", "grep", "web_search"]),
            todos: listed,
        }
    );

    // Session state is shared by the session's runs; an empty list replaces a full one.
    let mut other_run = round("s1", "r2", 1);
    other_run.todos = Some(Vec::new());
    store.commit_round(other_run).await.unwrap();
    let (session, _) = store.load("s1", "r1").await.unwrap();
    assert_eq!(
        session,
        SessionSnapshot {
            marked: names(&["edit_file", "grep", "web_search"]),
            todos: Vec::new(),
        }
    );

    // Other sessions see none of it.
    let (session, _) = store.load("s2", "r1").await.unwrap();
    assert_eq!(session, SessionSnapshot::default());
}

async fn run_state_and_dedupe_follow_each_round(store: &dyn SessionStore) {
    let k1 = entry("k1", "one", Validity::Always);
    let k2 = entry(
        "k2",
        "two",
        Validity::Paths {
            paths: vec!["/w/a.rs".to_string()],
        },
    );
    let mut first = round("s1", "r1", 1);
    first.write_epoch = 1;
    first.turn_allow_all = true;
    first.dedupe_put = vec![k1.clone(), k2.clone()];
    store.commit_round(first).await.unwrap();
    let (_, run) = store.load("s1", "r1").await.unwrap();
    assert_eq!(
        run,
        RunSnapshot {
            rounds: 1,
            write_epoch: 1,
            turn_allow_all: true,
            dedupe: vec![k1.clone(), k2.clone()],
        }
    );

    // Replace k1 (it keeps its place), drop k2, add k3.
    let k1_again = DedupeEntry {
        images: vec!["data:image/png;base64,AAAA".to_string()],
        ..entry("k1", "one, again", Validity::Epoch { epoch: 2 })
    };
    let k3 = DedupeEntry {
        is_error: true,
        ..entry("k3", "three", Validity::Epoch { epoch: 2 })
    };
    let mut second = round("s1", "r1", 2);
    second.write_epoch = 2;
    second.dedupe_put = vec![k3.clone(), k1_again.clone()];
    second.dedupe_drop = vec!["k2".to_string(), "never-stored".to_string()];
    store.commit_round(second).await.unwrap();
    let (_, run) = store.load("s1", "r1").await.unwrap();
    assert_eq!(
        run,
        RunSnapshot {
            rounds: 2,
            write_epoch: 2,
            turn_allow_all: false,
            dedupe: vec![k1_again.clone(), k3.clone()],
        }
    );

    // A dropped key put again goes to the end; a key both put and dropped in one round is gone.
    let mut third = round("s1", "r1", 3);
    third.write_epoch = 2;
    third.dedupe_put = vec![k2.clone(), entry("k4", "four", Validity::Always)];
    third.dedupe_drop = vec!["k4".to_string()];
    store.commit_round(third).await.unwrap();
    let (_, run) = store.load("s1", "r1").await.unwrap();
    assert_eq!(run.rounds, 3);
    assert_eq!(run.dedupe, vec![k1_again, k3, k2]);

    // Dedupe belongs to the run: the same key in another run or session is another entry.
    let mut other = round("s1", "r2", 1);
    other.dedupe_put = vec![entry("k1", "other run", Validity::Always)];
    store.commit_round(other).await.unwrap();
    let (_, run) = store.load("s1", "r2").await.unwrap();
    assert_eq!(run.dedupe, vec![entry("k1", "other run", Validity::Always)]);
    let (_, run) = store.load("s2", "r1").await.unwrap();
    assert_eq!(run, RunSnapshot::default());
}

async fn transcript_keeps_commit_order_and_narrows_by_run(store: &dyn SessionStore) {
    let mut first = round("s1", "r1", 1);
    first.transcript = vec![message("r1", 1, "a"), message("r1", 1, "b")];
    store.commit_round(first).await.unwrap();
    let mut other_session = round("s2", "r1", 1);
    other_session.transcript = vec![message("r1", 1, "elsewhere")];
    store.commit_round(other_session).await.unwrap();
    let mut other_run = round("s1", "r2", 1);
    other_run.transcript = vec![TranscriptEntry {
        in_tools: false,
        message: TranscriptMessage::Assistant {
            tool_calls: vec![crate::RecordedCall {
                id: "c".to_string(),
                name: "t".to_string(),
                arguments: "{}".to_string(),
            }],
        },
        ..message("r2", 1, "c")
    }];
    store.commit_round(other_run.clone()).await.unwrap();
    let mut second = round("s1", "r1", 2);
    second.transcript = vec![message("r1", 2, "d")];
    store.commit_round(second).await.unwrap();

    let all = vec![
        message("r1", 1, "a"),
        message("r1", 1, "b"),
        other_run.transcript[0].clone(),
        message("r1", 2, "d"),
    ];
    assert_eq!(store.transcript("s1", None).await.unwrap(), all);
    assert_eq!(
        store.transcript("s1", Some("r1")).await.unwrap(),
        vec![
            message("r1", 1, "a"),
            message("r1", 1, "b"),
            message("r1", 2, "d")
        ]
    );
    assert_eq!(
        store.transcript("s1", Some("r2")).await.unwrap(),
        other_run.transcript
    );
    assert_eq!(store.transcript("s1", Some("r3")).await.unwrap(), vec![]);
    assert_eq!(
        store.transcript("s2", None).await.unwrap(),
        vec![message("r1", 1, "elsewhere")]
    );
}

async fn events_get_increasing_sequence_numbers(store: &dyn SessionStore) {
    let mut first = round("s1", "r1", 1);
    first.events = vec![
        event(json!({"type": "round_started"})),
        event(json!({"type": "tool_call"})),
    ];
    store.commit_round(first).await.unwrap();
    let mut elsewhere = round("s2", "r1", 1);
    elsewhere.events = vec![event(json!({"type": "elsewhere"}))];
    store.commit_round(elsewhere).await.unwrap();
    let mut second = round("s1", "r1", 2);
    second.events = vec![
        event(json!({"type": "tool_result"})),
        event(json!({"type": "round_finished"})),
        event(json!({"type": "run_finished"})),
    ];
    store.commit_round(second).await.unwrap();

    let events = store.events("s1", 0).await.unwrap();
    let values: Vec<String> = events.iter().map(|(_, event)| event.clone()).collect();
    assert_eq!(
        values,
        vec![
            json!({"type": "round_started"}).to_string(),
            json!({"type": "tool_call"}).to_string(),
            json!({"type": "tool_result"}).to_string(),
            json!({"type": "round_finished"}).to_string(),
            json!({"type": "run_finished"}).to_string(),
        ]
    );
    let seqs: Vec<u64> = events.iter().map(|(seq, _)| *seq).collect();
    assert!(seqs[0] > 0, "sequence numbers start above 0: {seqs:?}");
    assert!(
        seqs.windows(2).all(|pair| pair[0] < pair[1]),
        "sequence numbers increase: {seqs:?}"
    );

    // `after` is exclusive, so a client resumes with the last number it saw.
    assert_eq!(
        store.events("s1", seqs[1]).await.unwrap(),
        events[2..].to_vec()
    );
    assert_eq!(store.events("s1", seqs[4]).await.unwrap(), vec![]);
    assert_eq!(store.events("s1", u64::MAX).await.unwrap(), vec![]);
    let elsewhere = store.events("s2", 0).await.unwrap();
    assert_eq!(elsewhere.len(), 1);
    assert_eq!(elsewhere[0].1, json!({"type": "elsewhere"}).to_string());
}

async fn a_round_that_does_not_follow_the_last_one_is_refused(store: &dyn SessionStore) {
    let mut first = round("s1", "r1", 1);
    first.marked = vec!["grep".to_string()];
    store.commit_round(first).await.unwrap();
    for stale in [1, 3] {
        let mut record = round("s1", "r1", stale);
        record.marked = vec![format!("from round {stale}")];
        record.transcript = vec![message("r1", stale, "lost")];
        let refused = store.commit_round(record).await;
        assert!(
            matches!(refused, Err(StoreError::Conflict { round, .. }) if round == stale),
            "round {stale}: {refused:?}"
        );
    }
    let (session, run) = store.load("s1", "r1").await.unwrap();
    assert_eq!(session.marked, names(&["grep"]));
    assert_eq!(run.rounds, 1);
    assert_eq!(store.transcript("s1", None).await.unwrap().len(), 0);
    // Another run of the session is independent.
    store.commit_round(round("s1", "r2", 1)).await.unwrap();
}

fn journal_entry(session: &str, id: &str, started_ms: u64) -> crate::JournalEntry {
    crate::JournalEntry {
        id: id.to_string(),
        session: session.to_string(),
        run: "r1".to_string(),
        round: 1,
        tool_call_id: id.to_string(),
        tool_name: "edit".to_string(),
        arguments: "{}".to_string(),
        started_ms,
    }
}

async fn journal_entries_stay_open_until_a_commit_closes_them(store: &dyn SessionStore) {
    assert_eq!(store.journal_open("s1").await.unwrap(), vec![]);
    let (a, b) = (journal_entry("s1", "a", 20), journal_entry("s1", "b", 10));
    store.journal_begin(a.clone()).await.unwrap();
    store.journal_begin(b.clone()).await.unwrap();
    store
        .journal_begin(journal_entry("s2", "c", 5))
        .await
        .unwrap();
    assert_eq!(
        store.journal_open("s1").await.unwrap(),
        vec![b.clone(), a.clone()]
    );
    let mut record = round("s1", "r1", 1);
    record.journal_done = vec!["b".to_string(), "unknown".to_string()];
    store.commit_round(record).await.unwrap();
    assert_eq!(store.journal_open("s1").await.unwrap(), vec![a]);
    assert_eq!(store.journal_open("s2").await.unwrap().len(), 1);
}

async fn pending_tasks_come_oldest_first(store: &dyn SessionStore) {
    let mut first = round("s1", "r1", 1);
    first.pending = Some(task("s1", "r1", "late", 2_000));
    store.commit_round(first).await.unwrap();
    let mut second = round("s1", "r2", 1);
    second.pending = Some(task("s1", "r2", "early", 1_000));
    store.commit_round(second).await.unwrap();
    assert_eq!(
        store.pending("s1").await.unwrap(),
        vec![
            task("s1", "r2", "early", 1_000),
            task("s1", "r1", "late", 2_000)
        ]
    );

    // The same hash again replaces the task rather than adding one.
    let updated = PendingTask {
        state: json!({"round": 2}),
        ..task("s1", "r1", "late", 2_000)
    };
    let mut third = round("s1", "r1", 2);
    third.pending = Some(updated.clone());
    store.commit_round(third).await.unwrap();
    assert_eq!(
        store.pending("s1").await.unwrap(),
        vec![task("s1", "r2", "early", 1_000), updated.clone()]
    );
    assert_eq!(store.pending("s2").await.unwrap(), vec![]);

    // The round that answers a task removes it, in the same commit; another session's task
    // stays.
    let mut elsewhere = round("s2", "r1", 1);
    elsewhere.pending = Some(task("s2", "r1", "other", 3_000));
    store.commit_round(elsewhere).await.unwrap();
    let mut answer = round("s1", "r1", 3);
    answer.answered = vec!["late".to_string()];
    store.commit_round(answer).await.unwrap();
    assert_eq!(
        store.pending("s1").await.unwrap(),
        vec![task("s1", "r2", "early", 1_000)]
    );
    assert_eq!(
        store.pending("s2").await.unwrap(),
        vec![task("s2", "r1", "other", 3_000)]
    );
    // An answer whose round lost the race removes nothing.
    let mut stale = round("s1", "r2", 1);
    stale.answered = vec!["early".to_string()];
    assert!(store.commit_round(stale).await.is_err());
    assert_eq!(store.pending("s1").await.unwrap().len(), 1);
}

async fn concurrent_commits_on_distinct_runs_all_land(store: Arc<dyn SessionStore>) {
    let commits: Vec<_> = (0..32)
        .map(|i| {
            let store = Arc::clone(&store);
            tokio::spawn(async move {
                let run = format!("r{i}");
                let mut record = round("s1", &run, 1);
                record.write_epoch = i;
                record.marked = vec![format!("tool{i}")];
                record.dedupe_put = vec![entry(&format!("k{i}"), &run, Validity::Always)];
                record.transcript = vec![message(&run, 1, &run)];
                record.events = vec![event(json!({"run": run}))];
                store.commit_round(record).await
            })
        })
        .collect();
    for commit in commits {
        commit.await.unwrap().unwrap();
    }

    for i in 0..32 {
        let run = format!("r{i}");
        let (_, snapshot) = store.load("s1", &run).await.unwrap();
        assert_eq!(
            snapshot,
            RunSnapshot {
                rounds: 1,
                write_epoch: i,
                turn_allow_all: false,
                dedupe: vec![entry(&format!("k{i}"), &run, Validity::Always)],
            }
        );
    }
    let (session, _) = store.load("s1", "r0").await.unwrap();
    let expected: BTreeSet<String> = (0..32).map(|i| format!("tool{i}")).collect();
    assert_eq!(session.marked, expected);
    assert_eq!(store.transcript("s1", None).await.unwrap().len(), 32);
    let seqs: BTreeSet<u64> = store
        .events("s1", 0)
        .await
        .unwrap()
        .into_iter()
        .map(|(seq, _)| seq)
        .collect();
    assert_eq!(seqs.len(), 32, "every event has its own sequence number");
}

fn paths(paths: &[&str]) -> Validity {
    Validity::Paths {
        paths: paths.iter().map(|p| p.to_string()).collect(),
    }
}

async fn touched_paths_invalidate_exactly_the_entries_that_cover_them(store: &dyn SessionStore) {
    let a = entry("ka", "A", paths(&["/w/a"]));
    let ab = entry("kab", "AB", paths(&["/w/a", "/w/b"]));
    let b = entry("kb", "B", paths(&["/w/b"]));
    let always = entry("kx", "X", Validity::Always);
    let observed = entry("ko", "O", Validity::Epoch { epoch: 0 });
    let mut first = round("s1", "r1", 1);
    first.dedupe_put = vec![
        a.clone(),
        ab.clone(),
        b.clone(),
        always.clone(),
        observed.clone(),
    ];
    store.commit_round(first).await.unwrap();

    // Keyed loads return only what is asked for (unknown keys are skipped).
    let keys = |names: &[&str]| -> Vec<String> { names.iter().map(|k| k.to_string()).collect() };
    let (_, run) = store
        .load_keys("s1", "r1", &keys(&["kb", "nope", "ka"]))
        .await
        .unwrap();
    let mut got = run.dedupe.clone();
    got.sort_by(|x, y| x.key.cmp(&y.key));
    assert_eq!(got, vec![a.clone(), b.clone()]);
    assert_eq!(run.rounds, 1);

    // A round that touches /w/a: the entries covering it are gone, the rest stay.
    let mut second = round("s1", "r1", 2);
    second.write_epoch = 1;
    second.touched_paths = vec!["/w/a".to_string()];
    store.commit_round(second).await.unwrap();
    let all = keys(&["ka", "kab", "kb", "kx", "ko"]);
    let (_, run) = store.load_keys("s1", "r1", &all).await.unwrap();
    let mut got: Vec<String> = run.dedupe.iter().map(|e| e.key.clone()).collect();
    got.sort();
    // The epoch-scoped entry is the engine's to judge (its epoch is in the entry).
    assert_eq!(got, keys(&["kb", "ko", "kx"]));
    let (_, full) = store.load("s1", "r1").await.unwrap();
    assert_eq!(
        full.dedupe,
        vec![b.clone(), always.clone(), observed.clone()]
    );

    // Stored again after the touch: valid again.
    let mut third = round("s1", "r1", 3);
    third.write_epoch = 1;
    third.dedupe_put = vec![a.clone()];
    store.commit_round(third).await.unwrap();
    let (_, run) = store.load_keys("s1", "r1", &keys(&["ka"])).await.unwrap();
    assert_eq!(run.dedupe, vec![a.clone()]);

    // A round that may have touched anything: every path-scoped entry goes.
    let mut fourth = round("s1", "r1", 4);
    fourth.write_epoch = 2;
    fourth.touched_all = true;
    store.commit_round(fourth).await.unwrap();
    let (_, run) = store.load_keys("s1", "r1", &all).await.unwrap();
    let mut got: Vec<String> = run.dedupe.iter().map(|e| e.key.clone()).collect();
    got.sort();
    assert_eq!(got, keys(&["ko", "kx"]));

    // Another run of the session is not touched by this one's writes.
    let mut other = round("s1", "r2", 1);
    other.dedupe_put = vec![a.clone()];
    store.commit_round(other).await.unwrap();
    let (_, run) = store.load_keys("s1", "r2", &keys(&["ka"])).await.unwrap();
    assert_eq!(run.dedupe, vec![a]);
    let (_, run) = store.load_keys("s9", "r9", &keys(&["ka"])).await.unwrap();
    assert_eq!(run, RunSnapshot::default());
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
                unknown_session_and_run_load_empty,
                session_state_accumulates_across_rounds,
                run_state_and_dedupe_follow_each_round,
                transcript_keeps_commit_order_and_narrows_by_run,
                events_get_increasing_sequence_numbers,
                pending_tasks_come_oldest_first,
                a_round_that_does_not_follow_the_last_one_is_refused,
                journal_entries_stay_open_until_a_commit_closes_them,
                touched_paths_invalidate_exactly_the_entries_that_cover_them,
            );

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn concurrent_commits_on_distinct_runs_all_land() {
                if $skip {
                    return;
                }
                let fixture = $open();
                super::concurrent_commits_on_distinct_runs_all_land(Arc::clone(&fixture.store))
                    .await;
            }

            use std::sync::Arc;
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
                super::$check(&*fixture.store).await;
            }
        )*
    };
}

suite!(memory_backend, super::memory);
#[cfg(feature = "sqlite")]
suite!(sqlite_backend, super::sqlite);
#[cfg(feature = "redis")]
suite!(redis_backend, super::redis, skip_if crate::redis::testing::unavailable());
