//! A round takes at most `max_calls_per_round` calls, by design: a reply with more is refused
//! whole, before anything is loaded, run or committed. And the round report carries each
//! call's arguments as the events do, written without a copy of the whole report in memory.

use std::sync::atomic::Ordering;

use dispatch_engine::{
    DEFAULT_MAX_CALLS_PER_ROUND, EngineConfig, EngineError, RoundRequest, Status,
};
use dispatch_store::SessionStore;
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use super::support::*;

/// `n` echo calls, with arguments no other call of the test has (from `from` on).
fn echo_calls_from(from: usize, n: usize) -> Vec<dispatch_engine::RawCall> {
    (from..from + n)
        .map(|i| wrapped(&format!("c{i}"), "echo", json!({"i": i})))
        .collect()
}

fn echo_calls(n: usize) -> Vec<dispatch_engine::RawCall> {
    echo_calls_from(0, n)
}

/// Rounds committed in the run, and events the session's log holds.
async fn committed(store: &dyn SessionStore, session: &str, run: &str) -> (u64, usize) {
    let (_, run) = store.load(session, run).await.unwrap();
    (run.rounds, store.events(session, 0).await.unwrap().len())
}

#[test]
fn the_default_limit_is_512_calls() {
    assert_eq!(DEFAULT_MAX_CALLS_PER_ROUND, 512);
    assert_eq!(EngineConfig::new(".").max_calls_per_round, 512);
}

#[tokio::test]
async fn a_reply_over_the_limit_is_refused_whole_and_nothing_of_it_is_committed() {
    let tool = TestTool::new(spec("echo"), Behaviour::Echo);
    let calls = tool.calls.clone();
    let fx = fixture()
        .tool(tool)
        .config(|c| c.max_calls_per_round = 3)
        .build();
    fx.mark_all("s").await;
    fx.run("s", "r", echo_calls(1)).await;
    let before = committed(fx.store.as_ref(), "s", "r").await;
    assert_eq!(before.0, 1);
    let ran_before = calls.load(Ordering::SeqCst);

    let refused = fx
        .engine
        .round(RoundRequest::new(
            "s",
            "r",
            dispatch_engine::Provider::OpenAi,
            echo_calls(4),
        ))
        .await
        .unwrap_err();
    assert!(
        matches!(refused, EngineError::TooManyCalls { calls: 4, max: 3 }),
        "{refused:?}"
    );
    assert_eq!(
        refused.to_string(),
        "the reply has 4 tool calls; a round takes at most 3 (max_calls_per_round in the config file)"
    );
    // No call ran, no round was counted, no event was logged.
    assert_eq!(calls.load(Ordering::SeqCst), ran_before);
    assert_eq!(committed(fx.store.as_ref(), "s", "r").await, before);

    // Exactly at the limit is a round like any other, numbered as if the refusal never was.
    let out = fx.run("s", "r", echo_calls_from(100, 3)).await;
    assert_eq!(out.round, 2);
    assert!(out.results.iter().all(|r| r.status == Status::Ok));
    assert_eq!(calls.load(Ordering::SeqCst), ran_before + 3);
}

#[tokio::test]
async fn the_default_engine_takes_512_calls_and_refuses_513() {
    let fx = fixture()
        .tool(TestTool::new(spec("echo"), Behaviour::Echo))
        .max_concurrent(8)
        .build();
    fx.mark_all("s").await;
    let err = fx
        .engine
        .round(RoundRequest::new(
            "s",
            "r",
            dispatch_engine::Provider::OpenAi,
            echo_calls(513),
        ))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            EngineError::TooManyCalls {
                calls: 513,
                max: 512
            }
        ),
        "{err:?}"
    );
    let out = fx.run("s", "r", echo_calls(512)).await;
    assert_eq!(out.results.len(), 512);
    assert!(out.results.iter().all(|r| r.status == Status::Ok));
}

#[tokio::test]
async fn a_held_session_refuses_too_many_calls_too() {
    let fx = fixture()
        .tool(TestTool::new(spec("echo"), Behaviour::Echo))
        .config(|c| c.max_calls_per_round = 1)
        .build();
    assert!(fx.engine.check_round_size(1).is_ok());
    let held = fx.engine.hold_session("s").await;
    let err = held
        .round(RoundRequest::new(
            "s",
            "r",
            dispatch_engine::Provider::OpenAi,
            echo_calls(2),
        ))
        .await
        .unwrap_err();
    assert!(matches!(
        err,
        EngineError::TooManyCalls { calls: 2, max: 1 }
    ));
}

/// How many times `needle` occurs in `text`.
fn occurrences(text: &str, needle: &str) -> usize {
    text.matches(needle).count()
}

#[tokio::test]
async fn the_written_report_is_the_report_and_carries_arguments_once_per_call_event() {
    let fx = fixture()
        .tool(TestTool::new(spec("echo"), Behaviour::Text("done".into())))
        .build();
    fx.mark_all("s").await;
    // A marker no result or message repeats: only the events that name the call carry it.
    let big = format!("BIG{}", "x".repeat(100_000));
    let out = fx
        .run("s", "r", vec![wrapped("a", "echo", json!({"note": big}))])
        .await;
    let mut written = Vec::new();
    out.write_report(&mut written).unwrap();
    let text = String::from_utf8(written).unwrap();
    let parsed: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(parsed, out.report());
    // ToolCall and ToolResult (the event shapes of the seed, which the console and the event
    // stream read); the results and the other events do not repeat it.
    assert_eq!(occurrences(&text, "BIGx"), 2);
    let carrying: Vec<&str> = parsed["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["tool_args"].as_str().is_some_and(|a| a.contains("BIGx")))
        .map(|e| e["type"].as_str().unwrap())
        .collect();
    assert_eq!(carrying, vec!["ToolCall", "ToolResult"]);
}
