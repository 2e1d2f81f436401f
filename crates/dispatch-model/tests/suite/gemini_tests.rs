//! Gemini streamGenerateContent against the fake server, in the documented response shapes.

use dispatch_engine::{IdOrigin, Provider, RawCall};
use dispatch_model::{ModelConfig, ProviderKind, Reasoning, StopReason, Usage};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use super::support::{
    FakeServer, KEY, Reply, client, client_with, error_text, streamed_text, turn,
};

fn response(
    parts: Value,
    finish: Option<&str>,
    usage: Option<Value>,
) -> (Option<&'static str>, Value) {
    let mut candidate = json!({"content": {"role": "model", "parts": parts}, "index": 0});
    if let Some(finish) = finish {
        candidate["finishReason"] = json!(finish);
    }
    let mut data = json!({"candidates": [candidate], "modelVersion": "gemini-test"});
    if let Some(usage) = usage {
        data["usageMetadata"] = usage;
    }
    (None, data)
}

#[tokio::test]
async fn parts_are_joined_signatures_kept_and_calls_read_by_the_engine() {
    let server = FakeServer::start(vec![Reply::sse(&[
        response(json!([{"text": "Weighing it", "thought": true}]), None, None),
        response(json!([{"text": " up.", "thought": true}]), None, None),
        response(json!([{"text": "Looking "}]), None, None),
        response(json!([{"text": "at bøth."}]), None, None),
        response(
            json!([
                {"functionCall": {"name": "read_files", "args": {"paths": ["a.rs"]}}, "thoughtSignature": "c2lnMQ=="},
                {"functionCall": {"id": "fc_2", "name": "list_dir", "args": {}}},
            ]),
            None,
            None,
        ),
        response(
            json!([{"text": "", "thoughtSignature": "c2lnMg=="}]),
            Some("STOP"),
            Some(json!({"promptTokenCount": 70, "candidatesTokenCount": 25, "thoughtsTokenCount": 40, "totalTokenCount": 135})),
        ),
    ])])
    .await;
    let mut config = ModelConfig::new(ProviderKind::Gemini, "models/gemini-test");
    config.max_tokens = Some(4096);
    config.reasoning = Some(Reasoning::Low);
    let history = vec![json!({"role": "user", "parts": [{"text": "look"}]})];
    let tools = vec![
        json!({"functionDeclarations": [{"name": "read_files", "parameters": {"type": "object"}}]}),
    ];
    let (turn, events) = turn(&client_with(config, &server), &history, &tools).await;
    let turn = turn.unwrap();

    assert_eq!(
        turn.message,
        json!({"role": "model", "parts": [
            {"text": "Weighing it up.", "thought": true},
            {"text": "Looking at bøth."},
            {"functionCall": {"name": "read_files", "args": {"paths": ["a.rs"]}}, "thoughtSignature": "c2lnMQ=="},
            {"functionCall": {"id": "fc_2", "name": "list_dir", "args": {}}},
            {"text": "", "thoughtSignature": "c2lnMg=="},
        ]})
    );
    assert_eq!(turn.text, "Looking at bøth.");
    assert_eq!(streamed_text(&events), "Looking at bøth.");
    assert_eq!(
        turn.usage,
        Usage {
            input_tokens: 70,
            output_tokens: 65
        }
    );
    assert_eq!(turn.stop, StopReason::ToolCalls);
    let calls = Provider::Gemini
        .format()
        .parse_reply(&turn.message.to_string())
        .unwrap();
    assert_eq!(
        calls,
        vec![
            RawCall {
                id: "call_1".into(),
                id_origin: IdOrigin::MadeUp,
                name: "read_files".into(),
                arguments: "{\"paths\":[\"a.rs\"]}".into()
            },
            RawCall::new("fc_2", "list_dir", "{}"),
        ]
    );

    let request = server.only_request();
    // The key goes in a header, never in the URL (URLs end up in logs and errors).
    assert_eq!(
        request.path,
        "/v1/models/gemini-test:streamGenerateContent?alt=sse"
    );
    assert_eq!(request.headers["x-goog-api-key"], KEY);
    assert!(!request.headers.contains_key("authorization"));
    assert_eq!(
        request.body,
        json!({
            "contents": history,
            "systemInstruction": {"parts": [{"text": "You are terse."}]},
            "tools": tools,
            "generationConfig": {"maxOutputTokens": 4096, "thinkingConfig": {"thinkingBudget": 1024}},
        })
    );
}

#[tokio::test]
async fn a_plain_answer_ends_on_stop() {
    let server = FakeServer::start(vec![Reply::sse(&[
        response(json!([{"text": "Hi"}]), None, None),
        response(
            json!([{"text": " there"}]),
            Some("STOP"),
            Some(json!({"promptTokenCount": 4, "candidatesTokenCount": 2})),
        ),
    ])])
    .await;
    let (turn, _) = turn(&client(ProviderKind::Gemini, &server), &[], &[]).await;
    let turn = turn.unwrap();
    assert_eq!(
        turn.message,
        json!({"role": "model", "parts": [{"text": "Hi there"}]})
    );
    assert_eq!(turn.stop, StopReason::End);
    assert_eq!(
        turn.usage,
        Usage {
            input_tokens: 4,
            output_tokens: 2
        }
    );
    assert_eq!(server.only_request().body.get("generationConfig"), None);
}

#[tokio::test]
async fn a_blocked_prompt_says_why() {
    let server = FakeServer::start(vec![Reply::sse(&[(
        None,
        json!({"promptFeedback": {"blockReason": "SAFETY"}, "usageMetadata": {"promptTokenCount": 9}}),
    )])])
    .await;
    let (turn, _) = turn(&client(ProviderKind::Gemini, &server), &[], &[]).await;
    let text = error_text(&turn.unwrap_err());
    assert_eq!(
        text,
        "gemini stream: the prompt was blocked (blockReason SAFETY)"
    );
}

#[tokio::test]
async fn a_part_that_is_not_an_object_is_an_error() {
    let server = FakeServer::start(vec![Reply::sse(&[response(
        json!(["text"]),
        Some("STOP"),
        None,
    )])])
    .await;
    let (turn, _) = turn(&client(ProviderKind::Gemini, &server), &[], &[]).await;
    let text = error_text(&turn.unwrap_err());
    assert!(
        text.starts_with("gemini stream: a part is not an object"),
        "{text}"
    );
}
