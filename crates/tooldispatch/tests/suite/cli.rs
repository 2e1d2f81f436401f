//! `tooldispatch round` and `tooldispatch tools` as a user runs them (DESIGN §5): wire formats,
//! state across invocations, the round report, exit codes, rules and client tools.

use dispatch_engine::Provider;
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use super::support::*;

fn tool_message(id: &str, content: &str) -> Value {
    json!({"role": "tool", "tool_call_id": id, "content": content})
}

#[test]
fn quick_start_select_then_run_tool_calculates_in_openai_format() {
    let td = Td::new();
    let found = td.round("s", "r", &[], &select("c1", "calculate"));
    let content = found[0]["content"].as_str().unwrap();
    let injected: Value = serde_json::from_str(
        content
            .strip_prefix("[find_tools] ")
            .unwrap_or_else(|| panic!("no [find_tools] prefix: {content}")),
    )
    .unwrap();
    assert_eq!(
        (found[0]["role"].clone(), found[0]["tool_call_id"].clone()),
        (json!("tool"), json!("c1"))
    );
    assert_eq!(found.as_array().unwrap().len(), 1);
    assert_eq!(
        injected,
        json!({
            "injected": [{
                "name": "calculate",
                "description": "Evaluate arithmetic exactly instead of doing it in your head: + - * / ^ %, parentheses, sqrt, exp, ln, log, sin, cos, tan, abs, floor, ceil, round, PI, E. Send several expressions at once; returns a JSON object mapping each expression to its result or to \"error: ...\".",
                "parameters": {
                    "type": "object",
                    "description": "Evaluate arithmetic expressions.",
                    "additionalProperties": false,
                    "properties": {"expressions": {
                        "description": "Expressions such as \"2^10 / 3\" or \"sqrt(2) * PI\"; numbers only, no variables.",
                        "type": "array",
                        "items": {"type": "string"},
                        "minItems": 1,
                        "maxItems": 64
                    }},
                    "required": ["expressions"]
                }
            }],
            "query": "select:calculate",
            "total_tools": 32
        })
    );

    let calculated = td.round("s", "r", &[], &calculate_reply("c2"));
    assert_eq!(
        calculated,
        json!([tool_message("c2", &format!("[calculate] {CALCULATED}"))])
    );
}

#[test]
fn same_session_and_run_across_invocations_dedupe_and_a_new_run_executes_again() {
    let td = Td::new();
    td.round("s", "r1", &[], &select("c1", "calculate"));
    let first = td.round("s", "r1", &[], &calculate_reply("c2"));
    let repeated = td.round("s", "r1", &[], &calculate_reply("c3"));
    let new_run = td.round("s", "r2", &[], &calculate_reply("c4"));
    assert_eq!(
        [first, repeated, new_run],
        [
            json!([tool_message("c2", &format!("[calculate] {CALCULATED}"))]),
            // The earlier result, byte for byte: nothing ran.
            json!([tool_message("c3", &format!("[calculate] {CALCULATED}"))]),
            json!([tool_message("c4", &format!("[calculate] {CALCULATED}"))]),
        ]
    );
}

#[test]
fn a_tool_marked_in_one_invocation_stays_marked_in_later_runs() {
    let td = Td::new();
    // Unmarked: run_tool returns the schema instead of running, and marks the tool.
    let unmarked = td.report("s", "r1", &[], &calculate_reply("c1"));
    let content = unmarked["results"][0]["content"].as_str().unwrap();
    assert!(
        content.starts_with("[calculate] tool schema below. Re-invoke run_tool(name=calculate) with the correct arguments — the previous call was made before its schema was fetched.\n{\"injected\":"),
        "{content}"
    );
    // Another process, another run of the same session: the mark persisted, so it runs.
    let marked = td.report("s", "r2", &[], &calculate_reply("c2"));
    // Another session has not seen the schema.
    let other = td.report("t", "r1", &[], &calculate_reply("c3"));
    assert_eq!(
        [statuses(&unmarked), statuses(&marked), statuses(&other)],
        [
            pairs(&[("c1", "needs_schema")]),
            pairs(&[("c2", "ok")]),
            pairs(&[("c3", "needs_schema")]),
        ]
    );
}

