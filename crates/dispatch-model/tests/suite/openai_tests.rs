//! OpenAI Chat Completions against the fake server, in the documented chunk shapes.

use dispatch_engine::{Provider, RawCall};
use dispatch_model::{ModelConfig, ModelError, ProviderKind, Reasoning, StopReason, Usage};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use super::support::{
    FakeServer, KEY, Reply, client, client_with, error_text, streamed_text, turn,
};

fn chunk(delta: Value, finish: Option<&str>) -> (Option<&'static str>, Value) {
    (
        None,
        json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "test-model",
               "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}),
    )
}

fn usage_chunk(prompt: u64, completion: u64) -> (Option<&'static str>, Value) {
    (
        None,
        json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "choices": [],
               "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}}),
    )
}

fn done() -> (Option<&'static str>, Value) {
    // `data: [DONE]` is not JSON; a raw string value prints without quotes below.
    (None, Value::Null)
}

fn stream(events: Vec<(Option<&'static str>, Value)>) -> Reply {
    let mut body = String::new();
    for (_, data) in events {
        let data = if data.is_null() {
            "[DONE]".to_owned()
        } else {
            data.to_string()
        };
        body.push_str(&format!("data: {data}\n\n"));
    }
    Reply::raw_sse(&body)
}

#[tokio::test]
async fn a_plain_answer_streams_its_text_and_reports_usage() {
    let server = FakeServer::start(vec![stream(vec![
        chunk(json!({"role": "assistant", "content": ""}), None),
        chunk(json!({"content": "Hel"}), None),
        chunk(json!({"content": "lo wörld 🌍"}), None),
        chunk(json!({}), Some("stop")),
        usage_chunk(12, 5),
        done(),
    ])])
    .await;
    let history = vec![json!({"role": "user", "content": "hi"})];
    let tools = vec![
        json!({"type": "function", "function": {"name": "read_files", "parameters": {"type": "object"}}}),
    ];
    let (turn, events) = turn(&client(ProviderKind::OpenAi, &server), &history, &tools).await;
    let turn = turn.unwrap();

    assert_eq!(
        turn.message,
        json!({"role": "assistant", "content": "Hello wörld 🌍"})
    );
    assert_eq!(turn.text, "Hello wörld 🌍");
    assert_eq!(streamed_text(&events), "Hello wörld 🌍");
    assert_eq!(
        turn.usage,
        Usage {
            input_tokens: 12,
            output_tokens: 5
        }
    );
    assert_eq!(turn.stop, StopReason::End);
    assert_eq!(
        Provider::OpenAi
            .format()
            .parse_reply(&turn.message.to_string())
            .unwrap(),
        vec![]
    );

    let request = server.only_request();
    assert_eq!(request.path, "/v1/chat/completions");
    assert_eq!(request.headers["authorization"], format!("Bearer {KEY}"));
    assert_eq!(
        request.body,
        json!({
            "model": "test-model",
            "messages": [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "hi"}],
            "tools": tools,
            "stream": true,
            "stream_options": {"include_usage": true},
        })
    );
}

