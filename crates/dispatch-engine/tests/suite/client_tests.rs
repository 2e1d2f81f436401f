//! Client tools through the registry's rules (issue 16, part 4): declarations checked like
//! any tool's, compiled once, and client calls checked by pass 1's parse, object and schema
//! checks before anything is handed back.

use dispatch_engine::{
    ClientTool, ClientToolProblem, ClientTools, Provider, RoundOutcome, RoundRequest, Status,
    ToolSpec, check_client_tools,
};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use super::support::*;

/// The client tool the round tests declare: a required `path` string and an optional
/// `count` between 1 and 10.
fn pick_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "path": {"type": "string"},
            "count": {"type": "integer", "minimum": 1, "maximum": 10}
        },
        "required": ["path"],
        "additionalProperties": false
    })
}

fn declared(name: &str, parameters: Value) -> ClientTool {
    ClientTool {
        name: name.into(),
        description: format!("client tool {name}"),
        parameters,
    }
}

fn pick() -> ClientTool {
    declared("pick_file", pick_schema())
}

fn problem(index: usize, tool: &str, field: &str, reason: &str) -> ClientToolProblem {
    ClientToolProblem {
        index,
        tool: tool.into(),
        field: field.into(),
        reason: reason.into(),
    }
}

// ---- Declarations -------------------------------------------------------------------------

const NAME_RULE: &str =
    "use 1-64 characters from a-z, A-Z, 0-9, _ and - (what every provider accepts)";
const REMOTE: &str = "points outside the schema; remote references are never fetched, so copy what it names under \"$defs\" (draft-07: \"definitions\") and refer to it as \"#/$defs/NAME\"";
const TOP_LEVEL: &str =
    "the top level must be {\"type\": \"object\", ...}: tools take an arguments object";

/// Each row: one bad declaration after a good one, and the one problem it must produce.
#[test]
fn every_kind_of_bad_client_tool_declaration_is_refused_with_its_field_and_reason() {
    let fx = fixture()
        .tool(TestTool::new(spec("echo"), Behaviour::Echo))
        .build();
    let registry = fx.engine.registry();
    let long = "n".repeat(65);
    let obj = |props: Value| json!({"type": "object", "properties": props});
    let rows: Vec<(ClientTool, &str, String)> = vec![
        (
            declared("pick.file", obj(json!({}))),
            "name",
            format!("\"pick.file\" is not a tool name; {NAME_RULE}"),
        ),
        (
            declared(&long, obj(json!({}))),
            "name",
            format!("{long:?} is not a tool name; {NAME_RULE}"),
        ),
        (
            declared("", obj(json!({}))),
            "name",
            format!("\"\" is not a tool name; {NAME_RULE}"),
        ),
        (
            declared("has space", obj(json!({}))),
            "name",
            format!("\"has space\" is not a tool name; {NAME_RULE}"),
        ),
        (
            declared("good", obj(json!({}))),
            "name",
            "\"good\" is declared twice (first as #0); tool names must be unique".into(),
        ),
        (
            declared("find_tools", obj(json!({}))),
            "name",
            "\"find_tools\" is a tool tooldispatch provides; a client tool may not replace it, so give yours another name".into(),
        ),
        (
            declared("echo", obj(json!({}))),
            "name",
            "\"echo\" is a tool tooldispatch provides; a client tool may not replace it, so give yours another name".into(),
        ),
        (
            declared("mcp__srv__tool", obj(json!({}))),
            "name",
            "names starting with mcp__ are kept for the tools tooldispatch registers while it runs (MCP, script and extension tools); give yours another name".into(),
        ),
        (
            declared("script_lint", obj(json!({}))),
            "name",
            "names starting with script_ are kept for the tools tooldispatch registers while it runs (MCP, script and extension tools); give yours another name".into(),
        ),
        (
            declared("arr", json!({"type": "array"})),
            "parameters",
            TOP_LEVEL.into(),
        ),
        (
            declared("objekt", json!({"type": "objekt"})),
            "parameters",
            TOP_LEVEL.into(),
        ),
        (
            declared("boolean_root", json!(true)),
            "parameters",
            TOP_LEVEL.into(),
        ),
        (
            declared("inner_type", obj(json!({"a": {"type": "objekt"}}))),
            "parameters/properties/a/type",
            "\"objekt\" is not valid under any of the schemas listed in the 'anyOf' keyword; a type is one of string, number, integer, boolean, object, array, null".into(),
        ),
        (
            declared("dangling", obj(json!({"a": {"$ref": "#/$defs/missing"}}))),
            "parameters/properties/a/$ref",
            "$ref \"#/$defs/missing\" points at nothing in this schema".into(),
        ),
        (
            declared("unclosed", obj(json!({"a": {"type": "string", "pattern": "(abc"}}))),
            "parameters/properties/a/pattern",
            "\"(abc\" is not a \"regex\"".into(),
        ),
        (
            declared(
                "bad_key_regex",
                json!({"type": "object", "patternProperties": {"[a-": {}}}),
            ),
            "parameters/patternProperties/[a-",
            "\"[a-\" is not a \"regex\"".into(),
        ),
        (
            declared("remote", obj(json!({"a": {"$ref": "https://example.com/a.json"}}))),
            "parameters/properties/a/$ref",
            format!("$ref \"https://example.com/a.json\" {REMOTE}"),
        ),
        (
            declared("local_file", obj(json!({"a": {"$ref": "file:///etc/passwd"}}))),
            "parameters/properties/a/$ref",
            format!("$ref \"file:///etc/passwd\" {REMOTE}"),
        ),
        (
            declared(
                "unknown_dialect",
                json!({"$schema": "https://example.com/my-dialect", "type": "object"}),
            ),
            "parameters/$schema",
            "unknown dialect \"https://example.com/my-dialect\"; name draft-07 (http://json-schema.org/draft-07/schema#), 2019-09 (https://json-schema.org/draft/2019-09/schema) or 2020-12 (https://json-schema.org/draft/2020-12/schema), or leave $schema out for 2020-12".into(),
        ),
        (
            declared("bad_keyword_value", obj(json!({"a": {"minimum": "one"}}))),
            "parameters/properties/a/minimum",
            "\"one\" is not of type \"number\"".into(),
        ),
        (
            ClientTool {
                name: "wordy".into(),
                description: "x".repeat(16 * 1024 + 1),
                parameters: obj(json!({})),
            },
            "description",
            "16385 bytes is over the limit of 16384 bytes; shorten it".into(),
        ),
        (
            declared(
                "huge",
                obj(json!({"a": {"type": "string", "description": "y".repeat(64 * 1024)}})),
            ),
            "parameters",
            "65607 bytes is over the limit of 65536 bytes; shorten it".into(),
        ),
    ];
    assert!(rows.len() >= 15);
    for (bad, field, reason) in rows {
        let name = bad.name.clone();
        let list = vec![declared("good", obj(json!({"q": {"type": "string"}}))), bad];
        assert_eq!(
            check_client_tools(&list, &registry),
            vec![problem(1, &name, field, &reason)],
            "{name}"
        );
        // The compile refuses the same list with the same problems.
        assert_eq!(
            ClientTools::compile(list, &registry).err(),
            Some(vec![problem(1, &name, field, &reason)])
        );
    }
}