#[test]
fn report_numbers_rounds_per_run_and_lists_results_events_and_pending() {
    let td = Td::new();
    let first = td.report("s1", "r1", &[], &select("c1", "calculate"));
    let second = td.report("s1", "r1", &[], &calculate_reply("c2"));
    let deduped = td.report("s1", "r1", &[], &calculate_reply("c3"));
    let next_run = td.report("s1", "r2", &[], &calculate_reply("c4"));
    let header = |r: &Value| {
        (
            r["session"].clone(),
            r["run"].clone(),
            r["round"].clone(),
            r["pending"].clone(),
        )
    };
    assert_eq!(
        [&first, &deduped, &next_run].map(header),
        [
            (json!("s1"), json!("r1"), json!(1), Value::Null),
            (json!("s1"), json!("r1"), json!(3), Value::Null),
            (json!("s1"), json!("r2"), json!(1), Value::Null),
        ]
    );
    let args = CALCULATE_ARGS;
    let result = format!("[calculate] {CALCULATED}");
    assert_eq!(
        timeless(second),
        json!({
            "session": "s1",
            "run": "r1",
            "round": 2,
            "results": [{
                "tool_call_id": "c2",
                "name": "calculate",
                "status": "ok",
                "is_error": false,
                "content": result,
                "started_ms": "<ms>",
                "ended_ms": "<ms>"
            }],
            "events": [
                {"type": "ToolCall", "tool_id": "c2", "tool_name": "calculate", "tool_args": args, "at_ms": "<ms>"},
                {"type": "ToolCallStart", "tool_id": "c2", "tool_name": "calculate", "at_ms": "<ms>"},
                {"type": "ToolCallText", "tool_id": "c2", "tool_name": "calculate", "text": CALCULATED, "at_ms": "<ms>"},
                {"type": "ToolCallEnd", "tool_id": "c2", "tool_name": "calculate", "at_ms": "<ms>"},
                {"type": "ToolResult", "tool_id": "c2", "tool_name": "calculate", "tool_args": args,
                 "status": "ok", "result": result, "at_ms": "<ms>"},
                {"type": "RoundCommitted", "run": "r1", "round": 2, "at_ms": "<ms>"}
            ],
            "pending": null
        })
    );
    // A dedupe hit did not run: no times, and only its ToolResult event.
    assert_eq!(
        timeless(deduped)["results"],
        json!([{
            "tool_call_id": "c3",
            "name": "calculate",
            "status": "deduped",
            "is_error": false,
            "content": format!("[calculate] {CALCULATED}"),
            "started_ms": null,
            "ended_ms": null
        }])
    );
}

#[test]
fn anthropic_gets_one_user_message_of_tool_results_with_is_error_only_on_failures() {
    let td = Td::new();
    let reply = json!({
        "role": "assistant",
        "content": [
            {"type": "text", "text": "Planning."},
            {"type": "tool_use", "id": "toolu_1", "name": "write_todo",
             "input": {"todos": [{"content": "a"}]}},
            {"type": "tool_use", "id": "toolu_2", "name": "write_todo",
             "input": {"todos": [{"content": "x", "status": "in_progress"}, {"content": "y", "status": "in_progress"}]}},
            {"type": "tool_use", "id": "toolu_3", "name": "write_todo", "input": {"todos": []}}
        ]
    });
    let out = td.round("s", "r", &["--provider", "anthropic"], &reply.to_string());
    assert_eq!(
        out,
        json!([{
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1",
                 "content": "[write_todo] checklist saved: 1 step(s) — 0 done, 0 in progress, 1 pending"},
                {"type": "tool_result", "tool_use_id": "toolu_2", "is_error": true,
                 "content": "[write_todo] tool=write_todo failed: at most one step may be in_progress, found 2 (x; y); keep one in_progress and set the others to pending or completed\nnext: once a different fix works, call write_error(tool_name=\"write_todo\", keywords=[...], symptom=..., action=..., outcome=\"resolved\") so the next run finds it"},
                {"type": "tool_result", "tool_use_id": "toolu_3", "is_error": true,
                 "content": "tool=write_todo failed: invalid arguments: /todos: [] has less than 1 item"}
            ]
        }])
    );
}

#[test]
fn claude_code_reads_tool_call_tags_from_the_text() {
    let td = Td::new();
    let cc = ["--provider", "claude-code"];
    let found = td.report(
        "s",
        "r",
        &cc,
        "I'll fetch the schema first.\n<tool_call name=\"find_tools\">{\"query\": \"select:calculate\"}</tool_call>\n",
    );
    assert_eq!(statuses(&found), pairs(&[("call_1", "ok")]));
    let reply = format!(
        "Now both:\n<tool_call name=\"calculate\">{CALCULATE_ARGS}</tool_call>\nand\n<tool_call name=\"calculate\">{{\"expressions\": [\"1+1\"]}}</tool_call>"
    );
    let out = td.round("s", "r", &cc, &reply);
    assert_eq!(
        out,
        json!([{
            "role": "user",
            "content": format!(
                "<tool_result name=\"calculate\">\n[calculate] {CALCULATED}\n</tool_result>\n<tool_result name=\"calculate\">\n[calculate] {{\"1+1\":\"2\"}}\n</tool_result>"
            )
        }])
    );
}

#[test]
fn claude_code_marks_a_failure_with_is_error() {
    let td = Td::new();
    let cc = ["--provider", "claude-code"];
    // Every tool but find_tools starts unmarked for claude-code: the first call gets the schema.
    let first = td.report(
        "s",
        "r",
        &cc,
        "<tool_call name=\"write_todo\">{\"todos\": []}</tool_call>",
    );
    assert_eq!(statuses(&first), pairs(&[("call_1", "needs_schema")]));
    let out = td.round(
        "s",
        "r",
        &cc,
        "<tool_call name=\"write_todo\">{\"todos\": []}</tool_call>",
    );
    assert_eq!(
        out,
        json!([{
            "role": "user",
            "content": "<tool_result name=\"write_todo\" is_error=\"true\">\ntool=write_todo failed: invalid arguments: /todos: [] has less than 1 item\n</tool_result>"
        }])
    );
}

/// The exit code, stdout and stderr of `round` with this input.
fn round_failure(td: &Td, args: &[&str], stdin: &str) -> (Option<i32>, String, String) {
    let output = td.cmd(args).write_stdin(stdin).output().unwrap();
    (
        output.status.code(),
        String::from_utf8(output.stdout).unwrap(),
        String::from_utf8(output.stderr).unwrap(),
    )
}

