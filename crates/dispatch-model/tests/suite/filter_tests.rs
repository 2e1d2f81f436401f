//! The model-backed ResultFilter against a scripted model server on 127.0.0.1: the answer
//! used, the request it sends (instruction, focus, budget, the key from the secret store),
//! and every failure falling back to the built-in filter with a note.

use std::sync::Arc;
use std::time::Duration;

use dispatch_model::{ModelConfig, ModelResultFilter, ProviderKind};
use dispatch_store::Secrets;
use dispatch_tools::web::filter::{DeterministicFilter, Filtered, MODEL_INSTRUCTION, ResultFilter};
use pretty_assertions::assert_eq;
use serde_json::json;

use super::agent_tests::says;
use super::support::{FakeServer, Reply};

const PAGE: &str = "# Harbour\n\nSkip to content\n\n## Fuel\n\nDiesel is sold at the fuel berth on the north quay from 8 to 6.\n\n## Showers\n\nShowers are in the harbour office.\n";

async fn filter_at(base_url: &str, timeout: Duration) -> ModelResultFilter {
    let secrets = Arc::new(dispatch_store::memory::MemoryStore::default());
    secrets
        .secret_set("FILTER_KEY", "sk-filter-123")
        .await
        .unwrap();
    let mut model = ModelConfig::new(ProviderKind::OpenAi, "filter-model");
    model.base_url = Some(base_url.to_string());
    model.key = Some("{{secret:FILTER_KEY}}".to_string());
    ModelResultFilter::new(model, secrets, timeout)
}

fn built_in(focus: Option<&str>, budget: usize) -> Filtered {
    DeterministicFilter.apply(PAGE, focus, budget)
}

#[tokio::test]
async fn the_models_answer_is_used_and_the_request_carries_focus_budget_and_key() {
    let answer = "## Fuel\n\nDiesel is sold at the fuel berth on the north quay from 8 to 6.";
    let server = FakeServer::start(vec![says(answer)]).await;
    let filter = filter_at(&server.base_url, Duration::from_secs(20)).await;
    let out = filter.filter(PAGE, Some("diesel"), 2000).await;
    assert_eq!(
        out,
        Filtered {
            text: answer.to_string(),
            note: None
        }
    );
    let request = server.only_request();
    assert_eq!(request.path, "/v1/chat/completions");
    assert_eq!(
        request.headers.get("authorization").map(String::as_str),
        Some("Bearer sk-filter-123")
    );
    assert_eq!(
        request.body["messages"],
        json!([
            {"role": "system", "content": MODEL_INSTRUCTION},
            {"role": "user", "content": format!("Focus: diesel\nBudget: 2000 bytes\n\n<page>\n{PAGE}\n</page>")}
        ])
    );
    assert!(request.body.get("tools").is_none(), "{}", request.body);
}

#[tokio::test]
async fn a_server_error_falls_back_at_once_with_a_note() {
    let server =
        FakeServer::start(vec![Reply::status(500, r#"{"error":{"message":"boom"}}"#)]).await;
    let filter = filter_at(&server.base_url, Duration::from_secs(20)).await;
    let out = filter.filter(PAGE, Some("fuel"), 300).await;
    assert_eq!(out.text, built_in(Some("fuel"), 300).text);
    let note = out.note.unwrap();
    assert!(
        note.starts_with("model filter unavailable (") && note.contains("500"),
        "{note}"
    );
    assert!(
        note.ends_with("; showing the built-in filter's result"),
        "{note}"
    );
    // One attempt: a page does not wait on back-offs.
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn a_model_that_never_answers_or_answers_nothing_falls_back() {
    let server = FakeServer::start(vec![Reply::raw_sse("").hang()]).await;
    let filter = filter_at(&server.base_url, Duration::from_millis(300)).await;
    let out = filter.filter(PAGE, Some("fuel"), 300).await;
    assert_eq!(
        out,
        Filtered {
            note: Some(
                "model filter unavailable (no answer within 0.3 s); showing the built-in filter's result"
                    .to_string()
            ),
            ..built_in(Some("fuel"), 300)
        }
    );

    let server = FakeServer::start(vec![says("   ")]).await;
    let filter = filter_at(&server.base_url, Duration::from_secs(20)).await;
    let out = filter.filter(PAGE, None, 300).await;
    assert_eq!(
        out.note.as_deref(),
        Some(
            "model filter unavailable (its answer had no text); showing the built-in filter's result"
        )
    );
}

#[tokio::test]
async fn a_missing_key_falls_back_and_says_where_the_key_goes() {
    let server = FakeServer::start(vec![says("never asked")]).await;
    let mut model = ModelConfig::new(ProviderKind::OpenAi, "filter-model");
    model.base_url = Some(server.base_url.clone());
    model.key = Some("{{secret:NOT_STORED}}".to_string());
    let filter = ModelResultFilter::new(
        model,
        Arc::new(dispatch_store::memory::MemoryStore::default()),
        Duration::from_secs(20),
    );
    let out = filter.filter(PAGE, None, 300).await;
    let note = out.note.unwrap();
    assert!(note.contains("NOT_STORED"), "{note}");
    assert_eq!(out.text, built_in(None, 300).text);
    assert!(server.requests().is_empty());
}
