//! DESIGN §7: a Redis outage degrades to the local SQLite store with one warning event; it
//! never fails a round.

use std::sync::Arc;

use dispatch_engine::Status;
use dispatch_store::SessionStore;
use dispatch_store::tiered::TieredStore;
use serde_json::json;

use super::support::*;

#[tokio::test]
async fn rounds_over_an_unreachable_redis_run_locally_with_one_store_degraded_event() {
    let data = tempfile::TempDir::new().unwrap();
    let local = data.path().join("store.db");
    // Nothing listens on port 1: every connection is refused.
    let url = format!("redis://127.0.0.1:1/0?local={}", local.display());
    let tiered = Arc::new(TieredStore::open(&url).unwrap());
    let store: Arc<dyn SessionStore> = tiered.clone();
    let fx = fixture()
        .tool(TestTool::new(spec("echo"), Behaviour::Echo))
        .store(Arc::clone(&store))
        .build();

    // The first round (marking) meets the outage.
    fx.mark_all("s").await;
    let first = fx
        .run("s", "r", vec![wrapped("a", "echo", json!({"x": 1}))])
        .await;
    assert_eq!(first.results[0].status, Status::Ok);
    let second = fx
        .run("s", "r", vec![wrapped("b", "echo", json!({"x": 2}))])
        .await;
    assert_eq!(second.results[0].status, Status::Ok);
    assert_eq!(second.round, 2);

    // Exactly one StoreDegraded across the rounds, committed with the first round's events.
    let outcomes: Vec<String> = [&first, &second]
        .iter()
        .flat_map(|o| event_types(&o.events, None))
        .filter(|t| t == "StoreDegraded")
        .collect();
    assert!(outcomes.is_empty(), "{outcomes:?}");
    let stored: Vec<serde_json::Value> = store
        .events("s", 0)
        .await
        .unwrap()
        .into_iter()
        .map(|(_, text)| serde_json::from_str(&text).unwrap())
        .collect();
    let degraded: Vec<&serde_json::Value> = stored
        .iter()
        .filter(|e| e["type"] == "StoreDegraded")
        .collect();
    assert_eq!(degraded.len(), 1, "{stored:?}");
    let text = degraded[0]["text"].as_str().unwrap();
    assert!(text.contains("redis://127.0.0.1:1/0"), "{text}");
    assert!(text.contains(&local.display().to_string()), "{text}");
    assert_eq!(tiered.local_path(), local.as_path());
}
