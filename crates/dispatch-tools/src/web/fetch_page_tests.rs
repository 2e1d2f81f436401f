//! fetch_page against real servers on 127.0.0.1, through the engine: extraction, the shared
//! cache and its ages, the filter on every return, the skip list, the guard on redirects,
//! charsets, size caps, cookies per session, save and save_to.

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use dispatch_engine::{ApproveAll, Confirmer, Headless, Registry, Status};
use dispatch_store::{ManualClock, Store, VersionQuery, memory::MemoryStore};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use super::FetchPage;
use crate::test_support::*;
use crate::web::NetPolicy;
use crate::web::http_request::tests::web_registry;
use crate::web::test_server::{Reply, TestServer};
use crate::{Stores, builtin};

const TOOLS: &str = "fetch_page,restore_file";

/// A harness over `registry` and `store`, sessions "s" and "s2" holding fetch_page and restore_file.
async fn harness_with(
    registry: impl FnOnce(&Stores) -> Registry,
    confirmer: Arc<dyn Confirmer>,
    store: Arc<dyn Store>,
) -> Harness {
    let h = Harness::build(registry, confirmer, store, None);
    for session in ["s", "s2"] {
        h.select(session, TOOLS).await;
    }
    h
}

/// The built-ins allow-listing `server`, over a memory store.
async fn harness(server: &TestServer) -> Harness {
    harness_with(
        web_registry(&[server.host_port()]),
        Arc::new(Headless),
        dispatch_store::open("memory:").unwrap(),
    )
    .await
}

/// The same over a memory store whose clock the test moves.
async fn clocked(server: &TestServer) -> (Harness, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::at(1_700_000_000_000));
    let store = Arc::new(MemoryStore::with_clock(clock.clone()));
    let h = harness_with(
        web_registry(&[server.host_port()]),
        Arc::new(Headless),
        store,
    )
    .await;
    (h, clock)
}

/// One fetch_page call in its own run: its status and its text without the `[fetch_page] ` prefix.
async fn fetch(h: &Harness, session: &str, run: &str, args: Value) -> (Status, String) {
    let out = h
        .round(session, run, vec![run_tool("c1", "fetch_page", args)])
        .await;
    let r = &out.results[0];
    let text = r
        .content
        .strip_prefix("[fetch_page] ")
        .unwrap_or(&r.content)
        .to_string();
    (r.status, text)
}

async fn ok(h: &Harness, session: &str, run: &str, args: Value) -> String {
    let (status, text) = fetch(h, session, run, args).await;
    assert_eq!(status, Status::Ok, "{text}");
    text
}

async fn failed(h: &Harness, session: &str, run: &str, args: Value) -> String {
    let (status, text) = fetch(h, session, run, args).await;
    assert_eq!(status, Status::Failed, "{text}");
    text
}

/// The failure's message: the first line, without the `tool=fetch_page failed: ` wrapper.
fn message(text: &str) -> &str {
    text.lines()
        .next()
        .unwrap()
        .strip_prefix("tool=fetch_page failed: ")
        .unwrap_or_else(|| panic!("not a failure: {text}"))
}

fn fixture(name: &str) -> Vec<u8> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("src/web/fixtures")
        .join(format!("{name}.html"));
    std::fs::read(path).unwrap()
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    enc.write_all(bytes).unwrap();
    enc.finish().unwrap()
}

/// A server that numbers its answers: `<h1>Visit N</h1>` on an HTML page.
async fn counting_server() -> (TestServer, Arc<AtomicUsize>) {
    let hits = Arc::new(AtomicUsize::new(0));
    let counter = hits.clone();
    let server = TestServer::start(move |seen| {
        let n = counter.fetch_add(1, Ordering::SeqCst) + 1;
        Reply::new(
            200,
            "text/html; charset=utf-8",
            format!(
                "<html><head><title>Counter</title></head><body><main><h1>Visit {n}</h1><p>This is visit number {n} of the page {}, with <a href=\"/next\">a link</a> onwards.</p></main></body></html>",
                seen.path
            ),
        )
    })
    .await;
    (server, hits)
}

const CACHED_SHARED: &str = "ago, shared across sessions; pass force=true for a fresh copy)";