#[tokio::test]
async fn parallel_tool_calls_are_assembled_by_index_and_read_by_the_engine() {
    // Two calls whose argument pieces interleave, as the API may send them.
    let server = FakeServer::start(vec![stream(vec![
        chunk(json!({"role": "assistant", "content": null, "tool_calls": [
            {"index": 0, "id": "call_a", "type": "function", "function": {"name": "read_files", "arguments": ""}}]}), None),
        chunk(json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"paths\": [\"a"}}]}), None),
        chunk(json!({"tool_calls": [
            {"index": 1, "id": "call_b", "type": "function", "function": {"name": "search_web", "arguments": "{\"query\""}}]}), None),
        chunk(json!({"tool_calls": [{"index": 0, "function": {"arguments": ".rs\"]}"}}]}), None),
        chunk(json!({"tool_calls": [{"index": 1, "function": {"arguments": ": \"rust\"}"}}]}), None),
        chunk(json!({}), Some("tool_calls")),
        usage_chunk(40, 22),
        done(),
    ])])
    .await;
    let (turn, events) = turn(
        &client(ProviderKind::OpenAi, &server),
        &[json!({"role": "user", "content": "go"})],
        &[],
    )
    .await;
    let turn = turn.unwrap();

    assert_eq!(
        turn.message,
        json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": "call_a", "type": "function", "function": {"name": "read_files", "arguments": "{\"paths\": [\"a.rs\"]}"}},
            {"id": "call_b", "type": "function", "function": {"name": "search_web", "arguments": "{\"query\": \"rust\"}"}},
        ]})
    );
    assert_eq!(turn.stop, StopReason::ToolCalls);
    assert_eq!(
        turn.usage,
        Usage {
            input_tokens: 40,
            output_tokens: 22
        }
    );
    assert!(events.is_empty(), "{events:?}");
    assert_eq!(
        Provider::OpenAi
            .format()
            .parse_reply(&turn.message.to_string())
            .unwrap(),
        vec![
            RawCall::new("call_a", "read_files", "{\"paths\": [\"a.rs\"]}"),
            RawCall::new("call_b", "search_web", "{\"query\": \"rust\"}"),
        ]
    );
    // No tools were given, so none are sent (an empty array is refused by some servers).
    assert_eq!(server.only_request().body.get("tools"), None);
}

#[tokio::test]
async fn max_tokens_and_reasoning_effort_reach_a_compatible_server() {
    let server = FakeServer::start(vec![stream(vec![
        chunk(json!({"content": "ok"}), Some("length")),
        done(),
    ])])
    .await;
    let mut config = ModelConfig::new(ProviderKind::OpenAi, "qwen3");
    config.max_tokens = Some(300);
    config.reasoning = Some(Reasoning::High);
    let (turn, _) = turn(
        &client_with(config, &server),
        &[json!({"role": "user", "content": "go"})],
        &[],
    )
    .await;
    assert_eq!(turn.unwrap().stop, StopReason::MaxTokens);
    let body = server.only_request().body;
    // Not api.openai.com: the name every compatible server knows.
    assert_eq!(body["max_tokens"], json!(300));
    assert_eq!(body.get("max_completion_tokens"), None);
    assert_eq!(body["reasoning_effort"], json!("high"));
}

#[tokio::test]
async fn a_malformed_chunk_is_an_error_naming_the_provider() {
    let server = FakeServer::start(vec![Reply::raw_sse(
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}]}\n\ndata: {\"choices\": [\n\n",
    )])
    .await;
    let (turn, events) = turn(&client(ProviderKind::OpenAi, &server), &[], &[]).await;
    let err = turn.unwrap_err();
    assert!(matches!(err, ModelError::Stream { .. }), "{err:?}");
    let text = error_text(&err);
    assert!(
        text.starts_with("openai stream: a chunk is not JSON"),
        "{text}"
    );
    assert_eq!(streamed_text(&events), "Hi");
}

#[tokio::test]
async fn a_stream_cut_before_its_end_is_an_error_not_a_short_answer() {
    let server = FakeServer::start(vec![stream(vec![chunk(
        json!({"content": "The answer is"}),
        None,
    )])])
    .await;
    let (turn, _) = turn(&client(ProviderKind::OpenAi, &server), &[], &[]).await;
    let text = error_text(&turn.unwrap_err());
    assert!(text.contains("ended before a finish_reason"), "{text}");
}

#[tokio::test]
async fn a_json_answer_to_a_stream_request_is_named_for_what_it_is() {
    let server = FakeServer::start(vec![Reply::status(
        200,
        r#"{"choices": [{"message": {"content": "hi"}}]}"#,
    )])
    .await;
    let (turn, _) = turn(&client(ProviderKind::OpenAi, &server), &[], &[]).await;
    let text = error_text(&turn.unwrap_err());
    assert!(
        text.contains("no server-sent events") && text.contains("choices"),
        "{text}"
    );
}
