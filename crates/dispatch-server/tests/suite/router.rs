//! Every endpoint and every error, through the router in-process.

use axum::body::Body;
use axum::http::{Request, StatusCode};
use dispatch_server::Access;
use serde_json::{Value, json};

use super::support::{TestDaemon, get, post, reply, select};

fn code(body: &Value) -> &str {
    body["error"]["code"]
        .as_str()
        .unwrap_or_else(|| panic!("not an error body: {body}"))
}

#[tokio::test]
async fn health_and_version_answer() {
    let d = TestDaemon::new();
    assert_eq!(
        d.get("/v1/health").await,
        (StatusCode::OK, json!({"status": "ok"}))
    );
    let (status, body) = d.get("/v1/version").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["name"], "tooldispatch");
    assert_eq!(body["providers"].as_array().unwrap().len(), 5);
}

#[tokio::test]
async fn sessions_are_created_listed_and_refused_when_they_clash() {
    let d = TestDaemon::new();
    let (status, body) = d.post("/v1/sessions", &json!({"id": "alpha"})).await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(body["id"], "alpha");
    let (status, body) = d.post("/v1/sessions", &json!({})).await;
    assert_eq!(status, StatusCode::CREATED);
    let generated = body["id"].as_str().unwrap().to_string();
    assert!(
        generated.starts_with("s-") && generated.len() == 18,
        "{generated}"
    );
    let (status, body) = d.post("/v1/sessions", &json!({"id": "alpha"})).await;
    assert_eq!((status, code(&body)), (StatusCode::CONFLICT, "conflict"));
    let (status, body) = d.post("/v1/sessions", &json!({"id": "../etc"})).await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::BAD_REQUEST, "bad_session_id")
    );
    let (status, body) = d.post("/v1/sessions", &json!({"idd": "x"})).await;
    assert_eq!((status, code(&body)), (StatusCode::BAD_REQUEST, "bad_json"));
    let (_, body) = d.get("/v1/sessions").await;
    let ids: Vec<&str> = body["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), 2);
    assert!(ids.contains(&"alpha") && ids.contains(&generated.as_str()));
}

#[tokio::test]
async fn tools_come_in_each_providers_format_and_honour_the_sessions_exclusions() {
    let d = TestDaemon::new();
    let (status, body) = d.get("/v1/sessions/t1/tools?provider=anthropic").await;
    assert_eq!(status, StatusCode::OK);
    let tools = body["tools"].as_array().unwrap();
    assert!(
        tools
            .iter()
            .any(|t| t["name"] == "find_tools" && t.get("input_schema").is_some())
    );
    assert!(body["turn_context"].as_str().unwrap().contains("calculate"));
    let (_, body) = d.get("/v1/sessions/t1/tools").await;
    assert!(
        body["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["function"]["name"] == "find_tools")
    );

    d.post("/v1/sessions", &json!({"id": "t2", "exclude": ["calculate"],
        "client_tools": [{"name": "open_browser", "description": "Open a URL in the user's browser", "parameters": {"type": "object"}}]}))
        .await;
    let (_, body) = d.get("/v1/sessions/t2/tools").await;
    assert!(!body["turn_context"].as_str().unwrap().contains("calculate"));
    assert!(
        body["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["function"]["name"] == "open_browser")
    );

    let (status, body) = d.get("/v1/sessions/t1/tools?provider=cohere").await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::BAD_REQUEST, "unknown_provider")
    );
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("openai-responses")
    );
}

