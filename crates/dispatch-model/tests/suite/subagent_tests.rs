//! `subagents` run through the engine, its legs running the agent loop against a scripted
//! model server on 127.0.0.1: the three-at-once cap, a failing leg, no recursion, a named
//! session continued.

use std::sync::Arc;
use std::time::Duration;

use dispatch_engine::{
    Engine, EngineConfig, Headless, Provider, RawCall, RoundOutcome, RoundRequest, Status,
};
use dispatch_model::{AgentLegs, ModelConfig, ProviderKind};
use dispatch_store::Store;
use dispatch_tools::agents::Legs;
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use super::agent_tests::{calls, says};
use super::support::FakeServer;

pub(super) struct Fixture {
    pub(super) engine: Arc<Engine>,
    store: Arc<dyn Store>,
    _workdir: tempfile::TempDir,
}

/// An engine whose subagents (and background subagents) run legs on the model at `server`;
/// the engine's own concurrency bound is above the subagents cap, so the cap is what limits
/// legs.
pub(super) fn fixture(server: &FakeServer) -> Fixture {
    let store: Arc<dyn Store> = Arc::new(dispatch_store::memory::MemoryStore::default());
    let workdir = tempfile::tempdir().unwrap();
    let legs = Legs::default();
    let tools = dispatch_tools::ToolsConfig {
        legs: legs.clone(),
        ..Default::default()
    };
    let registry =
        dispatch_tools::builtin_registry_with(&tools, &dispatch_tools::Stores::all(&store))
            .unwrap();
    let mut config = EngineConfig::new(workdir.path().canonicalize().unwrap());
    config.max_concurrent = 8;
    let engine =
        Arc::new(Engine::new(registry, store.clone(), Arc::new(Headless), config).unwrap());
    let mut model = ModelConfig::new(ProviderKind::OpenAi, "leg-model");
    model.base_url = Some(server.base_url.clone());
    model.key = Some("none".into());
    legs.bind(Arc::new(AgentLegs::new(
        Arc::downgrade(&engine),
        store.clone(),
        vec![("fast".into(), model)],
    )));
    Fixture {
        engine,
        store,
        _workdir: workdir,
    }
}

/// A parent round of these subagents calls (after the schema was fetched in its own run).
async fn parent_round(fx: &Fixture, legs: Vec<Value>) -> RoundOutcome {
    parent_round_until(fx, legs, tokio_util::sync::CancellationToken::new())
        .await
        .unwrap()
}

async fn parent_round_until(
    fx: &Fixture,
    legs: Vec<Value>,
    cancel: tokio_util::sync::CancellationToken,
) -> Result<RoundOutcome, dispatch_engine::EngineError> {
    tool_round(fx, "subagents", legs, cancel).await
}

/// A round of the parent session calling `tool` once per `args` through run_tool, after a
/// round of its own that fetched the tool's schema; `cancel` cancels the second round.
pub(super) async fn tool_round(
    fx: &Fixture,
    tool: &str,
    args: Vec<Value>,
    cancel: tokio_util::sync::CancellationToken,
) -> Result<RoundOutcome, dispatch_engine::EngineError> {
    let select = RawCall::new(
        "sel",
        "find_tools",
        json!({"query": format!("select:{tool}")}).to_string(),
    );
    fx.engine
        .round(RoundRequest::new(
            "parent",
            "select",
            Provider::OpenAi,
            vec![select],
        ))
        .await
        .unwrap();
    let calls = args
        .into_iter()
        .enumerate()
        .map(|(i, args)| {
            RawCall::new(
                format!("call{i}"),
                "run_tool",
                json!({"name": tool, "args": args}).to_string(),
            )
        })
        .collect();
    let mut round = RoundRequest::new("parent", "turn", Provider::OpenAi, calls);
    round.cancel = cancel;
    fx.engine.round(round).await
}

