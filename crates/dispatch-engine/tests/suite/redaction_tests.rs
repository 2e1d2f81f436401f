//! Secrets never leave a round (DESIGN §3.17): a stored value reads `[secret:NAME]` in results,
//! events, the transcript and the dedupe map.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use dispatch_engine::{
    Engine, EngineConfig, Headless, Registry, RoundRequest, register_system_tools,
};
use dispatch_store::{Secrets, StoreError, StoreResult};
use pretty_assertions::assert_eq;
use serde_json::json;

use super::support::*;

/// A secrets store whose key file is gone.
struct Broken;

#[async_trait]
impl Secrets for Broken {
    async fn secret_set(&self, _: &str, _: &str) -> StoreResult<()> {
        Err(StoreError::Corrupt("key file missing".into()))
    }
    async fn secret_get(&self, _: &str) -> StoreResult<Option<String>> {
        Err(StoreError::Corrupt("key file missing".into()))
    }
    async fn secret_names(&self) -> StoreResult<Vec<String>> {
        Ok(vec!["TOKEN".into()])
    }
    async fn secret_delete(&self, _: &str) -> StoreResult<bool> {
        Ok(false)
    }
    async fn secret_generation(&self) -> StoreResult<u64> {
        Ok(0)
    }
}

const TOKEN: &str = "ghp_s3cr3tT0k3nValue";

fn engine_with(
    secrets: Option<Arc<dyn Secrets>>,
) -> (Engine, Arc<dyn dispatch_store::Store>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let mut registry = Registry::empty();
    register_system_tools(&mut registry).unwrap();
    registry
        .register(Arc::new(TestTool::new(spec("echo"), Behaviour::Echo)))
        .unwrap();
    let store = dispatch_store::open("memory:").unwrap();
    let mut config = EngineConfig::new(dir.path());
    config.data_dir = Some(dir.path().join("data"));
    let engine = Engine::new(registry, store.clone(), Arc::new(Headless), config)
        .unwrap()
        .with_secrets(secrets.unwrap_or_else(|| store.clone()));
    (engine, store, dir)
}

#[tokio::test]
async fn a_stored_secret_never_appears_in_results_events_transcript_or_dedupe() {
    let (engine, store, _dir) = engine_with(None);
    store.secret_set("GH_TOKEN", TOKEN).await.unwrap();
    let mark = RoundRequest::new(
        "s",
        "m",
        dispatch_engine::Provider::OpenAi,
        vec![call(
            "m",
            "find_tools",
            &json!({"query": "select:echo"}).to_string(),
        )],
    );
    engine.round(mark).await.unwrap();
    let echo = || wrapped("a", "echo", json!({"header": format!("Bearer {TOKEN}")}));
    let req = RoundRequest::new("s", "r", dispatch_engine::Provider::OpenAi, vec![echo()]);
    let out = engine.round(req).await.unwrap();
    assert_eq!(
        out.results[0].content,
        r#"[echo] echo:{"header":"Bearer [secret:GH_TOKEN]"}"#
    );
    // Again, from the dedupe map.
    let again = engine
        .round(RoundRequest::new(
            "s",
            "r",
            dispatch_engine::Provider::OpenAi,
            vec![echo()],
        ))
        .await
        .unwrap();
    assert_eq!(
        again.results[0].content,
        r#"[echo] echo:{"header":"Bearer [secret:GH_TOKEN]"}"#
    );

    // Scan everything the round produced or stored.
    let mut everything = serde_json::to_string(&out.report()).unwrap();
    everything.push_str(&serde_json::to_string(&again.report()).unwrap());
    for (_, event) in store.events("s", 0).await.unwrap() {
        everything.push_str(&event);
    }
    for entry in store.transcript("s", None).await.unwrap() {
        everything.push_str(&entry.message_json().to_string());
    }
    let (_, run) = store.load("s", "r").await.unwrap();
    everything.push_str(&serde_json::to_string(&run).unwrap());
    assert!(everything.contains("[secret:GH_TOKEN]"));
    assert!(
        !everything.contains(TOKEN),
        "the secret leaked: {everything}"
    );
}

#[tokio::test]
async fn a_round_that_cannot_read_the_secrets_does_not_run() {
    let (engine, _store, _dir) = engine_with(Some(Arc::new(Broken)));
    let req = RoundRequest::new(
        "s",
        "r",
        dispatch_engine::Provider::OpenAi,
        vec![call("a", "find_tools", "{}")],
    );
    let err = engine.round(req).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "cannot read the stored secrets, so results could not be kept free of them: stored data is corrupt: key file missing"
    );
}

#[tokio::test]
async fn a_long_result_is_spilled_to_disk_without_the_secret() {
    let (engine, store, dir) = engine_with(None);
    store.secret_set("GH_TOKEN", TOKEN).await.unwrap();
    let mark = RoundRequest::new(
        "s",
        "m",
        dispatch_engine::Provider::OpenAi,
        vec![call(
            "m",
            "find_tools",
            &json!({"query": "select:echo"}).to_string(),
        )],
    );
    engine.round(mark).await.unwrap();
    // Longer than the result budget, with the secret at its very end (only in the spill).
    let long = format!("{}{TOKEN}", "x".repeat(40_000));
    let req = RoundRequest::new(
        "s",
        "r",
        dispatch_engine::Provider::OpenAi,
        vec![wrapped("a", "echo", json!({"text": long}))],
    );
    let out = engine.round(req).await.unwrap();
    assert!(out.results[0].content.contains("[secret:GH_TOKEN]"));
    let mut spilled = Vec::new();
    let mut stack = vec![dir.path().join("data")];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                spilled.push(std::fs::read_to_string(&path).unwrap());
            }
        }
    }
    assert_eq!(spilled.len(), 1, "one spill file");
    assert!(spilled[0].contains("[secret:GH_TOKEN]"));
    assert!(
        !spilled[0].contains(TOKEN),
        "the spill file holds the secret"
    );
}

