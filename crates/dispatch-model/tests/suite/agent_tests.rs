//! The agent loop against a scripted OpenAI-compatible server on 127.0.0.1, with the real
//! engine, real built-in tools and a real store: rounds until the answer, max_rounds, a
//! misspelled tool, ask_user with nobody to answer, a session continued by a new process.

use std::sync::{Arc, Mutex};

use dispatch_engine::{Engine, EngineConfig, Headless};
use dispatch_model::{
    Agent, AgentEnd, AgentError, AgentEvent, AgentRequest, ModelClient, ProviderKind, TaskAnswer,
};
use dispatch_store::{ConversationEntry, Store};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use super::support::{FakeServer, Reply, client};

/// A streamed Chat Completions answer of plain text.
pub(super) fn says(text: &str) -> Reply {
    stream(
        json!({"role": "assistant", "content": text}),
        "stop",
        (10, 3),
    )
}

/// A streamed Chat Completions answer calling `(id, name, arguments)`.
pub(super) fn calls(calls: &[(&str, &str, Value)]) -> Reply {
    let tool_calls: Vec<Value> = calls
        .iter()
        .enumerate()
        .map(|(index, (id, name, args))| {
            json!({"index": index, "id": id, "type": "function",
                   "function": {"name": name, "arguments": args.to_string()}})
        })
        .collect();
    stream(
        json!({"role": "assistant", "content": null, "tool_calls": tool_calls}),
        "tool_calls",
        (20, 7),
    )
}

