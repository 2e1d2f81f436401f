//! http_request against real servers on 127.0.0.1, through the engine.

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use dispatch_engine::{ApproveAll, Confirmer, Headless, Registry, RoundOutcome, Status};
use dispatch_store::{ManualClock, Store, memory::MemoryStore};
use pretty_assertions::assert_eq;
use serde_json::json;

use crate::Stores;
use crate::test_support::*;
use crate::web::NetPolicy;
use crate::web::test_server::{Reply, TestServer};

/// The built-ins, their web tools allow-listing `allow`, built over a harness's stores.
pub fn web_registry(allow: &[String]) -> impl FnOnce(&Stores) -> Registry {
    let config = crate::ToolsConfig {
        net: Arc::new(NetPolicy::from_list(allow).unwrap()),
        ..Default::default()
    };
    move |stores| crate::builtin_registry_with(&config, stores).unwrap()
}

/// A harness whose web tools reach `server`, with `confirmer` and a concurrency bound of 3.
pub async fn web_harness(server: &TestServer, confirmer: Arc<dyn Confirmer>) -> Harness {
    web_harness_on(server, confirmer, dispatch_store::open("memory:").unwrap()).await
}

/// The same over `store` (one with a manual clock, for cache ages).
async fn web_harness_on(
    server: &TestServer,
    confirmer: Arc<dyn Confirmer>,
    store: Arc<dyn Store>,
) -> Harness {
    let h = Harness::build(
        web_registry(&[server.host_port()]),
        confirmer,
        store,
        Some(3),
    );
    h.select("s", "http_request,download_file").await;
    h.select("s2", "http_request,download_file").await;
    h
}

/// One http_request call in its own run; the result's status and its text without the prefix.
async fn request(
    h: &Harness,
    session: &str,
    run: &str,
    args: serde_json::Value,
) -> (Status, String) {
    let out = h
        .round(session, run, vec![run_tool("c1", "http_request", args)])
        .await;
    let r = &out.results[0];
    let text = r
        .content
        .strip_prefix("[http_request] ")
        .unwrap_or(&r.content)
        .to_string();
    (r.status, text)
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    enc.write_all(bytes).unwrap();
    enc.finish().unwrap()
}

