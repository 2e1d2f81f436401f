//! `fetch_page`: one web page as Markdown (its main content), cleaned HTML or a JSON outline.
//!
//! The page goes through the network guard like every URL the model names. No browser runs:
//! a page that builds its content with scripts returns what the server sends. The unfiltered
//! text is cached for 30 minutes and shared across sessions (seed §5: the handler writes its
//! own entry); the result filter runs on every return, cached or fresh (DESIGN §3.7). Failed
//! URLs go on a skip list: 4xx for good, 5xx for 12 hours, an empty page for 72 hours, unless
//! `force`.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use dispatch_engine::{Effect, Tool, ToolContext, ToolError, ToolOutput, ToolSpec};
use dispatch_store::{CACHE_TTL, CacheScope, FileAction};
use reqwest::Method;
use reqwest::cookie::{CookieStore, Jar};
use reqwest::header::{ACCEPT, CONTENT_TYPE, COOKIE, HeaderMap, HeaderValue, SET_COOKIE};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use url::Url;

use super::client::{FetchError, Outgoing, WebClient, read_capped};
use super::extract::{PageFormat, decode_html, extract};
use super::filter::DeterministicFilter;
use super::guard::NetPolicy;
use crate::files::confine::Confinement;
use crate::files::write::{Recorder, blocking, human_bytes, io_error, write_atomic};
use crate::{parse_args, schema_of};

/// Fetch one web page and return its readable content.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct FetchPageArgs {
    /// The page's http(s) URL.
    #[schemars(length(min = 1, max = 8192))]
    link: String,
    /// markdown (default): the main content; html: the main content as cleaned HTML; json:
    /// an outline of title, headings and links.
    #[serde(default, rename = "type")]
    format: PageFormat,
    /// Keep links (made absolute) in markdown; off by default to save space.
    #[serde(default)]
    keep_links: bool,
    /// What you are looking for on the page; long pages keep the sections about it.
    #[serde(default)]
    #[schemars(length(max = 400))]
    focus: Option<String>,
    /// Send and keep this session's cookies (default true).
    #[serde(default = "yes")]
    same_session: bool,
    /// Also save the text under this session's data directory and return the path.
    #[serde(default)]
    save: bool,
    /// Also save the text as this new file in the work directory (never overwrites).
    #[serde(default)]
    save_to: Option<String>,
    /// Fetch again even if the page is cached or on the skip list.
    #[serde(default)]
    force: bool,
}

fn yes() -> bool {
    true
}

/// Most bytes of a page read; the rest is dropped with a note.
const MAX_PAGE_BYTES: usize = 8 * 1024 * 1024;
/// A 5xx answer is not asked again for this long, unless `force`.
const SKIP_5XX: Duration = Duration::from_secs(12 * 60 * 60);
/// A page with no readable text is not fetched again for this long, unless `force`.
const SKIP_EMPTY: Duration = Duration::from_secs(72 * 60 * 60);
/// "Never" for a 4xx: a year, so the entry still leaves the store eventually.
const SKIP_4XX: Duration = Duration::from_secs(365 * 24 * 60 * 60);
/// Sessions whose cookies are kept in this process; the oldest jar goes beyond it.
const MAX_JARS: usize = 256;

pub struct FetchPage {
    spec: ToolSpec,
    client: Result<WebClient, String>,
    jars: Mutex<Vec<(String, Arc<Jar>)>>,
}

impl FetchPage {
    pub fn new(policy: Arc<NetPolicy>) -> Self {
        FetchPage {
            spec: ToolSpec::new(
                "fetch_page",
                "Read one web page: its main content as Markdown (default), cleaned HTML, or a JSON outline of headings and links. Give `focus` to keep the parts of a long page about it. Pages are cached for 30 minutes and shared across sessions; force=true fetches again. Scripts do not run: a page built by JavaScript returns what the server sends.",
                schema_of::<FetchPageArgs>(),
            )
            .read_only()
            .concurrent()
            .effect(Effect::Observes)
            .timeout(Duration::from_secs(90)),
            client: WebClient::new(policy),
            jars: Mutex::default(),
        }
    }

    /// This session's cookie jar, made on first use.
    fn jar(&self, session: &str) -> Arc<Jar> {
        let mut jars = self.jars.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(i) = jars.iter().position(|(s, _)| s == session) {
            let entry = jars.remove(i);
            let jar = entry.1.clone();
            jars.push(entry);
            return jar;
        }
        if jars.len() >= MAX_JARS {
            jars.remove(0);
        }
        let jar = Arc::new(Jar::default());
        jars.push((session.to_string(), jar.clone()));
        jar
    }
}

