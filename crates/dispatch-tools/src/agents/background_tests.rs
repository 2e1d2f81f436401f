//! background_subagents through a real engine and memory store, its legs run by a scripted
//! runner (the agent loop and a model are dispatch-model's; its tests run them for real).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use dispatch_engine::{Headless, Status};
use dispatch_store::{LegRecord, LegStatus};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use tokio::sync::Semaphore;

use super::*;
use crate::ToolsConfig;
use crate::test_support::{Harness, run_tool};

/// A leg's task says what it does: `answer:TEXT`, `hold:TEXT` (report progress, then wait
/// until released or stopped, then answer TEXT), `give-up:WHY`, `error`, `panic`.
type SeenLeg = (String, Option<String>, Vec<String>);

struct Scripted {
    /// (session, model, exclude) of every leg run.
    seen: Mutex<Vec<SeenLeg>>,
    release: Arc<Semaphore>,
}

impl Default for Scripted {
    fn default() -> Self {
        Scripted {
            seen: Mutex::default(),
            release: Arc::new(Semaphore::new(0)),
        }
    }
}

#[async_trait]
impl LegRunner for Scripted {
    async fn run_leg(&self, leg: super::super::LegRequest) -> Result<LegOutcome, String> {
        self.seen.lock().unwrap().push((
            leg.session.clone(),
            leg.model.clone(),
            leg.exclude.clone(),
        ));
        let answer = |text: &str, stopped: Option<String>| LegOutcome {
            model: leg.model.clone().unwrap_or_else(|| "fast".into()),
            answer: text.to_string(),
            stopped,
            input_tokens: 12,
            output_tokens: 5,
        };
        let (verb, rest) = leg.task.split_once(':').unwrap_or((&leg.task, ""));
        match verb {
            "answer" => Ok(answer(rest, None)),
            "hold" => {
                if let Some(progress) = &leg.progress {
                    progress("turn 1: asking fast".into());
                }
                tokio::select! {
                    permit = self.release.acquire() => {
                        permit.unwrap().forget();
                        Ok(answer(rest, None))
                    }
                    () = leg.cancel.cancelled() => Err("the agent was cancelled".into()),
                }
            }
            "give-up" => Ok(answer("half of it", Some(rest.to_string()))),
            "error" => Err("the model server refused the key".into()),
            _ => panic!("a leg that panics"),
        }
    }

    fn models(&self) -> Vec<String> {
        vec!["fast".into(), "deep".into()]
    }
}

struct Fx {
    h: Harness,
    runner: Arc<Scripted>,
}

async fn fixture() -> Fx {
    let legs = Legs::default();
    let runner = Arc::new(Scripted::default());
    legs.bind(runner.clone());
    let config = ToolsConfig {
        legs,
        ..ToolsConfig::default()
    };
    let h = Harness::with_config(&config, Arc::new(Headless));
    h.select("parent", "background_subagents").await;
    h.select("other", "background_subagents").await;
    Fx { h, runner }
}

/// One call in session `session`: its status and its text without the tool-name prefix.
async fn call_in(fx: &Fx, session: &str, args: Value) -> (Status, String) {
    let out =
        fx.h.round(
            session,
            "r",
            vec![run_tool("c", "background_subagents", args)],
        )
        .await;
    let r = &out.results[0];
    let text = r
        .content
        .strip_prefix("[background_subagents] ")
        .unwrap_or(&r.content)
        .to_string();
    (r.status, text)
}

async fn call(fx: &Fx, args: Value) -> (Status, String) {
    call_in(fx, "parent", args).await
}

/// Start a leg; its id.
async fn start(fx: &Fx, session: &str, task: &str) -> String {
    let (status, text) = call_in(fx, session, json!({"task": task})).await;
    assert_eq!(status, Status::Ok, "{text}");
    let id = text
        .strip_prefix("started background subagent ")
        .and_then(|t| t.split_once(' '))
        .unwrap_or_else(|| panic!("no id in {text}"))
        .0;
    id.to_string()
}

