//! Deferred schemas and find_tools: seed checklist items 20–23 and 26–32, item 83, and the
//! registry's refusals, through real engine rounds and the engine's tools API.
// Helpers outside #[test] functions unwrap too: a failure there is a test failure.

use std::sync::Arc;

use dispatch_engine::{
    ClientTool, Provider, Registry, RegistryError, RoundRequest, Status, ToolSpec,
    register_system_tools,
};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use super::support::*;

// ---------------------------------------------------------------------------------------------
// Helpers

fn echo_tool(name: &str) -> TestTool {
    TestTool::new(spec(name), Behaviour::Echo)
}

/// A read-only tool with this description.
fn described(name: &str, description: &str) -> TestTool {
    TestTool::new(
        ToolSpec::new(name, description, loose_schema()).read_only(),
        Behaviour::Echo,
    )
}

/// The re-invoke header of a schema-before-fetch result.
fn header(name: &str, target: &str) -> String {
    format!(
        "[{name}] tool schema below. Re-invoke {target} with the correct arguments — the previous call was made before its schema was fetched."
    )
}

/// The `select:` output for these tools, as find_tools renders it.
fn select_json(fx: &Fixture, query: &str, names: &[&str]) -> Value {
    let registry = fx.engine.registry();
    let injected: Vec<Value> = names
        .iter()
        .map(|n| {
            let spec = registry.get(n).expect("registered").spec();
            json!({"name": spec.name, "description": spec.description, "parameters": spec.parameters})
        })
        .collect();
    json!({"injected": injected, "query": query, "total_tools": registry.len()})
}

/// One find_tools call (OpenAI, where it is in the tools array) and its parsed output.
async fn find_tools(fx: &Fixture, session: &str, args: Value) -> (Status, Value) {
    let out = fx
        .run(
            session,
            "r",
            vec![call("f", "find_tools", &args.to_string())],
        )
        .await;
    let r = &out.results[0];
    let body = r
        .content
        .strip_prefix("[find_tools] ")
        .unwrap_or(&r.content);
    (
        r.status,
        serde_json::from_str(body).unwrap_or(Value::String(body.to_string())),
    )
}

fn injected_names(output: &Value) -> Vec<String> {
    output["injected"]
        .as_array()
        .expect("an injected list")
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect()
}

/// The names in a tools array of any provider format.
fn array_names(array: &[Value]) -> Vec<String> {
    array
        .iter()
        .map(|t| {
            t["function"]["name"]
                .as_str()
                .or_else(|| t["name"].as_str())
                .unwrap()
                .to_string()
        })
        .collect()
}

/// One OpenAI tools-array entry for a registered tool.
fn openai_decl(fx: &Fixture, name: &str) -> Value {
    let registry = fx.engine.registry();
    let spec = registry.get(name).expect("registered").spec();
    json!({"type": "function", "function": {
        "name": spec.name, "description": spec.description, "parameters": spec.parameters}})
}

fn client_tool() -> ClientTool {
    ClientTool {
        name: "client_pick".into(),
        description: "the caller picks".into(),
        parameters: json!({"type": "object", "properties": {"choice": {"type": "string"}}}),
    }
}

// ---------------------------------------------------------------------------------------------
// Schema before fetch (items 20–23)