#[test]
fn an_unparseable_reply_exits_2_with_one_line_naming_the_problem() {
    let td = Td::new();
    assert_eq!(
        round_failure(&td, &["round", "--session", "s"], "not json"),
        (
            Some(2),
            String::new(),
            "tooldispatch: cannot read the openai reply: the reply is not valid JSON: expected ident at line 1 column 2\n".to_string()
        )
    );
}

#[test]
fn an_unknown_provider_exits_2_naming_the_provider() {
    let td = Td::new();
    let (code, stdout, stderr) = round_failure(
        &td,
        &["round", "--session", "s", "--provider", "nope"],
        &calculate_reply("c1"),
    );
    assert_eq!(
        (code, stdout, stderr.lines().next().unwrap_or("")),
        (
            Some(2),
            String::new(),
            "tooldispatch: invalid value 'nope' for '--provider <PROVIDER>': unknown provider \"nope\"; use one of: openai, anthropic, claude-code, openai-responses, gemini (see tooldispatch --help)"
        )
    );
}

#[test]
fn a_workdir_that_is_a_file_exits_2_like_a_missing_one() {
    let td = Td::new();
    let file = td.file("not-a-dir.txt", "x");
    for (workdir, says) in [
        (file.clone(), "is a file, not a directory"),
        (file.with_extension("missing"), "is not a usable directory"),
    ] {
        let output = td
            .bare()
            .args(["round", "--session", "s", "--store", "memory:", "--workdir"])
            .arg(&workdir)
            .write_stdin(calculate_reply("c1"))
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains(says), "{stderr}");
    }
}

#[test]
fn session_and_run_ids_the_daemon_refuses_exit_2() {
    let td = Td::new();
    let long = "x".repeat(129);
    for args in [
        vec!["round", "--session", ""],
        vec!["round", "--session", "../escape"],
        vec!["round", "--session", "a\nb"],
        vec!["round", "--session", &long],
        vec!["round", "--session", "s", "--run", "a\nb"],
        vec!["round", "--session", "s", "--run", ""],
        vec!["answer", "--session", ".."],
        vec!["replay", "/dev/null", "--session", "a/b"],
    ] {
        let output = td
            .bare()
            .args(&args)
            .args(["--store", "memory:"])
            .write_stdin(calculate_reply("c1"))
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains("a session id is 1–128 characters")
                || stderr.contains("a run id is 1–128 characters"),
            "{args:?}: {stderr}"
        );
    }
}

#[test]
fn a_missing_session_exits_2_naming_the_option() {
    let td = Td::new();
    let (code, stdout, stderr) = round_failure(&td, &["round"], &calculate_reply("c1"));
    assert_eq!((code, stdout.as_str()), (Some(2), ""));
    assert_eq!(
        stderr,
        "tooldispatch: the following required arguments were not provided: --session <SESSION> (see tooldispatch --help)\n"
    );
}

#[test]
fn usage_errors_print_a_single_line_on_stderr() {
    let td = Td::new();
    for args in [
        &["round", "--session", "s", "--provider", "nope"][..],
        &["round"][..],
    ] {
        let (code, _, stderr) = round_failure(&td, args, &calculate_reply("c1"));
        assert_eq!(
            (code, stderr.lines().count()),
            (Some(2), 1),
            "{args:?}: {stderr}"
        );
    }
}

#[test]
fn failing_tools_are_results_and_exit_0() {
    let td = Td::new();
    td.round("s", "r", &[], &select("c0", "calculate"));
    let reply = openai(&[
        (
            "c1",
            "run_tool",
            run_tool("calculate", json!({"expressions": ["1/0"]})),
        ),
        (
            "c2",
            "write_todo",
            json!({"todos": [{"content": "x", "status": "in_progress"}, {"content": "y", "status": "in_progress"}]}),
        ),
        (
            "c3",
            "run_tool",
            run_tool("calculate", json!({"expressions": []})),
        ),
    ]);
    // `report` asserts exit 0.
    let report = td.report("s", "r", &[], &reply);
    let results: Vec<(Value, Value, Value)> = report["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["status"].clone(),
                r["is_error"].clone(),
                r["content"].clone(),
            )
        })
        .collect();
    assert_eq!(
        results,
        vec![
            (
                json!("ok"),
                json!(false),
                json!("[calculate] {\"1/0\":\"error: division by zero or undefined result\"}")
            ),
            (
                json!("failed"),
                json!(true),
                json!(
                    "[write_todo] tool=write_todo failed: at most one step may be in_progress, found 2 (x; y); keep one in_progress and set the others to pending or completed\nnext: once a different fix works, call write_error(tool_name=\"write_todo\", keywords=[...], symptom=..., action=..., outcome=\"resolved\") so the next run finds it"
                )
            ),
            (
                json!("invalid"),
                json!(true),
                json!(
                    "tool=calculate failed: invalid arguments: /expressions: [] has less than 1 item"
                )
            ),
        ]
    );
}

