//! Pass 1 (pre-flight) and the run's dedupe map: seed checklist items 1–19, 24, 25, 60–62,
//! 81 and 82, each checked through a real engine round.
// Helpers outside #[test] functions unwrap too: a failure there is a test failure.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use dispatch_engine::canonical::dedupe_key;
use dispatch_engine::gate::HEADLESS_REASON;
use dispatch_engine::{
    Effect, Gate, Provider, RawCall, RoundOutcome, RoundRequest, Status, Tool, ToolContext,
    ToolError, ToolOutput, ToolSpec,
};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use super::support::*;

// ---------------------------------------------------------------------------------------------
// Helpers

/// A concurrent pure tool that asks before it runs.
fn gated(name: &str) -> ToolSpec {
    spec(name).gate(Gate::Ask)
}

/// A round with an exclusion list.
async fn round_excluding(
    fx: &Fixture,
    session: &str,
    run: &str,
    provider: Provider,
    exclude: &[&str],
    calls: Vec<RawCall>,
) -> RoundOutcome {
    let mut req = RoundRequest::new(session, run, provider, calls);
    req.exclude = exclude.iter().map(|e| e.to_string()).collect();
    fx.request(req).await
}

/// The `ToolResult` event of one call.
fn result_event(out: &RoundOutcome, id: &str) -> Value {
    let found: Vec<Value> = events_json(&out.events)
        .into_iter()
        .filter(|e| e["type"] == "ToolResult" && e["tool_id"] == id)
        .collect();
    assert_eq!(found.len(), 1, "one ToolResult for {id}: {found:?}");
    found[0].clone()
}

/// The `next:` line every executed failure ends with (no credential involved).
fn next_write_error(tool: &str) -> String {
    format!(
        "next: once a different fix works, call write_error(tool_name=\"{tool}\", keywords=[...], symptom=..., action=..., outcome=\"resolved\") so the next run finds it"
    )
}

/// What a headless decline tells the model.
fn headless_decline(tool: &str) -> String {
    format!(
        "Not run: this call needs the user's approval ({tool} can change things and no rule in .tooldispatch/rules allows this call), and {HEADLESS_REASON}. Continue without it, or use ask_user to agree on another approach."
    )
}

const DECLINED_TAIL: &str = "Retrying it, or reissuing it with different arguments, produces the same prompt and the same refusal. Continue without it, or use ask_user to agree on another approach.";

/// What a file tool does; every variant reports the resolved absolute paths it touched.
#[derive(Clone, Copy)]
enum FileOp {
    /// Reads `path`.
    Read,
    /// Appends `x` to `path`.
    Append,
    /// Deletes `path`.
    Remove,
    /// Writes `restored v<version>` to this fixed file (the path is not in the arguments).
    Restore(&'static str),
    /// Fails without touching anything.
    Fail,
}

struct FileTool {
    spec: ToolSpec,
    op: FileOp,
    calls: Arc<AtomicUsize>,
}

impl FileTool {
    fn new(spec: ToolSpec, op: FileOp) -> (Self, Arc<AtomicUsize>) {
        let calls = Arc::new(AtomicUsize::new(0));
        (
            FileTool {
                spec,
                op,
                calls: calls.clone(),
            },
            calls,
        )
    }
}

fn resolve(cx: &ToolContext, rel: &str) -> Result<PathBuf, ToolError> {
    cx.workdir
        .join(rel)
        .canonicalize()
        .map_err(|e| ToolError::failed(format!("{rel}: {e}")))
}

#[async_trait]
impl Tool for FileTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, cx: ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let rel = args.get("path").and_then(Value::as_str).unwrap_or("");
        let io = |e: std::io::Error| ToolError::failed(e.to_string());
        match self.op {
            FileOp::Read => {
                let p = resolve(&cx, rel)?;
                let text = std::fs::read_to_string(&p).map_err(io)?;
                Ok(ToolOutput::text(text).with_paths(vec![p]))
            }
            FileOp::Append => {
                let p = resolve(&cx, rel)?;
                let mut text = std::fs::read_to_string(&p).map_err(io)?;
                text.push('x');
                std::fs::write(&p, text).map_err(io)?;
                Ok(ToolOutput::text("wrote").with_paths(vec![p]))
            }
            FileOp::Remove => {
                let p = resolve(&cx, rel)?;
                std::fs::remove_file(&p).map_err(io)?;
                Ok(ToolOutput::text("removed").with_paths(vec![p]))
            }
            FileOp::Restore(file) => {
                let p = resolve(&cx, file)?;
                let version = args.get("version").cloned().unwrap_or(Value::Null);
                std::fs::write(&p, format!("restored v{version}")).map_err(io)?;
                Ok(ToolOutput::text("restored").with_paths(vec![p]))
            }
            FileOp::Fail => Err(ToolError::failed("old_string not found")),
        }
    }
}

fn path_schema() -> Value {
    json!({"type": "object", "properties": {"path": {"type": "string"}, "version": {"type": "integer"}}})
}

/// read_files: concurrent, read-only, depends on the paths it reports.
fn read_files_spec() -> ToolSpec {
    ToolSpec::new("read_files", "read a file", path_schema())
        .read_only()
        .concurrent()
        .effect(Effect::ReadsPaths)
}

/// A serial, mutating tool behind the given gate.
fn mutating_spec(name: &str, gate: Gate) -> ToolSpec {
    ToolSpec::new(name, format!("mutating {name}"), path_schema())
        .gate(gate)
        .effect(Effect::Mutates)
}

fn read(id: &str, path: &str) -> RawCall {
    call(id, "read_files", &json!({"path": path}).to_string())
}

// ---------------------------------------------------------------------------------------------
// §1.2 slot creation and the dedupe key (items 1–4)

