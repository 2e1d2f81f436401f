//! `search_web`: search the web (or the news) through the first backend the user configured,
//! else the keyless defaults (DuckDuckGo for the web, Google News for the news), with a
//! per-session 30-minute cache and a minimum gap between requests to one service that holds
//! across the whole process.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use dispatch_engine::{
    CachePolicy, CachePut, Effect, ToolContext, ToolError, ToolOutput, ToolSecrets, ToolSpec,
};
use dispatch_store::{CACHE_TTL, CacheScope, ResultCache};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use super::filter::{DeterministicFilter, ResultFilter};
use super::search::{
    BRAVE_DEFAULT_URL, BackendKind, Brave, DUCKDUCKGO_DEFAULT_URL, DuckDuckGo,
    GOOGLE_NEWS_DEFAULT_URL, GoogleNews, SearchBackend, SearchConfig, SearchError, SearchHit,
    SearchQuery, Searxng, Source, TAVILY_DEFAULT_URL, Tavily, TimeRange,
};
use crate::{BuiltinTool, Stores};

/// The most results one call shows; backends are always asked for this many so that one
/// cache entry serves every `limit`.
pub const MAX_RESULTS: usize = 20;
const DEFAULT_RESULTS: usize = 10;
/// Snippets are cut to about this many characters.
const SNIPPET_CHARS: usize = 300;

fn default_limit() -> usize {
    DEFAULT_RESULTS
}

/// Search the web.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchWebArgs {
    /// What to search for, as you would type it into a search engine.
    #[schemars(length(min = 1, max = 400))]
    query: String,
    /// "web" (default) for pages, "news" for news articles.
    #[serde(default)]
    source: Source,
    /// Only results from the past "day", "week", "month" or "year"; "none" (default) for any time.
    #[serde(default)]
    time_range: TimeRange,
    /// How many results to show, 1-20 (default 10).
    #[serde(default = "default_limit")]
    #[schemars(range(min = 1, max = 20))]
    limit: usize,
    /// Skip this session's 30-minute cache and search again.
    #[serde(default)]
    force: bool,
}

/// What the cache keeps for one search: the unfiltered hits and who found them.
#[derive(Serialize, Deserialize)]
struct CachedSearch {
    backend: String,
    hits: Vec<SearchHit>,
}

/// When the last request to one service finished; shared by everything in the process that
/// talks to that service.
type ServiceGate = Arc<tokio::sync::Mutex<Option<Instant>>>;

/// The process-wide gate for a service (a backend's [`SearchBackend::gate`]).
fn gate(key: &str) -> ServiceGate {
    static GATES: OnceLock<std::sync::Mutex<HashMap<String, ServiceGate>>> = OnceLock::new();
    let mut gates = GATES
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    gates.entry(key.to_string()).or_default().clone()
}

/// A backend, the least gap between two requests to it, and its service's gate.
struct Throttled {
    backend: Arc<dyn SearchBackend>,
    gap: Duration,
    last: ServiceGate,
}

impl Throttled {
    fn new(backend: Arc<dyn SearchBackend>, gap: Duration) -> Self {
        let last = gate(&backend.gate());
        Throttled { backend, gap, last }
    }
}

/// The search_web tool.
pub struct SearchWeb {
    backends: Vec<Throttled>,
    /// Why no HTTP client could be built, told on every call instead of panicking at start-up.
    client_error: Option<String>,
    /// The result filter run on every return (the built-in one unless configured).
    filter: Arc<dyn ResultFilter>,
    /// Where earlier searches are looked up (pass 3 writes them, from `ToolOutput::cache_put`).
    cache: Option<Arc<dyn ResultCache>>,
}

impl SearchWeb {
    /// search_web over the backends `config` names, in its order.
    pub fn new(config: SearchConfig, stores: &Stores) -> Self {
        let client = super::client::builder()
            .timeout(config.timeout)
            // An API key header (Brave's X-Subscription-Token) must not follow a redirect to
            // another host, and no proxy from the environment sees it.
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .user_agent(concat!("tooldispatch/", env!("CARGO_PKG_VERSION")))
            .build();
        let client = match client {
            Ok(client) => client,
            Err(e) => {
                let mut tool = SearchWeb::with_throttled(Vec::new(), stores);
                tool.client_error = Some(format!("the HTTP client could not start: {e}"));
                return tool;
            }
        };
        let gap = config.min_gap;
        let mut backends = Vec::new();
        for kind in &config.order {
            let backend: Arc<dyn SearchBackend> = match kind {
                BackendKind::Searxng => match config.searxng_url.as_deref().map(str::trim) {
                    Some(url) if !url.is_empty() => Arc::new(Searxng::new(url, client.clone())),
                    _ => continue,
                },
                BackendKind::Brave => {
                    let url = config.brave_url.as_deref().unwrap_or(BRAVE_DEFAULT_URL);
                    Arc::new(Brave::new(url, client.clone()))
                }
                BackendKind::Tavily => {
                    let url = config.tavily_url.as_deref().unwrap_or(TAVILY_DEFAULT_URL);
                    Arc::new(Tavily::new(url, client.clone()))
                }
                BackendKind::DuckDuckGo => {
                    let url = non_empty(config.duckduckgo_url.as_deref())
                        .unwrap_or(DUCKDUCKGO_DEFAULT_URL);
                    let backend = Arc::new(DuckDuckGo::new(url, client.clone()));
                    backends.push(Throttled::new(backend, gap.max(config.duckduckgo_min_gap)));
                    continue;
                }
                BackendKind::GoogleNews => {
                    let url = non_empty(config.google_news_url.as_deref())
                        .unwrap_or(GOOGLE_NEWS_DEFAULT_URL);
                    Arc::new(GoogleNews::new(url, client.clone()))
                }
            };
            backends.push(Throttled::new(backend, gap));
        }
        SearchWeb::with_throttled(backends, stores)
    }

