//! `cargo bench -p dispatch-store`: what the stores cost, side by side, as ratios against the
//! memory store run in the same process (no wall-clock assertion anywhere: numbers are for
//! reading). Prints one JSON line per measurement.
//!
//! - `cache_get` / `cache_put`: one result-cache read (a hit) / write, per backend: memory,
//!   SQLite, Redis (skipped with a note when 127.0.0.1:6379 does not answer), and the tiered
//!   store (Redis + local SQLite) whose repeated reads come from its in-process tier.
//! - `commit_per_call`: one round commit of n=64 calls (a transcript message, two events and a
//!   dedupe entry per call) divided by 64, memory vs SQLite; the target is SQLite adding at
//!   most 20 µs per call, which one transaction per round makes possible.

#![allow(clippy::unwrap_used)] // a benchmark: any failure should stop it loudly

use std::sync::Arc;
use std::time::{Duration, Instant};

use dispatch_store::{
    CACHE_TTL, CacheScope, DedupeEntry, EventJson, ResultCache, RoundRecord, Store,
    TranscriptEntry, TranscriptMessage, Validity,
};
use serde_json::json;

const CALLS: u64 = 64;

fn median(mut samples: Vec<f64>) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

/// Median microseconds per operation over `reps` batches of `per_batch` operations.
async fn time_us<F, Fut>(reps: usize, per_batch: usize, mut op: F) -> f64
where
    F: FnMut(usize) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let mut samples = Vec::with_capacity(reps);
    let mut i = 0;
    for _ in 0..reps {
        let start = Instant::now();
        for _ in 0..per_batch {
            op(i).await;
            i += 1;
        }
        samples.push(start.elapsed().as_secs_f64() * 1e6 / per_batch as f64);
    }
    median(samples)
}

fn redis_up() -> bool {
    std::net::TcpStream::connect_timeout(
        &"127.0.0.1:6379".parse().unwrap(),
        Duration::from_millis(300),
    )
    .is_ok()
}

async fn cache_bench(
    name: &str,
    store: Arc<dyn ResultCache>,
    baseline: Option<(f64, f64)>,
) -> (f64, f64) {
    let scope = CacheScope::Session {
        session: "bench".into(),
    };
    let value = "x".repeat(2048);
    let put = time_us(15, 200, |i| {
        let (store, scope, value) = (store.clone(), scope.clone(), value.clone());
        async move {
            store
                .cache_put(&scope, &format!("k{}", i % 200), &value, CACHE_TTL)
                .await
                .unwrap();
        }
    })
    .await;
    let get = time_us(15, 200, |i| {
        let (store, scope) = (store.clone(), scope.clone());
        async move {
            let hit = store
                .cache_get(&scope, &format!("k{}", i % 200))
                .await
                .unwrap();
            assert!(hit.is_some(), "the benchmark reads what it wrote");
        }
    })
    .await;
    let ratio =
        |v: f64, b: Option<f64>| b.map_or(json!(1.0), |b| json!((v / b * 10.0).round() / 10.0));
    println!(
        "{}",
        json!({"bench": "cache_get", "store": name, "us_median": (get * 100.0).round() / 100.0,
               "x_memory": ratio(get, baseline.map(|b| b.0))})
    );
    println!(
        "{}",
        json!({"bench": "cache_put", "store": name, "us_median": (put * 100.0).round() / 100.0,
               "x_memory": ratio(put, baseline.map(|b| b.1))})
    );
    (get, put)
}