#[tokio::test]
async fn json_is_pretty_printed_under_the_status_line_and_useful_headers() {
    let server = TestServer::start(|_| {
        Reply::new(200, "application/json", r#"{"items":[1,2],"next":null}"#)
            .header("x-ratelimit-remaining", "59")
            .header("x-internal-trace", "dropped")
    })
    .await;
    let h = web_harness(&server, Arc::new(Headless)).await;
    let (status, text) = request(&h, "s", "r1", json!({"url": server.url("/items")})).await;
    assert_eq!(status, Status::Ok);
    assert_eq!(
        text,
        "HTTP 200 OK\ncontent-type: application/json\nx-ratelimit-remaining: 59\ncontent-length: 27\n\n{\n  \"items\": [\n    1,\n    2\n  ],\n  \"next\": null\n}"
    );
}

#[tokio::test]
async fn gzip_bodies_are_decoded() {
    let server = TestServer::start(|_| {
        let mut r = Reply::new(
            200,
            "text/plain; charset=utf-8",
            gzip("compressed hello".as_bytes()),
        );
        r.headers.push(("content-encoding".into(), "gzip".into()));
        r
    })
    .await;
    let h = web_harness(&server, Arc::new(Headless)).await;
    let (status, text) = request(&h, "s", "r1", json!({"url": server.url("/")})).await;
    assert_eq!(status, Status::Ok);
    assert!(text.ends_with("\n\ncompressed hello"), "{text}");
    assert_eq!(server.requests()[0].header("accept-encoding"), Some("gzip"));
}

#[tokio::test]
async fn text_is_decoded_by_its_declared_charset() {
    let server = TestServer::start(|seen| match seen.path.as_str() {
        "/cp1252" => Reply::new(
            200,
            "text/plain; charset=windows-1252",
            b"caf\xe9 \x80 5".to_vec(),
        ),
        "/sjis" => Reply::new(
            200,
            "text/html; charset=Shift_JIS",
            b"\x93\xfa\x96\x7b\x8c\xea".to_vec(),
        ),
        _ => Reply::new(200, "text/plain", b"no charset: na\xefve".to_vec()),
    })
    .await;
    let h = web_harness(&server, Arc::new(Headless)).await;
    let body = |t: String| t.split("\n\n").nth(1).unwrap().to_string();
    let (_, cp) = request(&h, "s", "r1", json!({"url": server.url("/cp1252")})).await;
    let (_, sjis) = request(&h, "s", "r2", json!({"url": server.url("/sjis")})).await;
    let (_, none) = request(&h, "s", "r3", json!({"url": server.url("/plain")})).await;
    assert_eq!(
        [body(cp), body(sjis), body(none)],
        ["café € 5", "日本語", "no charset: naïve"]
    );
}

#[tokio::test]
async fn binary_bodies_are_summarised() {
    let server = TestServer::start(|_| {
        Reply::new(
            200,
            "image/png",
            b"\x89PNG\r\n\x1a\n\x00\x00\x00\x0dIHDR".to_vec(),
        )
    })
    .await;
    let h = web_harness(&server, Arc::new(Headless)).await;
    let (_, text) = request(&h, "s", "r1", json!({"url": server.url("/logo.png")})).await;
    assert!(
        text.ends_with("binary body: image/png, 16 bytes; first bytes: 89 50 4e 47 0d 0a 1a 0a 00 00 00 0d 49 48 44 52. Use download_file to save it"),
        "{text}"
    );
}

#[tokio::test]
async fn a_ten_megabyte_body_is_cut_at_two_mebibytes_with_a_note() {
    let server = TestServer::start(|_| Reply::new(200, "text/plain", vec![b'a'; 10_000_000])).await;
    let h = web_harness(&server, Arc::new(Headless)).await;
    let (status, text) = request(&h, "s", "r1", json!({"url": server.url("/big")})).await;
    assert_eq!(status, Status::Ok);
    assert!(
        text.contains("\n\n(body truncated: only the first 2 MiB is shown; use download_file to save the whole body)\n"),
        "{}",
        &text[..text.len().min(600)]
    );
}

#[tokio::test]
async fn client_and_server_errors_are_results_and_are_not_cached() {
    let hits = Arc::new(AtomicUsize::new(0));
    let counter = hits.clone();
    let server = TestServer::start(move |seen| {
        counter.fetch_add(1, Ordering::SeqCst);
        match seen.path.as_str() {
            "/missing" => Reply::new(404, "text/plain", "no such item"),
            _ => Reply::new(503, "text/plain", "try later").header("retry-after", "30"),
        }
    })
    .await;
    let h = web_harness(&server, Arc::new(Headless)).await;
    let (s1, t1) = request(&h, "s", "r1", json!({"url": server.url("/missing")})).await;
    let (s2, t2) = request(&h, "s", "r2", json!({"url": server.url("/busy")})).await;
    assert_eq!(
        [(s1, t1), (s2, t2)],
        [
            (Status::Ok, "HTTP 404 Not Found\ncontent-type: text/plain\ncontent-length: 12\n\nno such item".to_string()),
            (Status::Ok, "HTTP 503 Service Unavailable\ncontent-type: text/plain\nretry-after: 30\ncontent-length: 9\n\ntry later".to_string()),
        ]
    );
    let (s3, t3) = request(&h, "s", "r3", json!({"url": server.url("/missing")})).await;
    assert_eq!(s3, Status::Ok);
    assert!(!t3.starts_with("(cached"), "{t3}");
    assert_eq!(hits.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn unauthorized_leads_to_store_secret() {
    let server = TestServer::start(|_| {
        Reply::new(401, "application/json", r#"{"message":"Bad credentials"}"#)
    })
    .await;
    // Sending a secret asks (gate_tests); here the user approves.
    let h = web_harness(&server, Arc::new(ApproveAll)).await;
    h.store
        .secret_set("GH_TOKEN", "ghp_abcdef123456")
        .await
        .unwrap();
    let (status, text) = request(
        &h,
        "s",
        "r1",
        json!({"url": server.url("/user"), "headers": {"Authorization": "Bearer {{secret:GH_TOKEN}}"}}),
    )
    .await;
    assert_eq!(status, Status::Failed);
    let url = server.url("/user");
    assert_eq!(
        text,
        format!(
            "tool=http_request failed: HTTP 401 Unauthorized from {url}: the server rejected the request's credentials (or wants some). Store the API key or token with store_secret and send it in a header such as \"Authorization\": \"Bearer {{{{secret:NAME}}}}\". Response body: {{\"message\":\"Bad credentials\"}}\nnext: store_secret(key=\"GH_TOKEN\") — the call needs a credential that is missing or was rejected; store it, then retry"
        )
    );
}

#[tokio::test]
async fn a_secret_in_a_header_reaches_the_server_but_never_the_transcript() {
    let server = TestServer::start(|seen| {
        let echoed = seen.header("authorization").unwrap_or("").to_string();
        Reply::new(200, "text/plain", format!("you sent {echoed}"))
    })
    .await;
    // Sending a secret asks (gate_tests); here the user approves.
    let h = web_harness(&server, Arc::new(ApproveAll)).await;
    h.store
        .secret_set("API_TOKEN", "tok-9f8e7d6c5b")
        .await
        .unwrap();
    let out: RoundOutcome = h
        .round(
            "s",
            "r1",
            vec![run_tool(
                "c1",
                "http_request",
                json!({"url": server.url("/me"), "headers": {"Authorization": "Bearer {{secret:API_TOKEN}}"}}),
            )],
        )
        .await;
    assert_eq!(
        server.requests()[0].header("authorization"),
        Some("Bearer tok-9f8e7d6c5b")
    );
    assert!(
        out.results[0]
            .content
            .ends_with("\n\nyou sent Bearer [secret:API_TOKEN]"),
        "{}",
        out.results[0].content
    );
    let everything = serde_json::to_string(&out).unwrap();
    assert!(!everything.contains("tok-9f8e7d6c5b"));
    // The cached copy is redacted too: a hit in the next run shows the name, not the value.
    let (_, cached) = request(
        &h,
        "s",
        "r2",
        json!({"url": server.url("/me"), "headers": {"Authorization": "Bearer {{secret:API_TOKEN}}"}}),
    )
    .await;
    assert!(
        cached.ends_with("you sent Bearer [secret:API_TOKEN]"),
        "{cached}"
    );
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn a_missing_secret_is_a_credential_error() {
    let server = TestServer::start(|_| Reply::new(200, "text/plain", "ok")).await;
    // Sending a secret asks (gate_tests); here the user approves.
    let h = web_harness(&server, Arc::new(ApproveAll)).await;
    let (status, text) = request(
        &h,
        "s",
        "r1",
        json!({"url": server.url("/"), "headers": {"X-Api-Key": "{{secret:WEATHER_KEY}}"}}),
    )
    .await;
    assert_eq!(status, Status::Failed);
    assert!(text.ends_with("next: store_secret(key=\"WEATHER_KEY\") — the call needs a credential that is missing or was rejected; store it, then retry"), "{text}");
    assert_eq!(server.requests().len(), 0);
}

#[tokio::test]
async fn a_get_is_cached_per_session_and_force_refetches() {
    let hits = Arc::new(AtomicUsize::new(0));
    let counter = hits.clone();
    let server = TestServer::start(move |_| {
        let n = counter.fetch_add(1, Ordering::SeqCst) + 1;
        Reply::new(200, "text/plain", format!("visit {n}"))
    })
    .await;
    let clock = Arc::new(ManualClock::at(1_700_000_000_000));
    let store = Arc::new(MemoryStore::with_clock(clock.clone()));
    let h = web_harness_on(&server, Arc::new(Headless), store).await;
    let url = server.url("/count");
    let (_, first) = request(&h, "s", "r1", json!({"url": url})).await;
    clock.advance(7 * 60_000 + 5_000);
    let (_, again) = request(&h, "s", "r2", json!({"url": url, "method": "GET"})).await;
    let (_, other_session) = request(&h, "s2", "r1", json!({"url": url})).await;
    let (_, forced) = request(&h, "s", "r3", json!({"url": url, "force": true})).await;
    let (_, after_force) = request(&h, "s", "r4", json!({"url": url})).await;
    let body = |t: &str| t.rsplit("\n\n").next().unwrap().to_string();
    assert_eq!(
        [
            body(&first),
            body(&again),
            body(&other_session),
            body(&forced),
            body(&after_force)
        ],
        ["visit 1", "visit 1", "visit 2", "visit 3", "visit 3"]
    );
    assert!(!first.starts_with("(cached"));
    for cached in [&again, &after_force] {
        let note = cached.lines().next().unwrap();
        assert!(
            note.starts_with("(cached ")
                && note.ends_with(" ago, this session; pass force=true for a fresh copy)"),
            "{note}"
        );
    }
    assert!(!other_session.starts_with("(cached") && !forced.starts_with("(cached"));
    assert_eq!(hits.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn a_post_asks_first_and_is_never_cached() {
    let hits = Arc::new(AtomicUsize::new(0));
    let counter = hits.clone();
    let server = TestServer::start(move |seen| {
        counter.fetch_add(1, Ordering::SeqCst);
        Reply::new(201, "application/json", seen.body.clone())
    })
    .await;
    let headless = web_harness(&server, Arc::new(Headless)).await;
    let args = json!({"url": server.url("/items"), "method": "POST", "body": {"name": "widget"}});
    let (status, text) = request(&headless, "s", "r1", args.clone()).await;
    assert_eq!(status, Status::Declined, "{text}");
    assert_eq!(hits.load(Ordering::SeqCst), 0);

    let approving = web_harness(&server, Arc::new(ApproveAll)).await;
    let (s1, t1) = request(&approving, "s", "r1", args.clone()).await;
    let (s2, t2) = request(&approving, "s", "r2", args).await;
    assert_eq!((s1, s2), (Status::Ok, Status::Ok));
    assert_eq!(
        t1,
        "HTTP 201 Created\ncontent-type: application/json\ncontent-length: 17\n\n{\n  \"name\": \"widget\"\n}"
    );
    assert_eq!(t1, t2);
    assert_eq!(hits.load(Ordering::SeqCst), 2);
    let seen = server.requests();
    assert_eq!(seen[0].header("content-type"), Some("application/json"));
}

/// HEAD only reads, like GET: with nobody to approve (headless, the default) it runs; a POST
/// in the same setting is declined before it reaches the server.
#[tokio::test]
async fn a_head_runs_without_asking_while_a_post_still_asks() {
    let server = TestServer::start(|_| Reply::new(200, "text/plain", "hello")).await;
    let headless = web_harness(&server, Arc::new(Headless)).await;
    let (status, text) = request(
        &headless,
        "s",
        "r1",
        json!({"url": server.url("/doc"), "method": "HEAD"}),
    )
    .await;
    assert_eq!(status, Status::Ok, "{text}");
    assert!(text.starts_with("HTTP 200 OK\n"), "{text}");
    let (status, text) = request(
        &headless,
        "s",
        "r2",
        json!({"url": server.url("/doc"), "method": "POST", "body": "x"}),
    )
    .await;
    assert_eq!(status, Status::Declined, "{text}");
    let seen: Vec<(String, String)> = server
        .requests()
        .iter()
        .map(|r| (r.method.clone(), r.path.clone()))
        .collect();
    assert_eq!(seen, vec![("HEAD".to_string(), "/doc".to_string())]);
}

#[tokio::test]
async fn form_and_multipart_bodies_are_encoded() {
    let server = TestServer::start(|_| Reply::new(200, "text/plain", "ok")).await;
    let h = web_harness(&server, Arc::new(ApproveAll)).await;
    request(&h, "s", "r1", json!({"url": server.url("/f"), "method": "PUT", "body": {"q": "a b&c", "n": 2}, "body_type": "form"})).await;
    request(&h, "s", "r2", json!({"url": server.url("/m"), "method": "PATCH", "body": {"note": "hi"}, "body_type": "multipart"})).await;
    let seen = server.requests();
    assert_eq!(
        (seen[0].method.as_str(), seen[0].body.as_slice()),
        ("PUT", b"n=2&q=a+b%26c".as_slice())
    );
    assert_eq!(
        seen[0].header("content-type"),
        Some("application/x-www-form-urlencoded")
    );
    let ct = seen[1].header("content-type").unwrap();
    let boundary = ct.strip_prefix("multipart/form-data; boundary=").unwrap();
    assert_eq!(
        String::from_utf8(seen[1].body.clone()).unwrap(),
        format!(
            "--{boundary}\r\nContent-Disposition: form-data; name=\"note\"\r\n\r\nhi\r\n--{boundary}--\r\n"
        )
    );
}

#[tokio::test]
async fn a_slow_server_times_out_with_the_timeout_stated() {
    let server =
        TestServer::start(|_| Reply::new(200, "text/plain", "late").delay(Duration::from_secs(5)))
            .await;
    let h = web_harness(&server, Arc::new(Headless)).await;
    let url = server.url("/slow");
    let (status, text) = request(&h, "s", "r1", json!({"url": url, "timeout": 1})).await;
    assert_eq!(status, Status::Failed);
    assert!(
        text.starts_with(&format!("tool=http_request failed: timed out after 1 s waiting for {url} (timeout=1); retry with a larger timeout (max 300 s) if the server is slow")),
        "{text}"
    );
}

#[tokio::test]
async fn a_redirect_into_the_lan_is_refused() {
    let server = TestServer::start(|_| Reply::redirect(302, "http://192.168.0.1/router")).await;
    let h = web_harness(&server, Arc::new(Headless)).await;
    let (status, text) = request(&h, "s", "r1", json!({"url": server.url("/go")})).await;
    assert_eq!(status, Status::Failed);
    assert!(text.starts_with("tool=http_request failed: refused: http://192.168.0.1/router resolves to 192.168.0.1, a private address (a local network) (rule: private);"), "{text}");
}

#[tokio::test]
async fn six_gets_run_in_two_batches_under_a_bound_of_three() {
    let server = TestServer::start(|_| {
        Reply::new(200, "text/plain", "slow ok").delay(Duration::from_millis(300))
    })
    .await;
    let h = web_harness(&server, Arc::new(Headless)).await;
    let calls = (0..6)
        .map(|i| {
            run_tool(
                &format!("c{i}"),
                "http_request",
                json!({"url": server.url(&format!("/slow?i={i}"))}),
            )
        })
        .collect();
    let out = h.round("s", "r1", calls).await;
    let mut spans: Vec<(f64, f64)> = out
        .results
        .iter()
        .map(|r| {
            assert_eq!(r.status, Status::Ok, "{}", r.content);
            (r.started_ms.unwrap(), r.ended_ms.unwrap())
        })
        .collect();
    spans.sort_by(|a, b| a.0.total_cmp(&b.0));
    let first_end = spans[..3].iter().map(|s| s.1).fold(f64::INFINITY, f64::min);
    // The first three start before any of them ends; each later one starts only after one ended.
    assert!(spans[2].0 < first_end, "{spans:?}");
    for later in &spans[3..] {
        assert!(later.0 >= first_end, "{spans:?}");
    }
    assert_eq!(server.requests().len(), 6);
}

#[tokio::test]
async fn bad_urls_and_headers_are_explained() {
    let server = TestServer::start(|_| Reply::new(200, "text/plain", "ok")).await;
    let h = web_harness(&server, Arc::new(Headless)).await;
    let (_, t1) = request(&h, "s", "r1", json!({"url": "not a url"})).await;
    let (_, t2) = request(
        &h,
        "s",
        "r2",
        json!({"url": server.url("/"), "headers": {"Host": "evil"}}),
    )
    .await;
    let (_, t3) = request(
        &h,
        "s",
        "r3",
        json!({"url": server.url("/"), "headers": {"X-A": "line\nbreak"}}),
    )
    .await;
    let (_, t4) = request(
        &h,
        "s",
        "r4",
        json!({"url": server.url("/"), "body": {"a": 1}}),
    )
    .await;
    let first = |t: String| t.lines().next().unwrap().to_string();
    assert_eq!(
        [first(t1), first(t2), first(t3), first(t4)],
        [
            "tool=http_request failed: url \"not a url\" is not a valid absolute URL (relative URL without a base); write it in full, e.g. https://api.example.com/v1/items?page=2".to_string(),
            "tool=http_request failed: header \"Host\" is set by the client itself; drop it from headers".to_string(),
            "tool=http_request failed: the value of header \"X-A\" has characters HTTP headers cannot carry (control characters or non-ASCII)".to_string(),
            "tool=http_request failed: a GET request carries no body; drop `body`, or use POST/PUT/PATCH".to_string(),
        ]
    );
    assert_eq!(server.requests().len(), 0);
}

#[tokio::test]
async fn oversized_request_bodies_and_response_headers_are_refused() {
    let server = TestServer::start(|seen| match seen.path.as_str() {
        "/fat-headers" => {
            Reply::new(200, "text/plain", "ok").header("x-padding", &"p".repeat(70_000))
        }
        _ => Reply::new(200, "text/plain", "ok"),
    })
    .await;
    let mut policy = NetPolicy::from_list(&[server.host_port()]).unwrap();
    policy.max_request_body = 100;
    let config = crate::ToolsConfig {
        net: Arc::new(policy),
        ..Default::default()
    };
    let h = Harness::with_config(&config, Arc::new(ApproveAll));
    h.select("s", "http_request").await;
    let (s1, t1) = request(
        &h,
        "s",
        "r1",
        json!({"url": server.url("/up"), "method": "POST", "body": "b".repeat(101)}),
    )
    .await;
    let (s2, t2) = request(&h, "s", "r2", json!({"url": server.url("/fat-headers")})).await;
    assert_eq!((s1, s2), (Status::Failed, Status::Failed));
    assert_eq!(
        t1.lines().next().unwrap(),
        "tool=http_request failed: the request body is 101 bytes, over the limit of 100 bytes; send less, or upload in parts"
    );
    assert_eq!(
        t2.lines().next().unwrap(),
        format!(
            "tool=http_request failed: {} sent 70077 bytes of response headers, over the limit of 65536 bytes; the response was dropped",
            server.url("/fat-headers")
        )
    );
    // The oversized body was never sent.
    assert_eq!(
        server
            .requests()
            .iter()
            .map(|s| s.path.as_str())
            .collect::<Vec<_>>(),
        ["/fat-headers"]
    );
}

#[tokio::test]
async fn a_get_leaves_remembered_reads_alone_and_a_post_ends_them() {
    let server = TestServer::start(|_| Reply::new(200, "text/plain", "ok")).await;
    let h = web_harness(&server, Arc::new(ApproveAll)).await;
    h.select("s", "read_files").await;
    std::fs::write(h.root().join("a.txt"), "alpha").unwrap();
    let read = || run_tool("read", "read_files", json!({"files": [{"path": "a.txt"}]}));
    let status_of_read = |out: &RoundOutcome| out.results.last().unwrap().status;
    // One run: read, GET, read again (remembered), POST, read again (runs).
    let first = h.round("s", "r", vec![read()]).await;
    assert_eq!(status_of_read(&first), Status::Ok);
    let (get, _) = request(&h, "s", "r", json!({"url": server.url("/a")})).await;
    assert_eq!(get, Status::Ok);
    let again = h.round("s", "r", vec![read()]).await;
    assert_eq!(status_of_read(&again), Status::Deduped);
    let (post, _) = request(
        &h,
        "s",
        "r",
        json!({"url": server.url("/a"), "method": "POST", "body": {"x": 1}}),
    )
    .await;
    assert_eq!(post, Status::Ok);
    let after_post = h.round("s", "r", vec![read()]).await;
    assert_eq!(status_of_read(&after_post), Status::Ok);
}

/// Review finding (high): `{{secret\u003aMYTOKEN}}` in the raw JSON hid the reference from a
/// check that read the raw text, while the tool expanded the parsed value and sent the secret
/// to any host without asking. The gate reads parsed values: headless, it is declined and the
/// server never sees a request.
#[tokio::test]
async fn an_escaped_secret_reference_is_not_sent_without_asking() {
    let hits = Arc::new(AtomicUsize::new(0));
    let seen = hits.clone();
    let server = TestServer::start(move |_| {
        seen.fetch_add(1, Ordering::SeqCst);
        Reply::new(200, "text/plain", "ok")
    })
    .await;
    let h = web_harness(&server, Arc::new(Headless)).await;
    h.store
        .secret_set("MYTOKEN", "tok-5e4d3c2b1a")
        .await
        .unwrap();
    let raw = format!(
        r#"{{"name": "http_request", "args": {{"url": "{}", "headers": {{"X-Token": "{{{{secret\u003aMYTOKEN}}}}"}}}}}}"#,
        server.url("/steal")
    );
    assert!(!raw.contains("{{secret:"), "{raw}");
    let out = h
        .round(
            "s",
            "r1",
            vec![dispatch_engine::RawCall::new("c1", "run_tool", raw)],
        )
        .await;
    let (status, content) = (out.results[0].status, &out.results[0].content);
    assert_eq!(status, Status::Declined, "{content}");
    assert!(
        content.contains("sends the stored secret MYTOKEN"),
        "{content}"
    );
    assert_eq!(hits.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_head_runs_without_asking_like_a_get() {
    let server = TestServer::start(|_| Reply::new(200, "text/plain", "body")).await;
    let h = web_harness(&server, Arc::new(Headless)).await;
    let args = json!({"url": server.url("/h"), "method": "HEAD"});
    let (status, text) = request(&h, "s", "r1", args).await;
    assert_eq!(status, Status::Ok, "{text}");
    assert_eq!(
        text,
        "HTTP 200 OK\ncontent-type: text/plain\ncontent-length: 4\n\n(empty body)"
    );
    let seen = server.requests();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].method, "HEAD");
}
