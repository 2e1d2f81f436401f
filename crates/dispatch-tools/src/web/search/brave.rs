//! The Brave Search API: `GET {base}/res/v1/web/search` (or `/news/search`) with the key in
//! `X-Subscription-Token`; the key is the stored secret `BRAVE_API_KEY`.

use async_trait::async_trait;
use dispatch_engine::ToolSecrets;
use serde::Deserialize;

use super::{SearchBackend, SearchError, SearchHit, SearchQuery, Source, TimeRange};
use super::{excerpt, plain, read_body, rejected_key, stored_key, transport_error};

/// The secret holding the Brave Search API key.
pub const BRAVE_API_KEY: &str = "BRAVE_API_KEY";
/// Where the real Brave Search API lives.
pub const BRAVE_DEFAULT_URL: &str = "https://api.search.brave.com";
/// Brave's largest `count` for web results.
const MAX_COUNT: usize = 20;

/// The Brave Search API (or anything serving its paths at another base URL).
pub struct Brave {
    base: String,
    client: reqwest::Client,
}

impl Brave {
    pub fn new(base: impl Into<String>, client: reqwest::Client) -> Self {
        Brave {
            base: base.into(),
            client,
        }
    }

    fn endpoint(&self, source: Source) -> String {
        let path = match source {
            Source::Web => "res/v1/web/search",
            Source::News => "res/v1/news/search",
        };
        format!("{}/{path}", self.base.trim_end_matches('/'))
    }
}

/// Brave's `freshness` values: past day, week, month, year.
fn freshness(range: TimeRange) -> Option<&'static str> {
    match range {
        TimeRange::Day => Some("pd"),
        TimeRange::Week => Some("pw"),
        TimeRange::Month => Some("pm"),
        TimeRange::Year => Some("py"),
        TimeRange::None => None,
    }
}

/// Web answers nest results under `web`; news answers carry them at the top.
#[derive(Deserialize)]
struct Response {
    #[serde(default)]
    web: Option<Results>,
    #[serde(default)]
    results: Option<Vec<Result_>>,
}

#[derive(Deserialize)]
struct Results {
    #[serde(default)]
    results: Vec<Result_>,
}

#[derive(Deserialize)]
struct Result_ {
    #[serde(default)]
    title: String,
    #[serde(default)]
    url: String,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    age: Option<String>,
    #[serde(default)]
    page_age: Option<String>,
}

#[async_trait]
impl SearchBackend for Brave {
    fn name(&self) -> &str {
        "brave"
    }

    fn gate(&self) -> String {
        format!("brave {}", self.base.trim_end_matches('/'))
    }

    fn required_secret(&self) -> Option<&str> {
        Some(BRAVE_API_KEY)
    }

    async fn search(
        &self,
        q: &SearchQuery,
        secrets: Option<&ToolSecrets>,
    ) -> Result<Vec<SearchHit>, SearchError> {
        let key = stored_key(secrets, BRAVE_API_KEY, "Brave Search").await?;
        let endpoint = self.endpoint(q.source);
        let mut url = reqwest::Url::parse(&endpoint).map_err(|e| {
            SearchError::Failed(format!(
                "search.brave_url in the config file ({}) is not a valid URL: {e}; the user must fix it",
                self.base
            ))
        })?;
        {
            let mut pairs = url.query_pairs_mut();
            pairs.append_pair("q", &q.query);
            pairs.append_pair("count", &q.limit.clamp(1, MAX_COUNT).to_string());
            if let Some(f) = freshness(q.time_range) {
                pairs.append_pair("freshness", f);
            }
        }
        let response = self
            .client
            .get(url)
            .header(reqwest::header::ACCEPT, "application/json")
            .header("X-Subscription-Token", key.trim())
            .send()
            .await
            .map_err(|e| transport_error("brave", &endpoint, &e))?;
        let status = response.status();
        let body = read_body(response, "brave", &endpoint).await?;
        match status.as_u16() {
            401 | 403 => return Err(rejected_key(BRAVE_API_KEY, "Brave Search", status.as_u16())),
            429 => {
                return Err(SearchError::Failed(
                    "the Brave Search API is rate limiting this key (HTTP 429); wait before searching again, and search less often".to_string(),
                ));
            }
            _ if !status.is_success() => {
                return Err(SearchError::Failed(format!(
                    "the Brave Search API answered HTTP {}: {}",
                    status.as_u16(),
                    excerpt(&body)
                )));
            }
            _ => {}
        }
        let parsed: Response = serde_json::from_str(&body).map_err(|e| {
            SearchError::Failed(format!(
                "the Brave Search API did not answer with search JSON ({e}): {}",
                excerpt(&body)
            ))
        })?;
        let results = match (parsed.web, parsed.results) {
            (Some(web), _) => web.results,
            (None, Some(results)) => results,
            (None, None) => Vec::new(),
        };
        Ok(results
            .into_iter()
            .filter(|r| !r.url.is_empty())
            .take(q.limit)
            .map(|r| SearchHit {
                title: plain(&r.title),
                url: r.url,
                snippet: plain(r.description.as_deref().unwrap_or_default()),
                date: r
                    .age
                    .or(r.page_age)
                    .map(|d| d.trim().to_string())
                    .filter(|d| !d.is_empty()),
            })
            .collect())
    }
}