/// Read `id` until its status line no longer says running (bounded).
async fn read_until_ended(fx: &Fx, id: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (status, text) = call(fx, json!({"mode": "read", "id": id})).await;
        assert_eq!(status, Status::Ok, "{text}");
        if !text.contains("status: running") {
            return text;
        }
        assert!(Instant::now() < deadline, "still running: {text}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn record(fx: &Fx, id: &str) -> LegRecord {
    let legs = fx.h.store.legs("parent").await.unwrap();
    legs.into_iter().find(|l| l.id == id).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_returns_an_id_at_once_and_read_shows_progress_then_the_answer() {
    let fx = fixture().await;
    let id = start(&fx, "parent", "hold:the answer is 42").await;
    assert!(id.starts_with("bg-"), "{id}");
    let (status, running) = call(&fx, json!({"id": id})).await;
    assert_eq!(status, Status::Ok, "{running}");
    assert!(running.contains("status: running"), "{running}");
    assert!(
        running.contains("\nprogress: turn 1: asking fast"),
        "{running}"
    );
    fx.runner.release.add_permits(1);
    let done = read_until_ended(&fx, &id).await;
    let session = format!("parent:sub:{id}");
    assert!(done.contains("status: done"), "{done}");
    assert!(
        done.ends_with(&format!(
            "\n[subagent · fast · session={session} · usage: 12/5 tokens]\nthe answer is 42"
        )),
        "{done}"
    );
    let stored = record(&fx, &id).await;
    assert_eq!(
        (
            stored.status,
            stored.result.as_deref(),
            stored.session.as_str()
        ),
        (LegStatus::Done, Some("the answer is 42"), session.as_str())
    );
    assert!(stored.ended_ms.is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leg_never_has_the_agent_tools_and_inherits_the_exclusions() {
    let fx = fixture().await;
    let args = json!({"task": "answer:ok", "model": "deep", "name": "scout", "exclude_tools": ["fetch_page"]});
    // The parent's own round excludes http_request.
    let mut round = dispatch_engine::RoundRequest::new(
        "parent",
        "r",
        dispatch_engine::Provider::OpenAi,
        vec![run_tool("c", "background_subagents", args)],
    );
    round.exclude = vec!["http_request".into()];
    let out = fx.h.engine.round(round).await.unwrap();
    assert_eq!(
        out.results[0].status,
        Status::Ok,
        "{}",
        out.results[0].content
    );
    let id = out.results[0]
        .content
        .split("started background subagent ")
        .nth(1)
        .unwrap()
        .split_once(' ')
        .unwrap()
        .0
        .to_string();
    read_until_ended(&fx, &id).await;
    let seen = fx.runner.seen.lock().unwrap().clone();
    let (session, model, exclude) = &seen[0];
    assert_eq!(
        (session.as_str(), model.as_deref()),
        ("parent:sub:scout", Some("deep"))
    );
    for tool in [
        "subagents",
        "background_subagents",
        "edit_file",
        "remove_file",
        "restore_file",
        "generate_*",
        "fetch_page",
        "http_request",
    ] {
        assert!(exclude.contains(&tool.to_string()), "{tool}: {exclude:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixteen_run_at_once_a_seventeenth_is_refused_until_one_is_stopped() {
    let fx = fixture().await;
    let mut ids = Vec::new();
    for i in 0..MAX_BACKGROUND_LEGS {
        ids.push(start(&fx, "parent", &format!("hold:{i}")).await);
    }
    let (status, refused) = call(&fx, json!({"task": "hold:one more"})).await;
    assert_eq!(status, Status::Failed, "{refused}");
    assert!(
        refused.contains("already has 16 background subagents running")
            && refused.contains("mode=stop, id=..."),
        "{refused}"
    );
    // Another session has its own sixteen.
    start(&fx, "other", "hold:elsewhere").await;
    let (status, stopped) = call(&fx, json!({"mode": "stop", "id": ids[0]})).await;
    assert_eq!(status, Status::Ok, "{stopped}");
    assert!(stopped.contains("status: stopped"), "{stopped}");
    start(&fx, "parent", "hold:now there is room").await;
    let (_, list) = call(&fx, json!({"mode": "list"})).await;
    let list: Value = serde_json::from_str(&list).unwrap();
    assert_eq!(list["running"], 16, "{list}");
    let rows = list["background_subagents"].as_array().unwrap();
    assert_eq!(rows.len(), 17);
    let first = rows.iter().find(|l| l["id"] == ids[0].as_str()).unwrap();
    assert_eq!(first["status"], "stopped", "{list}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_cancels_a_running_leg_and_a_second_stop_says_it_is_not_running() {
    let fx = fixture().await;
    let id = start(&fx, "parent", "hold:never").await;
    let (status, text) = call(&fx, json!({"mode": "stop", "id": id})).await;
    assert_eq!(status, Status::Ok, "{text}");
    assert!(
        text.contains("status: stopped") && text.contains("It was stopped before it finished."),
        "{text}"
    );
    assert_eq!(record(&fx, &id).await.status, LegStatus::Stopped);
    let (status, again) = call(&fx, json!({"mode": "stop", "id": id})).await;
    assert_eq!(
        (status, again),
        (
            Status::Ok,
            format!(
                "background subagent {id} is not running (stopped); nothing to stop. mode=read shows what it left."
            )
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leg_that_fails_errs_or_panics_reads_failed_with_why() {
    let fx = fixture().await;
    let gave_up = start(&fx, "parent", "give-up:50 rounds of tool calls").await;
    let errored = start(&fx, "parent", "error").await;
    let panicked = start(&fx, "parent", "panic").await;
    let text = read_until_ended(&fx, &gave_up).await;
    assert!(
        text.contains("status: failed")
            && text.contains(
                "the subagent stopped without an answer: 50 rounds of tool calls\nwhat it had: half of it"
            ),
        "{text}"
    );
    let text = read_until_ended(&fx, &errored).await;
    assert!(
        text.contains("the subagent failed: the model server refused the key"),
        "{text}"
    );
    let text = read_until_ended(&fx, &panicked).await;
    assert!(
        text.contains("the subagent failed: the subagent crashed"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leg_running_under_a_gone_process_reads_interrupted() {
    let fx = fixture().await;
    let leg = LegRecord {
        parent: "parent".into(),
        id: "bg-old".into(),
        session: "parent:sub:bg-old".into(),
        task: "long research".into(),
        model: "fast".into(),
        status: LegStatus::Running,
        progress: Some("running fetch_page".into()),
        result: None,
        input_tokens: 0,
        output_tokens: 0,
        started_ms: 1_700_000_000_000,
        ended_ms: None,
        owner: "p1-a-process-that-is-gone".into(),
    };
    fx.h.store.put_leg(&leg).await.unwrap();
    let (status, text) = call(&fx, json!({"mode": "read", "id": "bg-old"})).await;
    assert_eq!(status, Status::Ok, "{text}");
    assert_eq!(
        text,
        "background subagent bg-old · status: interrupted · model fast · session=parent:sub:bg-old · started 2023-11-14 22:13:20 UTC\nlast progress: running fetch_page\nThe process running it ended (a crash or a restart) before it finished, and it will not resume. Start it again if you still need its answer."
    );
    let (_, list) = call(&fx, json!({})).await;
    let list: Value = serde_json::from_str(&list).unwrap();
    assert_eq!(
        list,
        json!({"background_subagents": [{"id": "bg-old", "status": "interrupted",
               "task": "long research", "model": "fast",
               "started": "2023-11-14 22:13:20 UTC", "ended": null}],
               "running": 0, "max_running": 16})
    );
    let (_, stop) = call(&fx, json!({"mode": "stop", "id": "bg-old"})).await;
    assert!(stop.contains("is not running (interrupted)"), "{stop}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_reaches_the_store_while_the_leg_runs() {
    let fx = fixture().await;
    let id = start(&fx, "parent", "hold:later").await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while record(&fx, &id).await.progress.as_deref() != Some("turn 1: asking fast") {
        assert!(Instant::now() < deadline, "{:?}", record(&fx, &id).await);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    fx.runner.release.add_permits(1);
    read_until_ended(&fx, &id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mistakes_are_told_with_what_to_do() {
    let fx = fixture().await;
    let cases = [
        (
            json!({"mode": "start"}),
            "mode=start needs a task: the whole subtask, written to stand on its own",
        ),
        (
            json!({"mode": "read"}),
            "mode=read needs the id that start returned; mode=list shows this session's ids",
        ),
        (
            json!({"mode": "stop", "id": "bg-nope"}),
            "no background subagent \"bg-nope\": this session has started none",
        ),
        (
            json!({"task": "answer:x", "model": "huge"}),
            "no model named \"huge\"; use one of: fast, deep",
        ),
        (
            json!({"task": "answer:x", "session_id": "parent"}),
            "session_id is this session; a subagent runs in a session of its own",
        ),
    ];
    for (args, want) in cases {
        let (status, text) = call(&fx, args.clone()).await;
        assert_eq!(status, Status::Failed, "{args}");
        assert!(
            text.starts_with(&format!("tool=background_subagents failed: {want}\n")),
            "{args}: {text}"
        );
    }
    let id = start(&fx, "parent", "answer:x").await;
    let (_, text) = call(&fx, json!({"id": "bg-nope"})).await;
    assert!(
        text.starts_with(&format!(
            "tool=background_subagents failed: no background subagent \"bg-nope\" in this session; its ids are: {id}\n"
        )),
        "{text}"
    );
    // Another session cannot read this one's legs.
    let (status, _) = call_in(&fx, "other", json!({"id": id})).await;
    assert_eq!(status, Status::Failed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_model_or_a_store_it_says_what_is_missing() {
    let h = Harness::new();
    h.select("parent", "background_subagents").await;
    let out = h
        .round(
            "parent",
            "r",
            vec![run_tool("c", "background_subagents", json!({"task": "x"}))],
        )
        .await;
    assert_eq!(out.results[0].status, Status::Failed);
    assert!(
        out.results[0]
            .content
            .contains("no model is configured for subagents"),
        "{}",
        out.results[0].content
    );
    let legs = Legs::default();
    legs.bind(Arc::new(Scripted::default()));
    let config = ToolsConfig {
        legs,
        ..ToolsConfig::default()
    };
    let no_store = Harness::with_registry(
        |_| crate::builtin_registry_with(&config, &crate::Stores::default()).unwrap(),
        Arc::new(Headless),
    );
    no_store.select("parent", "background_subagents").await;
    let out = no_store
        .round(
            "parent",
            "r",
            vec![run_tool("c", "background_subagents", json!({"task": "x"}))],
        )
        .await;
    assert!(
        out.results[0]
            .content
            .contains("background subagents need a store"),
        "{}",
        out.results[0].content
    );
}