/// Counts decryptions (`secret_get`) of the store it wraps.
struct Counting {
    inner: Arc<dyn Secrets>,
    gets: AtomicUsize,
}

#[async_trait]
impl Secrets for Counting {
    async fn secret_set(&self, name: &str, value: &str) -> StoreResult<()> {
        self.inner.secret_set(name, value).await
    }
    async fn secret_get(&self, name: &str) -> StoreResult<Option<String>> {
        self.gets.fetch_add(1, Ordering::SeqCst);
        self.inner.secret_get(name).await
    }
    async fn secret_names(&self) -> StoreResult<Vec<String>> {
        self.inner.secret_names().await
    }
    async fn secret_delete(&self, name: &str) -> StoreResult<bool> {
        self.inner.secret_delete(name).await
    }
    async fn secret_generation(&self) -> StoreResult<u64> {
        self.inner.secret_generation().await
    }
}

/// The engine builds its redactor once and decrypts no secret on a round when none changed;
/// a secret set through another handle on the same store (another process) is decrypted on
/// the next round and hidden from then on.
async fn rounds_decrypt_nothing_until_another_handle_sets_a_secret(
    ours: Arc<dyn Secrets>,
    theirs: Arc<dyn Secrets>,
) {
    const NEW: &str = "new-value-from-elsewhere-77";
    ours.secret_set("GH_TOKEN", TOKEN).await.unwrap();
    let counting = Arc::new(Counting {
        inner: ours,
        gets: AtomicUsize::new(0),
    });
    let (engine, _store, _dir) = engine_with(Some(counting.clone()));
    let gets = || counting.gets.load(Ordering::SeqCst);
    let round = |id: &str, text: &str| {
        RoundRequest::new(
            "s",
            "r",
            dispatch_engine::Provider::OpenAi,
            vec![wrapped(id, "echo", json!({"text": text}))],
        )
    };
    let mark = RoundRequest::new(
        "s",
        "m",
        dispatch_engine::Provider::OpenAi,
        vec![call(
            "m",
            "find_tools",
            &json!({"query": "select:echo"}).to_string(),
        )],
    );
    engine.round(mark).await.unwrap();
    assert_eq!(gets(), 1, "the first round builds the redactor");
    for (i, text) in ["one", "two", "three"].iter().enumerate() {
        let out = engine
            .round(round(&format!("a{i}"), &format!("{text} {TOKEN}")))
            .await
            .unwrap();
        assert!(
            out.results[0].content.contains("[secret:GH_TOKEN]"),
            "{}",
            out.results[0].content
        );
    }
    assert_eq!(gets(), 1, "no secret changed, none decrypted");

    theirs.secret_set("NEW_KEY", NEW).await.unwrap();
    let out = engine
        .round(round("b", &format!("{NEW} {TOKEN}")))
        .await
        .unwrap();
    let content = &out.results[0].content;
    assert!(
        content.ends_with(r#"echo:{"text":"[secret:NEW_KEY] [secret:GH_TOKEN]"}"#),
        "{content}"
    );
    assert_eq!(gets(), 3, "rebuilt once: both secrets decrypted");
    engine.round(round("c", NEW)).await.unwrap();
    assert_eq!(gets(), 3);
}

#[tokio::test]
async fn sqlite_rounds_decrypt_nothing_until_another_handle_sets_a_secret() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("store.db").display());
    rounds_decrypt_nothing_until_another_handle_sets_a_secret(
        dispatch_store::open(&url).unwrap(),
        dispatch_store::open(&url).unwrap(),
    )
    .await;
}

/// The same over Redis at 127.0.0.1:6379, two handles under one fresh key prefix; skipped
/// with a reason when Redis does not answer, unless TOOLDISPATCH_REQUIRE_REDIS=1.
#[tokio::test]
async fn redis_rounds_decrypt_nothing_until_another_handle_sets_a_secret() {
    use dispatch_store::redis::RedisStore;
    const URL: &str = "redis://127.0.0.1:6379/";
    let Some(mut conn) = redis_or_skip(URL) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let prefix = format!(
        "td:test:engine-secrets-{}-{}:",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    );
    let open = || -> Arc<dyn Secrets> {
        Arc::new(
            RedisStore::lazy(URL, &prefix, Arc::new(dispatch_store::SystemClock))
                .unwrap()
                .with_secret_key_file(dir.path().join("redis.key")),
        )
    };
    rounds_decrypt_nothing_until_another_handle_sets_a_secret(open(), open()).await;
    // The two keys the secrets live in (the machine's Redis may be shared: never FLUSHDB).
    redis::cmd("DEL")
        .arg(format!("{prefix}secrets"))
        .arg(format!("{prefix}secrets:generation"))
        .query::<i64>(&mut conn)
        .unwrap();
}

/// A connection to Redis, or `None` after printing why the test skips; panics instead when
/// `TOOLDISPATCH_REQUIRE_REDIS=1` (CI), so a Redis that failed to start cannot pass as skipped.
fn redis_or_skip(url: &str) -> Option<redis::Connection> {
    let connected = redis::Client::open(url).and_then(|client| {
        let mut conn = client.get_connection_with_timeout(std::time::Duration::from_secs(1))?;
        redis::cmd("PING").query::<String>(&mut conn)?;
        Ok(conn)
    });
    match connected {
        Ok(conn) => Some(conn),
        Err(e) => {
            let reason = format!("Redis is not reachable at {url} ({e})");
            dispatch_testkit::skip(dispatch_testkit::Need::Redis, &reason);
            None
        }
    }
}
