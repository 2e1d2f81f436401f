//! search_web against real HTTP servers on 127.0.0.1:0 replaying bodies shaped after each
//! API's documented JSON (fixtures in search/fixtures/: SearXNG's `format=json` answer, Brave's
//! web and news search answers) and, for the keyless defaults, saved DuckDuckGo result pages
//! and Google News feeds (search/fixtures/SOURCES.md says which are real and from where).

use std::sync::Arc;
use std::time::Duration;

use dispatch_engine::{CachePolicy, Effect, Gate, Headless, SlotResult, Status, Tool};
use dispatch_store::ManualClock;
use dispatch_store::memory::MemoryStore;
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use super::*;
use crate::test_support::*;
use crate::web::search::test_server::TestServer;

const SEARXNG: &str = include_str!("search/fixtures/searxng.json");
const BRAVE_WEB: &str = include_str!("search/fixtures/brave_web.json");
const BRAVE_NEWS: &str = include_str!("search/fixtures/brave_news.json");
const KEY: &str = "bsk-test-0123456789abcdef";

fn harness(config: SearchConfig) -> Harness {
    let config = crate::ToolsConfig {
        search: config,
        ..Default::default()
    };
    Harness::with_config(&config, Arc::new(Headless))
}

/// The same over a store whose clock the test moves (for cache ages).
fn harness_on_clock(config: SearchConfig, clock: Arc<ManualClock>) -> Harness {
    let config = crate::ToolsConfig {
        search: config,
        ..Default::default()
    };
    Harness::build(
        |stores| crate::builtin_registry_with(&config, stores).unwrap(),
        Arc::new(Headless),
        Arc::new(MemoryStore::with_clock(clock)),
        None,
    )
}

fn searxng(base: &str) -> SearchConfig {
    SearchConfig {
        searxng_url: Some(base.to_string()),
        min_gap: Duration::ZERO,
        ..SearchConfig::default()
    }
}

fn brave(base: &str) -> SearchConfig {
    SearchConfig {
        brave_url: Some(base.to_string()),
        min_gap: Duration::ZERO,
        ..SearchConfig::default()
    }
}

/// One round of search_web calls (the schema fetched first).
async fn search(h: &Harness, session: &str, run: &str, calls: Vec<Value>) -> Vec<SlotResult> {
    // Fetch the schema in a run of its own: a repeated find_tools in one run is deduplicated.
    let select = call("sel", "find_tools", json!({"query": "select:search_web"}));
    let selected = h
        .round(session, &format!("select-{run}"), vec![select])
        .await;
    assert_eq!(selected.results[0].status, Status::Ok);
    let calls = calls
        .into_iter()
        .enumerate()
        .map(|(i, args)| run_tool(&format!("c{i}"), "search_web", args))
        .collect();
    h.round(session, run, calls).await.results
}

const SEARXNG_TEXT: &str = "3 results for \"rust async runtime\" (news, past week) via searxng:
1. Tokio - An asynchronous Rust runtime
   https://tokio.rs/
   Tokio is an asynchronous runtime for the Rust programming language. It provides the building blocks needed for writing network applications.
2. Asynchronous Programming in Rust (2026-11-20)
   https://rust-lang.github.io/async-book/
   This book aims to be a thorough guide to asynchronous programming in Rust, from beginner to advanced.
3. smol & async-std
   https://example.org/smol";

#[tokio::test]
async fn searxng_results_become_a_numbered_list() {
    let server = TestServer::start(|_| (200, SEARXNG.to_string())).await;
    let h = harness(searxng(&server.base));
    let results = search(
        &h,
        "s",
        "r",
        vec![json!({"query": "  rust   async runtime ", "source": "news", "time_range": "week"})],
    )
    .await;
    assert_eq!(results[0].status, Status::Ok);
    assert_eq!(results[0].content, format!("[search_web] {SEARXNG_TEXT}"));
    let seen = server.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].method, "GET");
    assert_eq!(seen[0].path(), "/search");
    assert_eq!(
        [
            seen[0].query("q"),
            seen[0].query("format"),
            seen[0].query("categories"),
            seen[0].query("time_range"),
        ],
        [
            Some("rust async runtime".to_string()),
            Some("json".to_string()),
            Some("news".to_string()),
            Some("week".to_string()),
        ]
    );
}