fn stream(delta: Value, finish: &str, (prompt, completion): (u64, u64)) -> Reply {
    let chunk = |delta: Value, finish: Option<&str>| {
        json!({"id": "c", "object": "chat.completion.chunk",
               "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    };
    let usage = json!({"id": "c", "object": "chat.completion.chunk", "choices": [],
                       "usage": {"prompt_tokens": prompt, "completion_tokens": completion}});
    let body = [chunk(delta, None), chunk(json!({}), Some(finish)), usage]
        .iter()
        .map(|v| format!("data: {v}\n\n"))
        .collect::<String>()
        + "data: [DONE]\n\n";
    Reply::raw_sse(&body)
}

struct Fixture {
    agent: Agent,
    store: Arc<dyn Store>,
    _workdir: tempfile::TempDir,
}

fn agent_over(store: Arc<dyn Store>, model: ModelClient) -> Fixture {
    let workdir = tempfile::tempdir().unwrap();
    let stores = dispatch_tools::Stores::all(&store);
    let registry =
        dispatch_tools::builtin_registry_with(&dispatch_tools::ToolsConfig::default(), &stores)
            .unwrap();
    let config = EngineConfig::new(workdir.path().canonicalize().unwrap());
    let engine = Engine::new(registry, store.clone(), Arc::new(Headless), config)
        .unwrap()
        .with_error_memory(store.clone())
        .with_result_cache(store.clone())
        .with_secrets(store.clone());
    Fixture {
        agent: Agent::new(Arc::new(engine), store.clone(), Arc::new(model), "test"),
        store,
        _workdir: workdir,
    }
}

impl Fixture {
    async fn agent_waits_on_nothing(&self) -> bool {
        self.store.pending("s").await.unwrap().is_empty()
    }
}

fn memory_agent(server: &FakeServer) -> Fixture {
    agent_over(
        Arc::new(dispatch_store::memory::MemoryStore::default()),
        client(ProviderKind::OpenAi, server),
    )
}

/// The messages of the `n`th request the server got.
fn messages(server: &FakeServer, n: usize) -> Vec<Value> {
    server.requests()[n].body["messages"]
        .as_array()
        .unwrap()
        .clone()
}

#[tokio::test]
async fn a_task_runs_rounds_until_the_model_answers() {
    let server = FakeServer::start(vec![
        calls(&[("c1", "find_tools", json!({"query": "select:calculate"}))]),
        calls(&[(
            "c2",
            "run_tool",
            json!({"name": "calculate", "args": {"expressions": ["6*7"]}}),
        )]),
        says("It is 42."),
    ])
    .await;
    let fx = memory_agent(&server);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let mut req = AgentRequest::new("s", "What is 6*7?");
    let log = seen.clone();
    req.on_event = Some(Arc::new(move |e: AgentEvent| log.lock().unwrap().push(e)));
    let outcome = fx.agent.run(req).await.unwrap();
    assert_eq!(
        outcome.end,
        AgentEnd::Answer {
            text: "It is 42.".into()
        }
    );
    assert_eq!(
        (
            outcome.run.as_str(),
            outcome.rounds,
            outcome.input_tokens,
            outcome.output_tokens
        ),
        ("turn-1", 2, 50, 17)
    );
    // The third request carries the whole exchange, the results as the engine rendered them.
    let third = messages(&server, 2);
    assert_eq!(
        third[0],
        json!({"role": "system", "content": third[0]["content"]})
    );
    assert_eq!(third[1], json!({"role": "user", "content": "What is 6*7?"}));
    assert_eq!(third[2]["tool_calls"][0]["id"], "c1");
    assert_eq!(third[3]["tool_call_id"], "c1");
    assert_eq!(
        third[5],
        json!({"role": "tool", "tool_call_id": "c2", "content": "[calculate] {\"6*7\":\"42\"}"})
    );
    assert_eq!(third.len(), 6);
    // The system prompt names the work directory and the deferred tools.
    let system = third[0]["content"].as_str().unwrap();
    assert!(system.contains("Work directory: "), "{system}");
    assert!(system.contains("calculate"), "{system}");
    // The conversation is kept: the user's task, two rounds, the answer.
    let kept: Vec<Value> = fx
        .store
        .conversation("s")
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.message)
        .collect();
    assert_eq!(kept.len(), 6);
    assert_eq!(kept[..5], third[1..]);
    assert_eq!(kept[5]["content"], "It is 42.");
    let model_calls = seen
        .lock()
        .unwrap()
        .iter()
        .filter(|e| matches!(e, AgentEvent::ModelCall { .. }))
        .count();
    assert_eq!(model_calls, 3);
}

#[tokio::test]
async fn max_rounds_stops_a_model_that_never_stops_calling_tools() {
    let again = |id: &str| {
        calls(&[(
            id,
            "write_todo",
            json!({"todos": [{"content": id, "status": "pending"}]}),
        )])
    };
    let server = FakeServer::start(vec![again("a"), again("b"), again("c"), again("d")]).await;
    let fx = memory_agent(&server);
    let mut req = AgentRequest::new("s", "loop forever");
    req.max_rounds = 2;
    let outcome = fx.agent.run(req).await.unwrap();
    assert_eq!(outcome.end, AgentEnd::MaxRounds { rounds: 2 });
    assert_eq!(outcome.rounds, 2);
    // Two rounds ran; the third answer's calls were not run and are not kept.
    assert_eq!(server.requests().len(), 3);
    let kept = fx.store.conversation("s").await.unwrap();
    assert_eq!(kept.len(), 1 + 2 * 2);
}

#[tokio::test]
async fn a_misspelled_tool_gets_a_result_the_model_can_act_on() {
    let server = FakeServer::start(vec![
        calls(&[("x", "calcualte", json!({"expressions": ["1+1"]}))]),
        says("ok"),
    ])
    .await;
    let fx = memory_agent(&server);
    let outcome = fx.agent.run(AgentRequest::new("s", "add")).await.unwrap();
    assert_eq!(outcome.end, AgentEnd::Answer { text: "ok".into() });
    let second = messages(&server, 1);
    let result = second.last().unwrap()["content"].as_str().unwrap();
    assert!(
        result.contains("not exist: calcualte") && result.contains("run_tool(name=calculate)"),
        "{result}"
    );
}

#[tokio::test]
async fn ask_user_with_nobody_to_answer_leaves_the_run_waiting() {
    let server = FakeServer::start(vec![calls(&[(
        "q",
        "ask_user",
        json!({"questions": [{"question": "Which database?"}],
               "state": {"objective": "set up", "completed": [], "next_steps": ["migrate"]}}),
    )])])
    .await;
    let fx = memory_agent(&server);
    let outcome = fx
        .agent
        .run(AgentRequest::new("s", "set up"))
        .await
        .unwrap();
    let AgentEnd::Waiting { task } = outcome.end else {
        panic!("not waiting: {:?}", outcome.end);
    };
    assert_eq!(
        (task.tool.as_str(), task.tool_call_id.as_str()),
        ("ask_user", "q")
    );
    // One model request: the loop stopped at the question.
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn the_answer_to_a_waiting_turn_goes_back_to_the_model_and_the_turn_goes_on() {
    let server = FakeServer::start(vec![
        calls(&[
            (
                "t",
                "write_todo",
                json!({"todos": [{"content": "migrate", "status": "pending"}]}),
            ),
            (
                "q",
                "ask_user",
                json!({"questions": [{"question": "Which database?"}],
                       "state": {"objective": "set up", "completed": [], "next_steps": ["migrate"]}}),
            ),
        ]),
        says("Postgres it is."),
    ])
    .await;
    let fx = memory_agent(&server);
    let outcome = fx
        .agent
        .run(AgentRequest::new("s", "set up"))
        .await
        .unwrap();
    let AgentEnd::Waiting { task } = outcome.end else {
        panic!("not waiting: {:?}", outcome.end);
    };

    // A new task while the call waits would leave it without a result: refused.
    let error = fx
        .agent
        .run(AgentRequest::new("s", "something else"))
        .await
        .unwrap_err();
    assert!(
        matches!(&error, AgentError::WaitsOnUser { task: t, .. } if *t == task.task_hash),
        "{error}"
    );
    // An answer to a task that does not wait is refused, naming the one that does.
    let mut wrong = AgentRequest::new("s", "");
    wrong.answer = Some(TaskAnswer {
        task: "nope".into(),
        answers: vec!["x".into()],
    });
    let error = fx.agent.run(wrong).await.unwrap_err();
    assert!(error.to_string().contains(&task.task_hash), "{error}");
    assert_eq!(server.requests().len(), 1, "no model request for refusals");

    let mut go_on = AgentRequest::new("s", "");
    go_on.answer = Some(TaskAnswer {
        task: task.task_hash.clone(),
        answers: vec!["Postgres".into()],
    });
    let outcome = fx.agent.run(go_on).await.unwrap();
    assert_eq!(
        outcome.end,
        AgentEnd::Answer {
            text: "Postgres it is.".into()
        }
    );
    assert_eq!(outcome.run, "turn-1", "the turn that asked goes on");
    // The model gets both calls' results after its reply: the one that did not run, and the
    // answer.
    let sent = messages(&server, 1);
    let results: Vec<(&str, &str)> = sent
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| {
            (
                m["tool_call_id"].as_str().unwrap(),
                m["content"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(results.len(), 2, "{sent:#?}");
    assert_eq!(results[0].0, "t");
    assert!(results[0].1.contains("not run"), "{results:?}");
    assert_eq!(results[1].0, "q");
    assert!(results[1].1.contains("Postgres"), "{results:?}");
    assert!(fx.agent_waits_on_nothing().await);
}

#[tokio::test]
async fn a_session_continues_in_the_next_process_over_the_same_store() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("store.db").display());
    let server = FakeServer::start(vec![says("first answer"), says("second answer")]).await;
    {
        let fx = agent_over(
            dispatch_store::open(&url).unwrap(),
            client(ProviderKind::OpenAi, &server),
        );
        fx.agent.run(AgentRequest::new("s", "one")).await.unwrap();
    }
    let fx = agent_over(
        dispatch_store::open(&url).unwrap(),
        client(ProviderKind::OpenAi, &server),
    );
    let outcome = fx.agent.run(AgentRequest::new("s", "two")).await.unwrap();
    assert_eq!(outcome.run, "turn-2");
    let second: Vec<Value> = messages(&server, 1).into_iter().skip(1).collect();
    assert_eq!(
        second,
        [
            json!({"role": "user", "content": "one"}),
            json!({"role": "assistant", "content": "first answer"}),
            json!({"role": "user", "content": "two"}),
        ]
    );
}

#[tokio::test]
async fn a_conversation_held_with_another_provider_is_refused() {
    let server = FakeServer::start(vec![says("never asked")]).await;
    let fx = memory_agent(&server);
    fx.store
        .append_conversation(
            "s",
            vec![ConversationEntry {
                api: "gemini".into(),
                message: json!({"role": "user", "parts": [{"text": "hi"}]}),
                at_ms: 1,
            }],
        )
        .await
        .unwrap();
    let error = fx
        .agent
        .run(AgentRequest::new("s", "go on"))
        .await
        .unwrap_err();
    assert!(matches!(error, AgentError::Conversation(_)), "{error}");
    assert!(error.to_string().contains("gemini"), "{error}");
    assert!(server.requests().is_empty());
}
