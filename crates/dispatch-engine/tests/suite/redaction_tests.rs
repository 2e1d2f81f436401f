//! Secrets never leave a round (DESIGN §3.17): a stored value reads `[secret:NAME]` in results,
//! events, the transcript and the dedupe map.

use std::sync::Arc;

use async_trait::async_trait;
use dispatch_engine::redact::SecretValues;
use dispatch_engine::{
    Engine, EngineConfig, Headless, Registry, RoundRequest, register_system_tools,
};
use pretty_assertions::assert_eq;
use serde_json::json;

use super::support::*;

struct Fixed(Vec<(String, String)>);

#[async_trait]
impl SecretValues for Fixed {
    async fn secret_values(&self) -> Result<Vec<(String, String)>, String> {
        Ok(self.0.clone())
    }
}

struct Broken;

#[async_trait]
impl SecretValues for Broken {
    async fn secret_values(&self) -> Result<Vec<(String, String)>, String> {
        Err("key file missing".into())
    }
}

const TOKEN: &str = "ghp_s3cr3tT0k3nValue";

fn engine_with(
    source: Arc<dyn SecretValues>,
) -> (Engine, Arc<dyn dispatch_store::Store>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let mut registry = Registry::empty();
    register_system_tools(&mut registry).unwrap();
    registry
        .register(Arc::new(TestTool::new(spec("echo"), Behaviour::Echo)))
        .unwrap();
    let store = dispatch_store::open("memory:").unwrap();
    let engine = Engine::new(
        registry,
        store.clone(),
        Arc::new(Headless),
        EngineConfig::new(dir.path()),
    )
    .unwrap()
    .with_secret_values(source);
    (engine, store, dir)
}

#[tokio::test]
async fn a_stored_secret_never_appears_in_results_events_transcript_or_dedupe() {
    let (engine, store, _dir) =
        engine_with(Arc::new(Fixed(vec![("GH_TOKEN".into(), TOKEN.into())])));
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
    let (engine, _store, _dir) = engine_with(Arc::new(Broken));
    let req = RoundRequest::new(
        "s",
        "r",
        dispatch_engine::Provider::OpenAi,
        vec![call("a", "find_tools", "{}")],
    );
    let err = engine.round(req).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "cannot read the stored secrets, so results could not be kept free of them: key file missing"
    );
}
