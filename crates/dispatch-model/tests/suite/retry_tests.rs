//! Retries, refusals, connection errors and cancellation, against the fake server. Waits are
//! checked by the server's request timestamps (a lower bound cannot flake) and by the retry
//! events, never by an upper wall-clock bound.

use std::time::Duration;

use dispatch_model::{
    ApiKey, KeySource, ModelClient, ModelConfig, ModelError, ModelEvent, ProviderKind, RetryPolicy,
    StopReason,
};
use pretty_assertions::assert_eq;
use serde_json::json;

use super::support::{FakeServer, KEY, Reply, client, error_text, turn, turn_cancelling};

fn answer() -> Reply {
    Reply::raw_sse(
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"ok\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n",
    )
}

fn retries(events: &[ModelEvent]) -> Vec<(u32, Duration)> {
    events
        .iter()
        .filter_map(|e| match e {
            ModelEvent::Retrying { attempt, wait, .. } => Some((*attempt, *wait)),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_429_waits_as_long_as_retry_after_ms_says_then_succeeds() {
    let server = FakeServer::start(vec![
        Reply::status(
            429,
            r#"{"error":{"message":"Rate limit reached","type":"requests"}}"#,
        )
        .header("retry-after-ms", "300")
        .header("retry-after", "9"),
        answer(),
    ])
    .await;
    let (turn, events) = turn(&client(ProviderKind::OpenAi, &server), &[], &[]).await;
    assert_eq!(turn.unwrap().text, "ok");
    assert_eq!(retries(&events), vec![(1, Duration::from_millis(300))]);
    let ModelEvent::Retrying {
        reason,
        max_attempts,
        ..
    } = &events[0]
    else {
        panic!("{events:?}")
    };
    assert_eq!(reason, "429: Rate limit reached");
    assert_eq!(*max_attempts, 4);
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    assert!(requests[1].at - requests[0].at >= Duration::from_millis(300));
}

#[tokio::test]
async fn retry_after_in_seconds_is_honoured() {
    let server = FakeServer::start(vec![
        Reply::status(429, r#"{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}"#)
            .header("retry-after", "1"),
        Reply::raw_sse("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":1}}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"),
    ])
    .await;
    let (turn, events) = turn(&client(ProviderKind::Anthropic, &server), &[], &[]).await;
    turn.unwrap();
    assert_eq!(retries(&events), vec![(1, Duration::from_secs(1))]);
    let requests = server.requests();
    assert!(requests[1].at - requests[0].at >= Duration::from_secs(1));
}

#[tokio::test]
async fn server_errors_and_anthropic_overload_are_retried_with_back_off() {
    let server = FakeServer::start(vec![
        Reply::status(500, r#"{"error":{"message":"internal"}}"#),
        Reply::status(
            529,
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
        ),
        answer(),
    ])
    .await;
    let (turn, events) = turn(&client(ProviderKind::OpenAi, &server), &[], &[]).await;
    assert_eq!(turn.unwrap().stop, StopReason::End);
    let attempts: Vec<u32> = retries(&events).into_iter().map(|(a, _)| a).collect();
    assert_eq!(attempts, vec![1, 2]);
    // Back-off without Retry-After: half fixed, half jitter, doubling from the 10 ms base.
    let waits: Vec<Duration> = retries(&events).into_iter().map(|(_, w)| w).collect();
    assert!(
        waits[0] >= Duration::from_millis(5) && waits[0] <= Duration::from_millis(10),
        "{waits:?}"
    );
    assert!(
        waits[1] >= Duration::from_millis(10) && waits[1] <= Duration::from_millis(20),
        "{waits:?}"
    );
    assert_eq!(server.requests().len(), 3);
}

#[tokio::test]
async fn the_attempts_run_out_with_the_last_status_and_message() {
    let failing = || {
        Reply::status(
            503,
            r#"{"error":{"message":"The service is unavailable."}}"#,
        )
    };
    let server =
        FakeServer::start(vec![failing(), failing(), failing(), failing(), answer()]).await;
    let (turn, events) = turn(&client(ProviderKind::OpenAi, &server), &[], &[]).await;
    let err = turn.unwrap_err();
    assert!(
        matches!(err, ModelError::Status { status: 503, .. }),
        "{err:?}"
    );
    assert_eq!(
        error_text(&err),
        "openai answered 503: The service is unavailable.; gave up after 4 attempts; try again later, or raise max_attempts"
    );
    assert_eq!(retries(&events).len(), 3);
    assert_eq!(server.requests().len(), 4);
}

#[tokio::test]
async fn a_retry_after_longer_than_the_cap_fails_at_once() {
    let server = FakeServer::start(vec![
        Reply::status(429, r#"{"error":{"message":"quota"}}"#).header("retry-after", "120"),
        answer(),
    ])
    .await;
    let (turn, events) = turn(&client(ProviderKind::OpenAi, &server), &[], &[]).await;
    let text = error_text(&turn.unwrap_err());
    assert!(
        text.contains("asked to wait 120 s") && text.contains("max_retry_wait_secs (60 s)"),
        "{text}"
    );
    assert!(events.is_empty());
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn a_401_fails_at_once_naming_where_the_key_came_from_and_never_the_key() {
    let server = FakeServer::start(vec![
        Reply::status(401, r#"{"error":{"message":"Incorrect API key provided: sk-test-***ors.","type":"invalid_request_error","code":"invalid_api_key"}}"#),
        answer(),
    ])
    .await;
    let client = client(ProviderKind::OpenAi, &server);
    let shown = format!("{client:?}");
    assert!(
        !shown.contains(KEY) && shown.contains("TEST_KEY"),
        "{shown}"
    );
    let (turn, events) = turn(&client, &[], &[]).await;
    let err = turn.unwrap_err();
    assert_eq!(
        error_text(&err),
        "openai answered 401: Incorrect API key provided: sk-test-***ors.; check the API key, which came from the environment variable TEST_KEY"
    );
    assert!(events.is_empty());
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn gemini_errors_wrapped_in_an_array_still_give_their_message() {
    let server = FakeServer::start(vec![Reply::status(
        400,
        r#"[{"error":{"code":400,"message":"API key not valid. Please pass a valid API key.","status":"INVALID_ARGUMENT"}}]"#,
    )])
    .await;
    let (turn, _) = turn(&client(ProviderKind::Gemini, &server), &[], &[]).await;
    let text = error_text(&turn.unwrap_err());
    assert!(
        text.starts_with("gemini answered 400: API key not valid. Please pass a valid API key.;"),
        "{text}"
    );
}

#[tokio::test]
async fn a_404_points_at_the_model_and_base_url() {
    let server = FakeServer::start(vec![Reply::status(404, "not json at all")]).await;
    let (turn, _) = turn(&client(ProviderKind::Anthropic, &server), &[], &[]).await;
    let text = error_text(&turn.unwrap_err());
    assert_eq!(
        text,
        format!(
            "anthropic answered 404: \"not json at all\"; check model = \"test-model\" and base_url = \"{}\"",
            server.base_url
        )
    );
}

#[tokio::test]
async fn a_refused_connection_is_retried_then_reported() {
    // A port that was just free: nothing listens on it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut config = ModelConfig::new(ProviderKind::OpenAi, "m");
    config.base_url = Some(format!("http://127.0.0.1:{port}/v1"));
    let client = ModelClient::new(config, ApiKey::new(KEY, KeySource::Env("TEST_KEY".into())))
        .unwrap()
        .with_retry_policy(RetryPolicy {
            max_attempts: 2,
            base_wait: Duration::from_millis(1),
            max_wait: Duration::from_secs(1),
        });
    let (turn, events) = turn(&client, &[], &[]).await;
    let err = turn.unwrap_err();
    assert!(matches!(err, ModelError::Connection { .. }), "{err:?}");
    let text = error_text(&err);
    assert!(
        text.contains(&format!(
            "cannot reach http://127.0.0.1:{port}/v1/chat/completions"
        )),
        "{text}"
    );
    assert!(text.ends_with("(gave up after 2 attempts)"), "{text}");
    assert_eq!(retries(&events).len(), 1);
}

#[tokio::test]
async fn cancelling_during_a_retry_wait_stops_at_once() {
    let server = FakeServer::start(vec![
        Reply::status(429, r#"{"error":{"message":"busy"}}"#).header("retry-after", "30"),
        answer(),
    ])
    .await;
    let client = client(ProviderKind::OpenAi, &server);
    let (turn, events) = turn_cancelling(&client, &[], &[], |e| {
        matches!(e, ModelEvent::Retrying { .. })
    })
    .await;
    assert!(matches!(turn, Err(ModelError::Cancelled)), "{turn:?}");
    assert_eq!(retries(&events), vec![(1, Duration::from_secs(30))]);
    // Had the wait run out, the second (successful) request would have been made.
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn cancelling_mid_stream_stops_reading() {
    let server = FakeServer::start(vec![
        Reply::raw_sse(
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Thinking\"}}]}\n\n",
        )
        .hang(),
    ])
    .await;
    let client = client(ProviderKind::OpenAi, &server);
    let (turn, events) = turn_cancelling(
        &client,
        &[json!({"role": "user", "content": "hi"})],
        &[],
        |e| matches!(e, ModelEvent::TextDelta(_)),
    )
    .await;
    assert!(matches!(turn, Err(ModelError::Cancelled)), "{turn:?}");
    assert_eq!(events, vec![ModelEvent::TextDelta("Thinking".into())]);
}

#[tokio::test]
async fn a_server_needing_no_key_gets_no_auth_header() {
    let server = FakeServer::start(vec![answer()]).await;
    let mut config = ModelConfig::new(ProviderKind::OpenAi, "llama3");
    config.base_url = Some(server.base_url.clone());
    config.key = Some("none".into());
    let key = config.resolve_key(&|_| None, &|_| None).unwrap();
    let client = ModelClient::new(config, key).unwrap();
    let (turn, _) = turn(&client, &[], &[]).await;
    turn.unwrap();
    assert!(!server.only_request().headers.contains_key("authorization"));
}

#[tokio::test]
async fn a_server_gone_silent_mid_stream_fails_after_timeout_secs() {
    let server = FakeServer::start(vec![
        Reply::raw_sse("data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hm\"}}]}\n\n")
            .hang(),
    ])
    .await;
    let mut config = ModelConfig::new(ProviderKind::OpenAi, "m");
    config.timeout_secs = Some(1);
    let client = super::support::client_with(config, &server);
    let (turn, events) = turn(&client, &[], &[]).await;
    let err = turn.unwrap_err();
    assert!(matches!(err, ModelError::Connection { .. }), "{err:?}");
    assert_eq!(
        error_text(&err),
        "openai: the stream went silent for 1 s (timeout_secs)"
    );
    assert_eq!(events, vec![ModelEvent::TextDelta("Hm".into())]);
}