    /// search_web over these backends, tried in order; the first configured one answers.
    pub fn with_backends(
        backends: Vec<Arc<dyn SearchBackend>>,
        min_gap: Duration,
        stores: &Stores,
    ) -> Self {
        let backends = backends
            .into_iter()
            .map(|backend| Throttled::new(backend, min_gap))
            .collect();
        SearchWeb::with_throttled(backends, stores)
    }

    fn with_throttled(backends: Vec<Throttled>, stores: &Stores) -> Self {
        SearchWeb {
            backends,
            client_error: None,
            cache: stores.cache.clone(),
            filter: Arc::new(DeterministicFilter),
        }
    }

    /// The first backend for `source` that can work now: needs no secret, or its secret is
    /// stored.
    async fn pick(
        &self,
        secrets: Option<&ToolSecrets>,
        source: Source,
    ) -> Result<&Throttled, ToolError> {
        let serving = || {
            self.backends
                .iter()
                .filter(move |t| t.backend.serves(source))
        };
        for t in serving() {
            match t.backend.required_secret() {
                None => return Ok(t),
                Some(name) => {
                    if let Some(secrets) = secrets
                        && let Ok(Some(value)) = secrets.get(name).await
                        && !value.trim().is_empty()
                    {
                        return Ok(t);
                    }
                }
            }
        }
        let secrets: Vec<&str> = serving()
            .filter_map(|t| t.backend.required_secret())
            .collect();
        Err(match secrets.first() {
            Some(key) => ToolError::Credential {
                key: Some(key.to_string()),
                message: format!(
                    "no web search backend is configured. Either the user sets search.searxng_url in the config file to a SearXNG instance with the JSON format enabled, or an API key is stored: ask the user to store it with store_secret(key=\"{key}\"){}, then retry",
                    secrets[1..]
                        .iter()
                        .map(|k| format!(" or store_secret(key=\"{k}\")"))
                        .collect::<String>()
                ),
            },
            None => ToolError::failed(
                "no web search backend is configured; the user must set search.searxng_url in the config file to a SearXNG instance with the JSON format enabled",
            ),
        })
    }

    /// One request to `t`, at least its gap after the previous request to its service (from
    /// anywhere in the process) finished; concurrent calls wait their turn, and a cancelled
    /// call stops waiting.
    async fn throttled_search(
        &self,
        t: &Throttled,
        q: &SearchQuery,
        cx: &ToolContext,
    ) -> Result<Vec<SearchHit>, ToolError> {
        let cancelled = || ToolError::failed("search_web was cancelled before the search finished");
        let mut last = tokio::select! {
            guard = t.last.lock() => guard,
            () = cx.cancel.cancelled() => return Err(cancelled()),
        };
        if let Some(previous) = *last {
            tokio::select! {
                () = tokio::time::sleep_until(previous + t.gap) => {}
                () = cx.cancel.cancelled() => return Err(cancelled()),
            }
        }
        let result = tokio::select! {
            result = t.backend.search(q, cx.secrets.as_ref()) => result,
            () = cx.cancel.cancelled() => Err(SearchError::Failed(
                "search_web was cancelled before the search finished".to_string(),
            )),
        };
        // The gap counts from when this request ended, so the next one starts after it.
        *last = Some(Instant::now());
        drop(last);
        result.map_err(|e| match e {
            SearchError::Credential { key, message } => ToolError::Credential {
                key: Some(key),
                message,
            },
            SearchError::Failed(message) => ToolError::Failed(message),
        })
    }

    /// The same tool with another result filter (a model-backed one from the config).
    pub fn with_filter(mut self, filter: Arc<dyn ResultFilter>) -> Self {
        self.filter = filter;
        self
    }

    /// The one place the returned text is made from a search's outcome: the result filter
    /// stage (DESIGN §3.7), over cached and fresh text alike, keeps what is relevant to the
    /// query within the result budget.
    async fn present(&self, text: String, args: &SearchWebArgs, budget: usize) -> String {
        let filtered = self.filter.filter(&text, Some(&args.query), budget).await;
        match filtered.note {
            Some(note) => format!("{note}\n{}", filtered.text),
            None => filtered.text,
        }
    }
}

