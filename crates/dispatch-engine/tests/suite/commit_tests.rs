//! Pass 3 (spec §1.4, §1.6, §8; DESIGN §3.5, §3.13, §4.2, §4.6): result text, `next:` hints,
//! "no data", events, transcript placement, elision, images, ask_user parking, client hand-off,
//! state-aware dedupe, persistence across engines and output shaping.

// Helpers outside #[test] fns unwrap too; a failed unwrap is a failed test.

use std::sync::atomic::Ordering;
use std::sync::{Arc, atomic::AtomicUsize};

use async_trait::async_trait;
use dispatch_engine::{
    ClientTool, Effect, Provider, RoundOutcome, RoundRequest, Status, Tool, ToolContext, ToolError,
    ToolOutput, ToolSpec,
};
use dispatch_store::{Todo, TodoStatus};
use serde_json::{Value, json};

use super::support::*;

/// Returns this todo list as the session's whole new list.
struct Todos {
    spec: ToolSpec,
    list: Vec<Todo>,
}

#[async_trait]
impl Tool for Todos {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }
    async fn call(&self, _cx: ToolContext, _args: Value) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput {
            text: format!("{} todo(s)", self.list.len()),
            todos: Some(self.list.clone()),
            ..ToolOutput::default()
        })
    }
}

fn todo(content: &str, status: TodoStatus) -> Todo {
    Todo {
        content: content.into(),
        status,
        active_form: None,
    }
}

const STORE_SECRET_UNNAMED: &str = "next: store_secret(key=\"<NAME>\") with the name of the credential this call needs (missing or rejected), then retry";

fn store_secret_named(key: &str) -> String {
    format!(
        "next: store_secret(key=\"{key}\") — the call needs a credential that is missing or was rejected; store it, then retry"
    )
}

fn counted(tool: TestTool) -> (TestTool, Arc<AtomicUsize>) {
    let calls = tool.calls.clone();
    (tool, calls)
}

/// `(role, tool_call_id, in_tools, content)` of the run's transcript.
async fn transcript_rows(
    fx: &Fixture,
    session: &str,
    run: &str,
) -> Vec<(String, String, bool, String)> {
    fx.store
        .transcript(session, Some(run))
        .await
        .unwrap()
        .into_iter()
        .map(|e| {
            (
                e.message_json()["role"].as_str().unwrap().to_string(),
                e.message_json()["tool_call_id"]
                    .as_str()
                    .unwrap_or("")
                    .to_string(),
                e.in_tools,
                e.message_json()["content"]
                    .as_str()
                    .unwrap_or("")
                    .to_string(),
            )
        })
        .collect()
}

fn row(role: &str, id: &str, in_tools: bool, content: &str) -> (String, String, bool, String) {
    (role.into(), id.into(), in_tools, content.into())
}

fn ok(id: &str, content: &str) -> (String, Status, String) {
    (id.into(), Status::Ok, content.into())
}

fn with_status(id: &str, status: Status, content: &str) -> (String, Status, String) {
    (id.into(), status, content.into())
}

#[tokio::test]
async fn a_successful_todo_write_emits_todo_update() {
    let list = vec![
        todo("write the tests", TodoStatus::InProgress),
        todo("fix the bugs", TodoStatus::Pending),
    ];
    let fx = fixture()
        .tool(Todos {
            spec: spec("todo"),
            list: list.clone(),
        })
        .tool(Todos {
            spec: spec("todo_clear"),
            list: Vec::new(),
        })
        .build();
    fx.mark_all("s").await;
    let out = fx
        .run("s", "r", vec![wrapped("a", "todo", json!({}))])
        .await;
    assert_eq!(
        event_types(&out.events, None),
        vec![
            "ToolCall",
            "ToolCallStart",
            "ToolCallText",
            "TodoUpdate",
            "ToolCallEnd",
            "ToolResult"
        ]
    );
    let update = events_json(&out.events)
        .into_iter()
        .find(|v| v["type"] == "TodoUpdate")
        .unwrap();
    assert_eq!(update["todos"], serde_json::to_value(&list).unwrap());
    let (session, _) = fx.store.load("s", "").await.unwrap();
    assert_eq!(session.todos, list);

    // An empty list is stored but announces nothing.
    let out = fx
        .run("s", "r", vec![wrapped("b", "todo_clear", json!({}))])
        .await;
    assert_eq!(
        event_types(&out.events, None),
        vec![
            "ToolCall",
            "ToolCallStart",
            "ToolCallText",
            "ToolCallEnd",
            "ToolResult"
        ]
    );
    let (session, _) = fx.store.load("s", "").await.unwrap();
    assert_eq!(session.todos, Vec::<Todo>::new());
}

