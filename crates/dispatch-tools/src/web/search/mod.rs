//! Web search backends for search_web: one trait, the query and hit types every backend maps
//! to, and the configuration the user writes (which backends, where, how often).
//!
//! Backends talk to URLs the user configured (or the keyless defaults, DuckDuckGo and Google
//! News), not to URLs the model wrote, so they do not go through the model-URL network guard.

use std::time::Duration;

use async_trait::async_trait;
use dispatch_engine::ToolSecrets;
use serde::Deserialize;

mod brave;
mod duckduckgo;
mod google_news;
mod searxng;
mod tavily;
#[cfg(test)]
pub(crate) mod test_server;

pub use brave::{BRAVE_API_KEY, BRAVE_DEFAULT_URL, Brave};
pub use duckduckgo::{DUCKDUCKGO_DEFAULT_URL, DuckDuckGo};
pub use google_news::{GOOGLE_NEWS_DEFAULT_URL, GoogleNews};
pub use searxng::Searxng;
pub use tavily::{TAVILY_API_KEY, TAVILY_DEFAULT_URL, Tavily};

/// Which kind of results to search for; every backend maps both.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    #[default]
    Web,
    News,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Web => "web",
            Source::News => "news",
        }
    }
}

/// How recent results must be.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum TimeRange {
    Day,
    Week,
    Month,
    Year,
    #[default]
    None,
}

impl TimeRange {
    pub fn as_str(self) -> &'static str {
        match self {
            TimeRange::Day => "day",
            TimeRange::Week => "week",
            TimeRange::Month => "month",
            TimeRange::Year => "year",
            TimeRange::None => "none",
        }
    }
}

/// One search as every backend receives it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SearchQuery {
    pub query: String,
    pub source: Source,
    pub time_range: TimeRange,
    /// At most this many hits are returned.
    pub limit: usize,
}

/// One result, whatever backend found it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, Deserialize)]
pub struct SearchHit {
    pub title: String,
    pub url: String,
    pub snippet: String,
    /// Publication date or age as the backend gave it ("2026-11-30", "2 days ago").
    pub date: Option<String>,
}

/// Why a backend could not answer.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SearchError {
    /// The backend's key is missing or was rejected (HTTP 401/403).
    #[error("{message}")]
    Credential { key: String, message: String },
    /// Anything else, written for the model.
    #[error("{0}")]
    Failed(String),
}

/// The API key stored as `name`, for the service `service` ("Brave Search"); a missing one
/// is a credential error that points to store_secret.
pub(crate) async fn stored_key(
    secrets: Option<&ToolSecrets>,
    name: &str,
    service: &str,
) -> Result<String, SearchError> {
    let key = match secrets {
        Some(secrets) => secrets
            .get(name)
            .await
            .map_err(|e| SearchError::Failed(format!("cannot read the secret {name}: {e}")))?,
        None => None,
    };
    key.filter(|k| !k.trim().is_empty())
        .ok_or_else(|| SearchError::Credential {
            key: name.to_string(),
            message: format!(
                "no {service} API key is stored; ask the user to store it with store_secret(key=\"{name}\"), then retry"
            ),
        })
}

/// The service answered 401/403 to the key stored as `name`.
pub(crate) fn rejected_key(name: &str, service: &str, status: u16) -> SearchError {
    SearchError::Credential {
        key: name.to_string(),
        message: format!(
            "the {service} API rejected the stored key {name} (HTTP {status}); ask the user to store a valid key with store_secret(key=\"{name}\"), then retry"
        ),
    }
}

/// A search service search_web can ask.
#[async_trait]
pub trait SearchBackend: Send + Sync {
    /// Short lower-case name shown in results ("searxng", "brave", "tavily", "duckduckgo").
    fn name(&self) -> &str;
    /// Whether it searches this kind of results (the keyless defaults each do one).
    fn serves(&self, _source: Source) -> bool {
        true
    }
    /// The service's identity for spacing requests: every search_web in the process that
    /// talks to the same service (name and base URL) shares one gap, so concurrent calls queue.
    fn gate(&self) -> String {
        self.name().to_string()
    }
    /// The secret this backend cannot work without, if any; the backend counts as configured
    /// only once that secret is stored.
    fn required_secret(&self) -> Option<&str> {
        None
    }
    async fn search(
        &self,
        q: &SearchQuery,
        secrets: Option<&ToolSecrets>,
    ) -> Result<Vec<SearchHit>, SearchError>;
}

/// A backend's name in the configuration's preferred order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    Searxng,
    Brave,
    Tavily,
    /// DuckDuckGo's HTML results (keyless; `source=web` only).
    DuckDuckGo,
    /// Google News' search feed (keyless; `source=news` only).
    GoogleNews,
}

