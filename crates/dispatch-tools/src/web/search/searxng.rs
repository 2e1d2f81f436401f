//! SearXNG (a self-hostable metasearch engine): `GET {base}/search?q=…&format=json`.
//! The instance must have the JSON format enabled (`search.formats` in its settings.yml);
//! otherwise it answers 403 (reported without the code, which would read as a credential error).

use async_trait::async_trait;
use dispatch_engine::ToolSecrets;
use serde::Deserialize;

use super::{SearchBackend, SearchError, SearchHit, SearchQuery, Source, TimeRange};
use super::{excerpt, plain, read_body, transport_error};

/// A SearXNG instance the user configured.
pub struct Searxng {
    base: String,
    client: reqwest::Client,
}

impl Searxng {
    pub fn new(base: impl Into<String>, client: reqwest::Client) -> Self {
        Searxng {
            base: base.into(),
            client,
        }
    }

    fn url(&self, q: &SearchQuery) -> Result<reqwest::Url, SearchError> {
        let endpoint = format!("{}/search", self.base.trim_end_matches('/'));
        let mut url = reqwest::Url::parse(&endpoint).map_err(|e| {
            SearchError::Failed(format!(
                "search.searxng_url in the config file ({}) is not a valid URL: {e}; the user must fix it",
                self.base
            ))
        })?;
        {
            let mut pairs = url.query_pairs_mut();
            pairs.append_pair("q", &q.query);
            pairs.append_pair("format", "json");
            pairs.append_pair(
                "categories",
                match q.source {
                    Source::Web => "general",
                    Source::News => "news",
                },
            );
            if q.time_range != TimeRange::None {
                pairs.append_pair("time_range", q.time_range.as_str());
            }
        }
        Ok(url)
    }
}

/// The part of SearXNG's JSON answer we read (`results[]`).
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
    #[serde(default, rename = "publishedDate")]
    published_date: Option<String>,
}

/// `2026-11-29T08:00:00` → `2026-11-29`; anything else is kept as it is.
fn date_part(date: &str) -> String {
    let date = date.trim();
    match date.split_once('T') {
        Some((day, _)) if day.len() == 10 && day.as_bytes()[4] == b'-' => day.to_string(),
        _ => date.to_string(),
    }
}

#[async_trait]
impl SearchBackend for Searxng {
    fn name(&self) -> &str {
        "searxng"
    }

    fn gate(&self) -> String {
        format!("searxng {}", self.base.trim_end_matches('/'))
    }

    async fn search(
        &self,
        q: &SearchQuery,
        _secrets: Option<&ToolSecrets>,
    ) -> Result<Vec<SearchHit>, SearchError> {
        let url = self.url(q)?;
        let shown = format!("{}/search", self.base.trim_end_matches('/'));
        let response = self
            .client
            .get(url)
            .header(reqwest::header::ACCEPT, "application/json")
            .send()
            .await
            .map_err(|e| transport_error("searxng", &shown, &e))?;
        let status = response.status();
        let body = read_body(response, "searxng", &shown).await?;
        if status == reqwest::StatusCode::FORBIDDEN {
            return Err(SearchError::Failed(format!(
                "the SearXNG instance at {shown} does not serve the JSON format; the user must add `json` to search.formats in its settings.yml"
            )));
        }
        if status == reqwest::StatusCode::TOO_MANY_REQUESTS {
            return Err(SearchError::Failed(format!(
                "the SearXNG instance at {shown} is rate limiting (HTTP 429); wait a minute before searching again"
            )));
        }
        if !status.is_success() {
            return Err(SearchError::Failed(format!(
                "the SearXNG instance at {shown} answered HTTP {}: {}",
                status.as_u16(),
                excerpt(&body)
            )));
        }
        let parsed: Response = serde_json::from_str(&body).map_err(|e| {
            SearchError::Failed(format!(
                "the SearXNG instance at {shown} did not answer with search JSON ({e}): {}",
                excerpt(&body)
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
                    .filter(|d| !d.trim().is_empty())
                    .map(|d| date_part(&d)),
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_keep_their_day() {
        assert_eq!(date_part("2026-11-29T08:00:00"), "2026-11-29");
        assert_eq!(date_part("2026-11-29"), "2026-11-29");
        assert_eq!(date_part("yesterday"), "yesterday");
    }
}