#[tokio::test]
async fn every_slot_gets_a_tool_result_event_in_call_order_with_its_final_text() {
    let fx = fixture()
        .tool(TestTool::new(spec("echo"), Behaviour::Echo))
        .tool(TestTool::new(spec("bad"), Behaviour::Fail("broken".into())))
        .build();
    fx.mark_all("s").await;
    let out = fx
        .run(
            "s",
            "r",
            vec![
                wrapped("a", "echo", json!({"x": 1})),
                wrapped("b", "bad", json!({})),
                wrapped("c", "nope", json!({})),
                wrapped("d", "echo", json!({"x": 1})),
            ],
        )
        .await;
    let bad = format!("[bad] tool=bad failed: broken\n{}", write_error_hint("bad"));
    let not_found = "tool=run_tool failed: not exist: nope; look it up with find_tools";
    assert_eq!(
        result_rows(&out),
        vec![
            ok("a", r#"[echo] echo:{"x":1}"#),
            with_status("b", Status::Failed, &bad),
            with_status("c", Status::NotFound, not_found),
            with_status("d", Status::Deduped, r#"[echo] echo:{"x":1}"#),
        ]
    );
    let tool_results: Vec<Value> = events_json(&out.events)
        .into_iter()
        .filter(|v| v["type"] == "ToolResult")
        .map(|mut v| {
            v.as_object_mut().unwrap().remove("at_ms");
            v
        })
        .collect();
    assert_eq!(
        tool_results,
        vec![
            json!({"type": "ToolResult", "tool_id": "a", "tool_name": "echo", "tool_args": "{\"x\":1}", "status": "ok", "result": "[echo] echo:{\"x\":1}"}),
            json!({"type": "ToolResult", "tool_id": "b", "tool_name": "bad", "tool_args": "{}", "status": "failed", "result": bad}),
            json!({"type": "ToolResult", "tool_id": "c", "tool_name": "run_tool", "tool_args": "{\"args\":{},\"name\":\"nope\"}", "status": "not_found", "result": not_found}),
            json!({"type": "ToolResult", "tool_id": "d", "tool_name": "echo", "tool_args": "{\"x\":1}", "status": "deduped", "result": "[echo] echo:{\"x\":1}"}),
        ]
    );
}

#[tokio::test]
async fn fresh_results_carry_the_name_prefix_and_dedupe_hits_repeat_it() {
    let (echo, calls) = counted(TestTool::new(spec("echo"), Behaviour::Echo));
    let fx = fixture().tool(echo).build();
    fx.mark_all("s").await;
    let first = fx
        .run("s", "r", vec![wrapped("a", "echo", json!({"x": 1}))])
        .await;
    assert_eq!(result_rows(&first), vec![ok("a", r#"[echo] echo:{"x":1}"#)]);
    let again = fx
        .run("s", "r", vec![wrapped("b", "echo", json!({"x": 1}))])
        .await;
    assert_eq!(
        result_rows(&again),
        vec![with_status("b", Status::Deduped, r#"[echo] echo:{"x":1}"#)]
    );
    assert_eq!(
        again.render(Provider::OpenAi),
        vec![json!({"role": "tool", "tool_call_id": "b", "content": "[echo] echo:{\"x\":1}"})]
    );
    // A dedupe hit emits nothing but its ToolResult.
    assert_eq!(event_types(&again.events, None), vec!["ToolResult"]);
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn dedupe_hits_go_to_tool_histories_only_and_everything_else_to_both() {
    let fx = fixture()
        .tool(TestTool::new(spec("echo"), Behaviour::Echo))
        .build();
    fx.mark_all("s").await;
    fx.run("s", "r", vec![wrapped("a", "echo", json!({"x": 1}))])
        .await;
    let out = fx
        .run(
            "s",
            "r",
            vec![
                wrapped("b", "echo", json!({"x": 1})),
                wrapped("c", "echo", json!({"x": 2})),
                wrapped("d", "nope", json!({})),
            ],
        )
        .await;
    let not_found = out.results[2].content.clone();
    assert_eq!(
        transcript_rows(&fx, "s", "r").await,
        vec![
            row("assistant", "", false, ""),
            row("tool", "a", true, r#"[echo] echo:{"x":1}"#),
            row("assistant", "", false, ""),
            row("tool", "b", false, r#"[echo] echo:{"x":1}"#),
            row("tool", "c", true, r#"[echo] echo:{"x":2}"#),
            row("tool", "d", true, &not_found),
        ]
    );
}

fn ask_args() -> Value {
    json!({
        "questions": [{"question": "Which database?", "options": ["sqlite", "postgres"]}],
        "state": {"objective": "pick a database", "completed": ["read the docs"], "next_steps": ["migrate"]}
    })
}

#[tokio::test]
async fn a_ready_ask_user_parks_the_run_as_a_pending_task() {
    let (ask, ask_calls) = counted(TestTool::new(spec("ask_user").asks_user(), Behaviour::Echo));
    let (echo, echo_calls) = counted(TestTool::new(spec("echo"), Behaviour::Echo));
    let fx = fixture().tool(ask).tool(echo).build();
    fx.mark_all("s").await;
    let out = fx
        .run(
            "s",
            "r",
            vec![
                wrapped("e1", "echo", json!({"x": 1})),
                call("q", "ask_user", &ask_args().to_string()),
                wrapped("e2", "echo", json!({"x": 2})),
                wrapped("nf", "nope", json!({})),
            ],
        )
        .await;
    let not_run = "tool=echo failed: not run — the round paused to ask the user (ask_user); call it again after the answer if you still need it.";
    let not_found = "tool=run_tool failed: not exist: nope; look it up with find_tools";
    assert_eq!(
        result_rows(&out),
        vec![
            with_status("e1", Status::NotRun, not_run),
            with_status("e2", Status::NotRun, not_run),
            with_status("nf", Status::NotFound, not_found),
        ]
    );
    assert_eq!(
        event_seq(&out.events),
        vec![
            ("Pending".to_string(), String::new()),
            ("ToolResult".to_string(), "e1".to_string()),
            ("ToolResult".to_string(), "e2".to_string()),
            ("ToolResult".to_string(), "nf".to_string()),
        ]
    );
    let pending = out.pending.clone().expect("the run was not parked");
    assert_eq!(
        (
            pending.session.as_str(),
            pending.run.as_str(),
            pending.tool_call_id.as_str()
        ),
        ("s", "r", "q")
    );
    assert_eq!(pending.questions, ask_args()["questions"]);
    assert_eq!(pending.state, ask_args()["state"]);
    assert_eq!(
        pending.tool_results,
        vec![
            json!({"name": "echo", "id": "e1", "args": {"x": 1}, "result": not_run}),
            json!({"name": "echo", "id": "e2", "args": {"x": 2}, "result": not_run}),
            json!({"name": "run_tool", "id": "nf", "args": {}, "result": not_found}),
        ]
    );
    let event = events_json(&out.events).remove(0);
    assert_eq!(event["task_hash"], pending.task_hash.as_str());
    assert_eq!(event["text"], pending.task_hash.as_str());
    assert_eq!(event["pending_session"], "s");
    assert_eq!(fx.store.pending("s").await.unwrap(), vec![pending]);
    // The ask_user call has no tool message yet; nothing ran.
    let ids: Vec<String> = transcript_rows(&fx, "s", "r")
        .await
        .into_iter()
        .map(|r| r.1)
        .collect();
    assert_eq!(ids, vec!["", "e1", "e2", "nf"]);
    assert_eq!(ask_calls.load(Ordering::SeqCst), 0);
    assert_eq!(echo_calls.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn ask_user_runs_inline_when_someone_can_answer() {
    let (ask, ask_calls) = counted(TestTool::new(
        spec("ask_user").asks_user(),
        Behaviour::Text("sqlite".into()),
    ));
    let mut interactive = Scripted::with(dispatch_engine::ConfirmReply::default());
    interactive.interactive = true;
    let fx = fixture().tool(ask).confirmer(Arc::new(interactive)).build();
    fx.mark_all("s").await;
    let out = fx
        .run(
            "s",
            "r",
            vec![call("q", "ask_user", &ask_args().to_string())],
        )
        .await;
    assert_eq!(result_rows(&out), vec![ok("q", "[ask_user] sqlite")]);
    assert!(out.pending.is_none());
    assert!(fx.store.pending("s").await.unwrap().is_empty());
    assert_eq!(ask_calls.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn an_executed_failure_reads_tool_name_failed_with_the_error() {
    let fx = fixture()
        .tool(TestTool::new(
            spec("bad"),
            Behaviour::Fail("  disk full  ".into()),
        ))
        .build();
    fx.mark_all("s").await;
    let out = fx.run("s", "r", vec![wrapped("a", "bad", json!({}))]).await;
    assert_eq!(
        result_rows(&out),
        vec![with_status(
            "a",
            Status::Failed,
            &format!(
                "[bad] tool=bad failed: disk full\n{}",
                write_error_hint("bad")
            )
        )]
    );
}

#[tokio::test(start_paused = true)]
async fn every_executed_failure_ends_with_one_next_line() {
    let fx = fixture()
        .tool(TestTool::new(spec("bad"), Behaviour::Fail("nope".into())))
        .tool(TestTool::new(spec("cred"), Behaviour::Credential(None)))
        .tool(TestTool::new(
            spec("boom"),
            Behaviour::Panic("kaboom".into()),
        ))
        .tool(TestTool::new(
            spec("slow").timeout(std::time::Duration::from_secs(1)),
            Behaviour::Sleep(std::time::Duration::from_secs(5)),
        ))
        .tool(TestTool::new(
            spec("fat"),
            Behaviour::Fatal("db gone".into()),
        ))
        .build();
    fx.mark_all("s").await;
    let out = fx
        .run(
            "s",
            "r",
            vec![
                wrapped("a", "bad", json!({})),
                wrapped("b", "cred", json!({})),
                wrapped("c", "boom", json!({})),
                wrapped("d", "slow", json!({})),
                wrapped("e", "fat", json!({})),
                wrapped("f", "nope", json!({})),
            ],
        )
        .await;
    let executed: Vec<(Status, usize, bool)> = out.results[..5]
        .iter()
        .map(|r| {
            (
                r.status,
                r.content.lines().filter(|l| l.starts_with("next:")).count(),
                r.content.lines().last().unwrap().starts_with("next: "),
            )
        })
        .collect();
    assert_eq!(
        executed,
        vec![
            (Status::Failed, 1, true),
            (Status::Failed, 1, true),
            (Status::Failed, 1, true),
            (Status::TimedOut, 1, true),
            (Status::Failed, 1, true),
        ]
    );
    assert_eq!(
        out.results[4].content,
        format!(
            "[fat] tool=fat failed: db gone\n{}",
            write_error_hint("fat")
        )
    );
    assert_eq!(
        out.fatal.as_deref(),
        Some("tool fat failed fatally: db gone")
    );
    // A pre-flight failure carries its own instruction instead.
    assert_eq!(out.results[5].status, Status::NotFound);
    assert!(!out.results[5].content.contains("next:"));
}

#[tokio::test]
async fn credential_failures_point_to_store_secret() {
    let fx = fixture()
        .tool(TestTool::new(
            spec("gh"),
            Behaviour::Credential(Some("GITHUB_TOKEN".into())),
        ))
        .tool(TestTool::new(spec("anon"), Behaviour::Credential(None)))
        .tool(TestTool::new(
            spec("api"),
            Behaviour::Fail("upstream answered HTTP status 401 Unauthorized".into()),
        ))
        .tool(TestTool::new(
            spec("forbid"),
            Behaviour::Fail("request failed: status 403 Forbidden".into()),
        ))
        .tool(TestTool::new(
            spec("ai"),
            Behaviour::Fail("OPENAI_API_KEY is not set".into()),
        ))
        .build();
    fx.mark_all("s").await;
    let out = fx
        .run(
            "s",
            "r",
            vec![
                wrapped("a", "gh", json!({})),
                wrapped("b", "anon", json!({})),
                wrapped("c", "api", json!({})),
                wrapped("d", "forbid", json!({})),
                wrapped("e", "ai", json!({})),
            ],
        )
        .await;
    assert_eq!(
        result_rows(&out),
        vec![
            with_status(
                "a",
                Status::Failed,
                &format!(
                    "[gh] tool=gh failed: the API rejected the key\n{}",
                    store_secret_named("GITHUB_TOKEN")
                )
            ),
            with_status(
                "b",
                Status::Failed,
                &format!(
                    "[anon] tool=anon failed: the API rejected the key\n{STORE_SECRET_UNNAMED}"
                )
            ),
            with_status(
                "c",
                Status::Failed,
                &format!(
                    "[api] tool=api failed: upstream answered HTTP status 401 Unauthorized\n{STORE_SECRET_UNNAMED}"
                )
            ),
            with_status(
                "d",
                Status::Failed,
                &format!(
                    "[forbid] tool=forbid failed: request failed: status 403 Forbidden\n{STORE_SECRET_UNNAMED}"
                )
            ),
            with_status(
                "e",
                Status::Failed,
                &format!(
                    "[ai] tool=ai failed: OPENAI_API_KEY is not set\n{}",
                    store_secret_named("OPENAI_API_KEY")
                )
            ),
        ]
    );
}

#[tokio::test]
async fn other_failures_point_to_write_error_resolved_never_error_history() {
    let fx = fixture()
        .tool(TestTool::new(
            spec("edit"),
            Behaviour::Fail("open /etc/shadow: Permission denied (os error 13)".into()),
        ))
        .tool(TestTool::new(
            spec("build"),
            Behaviour::Fail("error[E0308]: mismatched types".into()),
        ))
        .build();
    fx.mark_all("s").await;
    let out = fx
        .run(
            "s",
            "r",
            vec![
                wrapped("a", "edit", json!({})),
                wrapped("b", "build", json!({})),
            ],
        )
        .await;
    assert_eq!(
        result_rows(&out),
        vec![
            with_status(
                "a",
                Status::Failed,
                &format!(
                    "[edit] tool=edit failed: open /etc/shadow: Permission denied (os error 13)\n{}",
                    write_error_hint("edit")
                )
            ),
            with_status(
                "b",
                Status::Failed,
                &format!(
                    "[build] tool=build failed: error[E0308]: mismatched types\n{}",
                    write_error_hint("build")
                )
            ),
        ]
    );
    assert!(
        out.results
            .iter()
            .all(|r| !r.content.contains("error_history"))
    );
}

#[tokio::test]
async fn an_empty_or_no_data_success_reads_no_data() {
    let fx = fixture()
        .tool(TestTool::new(spec("empty"), Behaviour::Text(String::new())))
        .tool(TestTool::new(
            spec("blank"),
            Behaviour::Text("  \n \t".into()),
        ))
        .tool(TestTool::new(
            spec("nodata"),
            Behaviour::Text("no data".into()),
        ))
        .tool(TestTool::new(
            spec("some"),
            Behaviour::Text(" data \n".into()),
        ))
        .build();
    fx.mark_all("s").await;
    let out = fx
        .run(
            "s",
            "r",
            vec![
                wrapped("a", "empty", json!({})),
                wrapped("b", "blank", json!({})),
                wrapped("c", "nodata", json!({})),
                wrapped("d", "some", json!({})),
            ],
        )
        .await;
    assert_eq!(
        result_rows(&out),
        vec![
            ok("a", "[empty] no data"),
            ok("b", "[blank] no data"),
            ok("c", "[nodata] no data"),
            ok("d", "[some] data"),
        ]
    );
}

fn stored_arguments(entry: &dispatch_store::TranscriptEntry, index: usize) -> Value {
    let message = entry.message_json();
    let text = message["tool_calls"][index]["arguments"].as_str().unwrap();
    serde_json::from_str(text).unwrap()
}

#[tokio::test]
async fn successful_write_calls_have_content_and_targets_elided_from_the_stored_arguments() {
    let fx = fixture()
        .tool(TestTool::new(
            spec("edit").elide_args(&["content", "targets"]),
            Behaviour::Echo,
        ))
        .tool(TestTool::new(
            spec("edit_bad").elide_args(&["content", "targets"]),
            Behaviour::Fail("no such file".into()),
        ))
        .build();
    fx.mark_all("s").await;
    let args = json!({
        "path": "a.txt",
        "content": "hello world",
        "targets": [{"old": "a", "new": "b"}, {"old": "c", "new": "d"}]
    });
    let failing = wrapped("b", "edit_bad", args.clone());
    let out = fx
        .run(
            "s",
            "r1",
            vec![wrapped("a", "edit", args.clone()), failing.clone()],
        )
        .await;
    assert_eq!(out.results[0].status, Status::Ok);
    assert_eq!(out.results[1].status, Status::Failed);
    let transcript = fx.store.transcript("s", Some("r1")).await.unwrap();
    assert_eq!(
        stored_arguments(&transcript[0], 0),
        json!({"name": "edit", "args": {"path": "a.txt", "wrote_bytes": 11, "edits": 2}})
    );
    // A failed call keeps its arguments as sent.
    assert_eq!(
        transcript[0].message_json()["tool_calls"][1]["arguments"],
        failing.arguments.as_str()
    );

    // A direct call (claude-code) is elided at the top level.
    let out = fx
        .round(
            "s",
            "r2",
            Provider::ClaudeCode,
            vec![call(
                "c",
                "edit",
                &json!({"path": "b.txt", "content": "xyz"}).to_string(),
            )],
        )
        .await;
    assert_eq!(out.results[0].status, Status::Ok);
    let transcript = fx.store.transcript("s", Some("r2")).await.unwrap();
    assert_eq!(
        stored_arguments(&transcript[0], 0),
        json!({"path": "b.txt", "wrote_bytes": 3})
    );
}

#[tokio::test]
async fn image_results_are_collected_into_one_user_message_after_the_tool_messages() {
    let fx = fixture()
        .tool(TestTool::new(spec("shot"), Behaviour::Images(2)))
        .tool(TestTool::new(spec("pic"), Behaviour::Images(1)))
        .tool(TestTool::new(spec("txt"), Behaviour::Text("hi".into())))
        .build();
    fx.mark_all("s").await;
    let out = fx
        .run(
            "s",
            "r",
            vec![
                wrapped("a", "shot", json!({})),
                wrapped("b", "txt", json!({})),
                wrapped("c", "pic", json!({})),
            ],
        )
        .await;
    assert_eq!(
        result_rows(&out),
        vec![
            ok("a", "[shot] 2 image(s) loaded"),
            ok("b", "[txt] hi"),
            ok("c", "[pic] 1 image(s) loaded"),
        ]
    );
    assert_eq!(out.results[0].images, vec![PNG_DATA_URL; 2]);
    let part = json!({"type": "image_url", "image_url": {"url": PNG_DATA_URL}});
    assert_eq!(
        out.render(Provider::OpenAi),
        vec![
            json!({"role": "tool", "tool_call_id": "a", "content": "[shot] 2 image(s) loaded"}),
            json!({"role": "tool", "tool_call_id": "b", "content": "[txt] hi"}),
            json!({"role": "tool", "tool_call_id": "c", "content": "[pic] 1 image(s) loaded"}),
            json!({"role": "user", "content": [part, part, part]}),
        ]
    );
    let transcript = fx.store.transcript("s", Some("r")).await.unwrap();
    let last: Vec<Value> = transcript.iter().map(|e| e.message_json()).collect();
    assert_eq!(last.len(), 5);
    assert_eq!(
        last[4],
        json!({"role": "user", "images": [PNG_DATA_URL, PNG_DATA_URL, PNG_DATA_URL]})
    );

    // A dedupe hit re-attaches its images.
    let again = fx
        .run("s", "r", vec![wrapped("d", "shot", json!({}))])
        .await;
    assert_eq!(
        result_rows(&again),
        vec![with_status(
            "d",
            Status::Deduped,
            "[shot] 2 image(s) loaded"
        )]
    );
    assert_eq!(
        again.render(Provider::OpenAi),
        vec![
            json!({"role": "tool", "tool_call_id": "d", "content": "[shot] 2 image(s) loaded"}),
            json!({"role": "user", "content": [part, part]}),
        ]
    );
}

fn client_request(fx: &Fixture, calls: Vec<dispatch_engine::RawCall>) -> RoundRequest {
    let mut req = RoundRequest::new("s", "r", Provider::OpenAi, calls);
    req.client_tools = fx.client_tools(vec![ClientTool {
        name: "pick_file".into(),
        description: "the user picks a file".into(),
        parameters: json!({"type": "object", "properties": {"filter": {"type": "string"}}}),
    }]);
    req
}

async fn client_round() -> (Fixture, RoundOutcome, Arc<AtomicUsize>) {
    let (echo, calls) = counted(TestTool::new(spec("echo"), Behaviour::Echo));
    let fx = fixture().tool(echo).build();
    fx.mark_all("s").await;
    let out = fx
        .request(client_request(
            &fx,
            vec![
                call("a", "find_tools", r#"{"query": "select:echo"}"#),
                wrapped("b", "echo", json!({"x": 1})),
                call("c", "pick_file", r#"{"filter": "*.rs"}"#),
            ],
        ))
        .await;
    (fx, out, calls)
}

#[tokio::test]
async fn a_reply_calling_a_client_tool_is_handed_back_without_running_anything() {
    let (fx, out, calls) = client_round().await;
    assert_eq!(
        result_rows(&out),
        vec![
            with_status(
                "a",
                Status::NotRun,
                "tool=find_tools failed: not run — this reply also called the client tool pick_file, which the caller runs itself, so nothing else in the reply was run. Call find_tools again in your next reply if you still need it."
            ),
            with_status(
                "b",
                Status::NotRun,
                "tool=run_tool failed: not run — this reply also called the client tool pick_file, which the caller runs itself, so nothing else in the reply was run. Call run_tool again in your next reply if you still need it."
            ),
            with_status("c", Status::Client, ""),
        ]
    );
    let types: Vec<String> = event_types(&out.events, None)
        .into_iter()
        .filter(|t| t != "ToolResult")
        .collect();
    assert_eq!(types, vec!["ClientToolCall", "Done"]);
    let handed = events_json(&out.events)
        .into_iter()
        .find(|v| v["type"] == "ClientToolCall")
        .unwrap();
    assert_eq!(
        handed["client_tool_calls"],
        json!([{"id": "c", "name": "pick_file", "arguments": "{\"filter\": \"*.rs\"}"}])
    );
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    // The client's call is the caller's to answer: it is not in the wire results.
    assert_eq!(
        out.render(Provider::OpenAi),
        vec![
            json!({"role": "tool", "tool_call_id": "a", "content": out.results[0].content}),
            json!({"role": "tool", "tool_call_id": "b", "content": out.results[1].content}),
        ]
    );
    let ids: Vec<String> = transcript_rows(&fx, "s", "r")
        .await
        .into_iter()
        .map(|r| r.1)
        .collect();
    assert_eq!(ids, vec!["", "a", "b"]);
}

#[tokio::test]
async fn the_last_event_of_a_committed_round_names_it() {
    let (fx, out, _) = client_round().await;
    let last = events_json(&out.events).pop().unwrap();
    assert_eq!(last["type"], "RoundCommitted");
    assert_eq!(
        (last["run"].as_str(), last["round"].as_u64()),
        (Some(out.run.as_str()), Some(out.round))
    );
    // The stored log keeps it too: readers of the log tell rounds apart by it.
    let stored = fx.store.events("s", 0).await.unwrap();
    let (_, text) = stored.last().unwrap();
    let stored_last: Value = serde_json::from_str(text).unwrap();
    assert_eq!(stored_last["type"], "RoundCommitted");
    assert_eq!(stored_last["round"], out.round);
}

#[tokio::test]
async fn a_client_hand_off_ends_its_event_stream_with_done() {
    let (_fx, out, _) = client_round().await;
    assert_eq!(
        event_seq(&out.events),
        vec![
            ("ClientToolCall".to_string(), String::new()),
            ("ToolResult".to_string(), "a".to_string()),
            ("ToolResult".to_string(), "b".to_string()),
            ("ToolResult".to_string(), "c".to_string()),
            ("Done".to_string(), String::new()),
        ]
    );
}

// ---- State-aware dedupe (DESIGN §4.2) ----

fn reader() -> TestTool {
    TestTool::new(spec("read").effect(Effect::ReadsPaths), Behaviour::ReadPath)
}

fn writer() -> TestTool {
    TestTool::new(
        serial_spec("write").effect(Effect::Mutates),
        Behaviour::WritePath,
    )
}

#[tokio::test]
async fn a_read_is_deduped_until_a_mutating_call_touches_its_path() {
    let (read, reads) = counted(reader());
    let fx = fixture().tool(read).tool(writer()).build();
    std::fs::write(fx.file("a.txt"), "A").unwrap();
    std::fs::write(fx.file("b.txt"), "B").unwrap();
    fx.mark_all("s").await;
    let read_a = |id: &str| wrapped(id, "read", json!({"path": "a.txt"}));
    let read_b = |id: &str| wrapped(id, "read", json!({"path": "b.txt"}));

    let out = fx.run("s", "r", vec![read_a("r1"), read_b("r2")]).await;
    assert_eq!(
        result_rows(&out),
        vec![ok("r1", "[read] A"), ok("r2", "[read] B")]
    );
    let out = fx.run("s", "r", vec![read_a("r3")]).await;
    assert_eq!(
        result_rows(&out),
        vec![with_status("r3", Status::Deduped, "[read] A")]
    );
    let out = fx
        .run(
            "s",
            "r",
            vec![wrapped("w", "write", json!({"path": "a.txt"}))],
        )
        .await;
    assert_eq!(result_rows(&out), vec![ok("w", "[write] wrote")]);
    let out = fx.run("s", "r", vec![read_a("r4"), read_b("r5")]).await;
    assert_eq!(
        result_rows(&out),
        vec![
            ok("r4", "[read] Ax"),
            with_status("r5", Status::Deduped, "[read] B")
        ]
    );
    assert_eq!(reads.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn an_observing_entry_dies_after_any_mutating_commit() {
    let (observe, observes) = counted(TestTool::new(
        spec("observe").effect(Effect::Observes),
        Behaviour::Echo,
    ));
    let (pure, pures) = counted(TestTool::new(spec("pure"), Behaviour::Echo));
    let fx = fixture().tool(observe).tool(pure).tool(writer()).build();
    fx.mark_all("s").await;
    let both = |o: &str, p: &str| {
        vec![
            wrapped(o, "observe", json!({"x": 1})),
            wrapped(p, "pure", json!({"x": 1})),
        ]
    };
    let out = fx.run("s", "r", both("o1", "p1")).await;
    assert_eq!(
        result_rows(&out),
        vec![
            ok("o1", r#"[observe] echo:{"x":1}"#),
            ok("p1", r#"[pure] echo:{"x":1}"#)
        ]
    );
    let out = fx.run("s", "r", both("o2", "p2")).await;
    assert_eq!(
        result_rows(&out),
        vec![
            with_status("o2", Status::Deduped, r#"[observe] echo:{"x":1}"#),
            with_status("p2", Status::Deduped, r#"[pure] echo:{"x":1}"#)
        ]
    );
    // A write of an unrelated file.
    fx.run(
        "s",
        "r",
        vec![wrapped("w", "write", json!({"path": "c.txt"}))],
    )
    .await;
    let out = fx.run("s", "r", both("o3", "p3")).await;
    assert_eq!(
        result_rows(&out),
        vec![
            ok("o3", r#"[observe] echo:{"x":1}"#),
            with_status("p3", Status::Deduped, r#"[pure] echo:{"x":1}"#)
        ]
    );
    assert_eq!(observes.load(Ordering::SeqCst), 2);
    assert_eq!(pures.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_mutating_call_reporting_no_paths_invalidates_path_scoped_entries() {
    let (read, reads) = counted(reader());
    let fx = fixture()
        .tool(read)
        .tool(TestTool::new(
            serial_spec("mutate").effect(Effect::Mutates),
            Behaviour::MutateUnknown,
        ))
        .build();
    std::fs::write(fx.file("a.txt"), "A").unwrap();
    fx.mark_all("s").await;
    let read_a = |id: &str| wrapped(id, "read", json!({"path": "a.txt"}));
    fx.run("s", "r", vec![read_a("r1")]).await;
    let out = fx.run("s", "r", vec![read_a("r2")]).await;
    assert_eq!(out.results[0].status, Status::Deduped);
    fx.run("s", "r", vec![wrapped("m", "mutate", json!({}))])
        .await;
    let out = fx.run("s", "r", vec![read_a("r3")]).await;
    assert_eq!(result_rows(&out), vec![ok("r3", "[read] A")]);
    assert_eq!(reads.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_read_after_a_write_in_the_same_round_is_not_served_from_the_dedupe_map() {
    let (read, reads) = counted(reader());
    let fx = fixture().tool(read).tool(writer()).build();
    std::fs::write(fx.file("a.txt"), "A").unwrap();
    fx.mark_all("s").await;
    let out = fx
        .run(
            "s",
            "r",
            vec![wrapped("r1", "read", json!({"path": "a.txt"}))],
        )
        .await;
    assert_eq!(result_rows(&out), vec![ok("r1", "[read] A")]);
    let out = fx
        .run(
            "s",
            "r",
            vec![
                wrapped("w", "write", json!({"path": "a.txt"})),
                wrapped("r2", "read", json!({"path": "a.txt"})),
            ],
        )
        .await;
    assert_eq!(
        result_rows(&out),
        vec![ok("w", "[write] wrote"), ok("r2", "[read] Ax")]
    );
    assert_eq!(reads.load(Ordering::SeqCst), 2);
}

#[tokio::test]

async fn a_read_refreshed_after_a_write_is_deduped_in_the_next_round() {
    let (read, reads) = counted(reader());
    let fx = fixture().tool(read).tool(writer()).build();
    std::fs::write(fx.file("a.txt"), "A").unwrap();
    fx.mark_all("s").await;
    fx.run(
        "s",
        "r",
        vec![wrapped("r1", "read", json!({"path": "a.txt"}))],
    )
    .await;
    fx.run(
        "s",
        "r",
        vec![
            wrapped("w", "write", json!({"path": "a.txt"})),
            wrapped("r2", "read", json!({"path": "a.txt"})),
        ],
    )
    .await;
    // Nothing changed since r2 read "Ax": the same read is a dedupe hit.
    let out = fx
        .run(
            "s",
            "r",
            vec![wrapped("r3", "read", json!({"path": "a.txt"}))],
        )
        .await;
    assert_eq!(
        result_rows(&out),
        vec![with_status("r3", Status::Deduped, "[read] Ax")]
    );
    assert_eq!(reads.load(Ordering::SeqCst), 2);
}

#[tokio::test]

async fn a_repeated_read_after_a_write_in_the_same_round_sees_the_write() {
    let (read, reads) = counted(reader());
    let fx = fixture().tool(read).tool(writer()).build();
    std::fs::write(fx.file("a.txt"), "A").unwrap();
    fx.mark_all("s").await;
    let out = fx
        .run(
            "s",
            "r",
            vec![
                wrapped("r1", "read", json!({"path": "a.txt"})),
                wrapped("w", "write", json!({"path": "a.txt"})),
                wrapped("r2", "read", json!({"path": "a.txt"})),
            ],
        )
        .await;
    assert_eq!(
        result_rows(&out),
        vec![
            ok("r1", "[read] A"),
            ok("w", "[write] wrote"),
            ok("r2", "[read] Ax")
        ]
    );
    assert_eq!(reads.load(Ordering::SeqCst), 2);
}

// ---- Persistence and shaping ----

#[tokio::test]
async fn two_engines_over_one_sqlite_file_behave_as_one_run() {
    let db = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", db.path().join("s.db").display());
    let (first_echo, first_calls) = counted(TestTool::new(spec("echo"), Behaviour::Echo));
    let first = fixture()
        .tool(first_echo)
        .store(dispatch_store::open(&url).unwrap())
        .build();
    first.mark_all("s").await;
    let out = first
        .run("s", "r", vec![wrapped("a", "echo", json!({"x": 1}))])
        .await;
    assert_eq!(result_rows(&out), vec![ok("a", r#"[echo] echo:{"x":1}"#)]);

    let (second_echo, second_calls) = counted(TestTool::new(spec("echo"), Behaviour::Echo));
    let second = fixture()
        .tool(second_echo)
        .store(dispatch_store::open(&url).unwrap())
        .build();
    // No mark_all here: the marked set comes from the file, and so does the dedupe map.
    let out = second
        .run(
            "s",
            "r",
            vec![
                wrapped("b", "echo", json!({"x": 1})),
                wrapped("c", "echo", json!({"x": 2})),
            ],
        )
        .await;
    assert_eq!(
        result_rows(&out),
        vec![
            with_status("b", Status::Deduped, r#"[echo] echo:{"x":1}"#),
            ok("c", r#"[echo] echo:{"x":2}"#)
        ]
    );
    assert_eq!(out.round, 2);
    assert_eq!(first_calls.load(Ordering::SeqCst), 1);
    assert_eq!(second_calls.load(Ordering::SeqCst), 1);
    // The first engine sees what the second committed.
    let back = first
        .run("s", "r", vec![wrapped("d", "echo", json!({"x": 2}))])
        .await;
    assert_eq!(
        result_rows(&back),
        vec![with_status("d", Status::Deduped, r#"[echo] echo:{"x":2}"#)]
    );
    assert_eq!(
        first.store.transcript("s", Some("r")).await.unwrap().len(),
        7
    );
}

#[tokio::test]
async fn an_oversized_result_is_shaped_with_the_notice_on_top_and_spilled_whole() {
    let mut lines: Vec<String> = (1..=60)
        .map(|i| format!("line {i:02} of ordinary output"))
        .collect();
    lines[29] = "error: something broke".to_string();
    let text = lines.join("\n");
    let fx = fixture()
        .tool(TestTool::new(spec("big"), Behaviour::Text(text.clone())))
        .tool(TestTool::new(
            spec("small"),
            Behaviour::Text("hello".into()),
        ))
        .config(|c| c.result_budget = 200)
        .build();
    fx.mark_all("s").await;
    let out = fx
        .run(
            "s",
            "r",
            vec![
                wrapped("c1", "big", json!({})),
                wrapped("c2", "small", json!({})),
            ],
        )
        .await;
    let content = &out.results[0].content;
    let notice = content.lines().next().unwrap();
    // sessions/<safe session>-<hash>/results/<safe run>-<hash>-r<round>-<safe call>-<hash>.txt
    let spill = std::path::PathBuf::from(
        notice
            .split("full text: ")
            .nth(1)
            .and_then(|rest| rest.split(" (read it").next())
            .unwrap(),
    );
    assert!(
        spill.starts_with(fx.path().join(".data/sessions")),
        "{}",
        spill.display()
    );
    let file_name = spill.file_name().unwrap().to_str().unwrap();
    assert!(
        file_name.starts_with("r-") && file_name.contains("-r1-c1-") && file_name.ends_with(".txt"),
        "{file_name}"
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&spill).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "spilled results are private");
    }
    assert!(
        notice.starts_with(&format!(
            "[big] [output shaped: {} bytes in 60 lines, over the 200-byte budget; showing lines 1-",
            text.len()
        )),
        "{notice}"
    );
    assert!(
        notice.ends_with(&format!(
            "; full text: {} (read it with read_files and offset/limit)]",
            spill.display()
        )),
        "{notice}"
    );
    assert!(
        content.contains("\nline 01 of ordinary output\n"),
        "{content}"
    );
    assert!(
        content.contains("\n30: error: something broke\n"),
        "{content}"
    );
    assert!(
        content.ends_with("\nline 60 of ordinary output"),
        "{content}"
    );
    assert!(!content.contains("line 31 of ordinary output"), "{content}");
    assert!(content.len() < text.len());
    assert_eq!(std::fs::read_to_string(&spill).unwrap(), text);
    assert_eq!(out.results[0].status, Status::Ok);
    assert_eq!(out.results[1].content, "[small] hello");
    assert!(!fx.path().join(".data/sessions/s/results/c2.txt").exists());

    // The same call id in round 1 of another run spills to its own file: nothing overwritten.
    let again = fx
        .run("s", "r2", vec![wrapped("c1", "big", json!({}))])
        .await;
    let other = again.results[0].content.lines().next().unwrap().to_string();
    assert!(!other.contains(&spill.display().to_string()), "{other}");
    assert_eq!(
        std::fs::read_to_string(&spill).unwrap(),
        text,
        "the first spill is intact"
    );
}

/// Issue 21: a dedupe hit gives the model what it read the first time, byte for byte (the
/// `[name] ` prefix included): text, images, a failure and "no data", repeated in the same round
/// and in the next one, in every wire format.
#[tokio::test]
async fn a_dedupe_hit_is_the_first_result_byte_for_byte_in_every_format() {
    let tools = [
        ("words", Behaviour::Text("alpha beta".into())),
        ("pics", Behaviour::Images(1)),
        ("broken", Behaviour::Fail("disk on fire".into())),
        ("nothing", Behaviour::Text(String::new())),
    ];
    for provider in Provider::ALL {
        let mut builder = fixture();
        for (name, behaviour) in &tools {
            builder = builder.tool(TestTool::new(spec(name), behaviour.clone()));
        }
        let fx = builder.build();
        fx.mark_all("s").await;
        let firsts: Vec<_> = tools
            .iter()
            .map(|(name, _)| wrapped(&format!("c_{name}"), name, json!({"x": 1})))
            .collect();
        let repeats = tools
            .iter()
            .map(|(name, _)| wrapped(&format!("again_{name}"), name, json!({"x": 1})));
        let first = fx
            .round(
                "s",
                "r",
                provider,
                firsts.iter().cloned().chain(repeats).collect(),
            )
            .await;
        let n = tools.len();
        for (i, (name, _)) in tools.iter().enumerate() {
            let (once, again) = (&first.results[i], &first.results[n + i]);
            assert_ne!(once.status, Status::Deduped, "{provider} {name}");
            assert!(
                once.content.starts_with(&format!("[{name}] ")),
                "{provider}: {}",
                once.content
            );
            assert_eq!(again.status, Status::Deduped, "{provider} {name}");
            assert_eq!(again.content, once.content, "{provider} {name}, same round");
            assert_eq!(again.images, once.images, "{provider} {name}, same round");
            assert_eq!(
                again.is_error, once.is_error,
                "{provider} {name}, same round"
            );
        }
        // The next round, with the same ids: every call is a hit and renders exactly as the
        // first round's did, in the provider's own format.
        let second = fx.round("s", "r", provider, firsts).await;
        assert!(
            second.results.iter().all(|r| r.status == Status::Deduped),
            "{provider}: {:?}",
            results(&second)
        );
        let mut first_only = first.clone();
        first_only.results.truncate(n);
        assert_eq!(
            second.render(provider),
            first_only.render(provider),
            "{provider}: the next round's hits"
        );
    }
}
