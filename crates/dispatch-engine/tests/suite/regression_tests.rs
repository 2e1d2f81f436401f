//! Regression tests, one per bug found in review, each named after what broke.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use dispatch_engine::{ClientTool, Effect, EngineError, Provider, RoundRequest, Status};
use pretty_assertions::assert_eq;
use serde_json::json;

use super::support::*;

fn reader() -> TestTool {
    TestTool::new(spec("read").effect(Effect::ReadsPaths), Behaviour::ReadPath)
}

fn writer(name: &str, behaviour: Behaviour) -> TestTool {
    TestTool::new(serial_spec(name).effect(Effect::Mutates), behaviour)
}

fn status_of(out: &dispatch_engine::RoundOutcome) -> Vec<Status> {
    out.results.iter().map(|r| r.status).collect()
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_round_with_a_started_write_invalidates_remembered_reads() {
    let read = reader();
    let reads = read.calls.clone();
    let fx = fixture()
        .tool(read)
        .tool(writer(
            "slow_write",
            Behaviour::Sleep(Duration::from_secs(30)),
        ))
        .build();
    std::fs::write(fx.file("a.txt"), "A").unwrap();
    fx.mark_all("s").await;
    let first = fx
        .run(
            "s",
            "r",
            vec![wrapped("1", "read", json!({"path": "a.txt"}))],
        )
        .await;
    assert_eq!(status_of(&first), vec![Status::Ok]);

    let req = RoundRequest::new(
        "s",
        "r",
        Provider::OpenAi,
        vec![wrapped("2", "slow_write", json!({"path": "a.txt"}))],
    );
    let cancel = req.cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(1)).await;
        cancel.cancel();
    });
    assert!(matches!(
        fx.engine.round(req).await,
        Err(EngineError::Cancelled)
    ));

    let again = fx
        .run(
            "s",
            "r",
            vec![wrapped("3", "read", json!({"path": "a.txt"}))],
        )
        .await;
    assert_eq!(
        status_of(&again),
        vec![Status::Ok],
        "{}",
        again.results[0].content
    );
    assert_eq!(reads.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_tool_marked_no_dedupe_runs_every_time() {
    let tool = TestTool::new(spec("todo").no_dedupe(), Behaviour::Echo);
    let calls = tool.calls.clone();
    let fx = fixture().tool(tool).build();
    fx.mark_all("s").await;
    let a = || wrapped("a", "todo", json!({"x": "A"}));
    let b = || wrapped("b", "todo", json!({"x": "B"}));
    let out = fx.run("s", "r", vec![a(), b(), a()]).await;
    assert_eq!(status_of(&out), vec![Status::Ok, Status::Ok, Status::Ok]);
    let again = fx.run("s", "r", vec![a()]).await;
    assert_eq!(status_of(&again), vec![Status::Ok]);
    assert_eq!(calls.load(Ordering::SeqCst), 4);
}

#[tokio::test(start_paused = true)]
async fn a_timed_out_call_is_tried_again_not_replayed() {
    let tool = TestTool::new(
        spec("slow").timeout(Duration::from_secs(1)),
        Behaviour::Sleep(Duration::from_secs(120)),
    );
    let calls = tool.calls.clone();
    let fx = fixture().tool(tool).build();
    fx.mark_all("s").await;
    for _ in 0..2 {
        let out = fx
            .run("s", "r", vec![wrapped("a", "slow", json!({}))])
            .await;
        assert_eq!(status_of(&out), vec![Status::TimedOut]);
    }
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_read_that_reported_no_path_dies_with_the_next_write() {
    let quiet = TestTool::new(
        spec("listing").effect(Effect::ReadsPaths),
        Behaviour::Text("one file".into()),
    );
    let calls = quiet.calls.clone();
    let fx = fixture()
        .tool(quiet)
        .tool(writer("write", Behaviour::WritePath))
        .build();
    fx.mark_all("s").await;
    fx.run("s", "r", vec![wrapped("1", "listing", json!({}))])
        .await;
    fx.run(
        "s",
        "r",
        vec![wrapped("2", "write", json!({"path": "new.txt"}))],
    )
    .await;
    let out = fx
        .run("s", "r", vec![wrapped("3", "listing", json!({}))])
        .await;
    assert_eq!(status_of(&out), vec![Status::Ok]);
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_mutating_call_that_panics_invalidates_remembered_reads() {
    let read = reader();
    let reads = read.calls.clone();
    let fx = fixture()
        .tool(read)
        .tool(writer("crash", Behaviour::Panic("half done".into())))
        .build();
    std::fs::write(fx.file("a.txt"), "A").unwrap();
    fx.mark_all("s").await;
    fx.run(
        "s",
        "r",
        vec![wrapped("1", "read", json!({"path": "a.txt"}))],
    )
    .await;
    let crashed = fx
        .run("s", "r", vec![wrapped("2", "crash", json!({}))])
        .await;
    assert_eq!(status_of(&crashed), vec![Status::Failed]);
    let again = fx
        .run(
            "s",
            "r",
            vec![wrapped("3", "read", json!({"path": "a.txt"}))],
        )
        .await;
    assert_eq!(status_of(&again), vec![Status::Ok]);
    assert_eq!(reads.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_wrapped_client_tool_call_is_handed_back_with_its_inner_arguments() {
    let fx = fixture().build();
    let mut req = RoundRequest::new(
        "s",
        "r",
        Provider::OpenAi,
        vec![wrapped(
            "c",
            "browser",
            json!({"url": "https://example.org"}),
        )],
    );
    req.client_tools = fx.client_tools(vec![ClientTool {
        name: "browser".into(),
        description: "the caller's browser".into(),
        parameters: json!({"type": "object"}),
    }]);
    let out = fx.request(req).await;
    let handed: Vec<serde_json::Value> = events_json(&out.events)
        .into_iter()
        .filter(|e| e["type"] == "ClientToolCall")
        .collect();
    assert_eq!(
        handed[0]["client_tool_calls"],
        json!([{"id": "c", "name": "browser", "arguments": "{\"url\":\"https://example.org\"}"}])
    );
}

#[tokio::test]
async fn two_rounds_of_one_session_at_once_commit_one_after_the_other() {
    let fx = fixture()
        .tool(TestTool::new(
            spec("slow"),
            Behaviour::Sleep(Duration::from_millis(20)),
        ))
        .build();
    fx.mark_all("s").await;
    let one = fx.run("s", "r", vec![wrapped("a", "slow", json!({"x": 1}))]);
    let two = fx.run("s", "r", vec![wrapped("b", "slow", json!({"x": 2}))]);
    let (one, two) = tokio::join!(one, two);
    let mut rounds = vec![one.round, two.round];
    rounds.sort_unstable();
    assert_eq!(rounds, vec![1, 2]);
    let (_, run) = fx.store.load("s", "r").await.unwrap();
    assert_eq!((run.rounds, run.dedupe.len()), (2, 2));
}

#[tokio::test(start_paused = true)]
async fn a_confirmation_stops_waiting_when_the_round_is_cancelled() {
    let mut hanging = Scripted::with(dispatch_engine::ConfirmReply::default());
    hanging.hang = true;
    let fx = fixture()
        .tool(TestTool::new(
            spec("edit").gate(dispatch_engine::Gate::Ask),
            Behaviour::Echo,
        ))
        .confirmer(Arc::new(hanging))
        .build();
    fx.mark_all("s").await;
    let req = RoundRequest::new(
        "s",
        "r",
        Provider::OpenAi,
        vec![wrapped("a", "edit", json!({}))],
    );
    let cancel = req.cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(2)).await;
        cancel.cancel();
    });
    let started = tokio::time::Instant::now();
    assert!(matches!(
        fx.engine.round(req).await,
        Err(EngineError::Cancelled)
    ));
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "waited {:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn an_absurd_timeout_does_not_overflow() {
    let fx = fixture()
        .tool(TestTool::new(
            spec("forever")
                .timeout(Duration::MAX)
                .idle_timeout(Duration::MAX),
            Behaviour::Echo,
        ))
        .build();
    fx.mark_all("s").await;
    let out = fx
        .run("s", "r", vec![wrapped("a", "forever", json!({}))])
        .await;
    assert_eq!(status_of(&out), vec![Status::Ok]);
}

#[tokio::test]
async fn a_call_without_a_name_is_invalid_and_says_so() {
    let fx = fixture().build();
    let out = fx.run("s", "r", vec![call("a", "  ", "{}")]).await;
    assert_eq!(
        (out.results[0].status, out.results[0].content.as_str()),
        (
            Status::Invalid,
            "tool= failed: the call has no tool name; call a tool from your tools array by its exact name"
        )
    );
}

#[tokio::test]
async fn did_you_mean_names_a_deferred_tool_the_way_the_model_can_call_it() {
    let fx = fixture()
        .tool(TestTool::new(spec("calculate"), Behaviour::Echo))
        .build();
    let out = fx.run("s", "r", vec![call("a", "calculat", "{}")]).await;
    assert_eq!(out.results[0].status, Status::NotFound);
    assert!(
        out.results[0]
            .content
            .ends_with("Did you mean: run_tool(name=calculate)?"),
        "{}",
        out.results[0].content
    );
}

#[tokio::test]
async fn a_read_that_overlapped_a_concurrent_write_is_not_remembered() {
    let read = reader();
    let reads = read.calls.clone();
    let fx = fixture()
        .tool(read)
        // Concurrent and mutating, like download_file.
        .tool(TestTool::new(
            spec("download").effect(Effect::Mutates),
            Behaviour::WritePath,
        ))
        .build();
    std::fs::write(fx.file("a.txt"), "A").unwrap();
    fx.mark_all("s").await;
    let both = fx
        .run(
            "s",
            "r",
            vec![
                wrapped("1", "download", json!({"path": "a.txt"})),
                wrapped("2", "read", json!({"path": "a.txt"})),
            ],
        )
        .await;
    assert_eq!(status_of(&both), vec![Status::Ok, Status::Ok]);
    let again = fx
        .run(
            "s",
            "r",
            vec![wrapped("3", "read", json!({"path": "a.txt"}))],
        )
        .await;
    assert_eq!(
        (again.results[0].status, again.results[0].content.as_str()),
        (Status::Ok, "[read] Ax")
    );
    assert_eq!(reads.load(Ordering::SeqCst), 2);
}
