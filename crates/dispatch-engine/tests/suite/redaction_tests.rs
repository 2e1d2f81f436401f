//! Secrets never leave a round (DESIGN §3.17): a stored value reads `[secret:NAME]` in results,
//! events, the transcript and the dedupe map.

use std::sync::Arc;

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
        r#"echo:{"header":"Bearer [secret:GH_TOKEN]"}"#
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
