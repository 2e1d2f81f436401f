//! `background_subagents` through the engine, its legs running the agent loop against a
//! scripted model server on 127.0.0.1: start then read until done, stop mid-answer, the cap
//! of sixteen, no recursion.

use std::time::{Duration, Instant};

use dispatch_engine::{RoundOutcome, Status};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use super::agent_tests::{calls, says};
use super::subagent_tests::{Fixture, fixture, tool_round};
use super::support::FakeServer;

/// One parent round of these background_subagents calls (the schema fetched first).
async fn parent_round(fx: &Fixture, args: Vec<Value>) -> RoundOutcome {
    tool_round(
        fx,
        "background_subagents",
        args,
        tokio_util::sync::CancellationToken::new(),
    )
    .await
    .unwrap()
}

/// One call's status and text (without the tool-name prefix).
async fn one(fx: &Fixture, args: Value) -> (Status, String) {
    let out = parent_round(fx, vec![args]).await;
    let r = &out.results[0];
    let text = r
        .content
        .strip_prefix("[background_subagents] ")
        .unwrap_or(&r.content);
    (r.status, text.to_string())
}

fn id_of(started: &str) -> String {
    started
        .strip_prefix("started background subagent ")
        .and_then(|t| t.split_once(' '))
        .unwrap_or_else(|| panic!("not a start: {started}"))
        .0
        .to_string()
}

/// Read `id` until `done(text)` (bounded); the last text read.
async fn read_until(fx: &Fixture, id: &str, done: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (status, text) = one(fx, json!({"mode": "read", "id": id})).await;
        assert_eq!(status, Status::Ok, "{text}");
        if done(&text) {
            return text;
        }
        assert!(Instant::now() < deadline, "never reached: {text}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

#[tokio::test]
async fn a_started_leg_returns_at_once_shows_progress_and_reads_done_with_its_answer() {
    let server = FakeServer::start(vec![says("leg done").delay(Duration::from_secs(3))]).await;
    let fx = fixture(&server);
    let (status, started) = one(&fx, json!({"task": "summarise the logs"})).await;
    assert_eq!(status, Status::Ok, "{started}");
    assert!(
        started.contains("it runs on after this call")
            && started.contains("mode=\"read\", id=\"bg-"),
        "{started}"
    );
    let id = id_of(&started);
    // While the model thinks, read shows the leg's own progress line.
    let running = read_until(&fx, &id, |t| {
        t.contains("progress: turn 1: asking fast") || !t.contains("status: running")
    })
    .await;
    assert!(running.contains("status: running"), "{running}");
    let done = read_until(&fx, &id, |t| !t.contains("status: running")).await;
    assert!(
        done.ends_with(&format!(
            "\n[subagent · fast · session=parent:sub:{id} · usage: 10/3 tokens]\nleg done"
        )),
        "{done}"
    );
    assert!(done.contains("status: done"), "{done}");
    let request = server.only_request();
    assert_eq!(
        request.body["messages"].as_array().unwrap().last().unwrap(),
        &json!({"role": "user", "content": "summarise the logs"})
    );
    let (_, list) = one(&fx, json!({"mode": "list"})).await;
    let list: Value = serde_json::from_str(&list).unwrap();
    assert_eq!(list["background_subagents"][0]["status"], "done", "{list}");
    assert_eq!(
        list["background_subagents"][0]["task"],
        "summarise the logs"
    );
}

#[tokio::test]
async fn stop_ends_a_leg_whose_model_is_still_thinking() {
    let server = FakeServer::start(vec![says("too late").delay(Duration::from_secs(120))]).await;
    let fx = fixture(&server);
    let (_, started) = one(&fx, json!({"task": "think long"})).await;
    let id = id_of(&started);
    // Stopped while its request is at the model.
    let deadline = Instant::now() + Duration::from_secs(20);
    while server.requests().is_empty() {
        assert!(Instant::now() < deadline, "the leg never asked its model");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (status, stopped) = one(&fx, json!({"mode": "stop", "id": id})).await;
    assert_eq!(status, Status::Ok, "{stopped}");
    assert!(
        stopped.contains("status: stopped")
            && stopped.contains("It was stopped before it finished."),
        "{stopped}"
    );
    assert!(!stopped.contains("too late"), "{stopped}");
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn a_seventeenth_leg_of_a_session_is_refused_with_what_to_do() {
    let slow = Duration::from_secs(120);
    let server = FakeServer::start((0..17).map(|_| says("late").delay(slow)).collect()).await;
    let fx = fixture(&server);
    let starts = (0..17)
        .map(|i| json!({"task": format!("part {i}")}))
        .collect();
    let out = parent_round(&fx, starts).await;
    let ok = out
        .results
        .iter()
        .filter(|r| r.status == Status::Ok)
        .count();
    let refused: Vec<&str> = out
        .results
        .iter()
        .filter(|r| r.status != Status::Ok)
        .map(|r| r.content.as_str())
        .collect();
    assert_eq!(ok, 16, "{refused:?}");
    assert_eq!(refused.len(), 1);
    assert!(
        refused[0].contains("this session already has 16 background subagents running")
            && refused[0].contains("(mode=stop, id=...)"),
        "{}",
        refused[0]
    );
    let (_, list) = one(&fx, json!({"mode": "list"})).await;
    let list: Value = serde_json::from_str(&list).unwrap();
    assert_eq!(list["running"], 16, "{list}");
}

#[tokio::test]
async fn a_background_leg_cannot_start_legs_of_its_own() {
    let server = FakeServer::start(vec![
        calls(&[(
            "r",
            "run_tool",
            json!({"name": "background_subagents", "args": {"task": "deeper"}}),
        )]),
        says("did it myself"),
    ])
    .await;
    let fx = fixture(&server);
    let (_, started) = one(&fx, json!({"task": "try to recurse"})).await;
    let id = id_of(&started);
    let done = read_until(&fx, &id, |t| !t.contains("status: running")).await;
    assert!(done.ends_with("did it myself"), "{done}");
    let second = &server.requests()[1].body["messages"];
    let refusal = second.as_array().unwrap().last().unwrap()["content"]
        .as_str()
        .unwrap();
    assert!(
        refusal.contains("not available in this session"),
        "{refusal}"
    );
}