#[tokio::test]
async fn a_fixture_page_as_markdown_html_and_outline() {
    let page = fixture("npm_ci");
    let server =
        TestServer::start(move |_| Reply::new(200, "text/html; charset=utf-8", page.clone())).await;
    let h = harness(&server).await;
    let url = server.url("/cli/v10/commands/npm-ci");

    let md = ok(&h, "s", "r1", json!({"link": url})).await;
    assert!(md.starts_with("# npm-ci\n\n"), "{md}");
    assert!(md.contains("it's meant to be used in automated environments such as test platforms"));
    for nav in ["Edit this page on GitHub", "Clean install a project"] {
        assert!(!md.contains(nav), "{nav} in {md}");
    }
    assert!(!md.contains("](http"), "links are dropped by default: {md}");

    let linked = ok(&h, "s", "r2", json!({"link": url, "keep_links": true})).await;
    assert!(linked.starts_with("# npm-ci\n\n"), "{linked}");
    assert!(linked.contains("](http"), "{linked}");

    let html = ok(&h, "s", "r3", json!({"link": url, "type": "html"})).await;
    assert!(html.starts_with('<'), "{html}");
    assert!(html.contains("automated environments"));
    assert!(
        !html.contains("<script") && !html.contains("<nav"),
        "{html}"
    );

    let outline = ok(&h, "s", "r4", json!({"link": url, "type": "json"})).await;
    let v: Value = serde_json::from_str(&outline).unwrap();
    assert_eq!(v["title"], "npm-ci");
    assert!(v["headings"].as_array().unwrap().len() > 2, "{outline}");
    assert!(v["links"].as_array().unwrap().len() > 2, "{outline}");
    // Four different requests: four fetches, each with a sensible user agent.
    let seen = server.requests();
    assert_eq!(seen.len(), 4);
    let agent = seen[0].header("user-agent").unwrap();
    assert!(agent.starts_with("tooldispatch/"), "{agent}");
    assert!(seen[0].header("accept").unwrap().starts_with("text/html"));
}

#[tokio::test]
async fn the_cache_is_shared_says_its_age_and_expires_after_30_minutes() {
    let (server, hits) = counting_server().await;
    let (h, clock) = clocked(&server).await;
    let url = server.url("/page");
    let args = json!({"link": url});

    let fresh = ok(&h, "s", "r1", args.clone()).await;
    assert_eq!(
        fresh,
        "# Counter\n\n## Visit 1\n\nThis is visit number 1 of the page /page, with a link onwards."
    );
    let other = ok(&h, "s2", "r1", args.clone()).await;
    assert_eq!(other, format!("(cached 0 s {CACHED_SHARED}\n{fresh}"));
    assert_eq!(hits.load(Ordering::SeqCst), 1);

    clock.advance(7 * 60_000 + 5_000);
    // The fragment is not part of the page.
    let later = ok(&h, "s2", "r2", json!({"link": format!("{url}#section-2")})).await;
    assert_eq!(later, format!("(cached 7 min {CACHED_SHARED}\n{fresh}"));

    // Other options that change the text are other entries.
    let linked = ok(&h, "s", "r2", json!({"link": url, "keep_links": true})).await;
    assert!(
        linked.contains("Visit 2") && linked.contains("[a link]("),
        "{linked}"
    );
    let outline = ok(&h, "s", "r3", json!({"link": url, "type": "json"})).await;
    assert!(outline.contains("Visit 3"), "{outline}");
    assert_eq!(hits.load(Ordering::SeqCst), 3);

    // force fetches again and refreshes the entry everyone sees.
    let forced = ok(&h, "s", "r4", json!({"link": url, "force": true})).await;
    assert!(forced.starts_with("# Counter\n\n## Visit 4\n"), "{forced}");
    let after = ok(&h, "s2", "r3", args.clone()).await;
    assert_eq!(after, format!("(cached 0 s {CACHED_SHARED}\n{forced}"));

    clock.advance(30 * 60_000 + 1_000);
    let expired = ok(&h, "s2", "r4", args).await;
    assert!(
        expired.starts_with("# Counter\n\n## Visit 5\n"),
        "{expired}"
    );
    assert_eq!(hits.load(Ordering::SeqCst), 5);
}

/// A long page: many sections, one of them about "lighthouses".
fn long_page() -> String {
    let mut body = String::from("<html><head><title>Almanac</title></head><body><article>");
    for i in 0..60 {
        let topic = match i {
            17 => "lighthouses keep their lamps burning through storms".to_string(),
            42 => "glaciers carve valleys over many thousands of years".to_string(),
            _ => format!("ordinary filler paragraph number {i} about nothing in particular"),
        };
        body.push_str(&format!(
            "<h2>Section {i}</h2><p>{} {}</p>",
            topic,
            "More words to make this section long enough to matter. ".repeat(8)
        ));
    }
    body.push_str("</article></body></html>");
    body
}

