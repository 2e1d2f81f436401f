//! Anthropic Messages against the fake server, in the documented event shapes.

use dispatch_engine::{Provider, RawCall};
use dispatch_model::{ModelConfig, ProviderKind, Reasoning, StopReason, Usage};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use super::support::{
    FakeServer, KEY, Reply, client, client_with, error_text, streamed_text, turn,
};

fn event(data: Value) -> (Option<&'static str>, Value) {
    let name: &'static str = Box::leak(data["type"].as_str().unwrap().to_owned().into_boxed_str());
    (Some(name), data)
}

fn start(usage: Value) -> (Option<&'static str>, Value) {
    event(
        json!({"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant",
        "content": [], "model": "claude-test", "stop_reason": null, "usage": usage}}),
    )
}

fn delta(index: u64, delta: Value) -> (Option<&'static str>, Value) {
    event(json!({"type": "content_block_delta", "index": index, "delta": delta}))
}

fn block_start(index: u64, block: Value) -> (Option<&'static str>, Value) {
    event(json!({"type": "content_block_start", "index": index, "content_block": block}))
}

fn block_stop(index: u64) -> (Option<&'static str>, Value) {
    event(json!({"type": "content_block_stop", "index": index}))
}

#[tokio::test]
async fn thinking_text_and_parallel_tool_uses_are_assembled_from_deltas() {
    let server = FakeServer::start(vec![Reply::sse(&[
        start(json!({"input_tokens": 50, "cache_read_input_tokens": 1000, "cache_creation_input_tokens": 0, "output_tokens": 1})),
        event(json!({"type": "ping"})),
        block_start(0, json!({"type": "thinking", "thinking": "", "signature": ""})),
        delta(0, json!({"type": "thinking_delta", "thinking": "Two files"})),
        delta(0, json!({"type": "thinking_delta", "thinking": ", at once."})),
        delta(0, json!({"type": "signature_delta", "signature": "EqQBCgIYAhIM"})),
        block_stop(0),
        block_start(1, json!({"type": "text", "text": ""})),
        delta(1, json!({"type": "text_delta", "text": "Reading "})),
        delta(1, json!({"type": "text_delta", "text": "both — ok."})),
        block_stop(1),
        block_start(2, json!({"type": "tool_use", "id": "toolu_a", "name": "read_files", "input": {}})),
        delta(2, json!({"type": "input_json_delta", "partial_json": ""})),
        delta(2, json!({"type": "input_json_delta", "partial_json": "{\"paths\": [\"a"})),
        delta(2, json!({"type": "input_json_delta", "partial_json": ".rs\"]}"})),
        block_stop(2),
        block_start(3, json!({"type": "tool_use", "id": "toolu_b", "name": "list_dir", "input": {}})),
        block_stop(3),
        event(json!({"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": null},
                     "usage": {"output_tokens": 89}})),
        event(json!({"type": "message_stop"})),
    ])])
    .await;
    let mut config = ModelConfig::new(ProviderKind::Anthropic, "claude-test");
    config.reasoning = Some(Reasoning::Medium);
    let history = vec![json!({"role": "user", "content": "read a.rs and list"})];
    let tools =
        vec![json!({"name": "read_files", "description": "d", "input_schema": {"type": "object"}})];
    let (turn, events) = turn(&client_with(config, &server), &history, &tools).await;
    let turn = turn.unwrap();

    assert_eq!(
        turn.message,
        json!({"role": "assistant", "content": [
            {"type": "thinking", "thinking": "Two files, at once.", "signature": "EqQBCgIYAhIM"},
            {"type": "text", "text": "Reading both — ok."},
            {"type": "tool_use", "id": "toolu_a", "name": "read_files", "input": {"paths": ["a.rs"]}},
            {"type": "tool_use", "id": "toolu_b", "name": "list_dir", "input": {}},
        ]})
    );
    assert_eq!(turn.text, "Reading both — ok.");
    assert_eq!(streamed_text(&events), "Reading both — ok.");
    assert_eq!(
        turn.usage,
        Usage {
            input_tokens: 1050,
            output_tokens: 89
        }
    );
    assert_eq!(turn.stop, StopReason::ToolCalls);
    assert_eq!(
        Provider::Anthropic
            .format()
            .parse_reply(&turn.message.to_string())
            .unwrap(),
        vec![
            RawCall::new("toolu_a", "read_files", "{\"paths\":[\"a.rs\"]}"),
            RawCall::new("toolu_b", "list_dir", "{}"),
        ]
    );

    let request = server.only_request();
    assert_eq!(request.path, "/v1/messages");
    assert_eq!(request.headers["x-api-key"], KEY);
    assert_eq!(request.headers["anthropic-version"], "2023-06-01");
    assert!(!request.headers.contains_key("authorization"));
    assert_eq!(
        request.body,
        json!({
            "model": "claude-test",
            // The default answer budget plus the medium thinking budget.
            "max_tokens": 8192 + 8192,
            "system": "You are terse.",
            "messages": history,
            "tools": tools,
            "stream": true,
            "thinking": {"type": "enabled", "budget_tokens": 8192},
        })
    );
}