fn non_empty(url: Option<&str>) -> Option<&str> {
    url.map(str::trim).filter(|u| !u.is_empty())
}

/// The cache key: the canonical request (DESIGN §3.8: query, source, time range).
fn cache_key(query: &str, source: Source, time_range: TimeRange) -> String {
    let request = serde_json::json!({
        "query": query,
        "source": source.as_str(),
        "time_range": time_range.as_str(),
    });
    format!("search_web|{request}")
}

fn range_label(range: TimeRange) -> &'static str {
    match range {
        TimeRange::Day => "past day",
        TimeRange::Week => "past week",
        TimeRange::Month => "past month",
        TimeRange::Year => "past year",
        TimeRange::None => "any time",
    }
}

fn cut(text: &str, max_chars: usize) -> String {
    match text.char_indices().nth(max_chars) {
        Some((at, _)) => format!("{}…", text[..at].trim_end()),
        None => text.to_string(),
    }
}

/// The numbered list the model reads.
fn render(args: &SearchWebArgs, query: &str, found: &CachedSearch) -> String {
    let scope = format!(
        "({}, {}) via {}",
        args.source.as_str(),
        range_label(args.time_range),
        found.backend
    );
    if found.hits.is_empty() {
        return format!(
            "no results for \"{query}\" {scope}; try fewer or other words, or a wider time_range"
        );
    }
    let shown = found.hits.len().min(args.limit);
    let noun = if shown == 1 { "result" } else { "results" };
    let mut out = format!("{shown} {noun} for \"{query}\" {scope}:\n");
    for (i, hit) in found.hits.iter().take(shown).enumerate() {
        let title = if hit.title.is_empty() {
            "(untitled)"
        } else {
            hit.title.as_str()
        };
        out.push_str(&format!("{}. {title}", i + 1));
        if let Some(date) = &hit.date {
            out.push_str(&format!(" ({date})"));
        }
        out.push_str(&format!("\n   {}\n", hit.url));
        if !hit.snippet.is_empty() {
            out.push_str(&format!("   {}\n", cut(&hit.snippet, SNIPPET_CHARS)));
        }
    }
    out.trim_end().to_string()
}

#[async_trait]
impl BuiltinTool for SearchWeb {
    const NAME: &'static str = "search_web";
    const DESCRIPTION: &'static str = "Search the web or the news and get a numbered list of results (title, URL, snippet, date). Use fetch_page on a result's URL to read it. Results are cached for this session for 30 minutes; force=true searches again.";
    type Args = SearchWebArgs;

    fn declare(&self, spec: ToolSpec) -> ToolSpec {
        spec.read_only()
            .concurrent()
            .effect(Effect::Observes)
            .cache(CachePolicy::Session(CACHE_TTL))
    }

    async fn run(&self, cx: ToolContext, args: SearchWebArgs) -> Result<ToolOutput, ToolError> {
        if let Some(e) = &self.client_error {
            return Err(ToolError::failed(e.clone()));
        }
        let query = args.query.split_whitespace().collect::<Vec<_>>().join(" ");
        if query.is_empty() {
            return Err(ToolError::failed(
                "query is empty; send the words to search for",
            ));
        }
        let key = cache_key(&query, args.source, args.time_range);
        let scope = CacheScope::Session {
            session: cx.session_id.to_string(),
        };
        if !args.force
            && let Some(cache) = &self.cache
            // A cache that cannot be read is a miss: the search itself still works.
            && let Ok(Some(hit)) = cache.cache_get(&scope, &key).await
            && let Ok(found) = serde_json::from_str::<CachedSearch>(&hit.value)
        {
            let text = format!("{}\n{}", hit.note(), render(&args, &query, &found));
            return Ok(ToolOutput::text(
                self.present(text, &args, cx.result_budget).await,
            ));
        }
        let backend = self.pick(cx.secrets.as_ref(), args.source).await?;
        let request = SearchQuery {
            query: query.clone(),
            source: args.source,
            time_range: args.time_range,
            limit: MAX_RESULTS,
        };
        let hits = self.throttled_search(backend, &request, &cx).await?;
        let found = CachedSearch {
            backend: backend.backend.name().to_string(),
            hits,
        };
        // The entry holds the unfiltered hits (seed §5); pass 3 writes it once the result is
        // committed, with stored secrets redacted like everything else the round keeps.
        let cache_put = serde_json::to_string(&found)
            .ok()
            .filter(|_| !found.hits.is_empty())
            .map(|value| CachePut {
                scope,
                key,
                value,
                ttl: CACHE_TTL,
            });
        let text = render(&args, &query, &found);
        Ok(ToolOutput {
            cache_put,
            ..ToolOutput::text(self.present(text, &args, cx.result_budget).await)
        })
    }
}

#[cfg(test)]
#[path = "search_web_tests.rs"]
mod tests;