#[tokio::test]
async fn limit_cuts_the_list() {
    let server = TestServer::start(|_| (200, SEARXNG.to_string())).await;
    let h = harness(searxng(&server.base));
    let results = search(&h, "s", "r", vec![json!({"query": "rust", "limit": 1})]).await;
    assert_eq!(
        results[0].content,
        "[search_web] 1 result for \"rust\" (web, any time) via searxng:
1. Tokio - An asynchronous Rust runtime
   https://tokio.rs/
   Tokio is an asynchronous runtime for the Rust programming language. It provides the building blocks needed for writing network applications."
    );
    assert_eq!(
        server.seen()[0].query("categories").as_deref(),
        Some("general")
    );
}

#[tokio::test]
async fn each_time_range_maps_to_searxngs_parameter() {
    let server = TestServer::start(|_| (200, SEARXNG.to_string())).await;
    let h = harness(searxng(&server.base));
    let ranges = ["day", "week", "month", "year", "none"];
    let calls = ranges
        .iter()
        .map(|r| json!({"query": "q", "time_range": r}))
        .collect();
    let results = search(&h, "s", "r", calls).await;
    assert!(
        results.iter().all(|r| r.status == Status::Ok),
        "{results:?}"
    );
    let mut sent: Vec<Option<String>> = server
        .seen()
        .iter()
        .map(|s| s.query("time_range"))
        .collect();
    sent.sort();
    assert_eq!(
        sent,
        [
            None,
            Some("day".to_string()),
            Some("month".to_string()),
            Some("week".to_string()),
            Some("year".to_string()),
        ]
    );
}