#[tokio::test]
async fn a_max_tokens_stop_is_reported() {
    let server = FakeServer::start(vec![Reply::sse(&[
        start(json!({"input_tokens": 3, "output_tokens": 1})),
        block_start(0, json!({"type": "text", "text": ""})),
        delta(0, json!({"type": "text_delta", "text": "Once upon"})),
        block_stop(0),
        event(json!({"type": "message_delta", "delta": {"stop_reason": "max_tokens"}, "usage": {"output_tokens": 4}})),
        event(json!({"type": "message_stop"})),
    ])])
    .await;
    let (turn, _) = turn(&client(ProviderKind::Anthropic, &server), &[], &[]).await;
    let turn = turn.unwrap();
    assert_eq!(turn.stop, StopReason::MaxTokens);
    assert_eq!(
        turn.usage,
        Usage {
            input_tokens: 3,
            output_tokens: 4
        }
    );
}

#[tokio::test]
async fn an_error_event_mid_stream_is_reported_with_its_type() {
    let server = FakeServer::start(vec![Reply::sse(&[
        start(json!({"input_tokens": 3, "output_tokens": 1})),
        event(json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})),
    ])])
    .await;
    let (turn, _) = turn(&client(ProviderKind::Anthropic, &server), &[], &[]).await;
    let text = error_text(&turn.unwrap_err());
    assert_eq!(
        text,
        "anthropic stream: the server reported overloaded_error: Overloaded"
    );
}

#[tokio::test]
async fn tool_input_that_is_not_json_once_assembled_names_the_block() {
    let server = FakeServer::start(vec![Reply::sse(&[
        start(json!({"input_tokens": 3})),
        block_start(
            0,
            json!({"type": "tool_use", "id": "toolu_a", "name": "read_files", "input": {}}),
        ),
        delta(
            0,
            json!({"type": "input_json_delta", "partial_json": "{\"paths\": [\"a"}),
        ),
        block_stop(0),
    ])])
    .await;
    let (turn, _) = turn(&client(ProviderKind::Anthropic, &server), &[], &[]).await;
    let text = error_text(&turn.unwrap_err());
    assert!(
        text.starts_with("anthropic stream: the input of block 0 (read_files) is not valid JSON"),
        "{text}"
    );
}

#[tokio::test]
async fn a_delta_for_a_block_never_started_is_an_error() {
    let server = FakeServer::start(vec![Reply::sse(&[
        start(json!({"input_tokens": 3})),
        delta(4, json!({"type": "text_delta", "text": "x"})),
    ])])
    .await;
    let (turn, _) = turn(&client(ProviderKind::Anthropic, &server), &[], &[]).await;
    let text = error_text(&turn.unwrap_err());
    assert!(text.contains("block 4, which was never started"), "{text}");
}