#[tokio::test]
async fn a_round_returns_results_in_call_order_in_the_providers_format_or_as_a_report() {
    let d = TestDaemon::new();
    let (status, _) = d
        .post("/v1/sessions/r1/rounds", &select("c0", "calculate"))
        .await;
    assert_eq!(status, StatusCode::OK);
    let calls = reply(&[
        ("c1", "calculate", json!({"expressions": ["6*7"]})),
        ("c2", "calculate", json!({"expressions": ["2^10"]})),
    ]);
    let (status, headers, body) = d
        .call(
            Access::default(),
            post(
                "/v1/sessions/r1/rounds?provider=openai&run=default",
                &calls.to_string(),
            ),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(headers["x-tooldispatch-round"], "2");
    assert!(headers.get("x-tooldispatch-pending").is_none());
    let results = body.as_array().unwrap();
    assert_eq!(results.len(), 2);
    assert_eq!(
        (
            results[0]["role"].as_str(),
            results[0]["tool_call_id"].as_str()
        ),
        (Some("tool"), Some("c1"))
    );
    assert!(results[0]["content"].as_str().unwrap().contains("42"));
    assert_eq!(results[1]["tool_call_id"], "c2");
    assert!(results[1]["content"].as_str().unwrap().contains("1024"));

    let calls = reply(&[("c3", "calculate", json!({"expressions": ["1+1"]}))]);
    let (status, report) = d.post("/v1/sessions/r1/rounds?report=1", &calls).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(report["session"], "r1");
    assert_eq!(report["round"], 3);
    assert_eq!(report["results"][0]["status"], "ok");
    assert!(
        report["events"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["type"] == "ToolResult")
    );

    // Anthropic in, Anthropic out.
    let anthropic = json!({"role": "assistant", "content": [
        {"type": "tool_use", "id": "toolu_1", "name": "find_tools", "input": {"query": "select:calculate"}}]});
    let (status, body) = d
        .post("/v1/sessions/r2/rounds?provider=anthropic", &anthropic)
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body[0]["role"], "user");
    assert_eq!(body[0]["content"][0]["type"], "tool_result");
    assert_eq!(body[0]["content"][0]["tool_use_id"], "toolu_1");
}

/// Issue 20: another provider's reply is a 400 naming the provider to send it with, never a
/// 200 with no calls; nothing is committed.
#[tokio::test]
async fn another_providers_reply_is_a_400_naming_the_provider_to_use() {
    let d = TestDaemon::new();
    let gemini = json!({"candidates": [{"content": {"role": "model", "parts": [
        {"functionCall": {"name": "find_tools", "args": {"query": "select:calculate"}}}]}}]});
    let responses = json!([{"type": "function_call", "call_id": "c", "name": "find_tools",
        "arguments": "{}"}]);
    for (provider, reply, says) in [
        ("openai", &gemini, "send it with provider gemini"),
        (
            "openai",
            &responses,
            "send it with provider openai-responses",
        ),
        (
            "anthropic",
            &responses,
            "send it with provider openai-responses",
        ),
        ("claude-code", &gemini, "send it with provider gemini"),
    ] {
        let (status, body) = d
            .post(
                &format!("/v1/sessions/mix/rounds?provider={provider}"),
                reply,
            )
            .await;
        assert_eq!(
            (status, code(&body)),
            (StatusCode::BAD_REQUEST, "bad_reply"),
            "{provider}"
        );
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains(says), "{provider}: {message}");
    }
    let (status, body) = d
        .post("/v1/sessions/mix/rounds?provider=gemini&report=1", &gemini)
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["round"], 1, "a refused reply committed a round");
}

