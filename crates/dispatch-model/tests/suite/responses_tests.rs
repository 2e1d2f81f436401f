//! OpenAI Responses against the fake server, in the documented event shapes.

use dispatch_engine::{Provider, RawCall};
use dispatch_model::{ModelConfig, ProviderKind, Reasoning, StopReason, Usage};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use super::support::{
    FakeServer, KEY, Reply, client, client_with, error_text, streamed_text, turn,
};

fn event(data: Value) -> (Option<&'static str>, Value) {
    // Servers name each event after its type; the name must be static for the helper.
    let name: &'static str = Box::leak(data["type"].as_str().unwrap().to_owned().into_boxed_str());
    (Some(name), data)
}

#[tokio::test]
async fn text_and_a_function_call_come_from_the_completed_response() {
    let output = json!([
        {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "opaque"},
        {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
         "content": [{"type": "output_text", "text": "Reading ünïcode.", "annotations": []}]},
        {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "read_files",
         "arguments": "{\"paths\":[\"a.rs\"]}", "status": "completed"},
    ]);
    let server = FakeServer::start(vec![Reply::sse(&[
        event(json!({"type": "response.created", "sequence_number": 0,
                     "response": {"id": "resp_1", "status": "in_progress", "output": []}})),
        event(json!({"type": "response.output_item.added", "sequence_number": 1, "output_index": 1,
                     "item": {"type": "message", "id": "msg_1", "role": "assistant", "content": []}})),
        event(json!({"type": "response.output_text.delta", "sequence_number": 2, "item_id": "msg_1",
                     "output_index": 1, "content_index": 0, "delta": "Reading "})),
        event(json!({"type": "response.output_text.delta", "sequence_number": 3, "item_id": "msg_1",
                     "output_index": 1, "content_index": 0, "delta": "ünïcode."})),
        event(json!({"type": "response.function_call_arguments.delta", "sequence_number": 4,
                     "item_id": "fc_1", "output_index": 2, "delta": "{\"paths\":[\"a.rs\"]}"})),
        event(json!({"type": "response.completed", "sequence_number": 5,
                     "response": {"id": "resp_1", "status": "completed", "output": output,
                                  "usage": {"input_tokens": 120, "output_tokens": 33,
                                            "output_tokens_details": {"reasoning_tokens": 20}}}})),
    ])])
    .await;
    let mut config = ModelConfig::new(ProviderKind::OpenAiResponses, "gpt-5");
    config.max_tokens = Some(2000);
    config.reasoning = Some(Reasoning::Low);
    let history = vec![json!({"role": "user", "content": "read a.rs"})];
    let tools = vec![
        json!({"type": "function", "name": "read_files", "parameters": {"type": "object"}, "strict": false}),
    ];
    let (turn, events) = turn(&client_with(config, &server), &history, &tools).await;
    let turn = turn.unwrap();

    assert_eq!(turn.message, output);
    assert_eq!(turn.text, "Reading ünïcode.");
    assert_eq!(streamed_text(&events), "Reading ünïcode.");
    assert_eq!(
        turn.usage,
        Usage {
            input_tokens: 120,
            output_tokens: 33
        }
    );
    assert_eq!(turn.stop, StopReason::ToolCalls);
    assert_eq!(
        Provider::OpenAiResponses
            .format()
            .parse_reply(&turn.message.to_string())
            .unwrap(),
        vec![RawCall::new(
            "call_1",
            "read_files",
            "{\"paths\":[\"a.rs\"]}"
        )]
    );

    let request = server.only_request();
    assert_eq!(request.path, "/v1/responses");
    assert_eq!(request.headers["authorization"], format!("Bearer {KEY}"));
    assert_eq!(
        request.body,
        json!({
            "model": "gpt-5",
            "instructions": "You are terse.",
            "input": history,
            "tools": tools,
            "stream": true,
            "max_output_tokens": 2000,
            "reasoning": {"effort": "low"},
        })
    );
}

#[tokio::test]
async fn an_incomplete_response_stops_for_max_tokens() {
    let server = FakeServer::start(vec![Reply::sse(&[event(json!({
        "type": "response.incomplete",
        "response": {"status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"},
                     "output": [{"type": "message", "role": "assistant",
                                 "content": [{"type": "output_text", "text": "Cut"}]}],
                     "usage": {"input_tokens": 5, "output_tokens": 16}}}))])])
    .await;
    let (turn, _) = turn(&client(ProviderKind::OpenAiResponses, &server), &[], &[]).await;
    let turn = turn.unwrap();
    assert_eq!(turn.stop, StopReason::MaxTokens);
    assert_eq!(turn.text, "Cut");
}

#[tokio::test]
async fn a_failed_response_reports_the_providers_message() {
    let server = FakeServer::start(vec![Reply::sse(&[
        event(json!({"type": "response.created", "response": {"status": "in_progress", "output": []}})),
        event(json!({"type": "response.failed",
                     "response": {"status": "failed", "output": [],
                                  "error": {"code": "server_error", "message": "The model crashed."}}})),
    ])])
    .await;
    let (turn, _) = turn(&client(ProviderKind::OpenAiResponses, &server), &[], &[]).await;
    let text = error_text(&turn.unwrap_err());
    assert_eq!(
        text,
        "openai-responses stream: the response failed: The model crashed."
    );
}

#[tokio::test]
async fn a_stream_without_response_completed_is_incomplete() {
    let server = FakeServer::start(vec![Reply::sse(&[event(json!({
        "type": "response.output_text.delta", "delta": "half"}))])])
    .await;
    let (turn, _) = turn(&client(ProviderKind::OpenAiResponses, &server), &[], &[]).await;
    let text = error_text(&turn.unwrap_err());
    assert!(text.contains("ended before response.completed"), "{text}");
}