#[async_trait]
impl Tool for FetchPage {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, cx: ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        let args: FetchPageArgs = parse_args("fetch_page", args)?;
        let client = self
            .client
            .as_ref()
            .map_err(|e| ToolError::failed(e.clone()))?;
        let url = Url::parse(args.link.trim()).map_err(|e| {
            ToolError::failed(format!(
                "link {:?} is not a valid absolute URL ({e}); write it in full, e.g. https://example.com/page",
                args.link
            ))
        })?;
        let key = cache_key(&url, args.format, args.keep_links);
        let skip_key = format!("fetch_page-skip|{url}");
        let cache = cx.cache.clone();

        let mut page = None;
        if !args.force
            && let Some(cache) = &cache
        {
            // A cache that cannot be read is a miss: the fetch itself still works.
            if let Ok(Some(hit)) = cache.cache_get(&CacheScope::Shared, &key).await {
                page = Some((hit.note(), hit.value));
            } else if let Ok(Some(skip)) = cache.cache_get(&CacheScope::Shared, &skip_key).await {
                return Err(ToolError::failed(format!(
                    "{url} blocked: {} {} ago; it is on the skip list, so it was not fetched again. Pass force=true to try anyway",
                    skip.value,
                    age(skip.age_ms)
                )));
            }
        }
        let (note, text) = match page {
            Some(cached) => cached,
            None => {
                let jar = args.same_session.then(|| self.jar(&cx.session_id));
                let fetched =
                    fetch(client, &url, jar.as_deref(), args.format, args.keep_links).await;
                match fetched {
                    Ok(text) => {
                        if let Some(cache) = &cache {
                            // The unfiltered text, shared; a failed write costs a later fetch.
                            let _ = cache
                                .cache_put(&CacheScope::Shared, &key, &text, CACHE_TTL)
                                .await;
                        }
                        (String::new(), text)
                    }
                    Err(Failure { message, skip }) => {
                        if let (Some(cache), Some((why, ttl))) = (&cache, skip) {
                            let _ = cache
                                .cache_put(&CacheScope::Shared, &skip_key, &why, ttl)
                                .await;
                        }
                        return Err(ToolError::failed(message));
                    }
                }
            }
        };

        let mut paths = Vec::new();
        let mut saved = Vec::new();
        if args.save {
            let path = save_private(&cx, &url, args.format, &text).await?;
            saved.push(format!("saved to {}", path.display()));
        }
        if let Some(target) = &args.save_to {
            let (path, shown) = save_to(&cx, target, &text).await?;
            saved.push(format!("saved to {shown}"));
            paths.push(path);
        }
        let filtered = DeterministicFilter.apply(&text, args.focus.as_deref(), cx.result_budget);
        let mut out = String::new();
        for line in [Some(note), filtered.note, Some(saved.join("; "))]
            .into_iter()
            .flatten()
            .filter(|l| !l.is_empty())
        {
            out.push_str(&line);
            out.push('\n');
        }
        out.push_str(&filtered.text);
        Ok(ToolOutput::text(out).with_paths(paths))
    }
}

/// Why a fetch failed, and whether the URL goes on the skip list (and for how long).
struct Failure {
    message: String,
    skip: Option<(String, Duration)>,
}

impl Failure {
    fn plain(message: String) -> Self {
        Failure {
            message,
            skip: None,
        }
    }
}

/// Fetch and extract; the text returned is what the cache keeps.
async fn fetch(
    client: &WebClient,
    url: &Url,
    jar: Option<&Jar>,
    format: PageFormat,
    keep_links: bool,
) -> Result<String, Failure> {
    let mut headers = HeaderMap::new();
    headers.insert(
        ACCEPT,
        HeaderValue::from_static(
            "text/html,application/xhtml+xml;q=0.9,text/plain;q=0.8,*/*;q=0.5",
        ),
    );
    if let Some(cookies) = jar.and_then(|j| j.cookies(url)) {
        headers.insert(COOKIE, cookies);
    }
    let sent = client
        .send(Outgoing {
            method: Method::GET,
            url: url.clone(),
            headers,
            body: None,
            secret_headers: Vec::new(),
        })
        .await
        .map_err(|e| match e {
            FetchError::Refused(r) => Failure::plain(r.message),
            FetchError::Failed(m) => Failure::plain(m),
        })?;
    let final_url = sent.url.clone();
    let mut response = sent.response;
    if let Some(jar) = jar {
        let mut set = response.headers().get_all(SET_COOKIE).iter();
        jar.set_cookies(&mut set, &final_url);
    }
    let status = response.status();
    let content_type = response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let body = read_capped(&mut response, MAX_PAGE_BYTES, |_| {})
        .await
        .map_err(Failure::plain)?;
    if !status.is_success() {
        let reason = status.canonical_reason().unwrap_or("");
        let (ttl, retry) = if status.is_client_error() {
            (SKIP_4XX, "it is not fetched again")
        } else {
            (SKIP_5XX, "it is not fetched again for 12 hours")
        };
        return Err(Failure {
            message: format!(
                "{url} answered {} {reason}; {retry} unless force=true. Look for another source, or use http_request to see the response itself",
                status.as_u16()
            ),
            skip: Some((format!("it answered {} {reason}", status.as_u16()), ttl)),
        });
    }
    let kind = content_type
        .as_deref()
        .and_then(|t| t.split(';').next())
        .map(|t| t.trim().to_ascii_lowercase())
        .unwrap_or_else(|| "text/html".to_string());
    let cut = if body.truncated {
        format!(
            "\n\n[the page is longer than {}; only its start was read]",
            human_bytes(MAX_PAGE_BYTES as u64)
        )
    } else {
        String::new()
    };
    let text = if kind.contains("html") || kind.contains("xml") {
        let html = decode_html(&body.bytes, content_type.as_deref());
        let page = extract(&html, final_url.as_str(), format, keep_links)
            .map_err(|e| Failure::plain(e.to_string()))?;
        match (page.title, format) {
            (Some(title), PageFormat::Markdown) if !title.trim().is_empty() => {
                format!("# {}\n\n{}", title.trim(), page.text)
            }
            (_, _) => page.text,
        }
    } else if kind.starts_with("text/") || kind.ends_with("json") {
        decode_html(&body.bytes, content_type.as_deref())
    } else {
        return Err(Failure::plain(format!(
            "{url} is {kind}, not a web page; use download_file to save it, or http_request to look at it"
        )));
    };
    if text.trim().is_empty() {
        return Err(Failure {
            message: format!(
                "{url} has no readable text (it may be built by scripts, which do not run here); it is not fetched again for 72 hours unless force=true"
            ),
            skip: Some(("it had no readable text".to_string(), SKIP_EMPTY)),
        });
    }
    let moved = if final_url != *url {
        format!("(redirected to {final_url})\n")
    } else {
        String::new()
    };
    Ok(format!("{moved}{text}{cut}"))
}