#[tokio::test]
async fn unmarked_tool_returns_schema_with_reinvoke_header_instead_of_running() {
    let (tool, calls) = counted(spec("echo"), Behaviour::Echo);
    let fx = fixture().tool(tool).build();
    let out = fx
        .round(
            "s",
            "r",
            Provider::ClaudeCode,
            vec![call("a", "echo", r#"{"x": 1}"#)],
        )
        .await;
    let schema = select_json(&fx, "select:echo", &["echo"]).to_string();
    assert_eq!(
        results(&out),
        vec![(
            Status::NeedsSchema,
            format!("{}\n{schema}", header("echo", "echo"))
        )]
    );
    // DESIGN §3.13: the slot's only event is its ToolResult, with status needs_schema.
    assert_eq!(event_types(&out.events, Some("a")), vec!["ToolResult"]);
    assert_eq!(events_json(&out.events)[0]["status"], "needs_schema");
    assert_eq!(count(&calls), 0);
    // Marked for the session: it is no longer a stub in the claude-code tools array.
    let (snapshot, _) = fx.store.load("s", "").await.unwrap();
    assert!(snapshot.marked.contains("echo"), "{:?}", snapshot.marked);
    let (array, _) = fx
        .engine
        .tools("s", Provider::ClaudeCode, &[], &[])
        .await
        .unwrap();
    assert_eq!(
        array[0],
        json!({"name": "echo", "description": "test tool echo", "parameters": loose_schema()})
    );
}

#[tokio::test]
async fn unmarked_tool_through_run_tool_names_run_tool_as_reinvoke_target() {
    let (tool, calls) = counted(spec("echo"), Behaviour::Echo);
    let fx = fixture().tool(tool).build();
    let out = fx
        .run("s", "r", vec![wrapped("a", "echo", json!({"x": 1}))])
        .await;
    let schema = select_json(&fx, "select:echo", &["echo"]).to_string();
    assert_eq!(
        results(&out),
        vec![(
            Status::NeedsSchema,
            format!("{}\n{schema}", header("echo", "run_tool(name=echo)"))
        )]
    );
    assert_eq!(count(&calls), 0);
}

#[tokio::test]
async fn tool_runs_normally_on_next_call_after_schema_was_returned() {
    let (tool, calls) = counted(spec("echo"), Behaviour::Echo);
    let fx = fixture().tool(tool).build();
    let first = fx
        .run("s", "r1", vec![wrapped("a", "echo", json!({"x": 1}))])
        .await;
    assert_eq!(first.results[0].status, Status::NeedsSchema);
    let second = fx
        .run("s", "r1", vec![wrapped("b", "echo", json!({"x": 1}))])
        .await;
    // Marks belong to the session, so a later run needs no second fetch either.
    let later = fx
        .run("s", "r2", vec![wrapped("c", "echo", json!({"x": 2}))])
        .await;
    assert_eq!(
        results(&second),
        vec![(Status::Ok, r#"[echo] echo:{"x":1}"#.to_string())]
    );
    assert_eq!(
        results(&later),
        vec![(Status::Ok, r#"[echo] echo:{"x":2}"#.to_string())]
    );
    assert_eq!(count(&calls), 2);
}

#[tokio::test]
async fn second_call_to_unmarked_tool_in_same_round_gets_header_without_schema() {
    let (tool, calls) = counted(spec("echo"), Behaviour::Echo);
    let fx = fixture().tool(tool).build();
    let out = fx
        .round(
            "s",
            "r",
            Provider::ClaudeCode,
            vec![
                call("a", "echo", r#"{"x": 1}"#),
                call("b", "echo", r#"{"x": 2}"#),
                call("c", "echo", r#"{"x": 1}"#),
                wrapped("d", "echo", json!({"x": 3})),
            ],
        )
        .await;
    let schema = select_json(&fx, "select:echo", &["echo"]).to_string();
    assert_eq!(
        results(&out),
        vec![
            (
                Status::NeedsSchema,
                format!("{}\n{schema}", header("echo", "echo"))
            ),
            (Status::NeedsSchema, header("echo", "echo")),
            (Status::NeedsSchema, header("echo", "echo")),
            (Status::NeedsSchema, header("echo", "run_tool(name=echo)")),
        ]
    );
    assert_eq!(count(&calls), 0);
}

// ---------------------------------------------------------------------------------------------
// The tools array and the turn context (items 26–28)

#[tokio::test]
async fn non_claude_code_tools_array_is_core_tools_plus_client_tools() {
    let fx = fixture()
        .tool(echo_tool("ask_user"))
        .tool(echo_tool("chat_history"))
        .tool(echo_tool("reasoning_guide"))
        .tool(echo_tool("write_todo"))
        .tool(echo_tool("write_result"))
        .tool(echo_tool("echo"))
        .tool(echo_tool("read_files"))
        .build();
    let client = client_tool();
    let core = [
        "ask_user",
        "chat_history",
        "find_tools",
        "reasoning_guide",
        "run_tool",
        "write_result",
        "write_todo",
    ];
    let mut expected: Vec<Value> = core.iter().map(|n| openai_decl(&fx, n)).collect();
    expected.push(json!({"type": "function", "function": {
        "name": "client_pick", "description": "the caller picks",
        "parameters": {"type": "object", "properties": {"choice": {"type": "string"}}}}}));
    let (array, _) = fx
        .engine
        .tools("s", Provider::OpenAi, std::slice::from_ref(&client), &[])
        .await
        .unwrap();
    assert_eq!(array, expected);

    // DESIGN §3.1: fetched schemas do not join the array.
    fx.mark_all("s").await;
    let (after_fetch, _) = fx
        .engine
        .tools("s", Provider::OpenAi, std::slice::from_ref(&client), &[])
        .await
        .unwrap();
    assert_eq!(after_fetch, expected);

    // Anthropic gets the same set; an excluded core tool is left out.
    let (anthropic, _) = fx
        .engine
        .tools(
            "s",
            Provider::Anthropic,
            std::slice::from_ref(&client),
            &["reasoning_guide".to_string()],
        )
        .await
        .unwrap();
    assert_eq!(
        array_names(&anthropic),
        vec![
            "ask_user",
            "chat_history",
            "find_tools",
            "run_tool",
            "write_result",
            "write_todo",
            "client_pick"
        ]
    );
}

#[tokio::test]
async fn tools_array_holds_only_registered_core_tools() {
    let fx = fixture()
        .tool(echo_tool("write_todo"))
        .tool(echo_tool("echo"))
        .build();
    let (array, _) = fx
        .engine
        .tools("s", Provider::OpenAi, &[], &[])
        .await
        .unwrap();
    assert_eq!(
        array,
        vec![
            openai_decl(&fx, "find_tools"),
            openai_decl(&fx, "run_tool"),
            openai_decl(&fx, "write_todo"),
        ]
    );
}

#[tokio::test]
async fn claude_code_gets_every_tool_but_run_tool_with_stubs_until_marked() {
    // DESIGN §3.2: unmarked tools are stubs (name, description, empty-object parameters).
    let fx = fixture()
        .tool(echo_tool("echo"))
        .tool(echo_tool("write_todo"))
        .tool(echo_tool("read_files"))
        .build();
    let client = client_tool();
    let stub = json!({"type": "object", "properties": {}});
    let find_tools_spec = fx
        .engine
        .registry()
        .get("find_tools")
        .unwrap()
        .spec()
        .clone();
    let find_tools_decl = json!({"name": "find_tools", "description": find_tools_spec.description,
        "parameters": find_tools_spec.parameters});
    let client_decl = json!({"name": "client_pick", "description": "the caller picks",
        "parameters": {"type": "object", "properties": {"choice": {"type": "string"}}}});
    let exclude = vec!["read_files".to_string()];
    let (array, _) = fx
        .engine
        .tools(
            "s",
            Provider::ClaudeCode,
            std::slice::from_ref(&client),
            &exclude,
        )
        .await
        .unwrap();
    assert_eq!(
        array,
        vec![
            json!({"name": "echo", "description": "test tool echo", "parameters": stub}),
            find_tools_decl.clone(),
            json!({"name": "write_todo", "description": "test tool write_todo", "parameters": stub}),
            client_decl.clone(),
        ]
    );
    // find_tools runs at once; echo is unmarked until its first call, then shown in full.
    let out = fx
        .round(
            "s",
            "r",
            Provider::ClaudeCode,
            vec![
                call("a", "find_tools", r#"{"query": "zzqx"}"#),
                call("b", "echo", "{}"),
            ],
        )
        .await;
    let statuses: Vec<Status> = out.results.iter().map(|r| r.status).collect();
    assert_eq!(statuses, vec![Status::Ok, Status::NeedsSchema]);
    let (marked, _) = fx
        .engine
        .tools(
            "s",
            Provider::ClaudeCode,
            std::slice::from_ref(&client),
            &exclude,
        )
        .await
        .unwrap();
    assert_eq!(
        marked,
        vec![
            json!({"name": "echo", "description": "test tool echo", "parameters": loose_schema()}),
            find_tools_decl,
            json!({"name": "write_todo", "description": "test tool write_todo", "parameters": stub}),
            client_decl,
        ]
    );
}

#[tokio::test]
async fn turn_context_lists_deferred_names_except_find_tools_run_tool_and_excluded() {
    let fx = fixture()
        .tool(echo_tool("alpha"))
        .tool(echo_tool("beta"))
        .tool(echo_tool("scan_x"))
        .tool(echo_tool("write_todo"))
        .tool(echo_tool("echo"))
        .build();
    let dir = fx.path().display().to_string();
    let exclude = vec!["beta".to_string(), "sc*".to_string()];
    let (_, openai) = fx
        .engine
        .tools("s", Provider::OpenAi, &[], &exclude)
        .await
        .unwrap();
    assert_eq!(
        openai,
        format!("Work directory: {dir}\nTools (call through run_tool): alpha, echo, write_todo")
    );
    // Without run_tool in the loaded set there is nothing to call through.
    let (_, claude) = fx
        .engine
        .tools("s", Provider::ClaudeCode, &[], &exclude)
        .await
        .unwrap();
    assert_eq!(claude, format!("Work directory: {dir}"));
    let (_, no_run_tool) = fx
        .engine
        .tools("s", Provider::OpenAi, &[], &["run_tool".to_string()])
        .await
        .unwrap();
    assert_eq!(no_run_tool, format!("Work directory: {dir}"));
}

// ---------------------------------------------------------------------------------------------
// find_tools (items 29–32)

#[tokio::test]
async fn find_tools_select_returns_exactly_named_tools_in_order_and_marks_them() {
    let (alpha, alpha_calls) = counted(spec("alpha"), Behaviour::Echo);
    let (beta, beta_calls) = counted(spec("beta"), Behaviour::Echo);
    let (zeta, zeta_calls) = counted(spec("zeta"), Behaviour::Echo);
    let fx = fixture().tool(alpha).tool(beta).tool(zeta).build();
    let query = "select:Zeta, alpha ,ZETA,nonexistent,ALPHA";
    let (status, output) = find_tools(&fx, "s", json!({"query": query})).await;
    assert_eq!(status, Status::Ok);
    assert_eq!(output, select_json(&fx, query, &["zeta", "alpha"]));

    let out = fx
        .run(
            "s",
            "r",
            vec![
                wrapped("a", "zeta", json!({})),
                wrapped("b", "alpha", json!({})),
                wrapped("c", "beta", json!({})),
            ],
        )
        .await;
    let statuses: Vec<Status> = out.results.iter().map(|r| r.status).collect();
    assert_eq!(statuses, vec![Status::Ok, Status::Ok, Status::NeedsSchema]);
    assert_eq!(
        (count(&alpha_calls), count(&beta_calls), count(&zeta_calls)),
        (1, 0, 1)
    );

    // Excluded names are dropped from a select.
    let mut req = RoundRequest::new(
        "s2",
        "r",
        Provider::OpenAi,
        vec![call(
            "f",
            "find_tools",
            &json!({"query": "select:beta,zeta"}).to_string(),
        )],
    );
    req.exclude = vec!["zeta".into()];
    let excluded = fx.request(req).await;
    assert_eq!(
        excluded.results[0].content,
        format!(
            "[find_tools] {}",
            select_json(&fx, "select:beta,zeta", &["beta"])
        )
    );
}

#[tokio::test]
async fn find_tools_keyword_query_requires_every_term_and_ranks_by_seed_scores() {
    let fx = fixture()
        .tool(described("read_file", "test tool"))
        .tool(described("bread_file", "test tool"))
        .tool(described("read_files", "[system-default] reads many"))
        .tool(described("reader_profile", "Profiles"))
        .tool(described("notes", "Read a file aloud."))
        .tool(described("notes_index", "test tool"))
        .tool(described("write_file", "Writes a file"))
        .tool(described("doc", "profiles of readers"))
        .tool(described("jp", "日本語のファイルを読む"))
        .build();
    // read_file 10+10, bread_file 5+10, read_files 10+5−1, reader_profile 5+5, notes 4+4;
    // write_file misses "read" everywhere; doc's "readers" is no word match: both left out.
    let (status, output) = find_tools(&fx, "s", json!({"query": "Read  FILE"})).await;
    assert_eq!(status, Status::Ok);
    assert_eq!(
        injected_names(&output),
        vec![
            "read_file",
            "bread_file",
            "read_files",
            "reader_profile",
            "notes"
        ]
    );
    assert_eq!(output["query"], "Read  FILE");
    assert_eq!(output["total_tools"], 11);
    // +3 when only the whole name contains the term; ties keep name order; −1 for system-default.
    let (_, substring) = find_tools(&fx, "s", json!({"query": "ad_fi"})).await;
    assert_eq!(
        injected_names(&substring),
        vec!["bread_file", "read_file", "read_files"]
    );
    // The exact name wins outright.
    let (_, exact) = find_tools(&fx, "s", json!({"query": "notes"})).await;
    assert_eq!(injected_names(&exact), vec!["notes", "notes_index"]);
    // A non-ASCII term matches the description as a plain substring.
    let (_, japanese) = find_tools(&fx, "s", json!({"query": "ファイル"})).await;
    assert_eq!(injected_names(&japanese), vec!["jp"]);
    // Every term must hit: no tool has both words.
    let (_, none) = find_tools(&fx, "s", json!({"query": "write profile"})).await;
    assert_eq!(injected_names(&none), Vec::<String>::new());
}

#[tokio::test]
async fn find_tools_keyword_results_are_capped_at_five_per_category() {
    let mut builder = fixture();
    for prefix in [
        "fetch_",
        "mcp__srv__fetch_",
        "api_fetch_",
        "script_fetch_",
        "ext_fetch_",
    ] {
        for i in 0..7 {
            builder = builder.tool(echo_tool(&format!("{prefix}{i}")));
        }
    }
    let fx = builder.build();
    let (status, output) = find_tools(&fx, "s", json!({"query": "fetch"})).await;
    assert_eq!(status, Status::Ok);
    let mut expected = Vec::new();
    // All score 10 and keep name order; find_tools ("Fetch tool schemas", +4) is sys's 8th.
    for prefix in [
        "api_fetch_",
        "ext_fetch_",
        "fetch_",
        "mcp__srv__fetch_",
        "script_fetch_",
    ] {
        for i in 0..5 {
            expected.push(format!("{prefix}{i}"));
        }
    }
    assert_eq!(injected_names(&output), expected);
}

#[tokio::test]
async fn find_tools_defaults_to_search_with_query_and_list_without_hiding_system_tools() {
    let fx = fixture()
        .tool(echo_tool("echo"))
        .tool(TestTool::new(spec("hidden").system(), Behaviour::Echo))
        .tool(described("legacy", "[system-default] old echo"))
        .build();
    let desc = |n: &str| {
        fx.engine
            .registry()
            .get(n)
            .unwrap()
            .spec()
            .description
            .clone()
    };
    let (status, listed) = find_tools(&fx, "s", json!({})).await;
    assert_eq!(status, Status::Ok);
    assert_eq!(
        listed,
        json!({"tools": [
            {"name": "echo", "description": "test tool echo"},
            {"name": "legacy", "description": "[system-default] old echo", "system_default": true},
        ], "total_tools": 5})
    );
    let (_, with_system) = find_tools(&fx, "s", json!({"system": true})).await;
    assert_eq!(
        with_system,
        json!({"tools": [
            {"name": "echo", "description": "test tool echo"},
            {"name": "find_tools", "description": desc("find_tools")},
            {"name": "hidden", "description": "test tool hidden"},
            {"name": "legacy", "description": "[system-default] old echo", "system_default": true},
            {"name": "run_tool", "description": desc("run_tool")},
        ], "total_tools": 5})
    );
    let (_, searched) = find_tools(&fx, "s", json!({"query": "echo"})).await;
    assert_eq!(
        searched,
        select_json(&fx, "echo", &["echo", "legacy"]),
        "a query without a mode searches"
    );
    let (status, empty) = find_tools(&fx, "s", json!({"mode": "search"})).await;
    assert_eq!(status, Status::Failed);
    assert_eq!(
        empty,
        Value::String(
            "tool=find_tools failed: query is required when mode=search\nnext: once a different fix works, call write_error(tool_name=\"find_tools\", keywords=[...], symptom=..., action=..., outcome=\"resolved\") so the next run finds it".into()
        )
    );
}

// ---------------------------------------------------------------------------------------------
// Item 83 and registration

#[tokio::test]
async fn always_load_flag_on_a_tool_definition_is_ignored() {
    let mut schema = loose_schema();
    schema["always_load"] = json!(true);
    schema["x-always-load"] = json!(true);
    let (pinned, calls) = counted(
        ToolSpec::new("pinned", "always_load: true", schema.clone())
            .read_only()
            .concurrent(),
        Behaviour::Echo,
    );
    let fx = fixture().tool(pinned).build();
    let (openai, context) = fx
        .engine
        .tools("s", Provider::OpenAi, &[], &[])
        .await
        .unwrap();
    assert_eq!(array_names(&openai), vec!["find_tools", "run_tool"]);
    assert!(
        context.ends_with("Tools (call through run_tool): pinned"),
        "{context}"
    );
    let (claude, _) = fx
        .engine
        .tools("s", Provider::ClaudeCode, &[], &[])
        .await
        .unwrap();
    assert_eq!(
        claude[1],
        json!({"name": "pinned", "description": "always_load: true", "parameters": {"type": "object", "properties": {}}})
    );
    // Still deferred and unmarked: the direct call is refused, the wrapped one gets the schema.
    let out = fx
        .run(
            "s",
            "r",
            vec![call("a", "pinned", "{}"), wrapped("b", "pinned", json!({}))],
        )
        .await;
    let statuses: Vec<Status> = out.results.iter().map(|r| r.status).collect();
    assert_eq!(statuses, vec![Status::Refused, Status::NeedsSchema]);
    assert_eq!(count(&calls), 0);
}

fn registry_with_echo() -> Registry {
    let mut registry = Registry::empty();
    register_system_tools(&mut registry).unwrap();
    registry.register(Arc::new(echo_tool("echo"))).unwrap();
    registry
}

fn with_schema(name: &str, schema: Value) -> Arc<TestTool> {
    Arc::new(TestTool::new(
        ToolSpec::new(name, "d", schema),
        Behaviour::Echo,
    ))
}

#[test]
fn registry_refuses_duplicate_names_with_clear_error() {
    let mut registry = registry_with_echo();
    let dup = registry.register(Arc::new(echo_tool("echo")));
    assert_eq!(dup, Err(RegistryError::Duplicate("echo".into())));
    assert_eq!(
        dup.unwrap_err().to_string(),
        "tool \"echo\" is already registered; tool names must be unique"
    );
    assert_eq!(
        register_system_tools(&mut registry),
        Err(RegistryError::Duplicate("run_tool".into()))
    );
    assert_eq!(registry.len(), 3);
}

#[test]
fn registry_refuses_names_providers_do_not_accept() {
    let mut registry = registry_with_echo();
    let long = "a".repeat(65);
    for bad in ["", "has space", "a.b", "naïve", "x/y", long.as_str()] {
        let refused = registry.register(Arc::new(echo_tool(bad)));
        assert_eq!(refused, Err(RegistryError::BadName(bad.into())));
        assert_eq!(
            refused.unwrap_err().to_string(),
            format!(
                "tool name {bad:?} is not allowed; use 1-64 characters from a-z, A-Z, 0-9, _ and - (what every provider accepts)"
            )
        );
    }
    registry
        .register(Arc::new(echo_tool(&"a".repeat(64))))
        .unwrap();
    registry
        .register(Arc::new(echo_tool("Mixed-Case_9")))
        .unwrap();
    assert_eq!(registry.len(), 5);
}

#[test]
fn registry_refuses_schema_whose_top_level_is_not_an_object() {
    let mut registry = registry_with_echo();
    for schema in [
        json!({"type": "array"}),
        json!({"properties": {"a": {"type": "string"}}}),
        json!(true),
        json!({"type": ["object", "null"]}),
    ] {
        let refused = registry.register(with_schema("odd", schema.clone()));
        assert_eq!(
            refused.unwrap_err().to_string(),
            "tool \"odd\" has a parameters schema that does not compile: the top level must be {\"type\": \"object\", ...}: tools take an arguments object",
            "{schema}"
        );
    }
    assert!(!registry.contains("odd"));
}

#[test]
fn registry_refuses_schema_that_does_not_compile() {
    let mut registry = registry_with_echo();
    for schema in [
        json!({"type": "object", "properties": {"a": {"type": "nonsense"}}}),
        json!({"type": "object", "properties": {"a": {"minimum": "one"}}}),
        json!({"type": "object", "properties": {"a": {"pattern": "(unclosed"}}}),
        // DESIGN §3.4: no remote $ref.
        json!({"type": "object", "properties": {"a": {"$ref": "https://example.com/a.json"}}}),
    ] {
        match registry.register(with_schema("weird", schema.clone())) {
            Err(RegistryError::BadSchema { name, reason }) => {
                assert_eq!(name, "weird");
                assert!(!reason.trim().is_empty(), "{schema}");
            }
            other => panic!("{schema} was not refused: {other:?}"),
        }
    }
    assert!(!registry.contains("weird"));
    assert_eq!(registry.len(), 3);
}

/// Tools that arrive or leave between rounds (an MCP server started, died or changed its
/// list) are what the next round sees: found, callable, or not found.
#[tokio::test]
async fn tools_replaced_between_rounds_take_effect_in_the_next_round() {
    let fx = fixture().approve_all().build();
    let wrapped_late = || vec![wrapped("a", "late", json!({"x": 1}))];
    let before = fx.round("s", "r1", Provider::OpenAi, wrapped_late()).await;
    assert_eq!(results(&before)[0].0, Status::NotFound);

    fx.engine.update_registry(|registry| {
        registry.register(Arc::new(echo_tool("late"))).unwrap();
    });
    let (status, _) = find_tools(&fx, "s", json!({"query": "select:late"})).await;
    assert_eq!(status, Status::Ok);
    let during = fx.round("s", "r2", Provider::OpenAi, wrapped_late()).await;
    assert_eq!(
        results(&during)[0],
        (Status::Ok, "[late] echo:{\"x\":1}".to_string())
    );

    fx.engine
        .update_registry(|registry| registry.retain(|t| t.name() != "late"));
    let after = fx.round("s", "r3", Provider::OpenAi, wrapped_late()).await;
    assert_eq!(results(&after)[0].0, Status::NotFound);
}

/// A caller that showed the model every schema (an MCP client's tools/list) says so, and a
/// first call runs at once instead of coming back with its schema.
#[tokio::test]
async fn a_caller_that_showed_every_schema_skips_the_fetch() {
    let (tool, calls) = counted(spec("echo"), Behaviour::Echo);
    let fx = fixture().tool(tool).build();
    let mut request = RoundRequest::new(
        "s",
        "r",
        Provider::ClaudeCode,
        vec![call("a", "echo", r#"{"x": 1}"#)],
    );
    request.schemas_shown = true;
    let out = fx.request(request).await;
    assert_eq!(
        results(&out),
        vec![(Status::Ok, "[echo] echo:{\"x\":1}".to_string())]
    );
    assert_eq!(count(&calls), 1);
}
