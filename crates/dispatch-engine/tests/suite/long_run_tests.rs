//! One long run (issue 14): a round loads only the entries its calls look up, and a mutating
//! call invalidates through the store's path index rather than a scan, so thousands of rounds
//! in one run keep deduping (and invalidating) exactly as the first ones did. No timing is
//! asserted; the cost is measured by `tooldispatch bench runlen`.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use dispatch_engine::{Effect, Status};
use dispatch_store::SessionStore;
use serde_json::json;

use super::support::*;

const ROUNDS: u64 = 5_000;

async fn long_run_keeps_dedupe_and_invalidation_exact(store: Option<Arc<dyn SessionStore>>) {
    let (read, reads) = counted(spec("read").effect(Effect::ReadsPaths), Behaviour::ReadPath);
    let (pure, pures) = counted(spec("pure"), Behaviour::Echo);
    let writer = TestTool::new(
        serial_spec("write").effect(Effect::Mutates),
        Behaviour::WritePath,
    );
    let mut builder = fixture().tool(read).tool(pure).tool(writer);
    if let Some(store) = store {
        builder = builder.store(store);
    }
    let fx = builder.build();
    for name in ["a.txt", "b.txt", "c.txt"] {
        std::fs::write(fx.file(name), name).unwrap();
    }
    fx.mark_all("s").await;
    let read = |id: &str, name: &str| wrapped(id, "read", json!({ "path": name }));
    let first = |id: &str| wrapped(id, "pure", json!({"first": true}));
    let statuses = |out: &dispatch_engine::RoundOutcome| -> Vec<Status> {
        out.results.iter().map(|r| r.status).collect()
    };

    // Round 1: a pure call and three reads, all run.
    let out = fx
        .run(
            "s",
            "r",
            vec![
                first("p1"),
                read("a1", "a.txt"),
                read("b1", "b.txt"),
                read("c1", "c.txt"),
            ],
        )
        .await;
    assert_eq!(statuses(&out), vec![Status::Ok; 4]);
    // Where each round's events landed in the session's log, as its commit numbered them.
    let mut numbered = vec![out.event_seqs.clone()];
    // Rounds 2..ROUNDS-2: distinct calls, so the run's entries pile up; every 100th round
    // also writes a file no read covers, so the path index grows and the epoch moves on.
    for n in 2..ROUNDS - 1 {
        let mut calls = vec![
            wrapped(&format!("x{n}"), "pure", json!({ "i": n })),
            wrapped(&format!("y{n}"), "pure", json!({ "j": n })),
        ];
        if n % 100 == 0 {
            calls.push(wrapped(
                &format!("w{n}"),
                "write",
                json!({ "path": format!("other{n}.txt") }),
            ));
        }
        let out = fx.run("s", "r", calls).await;
        numbered.push(out.event_seqs.clone());
        assert!(
            out.results.iter().all(|r| r.status == Status::Ok),
            "round {n}: {:?}",
            statuses(&out)
        );
    }
    // Round ROUNDS-1: an edit of a.txt.
    let out = fx
        .run(
            "s",
            "r",
            vec![wrapped("wa", "write", json!({"path": "a.txt"}))],
        )
        .await;
    assert_eq!(statuses(&out), vec![Status::Ok]);
    numbered.push(out.event_seqs.clone());
    let (reads_before, pures_before) = (reads.load(Ordering::SeqCst), pures.load(Ordering::SeqCst));
    // Round ROUNDS: the pure call of round 1 and the reads of b and c are still remembered;
    // the read of a.txt runs again and sees the edit.
    let out = fx
        .run(
            "s",
            "r",
            vec![
                first("pN"),
                read("aN", "a.txt"),
                read("bN", "b.txt"),
                read("cN", "c.txt"),
            ],
        )
        .await;
    assert_eq!(
        statuses(&out),
        vec![
            Status::Deduped,
            Status::Ok,
            Status::Deduped,
            Status::Deduped
        ]
    );
    assert_eq!(out.results[1].content, "[read] a.txtx");
    assert_eq!(reads.load(Ordering::SeqCst), reads_before + 1);
    assert_eq!(pures.load(Ordering::SeqCst), pures_before);
    numbered.push(out.event_seqs.clone());
    let (_, run) = fx.store.load("s", "r").await.unwrap();
    assert_eq!(run.rounds, ROUNDS);

    // The events log: every round's events under the numbers its commit returned, one
    // after another, each round closed by its RoundCommitted; read twice, the same log.
    let start = numbered[0].start;
    let log = fx.store.events("s", start - 1).await.unwrap();
    assert_eq!(log, fx.store.events("s", start - 1).await.unwrap());
    let seqs: Vec<u64> = log.iter().map(|(seq, _)| *seq).collect();
    let expected: Vec<u64> = numbered.iter().flat_map(|r| r.clone()).collect();
    assert_eq!(seqs, expected, "contiguous, in round order");
    for (round, range) in numbered.iter().enumerate() {
        let last = range.end - 1;
        let (_, json) = log.iter().find(|(seq, _)| *seq == last).unwrap();
        let event: serde_json::Value = serde_json::from_str(json).unwrap();
        assert_eq!(
            (event["type"].as_str(), event["round"].as_u64()),
            (Some("RoundCommitted"), Some(round as u64 + 1)),
            "{json}"
        );
    }
}

#[tokio::test]
async fn memory_long_run_keeps_dedupe_and_invalidation_exact() {
    long_run_keeps_dedupe_and_invalidation_exact(None).await;
}

#[tokio::test]
async fn sqlite_long_run_keeps_dedupe_and_invalidation_exact() {
    let dir = tempfile::tempdir().unwrap();
    let store = dispatch_store::sqlite::SqliteStore::open(&dir.path().join("store.db")).unwrap();
    long_run_keeps_dedupe_and_invalidation_exact(Some(Arc::new(store))).await;
}

/// Over Redis at 127.0.0.1:6379 under a fresh key prefix; skipped with a reason when Redis
/// does not answer, unless TOOLDISPATCH_REQUIRE_REDIS=1.
#[tokio::test]
async fn redis_long_run_keeps_dedupe_and_invalidation_exact() {
    use dispatch_store::redis::RedisStore;
    const URL: &str = "redis://127.0.0.1:6379/";
    let connected = redis::Client::open(URL).and_then(|client| {
        let mut conn = client.get_connection_with_timeout(std::time::Duration::from_secs(1))?;
        redis::cmd("PING").query::<String>(&mut conn)?;
        Ok(conn)
    });
    let mut conn = match connected {
        Ok(conn) => conn,
        Err(e) => {
            let reason = format!("Redis is not reachable at {URL} ({e})");
            dispatch_testkit::skip(dispatch_testkit::Need::Redis, &reason);
            return;
        }
    };
    let prefix = format!(
        "td:test:engine-long-run-{}-{}:",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    );
    let store = RedisStore::lazy(URL, &prefix, Arc::new(dispatch_store::SystemClock)).unwrap();
    long_run_keeps_dedupe_and_invalidation_exact(Some(Arc::new(store))).await;
    // Only this test's keys (the machine's Redis may be shared: never FLUSHDB).
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{prefix}*"))
        .query(&mut conn)
        .unwrap();
    if !keys.is_empty() {
        redis::cmd("DEL")
            .arg(&keys)
            .query::<i64>(&mut conn)
            .unwrap();
    }
}