/// The tools array entries a provider format gives the registered tool `name`.
fn declared(name: &str, provider: Provider, stub: bool) -> Value {
    let registry = dispatch_tools::builtin_registry().unwrap();
    let spec = registry.get(name).unwrap().spec();
    let parameters = if stub {
        json!({"type": "object", "properties": {}})
    } else {
        spec.parameters.clone()
    };
    match provider {
        Provider::OpenAi => json!({"type": "function", "function": {
            "name": name, "description": spec.description, "parameters": parameters}}),
        _ => json!({"name": name, "description": spec.description, "parameters": parameters}),
    }
}

#[test]
fn tools_for_openai_are_the_core_tools_and_the_turn_context_lists_the_rest() {
    let td = Td::new();
    let out = td.tools("s", &["--provider", "openai"]);
    let core = [
        "ask_user",
        "chat_history",
        "find_tools",
        "reasoning_guide",
        "run_tool",
        "write_result",
        "write_todo",
    ];
    assert_eq!(
        out,
        json!({
            "tools": core.map(|n| declared(n, Provider::OpenAi, false)),
            "turn_context": format!(
                "Work directory: {}\nTools (call through run_tool): ask_user, background_command, background_subagents, calculate, chat_history, download_file, edit_file, error_history, fetch_page, file_history, find_files, generate_audio, generate_image, html_template, http_request, list_chatbot, public_api_list, read_files, reasoning_guide, remove_file, restore_file, run_command, search_web, send_to_chatbot, store_secret, subagents, test_tool, write_error, write_result, write_todo",
                td.workdir().display()
            )
        })
    );
}

#[test]
fn tools_for_claude_code_stub_every_tool_until_it_is_marked() {
    let td = Td::new();
    let cc = ["--provider", "claude-code"];
    let before = td.tools("s", &cc);
    td.round(
        "s",
        "r",
        &cc,
        "<tool_call name=\"find_tools\">{\"query\": \"select:calculate\"}</tool_call>",
    );
    let after = td.tools("s", &cc);
    let cc_tools = |calculate_stub: bool| {
        let mut tools = vec![declared("calculate", Provider::ClaudeCode, calculate_stub)];
        for name in [
            "ask_user",
            "background_command",
            "background_subagents",
            "chat_history",
            "download_file",
            "edit_file",
            "error_history",
            "fetch_page",
            "file_history",
            "find_files",
            "find_tools",
            "generate_audio",
            "generate_image",
            "html_template",
            "http_request",
            "list_chatbot",
            "public_api_list",
            "read_files",
            "reasoning_guide",
            "remove_file",
            "restore_file",
            "run_command",
            "search_web",
            "send_to_chatbot",
            "store_secret",
            "subagents",
            "test_tool",
            "write_error",
            "write_result",
            "write_todo",
        ] {
            tools.push(declared(name, Provider::ClaudeCode, name != "find_tools"));
        }
        tools.sort_by_key(|t| t["name"].as_str().unwrap_or_default().to_string());
        Value::Array(tools)
    };
    // claude-code calls every tool directly: no run_tool, so no deferred listing.
    let context = format!("Work directory: {}", td.workdir().display());
    assert_eq!(
        [before, after],
        [
            json!({"tools": cc_tools(true), "turn_context": context}),
            json!({"tools": cc_tools(false), "turn_context": context}),
        ]
    );
}

#[test]
fn approve_none_declines_a_call_that_asks_with_the_headless_reason() {
    let td = Td::new();
    // No built-in tool asks yet; an ask rule makes calculate ask.
    td.rules("ask calculate\n");
    td.round("s", "r", &[], &select("c1", "calculate"));
    let declined = td.report("s", "r", &[], &calculate_reply("c2"));
    let approved = td.round("s", "r", &["--approve", "all"], &calculate_reply("c3"));
    assert_eq!(
        timeless(declined)["results"],
        json!([{
            "tool_call_id": "c2",
            "name": "calculate",
            "status": "declined",
            "is_error": true,
            "content": "Not run: this call needs the user's approval (the rule `ask calculate` asks for it), and no one is available to approve it (the dispatcher runs without a confirmer; the user can allow such calls with a rule in .tooldispatch/rules or --approve). Continue without it, or use ask_user to agree on another approach.",
            "started_ms": null,
            "ended_ms": null
        }])
    );
    // A declined call is not remembered: with an approver it runs.
    assert_eq!(
        approved,
        json!([tool_message("c3", &format!("[calculate] {CALCULATED}"))])
    );
}

#[test]
fn a_deny_rule_refuses_the_call_naming_the_rule_and_its_line() {
    let td = Td::new();
    td.rules("# arithmetic is done by hand here\ndeny calculate\n");
    td.round("s", "r", &[], &select("c1", "calculate"));
    // Even an approver cannot override a deny rule.
    let out = td.round("s", "r", &["--approve", "all"], &calculate_reply("c2"));
    assert_eq!(
        out,
        json!([tool_message(
            "c2",
            "tool=calculate failed: refused by the rule `deny calculate` (line 2 of .tooldispatch/rules). Do not retry it; continue without it, or use ask_user if the user should change the rule."
        )])
    );
}