#[test]
fn a_checked_list_reports_every_problem_not_just_the_first() {
    let fx = fixture().build();
    let registry = fx.engine.registry();
    let list = vec![
        declared("ok_one", json!({"type": "object"})),
        // Two fields at fault in one declaration: both are reported.
        declared(
            "a.b",
            json!({"type": "object", "properties": {"x": {"pattern": "("}}}),
        ),
        declared("run_tool", json!({"type": "object"})),
        declared("ok_one", json!({"type": "array"})),
    ];
    assert_eq!(
        check_client_tools(&list, &registry),
        vec![
            problem(
                1,
                "a.b",
                "name",
                &format!("\"a.b\" is not a tool name; {NAME_RULE}")
            ),
            problem(
                1,
                "a.b",
                "parameters/properties/x/pattern",
                "\"(\" is not a \"regex\""
            ),
            problem(
                2,
                "run_tool",
                "name",
                "\"run_tool\" is a tool tooldispatch provides; a client tool may not replace it, so give yours another name"
            ),
            problem(
                3,
                "ok_one",
                "name",
                "\"ok_one\" is declared twice (first as #0); tool names must be unique"
            ),
            problem(3, "ok_one", "parameters", TOP_LEVEL),
        ]
    );
    assert_eq!(
        check_client_tools(&list[1..2], &registry)[0].to_string(),
        format!("client tool \"a.b\" (#0), field name: \"a.b\" is not a tool name; {NAME_RULE}")
    );
}

#[test]
fn more_client_tools_than_the_limit_are_refused_as_a_list() {
    let fx = fixture().build();
    let list: Vec<ClientTool> = (0..257)
        .map(|i| declared(&format!("t{i}"), json!({"type": "object"})))
        .collect();
    assert_eq!(
        check_client_tools(&list, &fx.engine.registry()),
        vec![problem(
            256,
            "t256",
            "tools",
            "257 client tools are declared; at most 256 are accepted"
        )]
    );
    assert!(check_client_tools(&list[..256], &fx.engine.registry()).is_empty());
}