#[tokio::test]
async fn cancelling_the_parent_mid_fan_out_stops_its_legs() {
    // Each leg's model would answer after 2 s; the parent is cancelled before that.
    let answer_after = Duration::from_secs(2);
    let server = FakeServer::start(
        (0..5)
            .map(|_| says("too late").delay(answer_after))
            .collect(),
    )
    .await;
    let fx = Arc::new(fixture(&server));
    let legs = (0..5)
        .map(|i| json!({"task": format!("part {i}"), "name": format!("n{i}")}))
        .collect();
    let cancel = tokio_util::sync::CancellationToken::new();
    let round = tokio::spawn({
        let (fx, cancel) = (fx.clone(), cancel.clone());
        async move { parent_round_until(&fx, legs, cancel).await }
    });
    // Three legs are waiting on the model, two wait for a place: cancel now.
    while server.requests().len() < 3 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    cancel.cancel();
    let ended = tokio::time::timeout(Duration::from_secs(30), round)
        .await
        .expect("the cancelled round did not end")
        .unwrap();
    assert!(
        matches!(ended, Err(dispatch_engine::EngineError::Cancelled)),
        "the round was not reported cancelled: {:?}",
        ended.map(|o| o.results.len())
    );
    // Past the time the model would have answered: no leg got (and kept) an answer, and the
    // two queued legs never started.
    tokio::time::sleep(answer_after + Duration::from_millis(500)).await;
    assert_eq!(
        server.requests().len(),
        3,
        "a queued leg started after the cancel"
    );
    for i in 0..5 {
        let kept = fx
            .store
            .conversation(&format!("parent:sub:n{i}"))
            .await
            .unwrap();
        let roles: Vec<&str> = kept
            .iter()
            .map(|e| e.message["role"].as_str().unwrap_or("?"))
            .collect();
        let expected: &[&str] = if i < 3 { &["user"] } else { &[] };
        assert_eq!(roles, expected, "leg n{i} kept {kept:?}");
    }
}

#[tokio::test]
async fn five_legs_run_at_most_three_at_once_and_each_answers() {
    let thinking = Duration::from_millis(1000);
    let server =
        FakeServer::start((0..5).map(|_| says("leg done").delay(thinking)).collect()).await;
    let fx = fixture(&server);
    let legs = (0..5)
        .map(|i| json!({"task": format!("part {i}")}))
        .collect();
    let out = parent_round(&fx, legs).await;
    for result in &out.results {
        assert_eq!(result.status, Status::Ok, "{}", result.content);
        let body = result.content.strip_prefix("[subagents] ").unwrap();
        assert!(
            body.starts_with("[subagent · fast · session=parent:sub:tmp-"),
            "{body}"
        );
        assert!(body.ends_with(" · usage: 10/3 tokens]\nleg done"), "{body}");
    }
    // Three legs asked the model at once; the fourth and fifth only after a leg finished.
    let mut at: Vec<_> = server.requests().iter().map(|r| r.at).collect();
    at.sort();
    assert_eq!(at.len(), 5);
    assert!(
        at[2] - at[0] < thinking,
        "the first three did not start together"
    );
    assert!(
        at[3] - at[0] >= thinking,
        "a fourth leg ran beside three others"
    );
    assert!(
        at[4] - at[0] >= thinking,
        "a fifth leg ran beside three others"
    );
}

#[tokio::test]
async fn a_failing_leg_is_one_failed_result_and_a_leg_cannot_start_legs() {
    let server = FakeServer::start(vec![
        // The leg that may not recurse: it tries subagents, reads the refusal, answers.
        calls(&[(
            "r",
            "run_tool",
            json!({"name": "subagents", "args": {"task": "deeper"}}),
        )]),
        says("did it myself"),
    ])
    .await;
    let fx = fixture(&server);
    let out = parent_round(
        &fx,
        vec![
            json!({"task": "try to recurse"}),
            json!({"task": "use a model that does not exist", "model": "nope"}),
        ],
    )
    .await;
    assert_eq!(
        out.results[0].status,
        Status::Ok,
        "{}",
        out.results[0].content
    );
    assert!(out.results[0].content.ends_with("did it myself"));
    assert_eq!(out.results[1].status, Status::Failed);
    assert!(
        out.results[1]
            .content
            .contains(r#"no model named "nope"; use one of: fast"#),
        "{}",
        out.results[1].content
    );
    // The leg's attempt to start a leg was refused, and it read why.
    let second = &server.requests()[1].body["messages"];
    let refusal = second.as_array().unwrap().last().unwrap()["content"]
        .as_str()
        .unwrap();
    assert!(
        refusal.contains("not available in this session"),
        "{refusal}"
    );
}

#[tokio::test]
async fn a_named_subagent_continues_its_own_conversation() {
    let server = FakeServer::start(vec![says("noted: blue"), says("you said blue")]).await;
    let fx = fixture(&server);
    let first = parent_round(&fx, vec![json!({"task": "remember blue", "name": "memo"})]).await;
    assert!(
        first.results[0].content.contains("session=parent:sub:memo"),
        "{}",
        first.results[0].content
    );
    let again = parent_round(
        &fx,
        vec![json!({"task": "what did I say?", "name": "memo"})],
    )
    .await;
    assert!(again.results[0].content.ends_with("you said blue"));
    let history: Vec<Value> = server.requests()[1].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .skip(1)
        .cloned()
        .collect();
    assert_eq!(
        history,
        [
            json!({"role": "user", "content": "remember blue"}),
            json!({"role": "assistant", "content": "noted: blue"}),
            json!({"role": "user", "content": "what did I say?"}),
        ]
    );
}
