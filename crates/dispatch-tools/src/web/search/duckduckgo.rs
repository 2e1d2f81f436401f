//! DuckDuckGo's HTML results, the keyless default for `source=web`:
//! `POST {base}/html/` with the form `q=…` (and `df=d|w|m|y` for a time range), then the
//! result blocks are read from the page. It needs no key but is unofficial: DuckDuckGo answers
//! too many searches from one address with a bot check (HTTP 202 and a puzzle instead of
//! results), which is reported as such, never as "no results".

use async_trait::async_trait;
use dispatch_engine::ToolSecrets;
use dom_query::Document;

use super::{SearchBackend, SearchError, SearchHit, SearchQuery, Source, TimeRange};
use super::{excerpt, read_body, transport_error};

/// Where DuckDuckGo's HTML endpoint lives.
pub const DUCKDUCKGO_DEFAULT_URL: &str = "https://html.duckduckgo.com";

/// What to do instead when DuckDuckGo will not answer.
const CONFIGURE_INSTEAD: &str = "for dependable searching, ask the user to configure a search backend: search.searxng_url in the config file, or a Brave or Tavily API key with store_secret(key=\"BRAVE_API_KEY\") or store_secret(key=\"TAVILY_API_KEY\")";

/// DuckDuckGo's HTML endpoint (or anything serving its path at another base URL).
pub struct DuckDuckGo {
    base: String,
    client: reqwest::Client,
}

impl DuckDuckGo {
    pub fn new(base: impl Into<String>, client: reqwest::Client) -> Self {
        DuckDuckGo {
            base: base.into(),
            client,
        }
    }

    fn endpoint(&self) -> String {
        format!("{}/html/", self.base.trim_end_matches('/'))
    }
}

/// DuckDuckGo's `df` values: past day, week, month, year.
fn date_filter(range: TimeRange) -> Option<&'static str> {
    match range {
        TimeRange::Day => Some("d"),
        TimeRange::Week => Some("w"),
        TimeRange::Month => Some("m"),
        TimeRange::Year => Some("y"),
        TimeRange::None => None,
    }
}

/// The form the search is posted with.
fn form(q: &SearchQuery) -> String {
    let mut form = url::form_urlencoded::Serializer::new(String::new());
    form.append_pair("q", &q.query);
    if let Some(df) = date_filter(q.time_range) {
        form.append_pair("df", df);
    }
    form.finish()
}

/// What a page turned out to be.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Page {
    /// A result list (possibly empty: DuckDuckGo found nothing).
    Results(Vec<SearchHit>),
    /// The bot check instead of results.
    Challenge,
    /// Neither: no result list and no bot check (the markup may have changed).
    Unrecognised,
}

/// Read a page DuckDuckGo answered with HTTP 200.
pub(crate) fn parse_page(html: &str) -> Page {
    let doc = Document::from(html);
    if doc
        .select("#challenge-form, .anomaly-modal__modal, form[action*='anomaly.js']")
        .exists()
    {
        return Page::Challenge;
    }
    let listed = doc
        .select("#links, .serp__results, .no-results, .result__a")
        .exists();
    if !listed {
        return Page::Unrecognised;
    }
    let mut hits: Vec<SearchHit> = Vec::new();
    for block in doc.select("div.result").iter() {
        if block.has_class("result--ad") {
            continue;
        }
        let link = block.select("a.result__a").first();
        let Some(href) = link.attr("href") else {
            continue;
        };
        let Some(url) = target(&href) else { continue };
        let title = tidy(&link.text());
        let snippet = tidy(&block.select(".result__snippet").first().text());
        // With no results DuckDuckGo lists an "EOF" link to the same search on Google.
        if snippet.is_empty() && title == "EOF" {
            continue;
        }
        if hits.iter().any(|h| h.url == url) {
            continue;
        }
        let date = block
            .select(".result__extras__url span")
            .iter()
            .map(|s| tidy(&s.text()))
            .find_map(|s| day(&s));
        hits.push(SearchHit {
            title,
            url,
            snippet,
            date,
        });
    }
    Page::Results(hits)
}