#[test]
fn good_declarations_compile_and_keep_their_order() {
    let fx = fixture().build();
    let list = vec![
        pick(),
        declared("open_url", json!({"type": "object"})),
        // Defaults: no description, no parameters (an empty object schema).
        serde_json::from_value(json!({"name": "bare"})).unwrap(),
    ];
    assert!(check_client_tools(&list, &fx.engine.registry()).is_empty());
    let compiled = fx.client_tools(list.clone());
    assert_eq!(compiled.declarations(), &list[..]);
    assert!(compiled.contains("bare") && !compiled.contains("echo"));
}

// ---- Client calls in a round --------------------------------------------------------------

fn with_clients(
    fx: &Fixture,
    provider: Provider,
    calls: Vec<dispatch_engine::RawCall>,
) -> RoundRequest {
    let mut req = RoundRequest::new("s", "r", provider, calls);
    req.client_tools = fx.client_tools(vec![pick()]);
    req
}

fn handed_back(out: &RoundOutcome) -> Vec<Value> {
    events_json(&out.events)
        .into_iter()
        .filter(|e| e["type"] == "ClientToolCall")
        .map(|e| e["client_tool_calls"].clone())
        .collect()
}

/// Bad arguments to a client tool, direct and wrapped in run_tool, with the message a
/// registered tool with the same schema gets for the same arguments (`twin`).
#[tokio::test]
async fn invalid_client_calls_are_answered_invalid_with_the_messages_any_tool_gets() {
    let twin = TestTool::new(
        ToolSpec::new("twin", "the same schema, registered", pick_schema()).read_only(),
        Behaviour::Echo,
    );
    let fx = fixture().tool(twin).build();
    fx.mark_all("s").await;
    let bad_args = [
        r#"{not json"#,
        r#"[1,2]"#,
        r#"{"count": 2}"#,
        r#"{"path": 7, "count": 99, "extra": true}"#,
        r#""a string""#,
    ];
    let mut calls = Vec::new();
    for (i, args) in bad_args.iter().enumerate() {
        calls.push(call(&format!("c{i}"), "pick_file", args));
        calls.push(call(&format!("t{i}"), "twin", args));
    }
    let out = fx
        .request(with_clients(&fx, Provider::ClaudeCode, calls))
        .await;
    let rows = result_rows(&out);
    for pair in rows.chunks(2) {
        let (client, twin) = (&pair[0], &pair[1]);
        assert_eq!(client.1, Status::Invalid, "{client:?}");
        assert_eq!(twin.1, Status::Invalid, "{twin:?}");
        assert_eq!(client.2, twin.2.replace("twin", "pick_file"));
    }
    assert_eq!(
        rows.iter()
            .map(|r| r.2.as_str())
            .step_by(2)
            .collect::<Vec<_>>(),
        vec![
            "tool=pick_file failed: invalid JSON for pick_file: key must be a string at line 1 column 2. Re-send arguments as a JSON object with required fields: path",
            "tool=pick_file failed: invalid JSON for pick_file: expected an object, got an array. Re-send arguments as a JSON object with required fields: path",
            "tool=pick_file failed: missing required field(s) path for pick_file. All required fields: path",
            "tool=pick_file failed: invalid arguments: /count: 99 is greater than the maximum of 10; /path: 7 is not of type \"string\"; /: Additional properties are not allowed ('extra' was unexpected)",
            "tool=pick_file failed: invalid JSON for pick_file: expected an object, got a string. Re-send arguments as a JSON object with required fields: path",
        ]
    );
    assert!(out.results.iter().all(|r| r.is_error));
    // No valid client call: nothing was handed back, and the other calls ran (to their own
    // invalid results here).
    assert_eq!(handed_back(&out), Vec::<Value>::new());
}

#[tokio::test]
async fn an_invalid_client_call_wrapped_in_run_tool_is_answered_invalid_too() {
    let fx = fixture().build();
    let out = fx
        .request(with_clients(
            &fx,
            Provider::OpenAi,
            vec![
                wrapped("a", "pick_file", json!({"path": ["not", "a", "string"]})),
                // The inner arguments sent as a JSON string are read as the object they hold.
                wrapped("b", "pick_file", json!("{\"count\": 0, \"path\": \"x\"}")),
            ],
        ))
        .await;
    assert_eq!(
        results(&out),
        vec![
            (
                Status::Invalid,
                "tool=pick_file failed: invalid arguments: /path: [\"not\",\"a\",\"string\"] is not of type \"string\"".to_string()
            ),
            (
                Status::Invalid,
                "tool=pick_file failed: invalid arguments: /count: 0 is less than the minimum of 1".to_string()
            ),
        ]
    );
    // Wrapped calls are answered under the name they were called by (Gemini matches by it).
    assert_eq!(out.results[0].name, "pick_file");
    assert_eq!(out.results[0].called_as.as_deref(), Some("run_tool"));
    assert_eq!(handed_back(&out), Vec::<Value>::new());
}