#[tokio::test]
async fn call_name_and_arguments_are_trimmed_name_cut_at_special_token_and_id_kept_as_sent() {
    let (tool, calls) = counted(spec("echo"), Behaviour::Echo);
    let fx = fixture().tool(tool).build();
    fx.mark_all("s").await;
    let out = fx
        .round(
            "s",
            "r",
            Provider::ClaudeCode,
            vec![
                call("  c1 \n", " echo<|channel|>commentary ", "  {\"x\": 1}\t "),
                call(
                    "\tc2 ",
                    " run_tool<|channel|>",
                    &json!({"name": " echo<|x|> ", "args": {"x": 2}}).to_string(),
                ),
            ],
        )
        .await;
    let ids: Vec<(&str, &str)> = out
        .results
        .iter()
        .map(|r| (r.tool_call_id.as_str(), r.name.as_str()))
        .collect();
    // The id goes back to the provider exactly as it came.
    assert_eq!(ids, vec![("  c1 \n", "echo"), ("\tc2 ", "echo")]);
    assert_eq!(
        results(&out),
        vec![
            (Status::Ok, r#"[echo] echo:{"x":1}"#.to_string()),
            (Status::Ok, r#"[echo] echo:{"x":2}"#.to_string()),
        ]
    );
    let call_event = events_json(&out.events)
        .into_iter()
        .find(|e| e["type"] == "ToolCall" && e["tool_id"] == "  c1 \n")
        .expect("a ToolCall event for c1");
    assert_eq!(call_event["tool_name"], "echo");
    assert_eq!(call_event["tool_args"], r#"{"x": 1}"#);
    assert_eq!(count(&calls), 2);
}

#[tokio::test]
async fn dedupe_key_ignores_key_order_and_whitespace_of_arguments() {
    let (tool, calls) = counted(spec("echo"), Behaviour::Echo);
    let fx = fixture().tool(tool).build();
    fx.mark_all("s").await;
    let first = fx
        .round(
            "s",
            "r",
            Provider::ClaudeCode,
            vec![call("a", "echo", r#"{"b":1,"a":[1,2]}"#)],
        )
        .await;
    assert_eq!(
        results(&first),
        vec![(Status::Ok, r#"[echo] echo:{"a":[1,2],"b":1}"#.to_string())]
    );
    let same = fx
        .round(
            "s",
            "r",
            Provider::ClaudeCode,
            vec![call("b", "echo", "{ \"a\" : [ 1, 2 ],\n   \"b\" : 1 }")],
        )
        .await;
    assert_eq!(
        results(&same),
        vec![(
            Status::Deduped,
            r#"[echo] echo:{"a":[1,2],"b":1}"#.to_string()
        )]
    );
    // One value changed: a different key, so it runs.
    let changed = fx
        .round(
            "s",
            "r",
            Provider::ClaudeCode,
            vec![call("c", "echo", r#"{"a":[1,2],"b":2}"#)],
        )
        .await;
    assert_eq!(
        results(&changed),
        vec![(Status::Ok, r#"[echo] echo:{"a":[1,2],"b":2}"#.to_string())]
    );
    assert_eq!(count(&calls), 2);
}

#[tokio::test]
async fn dedupe_key_uses_raw_trimmed_text_when_args_are_not_an_object() {
    // Non-object text is keyed by its trimmed raw form: spacing inside it matters, padding not.
    assert_eq!(
        dedupe_key("t", Some(&json!([1, 2])), "  [1, 2] \n"),
        dedupe_key("t", None, "[1, 2]")
    );
    assert_ne!(
        dedupe_key("t", Some(&json!([1, 2])), "[1, 2]"),
        dedupe_key("t", Some(&json!([1, 2])), "[1,2]")
    );
    assert_ne!(
        dedupe_key("t", Some(&json!({})), "{}"),
        dedupe_key("t", Some(&Value::Null), "null")
    );

    // Through the engine: empty argument text runs as `{}` and is keyed by its (empty) raw text.
    let (tool, calls) = counted(spec("echo"), Behaviour::Echo);
    let fx = fixture().tool(tool).build();
    fx.mark_all("s").await;
    let out = fx
        .round(
            "s",
            "r",
            Provider::ClaudeCode,
            vec![call("a", "echo", ""), call("b", "echo", "   ")],
        )
        .await;
    assert_eq!(
        results(&out),
        vec![
            (Status::Ok, "[echo] echo:{}".to_string()),
            (Status::Deduped, "[echo] echo:{}".to_string()),
        ]
    );
    // `null` is a different raw text from the empty one, so it is a different key and runs.
    let null = fx
        .round(
            "s",
            "r",
            Provider::ClaudeCode,
            vec![call("c", "echo", "null")],
        )
        .await;
    assert_eq!(
        results(&null),
        vec![(Status::Ok, "[echo] echo:{}".to_string())]
    );
    assert_eq!(count(&calls), 2);
}

#[tokio::test]
async fn run_tool_is_unwrapped_before_hashing_and_absent_args_become_empty_object() {
    let (tool, calls) = counted(spec("echo"), Behaviour::Echo);
    let fx = fixture().tool(tool).build();
    fx.mark_all("s").await;
    let out = fx
        .round(
            "s",
            "r",
            Provider::ClaudeCode,
            vec![
                wrapped("a", "echo", json!({"x": 1})),
                call("b", "echo", r#"{"x": 1}"#),
                call("c", "run_tool", r#"{"name": "echo"}"#),
                call("d", "run_tool", r#"{"name": "echo", "args": null}"#),
                call("e", "echo", "{}"),
            ],
        )
        .await;
    let names: Vec<&str> = out.results.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, vec!["echo"; 5]);
    assert_eq!(
        results(&out),
        vec![
            (Status::Ok, r#"[echo] echo:{"x":1}"#.to_string()),
            (Status::Deduped, r#"[echo] echo:{"x":1}"#.to_string()),
            (Status::Ok, "[echo] echo:{}".to_string()),
            (Status::Deduped, "[echo] echo:{}".to_string()),
            (Status::Deduped, "[echo] echo:{}".to_string()),
        ]
    );
    assert_eq!(count(&calls), 2);
}

// ---------------------------------------------------------------------------------------------
// Check 1: unwrap run_tool (items 5–8)

#[tokio::test]
async fn run_tool_with_empty_name_fails_without_event() {
    let (tool, calls) = counted(spec("echo"), Behaviour::Echo);
    let fx = fixture().tool(tool).build();
    let out = fx
        .round(
            "s",
            "r",
            Provider::OpenAi,
            vec![
                call("a", "run_tool", r#"{"name": "", "args": {}}"#),
                call("b", "run_tool", r#"{"name": "   "}"#),
                call("c", "run_tool", r#"{"args": {"x": 1}}"#),
            ],
        )
        .await;
    let msg = "tool=run_tool failed: name is required".to_string();
    assert_eq!(
        results(&out),
        vec![
            (Status::Invalid, msg.clone()),
            (Status::Invalid, msg.clone()),
            (Status::Invalid, msg),
        ]
    );
    // DESIGN §3.13 overrides "no event": the only event of each slot is its ToolResult.
    for id in ["a", "b", "c"] {
        assert_eq!(event_types(&out.events, Some(id)), vec!["ToolResult"]);
        assert_eq!(result_event(&out, id)["status"], "invalid");
    }
    assert_eq!(count(&calls), 0);
}

#[tokio::test]
async fn run_tool_naming_itself_fails_cannot_run_itself() {
    let fx = fixture().build();
    let out = fx
        .round(
            "s",
            "r",
            Provider::OpenAi,
            vec![
                call(
                    "a",
                    "run_tool",
                    r#"{"name": "run_tool", "args": {"name": "x"}}"#,
                ),
                call("b", "run_tool", r#"{"name": " run_tool<|end|>"}"#),
            ],
        )
        .await;
    let msg = "tool=run_tool failed: run_tool cannot run itself".to_string();
    assert_eq!(
        results(&out),
        vec![(Status::Invalid, msg.clone()), (Status::Invalid, msg)]
    );
    assert_eq!(
        event_types(&out.events, None),
        vec!["ToolResult", "ToolResult"]
    );
}

#[tokio::test]
async fn run_tool_naming_excluded_tool_is_not_available_in_this_session() {
    let (tool, calls) = counted(spec("echo"), Behaviour::Echo);
    let (other, other_calls) = counted(spec("scan_one"), Behaviour::Echo);
    let fx = fixture().tool(tool).tool(other).build();
    fx.mark_all("s").await;
    let out = round_excluding(
        &fx,
        "s",
        "r",
        Provider::OpenAi,
        &["echo", "scan_*"],
        vec![
            wrapped("a", "echo", json!({})),
            wrapped("b", "scan_one", json!({})),
        ],
    )
    .await;
    assert_eq!(
        results(&out),
        vec![
            (
                Status::Refused,
                "tool=run_tool failed: echo is not available in this session".to_string()
            ),
            (
                Status::Refused,
                "tool=run_tool failed: scan_one is not available in this session".to_string()
            ),
        ]
    );
    assert_eq!(
        event_types(&out.events, None),
        vec!["ToolResult", "ToolResult"]
    );
    assert_eq!((count(&calls), count(&other_calls)), (0, 0));
}

#[tokio::test]
async fn run_tool_naming_unregistered_tool_fails_not_exist() {
    let fx = fixture()
        .tool(TestTool::new(spec("echo"), Behaviour::Echo))
        .build();
    let out = fx
        .round(
            "s",
            "r",
            Provider::OpenAi,
            vec![wrapped("a", "zzqx", json!({"x": 1}))],
        )
        .await;
    assert_eq!(
        results(&out),
        vec![(
            Status::NotFound,
            "tool=run_tool failed: not exist: zzqx; look it up with find_tools".to_string()
        )]
    );
    assert_eq!(event_types(&out.events, None), vec!["ToolResult"]);
    assert_eq!(result_event(&out, "a")["status"], "not_found");
}

#[tokio::test]

async fn run_tool_naming_unknown_tool_suggests_close_names() {
    // DESIGN §3.5: unknown tools get "did you mean" with the top three find_tools matches —
    // through run_tool as well, the way OpenAI-style models call every deferred tool.
    let fx = fixture()
        .tool(TestTool::new(spec("read_files"), Behaviour::Echo))
        .build();
    let out = fx
        .round(
            "s",
            "r",
            Provider::OpenAi,
            vec![wrapped("a", "read_file", json!({}))],
        )
        .await;
    let text = &out.results[0].content;
    assert_eq!(out.results[0].status, Status::NotFound);
    assert!(
        text.starts_with("tool=run_tool failed: not exist: read_file; look it up with find_tools")
            && text.contains("Did you mean: read_files?"),
        "{text}"
    );
}

// ---------------------------------------------------------------------------------------------
// Check 2: the loaded set (items 9, 10)

#[tokio::test]
async fn direct_call_to_deferred_tool_is_refused_with_run_tool_hint() {
    let confirmer = Scripted::approve();
    let (tool, calls) = counted(gated("deploy"), Behaviour::Echo);
    let fx = fixture().tool(tool).confirmer(confirmer.clone()).build();
    let refusal = "tool=deploy failed: deploy is not callable directly. Fetch its schema with find_tools, then call run_tool(name=deploy, args=...).".to_string();
    let before = fx
        .round(
            "s",
            "r",
            Provider::OpenAi,
            vec![call("a", "deploy", r#"{"x": 1}"#)],
        )
        .await;
    assert_eq!(results(&before), vec![(Status::Refused, refusal.clone())]);
    assert_eq!(
        event_types(&before.events, Some("a")),
        vec!["ToolCall", "ToolResult"]
    );
    assert_eq!(result_event(&before, "a")["status"], "refused");

    // DESIGN §3.1: a fetched schema does not join the tools array, so the refusal stands.
    fx.mark_all("s").await;
    let after = fx
        .round(
            "s",
            "r",
            Provider::OpenAi,
            vec![call("b", "deploy", r#"{"x": 1}"#)],
        )
        .await;
    assert_eq!(results(&after), vec![(Status::Refused, refusal)]);
    assert_eq!(count(&calls), 0);
    assert_eq!(confirmer.asked(), Vec::<String>::new());
}

#[tokio::test]
async fn direct_call_to_excluded_tool_is_not_available_in_this_session() {
    let confirmer = Scripted::approve();
    let (todo, todo_calls) = counted(gated("write_todo"), Behaviour::Echo);
    let (echo, echo_calls) = counted(gated("echo"), Behaviour::Echo);
    let fx = fixture()
        .tool(todo)
        .tool(echo)
        .confirmer(confirmer.clone())
        .build();
    fx.mark_all("s").await;
    // A core tool for OpenAI, and a directly callable tool for claude-code (prefix exclusion).
    let openai = round_excluding(
        &fx,
        "s",
        "r",
        Provider::OpenAi,
        &["write_todo"],
        vec![call("a", "write_todo", "{}")],
    )
    .await;
    let claude = round_excluding(
        &fx,
        "s",
        "r",
        Provider::ClaudeCode,
        &["ec*"],
        vec![call("b", "echo", "{}")],
    )
    .await;
    assert_eq!(
        results(&openai),
        vec![(
            Status::Refused,
            "tool=write_todo failed: write_todo is not available in this session".to_string()
        )]
    );
    assert_eq!(
        results(&claude),
        vec![(
            Status::Refused,
            "tool=echo failed: echo is not available in this session".to_string()
        )]
    );
    assert_eq!(
        event_types(&openai.events, Some("a")),
        vec!["ToolCall", "ToolResult"]
    );
    assert_eq!(
        event_types(&claude.events, Some("b")),
        vec!["ToolCall", "ToolResult"]
    );
    assert_eq!((count(&todo_calls), count(&echo_calls)), (0, 0));
    assert_eq!(confirmer.asked(), Vec::<String>::new());
}

// ---------------------------------------------------------------------------------------------
// Check 3: dedupe (items 11–19)

#[tokio::test]
async fn repeated_call_in_a_run_returns_earlier_result_without_executing() {
    let (tool, calls) = counted(spec("echo"), Behaviour::Echo);
    let fx = fixture().tool(tool).build();
    fx.mark_all("s").await;
    let first = fx
        .run("s", "r", vec![wrapped("a", "echo", json!({"x": 1}))])
        .await;
    assert_eq!(
        results(&first),
        vec![(Status::Ok, r#"[echo] echo:{"x":1}"#.to_string())]
    );
    let out = fx
        .run(
            "s",
            "r",
            vec![
                wrapped("b", "echo", json!({"x": 1})),
                wrapped("c", "echo", json!({"x": 2})),
                wrapped("d", "echo", json!({"x": 2})),
            ],
        )
        .await;
    assert_eq!(
        results(&out),
        vec![
            (Status::Deduped, r#"[echo] echo:{"x":1}"#.to_string()),
            (Status::Ok, r#"[echo] echo:{"x":2}"#.to_string()),
            (Status::Deduped, r#"[echo] echo:{"x":2}"#.to_string()),
        ]
    );
    // DESIGN §3.13 overrides "without any event": a deduped slot has only its ToolResult.
    for id in ["b", "d"] {
        assert_eq!(event_types(&out.events, Some(id)), vec!["ToolResult"]);
        assert_eq!(result_event(&out, id)["status"], "deduped");
    }
    assert_eq!(
        event_types(&out.events, Some("c")),
        vec![
            "ToolCall",
            "ToolCallStart",
            "ToolCallText",
            "ToolCallEnd",
            "ToolResult"
        ]
    );
    assert_eq!(count(&calls), 2);
}

#[tokio::test]
async fn dedupe_entries_do_not_carry_across_runs() {
    let (tool, calls) = counted(spec("echo"), Behaviour::Echo);
    let fx = fixture().tool(tool).build();
    fx.mark_all("s").await;
    let c = || vec![wrapped("a", "echo", json!({"x": 1}))];
    let r1 = fx.run("s", "r1", c()).await;
    let r2 = fx.run("s", "r2", c()).await;
    let r1_again = fx.run("s", "r1", c()).await;
    let ok = (Status::Ok, r#"[echo] echo:{"x":1}"#.to_string());
    assert_eq!(results(&r1), vec![ok.clone()]);
    assert_eq!(results(&r2), vec![ok]);
    assert_eq!(
        results(&r1_again),
        vec![(Status::Deduped, r#"[echo] echo:{"x":1}"#.to_string())]
    );
    assert_eq!(count(&calls), 2);
}

#[tokio::test]
async fn new_run_after_fallback_starts_with_empty_dedupe_map() {
    // Seed item 13 (fallback model clears the dedupe map): the engine has no model; an agent
    // loop that switches to a fallback model starts a new run id, and a new run id starts with
    // an empty dedupe map — every kind of entry, failures included, runs again.
    let (echo, echo_calls) = counted(spec("echo"), Behaviour::Echo);
    let (flaky, flaky_calls) = counted(spec("flaky"), Behaviour::Fail("boom".into()));
    let fx = fixture().tool(echo).tool(flaky).build();
    fx.mark_all("s").await;
    let c = || {
        vec![
            wrapped("a", "echo", json!({"x": 1})),
            wrapped("b", "echo", json!({"x": 2})),
            wrapped("c", "flaky", json!({})),
        ]
    };
    let primary = fx.run("s", "turn-1", c()).await;
    let fallback = fx.run("s", "turn-1-fallback", c()).await;
    let statuses = |out: &RoundOutcome| out.results.iter().map(|r| r.status).collect::<Vec<_>>();
    assert_eq!(
        statuses(&primary),
        vec![Status::Ok, Status::Ok, Status::Failed]
    );
    assert_eq!(
        statuses(&fallback),
        vec![Status::Ok, Status::Ok, Status::Failed]
    );
    assert_eq!((count(&echo_calls), count(&flaky_calls)), (4, 2));
}

#[tokio::test]
async fn failed_result_is_remembered_and_returned_for_identical_call() {
    let (tool, calls) = counted(spec("flaky"), Behaviour::Fail("boom".into()));
    let fx = fixture().tool(tool).build();
    fx.mark_all("s").await;
    let failure = format!("tool=flaky failed: boom\n{}", next_write_error("flaky"));
    let first = fx
        .run("s", "r", vec![wrapped("a", "flaky", json!({"x": 1}))])
        .await;
    assert_eq!(
        results(&first),
        vec![(Status::Failed, format!("[flaky] {failure}"))]
    );
    let again = fx
        .run("s", "r", vec![wrapped("b", "flaky", json!({"x": 1}))])
        .await;
    assert_eq!(
        results(&again),
        vec![(Status::Deduped, format!("[flaky] {failure}"))]
    );
    assert_eq!(count(&calls), 1);
}

#[tokio::test]
async fn declined_refused_invalid_and_schema_slots_are_never_remembered() {
    let strict = ToolSpec::new(
        "strict",
        "strict tool",
        json!({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}),
    )
    .read_only();
    let (gate_tool, gate_calls) = counted(gated("guarded"), Behaviour::Echo);
    let (strict_tool, strict_calls) = counted(strict, Behaviour::Echo);
    let (echo, echo_calls) = counted(spec("echo"), Behaviour::Echo);
    let fx = fixture()
        .tool(gate_tool)
        .tool(strict_tool)
        .tool(echo)
        .build();
    fx.mark_all("s").await;
    let round = || {
        vec![
            wrapped("declined", "guarded", json!({"x": 1})),
            call("refused", "echo", r#"{"x": 1}"#),
            wrapped("invalid", "strict", json!({"n": "one"})),
            call("missing", "nope_zzqx", "{}"),
        ]
    };
    let first = fx.run("s", "r", round()).await;
    let second = fx.run("s", "r", round()).await;
    let statuses = |out: &RoundOutcome| out.results.iter().map(|r| r.status).collect::<Vec<_>>();
    let expected = vec![
        Status::Declined,
        Status::Refused,
        Status::Invalid,
        Status::NotFound,
    ];
    assert_eq!(statuses(&first), expected);
    assert_eq!(statuses(&second), expected);
    assert_eq!(results(&first), results(&second));
    assert_eq!(first.results[0].content, headless_decline("guarded"));
    // The declined call went through the gate again, not answered from memory (headless:
    // declined without a ToolConfirm, since no one could be asked).
    assert_eq!(
        event_types(&second.events, Some("declined")),
        vec!["ToolSkipped", "ToolResult"]
    );

    // A schema-returned slot is not remembered: the same call runs once the schema is shown.
    let schema = fx
        .round(
            "fresh",
            "r",
            Provider::ClaudeCode,
            vec![call("s1", "echo", r#"{"x": 1}"#)],
        )
        .await;
    assert_eq!(schema.results[0].status, Status::NeedsSchema);
    let ran = fx
        .round(
            "fresh",
            "r",
            Provider::ClaudeCode,
            vec![call("s2", "echo", r#"{"x": 1}"#)],
        )
        .await;
    assert_eq!(
        results(&ran),
        vec![(Status::Ok, r#"[echo] echo:{"x":1}"#.to_string())]
    );
    assert_eq!(
        (count(&gate_calls), count(&strict_calls), count(&echo_calls)),
        (0, 0, 1)
    );
}

#[tokio::test]
async fn dedupe_is_checked_before_confirm_gate() {
    let confirmer = Scripted::approve();
    let (tool, calls) = counted(gated("deploy"), Behaviour::Echo);
    let fx = fixture().tool(tool).confirmer(confirmer.clone()).build();
    fx.mark_all("s").await;
    let first = fx
        .run("s", "r", vec![wrapped("a", "deploy", json!({"x": 1}))])
        .await;
    assert_eq!(
        results(&first),
        vec![(Status::Ok, r#"[deploy] echo:{"x":1}"#.to_string())]
    );
    let again = fx
        .run("s", "r", vec![wrapped("b", "deploy", json!({"x": 1}))])
        .await;
    assert_eq!(
        results(&again),
        vec![(Status::Deduped, r#"[deploy] echo:{"x":1}"#.to_string())]
    );
    assert_eq!(event_types(&again.events, Some("b")), vec!["ToolResult"]);
    assert_eq!(confirmer.asked(), vec!["deploy".to_string()]);
    assert_eq!(count(&calls), 1);
}

/// A work directory with `a.txt`, `a.txt.bak` and an empty `sub/`.
fn files_fixture(extra: Vec<FileTool>) -> (Fixture, Arc<AtomicUsize>) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.txt"), "A").unwrap();
    std::fs::write(dir.path().join("a.txt.bak"), "B").unwrap();
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    let (reader, reads) = FileTool::new(read_files_spec(), FileOp::Read);
    let mut builder = fixture().dir(dir).approve_all().tool(reader);
    for tool in extra {
        builder = builder.tool(tool);
    }
    let fx = builder.build();
    (fx, reads)
}

#[tokio::test]
async fn successful_edit_invalidates_read_entries_of_its_resolved_path() {
    // DESIGN §3.10: invalidation uses the resolved paths the tools report, not substrings.
    let (editor, edits) = FileTool::new(mutating_spec("edit_file", Gate::Ask), FileOp::Append);
    let (fx, reads) = files_fixture(vec![editor]);
    fx.mark_all("s").await;
    let reads_round = || {
        vec![
            read("a", "a.txt"),
            read("b", "a.txt.bak"),
            read("c", "sub/../a.txt"),
        ]
    };
    let before = fx
        .round("s", "r", Provider::ClaudeCode, reads_round())
        .await;
    assert_eq!(
        results(&before),
        vec![
            (Status::Ok, "[read_files] A".to_string()),
            (Status::Ok, "[read_files] B".to_string()),
            (Status::Ok, "[read_files] A".to_string()),
        ]
    );
    let edit = fx
        .round(
            "s",
            "r",
            Provider::ClaudeCode,
            vec![call("e", "edit_file", r#"{"path": "./a.txt"}"#)],
        )
        .await;
    assert_eq!(
        results(&edit),
        vec![(Status::Ok, "[edit_file] wrote".to_string())]
    );
    let after = fx
        .round("s", "r", Provider::ClaudeCode, reads_round())
        .await;
    assert_eq!(
        results(&after),
        vec![
            (Status::Ok, "[read_files] Ax".to_string()),
            (Status::Deduped, "[read_files] B".to_string()),
            (Status::Ok, "[read_files] Ax".to_string()),
        ]
    );
    assert_eq!((count(&reads), count(&edits)), (5, 1));
}

#[tokio::test]
async fn successful_remove_file_invalidates_read_entries_of_its_path() {
    // DESIGN §3.10/§3.11: resolved paths; remove_file always asks (approved here).
    let (remover, removes) = FileTool::new(
        mutating_spec("remove_file", Gate::Destructive),
        FileOp::Remove,
    );
    let (fx, reads) = files_fixture(vec![remover]);
    fx.mark_all("s").await;
    let reads_round = || vec![read("a", "a.txt"), read("b", "a.txt.bak")];
    fx.round("s", "r", Provider::ClaudeCode, reads_round())
        .await;
    let removed = fx
        .round(
            "s",
            "r",
            Provider::ClaudeCode,
            vec![call("rm", "remove_file", r#"{"path": "a.txt"}"#)],
        )
        .await;
    assert_eq!(
        results(&removed),
        vec![(Status::Ok, "[remove_file] removed".to_string())]
    );
    let after = fx
        .round("s", "r", Provider::ClaudeCode, reads_round())
        .await;
    assert_eq!(
        results(&after),
        vec![
            (
                Status::Failed,
                format!(
                    "[read_files] tool=read_files failed: a.txt: No such file or directory (os error 2)\n{}",
                    next_write_error("read_files")
                )
            ),
            (Status::Deduped, "[read_files] B".to_string()),
        ]
    );
    assert_eq!((count(&reads), count(&removes)), (3, 1));
}

#[tokio::test]
async fn successful_restore_file_invalidates_read_entries_of_restored_paths() {
    // DESIGN §3.10: restore by version names no path in its arguments; the paths it reports win.
    let (restorer, restores) = FileTool::new(
        mutating_spec("restore_file", Gate::Destructive),
        FileOp::Restore("a.txt"),
    );
    let (fx, reads) = files_fixture(vec![restorer]);
    fx.mark_all("s").await;
    let reads_round = || vec![read("a", "a.txt"), read("b", "a.txt.bak")];
    fx.round("s", "r", Provider::ClaudeCode, reads_round())
        .await;
    let restored = fx
        .round(
            "s",
            "r",
            Provider::ClaudeCode,
            vec![call("rs", "restore_file", r#"{"version": 2}"#)],
        )
        .await;
    assert_eq!(
        results(&restored),
        vec![(Status::Ok, "[restore_file] restored".to_string())]
    );
    let after = fx
        .round("s", "r", Provider::ClaudeCode, reads_round())
        .await;
    assert_eq!(
        results(&after),
        vec![
            (Status::Ok, "[read_files] restored v2".to_string()),
            (Status::Deduped, "[read_files] B".to_string()),
        ]
    );
    assert_eq!((count(&reads), count(&restores)), (3, 1));
}

#[tokio::test]
async fn failed_edit_invalidates_nothing() {
    let (editor, edits) = FileTool::new(mutating_spec("edit_file", Gate::Ask), FileOp::Fail);
    let (fx, reads) = files_fixture(vec![editor]);
    fx.mark_all("s").await;
    fx.round("s", "r", Provider::ClaudeCode, vec![read("a", "a.txt")])
        .await;
    let edit = fx
        .round(
            "s",
            "r",
            Provider::ClaudeCode,
            vec![call("e", "edit_file", r#"{"path": "a.txt"}"#)],
        )
        .await;
    assert_eq!(
        results(&edit),
        vec![(
            Status::Failed,
            format!(
                "[edit_file] tool=edit_file failed: old_string not found\n{}",
                next_write_error("edit_file")
            )
        )]
    );
    let after = fx
        .round("s", "r", Provider::ClaudeCode, vec![read("b", "a.txt")])
        .await;
    assert_eq!(
        results(&after),
        vec![(Status::Deduped, "[read_files] A".to_string())]
    );
    assert_eq!((count(&reads), count(&edits)), (1, 1));
}

// ---------------------------------------------------------------------------------------------
// Check 5: existence (item 24) and the order of the checks (item 25)

#[tokio::test]
async fn unregistered_direct_call_fails_not_exist_with_event_and_never_runs() {
    let fx = fixture()
        .tool(TestTool::new(spec("echo"), Behaviour::Echo))
        .build();
    for provider in [Provider::OpenAi, Provider::ClaudeCode] {
        let out = fx
            .round("s", "r", provider, vec![call("a", "zzqx", r#"{"x": 1}"#)])
            .await;
        assert_eq!(
            results(&out),
            vec![(
                Status::NotFound,
                "tool=zzqx failed: not exist: zzqx. Look up available tools with find_tools."
                    .to_string()
            )]
        );
        assert_eq!(
            event_types(&out.events, Some("a")),
            vec!["ToolCall", "ToolResult"]
        );
        assert_eq!(result_event(&out, "a")["status"], "not_found");
    }
}

#[tokio::test]
async fn unknown_tool_suggests_up_to_three_find_tools_matches() {
    let fx = fixture()
        .tool(TestTool::new(spec("read_files"), Behaviour::Echo))
        .tool(TestTool::new(spec("read_mail"), Behaviour::Echo))
        .tool(TestTool::new(spec("read_notes"), Behaviour::Echo))
        .tool(TestTool::new(spec("read_pages"), Behaviour::Echo))
        .tool(TestTool::new(spec("echo"), Behaviour::Echo))
        .build();
    let out = fx
        .round(
            "s",
            "r",
            Provider::ClaudeCode,
            vec![call("a", "read", "{}"), call("b", "read_mai", "{}")],
        )
        .await;
    assert_eq!(
        results(&out),
        vec![
            (
                Status::NotFound,
                "tool=read failed: not exist: read. Look up available tools with find_tools. Did you mean: read_files, read_mail, read_notes?".to_string()
            ),
            (
                Status::NotFound,
                "tool=read_mai failed: not exist: read_mai. Look up available tools with find_tools. Did you mean: read_mail?".to_string()
            ),
        ]
    );
}

/// A misspelled name gets the name it is a typo of first, called the way this provider can:
/// directly for claude-code, through run_tool for the others.
#[tokio::test]
async fn a_misspelled_tool_name_suggests_the_tool_it_is_a_typo_of() {
    let fx = fixture()
        .tool(TestTool::new(spec("calculate"), Behaviour::Echo))
        .tool(TestTool::new(spec("read_files"), Behaviour::Echo))
        .build();
    let out = fx
        .round(
            "s",
            "r",
            Provider::ClaudeCode,
            vec![call("a", "calcualte", "{}"), call("b", "Read_Filse", "{}")],
        )
        .await;
    let texts: Vec<String> = results(&out).into_iter().map(|r| r.1).collect();
    assert!(
        texts[0].ends_with("Did you mean: calculate?"),
        "{}",
        texts[0]
    );
    assert!(
        texts[1].ends_with("Did you mean: read_files?"),
        "{}",
        texts[1]
    );
    let out = fx
        .round(
            "s",
            "r2",
            Provider::OpenAi,
            vec![
                call("c", "calcualte", "{}"),
                wrapped("d", "calcualte", json!({})),
            ],
        )
        .await;
    let texts: Vec<String> = results(&out).into_iter().map(|r| r.1).collect();
    assert!(
        texts[0].ends_with("Did you mean: run_tool(name=calculate)?"),
        "{}",
        texts[0]
    );
    assert!(
        texts[1].ends_with("Did you mean: calculate?"),
        "{}",
        texts[1]
    );
}

/// Each kind of typo, called directly and through run_tool, is answered with the tool it is a
/// typo of, first among the suggestions.
#[tokio::test]
async fn every_kind_of_misspelling_suggests_the_tool_on_both_paths() {
    let fx = ["calculate", "read_files", "fetch_page", "write_todo"]
        .into_iter()
        .fold(fixture(), |fx, name| {
            fx.tool(TestTool::new(spec(name), Behaviour::Echo))
        })
        .build();
    // (what the model called, the tool it meant)
    let typos = [
        ("calcualte", "calculate"),   // two letters swapped
        ("calculte", "calculate"),    // a letter missing
        ("calculatte", "calculate"),  // a letter too many
        ("calculote", "calculate"),   // a wrong letter
        ("Fetch-Page", "fetch_page"), // case and separator
        ("READ_FILES", "read_files"), // case only
        ("writetodo", "write_todo"),  // separator missing
        ("fetch_pgae", "fetch_page"), // a swap in a longer name
    ];
    for (n, (typo, meant)) in typos.into_iter().enumerate() {
        let out = fx
            .round(
                "s",
                &format!("r{n}"),
                Provider::ClaudeCode,
                vec![
                    call("direct", typo, "{}"),
                    wrapped("wrapped", typo, json!({})),
                ],
            )
            .await;
        let rows = results(&out);
        let firsts: Vec<(Status, Option<&str>)> = rows
            .iter()
            .map(|(status, text)| (*status, first_suggestion(text)))
            .collect();
        assert_eq!(
            firsts,
            vec![
                (Status::NotFound, Some(meant)),
                (Status::NotFound, Some(meant))
            ],
            "{typo}: {rows:?}"
        );
        assert!(
            rows[0]
                .1
                .starts_with(&format!("tool={typo} failed: not exist: {typo}.")),
            "{}",
            rows[0].1
        );
        assert!(
            rows[1]
                .1
                .starts_with(&format!("tool=run_tool failed: not exist: {typo};")),
            "{}",
            rows[1].1
        );
    }
}

/// The first name after "Did you mean: " in a not-found message.
fn first_suggestion(text: &str) -> Option<&str> {
    let list = text.split_once("Did you mean: ")?.1.strip_suffix('?')?;
    list.split(", ").next()
}

#[tokio::test]
async fn preflight_checks_run_in_seed_order_and_first_failure_wins() {
    let strict_gated = || {
        ToolSpec::new(
            "guarded",
            "guarded tool",
            json!({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}),
        )
        .gate(Gate::Ask)
    };
    let declining = Scripted::decline(Some("not now"));
    let (guarded, guarded_calls) = counted(strict_gated(), Behaviour::Echo);
    let (echo, echo_calls) = counted(spec("echo"), Behaviour::Echo);
    let fx = fixture()
        .tool(guarded)
        .tool(echo)
        .confirmer(declining.clone())
        .build();

    // schema-before-fetch beats existence-gate-validation: unmarked, gated, invalid → schema.
    let unmarked = fx
        .round(
            "s",
            "r",
            Provider::ClaudeCode,
            vec![call("a", "guarded", r#"{"n": "x"}"#)],
        )
        .await;
    assert_eq!(unmarked.results[0].status, Status::NeedsSchema);
    assert_eq!(declining.asked(), Vec::<String>::new());

    fx.mark_all("s").await;
    // unwrap beats the loaded set; the loaded set beats dedupe and the gate; the gate beats
    // validation; existence comes before the gate.
    let first = fx
        .run("s", "r", vec![wrapped("b", "echo", json!({"x": 1}))])
        .await;
    assert_eq!(first.results[0].status, Status::Ok);
    let out = round_excluding(
        &fx,
        "s",
        "r",
        Provider::OpenAi,
        &["guarded"],
        vec![
            call(
                "c",
                "run_tool",
                r#"{"name": "guarded", "args": {"n": "x"}}"#,
            ),
            call("d", "echo", r#"{"x": 1}"#),
            call("e", "guarded", r#"{"n": "x"}"#),
            wrapped("f", "echo", json!({"x": 1})),
        ],
    )
    .await;
    assert_eq!(
        results(&out),
        vec![
            (
                Status::Refused,
                "tool=run_tool failed: guarded is not available in this session".to_string()
            ),
            (
                Status::Refused,
                "tool=echo failed: echo is not callable directly. Fetch its schema with find_tools, then call run_tool(name=echo, args=...).".to_string()
            ),
            (
                Status::Refused,
                "tool=guarded failed: guarded is not available in this session".to_string()
            ),
            (Status::Deduped, r#"[echo] echo:{"x":1}"#.to_string()),
        ]
    );
    let gate_first = fx
        .run(
            "s",
            "r",
            vec![
                wrapped("g", "guarded", json!({"n": "x"})),
                call("h", "nope_zzqx", r#"{"n": "x"}"#),
            ],
        )
        .await;
    assert_eq!(
        results(&gate_first),
        vec![
            (
                Status::Declined,
                format!("The user declined this call: not now. {DECLINED_TAIL}")
            ),
            (
                Status::NotFound,
                "tool=nope_zzqx failed: not exist: nope_zzqx. Look up available tools with find_tools.".to_string()
            ),
        ]
    );
    assert_eq!(declining.asked(), vec!["guarded".to_string()]);

    // Approved, the same call reaches validation.
    let approving = Scripted::approve();
    let (guarded2, guarded2_calls) = counted(strict_gated(), Behaviour::Echo);
    let fx2 = fixture()
        .tool(guarded2)
        .confirmer(approving.clone())
        .build();
    fx2.mark_all("s").await;
    let validated = fx2
        .run("s", "r", vec![wrapped("i", "guarded", json!({"n": "x"}))])
        .await;
    assert_eq!(
        results(&validated),
        vec![(
            Status::Invalid,
            r#"tool=guarded failed: invalid arguments: /n: "x" is not of type "integer""#
                .to_string()
        )]
    );
    assert_eq!(approving.asked(), vec!["guarded".to_string()]);
    assert_eq!(
        (
            count(&guarded_calls),
            count(&echo_calls),
            count(&guarded2_calls)
        ),
        (0, 1, 0)
    );
}

// ---------------------------------------------------------------------------------------------
// Check 7: validation (items 60–62)

fn typed_spec() -> ToolSpec {
    ToolSpec::new(
        "typed",
        "a tool with a real schema",
        json!({
            "type": "object",
            "properties": {
                "name": {"type": "string"},
                "count": {"type": "integer", "minimum": 1},
                "mode": {"enum": ["a", "b"]},
                "files": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "properties": {"path": {"type": "string"}},
                        "required": ["path"]
                    }
                }
            },
            "required": ["name", "count"]
        }),
    )
    .read_only()
}

#[tokio::test]
async fn arguments_are_validated_against_full_json_schema_before_execution() {
    // DESIGN §3.4: full JSON Schema; other violations read `invalid arguments: <pointer>: <reason>`.
    let (tool, calls) = counted(typed_spec(), Behaviour::Echo);
    let fx = fixture().tool(tool).build();
    fx.mark_all("s").await;
    let out = fx
        .run(
            "s",
            "r",
            vec![
                wrapped("a", "typed", json!({"name": "n", "count": "3"})),
                wrapped(
                    "b",
                    "typed",
                    json!({"name": "n", "count": 1, "files": [{}]}),
                ),
                wrapped("c", "typed", json!({"name": "n", "count": 0, "mode": "c"})),
                wrapped("d", "typed", json!({"name": "n", "count": 1, "files": []})),
                wrapped(
                    "e",
                    "typed",
                    json!({"name": "n", "count": 2, "mode": "a", "files": [{"path": "p"}]}),
                ),
            ],
        )
        .await;
    assert_eq!(
        results(&out),
        vec![
            (
                Status::Invalid,
                r#"tool=typed failed: invalid arguments: /count: "3" is not of type "integer""#
                    .to_string()
            ),
            (
                Status::Invalid,
                r#"tool=typed failed: invalid arguments: /files/0: "path" is a required property"#
                    .to_string()
            ),
            (
                Status::Invalid,
                r#"tool=typed failed: invalid arguments: /count: 0 is less than the minimum of 1; /mode: "c" is not one of "a" or "b""#
                    .to_string()
            ),
            (
                Status::Invalid,
                "tool=typed failed: invalid arguments: /files: [] has less than 1 item"
                    .to_string()
            ),
            (
                Status::Ok,
                r#"[typed] echo:{"count":2,"files":[{"path":"p"}],"mode":"a","name":"n"}"#
                    .to_string()
            ),
        ]
    );
    for id in ["a", "b", "c", "d"] {
        assert_eq!(
            event_types(&out.events, Some(id)),
            vec!["ToolCall", "ToolResult"]
        );
        assert_eq!(result_event(&out, id)["status"], "invalid");
    }
    assert_eq!(count(&calls), 1);
}

#[tokio::test]
async fn missing_required_fields_are_reported_with_blank_strings_counted_missing() {
    let (tool, calls) = counted(typed_spec(), Behaviour::Echo);
    let (loose, loose_calls) = counted(spec("loose"), Behaviour::Echo);
    let fx = fixture().tool(tool).tool(loose).build();
    fx.mark_all("s").await;
    let out = fx
        .round(
            "s",
            "r",
            Provider::ClaudeCode,
            vec![
                call("a", "typed", r#"{"name": "   ", "count": 1}"#),
                call("b", "typed", "{}"),
                call("c", "typed", ""),
                call("d", "typed", r#"{"count": null, "name": "n"}"#),
                call("e", "loose", ""),
            ],
        )
        .await;
    assert_eq!(
        results(&out),
        vec![
            (
                Status::Invalid,
                "tool=typed failed: missing required field(s) name for typed. All required fields: name, count".to_string()
            ),
            (
                Status::Invalid,
                "tool=typed failed: missing required field(s) name, count for typed. All required fields: name, count".to_string()
            ),
            (
                Status::Invalid,
                "tool=typed failed: missing required field(s) name, count for typed. All required fields: name, count".to_string()
            ),
            (
                Status::Invalid,
                "tool=typed failed: missing required field(s) count for typed. All required fields: name, count".to_string()
            ),
            // Empty arguments with no required fields pass.
            (Status::Ok, "[loose] echo:{}".to_string()),
        ]
    );
    assert_eq!(
        event_types(&out.events, Some("a")),
        vec!["ToolCall", "ToolResult"]
    );
    assert_eq!((count(&calls), count(&loose_calls)), (0, 1));
}

#[tokio::test]
async fn non_object_arguments_are_reported_as_invalid_json() {
    let (tool, calls) = counted(typed_spec(), Behaviour::Echo);
    let fx = fixture().tool(tool).build();
    fx.mark_all("s").await;
    let parse_error = // The engine parses the trimmed text (item 1).
        serde_json::from_str::<Value>("{\"name\":")
        .unwrap_err()
        .to_string();
    let out = fx
        .round(
            "s",
            "r",
            Provider::ClaudeCode,
            vec![
                call("a", "typed", "{\"name\": "),
                call("b", "typed", "[1, 2]"),
                call("c", "typed", "\"text\""),
                call("d", "typed", "42"),
            ],
        )
        .await;
    let tail = "Re-send arguments as a JSON object with required fields: name, count";
    assert_eq!(
        results(&out),
        vec![
            (
                Status::Invalid,
                format!("tool=typed failed: invalid JSON for typed: {parse_error}. {tail}")
            ),
            (
                Status::Invalid,
                format!(
                    "tool=typed failed: invalid JSON for typed: expected an object, got an array. {tail}"
                )
            ),
            (
                Status::Invalid,
                format!(
                    "tool=typed failed: invalid JSON for typed: expected an object, got a string. {tail}"
                )
            ),
            (
                Status::Invalid,
                format!(
                    "tool=typed failed: invalid JSON for typed: expected an object, got a number. {tail}"
                )
            ),
        ]
    );
    assert_eq!(
        event_types(&out.events, Some("a")),
        vec!["ToolCall", "ToolResult"]
    );
    assert_eq!(count(&calls), 0);
}

// ---------------------------------------------------------------------------------------------
// §10 compatibility (items 81, 82)

#[tokio::test]
async fn removed_tool_names_fail_existence_check_naming_replacement() {
    // §10 allows naming the replacement; the engine does, after the seed's message.
    let fx = fixture()
        .tool(TestTool::new(spec("echo"), Behaviour::Echo))
        .build();
    let removed = [
        (
            "find_note",
            "find_note was removed in v1.0.23; search past work with chat_history",
        ),
        (
            "run_command_readonly",
            "run_command_readonly was removed in v1.0.25; use run_command (read-only commands need no confirmation)",
        ),
        (
            "run_command_background",
            "run_command_background was renamed background_command in v1.3.2",
        ),
        (
            "run_websocket",
            "run_websocket was dropped in v1.3.2 and has no replacement",
        ),
        (
            "api_weather",
            "user-defined api_* tools were removed in v1.3.2; find an API with public_api_list and call it with http_request",
        ),
    ];
    for round in ["r1", "r2"] {
        let mut calls = Vec::new();
        for (i, (name, _)) in removed.iter().enumerate() {
            calls.push(call(&format!("d{i}"), name, "{}"));
            calls.push(wrapped(&format!("w{i}"), name, json!({})));
        }
        let out = fx.run("s", round, calls).await;
        let mut expected = Vec::new();
        for (name, hint) in removed {
            expected.push((
                Status::NotFound,
                format!(
                    "tool={name} failed: not exist: {name}. Look up available tools with find_tools. {hint}."
                ),
            ));
            expected.push((
                Status::NotFound,
                format!(
                    "tool=run_tool failed: not exist: {name}; look it up with find_tools ({hint})"
                ),
            ));
        }
        // Never executed, never remembered: the second round gets the same failures.
        assert_eq!(results(&out), expected);
        for i in 0..removed.len() {
            assert_eq!(
                event_types(&out.events, Some(&format!("d{i}"))),
                vec!["ToolCall", "ToolResult"]
            );
            assert_eq!(
                event_types(&out.events, Some(&format!("w{i}"))),
                vec!["ToolResult"]
            );
        }
    }
}

#[tokio::test]
async fn error_history_write_mode_failure_names_write_error() {
    // Even a registered error_history whose schema would accept mode=write never sees the call.
    let schema = json!({
        "type": "object",
        "properties": {"mode": {"type": "string"}, "keyword": {"type": "string"}}
    });
    let (tool, calls) = counted(
        ToolSpec::new("error_history", "search or read error memory", schema)
            .read_only()
            .concurrent(),
        Behaviour::Echo,
    );
    let fx = fixture().tool(tool).build();
    fx.mark_all("s").await;
    let out = fx
        .run(
            "s",
            "r",
            vec![
                wrapped("a", "error_history", json!({"mode": "write"})),
                wrapped(
                    "b",
                    "error_history",
                    json!({"mode": "search", "keyword": "x"}),
                ),
            ],
        )
        .await;
    assert_eq!(
        results(&out)[0],
        (
            Status::Invalid,
            "tool=error_history failed: error_history(mode=write) was removed in v1.3.11; record what fixed (or did not fix) a failure with write_error(tool_name, keywords, symptom, action, outcome) instead".to_string()
        )
    );
    assert_eq!(results(&out)[1].0, Status::Ok);
    assert_eq!(count(&calls), 1, "only the search call ran");
}