#[test]
fn a_bad_rules_line_is_linted_on_stderr_and_the_round_still_runs() {
    let td = Td::new();
    td.rules("permit calculate\nallow write_todo\n");
    let reply = openai(&[("c1", "write_todo", json!({"todos": [{"content": "a"}]}))]);
    let output = td
        .cmd(&["round", "--session", "s"])
        .write_stdin(reply)
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8(output.stderr.clone()).unwrap(),
        "tooldispatch: .tooldispatch/rules: line 1: unknown verb \"permit\"; use allow, ask or deny\n"
    );
    assert_eq!(
        stdout_json(&output),
        json!([tool_message(
            "c1",
            "[write_todo] checklist saved: 1 step(s) — 0 done, 0 in progress, 1 pending"
        )])
    );
}

#[test]
fn client_tools_are_handed_back_and_left_out_of_the_wire_output() {
    let td = Td::new();
    let file = td.file(
        "client.json",
        r#"[{"name": "open_browser", "description": "Open a page in the user's browser",
             "parameters": {"type": "object", "properties": {"url": {"type": "string"}}, "required": ["url"]}}]"#,
    );
    let file = file.to_str().unwrap();
    let reply = openai(&[
        ("c1", "write_todo", json!({"todos": [{"content": "a"}]})),
        ("c2", "open_browser", json!({"url": "https://example.com"})),
    ]);
    let not_run = "tool=write_todo failed: not run — this reply also called the client tool open_browser, which the caller runs itself, so nothing else in the reply was run. Call write_todo again in your next reply if you still need it.";
    let wire = td.round("s", "r1", &["--client-tools", file], &reply);
    assert_eq!(wire, json!([tool_message("c1", not_run)]));

    let report = td.report("s", "r2", &["--client-tools", file], &reply);
    assert_eq!(
        timeless(report)["results"],
        json!([
            {"tool_call_id": "c1", "name": "write_todo", "status": "not_run", "is_error": true,
             "content": not_run, "started_ms": null, "ended_ms": null},
            {"tool_call_id": "c2", "name": "open_browser", "status": "client", "is_error": false,
             "content": "", "started_ms": null, "ended_ms": null}
        ])
    );

    // The client tool joins the tools array, after the built-in core tools.
    let tools = td.tools("s", &["--client-tools", file]);
    let names: Vec<&str> = tools["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "ask_user",
            "chat_history",
            "find_tools",
            "reasoning_guide",
            "run_tool",
            "write_result",
            "write_todo",
            "open_browser"
        ]
    );
}

/// Issue 16 part 4: a bad declaration is bad input (exit 2), one line naming the tool and the
/// field, for every command that takes `--client-tools`.
#[test]
fn bad_client_tools_exit_2_with_one_line_naming_the_tool_and_the_field() {
    let td = Td::new();
    let rows = [
        (
            r#"[{"name": "open.browser"}]"#,
            r#"client tool "open.browser" (#0), field name: "open.browser" is not a tool name; use 1-64 characters from a-z, A-Z, 0-9, _ and - (what every provider accepts)"#,
        ),
        (
            r#"[{"name": "find_tools", "description": "mine"}]"#,
            r#"client tool "find_tools" (#0), field name: "find_tools" is a tool tooldispatch provides; a client tool may not replace it, so give yours another name"#,
        ),
        (
            r#"[{"name": "pick"}, {"name": "pick"}]"#,
            r#"client tool "pick" (#1), field name: "pick" is declared twice (first as #0); tool names must be unique"#,
        ),
        (
            r#"[{"name": "pick", "parameters": {"type": "objekt"}}]"#,
            r#"client tool "pick" (#0), field parameters: the top level must be {"type": "object", ...}: tools take an arguments object"#,
        ),
        (
            r##"[{"name": "pick", "parameters": {"type": "object", "properties": {"q": {"$ref": "#/$defs/gone"}}}}]"##,
            r##"client tool "pick" (#0), field parameters/properties/q/$ref: $ref "#/$defs/gone" points at nothing in this schema"##,
        ),
        (
            r#"[{"name": "pick", "parameters": {"type": "object", "properties": {"q": {"type": "string", "pattern": "[unclosed"}}}}]"#,
            r#"client tool "pick" (#0), field parameters/properties/q/pattern: "[unclosed" is not a "regex""#,
        ),
    ];
    for (i, (declarations, problem)) in rows.iter().enumerate() {
        let file = td.file(&format!("bad{i}.json"), declarations);
        let file = file.to_str().unwrap();
        let expected = format!("tooldispatch: --client-tools {file} is refused: {problem}\n");
        let (code, stdout, stderr) = round_failure(
            &td,
            &["round", "--session", "s", "--client-tools", file],
            &calculate_reply("c1"),
        );
        assert_eq!(
            (code, stdout.as_str(), stderr.as_str()),
            (Some(2), "", expected.as_str())
        );
    }
    // `tools` and `replay` check the same way.
    let file = td.file("bad0.json", rows[0].0);
    let file = file.to_str().unwrap();
    let expected = format!(
        "tooldispatch: --client-tools {file} is refused: {}\n",
        rows[0].1
    );
    let replay = td.file("replay.jsonl", &format!("{}\n", calculate_reply("c1")));
    for args in [
        vec!["tools", "--session", "s", "--client-tools", file],
        vec!["replay", replay.to_str().unwrap(), "--client-tools", file],
    ] {
        let output = td.cmd(&args).output().unwrap();
        assert_eq!(
            (
                output.status.code(),
                String::from_utf8(output.stderr).unwrap()
            ),
            (Some(2), expected.clone()),
            "{args:?}"
        );
    }
}

