//! The result cache in the round (seed §5): a result asks for an entry, pass 3 writes it after
//! the commit, and the tool reads it back later with its age.

use std::sync::Arc;

use async_trait::async_trait;
use dispatch_engine::{CachePut, Status, Tool, ToolContext, ToolError, ToolOutput, ToolSpec};
use dispatch_store::{CACHE_TTL, CacheScope, ResultCache};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use super::support::*;

/// Fetches `url` unless this session has it cached; failing URLs are never cached. It reads the
/// cache it was built with, which the engine writes to.
struct Fetch {
    spec: ToolSpec,
    cache: Arc<dyn ResultCache>,
}

/// A fetch tool and the engine writing to the same cache.
fn fetch_fixture() -> FixtureBuilder {
    let cache: Arc<dyn ResultCache> = dispatch_store::open("memory:").unwrap();
    fixture().result_cache(cache.clone()).tool(Fetch {
        spec: spec("fetch"),
        cache,
    })
}

#[async_trait]
impl Tool for Fetch {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }
    async fn call(&self, cx: ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        let url = args["url"].as_str().unwrap_or("").to_string();
        let scope = CacheScope::Session {
            session: cx.session_id.to_string(),
        };
        if let Some(hit) = self
            .cache
            .cache_get(&scope, &url)
            .await
            .map_err(|e| ToolError::failed(e.to_string()))?
        {
            return Ok(ToolOutput::text(format!("{} {}", hit.value, hit.note())));
        }
        if url.contains("broken") {
            return Err(ToolError::failed("status 500"));
        }
        let body = format!("body of {url}");
        Ok(ToolOutput {
            text: body.clone(),
            cache_put: Some(CachePut {
                scope,
                key: url,
                value: body,
                ttl: CACHE_TTL,
            }),
            ..ToolOutput::default()
        })
    }
}

#[tokio::test]
async fn a_committed_result_is_cached_and_read_back_with_its_age_in_a_later_run() {
    let fx = fetch_fixture().build();
    fx.mark_all("s").await;
    let url = json!({"url": "https://example.org/a"});
    let first = fx
        .run("s", "r1", vec![wrapped("1", "fetch", url.clone())])
        .await;
    assert_eq!(
        results(&first),
        vec![(
            Status::Ok,
            "[fetch] body of https://example.org/a".to_string()
        )]
    );
    // A new run, so dedupe does not answer: the cache does.
    let second = fx
        .run("s", "r2", vec![wrapped("2", "fetch", url.clone())])
        .await;
    assert_eq!(
        results(&second),
        vec![(
            Status::Ok,
            "[fetch] body of https://example.org/a (cached 0 s ago, this session; pass force=true for a fresh copy)".to_string()
        )]
    );
    // Another session does not see this session's entry.
    fx.mark_all("t").await;
    let other = fx.run("t", "r1", vec![wrapped("3", "fetch", url)]).await;
    assert_eq!(
        results(&other)[0].1,
        "[fetch] body of https://example.org/a"
    );
}

#[tokio::test(start_paused = true)]
async fn a_result_of_a_cancelled_round_is_never_cached() {
    let fx = fetch_fixture()
        .tool(TestTool::new(
            serial_spec("slow"),
            Behaviour::Sleep(std::time::Duration::from_secs(30)),
        ))
        .build();
    fx.mark_all("s").await;
    let url = json!({"url": "https://example.org/a"});
    let req = dispatch_engine::RoundRequest::new(
        "s",
        "r1",
        dispatch_engine::Provider::OpenAi,
        vec![
            wrapped("1", "fetch", url.clone()),
            wrapped("2", "slow", json!({})),
        ],
    );
    let cancel = req.cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        cancel.cancel();
    });
    assert!(fx.engine.round(req).await.is_err());
    // The fetch ran, but its result was never committed: nothing may be served from it.
    let again = fx.run("s", "r2", vec![wrapped("3", "fetch", url)]).await;
    assert_eq!(
        results(&again)[0].1,
        "[fetch] body of https://example.org/a"
    );
}