#[tokio::test]
async fn bad_rounds_get_a_stable_code_and_a_message_to_act_on() {
    let d = TestDaemon::new();
    let (status, body) = d
        .post(
            "/v1/sessions/b1/rounds",
            &json!({"role": "assistant", "tool_calls": "nope"}),
        )
        .await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::BAD_REQUEST, "bad_reply")
    );
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("openai")
    );

    let (status, _, body) = d
        .call(
            Access::default(),
            post("/v1/sessions/b1/rounds", "{not json"),
        )
        .await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::BAD_REQUEST, "bad_reply")
    );

    let request = Request::post("/v1/sessions/b1/rounds")
        .header("host", "127.0.0.1:7878")
        .header("content-type", "text/plain")
        .body(Body::from("{}"))
        .unwrap();
    let (status, _, body) = d.call(Access::default(), request).await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type")
    );

    let huge = format!(
        "{{\"role\":\"assistant\",\"content\":\"{}\"}}",
        "x".repeat(9 * 1024 * 1024)
    );
    let (status, _, body) = d
        .call(Access::default(), post("/v1/sessions/b1/rounds", &huge))
        .await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large")
    );

    let (status, body) = d
        .post("/v1/sessions/b1/rounds?provider=mistral", &reply(&[]))
        .await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::BAD_REQUEST, "unknown_provider")
    );
    let (status, body) = d.post("/v1/sessions/b%20ad/rounds", &reply(&[])).await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::BAD_REQUEST, "bad_session_id")
    );
    let (status, body) = d.post("/v1/sessions/b1/rounds?run=", &reply(&[])).await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::BAD_REQUEST, "bad_request")
    );
    let (status, body) = d.get("/v2/anything").await;
    assert_eq!((status, code(&body)), (StatusCode::NOT_FOUND, "not_found"));
}

#[tokio::test]
async fn answers_and_confirmations_refuse_what_does_not_wait() {
    let d = TestDaemon::new();
    let (status, body) = d.get("/v1/sessions/a1/pending").await;
    assert_eq!((status, body), (StatusCode::OK, json!({"tasks": []})));
    let (status, body) = d
        .post(
            "/v1/sessions/a1/answers",
            &json!({"task": "deadbeef", "answers": ["yes"]}),
        )
        .await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::NOT_FOUND, "no_such_task")
    );
    let (status, body) = d
        .post("/v1/sessions/a1/answers", &json!({"answers": ["yes"]}))
        .await;
    assert_eq!((status, code(&body)), (StatusCode::BAD_REQUEST, "bad_json"));

    let (status, body) = d.get("/v1/confirmations").await;
    assert_eq!(
        (status, body),
        (StatusCode::OK, json!({"confirmations": []}))
    );
    let (status, body) = d
        .post("/v1/confirmations/cf-9", &json!({"approve": true}))
        .await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::NOT_FOUND, "no_such_confirmation")
    );
    let (status, body) = d
        .post("/v1/confirmations/cf-9", &json!({"approve": "yes"}))
        .await;
    assert_eq!((status, code(&body)), (StatusCode::BAD_REQUEST, "bad_json"));
}

#[tokio::test]
async fn an_ask_user_round_parks_and_an_answer_resumes_it() {
    let d = TestDaemon::new();
    let ask = reply(&[(
        "q1",
        "ask_user",
        json!({"questions": [{"question": "Which port?", "options": ["80", "8080"]}], "state": {"objective": "serve the site", "completed": [], "next_steps": ["bind"]}}),
    )]);
    let (status, headers, body) = d
        .call(
            Access::default(),
            post("/v1/sessions/p1/rounds", &ask.to_string()),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let task = headers["x-tooldispatch-pending"]
        .to_str()
        .unwrap()
        .to_string();
    // The parked call has no result yet: its result is the answer's.
    assert_eq!(body, json!([]));
    let (_, pending) = d.get("/v1/sessions/p1/pending").await;
    assert_eq!(pending["tasks"][0]["task"], task.as_str());
    assert_eq!(
        pending["tasks"][0]["questions"][0]["question"],
        "Which port?"
    );

    let (status, body) = d
        .post(
            "/v1/sessions/p1/answers",
            &json!({"task": task, "answers": ["8080", "extra"]}),
        )
        .await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::BAD_REQUEST, "bad_answer")
    );
    let (status, body) = d
        .post(
            "/v1/sessions/p1/answers",
            &json!({"task": task, "answers": ["8080"]}),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body[0]["tool_call_id"], "q1");
    assert!(
        body[0]["content"].as_str().unwrap().contains("8080"),
        "{body}"
    );
    let (_, pending) = d.get("/v1/sessions/p1/pending").await;
    assert_eq!(pending, json!({"tasks": []}));
}

