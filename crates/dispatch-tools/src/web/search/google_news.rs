//! Google News' search feed, the keyless default for `source=news`:
//! `GET {base}/rss/search?q=…&hl=en-US&gl=US&ceid=US:en`, with `when:1d` (7d, 30d, 1y) added
//! to the query for a time range. Each RSS item gives a title ("Headline - Publisher"), a
//! news.google.com link that redirects to the article, a publication date and the publisher.

use async_trait::async_trait;
use dispatch_engine::ToolSecrets;
use quick_xml::Reader;
use quick_xml::events::Event;

use super::{SearchBackend, SearchError, SearchHit, SearchQuery, Source, TimeRange};
use super::{excerpt, read_body, transport_error};

/// Where Google News lives.
pub const GOOGLE_NEWS_DEFAULT_URL: &str = "https://news.google.com";

/// Google News' search feed (or anything serving its path at another base URL).
pub struct GoogleNews {
    base: String,
    client: reqwest::Client,
}

impl GoogleNews {
    pub fn new(base: impl Into<String>, client: reqwest::Client) -> Self {
        GoogleNews {
            base: base.into(),
            client,
        }
    }

    fn endpoint(&self) -> String {
        format!("{}/rss/search", self.base.trim_end_matches('/'))
    }
}

/// The `when:` operator for a time range.
fn when(range: TimeRange) -> Option<&'static str> {
    match range {
        TimeRange::Day => Some("when:1d"),
        TimeRange::Week => Some("when:7d"),
        TimeRange::Month => Some("when:30d"),
        TimeRange::Year => Some("when:1y"),
        TimeRange::None => None,
    }
}

/// One `<item>` as read.
#[derive(Default)]
struct Item {
    title: String,
    link: String,
    pub_date: String,
    source: String,
}

impl Item {
    fn into_hit(self) -> SearchHit {
        let title = self.title.trim();
        let source = self.source.trim();
        // Titles end in " - Publisher" (the publisher's short name); the publisher is shown
        // on its own line instead.
        let title = match title.rsplit_once(" - ") {
            Some((head, tail)) if !source.is_empty() && source.contains(tail.trim()) => head,
            _ => title,
        };
        SearchHit {
            title: title.trim().to_string(),
            url: self.link.trim().to_string(),
            snippet: if source.is_empty() {
                String::new()
            } else {
                format!("source: {source}")
            },
            date: Some(self.pub_date.trim().to_string()).filter(|d| !d.is_empty()),
        }
    }
}

/// The items of an RSS feed, in order; an error for anything that is not RSS.
pub(crate) fn parse_feed(xml: &str) -> Result<Vec<SearchHit>, String> {
    let mut reader = Reader::from_str(xml);
    let mut hits = Vec::new();
    let mut item: Option<Item> = None;
    let mut field: Option<&'static str> = None;
    let mut saw_rss = false;
    loop {
        let event = reader
            .read_event()
            .map_err(|e| format!("malformed XML: {e}"))?;
        match event {
            Event::Start(e) => match e.local_name().as_ref() {
                "rss" | "channel" => saw_rss = true,
                "item" => item = Some(Item::default()),
                "title" if item.is_some() => field = Some("title"),
                "link" if item.is_some() => field = Some("link"),
                "pubDate" if item.is_some() => field = Some("pubDate"),
                "source" if item.is_some() => field = Some("source"),
                _ => field = None,
            },
            Event::End(e) => {
                if e.local_name().as_ref() == "item"
                    && let Some(done) = item.take()
                    && !done.link.trim().is_empty()
                {
                    hits.push(done.into_hit());
                }
                field = None;
            }
            Event::Text(t) => push(&mut item, field, &t.xml10_content()),
            Event::CData(t) => push(&mut item, field, &t.xml10_content()),
            Event::GeneralRef(r) => {
                if let Ok(Some(c)) = r.resolve_char_ref() {
                    push(&mut item, field, c.encode_utf8(&mut [0; 4]));
                } else if let Some(s) = quick_xml::escape::resolve_predefined_entity(&r) {
                    push(&mut item, field, s);
                }
            }
            Event::Eof => break,
            _ => {}
        }
    }
    if !saw_rss {
        return Err("no <rss> or <channel> element".to_string());
    }
    Ok(hits)
}

fn push(item: &mut Option<Item>, field: Option<&str>, text: &str) {
    let Some(item) = item else { return };
    let target = match field {
        Some("title") => &mut item.title,
        Some("link") => &mut item.link,
        Some("pubDate") => &mut item.pub_date,
        Some("source") => &mut item.source,
        _ => return,
    };
    target.push_str(text);
}

#[async_trait]
impl SearchBackend for GoogleNews {
    fn name(&self) -> &str {
        "googlenews"
    }