fn round_record(run: &str, round: u64) -> RoundRecord {
    let mut record = RoundRecord {
        session: "bench".into(),
        run: run.into(),
        round,
        ..RoundRecord::default()
    };
    for i in 0..CALLS {
        let id = format!("call_{round}_{i}");
        record.transcript.push(TranscriptEntry {
            run: run.into(),
            round,
            in_tools: true,
            message: TranscriptMessage::Tool {
                tool_call_id: id.clone(),
                name: "read_files".into(),
                content: format!("[read_files] {}", "line of a file\n".repeat(8)),
            },
        });
        for kind in ["ToolCall", "ToolResult"] {
            let event: Arc<dyn EventJson> =
                Arc::new(json!({"type": kind, "tool_id": id, "at_ms": 0.5}));
            record.events.push(event);
        }
        record.dedupe_put.push(DedupeEntry {
            key: format!("{round}-{i}"),
            tool: "read_files".into(),
            result: "ok".into(),
            images: Vec::new(),
            validity: Validity::Always,
            is_error: false,
        });
    }
    record
}

async fn commit_bench(name: &str, store: Arc<dyn Store>, baseline: Option<f64>) -> f64 {
    let mut samples = Vec::new();
    for r in 0..40u64 {
        let run = format!("run{}", r % 4);
        let round = r / 4 + 1;
        let record = round_record(&run, round);
        let start = Instant::now();
        store.commit_round(record).await.unwrap();
        samples.push(start.elapsed().as_secs_f64() * 1e6 / CALLS as f64);
    }
    let per_call = median(samples);
    let extra = baseline.map(|b| ((per_call - b) * 100.0).round() / 100.0);
    println!(
        "{}",
        json!({"bench": "commit_per_call", "store": name, "n": CALLS,
               "us_median": (per_call * 100.0).round() / 100.0,
               "extra_us_per_call_vs_memory": extra, "target_extra_us": 20})
    );
    per_call
}

fn main() {
    // `cargo test --benches` runs this with `--bench` absent; keep that quick and quiet.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let sqlite_url = format!("sqlite:{}", dir.path().join("bench.db").display());

        let memory = dispatch_store::open("memory:").unwrap();
        let base = cache_bench("memory", memory.clone(), None).await;
        cache_bench("sqlite", dispatch_store::open(&sqlite_url).unwrap(), Some(base)).await;
        if redis_up() {
            let local = dir.path().join("local.db");
            let prefix = format!("td:bench:{}:", std::process::id());
            let redis = dispatch_store::redis::RedisStore::lazy(
                "redis://127.0.0.1:6379/",
                &prefix,
                Arc::new(dispatch_store::SystemClock),
            )
            .unwrap();
            cache_bench("redis", Arc::new(redis), Some(base)).await;
            // Its own prefix too (not the default `td:v1:`), so the cleanup below finds it.
            let tiered_prefix = format!("{prefix}tiered:");
            let tiered = dispatch_store::tiered::TieredStore::new(
                Arc::new(
                    dispatch_store::redis::RedisStore::lazy(
                        "redis://127.0.0.1:6379/",
                        &tiered_prefix,
                        Arc::new(dispatch_store::SystemClock),
                    )
                    .unwrap(),
                ),
                Arc::new(dispatch_store::sqlite::SqliteStore::open(&local).unwrap()),
                "redis://127.0.0.1:6379/",
            );
            let tiered = Arc::new(tiered);
            cache_bench("tiered (in-process tier hits)", tiered, Some(base)).await;
            cleanup(&prefix);
        } else {
            println!("{}", json!({"bench": "cache", "store": "redis", "skipped": "nothing answers at 127.0.0.1:6379"}));
        }

        let memory_commit = commit_bench("memory", dispatch_store::open("memory:").unwrap(), None).await;
        let sqlite_url = format!("sqlite:{}", dir.path().join("commit.db").display());
        commit_bench("sqlite", dispatch_store::open(&sqlite_url).unwrap(), Some(memory_commit)).await;
    });
}

/// Delete the benchmark's Redis keys.
fn cleanup(prefix: &str) {
    let Ok(client) = redis::Client::open("redis://127.0.0.1:6379/") else {
        return;
    };
    let Ok(mut conn) = client.get_connection() else {
        return;
    };
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{prefix}*"))
        .query(&mut conn)
        .unwrap_or_default();
    if !keys.is_empty() {
        let _: redis::RedisResult<()> = redis::cmd("DEL").arg(keys).query(&mut conn);
    }
}