/// The page a result link leads to: DuckDuckGo's redirect (`//duckduckgo.com/l/?uddg=<url>`)
/// unwrapped; `None` for an ad (`duckduckgo.com/y.js`) or anything that is not http(s).
fn target(href: &str) -> Option<String> {
    let href = href.trim();
    let absolute = if href.starts_with("//") {
        format!("https:{href}")
    } else if href.starts_with('/') {
        format!("https://duckduckgo.com{href}")
    } else {
        href.to_string()
    };
    let mut url = reqwest::Url::parse(&absolute).ok()?;
    if is_duckduckgo(&url) && url.path() == "/l/" {
        let wrapped = url
            .query_pairs()
            .find(|(k, _)| k == "uddg")
            .map(|(_, v)| v.into_owned())?;
        url = reqwest::Url::parse(&wrapped).ok()?;
    }
    if is_duckduckgo(&url) && url.path() == "/y.js" {
        return None;
    }
    matches!(url.scheme(), "http" | "https").then(|| url.to_string())
}

fn is_duckduckgo(url: &reqwest::Url) -> bool {
    matches!(
        url.host_str(),
        Some("duckduckgo.com" | "www.duckduckgo.com")
    )
}

/// Text as the model reads it: whitespace (including no-break spaces) collapsed.
fn tidy(text: &str) -> String {
    text.split(|c: char| c.is_whitespace() || c == '\u{a0}')
        .filter(|w| !w.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// `2025-06-23T00:00:00.0000000` → `2025-06-23`.
fn day(text: &str) -> Option<String> {
    let head = text.get(..10)?;
    let b = head.as_bytes();
    let digits = |r: std::ops::Range<usize>| b[r].iter().all(u8::is_ascii_digit);
    (digits(0..4) && b[4] == b'-' && digits(5..7) && b[7] == b'-' && digits(8..10))
        .then(|| head.to_string())
}

/// The bot check, as the model should read it.
fn challenge(endpoint: &str, status: u16) -> SearchError {
    SearchError::Failed(format!(
        "DuckDuckGo ({endpoint}) answered with its bot check instead of results (HTTP {status}); it does this after many searches from one address. Wait several minutes before searching again; {CONFIGURE_INSTEAD}"
    ))
}

#[async_trait]
impl SearchBackend for DuckDuckGo {
    fn name(&self) -> &str {
        "duckduckgo"
    }

    fn serves(&self, source: Source) -> bool {
        source == Source::Web
    }

    fn gate(&self) -> String {
        format!("duckduckgo {}", self.base.trim_end_matches('/'))
    }

    async fn search(
        &self,
        q: &SearchQuery,
        _secrets: Option<&ToolSecrets>,
    ) -> Result<Vec<SearchHit>, SearchError> {
        let endpoint = self.endpoint();
        let response = self
            .client
            .post(&endpoint)
            .header(
                reqwest::header::CONTENT_TYPE,
                "application/x-www-form-urlencoded",
            )
            .header(reqwest::header::ACCEPT, "text/html")
            .body(form(q))
            .send()
            .await
            .map_err(|e| transport_error("duckduckgo", &endpoint, &e))?;
        let status = response.status().as_u16();
        let body = read_body(response, "duckduckgo", &endpoint).await?;
        match status {
            // The bot check comes as a "success" that is not 200.
            202 => return Err(challenge(&endpoint, status)),
            403 | 429 => {
                return Err(SearchError::Failed(format!(
                    "DuckDuckGo ({endpoint}) is refusing searches from this address (HTTP {status}). Wait several minutes before searching again; {CONFIGURE_INSTEAD}"
                )));
            }
            200 => {}
            _ => {
                return Err(SearchError::Failed(format!(
                    "DuckDuckGo ({endpoint}) answered HTTP {status}: {}; try again later, or {CONFIGURE_INSTEAD}",
                    excerpt(&body)
                )));
            }
        }
        match parse_page(&body) {
            Page::Results(hits) => Ok(hits.into_iter().take(q.limit).collect()),
            Page::Challenge => Err(challenge(&endpoint, status)),
            Page::Unrecognised => Err(SearchError::Failed(format!(
                "DuckDuckGo ({endpoint}) answered with a page that has no result list (its HTML may have changed): {}; {CONFIGURE_INSTEAD}",
                excerpt(&body)
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RESULTS: &str = include_str!("fixtures/ddg_results.html");
    const ADS_REDIRECTS: &str = include_str!("fixtures/ddg_ads_redirects.html");
    const NO_RESULTS: &str = include_str!("fixtures/ddg_no_results.html");
    const CHALLENGE: &str = include_str!("fixtures/ddg_challenge.html");

    fn hits(html: &str) -> Vec<SearchHit> {
        match parse_page(html) {
            Page::Results(hits) => hits,
            other => panic!("expected results, got {other:?}"),
        }
    }

    #[test]
    fn the_saved_real_page_gives_its_ten_results_with_entities_decoded_and_dates() {
        let hits = hits(RESULTS);
        assert_eq!(hits.len(), 10);
        assert_eq!(
            hits[0],
            SearchHit {
                title: "GitHub - cloudwego/eino: The ultimate LLM/AI application development ..."
                    .into(),
                url: "https://github.com/cloudwego/eino".into(),
                snippet: "Eino is a framework for building LLM applications in Golang, inspired by LangChain and LlamaIndex. It provides component abstractions, orchestration APIs, best practices, tools and examples for LLM development.".into(),
                date: None,
            }
        );
        // `&#x27;` and `&quot;` in the page are characters in the snippet.
        assert_eq!(hits[1].title, "Eino: 概述 | CloudWeGo");
        assert!(
            hits[1].snippet.starts_with(
                "Eino: 概述 简介. Eino['aino] (近似音: i know，希望框架能达到 \"i know\" 的愿景)"
            ),
            "{}",
            hits[1].snippet
        );
        assert_eq!(hits[1].date.as_deref(), Some("2025-06-23"));
        assert_eq!(hits[9].url, "https://en.wikipedia.org/wiki/Eino");
        assert!(hits.iter().all(|h| !h.snippet.contains('<')));
    }

    #[test]
    fn ads_are_skipped_and_redirect_links_unwrapped() {
        let hits = hits(ADS_REDIRECTS);
        let urls: Vec<&str> = hits.iter().map(|h| h.url.as_str()).collect();
        assert_eq!(
            urls,
            [
                "https://tokio.rs/",
                "https://docs.rs/async-std/latest/async_std/?search=task&go=1",
                "https://smol.example.org/book/",
            ]
        );
        assert_eq!(hits[0].title, "Tokio - An asynchronous Rust runtime");
        assert_eq!(hits[0].date.as_deref(), Some("2026-11-28"));
        assert_eq!(hits[1].title, "async_std - Rust & \"async\" I/O");
        assert_eq!(
            hits[1].snippet,
            "It's the async version of the Rust standard library <std> — tasks, files & sockets."
        );
        assert!(hits.iter().all(|h| !h.title.contains("Hosting")));
    }

    #[test]
    fn an_ad_link_without_the_ad_class_is_still_dropped() {
        assert_eq!(
            target("https://duckduckgo.com/y.js?ad_domain=example.com&ad_provider=bingv7aa"),
            None
        );
        assert_eq!(
            target(
                "//duckduckgo.com/l/?uddg=https%3A%2F%2Fduckduckgo.com%2Fy.js%3Fad_domain%3Dx.com&rut=1"
            ),
            None
        );
        assert_eq!(target("javascript:alert(1)"), None);
        assert_eq!(
            target("/l/?uddg=http%3A%2F%2Fexample.org%2Fa%20b&rut=2").as_deref(),
            Some("http://example.org/a%20b")
        );
    }

    #[test]
    fn the_real_no_results_page_is_an_empty_list_not_its_eof_link() {
        assert_eq!(parse_page(NO_RESULTS), Page::Results(Vec::new()));
    }

    #[test]
    fn the_bot_check_is_recognised_by_its_form() {
        assert_eq!(parse_page(CHALLENGE), Page::Challenge);
        assert_eq!(
            parse_page("<html><body><h1>Something else</h1></body></html>"),
            Page::Unrecognised
        );
    }

    #[test]
    fn each_time_range_maps_to_df() {
        let q = |time_range| SearchQuery {
            query: "rust & co".into(),
            source: Source::Web,
            time_range,
            limit: 20,
        };
        assert_eq!(form(&q(TimeRange::None)), "q=rust+%26+co");
        assert_eq!(form(&q(TimeRange::Day)), "q=rust+%26+co&df=d");
        assert_eq!(form(&q(TimeRange::Week)), "q=rust+%26+co&df=w");
        assert_eq!(form(&q(TimeRange::Month)), "q=rust+%26+co&df=m");
        assert_eq!(form(&q(TimeRange::Year)), "q=rust+%26+co&df=y");
    }
}