    fn serves(&self, source: Source) -> bool {
        source == Source::News
    }

    fn gate(&self) -> String {
        format!("googlenews {}", self.base.trim_end_matches('/'))
    }

    async fn search(
        &self,
        q: &SearchQuery,
        _secrets: Option<&ToolSecrets>,
    ) -> Result<Vec<SearchHit>, SearchError> {
        let endpoint = self.endpoint();
        let mut url = reqwest::Url::parse(&endpoint).map_err(|e| {
            SearchError::Failed(format!(
                "search.google_news_url in the config file ({}) is not a valid URL: {e}; the user must fix it",
                self.base
            ))
        })?;
        let query = match when(q.time_range) {
            Some(when) => format!("{} {when}", q.query),
            None => q.query.clone(),
        };
        url.query_pairs_mut()
            .append_pair("q", &query)
            .append_pair("hl", "en-US")
            .append_pair("gl", "US")
            .append_pair("ceid", "US:en");
        let response = self
            .client
            .get(url)
            .header(
                reqwest::header::ACCEPT,
                "application/rss+xml, application/xml, text/xml",
            )
            .send()
            .await
            .map_err(|e| transport_error("googlenews", &endpoint, &e))?;
        let status = response.status();
        let body = read_body(response, "googlenews", &endpoint).await?;
        if matches!(status.as_u16(), 429 | 503) {
            return Err(SearchError::Failed(format!(
                "Google News ({endpoint}) is refusing searches from this address (HTTP {}); wait several minutes before searching again, or ask the user to configure a search backend (search.searxng_url in the config file, or store_secret(key=\"BRAVE_API_KEY\") or store_secret(key=\"TAVILY_API_KEY\"))",
                status.as_u16()
            )));
        }
        if !status.is_success() {
            return Err(SearchError::Failed(format!(
                "Google News ({endpoint}) answered HTTP {}: {}",
                status.as_u16(),
                excerpt(&body)
            )));
        }
        let hits = parse_feed(&body).map_err(|e| {
            SearchError::Failed(format!(
                "Google News ({endpoint}) did not answer with an RSS feed ({e}): {}",
                excerpt(&body)
            ))
        })?;
        Ok(hits.into_iter().take(q.limit).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn search_feed_items_become_hits_with_the_publisher_apart() {
        let hits = parse_feed(include_str!("fixtures/google_news.xml")).unwrap();
        assert_eq!(
            hits,
            [
                SearchHit {
                    title: "Postgres pioneer credits Oracle with helping his database take over the world".into(),
                    url: "https://news.google.com/rss/articles/CBMizwFAAAA?oc=5".into(),
                    snippet: "source: The Register".into(),
                    date: Some("Wed, 19 Aug 2026 12:37:00 GMT".into()),
                },
                SearchHit {
                    title: "Migrate multilingual full-text search from SQL Server to PostgreSQL".into(),
                    url: "https://news.google.com/rss/articles/CBMiqgFBBBB?oc=5".into(),
                    snippet: "source: Amazon Web Services (AWS)".into(),
                    date: Some("Wed, 19 Aug 2026 10:00:00 GMT".into()),
                },
            ]
        );
    }

    #[test]
    fn a_real_feed_with_nested_description_markup_reads_the_same_way() {
        let hits = parse_feed(include_str!("fixtures/google_news_topstories.xml")).unwrap();
        assert_eq!(hits.len(), 1);
        assert_eq!(
            hits[0].title,
            "Coronavirus en Belgique: 200 cas détectés au total, un nombre limité de tests effectués par manque de réactifs"
        );
        assert_eq!(hits[0].snippet, "source: RTBF");
        assert!(
            hits[0]
                .url
                .starts_with("https://news.google.com/__i/rss/rd/articles/CBMiiwF")
        );
    }

    #[test]
    fn entities_in_items_are_decoded_and_a_title_without_a_known_publisher_stays_whole() {
        let xml = r#"<rss><channel><item><title>S&amp;P 500 &#8211; record - Week in review</title><link>https://news.google.com/rss/articles/X?oc=5</link><source url="https://example.org">Example &amp; Co</source></item></channel></rss>"#;
        let hits = parse_feed(xml).unwrap();
        assert_eq!(hits[0].title, "S&P 500 – record - Week in review");
        assert_eq!(hits[0].snippet, "source: Example & Co");
        assert_eq!(hits[0].date, None);
    }

    #[test]
    fn a_page_that_is_not_rss_is_an_error() {
        assert!(parse_feed("<html><body>sorry</body></html>").is_err());
        assert!(parse_feed("<rss><channel><item><title>x</titl").is_err());
    }
}
