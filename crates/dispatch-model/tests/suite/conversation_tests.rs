//! Two turns of a conversation per provider: the first turn's message and the engine's rendered
//! results, appended with `append_round`, are what the second request carries, unchanged
//! (thinking signatures and reasoning items included).

use dispatch_engine::{Provider, wire::WireResult};
use dispatch_model::{ProviderKind, StopReason, append_round};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use super::support::{FakeServer, Reply, client, turn};

/// The engine's result messages for one ok result per call of `message`.
fn results(provider: Provider, message: &Value) -> Vec<Value> {
    let calls = provider.format().parse_reply(&message.to_string()).unwrap();
    let rendered: Vec<WireResult<'_>> = calls
        .iter()
        .map(|c| WireResult {
            tool_call_id: c.sent_id(),
            name: &c.name,
            content: "fn main() {}",
            is_error: false,
            images: &[],
        })
        .collect();
    provider.format().render_results(&rendered)
}

async fn two_turns(
    provider: ProviderKind,
    first: Reply,
    second: Reply,
    history: Vec<Value>,
) -> (Vec<Value>, Value) {
    let server = FakeServer::start(vec![first, second]).await;
    let client = client(provider, &server);
    let mut history = history;
    let (first, _) = turn(&client, &history, &[]).await;
    let first = first.unwrap();
    assert_eq!(first.stop, StopReason::ToolCalls);
    let results = results(provider.wire(), &first.message);
    assert!(!results.is_empty());
    append_round(provider, &mut history, &first.message, results);
    let (second, _) = turn(&client, &history, &[]).await;
    assert_eq!(second.unwrap().stop, StopReason::End);
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    (history, requests[1].body.clone())
}

#[tokio::test]
async fn anthropic_thinking_and_tool_use_go_back_with_the_results() {
    let sse = |events: &[Value]| {
        Reply::sse(&events.iter().map(|e| (None, e.clone())).collect::<Vec<_>>())
    };
    let first = sse(&[
        json!({"type": "message_start", "message": {"usage": {"input_tokens": 5}}}),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": "", "signature": ""}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "Read it."}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "sig=="}}),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": "toolu_1", "name": "read_files", "input": {}}}),
        json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "{\"paths\":[\"main.rs\"]}"}}),
        json!({"type": "content_block_stop", "index": 1}),
        json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 9}}),
        json!({"type": "message_stop"}),
    ]);
    let second = sse(&[
        json!({"type": "message_start", "message": {"usage": {"input_tokens": 30}}}),
        json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 1}}),
        json!({"type": "message_stop"}),
    ]);
    let user = json!({"role": "user", "content": "read main.rs"});
    let (history, body) =
        two_turns(ProviderKind::Anthropic, first, second, vec![user.clone()]).await;
    assert_eq!(
        history,
        vec![
            user,
            json!({"role": "assistant", "content": [
                {"type": "thinking", "thinking": "Read it.", "signature": "sig=="},
                {"type": "tool_use", "id": "toolu_1", "name": "read_files", "input": {"paths": ["main.rs"]}},
            ]}),
            json!({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "fn main() {}"},
            ]}),
        ]
    );
    assert_eq!(body["messages"], Value::from(history));
}

#[tokio::test]
async fn gemini_thought_signatures_go_back_unchanged() {
    let first = Reply::sse(&[(
        None,
        json!({"candidates": [{"content": {"role": "model", "parts": [
            {"functionCall": {"name": "read_files", "args": {"paths": ["main.rs"]}}, "thoughtSignature": "Q2lJQmpZZg=="}]},
            "finishReason": "STOP"}]}),
    )]);
    let second = Reply::sse(&[(
        None,
        json!({"candidates": [{"content": {"role": "model", "parts": [{"text": "Done."}]}, "finishReason": "STOP"}]}),
    )]);
    let user = json!({"role": "user", "parts": [{"text": "read main.rs"}]});
    let (history, body) = two_turns(ProviderKind::Gemini, first, second, vec![user]).await;
    assert_eq!(
        history[1],
        json!({"role": "model", "parts": [
            {"functionCall": {"name": "read_files", "args": {"paths": ["main.rs"]}}, "thoughtSignature": "Q2lJQmpZZg=="}]})
    );
    assert_eq!(history[2]["role"], "user");
    assert_eq!(
        history[2]["parts"][0]["functionResponse"]["name"],
        "read_files"
    );
    assert_eq!(body["contents"], Value::from(history));
}

#[tokio::test]
async fn responses_output_items_join_the_input_before_their_outputs() {
    let output = json!([
        {"type": "reasoning", "id": "rs_1", "summary": []},
        {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "read_files", "arguments": "{}"},
    ]);
    let completed = |output: Value| {
        Reply::sse(&[(
            None,
            json!({"type": "response.completed", "response": {"status": "completed", "output": output}}),
        )])
    };
    let user = json!({"role": "user", "content": "read"});
    let (history, body) = two_turns(
        ProviderKind::OpenAiResponses,
        completed(output.clone()),
        completed(json!([])),
        vec![user.clone()],
    )
    .await;
    assert_eq!(
        history,
        vec![
            user,
            output[0].clone(),
            output[1].clone(),
            json!({"type": "function_call_output", "call_id": "call_1", "output": "fn main() {}"}),
        ]
    );
    assert_eq!(body["input"], Value::from(history));
}

#[tokio::test]
async fn openai_tool_messages_follow_the_assistant_message() {
    let reply = |data: &str| Reply::raw_sse(&format!("data: {data}\n\ndata: [DONE]\n\n"));
    let first = reply(
        r#"{"choices":[{"index":0,"delta":{"role":"assistant","tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"read_files","arguments":"{}"}}]},"finish_reason":"tool_calls"}]}"#,
    );
    let second =
        reply(r#"{"choices":[{"index":0,"delta":{"content":"Done."},"finish_reason":"stop"}]}"#);
    let user = json!({"role": "user", "content": "read"});
    let (history, body) = two_turns(ProviderKind::OpenAi, first, second, vec![user]).await;
    assert_eq!(
        history[2],
        json!({"role": "tool", "tool_call_id": "call_1", "content": "fn main() {}"})
    );
    let mut expected = vec![json!({"role": "system", "content": "You are terse."})];
    expected.extend(history);
    assert_eq!(body["messages"], Value::from(expected));
}