/// The user's search settings (config file `[search]`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SearchConfig {
    /// Base URL of a SearXNG instance with the JSON format enabled (`search.searxng_url`).
    pub searxng_url: Option<String>,
    /// Base URL of the Brave Search API; `None` is the real one.
    pub brave_url: Option<String>,
    /// Base URL of the Tavily API; `None` is the real one.
    pub tavily_url: Option<String>,
    /// Base URL of DuckDuckGo's HTML endpoint; `None` is the real one.
    pub duckduckgo_url: Option<String>,
    /// Base URL of Google News; `None` is the real one.
    pub google_news_url: Option<String>,
    /// The least time between the end of one request to a backend and the start of the next.
    pub min_gap: Duration,
    /// The least gap for DuckDuckGo, whatever `min_gap` says (the seed keeps 5 s: DuckDuckGo
    /// answers quicker searches with its bot check).
    pub duckduckgo_min_gap: Duration,
    /// Backends tried in this order; the first configured one that serves the source answers
    /// (the keyless defaults come last, so a configured backend always wins).
    pub order: Vec<BackendKind>,
    /// Limit on one backend request.
    pub timeout: Duration,
}

impl Default for SearchConfig {
    fn default() -> Self {
        SearchConfig {
            searxng_url: None,
            brave_url: None,
            tavily_url: None,
            duckduckgo_url: None,
            google_news_url: None,
            min_gap: Duration::from_secs(1),
            duckduckgo_min_gap: Duration::from_secs(5),
            order: vec![
                BackendKind::Searxng,
                BackendKind::Brave,
                BackendKind::Tavily,
                BackendKind::DuckDuckGo,
                BackendKind::GoogleNews,
            ],
            timeout: Duration::from_secs(20),
        }
    }
}

/// Text from a backend as the model should read it: tags dropped, common entities decoded,
/// whitespace collapsed (Brave marks matches with `<strong>`).
pub(crate) fn plain(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut in_tag = false;
    for c in text.chars() {
        match c {
            '<' => in_tag = true,
            '>' if in_tag => in_tag = false,
            _ if !in_tag => out.push(c),
            _ => {}
        }
    }
    let decoded = out
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&#x27;", "'")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&nbsp;", " ")
        .replace("&amp;", "&");
    decoded.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// A short excerpt of an error body for a message (bodies can be whole HTML pages).
pub(crate) fn excerpt(body: &str) -> String {
    const MAX: usize = 200;
    let flat = body.split_whitespace().collect::<Vec<_>>().join(" ");
    match flat.char_indices().nth(MAX) {
        Some((at, _)) => format!("{}…", &flat[..at]),
        None => flat,
    }
}

/// The most bytes read from one backend answer (a page of results is a few tens of KiB).
pub(crate) const MAX_BODY: usize = 2 * 1024 * 1024;

/// The answer's body as text, refused past [`MAX_BODY`] so a broken backend cannot fill memory.
pub(crate) async fn read_body(
    mut response: reqwest::Response,
    backend: &str,
    url: &str,
) -> Result<String, SearchError> {
    let mut body = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| transport_error(backend, url, &e))?
    {
        if body.len() + chunk.len() > MAX_BODY {
            return Err(SearchError::Failed(format!(
                "the {backend} search backend at {url} sent more than {} MiB, which is not a search answer; check the search settings in the config file",
                MAX_BODY / (1024 * 1024)
            )));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(String::from_utf8_lossy(&body).into_owned())
}

/// The failure for a request that never got an answer.
pub(crate) fn transport_error(backend: &str, url: &str, e: &reqwest::Error) -> SearchError {
    let what = if e.is_timeout() {
        "timed out".to_string()
    } else if e.is_connect() {
        "could not connect".to_string()
    } else {
        format!("failed: {e}")
    };
    SearchError::Failed(format!(
        "the {backend} search backend at {url} {what}; try again later, or check the search settings in the config file"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_drops_tags_and_decodes_entities() {
        assert_eq!(
            plain("The <strong>Rust</strong>\n  book &amp; &quot;async&quot; &lt;3"),
            "The Rust book & \"async\" <3"
        );
    }

    #[test]
    fn excerpt_keeps_the_head_of_a_long_body() {
        let long = "word ".repeat(100);
        let cut = excerpt(&long);
        assert_eq!(cut.chars().count(), 201);
        assert!(cut.ends_with('…'));
        assert_eq!(excerpt(" short\n body "), "short body");
    }
}