/// `DELETE /v1/sessions/{id}/pending/{task}`: the user cancels instead of answering. The task
/// is gone and the response is the asking call's result, which tells the model so.
#[tokio::test]
async fn a_pending_task_is_cancelled_with_delete_and_the_result_tells_the_model() {
    let d = TestDaemon::new();
    let ask = reply(&[(
        "q1",
        "ask_user",
        json!({"questions": [{"question": "Wipe the cache?"}], "state": {"objective": "free disk", "completed": [], "next_steps": ["wipe"]}}),
    )]);
    let (_, headers, _) = d
        .call(
            Access::default(),
            post("/v1/sessions/c1/rounds", &ask.to_string()),
        )
        .await;
    let task = headers["x-tooldispatch-pending"]
        .to_str()
        .unwrap()
        .to_string();
    let delete = |path: String| {
        Request::delete(path)
            .header("host", "127.0.0.1:7878")
            .body(Body::empty())
            .unwrap()
    };
    let (status, _, body) = d
        .call(
            Access::default(),
            delete(format!("/v1/sessions/c1/pending/{task}?report=1")),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        (
            body["results"][0]["tool_call_id"].clone(),
            body["results"][0]["status"].clone(),
            body["results"][0]["content"].clone(),
        ),
        (
            json!("q1"),
            json!("declined"),
            json!(
                "The user cancelled this ask_user instead of answering it, so there is no answer. Do not ask it again; go on without it, or end the turn and say what you could not do without it."
            ),
        )
    );
    let (_, pending) = d.get("/v1/sessions/c1/pending").await;
    assert_eq!(pending, json!({"tasks": []}));
    // Gone: a second cancel (or an answer) is told what waits.
    let (status, _, body) = d
        .call(
            Access::default(),
            delete(format!("/v1/sessions/c1/pending/{task}")),
        )
        .await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::NOT_FOUND, "no_such_task")
    );
}

#[tokio::test]
async fn without_a_watcher_a_call_that_needs_approval_is_declined_at_once() {
    let d = TestDaemon::new();
    d.post("/v1/sessions/h1/rounds", &select("c0", "edit_file"))
        .await;
    let write = reply(&[(
        "w1",
        "edit_file",
        json!({"path": "notes.txt", "content": "hi\n"}),
    )]);
    let (status, report) = d.post("/v1/sessions/h1/rounds?report=1", &write).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(report["results"][0]["status"], "declined");
    assert!(
        report["results"][0]["content"]
            .as_str()
            .unwrap()
            .contains("no one is available")
    );
    assert!(!d.work().join("notes.txt").exists());
}

#[tokio::test]
async fn web_pages_of_other_origins_and_foreign_host_names_are_refused() {
    let d = TestDaemon::new();
    let mut request = get("/v1/sessions");
    request
        .headers_mut()
        .insert("origin", "http://evil.example".parse().unwrap());
    let (status, _, body) = d.call(Access::default(), request).await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::FORBIDDEN, "forbidden_origin")
    );
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("cors_origins")
    );

    // The console's own origin is fine.
    let mut request = get("/v1/sessions");
    request
        .headers_mut()
        .insert("origin", "http://127.0.0.1:7878".parse().unwrap());
    let (status, _, _) = d.call(Access::default(), request).await;
    assert_eq!(status, StatusCode::OK);

    // DNS rebinding: a name that resolves to 127.0.0.1 is still not a loopback Host.
    let request = Request::get("/v1/sessions")
        .header("host", "attacker.example:7878")
        .body(Body::empty())
        .unwrap();
    let (status, _, body) = d.call(Access::default(), request).await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::FORBIDDEN, "forbidden_host")
    );

    // A configured origin gets CORS headers and its preflight answered.
    let access = Access {
        token: None,
        cors_origins: vec!["http://localhost:5173".into()],
        ..Access::default()
    };
    let request = Request::options("/v1/sessions")
        .header("host", "127.0.0.1:7878")
        .header("origin", "http://localhost:5173")
        .body(Body::empty())
        .unwrap();
    let (status, headers, _) = d.call(access.clone(), request).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    assert_eq!(
        headers["access-control-allow-origin"],
        "http://localhost:5173"
    );
    let mut request = get("/v1/sessions");
    request
        .headers_mut()
        .insert("origin", "http://localhost:5173".parse().unwrap());
    let (status, headers, _) = d.call(access, request).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        headers["access-control-allow-origin"],
        "http://localhost:5173"
    );
}