/// The canonical request (DESIGN §3.8): the URL and the options that change the text.
fn cache_key(url: &Url, format: PageFormat, keep_links: bool) -> String {
    let request = json!({"url": url.as_str(), "type": format, "keep_links": keep_links});
    format!("fetch_page|{request}")
}

fn age(ms: u64) -> String {
    let secs = ms / 1000;
    match secs {
        0..60 => format!("{secs} s"),
        60..3600 => format!("{} min", secs / 60),
        3600..86_400 => format!("{} h", secs / 3600),
        _ => format!("{} days", secs / 86_400),
    }
}

/// `<data>/sessions/<id>/pages/<host>-<hash>.<ext>`: private to the session, no confirmation.
async fn save_private(
    cx: &ToolContext,
    url: &Url,
    format: PageFormat,
    text: &str,
) -> Result<std::path::PathBuf, ToolError> {
    let Some(data) = &cx.data_dir else {
        return Err(ToolError::failed(
            "save needs a data directory, and this dispatcher has none; use save_to with a path in the work directory",
        ));
    };
    let dir = dispatch_engine::shaping::session_dir(data, &cx.session_id).join("pages");
    let host = dispatch_engine::shaping::safe_component(url.host_str().unwrap_or("page"));
    let ext = match format {
        PageFormat::Markdown => "md",
        PageFormat::Html => "html",
        PageFormat::Outline => "json",
    };
    let name = format!(
        "{host}-{}.{ext}",
        &blake3::hash(url.as_str().as_bytes()).to_hex()[..12]
    );
    let path = dir.join(name);
    let (target, bytes) = (path.clone(), text.as_bytes().to_vec());
    blocking(move || {
        std::fs::create_dir_all(&dir).map_err(|e| io_error("create", "the pages directory", &e))?;
        write_atomic(&target, &bytes, None).map_err(|e| io_error("write", "the saved page", &e))
    })
    .await?;
    Ok(path)
}

/// A new file in the work directory, confined like the file tools and recorded in the file
/// history. It never replaces a file: fetch_page runs without asking, so it may only add.
async fn save_to(
    cx: &ToolContext,
    target: &str,
    text: &str,
) -> Result<(std::path::PathBuf, String), ToolError> {
    let recorder = Recorder::for_call(cx, "fetch_page")?;
    let confine = Confinement::for_call(cx)?;
    let path = confine.resolve(target)?;
    let shown = confine.display(&path).into_owned();
    if std::fs::symlink_metadata(&path).is_ok() {
        return Err(ToolError::failed(format!(
            "save_to {shown} already exists; fetch_page only creates new files. Choose another path, or write over it with edit_file"
        )));
    }
    let version = recorder
        .record(&path, &shown, FileAction::Create, None, None)
        .await?;
    let (file, bytes, shown_owned) = (path.clone(), text.as_bytes().to_vec(), shown.clone());
    blocking(move || {
        if let Some(dir) = file.parent() {
            std::fs::create_dir_all(dir)
                .map_err(|e| io_error("create the directories for", &shown_owned, &e))?;
        }
        write_atomic(&file, &bytes, None).map_err(|e| io_error("write", &shown_owned, &e))
    })
    .await?;
    Ok((path, format!("{shown} (new file; version {version})")))
}
