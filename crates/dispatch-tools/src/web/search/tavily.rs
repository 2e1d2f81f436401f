//! The Tavily search API: `POST {base}/search` with a JSON body and `Authorization: Bearer`;
//! the key is the stored secret `TAVILY_API_KEY`.

use async_trait::async_trait;
use dispatch_engine::ToolSecrets;
use serde::Deserialize;

use super::{SearchBackend, SearchError, SearchHit, SearchQuery, Source, TimeRange};
use super::{excerpt, plain, read_body, rejected_key, stored_key, transport_error};

/// The secret holding the Tavily API key.
pub const TAVILY_API_KEY: &str = "TAVILY_API_KEY";
/// Where the real Tavily API lives.
pub const TAVILY_DEFAULT_URL: &str = "https://api.tavily.com";
/// Tavily's largest `max_results`.
const MAX_RESULTS: usize = 20;

/// The Tavily search API (or anything serving its path at another base URL).
pub struct Tavily {
    base: String,
    client: reqwest::Client,
}

impl Tavily {
    pub fn new(base: impl Into<String>, client: reqwest::Client) -> Self {
        Tavily {
            base: base.into(),
            client,
        }
    }
}

#[derive(Deserialize)]
struct Response {
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
    content: Option<String>,
    /// Given for `topic: news`.
    #[serde(default)]
    published_date: Option<String>,
}

#[async_trait]
impl SearchBackend for Tavily {
    fn name(&self) -> &str {
        "tavily"
    }

    fn gate(&self) -> String {
        format!("tavily {}", self.base.trim_end_matches('/'))
    }

    fn required_secret(&self) -> Option<&str> {
        Some(TAVILY_API_KEY)
    }

    async fn search(
        &self,
        q: &SearchQuery,
        secrets: Option<&ToolSecrets>,
    ) -> Result<Vec<SearchHit>, SearchError> {
        let key = stored_key(secrets, TAVILY_API_KEY, "Tavily").await?;
        let endpoint = format!("{}/search", self.base.trim_end_matches('/'));
        let url = reqwest::Url::parse(&endpoint).map_err(|e| {
            SearchError::Failed(format!(
                "search.tavily_url in the config file ({}) is not a valid URL: {e}; the user must fix it",
                self.base
            ))
        })?;
        let mut body = serde_json::json!({
            "query": q.query,
            "topic": match q.source {
                Source::Web => "general",
                Source::News => "news",
            },
            "search_depth": "basic",
            "max_results": q.limit.clamp(1, MAX_RESULTS),
        });
        if q.time_range != TimeRange::None {
            body["time_range"] = q.time_range.as_str().into();
        }
        let response = self
            .client
            .post(url)
            .bearer_auth(key.trim())
            .json(&body)
            .send()
            .await
            .map_err(|e| transport_error("tavily", &endpoint, &e))?;
        let status = response.status();
        let text = read_body(response, "tavily", &endpoint).await?;
        match status.as_u16() {
            401 | 403 => return Err(rejected_key(TAVILY_API_KEY, "Tavily", status.as_u16())),
            // 429: rate limit; 432/433: the plan's credits are used up.
            429 | 432 | 433 => {
                return Err(SearchError::Failed(format!(
                    "the Tavily API refused the search for this key's plan or rate limit (status {}): {}",
                    status.as_u16(),
                    excerpt(&text)
                )));
            }
            _ if !status.is_success() => {
                return Err(SearchError::Failed(format!(
                    "the Tavily API answered status {}: {}",
                    status.as_u16(),
                    excerpt(&text)
                )));
            }
            _ => {}
        }
        let parsed: Response = serde_json::from_str(&text).map_err(|e| {
            SearchError::Failed(format!(
                "the Tavily API did not answer with search JSON ({e}): {}",
                excerpt(&text)
            ))
        })?;
        Ok(parsed
            .results
            .into_iter()
            .filter(|r| !r.url.is_empty())
            .take(q.limit)
            .map(|r| SearchHit {
                title: plain(&r.title),
                url: r.url,
                snippet: plain(r.content.as_deref().unwrap_or_default()),
                date: r
                    .published_date
                    .map(|d| d.trim().to_string())
                    .filter(|d| !d.is_empty()),
            })
            .collect())
    }
}