/// At least one valid client call: it alone is handed back; an invalid client call is
/// answered `invalid`, everything else `not_run`.
#[tokio::test]
async fn a_reply_with_one_valid_client_call_hands_back_only_the_valid_ones() {
    let (echo, ran) = counted(spec("echo"), Behaviour::Echo);
    let fx = fixture().tool(echo).build();
    fx.mark_all("s").await;
    let out = fx
        .request(with_clients(
            &fx,
            Provider::OpenAi,
            vec![
                wrapped("a", "echo", json!({"x": 1})),
                call("b", "pick_file", r#"{"count": 3}"#),
                call("c", "pick_file", r#"{"path": "src/", "count": 3}"#),
                wrapped("d", "pick_file", json!({"path": "docs/"})),
            ],
        ))
        .await;
    let not_run = "tool=run_tool failed: not run — this reply also called the client tool pick_file, which the caller runs itself, so nothing else in the reply was run. Call run_tool again in your next reply if you still need it.";
    assert_eq!(
        result_rows(&out),
        vec![
            ("a".to_string(), Status::NotRun, not_run.to_string()),
            (
                "b".to_string(),
                Status::Invalid,
                "tool=pick_file failed: missing required field(s) path for pick_file. All required fields: path".to_string()
            ),
            ("c".to_string(), Status::Client, String::new()),
            ("d".to_string(), Status::Client, String::new()),
        ]
    );
    assert_eq!(count(&ran), 0);
    assert_eq!(
        handed_back(&out),
        vec![json!([
            {"id": "c", "name": "pick_file", "arguments": r#"{"path": "src/", "count": 3}"#},
            {"id": "d", "name": "pick_file", "arguments": r#"{"path":"docs/"}"#},
        ])]
    );
    // The model gets the invalid call's result with the others; the caller answers c and d.
    let ids: Vec<Option<&str>> = out.wire_results().iter().map(|r| r.tool_call_id).collect();
    assert_eq!(ids, vec![Some("a"), Some("b")]);
    let types: Vec<String> = event_types(&out.events, None)
        .into_iter()
        .filter(|t| t != "ToolResult")
        .collect();
    assert_eq!(types, vec!["ToolCall", "ClientToolCall", "Done"]);
}

/// No valid client call: the reply is not a hand-off, so its other calls run as usual.
#[tokio::test]
async fn a_reply_whose_client_calls_are_all_invalid_runs_its_other_calls() {
    let (echo, ran) = counted(spec("echo"), Behaviour::Echo);
    let fx = fixture().tool(echo).build();
    fx.mark_all("s").await;
    let out = fx
        .request(with_clients(
            &fx,
            Provider::OpenAi,
            vec![
                wrapped("a", "echo", json!({"x": 1})),
                call("b", "pick_file", r#"{"path": 1}"#),
                wrapped("c", "echo", json!({"x": 2})),
            ],
        ))
        .await;
    assert_eq!(
        result_rows(&out),
        vec![
            (
                "a".to_string(),
                Status::Ok,
                r#"[echo] echo:{"x":1}"#.to_string()
            ),
            (
                "b".to_string(),
                Status::Invalid,
                "tool=pick_file failed: invalid arguments: /path: 1 is not of type \"string\""
                    .to_string()
            ),
            (
                "c".to_string(),
                Status::Ok,
                r#"[echo] echo:{"x":2}"#.to_string()
            ),
        ]
    );
    assert_eq!(count(&ran), 2);
    assert_eq!(handed_back(&out), Vec::<Value>::new());
    assert!(!event_types(&out.events, None).contains(&"Done".to_string()));
}

#[tokio::test]
async fn an_excluded_client_tool_is_not_handed_back() {
    let fx = fixture().build();
    let mut req = with_clients(
        &fx,
        Provider::OpenAi,
        vec![call("a", "pick_file", r#"{"path": "x"}"#)],
    );
    req.exclude = vec!["pick_file".into()];
    let out = fx.request(req).await;
    assert_eq!(
        results(&out),
        vec![(
            Status::Refused,
            "tool=pick_file failed: pick_file is not available in this session".to_string()
        )]
    );
    assert_eq!(handed_back(&out), Vec::<Value>::new());
}

/// A set compiled once (as the daemon's session and a replay keep it) serves every round.
#[tokio::test]
async fn one_compiled_set_serves_every_round() {
    let fx = fixture().build();
    let clients = fx.client_tools(vec![pick()]);
    for run in ["r1", "r2", "r3"] {
        let mut req = RoundRequest::new(
            "s",
            run,
            Provider::OpenAi,
            vec![call("a", "pick_file", r#"{"path": "x"}"#)],
        );
        req.client_tools = clients.clone();
        let out = fx.request(req).await;
        assert_eq!(out.results[0].status, Status::Client);
    }
}