#[tokio::test]
async fn focus_filters_every_return_and_the_cache_keeps_the_whole_page() {
    let page = long_page();
    let server = TestServer::start(move |_| Reply::new(200, "text/html", page.clone())).await;
    let h = harness(&server).await;
    let url = server.url("/almanac");

    let lights = ok(&h, "s", "r1", json!({"link": url, "focus": "lighthouses"})).await;
    assert!(lights.starts_with("About "), "{lights}");
    let first = lights.lines().nth(1).unwrap();
    assert!(
        first.starts_with("[filtered: kept 1 of ")
            && first.contains(" sections most relevant to \"lighthouses\""),
        "filter note first: {first}"
    );
    assert!(lights.contains("lighthouses keep their lamps burning"));
    assert!(!lights.contains("glaciers carve valleys"), "{lights}");

    let ice = ok(&h, "s2", "r1", json!({"link": url, "focus": "glaciers"})).await;
    let lines: Vec<&str> = ice.lines().collect();
    assert!(lines[0].starts_with("(cached "), "{ice}");
    assert!(lines[1].starts_with("About "), "{ice}");
    assert!(
        lines[2].starts_with("[filtered: kept 1 of ")
            && lines[2].contains(" sections most relevant to \"glaciers\""),
        "filter note under the cache note: {ice}"
    );
    assert!(ice.contains("glaciers carve valleys"));
    assert!(!ice.contains("lighthouses keep"), "{ice}");
    assert_eq!(server.requests().len(), 1);

    // Without focus the page is cut to the budget from the top, with the filter's note.
    let top = ok(&h, "s", "r2", json!({"link": url})).await;
    let lines: Vec<&str> = top.lines().collect();
    assert!(lines[0].starts_with("(cached "), "{top}");
    // What is left and how to read it, above the filter's own line.
    assert!(
        lines[1].starts_with("About ")
            && lines[1].ends_with(
                "KB are not shown below: call fetch_page again with save=true (served from the cache, no new request) to keep the whole text in a file, then read_files that file with offset to read on."
            ),
        "{top}"
    );
    assert!(lines[2].starts_with("[filtered: kept the first "), "{top}");
    assert!(top.contains("## Section 0\n") && !top.contains("## Section 59\n"));
    // The budget holds the filtered text; the cache note is one line above it.
    assert!(top.len() <= 20_000 + lines[0].len() + 1, "{}", top.len());
    assert_eq!(server.requests().len(), 1);

    // Following the advice: the whole text in a file, from the cache.
    let saved = ok(&h, "s", "r3", json!({"link": url, "save": true})).await;
    let path = saved
        .lines()
        .find_map(|l| l.strip_prefix("saved to "))
        .expect("a saved line");
    let whole = std::fs::read_to_string(path).unwrap();
    assert!(whole.contains("## Section 0\n") && whole.contains("## Section 59\n"));
    assert!(
        saved.contains("the saved file has all of it: read_files it with offset"),
        "{saved}"
    );
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn a_cached_return_differs_from_a_fresh_one_only_by_its_note() {
    let page = long_page();
    let server = TestServer::start(move |seen| match seen.path.as_str() {
        "/old" => Reply::redirect(302, "/almanac"),
        _ => Reply::new(200, "text/html", page.clone()),
    })
    .await;
    let h = harness(&server).await;
    let args = json!({"link": server.url("/old"), "focus": "glaciers"});
    let fresh = ok(&h, "s", "r1", args.clone()).await;
    let cached = ok(&h, "s2", "r1", args).await;
    let (note, rest) = cached.split_once('\n').unwrap();
    assert!(
        note.starts_with("(cached ") && note.ends_with(CACHED_SHARED),
        "{note}"
    );
    assert_eq!(rest, fresh);
    // The redirect survives the filter: it is said above the filtered text.
    assert!(
        fresh.starts_with(&format!("(redirected to {})\n", server.url("/almanac"))),
        "{fresh}"
    );
}

#[tokio::test]
async fn a_404_goes_on_the_skip_list_until_forced() {
    let server = TestServer::start(|_| Reply::new(404, "text/html", "<h1>Not Found</h1>")).await;
    let h = harness(&server).await;
    let url = server.url("/gone");
    let first = failed(&h, "s", "r1", json!({"link": url})).await;
    assert_eq!(
        message(&first),
        format!(
            "{url} answered 404 Not Found; it is not fetched again unless force=true. Look for another source, or use http_request to see the response itself"
        )
    );
    // Another session sees the skip list too, and nothing is sent.
    let second = failed(&h, "s2", "r1", json!({"link": url, "type": "html"})).await;
    assert_eq!(
        message(&second),
        format!(
            "{url} blocked: it answered 404 Not Found 0 s ago; it is on the skip list, so it was not fetched again. Pass force=true to try anyway"
        )
    );
    assert_eq!(server.requests().len(), 1);
    let forced = failed(&h, "s", "r2", json!({"link": url, "force": true})).await;
    assert!(
        message(&forced).contains("answered 404 Not Found"),
        "{forced}"
    );
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn a_503_is_skipped_for_12_hours() {
    let hits = Arc::new(AtomicUsize::new(0));
    let counter = hits.clone();
    let server = TestServer::start(move |_| {
        counter.fetch_add(1, Ordering::SeqCst);
        Reply::new(503, "text/html", "<h1>down</h1>")
    })
    .await;
    let (h, clock) = clocked(&server).await;
    let url = server.url("/busy");
    let first = failed(&h, "s", "r1", json!({"link": url})).await;
    assert_eq!(
        message(&first),
        format!(
            "{url} answered 503 Service Unavailable; it is not fetched again for 12 hours unless force=true. Look for another source, or use http_request to see the response itself"
        )
    );
    clock.advance(12 * 3_600_000 - 60_000);
    let blocked = failed(&h, "s", "r2", json!({"link": url})).await;
    assert_eq!(
        message(&blocked),
        format!(
            "{url} blocked: it answered 503 Service Unavailable 11 h ago; it is on the skip list for another 1 min, so it was not fetched again. Pass force=true to try anyway"
        )
    );
    assert_eq!(hits.load(Ordering::SeqCst), 1);
    clock.advance(61_000);
    failed(&h, "s", "r3", json!({"link": url})).await;
    assert_eq!(hits.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_forced_success_takes_the_url_off_the_skip_list() {
    let hits = Arc::new(AtomicUsize::new(0));
    let counter = hits.clone();
    let server = TestServer::start(move |_| {
        let n = counter.fetch_add(1, Ordering::SeqCst) + 1;
        if n == 1 {
            Reply::new(503, "text/html", "<h1>down</h1>")
        } else {
            Reply::new(200, "text/html", format!("<p>Back up, answer {n}.</p>"))
        }
    })
    .await;
    let (h, clock) = clocked(&server).await;
    let url = server.url("/flaky");
    failed(&h, "s", "r1", json!({"link": url})).await;
    let forced = ok(&h, "s", "r2", json!({"link": url, "force": true})).await;
    assert_eq!(forced, "Back up, answer 2.");
    // Once the cached copy expires, the page is fetched again, not "blocked".
    clock.advance(31 * 60_000);
    let later = ok(&h, "s", "r3", json!({"link": url})).await;
    assert_eq!(later, "Back up, answer 3.");
}

#[tokio::test]
async fn an_empty_page_is_skipped_for_72_hours() {
    let server = TestServer::start(|seen| match seen.path.as_str() {
        "/scripts" => Reply::new(
            200,
            "text/html",
            "<html><head><script src=\"/app.js\"></script></head><body><div id=\"root\"></div><script>render()</script></body></html>",
        ),
        _ => Reply::new(200, "text/html", "<html><body></body></html>"),
    })
    .await;
    let (h, clock) = clocked(&server).await;
    for (i, path) in ["/scripts", "/empty"].into_iter().enumerate() {
        let url = server.url(path);
        let first = failed(&h, "s", &format!("a{i}"), json!({"link": url})).await;
        assert_eq!(
            message(&first),
            format!(
                "{url} has no readable text (it may be empty or built by scripts, which do not run here); it is not fetched again for 72 hours unless force=true. Try another source for this information"
            )
        );
    }
    clock.advance(72 * 3_600_000 - 1_000);
    let blocked = failed(&h, "s2", "b", json!({"link": server.url("/scripts")})).await;
    assert_eq!(
        message(&blocked),
        format!(
            "{} blocked: it had no readable text 2 days ago; it is on the skip list for another 1 s, so it was not fetched again. Pass force=true to try anyway",
            server.url("/scripts")
        )
    );
    assert_eq!(server.requests().len(), 2);
    clock.advance(2_000);
    failed(&h, "s2", "c", json!({"link": server.url("/scripts")})).await;
    assert_eq!(server.requests().len(), 3);
}

#[tokio::test]
async fn redirects_are_followed_and_each_hop_is_guarded() {
    let server = TestServer::start(|seen| match seen.path.as_str() {
        "/old" => Reply::redirect(301, "/new"),
        "/to-loopback" => Reply::redirect(302, "http://127.0.0.2:9/secret"),
        "/to-private" => Reply::redirect(302, "http://10.0.0.1/admin"),
        _ => Reply::new(200, "text/html", "<p>The new home of the page.</p>"),
    })
    .await;
    let h = harness(&server).await;
    let moved = ok(&h, "s", "r1", json!({"link": server.url("/old")})).await;
    assert_eq!(
        moved,
        format!(
            "(redirected to {})\nThe new home of the page.",
            server.url("/new")
        )
    );
    let loopback = failed(&h, "s", "r2", json!({"link": server.url("/to-loopback")})).await;
    assert!(
        message(&loopback).starts_with(
            "refused: http://127.0.0.2:9/secret resolves to 127.0.0.2, a loopback address (this machine) (rule: loopback);"
        ),
        "{loopback}"
    );
    let private = failed(&h, "s", "r3", json!({"link": server.url("/to-private")})).await;
    assert!(
        message(&private).starts_with(
            "refused: http://10.0.0.1/admin resolves to 10.0.0.1, a private address (a local network) (rule: private);"
        ),
        "{private}"
    );
    // A refusal is not the page's fault: no skip list, asking again asks again.
    failed(&h, "s", "r4", json!({"link": server.url("/to-private")})).await;
    let paths: Vec<String> = server.requests().iter().map(|s| s.path.clone()).collect();
    assert_eq!(
        paths,
        ["/old", "/new", "/to-loopback", "/to-private", "/to-private"]
    );
}

#[tokio::test]
async fn charsets_from_the_header_or_the_meta_tag() {
    let server = TestServer::start(|seen| match seen.path.as_str() {
        "/cp1252" => Reply::new(
            200,
            "text/html; charset=windows-1252",
            b"<html><body><p>Caf\xe9 prices rose by \x805 this year.</p></body></html>".to_vec(),
        ),
        _ => Reply::new(
            200,
            "text/html",
            b"<html><head><meta charset=\"shift_jis\"></head><body><p>\x93\xfa\x96\x7b\x8c\xea\x82\xcc\x83\x79\x81\x5b\x83\x57</p></body></html>".to_vec(),
        ),
    })
    .await;
    let h = harness(&server).await;
    let cp = ok(&h, "s", "r1", json!({"link": server.url("/cp1252")})).await;
    let sjis = ok(&h, "s", "r2", json!({"link": server.url("/sjis")})).await;
    assert_eq!(
        [cp, sjis],
        ["Café prices rose by €5 this year.", "日本語のページ"]
    );
}

#[tokio::test]
async fn gzip_is_decoded_and_a_huge_page_is_cut_with_a_note() {
    let server = TestServer::start(|seen| match seen.path.as_str() {
        "/gz" => Reply::new(
            200,
            "text/html",
            gzip(b"<html><body><p>Squeezed words arrive intact.</p></body></html>"),
        )
        .header("content-encoding", "gzip"),
        _ => {
            let mut page = String::from("<html><head><title>Huge</title></head><body>");
            let para = format!(
                "<p>Line of a very large page that goes on and on. {}</p>\n",
                "Words fill it up. ".repeat(30)
            );
            while page.len() < 10 * 1024 * 1024 {
                page.push_str(&para);
            }
            Reply::new(200, "text/html", page)
        }
    })
    .await;
    let h = harness(&server).await;
    let gz = ok(&h, "s", "r1", json!({"link": server.url("/gz")})).await;
    assert_eq!(gz, "Squeezed words arrive intact.");
    let huge = ok(&h, "s", "r2", json!({"link": server.url("/huge")})).await;
    let first = huge.lines().next().unwrap();
    assert_eq!(
        first,
        "Note: the page is longer than 5 MiB; only its first 5 MiB were read."
    );
    assert!(
        huge.contains("Line of a very large page"),
        "{}",
        &huge[..500]
    );
    assert!(huge.len() <= 21_000, "{}", huge.len());
}

#[tokio::test]
async fn a_slow_server_times_out() {
    let server = TestServer::start(|_| {
        Reply::new(200, "text/html", "<p>too late</p>").delay(Duration::from_secs(5))
    })
    .await;
    let policy = Arc::new(NetPolicy::from_list(&[server.host_port()]).unwrap());
    let registry = |stores: &Stores| {
        let mut registry = Registry::empty();
        dispatch_engine::register_system_tools(&mut registry).unwrap();
        registry
            .register(builtin(
                FetchPage::new(policy, stores).with_timeout(Duration::from_secs(1)),
            ))
            .unwrap();
        registry
    };
    let h = Harness::with_registry(registry, Arc::new(Headless));
    h.select("s", "fetch_page").await;
    // Stopped by its own 1 s limit, not by the server's 5 s answer.
    let (status, text) = fetch(&h, "s", "r1", json!({"link": server.url("/slow")})).await;
    assert_eq!(status, Status::TimedOut, "{text}");
    assert!(text.contains("timed out after 1"), "{text}");
    // A timeout is not a verdict on the page: it is not on the skip list.
    let again = fetch(&h, "s", "r2", json!({"link": server.url("/slow")})).await;
    assert_eq!(again.0, Status::TimedOut, "{}", again.1);
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn cookies_stay_in_their_session() {
    let server = TestServer::start(|seen| {
        let cookie = seen.header("cookie").unwrap_or("none").to_string();
        Reply::new(
            200,
            "text/html",
            format!("<p>The cookie header was {cookie} on this visit.</p>"),
        )
        .header("set-cookie", "sid=abc123; Path=/")
    })
    .await;
    let h = harness(&server).await;
    let url = server.url("/account");
    let first = ok(&h, "s", "r1", json!({"link": url})).await;
    assert_eq!(first, "The cookie header was none on this visit.");
    let again = ok(&h, "s", "r2", json!({"link": url, "force": true})).await;
    assert_eq!(again, "The cookie header was sid=abc123 on this visit.");
    let other = ok(&h, "s2", "r1", json!({"link": url, "force": true})).await;
    assert_eq!(other, "The cookie header was none on this visit.");
    let anonymous = ok(
        &h,
        "s",
        "r3",
        json!({"link": url, "force": true, "same_session": false}),
    )
    .await;
    assert_eq!(anonymous, "The cookie header was none on this visit.");
    let cookies: Vec<Option<String>> = server
        .requests()
        .iter()
        .map(|s| s.header("cookie").map(str::to_string))
        .collect();
    assert_eq!(cookies, [None, Some("sid=abc123".into()), None, None]);
}

#[tokio::test]
async fn a_page_fetched_with_cookies_is_not_shared() {
    let server = TestServer::start(|seen| {
        let who = if seen.header("cookie").is_some() {
            "signed in as alice"
        } else {
            "a guest"
        };
        Reply::new(200, "text/html", format!("<p>Welcome, {who}.</p>"))
            .header("set-cookie", "sid=alice; Path=/")
    })
    .await;
    let h = harness(&server).await;
    ok(&h, "s", "r1", json!({"link": server.url("/login")})).await;
    let mine = ok(&h, "s", "r2", json!({"link": server.url("/home")})).await;
    assert_eq!(mine, "Welcome, signed in as alice.");
    let again = ok(&h, "s", "r3", json!({"link": server.url("/home")})).await;
    assert_eq!(
        again,
        "(cached 0 s ago, this session; pass force=true for a fresh copy)\nWelcome, signed in as alice."
    );
    // Another session never sees what alice's cookie showed.
    let theirs = ok(&h, "s2", "r1", json!({"link": server.url("/home")})).await;
    assert_eq!(theirs, "Welcome, a guest.");
    assert_eq!(server.requests().len(), 3);
}

#[tokio::test]
async fn save_writes_under_the_session_directory() {
    let (server, _) = counting_server().await;
    let h = harness(&server).await;
    let text = ok(
        &h,
        "s",
        "r1",
        json!({"link": server.url("/p"), "save": true}),
    )
    .await;
    let (line, rest) = text.split_once('\n').unwrap();
    let path = line.strip_prefix("saved to ").unwrap();
    let data = h.data_dir.path().canonicalize().unwrap();
    let pages = dispatch_engine::shaping::session_dir(&data, "s").join("pages");
    assert!(
        std::path::Path::new(path).starts_with(&pages),
        "{path} not under {}",
        pages.display()
    );
    assert!(path.ends_with(".md"), "{path}");
    assert_eq!(std::fs::read_to_string(path).unwrap(), rest);
}

#[tokio::test]
async fn save_to_creates_a_recorded_new_file_and_never_overwrites() {
    let (server, _) = counting_server().await;
    let h = harness_with(
        web_registry(&[server.host_port()]),
        Arc::new(ApproveAll),
        dispatch_store::open("memory:").unwrap(),
    )
    .await;
    let url = server.url("/p");
    let text = ok(
        &h,
        "s",
        "r1",
        json!({"link": url, "save_to": "notes/page.md"}),
    )
    .await;
    let versions = h.store.versions(&VersionQuery::default()).await.unwrap();
    assert_eq!(versions.len(), 1);
    let v = versions[0].id;
    let (line, rest) = text.split_once('\n').unwrap();
    assert_eq!(
        line,
        format!(
            "saved to notes/page.md (a new file; version {v} records that it did not exist; undo with restore_file(version={v}))"
        )
    );
    let file = h.root().join("notes/page.md");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), rest);

    // An existing file is left alone; nothing is recorded.
    let again = failed(
        &h,
        "s",
        "r2",
        json!({"link": url, "save_to": "notes/page.md"}),
    )
    .await;
    assert_eq!(
        message(&again),
        "save_to notes/page.md already exists; fetch_page only creates new files. Choose another path, or write over it with edit_file"
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), rest);
    let outside = failed(
        &h,
        "s",
        "r3",
        json!({"link": url, "save_to": "../escape.md"}),
    )
    .await;
    assert!(
        message(&outside).starts_with("path \"../escape.md\" refused:"),
        "{outside}"
    );
    let absolute = failed(
        &h,
        "s",
        "r4",
        json!({"link": url, "save_to": "/tmp/fetch_page_escape.md"}),
    )
    .await;
    assert!(
        message(&absolute).starts_with("path \"/tmp/fetch_page_escape.md\" refused:"),
        "{absolute}"
    );
    assert!(!std::path::Path::new("/tmp/fetch_page_escape.md").exists());
    assert_eq!(
        h.store
            .versions(&VersionQuery::default())
            .await
            .unwrap()
            .len(),
        1
    );

    // restore_file undoes it.
    let out = h
        .round(
            "s",
            "r5",
            vec![run_tool("c1", "restore_file", json!({"version": v}))],
        )
        .await;
    assert_eq!(
        out.results[0].status,
        Status::Ok,
        "{}",
        out.results[0].content
    );
    assert!(!file.exists());
}

#[tokio::test]
async fn a_file_that_is_not_a_page_points_to_the_other_tools() {
    let server = TestServer::start(|seen| match seen.path.as_str() {
        "/doc.pdf" => Reply::new(200, "application/pdf", b"%PDF-1.7 ...".to_vec()),
        "/icon.svg" => Reply::new(
            200,
            "image/svg+xml",
            "<svg xmlns=\"http://www.w3.org/2000/svg\"><text>hi</text></svg>",
        ),
        _ => Reply::new(200, "image/png", b"\x89PNG\r\n\x1a\n".to_vec()),
    })
    .await;
    let h = harness(&server).await;
    for (path, kind) in [
        ("/doc.pdf", "application/pdf"),
        ("/logo.png", "image/png"),
        ("/icon.svg", "image/svg+xml"),
    ] {
        let url = server.url(path);
        let text = failed(&h, "s", path, json!({"link": url})).await;
        assert_eq!(
            message(&text),
            format!(
                "{url} is {kind}, not a web page; use download_file to save it, or http_request to look at it"
            )
        );
    }
}

#[tokio::test]
async fn a_bad_link_is_explained() {
    let server = TestServer::start(|_| Reply::new(200, "text/html", "<p>x</p>")).await;
    let h = harness(&server).await;
    let text = failed(&h, "s", "r1", json!({"link": "example.com/page"})).await;
    assert_eq!(
        message(&text),
        "link \"example.com/page\" is not a valid absolute URL (relative URL without a base); write it in full, e.g. https://example.com/page"
    );
    assert!(server.requests().is_empty());
}

#[tokio::test]
async fn a_read_of_the_save_to_path_is_not_answered_from_before_the_save() {
    let (server, _) = counting_server().await;
    let h = harness_with(
        web_registry(&[server.host_port()]),
        Arc::new(ApproveAll),
        dispatch_store::open("memory:").unwrap(),
    )
    .await;
    h.select("s", "read_files").await;
    let read = |run: &'static str| {
        let h = &h;
        async move {
            let out = h
                .round(
                    "s",
                    "r1",
                    vec![run_tool(
                        run,
                        "read_files",
                        json!({"files": [{"path": "saved.md"}]}),
                    )],
                )
                .await;
            (out.results[0].status, out.results[0].content.clone())
        }
    };
    let before = read("c1").await;
    assert!(before.1.contains("saved.md"), "{before:?}");
    let out = h
        .round(
            "s",
            "r1",
            vec![run_tool(
                "c2",
                "fetch_page",
                json!({"link": server.url("/p"), "save_to": "saved.md"}),
            )],
        )
        .await;
    assert_eq!(
        out.results[0].status,
        Status::Ok,
        "{}",
        out.results[0].content
    );
    let after = read("c3").await;
    assert_eq!(after.0, Status::Ok, "{after:?}");
    assert!(after.1.contains("This is visit number 1"), "{after:?}");
}

#[tokio::test]
async fn a_long_outline_stays_valid_json_within_the_budget() {
    let mut page = String::from("<html><head><title>Links</title></head><body><h1>Many links</h1>");
    for i in 0..200 {
        let topic = if i == 150 { "lighthouse" } else { "item" };
        page.push_str(&format!("<p><a href=\"/a/long/path/to/a/page/about/{topic}/number/{i}/with/more/segments/to/make/it/long\">A fairly long link text describing {topic} number {i} in some detail</a></p>"));
    }
    page.push_str("</body></html>");
    let server = TestServer::start(move |_| Reply::new(200, "text/html", page.clone())).await;
    let h = harness(&server).await;
    let url = server.url("/links");
    let text = ok(&h, "s", "r1", json!({"link": url, "type": "json"})).await;
    assert!(text.len() <= 20_000, "{}", text.len());
    let (line, outline) = text.split_once("\n\n").unwrap();
    let v: Value = serde_json::from_str(outline).unwrap();
    let kept = v["links"].as_array().unwrap().len();
    assert_eq!(
        line,
        format!(
            "[outline cut to fit: kept 1 of 1 headings and {kept} of 200 links; give a focus to keep the ones about it, or use type \"markdown\" for the text]"
        )
    );
    assert_eq!(v["title"], "Links");
    assert_eq!(v["links_omitted"], json!(200 - kept));
    assert!(
        v["links"][0]["text"]
            .as_str()
            .unwrap()
            .ends_with("number 0 in some detail")
    );

    let focused = ok(
        &h,
        "s",
        "r2",
        json!({"link": url, "type": "json", "focus": "lighthouse"}),
    )
    .await;
    let (note, rest) = focused.split_once('\n').unwrap();
    assert!(note.starts_with("(cached "), "{focused}");
    let (line, outline) = rest.split_once("\n\n").unwrap();
    assert_eq!(
        line,
        "[outline cut to fit: kept 0 of 1 headings and 1 of 200 links (those about \"lighthouse\" first); call again with another focus, or use type \"markdown\" for the text]"
    );
    let v: Value = serde_json::from_str(outline).unwrap();
    assert_eq!(v["links"].as_array().unwrap().len(), 1);
    assert_eq!(v["links_omitted"], json!(199));
    assert_eq!(v["headings_omitted"], json!(1));
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn xhtml_text_and_json_are_pages_too() {
    let server = TestServer::start(|seen| match seen.path.as_str() {
        "/x" => Reply::new(
            200,
            "application/xhtml+xml",
            "<?xml version=\"1.0\"?><html xmlns=\"http://www.w3.org/1999/xhtml\"><head><title>X</title></head><body><p>Strict markup still reads.</p></body></html>",
        ),
        "/notes.txt" => Reply::new(200, "text/plain; charset=utf-8", "plain notes\nline two"),
        _ => Reply::new(200, "application/json", r#"{"answer":42}"#),
    })
    .await;
    let h = harness(&server).await;
    let x = ok(&h, "s", "r1", json!({"link": server.url("/x")})).await;
    let txt = ok(&h, "s", "r2", json!({"link": server.url("/notes.txt")})).await;
    let js = ok(&h, "s", "r3", json!({"link": server.url("/data.json")})).await;
    assert_eq!(
        [x.as_str(), txt.as_str(), js.as_str()],
        [
            "# X\n\nStrict markup still reads.",
            "plain notes\nline two",
            r#"{"answer":42}"#
        ]
    );
}

#[tokio::test]
async fn a_403_says_which_tool_can_send_credentials() {
    let server = TestServer::start(|_| Reply::new(403, "text/html", "<h1>Forbidden</h1>")).await;
    let h = harness(&server).await;
    let url = server.url("/members");
    let text = failed(&h, "s", "r1", json!({"link": url})).await;
    assert_eq!(
        message(&text),
        format!(
            "{url} answered 403 Forbidden; it is not fetched again unless force=true. If the page needs a login or an API key, fetch_page cannot send one: store it with store_secret and call http_request with it in a header; otherwise look for another source"
        )
    );
    // The engine's hint that follows now agrees with the message.
    assert!(
        text.lines()
            .last()
            .unwrap()
            .starts_with("next: store_secret("),
        "{text}"
    );
}

#[tokio::test]
async fn the_notes_above_a_full_page_still_fit_the_budget() {
    let mut page = String::from("<html><head><title>Short notes</title></head><body><article>");
    for i in 0..600 {
        page.push_str(&format!(
            "<h3>Note {i}</h3><p>A short remark, number {i}.</p>"
        ));
    }
    page.push_str("</article></body></html>");
    let server = TestServer::start(move |seen| match seen.path.as_str() {
        "/old" => Reply::redirect(301, "/notes"),
        _ => Reply::new(200, "text/html", page.clone()),
    })
    .await;
    let h = harness(&server).await;
    let args = json!({"link": server.url("/old")});
    let fresh = ok(&h, "s", "r1", args.clone()).await;
    let cached = ok(&h, "s2", "r1", args).await;
    assert!(fresh.starts_with("(redirected to "), "{}", &fresh[..300]);
    let (note, rest) = cached.split_once('\n').unwrap();
    assert!(note.ends_with(CACHED_SHARED), "{}", &cached[..300]);
    assert_eq!(rest, fresh);
    assert!(cached.len() <= 20_000, "{}", cached.len());
    assert!(
        cached.len() > 19_000,
        "the budget is used: {}",
        cached.len()
    );
}

#[tokio::test]
async fn reading_never_asks_and_saving_into_the_work_directory_does() {
    let (server, _) = counting_server().await;
    let h = harness(&server).await;
    let url = server.url("/p");
    let out = h
        .round(
            "s",
            "r",
            vec![
                run_tool("read", "fetch_page", json!({"link": url})),
                run_tool("private", "fetch_page", json!({"link": url, "save": true})),
                run_tool(
                    "write",
                    "fetch_page",
                    json!({"link": url, "save_to": "page.md"}),
                ),
            ],
        )
        .await;
    let statuses: Vec<Status> = out.results.iter().map(|r| r.status).collect();
    // Headless: the save into the work directory is declined, and nothing was written there.
    assert_eq!(statuses, vec![Status::Ok, Status::Ok, Status::Declined]);
    assert!(!h.root().join("page.md").exists());
}

/// Review finding: fetch_page's URL parameter is `link`, the old gate only read `url`, so
/// `deny fetch_page(…)` never fired. The tool now declares its URL; the rule refuses it.
#[tokio::test]
async fn a_deny_rule_on_the_page_url_refuses_fetch_page() {
    let (server, hits) = counting_server().await;
    let h = Harness::with_rules(
        web_registry(&[server.host_port()]),
        Arc::new(Headless),
        &format!(
            "deny fetch_page(http://{}/blocked/**)\n",
            server.host_port()
        ),
    );
    h.select("s", TOOLS).await;
    let out = h
        .round(
            "s",
            "r",
            vec![
                run_tool(
                    "no",
                    "fetch_page",
                    json!({"link": server.url("/blocked/p")}),
                ),
                run_tool("yes", "fetch_page", json!({"link": server.url("/p")})),
            ],
        )
        .await;
    let statuses: Vec<Status> = out.results.iter().map(|r| r.status).collect();
    assert_eq!(
        statuses,
        vec![Status::Refused, Status::Ok],
        "{}",
        out.results[0].content
    );
    assert!(
        out.results[0]
            .content
            .contains("refused by the rule `deny fetch_page(")
    );
    assert_eq!(
        hits.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "only the allowed page was fetched"
    );
}
