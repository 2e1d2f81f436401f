//! The caps on what API clients make the daemon hold (issue 18): client tools per session
//! (count and bytes) and the daemon-wide budget of all sessions' declarations, with the
//! release that gives a session's bytes back.

use axum::body::Body;
use axum::http::{Request, StatusCode};
use dispatch_server::{Access, Limits};
use serde_json::{Value, json};

use super::support::*;

/// `n` client tools, each with a description of `desc` bytes.
fn tools(prefix: &str, n: usize, desc: usize) -> Value {
    Value::Array(
        (0..n)
            .map(|i| {
                json!({"name": format!("{prefix}{i}"), "description": "d".repeat(desc),
                       "parameters": {"type": "object", "properties": {}}})
            })
            .collect(),
    )
}

fn delete(path: &str) -> Request<Body> {
    Request::delete(path)
        .header("host", "127.0.0.1:7878")
        .body(Body::empty())
        .unwrap()
}

#[tokio::test]
async fn more_client_tools_than_a_session_may_declare_get_400_naming_the_setting() {
    let d = TestDaemon::with_limits(Limits {
        max_client_tools: 3,
        ..Limits::default()
    });
    let (status, body) = d
        .post(
            "/v1/sessions",
            &json!({"id": "many", "client_tools": tools("t", 4, 10)}),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["error"]["code"], "client_tools_over_limit");
    assert_eq!(
        body["error"]["message"],
        "the session declares 4 client tools; this daemon takes at most 3 per session ([server] max_client_tools in the config file, up to 256); declare fewer (only those the task needs), or raise the limit and restart the daemon"
    );
    // Refused before anything was held: the id is free and the budget untouched.
    assert_eq!(d.daemon.hub.client_tool_bytes(), 0);
    let (status, _) = d
        .post(
            "/v1/sessions",
            &json!({"id": "many", "client_tools": tools("t", 3, 10)}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
}

#[tokio::test]
async fn client_tools_larger_than_a_session_may_declare_get_400_naming_the_setting() {
    let d = TestDaemon::with_limits(Limits {
        client_tool_bytes: 4 * 1024,
        ..Limits::default()
    });
    // Two tools of 3 000 bytes of description each: under every per-tool limit, over the
    // session's 4 KiB.
    let (status, body) = d
        .post(
            "/v1/sessions",
            &json!({"id": "big", "client_tools": tools("t", 2, 3000)}),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["error"]["code"], "client_tools_over_limit");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("the session's client tools take 6 KiB ")
            && message.contains("at most 4 KiB per session")
            && message.contains("[server] client_tools_kib_per_session"),
        "{message}"
    );
    assert_eq!(d.daemon.hub.client_tool_bytes(), 0);
    let (status, _) = d
        .post(
            "/v1/sessions",
            &json!({"id": "big", "client_tools": tools("t", 1, 3000)}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
}

#[tokio::test]
async fn the_daemon_wide_budget_gives_429_until_a_session_is_released() {
    let one = dispatch_server::api::client_tool_bytes(
        &serde_json::from_value::<Vec<dispatch_engine::ClientTool>>(tools("t", 2, 1000)).unwrap(),
    );
    // Room for three such sessions, not four.
    let d = TestDaemon::with_limits(Limits {
        client_tools_budget: one * 3 + one / 2,
        ..Limits::default()
    });
    for n in 0..3 {
        let (status, body) = d
            .post(
                "/v1/sessions",
                &json!({"id": format!("s{n}"), "client_tools": tools("t", 2, 1000)}),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
    }
    assert_eq!(d.daemon.hub.client_tool_bytes(), one * 3);
    let (status, body) = d
        .post(
            "/v1/sessions",
            &json!({"id": "s3", "client_tools": tools("t", 2, 1000)}),
        )
        .await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
    assert_eq!(body["error"]["code"], "client_tools_budget_full");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("for 3 sessions")
            && message.contains("[server] client_tools_budget_mib")
            && message.contains("DELETE /v1/sessions/{id}"),
        "{message}"
    );
    // A session without client tools holds nothing, so the budget never refuses it.
    let (status, _) = d.post("/v1/sessions", &json!({"id": "plain"})).await;
    assert_eq!(status, StatusCode::CREATED);

    // Releasing a session gives its bytes back; then the refused one fits.
    let (status, _, body) = d.call(Access::default(), delete("/v1/sessions/s1")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        body,
        json!({"id": "s1", "released": true, "client_tool_bytes": one})
    );
    assert_eq!(d.daemon.hub.client_tool_bytes(), one * 2);
    let (status, _) = d
        .post(
            "/v1/sessions",
            &json!({"id": "s3", "client_tools": tools("t", 2, 1000)}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    // The released session is gone from the daemon, and its id can be declared afresh.
    let ids: Vec<Value> = d.get("/v1/sessions").await.1["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].clone())
        .collect();
    assert!(!ids.contains(&json!("s1")), "{ids:?}");
    let (status, _, body) = d.call(Access::default(), delete("/v1/sessions/s1")).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert_eq!(body["error"]["code"], "no_such_session");
}

#[tokio::test]
async fn a_session_with_a_round_in_flight_is_not_released() {
    let d = TestDaemon::new();
    let (status, _) = d
        .post(
            "/v1/sessions",
            &json!({"id": "busy", "client_tools": tools("t", 1, 10)}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    // A round holds the session from before it waits for it until it finishes.
    let keep = d.daemon.hub.keep_session("busy");
    let (status, _, body) = d.call(Access::default(), delete("/v1/sessions/busy")).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(body["error"]["code"], "session_busy");
    drop(keep);
    let (status, _, body) = d.call(Access::default(), delete("/v1/sessions/busy")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(d.daemon.hub.client_tool_bytes(), 0);
}