#[test]
fn invalid_client_calls_are_answered_invalid_and_only_valid_ones_handed_back() {
    let td = Td::new();
    let file = td.file(
        "client.json",
        r#"[{"name": "open_browser", "description": "Open a page in the user's browser",
             "parameters": {"type": "object", "properties": {"url": {"type": "string", "format": "uri"}}, "required": ["url"]}}]"#,
    );
    let file = file.to_str().unwrap();
    let bad_only = openai(&[
        ("c1", "open_browser", json!({"url": "not a uri"})),
        ("c2", "write_todo", json!({"todos": [{"content": "a"}]})),
    ]);
    let report = td.report("s", "r1", &["--client-tools", file], &bad_only);
    // No valid client call: nothing is handed back and write_todo runs.
    assert_eq!(statuses(&report), pairs(&[("c1", "invalid"), ("c2", "ok")]));
    assert_eq!(
        report["results"][0]["content"],
        "tool=open_browser failed: invalid arguments: /url: \"not a uri\" is not a \"uri\""
    );
    let mixed = openai(&[
        ("c3", "open_browser", json!({})),
        ("c4", "open_browser", json!({"url": "https://example.org/"})),
        ("c5", "write_todo", json!({"todos": [{"content": "b"}]})),
    ]);
    let report = td.report("s", "r2", &["--client-tools", file], &mixed);
    assert_eq!(
        statuses(&report),
        pairs(&[("c3", "invalid"), ("c4", "client"), ("c5", "not_run")])
    );
    assert_eq!(
        report["results"][0]["content"],
        "tool=open_browser failed: missing required field(s) url for open_browser. All required fields: url"
    );
}

#[test]
fn without_store_the_default_store_lives_under_xdg_data_home() {
    let td = Td::new();
    let mut cmd = td.bare();
    cmd.args(["round", "--session", "s", "--workdir"])
        .arg(td.workdir())
        .write_stdin(openai(&[(
            "c1",
            "write_todo",
            json!({"todos": [{"content": "a"}]}),
        )]));
    stdout_json(&cmd.output().unwrap());
    assert!(
        td.data_dir().join("tooldispatch/store.db").is_file(),
        "no store.db under {}",
        td.data_dir().display()
    );
}

#[test]
fn gemini_results_answer_the_name_gemini_called() {
    let td = Td::new();
    let gemini = ["--provider", "gemini"];
    let call = |name: &str, args: Value| {
        json!({"candidates": [{"content": {"role": "model", "parts": [
            {"functionCall": {"name": name, "args": args}}
        ]}}]})
        .to_string()
    };
    td.round(
        "s",
        "m",
        &gemini,
        &call("find_tools", json!({"query": "select:calculate"})),
    );
    let out = td.round(
        "s",
        "r",
        &gemini,
        &call(
            "run_tool",
            json!({"name": "calculate", "args": {"expressions": ["6*7"]}}),
        ),
    );
    // Gemini matches an id-less response to its call by name: the name it called is run_tool.
    assert_eq!(
        out,
        json!([{"role": "user", "parts": [{"functionResponse": {
            "name": "run_tool",
            "response": {"output": "[calculate] {\"6*7\":\"42\"}"}
        }}]}])
    );
}

/// A cloned repository's rules grant nothing: until `tooldispatch trust`, the rules file is
/// ignored and the turn context says so; trust, --list and --remove manage the list.
#[test]
fn a_work_directorys_rules_apply_only_after_the_user_trusts_it() {
    let td = Td::new();
    td.untrusted_rules("deny calculate\n");
    td.round("s", "r", &[], &select("c1", "calculate"));
    let ran = td.round("s", "r1", &[], &calculate_reply("c2"));
    assert_eq!(
        ran,
        json!([tool_message("c2", &format!("[calculate] {CALCULATED}"))])
    );
    let tools = td.cmd(&["tools", "--session", "s"]).output().unwrap();
    let context = stdout_json(&tools)["turn_context"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        context.ends_with("Note: .tooldispatch/rules in this work directory is ignored until the user trusts the directory (`tooldispatch trust`)."),
        "{context}"
    );

    td.bare().arg("trust").arg(td.workdir()).assert().success();
    let listed = td.bare().args(["trust", "--list"]).output().unwrap();
    assert_eq!(
        String::from_utf8(listed.stdout).unwrap(),
        format!("{}\n", td.workdir().display())
    );
    let refused = td.round("s", "r2", &[], &calculate_reply("c3"));
    assert!(
        refused[0]["content"]
            .as_str()
            .unwrap()
            .contains("refused by the rule `deny calculate`"),
        "{refused}"
    );

    td.bare()
        .args(["trust", "--remove"])
        .arg(td.workdir())
        .assert()
        .success();
    let again = td.round("s", "r3", &[], &calculate_reply("c4"));
    assert_eq!(
        again,
        json!([tool_message("c4", &format!("[calculate] {CALCULATED}"))])
    );
    let output = td
        .bare()
        .args(["trust", "--remove"])
        .arg(td.workdir())
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(
        String::from_utf8(output.stderr)
            .unwrap()
            .contains("is not trusted")
    );
}