#[tokio::test]
async fn with_a_token_every_api_call_needs_it_but_the_console_page_does_not() {
    let d = TestDaemon::new();
    let access = Access {
        token: Some("t".repeat(64)),
        cors_origins: Vec::new(),
        ..Access::default()
    };
    let request = Request::get("/v1/sessions")
        .header("host", "10.0.0.5:7878")
        .body(Body::empty())
        .unwrap();
    let (status, _, body) = d.call(access.clone(), request).await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::UNAUTHORIZED, "unauthorized")
    );
    let request = Request::get("/v1/sessions")
        .header("host", "10.0.0.5:7878")
        .header("authorization", format!("Bearer {}", "t".repeat(63) + "u"))
        .body(Body::empty())
        .unwrap();
    let (status, _, _) = d.call(access.clone(), request).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let request = Request::get("/v1/sessions")
        .header("host", "10.0.0.5:7878")
        .header("authorization", format!("Bearer {}", "t".repeat(64)))
        .body(Body::empty())
        .unwrap();
    let (status, _, _) = d.call(access.clone(), request).await;
    assert_eq!(status, StatusCode::OK);
    // A query token is taken by the event streams only (EventSource cannot send headers).
    let request = Request::get(format!("/v1/sessions?access_token={}", "t".repeat(64)))
        .header("host", "10.0.0.5:7878")
        .body(Body::empty())
        .unwrap();
    let (status, _, _) = d.call(access.clone(), request).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let request = Request::get("/")
        .header("host", "10.0.0.5:7878")
        .body(Body::empty())
        .unwrap();
    let (status, headers, _) = d.call(access, request).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/html")
    );
}

#[tokio::test]
async fn the_console_is_served_from_the_binary() {
    let d = TestDaemon::new();
    for (path, kind) in [
        ("/", "text/html"),
        ("/console.js", "text/javascript"),
        ("/console.css", "text/css"),
    ] {
        let (status, headers, body) = d.call(Access::default(), get(path)).await;
        assert_eq!(status, StatusCode::OK, "{path}");
        assert!(
            headers["content-type"].to_str().unwrap().starts_with(kind),
            "{path}"
        );
        assert!(body.as_str().is_some_and(|b| !b.is_empty()), "{path}");
    }
}

#[tokio::test]
async fn pages_of_other_sites_cannot_open_a_stream_even_without_an_origin_header() {
    let d = TestDaemon::new();
    for (site, expected) in [
        ("cross-site", StatusCode::FORBIDDEN),
        ("same-site", StatusCode::FORBIDDEN),
        ("same-origin", StatusCode::OK),
        ("none", StatusCode::OK),
    ] {
        let mut request = get("/v1/sessions");
        request
            .headers_mut()
            .insert("sec-fetch-site", site.parse().unwrap());
        let (status, _, body) = d.call(Access::default(), request).await;
        assert_eq!(status, expected, "{site}: {body}");
    }
}