#[tokio::test]
async fn brave_sends_the_stored_key_and_never_shows_it() {
    let server = TestServer::start(|req| {
        if req.header("X-Subscription-Token") != Some(KEY) {
            return (401, r#"{"type":"ErrorResponse"}"#.to_string());
        }
        match req.path() {
            "/res/v1/web/search" => (200, BRAVE_WEB.to_string()),
            "/res/v1/news/search" => (200, BRAVE_NEWS.to_string()),
            _ => (404, "{}".to_string()),
        }
    })
    .await;
    let h = harness(brave(&server.base));
    h.store.secret_set("BRAVE_API_KEY", KEY).await.unwrap();
    h.select("s", "search_web").await;
    let out = h
        .round(
            "s",
            "r",
            vec![
                run_tool("c1", "search_web", json!({"query": "rust async runtime"})),
                run_tool(
                    "c2",
                    "search_web",
                    json!({"query": "rust release", "source": "news", "limit": 5}),
                ),
            ],
        )
        .await;
    assert_eq!(
        results(&out),
        [
            result(
                "c1",
                Status::Ok,
                "[search_web] 2 results for \"rust async runtime\" (web, any time) via brave:
1. Tokio - An asynchronous Rust runtime (November 28, 2026)
   https://tokio.rs/
   Tokio is an asynchronous runtime for the Rust programming language.
2. Async in depth | Tokio
   https://tokio.rs/tokio/tutorial/async
   At this point, we have completed a fairly comprehensive tour of asynchronous Rust and Tokio."
            ),
            result(
                "c2",
                Status::Ok,
                "[search_web] 1 result for \"rust release\" (news, any time) via brave:
1. Rust 1.95 released (4 days ago)
   https://blog.rust-lang.org/2026/11/27/Rust-1.95.0/
   The Rust team is happy to announce a new version of Rust, 1.95.0."
            ),
        ]
    );
    let seen = server.seen();
    assert_eq!(seen.len(), 2);
    assert!(
        seen.iter()
            .all(|s| s.header("X-Subscription-Token") == Some(KEY))
    );
    assert!(
        seen.iter()
            .all(|s| s.query("count").as_deref() == Some("20"))
    );
    let events = serde_json::to_string(&out.events).unwrap();
    assert!(!events.contains(KEY), "{events}");
    assert!(out.results.iter().all(|r| !r.content.contains(KEY)));
}

#[tokio::test]
async fn each_time_range_maps_to_braves_freshness() {
    let server = TestServer::start(|_| (200, BRAVE_WEB.to_string())).await;
    let h = harness(brave(&server.base));
    h.store.secret_set("BRAVE_API_KEY", KEY).await.unwrap();
    let calls = ["day", "week", "month", "year", "none"]
        .iter()
        .map(|r| json!({"query": "q", "time_range": r}))
        .collect();
    let results = search(&h, "s", "r", calls).await;
    assert!(
        results.iter().all(|r| r.status == Status::Ok),
        "{results:?}"
    );
    let mut sent: Vec<Option<String>> =
        server.seen().iter().map(|s| s.query("freshness")).collect();
    sent.sort();
    assert_eq!(
        sent,
        [
            None,
            Some("pd".to_string()),
            Some("pm".to_string()),
            Some("pw".to_string()),
            Some("py".to_string()),
        ]
    );
}

#[tokio::test]
async fn a_rejected_brave_key_points_to_store_secret() {
    let server = TestServer::start(|_| (401, r#"{"type":"ErrorResponse","error":{"code":"SUBSCRIPTION_TOKEN_INVALID","status":401}}"#.to_string())).await;
    let h = harness(brave(&server.base));
    h.store.secret_set("BRAVE_API_KEY", KEY).await.unwrap();
    let results = search(&h, "s", "r", vec![json!({"query": "rust"})]).await;
    assert_eq!(results[0].status, Status::Failed);
    assert_eq!(
        results[0].content,
        "[search_web] tool=search_web failed: the Brave Search API rejected the stored key BRAVE_API_KEY (HTTP 401); ask the user to store a valid key with store_secret(key=\"BRAVE_API_KEY\"), then retry\n\
         next: store_secret(key=\"BRAVE_API_KEY\") — the call needs a credential that is missing or was rejected; store it, then retry"
    );
}

#[tokio::test]
async fn no_backend_configured_says_what_to_configure_and_points_to_store_secret() {
    // Without the keyless defaults in the order (they always answer otherwise).
    let h = harness(SearchConfig {
        order: vec![
            BackendKind::Searxng,
            BackendKind::Brave,
            BackendKind::Tavily,
        ],
        ..SearchConfig::default()
    });
    let results = search(&h, "s", "r", vec![json!({"query": "rust"})]).await;
    assert_eq!(results[0].status, Status::Failed);
    assert_eq!(
        results[0].content,
        "[search_web] tool=search_web failed: no web search backend is configured. Either the user sets search.searxng_url in the config file to a SearXNG instance with the JSON format enabled, or an API key is stored: ask the user to store it with store_secret(key=\"BRAVE_API_KEY\") or store_secret(key=\"TAVILY_API_KEY\"), then retry\n\
         next: store_secret(key=\"BRAVE_API_KEY\") — the call needs a credential that is missing or was rejected; store it, then retry"
    );
}

#[tokio::test]
async fn a_searxng_without_json_is_not_mistaken_for_a_credential_problem() {
    let server = TestServer::start(|_| (403, "<html>Forbidden</html>".to_string())).await;
    let h = harness(searxng(&server.base));
    let results = search(&h, "s", "r", vec![json!({"query": "rust"})]).await;
    assert_eq!(results[0].status, Status::Failed);
    let content = &results[0].content;
    assert!(
        content.starts_with(&format!(
            "[search_web] tool=search_web failed: the SearXNG instance at {}/search does not serve the JSON format; the user must add `json` to search.formats in its settings.yml\nnext: once a different fix works, call write_error(",
            server.base
        )),
        "{content}"
    );
}

#[tokio::test]
async fn a_cached_search_says_how_old_it_is_force_refreshes_and_sessions_do_not_share() {
    let server = TestServer::start(|_| (200, SEARXNG.to_string())).await;
    let clock = Arc::new(ManualClock::at(1_800_000_000_000));
    let h = harness_on_clock(searxng(&server.base), clock.clone());
    let args = json!({"query": "rust async runtime", "source": "news", "time_range": "week"});
    let fresh = format!("[search_web] {SEARXNG_TEXT}");

    let first = search(&h, "s1", "r1", vec![args.clone()]).await;
    assert_eq!(first[0].content, fresh);
    clock.advance(7 * 60_000 + 500);
    // A new run, so the engine's per-run dedupe does not answer instead of the cache.
    let cached = search(&h, "s1", "r2", vec![args.clone()]).await;
    assert_eq!(
        cached[0].content,
        format!(
            "[search_web] (cached 7 min ago, this session; pass force=true for a fresh copy)\n{SEARXNG_TEXT}"
        )
    );
    assert_eq!(server.seen().len(), 1);

    let mut forced = args.clone();
    forced["force"] = json!(true);
    let refreshed = search(&h, "s1", "r3", vec![forced]).await;
    assert_eq!(refreshed[0].content, fresh);
    assert_eq!(server.seen().len(), 2);

    let other = search(&h, "s2", "r1", vec![args.clone()]).await;
    assert_eq!(other[0].content, fresh);
    assert_eq!(server.seen().len(), 3);

    // The forced search rewrote the entry: its age starts again.
    clock.advance(60_000);
    let again = search(&h, "s1", "r4", vec![args]).await;
    assert!(
        again[0]
            .content
            .starts_with("[search_web] (cached 1 min ago, this session;"),
        "{}",
        again[0].content
    );
    assert_eq!(server.seen().len(), 3);
}

#[tokio::test]
async fn entries_expire_after_thirty_minutes() {
    let server = TestServer::start(|_| (200, SEARXNG.to_string())).await;
    let clock = Arc::new(ManualClock::at(1_800_000_000_000));
    let h = harness_on_clock(searxng(&server.base), clock.clone());
    search(&h, "s", "r1", vec![json!({"query": "rust"})]).await;
    clock.advance(30 * 60_000 + 1);
    let later = search(&h, "s", "r2", vec![json!({"query": "rust"})]).await;
    assert!(
        later[0].content.starts_with("[search_web] 3 results"),
        "{}",
        later[0].content
    );
    assert_eq!(server.seen().len(), 2);
}

#[tokio::test]
async fn two_calls_in_one_round_reach_one_backend_at_least_the_gap_apart() {
    let server = TestServer::start(|_| (200, SEARXNG.to_string())).await;
    let gap = Duration::from_millis(300);
    let h = harness(SearchConfig {
        min_gap: gap,
        ..searxng(&server.base)
    });
    let results = search(
        &h,
        "s",
        "r",
        vec![json!({"query": "alpha"}), json!({"query": "beta"})],
    )
    .await;
    assert!(
        results.iter().all(|r| r.status == Status::Ok),
        "{results:?}"
    );
    let seen = server.seen();
    assert_eq!(seen.len(), 2);
    let apart = seen[1].at.duration_since(seen[0].at);
    assert!(apart >= gap, "requests only {apart:?} apart");
}

#[test]
fn spec_flags_are_concurrent_read_only_observing_and_session_cached() {
    let tool = crate::Builtin::new(SearchWeb::new(
        SearchConfig::default(),
        &crate::Stores::default(),
    ));
    let spec = tool.spec();
    assert!(spec.is_concurrent());
    assert!(crate::SEED_CONCURRENT.contains(&spec.name.as_str()));
    assert_eq!(spec.gate, Gate::ReadOnly);
    assert_eq!(spec.effect, Effect::Observes);
    assert_eq!(spec.cache, CachePolicy::Session(dispatch_store::CACHE_TTL));
}

#[test]
fn the_cache_key_is_the_canonical_request() {
    assert_eq!(
        cache_key("rust async", Source::News, TimeRange::Week),
        r#"search_web|{"query":"rust async","source":"news","time_range":"week"}"#
    );
}

#[tokio::test]
async fn an_oversized_answer_is_refused_not_read_whole() {
    let huge = format!(
        r#"{{"results": [], "pad": "{}"}}"#,
        "x".repeat(3 * 1024 * 1024)
    );
    let server = TestServer::start(move |_| (200, huge.clone())).await;
    let h = harness(searxng(&server.base));
    let results = search(&h, "s", "r", vec![json!({"query": "rust"})]).await;
    assert_eq!(results[0].status, Status::Failed);
    assert!(
        results[0].content.starts_with(&format!(
            "[search_web] tool=search_web failed: the searxng search backend at {}/search sent more than 2 MiB, which is not a search answer; check the search settings in the config file\nnext: once a different fix works",
            server.base
        )),
        "{}",
        results[0].content
    );
}

#[tokio::test]
async fn an_unreachable_backend_is_reported_with_its_address() {
    // A port that was just free: nothing listens there any more.
    let base = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", listener.local_addr().unwrap())
    };
    let h = harness(searxng(&base));
    let results = search(&h, "s", "r", vec![json!({"query": "rust"})]).await;
    assert_eq!(results[0].status, Status::Failed);
    assert!(
        results[0].content.starts_with(&format!(
            "[search_web] tool=search_web failed: the searxng search backend at {base}/search could not connect; try again later, or check the search settings in the config file\n"
        )),
        "{}",
        results[0].content
    );
}

#[tokio::test]
async fn tavily_answers_when_only_its_key_is_stored() {
    const TAVILY: &str = include_str!("search/fixtures/tavily.json");
    let server = TestServer::start(|req| {
        if req.header("Authorization") != Some(&format!("Bearer {KEY}")) {
            return (401, r#"{"detail":{"error":"Unauthorized"}}"#.to_string());
        }
        (200, TAVILY.to_string())
    })
    .await;
    let h = harness(SearchConfig {
        tavily_url: Some(server.base.clone()),
        ..brave(&server.base)
    });
    h.store.secret_set("TAVILY_API_KEY", KEY).await.unwrap();
    let results = search(
        &h,
        "s",
        "r",
        vec![json!({"query": "rust release", "source": "news", "time_range": "month"})],
    )
    .await;
    assert_eq!(
        results[0].content,
        "[search_web] 2 results for \"rust release\" (news, past month) via tavily:
1. Announcing Rust 1.95.0 | Rust Blog (Fri, 27 Nov 2026 00:00:00 GMT)
   https://blog.rust-lang.org/2026/11/27/Rust-1.95.0/
   The Rust team is happy to announce a new version of Rust, 1.95.0. Rust is a programming language empowering everyone to build reliable and efficient software.
2. Releases · rust-lang/rust
   https://github.com/rust-lang/rust/releases
   Empowering everyone to build reliable and efficient software."
    );
    let seen = server.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(
        (seen[0].method.as_str(), seen[0].path()),
        ("POST", "/search")
    );
    assert_eq!(
        serde_json::from_str::<Value>(&seen[0].body).unwrap(),
        json!({
            "query": "rust release",
            "topic": "news",
            "time_range": "month",
            "search_depth": "basic",
            "max_results": 20
        })
    );
    assert!(!results[0].content.contains(KEY));
}

#[tokio::test]
async fn the_entry_is_the_unfiltered_hits_in_this_session_only() {
    let server = TestServer::start(|_| (200, SEARXNG.to_string())).await;
    let h = harness(searxng(&server.base));
    search(&h, "s1", "r", vec![json!({"query": "rust", "limit": 1})]).await;
    let key = cache_key("rust", Source::Web, TimeRange::None);
    let own = dispatch_store::CacheScope::Session {
        session: "s1".to_string(),
    };
    let hit = h.store.cache_get(&own, &key).await.unwrap().unwrap();
    let cached: Value = serde_json::from_str(&hit.value).unwrap();
    // All three hits are kept although the call showed one: a later limit can use them.
    assert_eq!(cached["backend"], "searxng");
    assert_eq!(cached["hits"].as_array().unwrap().len(), 3);
    assert_eq!(
        cached["hits"][1],
        json!({
            "title": "Asynchronous Programming in Rust",
            "url": "https://rust-lang.github.io/async-book/",
            "snippet": "This book aims to be a thorough guide to asynchronous programming in Rust, from beginner to advanced.",
            "date": "2026-11-20"
        })
    );
    let shared = dispatch_store::CacheScope::Shared;
    assert_eq!(h.store.cache_get(&shared, &key).await.unwrap(), None);
}

#[tokio::test]
async fn a_backend_echoing_the_key_has_it_redacted_in_the_result_and_the_cache() {
    let server = TestServer::start(|req| {
        let key = req.header("X-Subscription-Token").unwrap_or_default();
        let body = json!({"type": "search", "web": {"type": "search", "results": [
            {"title": "echo", "url": "https://example.org/", "description": format!("your token is {key}")}
        ]}});
        (200, body.to_string())
    })
    .await;
    let h = harness(brave(&server.base));
    h.store.secret_set("BRAVE_API_KEY", KEY).await.unwrap();
    let results = search(&h, "s", "r", vec![json!({"query": "echo"})]).await;
    assert_eq!(
        results[0].content,
        "[search_web] 1 result for \"echo\" (web, any time) via brave:
1. echo
   https://example.org/
   your token is [secret:BRAVE_API_KEY]"
    );
    let own = dispatch_store::CacheScope::Session {
        session: "s".to_string(),
    };
    let key = cache_key("echo", Source::Web, TimeRange::None);
    let hit = h.store.cache_get(&own, &key).await.unwrap().unwrap();
    assert!(!hit.value.contains(KEY), "{}", hit.value);
    assert!(
        hit.value.contains("[secret:BRAVE_API_KEY]"),
        "{}",
        hit.value
    );
}

#[tokio::test]
async fn a_redirect_never_carries_the_key_to_another_host() {
    let elsewhere = TestServer::start(|_| (200, BRAVE_WEB.to_string())).await;
    let target = format!("{}/res/v1/web/search", elsewhere.base);
    let server = TestServer::start(move |_| (302, target.clone())).await;
    let h = harness(brave(&server.base));
    h.store.secret_set("BRAVE_API_KEY", KEY).await.unwrap();
    h.select("s", "search_web").await;
    let out = h
        .round(
            "s",
            "r",
            vec![run_tool("c1", "search_web", json!({"query": "rust"}))],
        )
        .await;
    assert_eq!(
        out.results[0].status,
        Status::Failed,
        "{}",
        out.results[0].content
    );
    // The key went to the configured backend only; the redirect was not followed.
    assert_eq!(server.seen()[0].header("X-Subscription-Token"), Some(KEY));
    assert_eq!(elsewhere.seen().len(), 0);
}

// --- The keyless defaults: DuckDuckGo (web) and Google News (news) ---

const DDG_RESULTS: &str = include_str!("search/fixtures/ddg_results.html");
const DDG_ADS_REDIRECTS: &str = include_str!("search/fixtures/ddg_ads_redirects.html");
const DDG_NO_RESULTS: &str = include_str!("search/fixtures/ddg_no_results.html");
const DDG_CHALLENGE: &str = include_str!("search/fixtures/ddg_challenge.html");
const GOOGLE_NEWS: &str = include_str!("search/fixtures/google_news.xml");

/// No backend configured: the keyless defaults, pointed at 127.0.0.1, with no gaps.
fn keyless(ddg: &str, news: &str) -> SearchConfig {
    SearchConfig {
        duckduckgo_url: Some(ddg.to_string()),
        google_news_url: Some(news.to_string()),
        min_gap: Duration::ZERO,
        duckduckgo_min_gap: Duration::ZERO,
        ..SearchConfig::default()
    }
}

/// A server for the keyless defaults: DuckDuckGo's form POST gets `page`, Google News' feed
/// request gets the saved feed.
async fn keyless_server(page: &'static str) -> TestServer {
    TestServer::start(move |req| match (req.method.as_str(), req.path()) {
        ("POST", "/html/") => (200, page.to_string()),
        ("GET", "/rss/search") => (200, GOOGLE_NEWS.to_string()),
        _ => (404, "not here".to_string()),
    })
    .await
}

/// The form fields DuckDuckGo received.
fn form_fields(seen: &crate::web::search::test_server::Seen) -> Vec<(String, String)> {
    url::form_urlencoded::parse(seen.body.as_bytes())
        .into_owned()
        .collect()
}

#[tokio::test]
async fn with_no_configuration_the_web_goes_to_duckduckgo_and_the_news_to_google_news() {
    let server = keyless_server(DDG_RESULTS).await;
    let h = harness(keyless(&server.base, &server.base));
    let results = search(
        &h,
        "s",
        "r",
        vec![
            json!({"query": "eino"}),
            json!({"query": "postgresql", "source": "news"}),
        ],
    )
    .await;
    assert!(
        results.iter().all(|r| r.status == Status::Ok),
        "{results:?}"
    );
    let web = &results[0].content;
    assert!(
        web.starts_with(
            "[search_web] 10 results for \"eino\" (web, any time) via duckduckgo:
1. GitHub - cloudwego/eino: The ultimate LLM/AI application development ...
   https://github.com/cloudwego/eino
   Eino is a framework for building LLM applications in Golang, inspired by LangChain and LlamaIndex. It provides component abstractions, orchestration APIs, best practices, tools and examples for LLM development.
2. Eino: 概述 | CloudWeGo (2025-06-23)
   https://www.cloudwego.io/zh/docs/eino/overview/
"
        ),
        "{web}"
    );
    assert!(
        web.ends_with(
            "10. Eino - Wikipedia
   https://en.wikipedia.org/wiki/Eino
   Eino is a Finnish and Estonian masculine given name derived from Henri or Enewald. It is also the name of many notable people in various fields, such as sports, politics, arts and science."
        ),
        "{web}"
    );
    assert_eq!(
        results[1].content,
        "[search_web] 2 results for \"postgresql\" (news, any time) via googlenews:
1. Postgres pioneer credits Oracle with helping his database take over the world (Wed, 19 Aug 2026 12:37:00 GMT)
   https://news.google.com/rss/articles/CBMizwFAAAA?oc=5
   source: The Register
2. Migrate multilingual full-text search from SQL Server to PostgreSQL (Wed, 19 Aug 2026 10:00:00 GMT)
   https://news.google.com/rss/articles/CBMiqgFBBBB?oc=5
   source: Amazon Web Services (AWS)"
    );
    let seen = server.seen();
    assert_eq!(seen.len(), 2);
    let ddg = seen.iter().find(|s| s.method == "POST").unwrap();
    assert_eq!(ddg.path(), "/html/");
    assert_eq!(
        ddg.header("Content-Type"),
        Some("application/x-www-form-urlencoded")
    );
    assert_eq!(form_fields(ddg), [("q".to_string(), "eino".to_string())]);
    let news = seen.iter().find(|s| s.method == "GET").unwrap();
    assert_eq!(news.path(), "/rss/search");
    assert_eq!(
        [
            news.query("q"),
            news.query("hl"),
            news.query("gl"),
            news.query("ceid"),
        ],
        [
            Some("postgresql".to_string()),
            Some("en-US".to_string()),
            Some("US".to_string()),
            Some("US:en".to_string()),
        ]
    );
}

#[tokio::test]
async fn ads_are_skipped_redirects_unwrapped_entities_decoded_and_limit_cuts() {
    let server = keyless_server(DDG_ADS_REDIRECTS).await;
    let h = harness(keyless(&server.base, &server.base));
    let results = search(
        &h,
        "s",
        "r",
        vec![json!({"query": "rust async runtime", "limit": 2})],
    )
    .await;
    assert_eq!(
        results[0].content,
        "[search_web] 2 results for \"rust async runtime\" (web, any time) via duckduckgo:
1. Tokio - An asynchronous Rust runtime (2026-11-28)
   https://tokio.rs/
   Tokio is an event-driven, non-blocking I/O platform for writing asynchronous applications with the Rust programming language.
2. async_std - Rust & \"async\" I/O
   https://docs.rs/async-std/latest/async_std/?search=task&go=1
   It's the async version of the Rust standard library <std> — tasks, files & sockets."
    );
}

#[tokio::test]
async fn duckduckgos_no_results_page_says_there_are_none() {
    let server = keyless_server(DDG_NO_RESULTS).await;
    let h = harness(keyless(&server.base, &server.base));
    let results = search(
        &h,
        "s",
        "r",
        vec![json!({"query": "testtesttesttesttesttesttesttesttesttesttest"})],
    )
    .await;
    assert_eq!(results[0].status, Status::Ok);
    assert_eq!(
        results[0].content,
        "[search_web] no results for \"testtesttesttesttesttesttesttesttesttesttest\" (web, any time) via duckduckgo; try fewer or other words, or a wider time_range"
    );
}

#[tokio::test]
async fn duckduckgos_bot_check_is_an_error_that_says_what_to_configure() {
    let server = TestServer::start(|_| (202, DDG_CHALLENGE.to_string())).await;
    let h = harness(keyless(&server.base, &server.base));
    let results = search(&h, "s", "r", vec![json!({"query": "rust"})]).await;
    assert_eq!(results[0].status, Status::Failed);
    let content = &results[0].content;
    assert!(
        content.starts_with(&format!(
            "[search_web] tool=search_web failed: DuckDuckGo ({}/html/) answered with its bot check instead of results (HTTP 202); it does this after many searches from one address. Wait several minutes before searching again; for dependable searching, ask the user to configure a search backend: search.searxng_url in the config file, or a Brave or Tavily API key with store_secret(key=\"BRAVE_API_KEY\") or store_secret(key=\"TAVILY_API_KEY\")\n",
            server.base
        )),
        "{content}"
    );
    // A failure is not cached: the next call asks again.
    search(&h, "s", "r2", vec![json!({"query": "rust"})]).await;
    assert_eq!(server.seen().len(), 2);
}

#[tokio::test]
async fn the_bot_check_served_as_200_is_still_the_bot_check() {
    let server = TestServer::start(|_| (200, DDG_CHALLENGE.to_string())).await;
    let h = harness(keyless(&server.base, &server.base));
    let results = search(&h, "s", "r", vec![json!({"query": "rust"})]).await;
    assert_eq!(results[0].status, Status::Failed);
    assert!(
        results[0]
            .content
            .contains("answered with its bot check instead of results (HTTP 200)"),
        "{}",
        results[0].content
    );
}

#[tokio::test]
async fn each_time_range_maps_to_duckduckgos_df_and_google_news_when() {
    let server = keyless_server(DDG_RESULTS).await;
    let h = harness(keyless(&server.base, &server.base));
    let ranges = ["day", "week", "month", "year", "none"];
    let calls = ranges
        .iter()
        .flat_map(|r| {
            [
                json!({"query": "q", "time_range": r}),
                json!({"query": "q", "source": "news", "time_range": r}),
            ]
        })
        .collect();
    let results = search(&h, "s", "r", calls).await;
    assert!(
        results.iter().all(|r| r.status == Status::Ok),
        "{results:?}"
    );
    let seen = server.seen();
    let mut df: Vec<Option<String>> = seen
        .iter()
        .filter(|s| s.method == "POST")
        .map(|s| {
            form_fields(s)
                .into_iter()
                .find(|(k, _)| k == "df")
                .map(|(_, v)| v)
        })
        .collect();
    df.sort();
    assert_eq!(
        df,
        [
            None,
            Some("d".to_string()),
            Some("m".to_string()),
            Some("w".to_string()),
            Some("y".to_string()),
        ]
    );
    let mut q: Vec<String> = seen
        .iter()
        .filter(|s| s.method == "GET")
        .filter_map(|s| s.query("q"))
        .collect();
    q.sort();
    assert_eq!(
        q,
        ["q", "q when:1d", "q when:1y", "q when:30d", "q when:7d"]
    );
}

#[tokio::test]
async fn a_configured_backend_still_wins_over_the_keyless_defaults() {
    let searxng = TestServer::start(|_| (200, SEARXNG.to_string())).await;
    let keyless_pages = keyless_server(DDG_RESULTS).await;
    let h = harness(SearchConfig {
        searxng_url: Some(searxng.base.clone()),
        ..keyless(&keyless_pages.base, &keyless_pages.base)
    });
    let results = search(
        &h,
        "s",
        "r",
        vec![
            json!({"query": "rust"}),
            json!({"query": "rust", "source": "news"}),
        ],
    )
    .await;
    assert!(
        results.iter().all(|r| r.content.contains("via searxng:")),
        "{results:?}"
    );
    assert_eq!(searxng.seen().len(), 2);
    assert_eq!(keyless_pages.seen().len(), 0);
}

/// The seed's 5 s between DuckDuckGo requests, measured where it matters: when the requests
/// arrive at the (fake) DuckDuckGo. Three concurrent calls from two separate search_web
/// instances (the gap is per service for the whole process) queue behind one another.
#[tokio::test]
async fn duckduckgo_requests_from_concurrent_calls_arrive_at_least_five_seconds_apart() {
    let server = keyless_server(DDG_RESULTS).await;
    let config = SearchConfig {
        duckduckgo_min_gap: SearchConfig::default().duckduckgo_min_gap,
        ..keyless(&server.base, &server.base)
    };
    assert_eq!(config.duckduckgo_min_gap, Duration::from_secs(5));
    let (a, b) = (harness(config.clone()), harness(config));
    let (first, second) = tokio::join!(
        search(
            &a,
            "s",
            "r",
            vec![json!({"query": "alpha"}), json!({"query": "beta"})],
        ),
        search(&b, "s", "r", vec![json!({"query": "gamma"})]),
    );
    assert!(
        first.iter().chain(&second).all(|r| r.status == Status::Ok),
        "{first:?} {second:?}"
    );
    let seen = server.seen();
    assert_eq!(seen.len(), 3);
    let gaps: Vec<Duration> = seen
        .windows(2)
        .map(|w| w[1].at.duration_since(w[0].at))
        .collect();
    println!("DuckDuckGo request arrival gaps: {gaps:?}");
    assert!(
        gaps.iter().all(|g| *g >= Duration::from_secs(5)),
        "requests only {gaps:?} apart"
    );
}