/// Review finding: with the work directory at `$HOME`, a read-only `tail` read other
/// sessions' data from the store. The store, its key and tooldispatch's config are the
/// dispatcher's own files: a call that names one asks (headless: declined), and the OS
/// sandbox hides them besides.
#[test]
fn a_command_naming_the_store_or_its_key_asks_even_when_the_store_is_in_the_work_dir() {
    let td = Td::new();
    // The work directory is the parent of the store, as `$HOME` is of the default store.
    let home = td.workdir().parent().unwrap().to_path_buf();
    let store = format!("sqlite:{}", home.join("store.db").display());
    let run = |reply: &str| {
        let output = td
            .bare()
            .args([
                "round",
                "--session",
                "s",
                "--run",
                "r",
                "--store",
                &store,
                "--workdir",
            ])
            .arg(&home)
            .write_stdin(reply.to_string())
            .output()
            .unwrap();
        assert!(output.status.success(), "{output:?}");
        stdout_json(&output)
    };
    run(&select("c1", "run_command"));
    for (id, file) in [
        ("c2", "store.db"),
        ("c3", "store.db.key"),
        ("c4", "store.db-wal"),
    ] {
        let out = run(&openai(&[(
            id,
            "run_tool",
            json!({"name": "run_command", "args": {"argv": ["tail", "-c", "+1", file]}}),
        )]));
        let content = out[0]["content"].as_str().unwrap();
        assert!(
            (content.contains("which holds tooldispatch's own rules, store or keys")
                || content.contains("the sensitive path store.db.key"))
                && content.contains("no one is available to approve it"),
            "{file}: {content}"
        );
    }
}

/// Issue 20: another provider's reply is bad input naming the provider to use (exit 2), never a
/// reply without calls (exit 0, `[]`, the model's calls lost), and no round is committed.
#[test]
fn another_providers_reply_exits_2_naming_the_provider_and_commits_nothing() {
    let td = Td::new();
    let responses =
        r#"[{"type":"function_call","call_id":"c","name":"calculate","arguments":"{}"}]"#;
    let gemini = r#"{"candidates":[{"content":{"role":"model","parts":[{"functionCall":{"name":"calculate","args":{}}}]}}]}"#;
    let openai_reply = calculate_reply("c1");
    let anthropic = r#"{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"calculate","input":{}}]}"#;
    for (provider, reply, says) in [
        (
            "openai",
            responses,
            "send it with provider openai-responses",
        ),
        ("openai", gemini, "send it with provider gemini"),
        (
            "claude-code",
            openai_reply.as_str(),
            "send it with provider openai",
        ),
        ("claude-code", anthropic, "send it with provider anthropic"),
        (
            "claude-code",
            responses,
            "send it with provider openai-responses",
        ),
        (
            "claude-code",
            "{\"role\":\"assistant\",\"content\":\"<tool_call name=",
            "not valid JSON",
        ),
        ("gemini", anthropic, "send it with provider anthropic"),
        ("openai-responses", gemini, "send it with provider gemini"),
    ] {
        let output = td
            .cmd(&["round", "--session", "s", "--provider", provider])
            .write_stdin(reply)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{provider}: {stderr}");
        assert!(stderr.contains(says), "{provider}: {stderr}");
        assert_eq!(String::from_utf8_lossy(&output.stdout), "", "{provider}");
    }
    // Nothing was committed: the session's first real round is still round 1.
    let report = td.report("s", "default", &[], &select("c9", "calculate"));
    assert_eq!(report["round"], 1);
}

/// Issue 21: only an assistant reply is a round. A user message, a request body or another
/// API's envelope is exit 2 naming what was sent and what to send, for every provider; an
/// answer without calls is `[]`, exit 0. Neither commits a round.
#[test]
fn only_an_assistant_reply_is_a_round() {
    let td = Td::new();
    for (provider, input, says) in not_replies() {
        let output = td
            .cmd(&["round", "--session", "s", "--provider", provider])
            .write_stdin(input)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(
            output.status.code(),
            Some(2),
            "{provider} {input}: {stderr}"
        );
        assert!(
            stderr.contains(&format!(
                "cannot read the {provider} reply: {provider}: {says}"
            )) && stderr.contains("; send the "),
            "{provider} {input}: {stderr}"
        );
        assert_eq!(String::from_utf8_lossy(&output.stdout), "", "{provider}");
    }
    for (provider, answer) in answers_without_calls() {
        let output = td
            .cmd(&["round", "--session", "s", "--provider", provider])
            .write_stdin(answer)
            .output()
            .unwrap();
        assert_eq!(
            output.status.code(),
            Some(0),
            "{provider} {answer}: {output:?}"
        );
        assert_eq!(
            String::from_utf8_lossy(&output.stdout).trim(),
            "[]",
            "{provider}"
        );
        let report = td.report("s", "default", &["--provider", provider], answer);
        assert_eq!(report["round"], 0, "{provider}: {report}");
        assert_eq!(report["results"], json!([]), "{provider}: {report}");
    }
    // Nothing was committed: the session's first real round is still round 1.
    let report = td.report("s", "default", &[], &select("c9", "calculate"));
    assert_eq!(report["round"], 1);
}