#[tokio::test]
async fn looking_at_a_session_does_not_register_it_and_a_watched_one_can_still_be_declared() {
    let d = TestDaemon::new();
    let (status, _) = d.get("/v1/sessions/ghost/tools").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(d.get("/v1/sessions").await.1, json!({"sessions": []}));

    // A watcher (or a look) before the create: the create still sets the session up.
    let _watching = d.daemon.hub.watch("agent");
    let (status, _) = d
        .post(
            "/v1/sessions",
            &json!({"id": "agent", "exclude": ["calculate"]}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let (_, body) = d.get("/v1/sessions/agent/tools").await;
    assert!(!body["turn_context"].as_str().unwrap().contains("calculate"));
    // Once declared, it is taken.
    let (status, body) = d.post("/v1/sessions", &json!({"id": "agent"})).await;
    assert_eq!((status, code(&body)), (StatusCode::CONFLICT, "conflict"));
}

#[tokio::test]
async fn the_console_may_not_be_framed_by_another_site() {
    let d = TestDaemon::new();
    let (_, headers, _) = d.call(Access::default(), get("/")).await;
    assert_eq!(headers["x-frame-options"], "DENY");
    assert_eq!(headers["content-security-policy"], "frame-ancestors 'none'");
}

/// Issue 16 part 4: a session's client tools are checked when it is created; each bad
/// declaration is refused with 400 in the usual error shape, naming the tool and the field.
#[tokio::test]
async fn bad_client_tools_are_refused_with_400_naming_the_tool_and_the_field() {
    let d = TestDaemon::new();
    let rows = [
        (
            json!({"name": "open.browser", "parameters": {"type": "object"}}),
            "client tool \"open.browser\" (#0), field name: \"open.browser\" is not a tool name; use 1-64 characters from a-z, A-Z, 0-9, _ and - (what every provider accepts)",
        ),
        (
            json!({"name": "find_tools", "parameters": {"type": "object"}}),
            "client tool \"find_tools\" (#0), field name: \"find_tools\" is a tool tooldispatch provides; a client tool may not replace it, so give yours another name",
        ),
        (
            json!({"name": "calculate"}),
            "client tool \"calculate\" (#0), field name: \"calculate\" is a tool tooldispatch provides; a client tool may not replace it, so give yours another name",
        ),
        (
            json!({"name": "pick", "parameters": {"type": "objekt"}}),
            "client tool \"pick\" (#0), field parameters: the top level must be {\"type\": \"object\", ...}: tools take an arguments object",
        ),
        (
            json!({"name": "pick", "parameters": {"type": "object", "properties": {"q": {"$ref": "#/$defs/nothing"}}}}),
            "client tool \"pick\" (#0), field parameters/properties/q/$ref: $ref \"#/$defs/nothing\" points at nothing in this schema",
        ),
        (
            json!({"name": "pick", "parameters": {"type": "object", "properties": {"q": {"type": "string", "pattern": "(abc"}}}}),
            "client tool \"pick\" (#0), field parameters/properties/q/pattern: \"(abc\" is not a \"regex\"",
        ),
        (
            json!({"name": "pick", "parameters": {"type": "object", "properties": {"q": {"$ref": "https://example.com/q.json"}}}}),
            "client tool \"pick\" (#0), field parameters/properties/q/$ref: $ref \"https://example.com/q.json\" points outside the schema; remote references are never fetched, so copy what it names under \"$defs\" (draft-07: \"definitions\") and refer to it as \"#/$defs/NAME\"",
        ),
    ];
    for (bad, message) in rows {
        let (status, body) = d
            .post("/v1/sessions", &json!({"id": "c1", "client_tools": [bad]}))
            .await;
        assert_eq!(
            (status, body),
            (
                StatusCode::BAD_REQUEST,
                json!({"error": {"code": "bad_client_tools",
                                 "message": format!("the session's client_tools are refused: {message}")}})
            )
        );
    }
    // Every problem of a list, in one answer.
    let (status, body) = d
        .post(
            "/v1/sessions",
            &json!({"id": "c1", "client_tools": [
                {"name": "ok"}, {"name": "ok"}, {"name": "a b", "parameters": {"type": "array"}}]}),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(
        body["error"]["message"],
        "the session's client_tools are refused: client tool \"ok\" (#1), field name: \"ok\" is declared twice (first as #0); tool names must be unique; client tool \"a b\" (#2), field name: \"a b\" is not a tool name; use 1-64 characters from a-z, A-Z, 0-9, _ and - (what every provider accepts); client tool \"a b\" (#2), field parameters: the top level must be {\"type\": \"object\", ...}: tools take an arguments object"
    );
    // A refused session was not created: the id is still free.
    let (status, _) = d
        .post(
            "/v1/sessions",
            &json!({"id": "c1", "client_tools": [{"name": "pick"}]}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
}

/// A session's client calls are checked before they are handed back.
#[tokio::test]
async fn a_sessions_client_calls_are_checked_and_only_valid_ones_handed_back() {
    let d = TestDaemon::new();
    let (status, _) = d
        .post(
            "/v1/sessions",
            &json!({"id": "c2", "client_tools": [{"name": "open_url", "description": "Open a URL",
                "parameters": {"type": "object", "properties": {"url": {"type": "string", "format": "uri"}},
                               "required": ["url"]}}]}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let call = |id: &str, args: &str| json!({"id": id, "type": "function", "function": {"name": "open_url", "arguments": args}});
    let message =
        |calls: Vec<Value>| json!({"role": "assistant", "content": null, "tool_calls": calls});
    let (status, body) = d
        .post(
            "/v1/sessions/c2/rounds?report=1",
            &message(vec![call("a", r#"{"url": "not a uri"}"#), call("b", "[1]")]),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let rows: Vec<(Value, Value)> = body["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["status"].clone(), r["content"].clone()))
        .collect();
    assert_eq!(
        rows,
        vec![
            (
                json!("invalid"),
                json!(
                    "tool=open_url failed: invalid arguments: /url: \"not a uri\" is not a \"uri\""
                )
            ),
            (
                json!("invalid"),
                json!(
                    "tool=open_url failed: invalid JSON for open_url: expected an object, got an array. Re-send arguments as a JSON object with required fields: url"
                )
            ),
        ]
    );
    let (_, body) = d
        .post(
            "/v1/sessions/c2/rounds?report=1",
            &message(vec![call("c", r#"{"url": "https://example.org/"}"#)]),
        )
        .await;
    assert_eq!(body["results"][0]["status"], "client");
    let handed: Vec<&Value> = body["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["type"] == "ClientToolCall")
        .collect();
    assert_eq!(
        handed[0]["client_tool_calls"],
        json!([{"id": "c", "name": "open_url", "arguments": r#"{"url": "https://example.org/"}"#}])
    );
}

/// What the framework answers before a handler runs carries the API's one error shape too.
#[tokio::test]
async fn a_wrong_method_or_an_unreadable_path_gets_the_json_error_shape() {
    let d = TestDaemon::new();
    let request = |method: &str, path: &str| {
        Request::builder()
            .method(method)
            .uri(path)
            .header("host", "127.0.0.1")
            .body(Body::empty())
            .unwrap()
    };
    let (status, headers, body) = d
        .call(Access::default(), request("GET", "/v1/sessions/s1/rounds"))
        .await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed"),
        "{body}"
    );
    assert_eq!(
        headers.get("allow").map(|v| v.to_str().unwrap()),
        Some("POST")
    );
    let (status, _, body) = d
        .call(Access::default(), request("DELETE", "/v1/health"))
        .await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed")
    );
    let (status, _, body) = d
        .call(
            Access::default(),
            request("POST", "/v1/sessions/%ff/rounds"),
        )
        .await;
    assert_eq!(
        (status, code(&body)),
        (StatusCode::BAD_REQUEST, "bad_request"),
        "{body}"
    );
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("the request cannot be read: "),
        "{body}"
    );
}