/// `calls` as one reply in `provider`'s format (claude-code has no ids: results go by order).
fn reply_in(provider: &str, calls: &[(&str, &str, Value)]) -> String {
    match provider {
        "openai" => openai(calls),
        "anthropic" => json!({"role": "assistant", "content": calls.iter().map(|(id, name, args)| {
            json!({"type": "tool_use", "id": id, "name": name, "input": args})
        }).collect::<Vec<_>>()})
        .to_string(),
        "openai-responses" => Value::Array(
            calls
                .iter()
                .map(|(id, name, args)| {
                    json!({"type": "function_call", "call_id": id, "name": name,
                           "arguments": args.to_string()})
                })
                .collect(),
        )
        .to_string(),
        "gemini" => json!({"candidates": [{"content": {"role": "model", "parts": calls.iter().map(|(id, name, args)| {
            json!({"functionCall": {"id": id, "name": name, "args": args}})
        }).collect::<Vec<_>>()}}]})
        .to_string(),
        "claude-code" => calls
            .iter()
            .map(|(_, name, args)| format!("<tool_call name=\"{name}\">{args}</tool_call>"))
            .collect::<Vec<_>>()
            .join("\n"),
        other => panic!("no reply format for {other}"),
    }
}

/// A 1×1 PNG.
const DOT_PNG: &[u8] = b"\x89\x50\x4e\x47\x0d\x0a\x1a\x0a\x00\x00\x00\x0d\x49\x48\x44\x52\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00\x00\x1f\x15\xc4\x89\x00\x00\x00\x0d\x49\x44\x41\x54\x78\xda\x63\x64\xf8\xcf\x50\x0f\x00\x03\x86\x01\x80\x5a\x34\x7d\x6b\x00\x00\x00\x00\x49\x45\x4e\x44\xae\x42\x60\x82";

/// Issue 21: a repeated call gives the model the text it read the first time, byte for byte,
/// with the `[name] ` prefix: built-in tools answering text, JSON, an image, nothing found and a
/// missing file, repeated in the next round and within one round, in every provider's format.
#[test]
fn a_repeated_call_returns_the_first_result_byte_for_byte_in_every_format() {
    let td = Td::new();
    std::fs::write(td.workdir().join("notes.txt"), "alpha\nbeta\n").unwrap();
    std::fs::write(td.workdir().join("dot.png"), DOT_PNG).unwrap();
    let calls = [
        ("c1", "calculate", json!({"expressions": ["2^10"]})),
        (
            "c2",
            "read_files",
            json!({"files": [{"path": "notes.txt"}]}),
        ),
        ("c3", "read_files", json!({"files": [{"path": "dot.png"}]})),
        (
            "c4",
            "find_files",
            json!({"mode": "search", "queries": [{"pattern": "alpha"}]}),
        ),
        (
            "c5",
            "find_files",
            json!({"mode": "search", "queries": [{"pattern": "no such words anywhere"}]}),
        ),
        (
            "c6",
            "read_files",
            json!({"files": [{"path": "/proc/self/no-such-file"}]}),
        ),
    ];
    // Through run_tool, which every provider's model uses for a deferred tool.
    let calls = calls.map(|(id, name, args)| (id, "run_tool", run_tool(name, args)));
    let tools = "calculate,read_files,find_files";
    for provider in Provider::ALL.map(Provider::as_str) {
        let session = format!("dedupe-{provider}");
        let flags = ["--provider", provider];
        td.round(&session, "r", &[], &select("f", tools));
        // The next round, the same calls and ids: the wire output is the first's, byte for byte.
        let first = td.round(&session, "r", &flags, &reply_in(provider, &calls));
        let again = td.report(&session, "r", &flags, &reply_in(provider, &calls));
        let statuses: Vec<&Value> = again["results"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| &r["status"])
            .collect();
        assert!(
            statuses.iter().all(|s| *s == "deduped"),
            "{provider}: {statuses:?}"
        );
        let hits = td.round(&session, "r", &flags, &reply_in(provider, &calls));
        assert_eq!(
            hits, first,
            "{provider}: the hits render as the first results did"
        );
        // Within one round (a new run, so nothing is remembered yet): each repeat is a hit
        // holding the first call's text.
        let renamed: Vec<(String, &str, Value)> = calls
            .iter()
            .map(|(id, name, args)| (format!("again_{id}"), *name, args.clone()))
            .collect();
        let both: Vec<(&str, &str, Value)> = calls
            .iter()
            .cloned()
            .chain(
                renamed
                    .iter()
                    .map(|(id, name, args)| (id.as_str(), *name, args.clone())),
            )
            .collect();
        let round = td.report(&session, "r2", &flags, &reply_in(provider, &both));
        let results = round["results"].as_array().unwrap();
        for (i, (_, _, args)) in calls.iter().enumerate() {
            let name = args["name"].as_str().unwrap();
            let (once, repeat) = (&results[i], &results[calls.len() + i]);
            assert_ne!(once["status"], "deduped", "{provider}: {once}");
            let content = once["content"].as_str().unwrap();
            assert!(
                content.starts_with(&format!("[{name}] ")),
                "{provider}: {content}"
            );
            assert_eq!(repeat["status"], "deduped", "{provider}: {repeat}");
            assert_eq!(repeat["content"], once["content"], "{provider} {name}");
            assert_eq!(repeat["images"], once["images"], "{provider} {name}");
        }
        assert_eq!(
            results[2]["images"].as_array().map(Vec::len),
            Some(1),
            "{provider}"
        );
    }
}
