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
use dispatch_engine::{
    Access, Effect, Gate, Subject, ToolContext, ToolError, ToolOutput, ToolSpec,
};
use dispatch_store::{CACHE_TTL, CacheScope, FileAction, FileHistory, ResultCache};
use reqwest::Method;
use reqwest::cookie::{CookieStore, Jar};
use reqwest::header::{ACCEPT, CONTENT_TYPE, COOKIE, HeaderMap, HeaderValue, SET_COOKIE};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use url::Url;

use super::client::{FetchError, Outgoing, WebClient, read_capped};
use super::extract::{ExtractError, MAX_PARSE_BYTES, PageFormat, decode_html, extract};
use super::filter::{DeterministicFilter, Filtered, ResultFilter};
use super::guard::NetPolicy;
use crate::files::beneath::Target;
use crate::files::confine::Confinement;
use crate::files::write::{Recorder, blocking, io_error, write_atomic};
use crate::{BuiltinTool, Stores};

/// Fetch one web page and return its readable content.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FetchPageArgs {
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

/// Most bytes of a page read; the rest is dropped with a note. No more than the extractor parses,
/// so the page is cut once and the note says where.
const MAX_PAGE_BYTES: usize = MAX_PARSE_BYTES;
/// A 5xx answer is not asked again for this long, unless `force`.
const SKIP_5XX: Duration = Duration::from_secs(12 * 60 * 60);
/// A page with no readable text is not fetched again for this long, unless `force`.
const SKIP_EMPTY: Duration = Duration::from_secs(72 * 60 * 60);
/// "Never" for a 4xx: a year, so the entry still leaves the store eventually.
const SKIP_4XX: Duration = Duration::from_secs(365 * 24 * 60 * 60);
/// Sessions whose cookies are kept in this process; the oldest jar goes beyond it.
const MAX_JARS: usize = 256;

/// The fetch_page tool: one HTTP client, and a cookie jar per session.
pub struct FetchPage {
    client: Result<WebClient, String>,
    jars: Mutex<Vec<(String, Arc<Jar>)>>,
    /// The result filter run on every return (the built-in one unless configured).
    filter: Arc<dyn ResultFilter>,
    /// Where pages and the skip list are kept (fetch_page writes its own entries).
    cache: Option<Arc<dyn ResultCache>>,
    /// Where a `save_to` records that its file did not exist, so restore_file can undo it.
    history: Option<Arc<dyn FileHistory>>,
    /// The limit on one call, when not the default (tests).
    timeout: Option<Duration>,
}

impl FetchPage {
    /// A fetch_page that reaches what `policy` allows.
    pub fn new(policy: Arc<NetPolicy>, stores: &Stores) -> Self {
        FetchPage {
            client: WebClient::new(policy),
            jars: Mutex::default(),
            filter: Arc::new(DeterministicFilter),
            cache: stores.cache.clone(),
            history: stores.file_history.clone(),
            timeout: None,
        }
    }

    /// The same tool with another result filter (a model-backed one from the config).
    pub fn with_filter(mut self, filter: Arc<dyn ResultFilter>) -> Self {
        self.filter = filter;
        self
    }

    /// The same tool with another time limit (tests: a slow server without a 90 s wait).
    #[cfg(test)]
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
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
impl BuiltinTool for FetchPage {
    const NAME: &'static str = "fetch_page";
    const DESCRIPTION: &'static str = "Read one web page: its main content as Markdown (default), cleaned HTML, or a JSON outline of headings and links. Give `focus` to keep the parts of a long page about it. Pages are cached for 30 minutes and shared across sessions; force=true fetches again. Scripts do not run: a page built by JavaScript returns what the server sends.";
    type Args = FetchPageArgs;

    fn declare(&self, spec: ToolSpec) -> ToolSpec {
        spec
            // Reading a page asks nothing; writing it into the work directory asks like any
            // other file change.
            .gate(Gate::Ask)
            .concurrent()
            // Per call (`effect` below): a fetch observes, a save_to also creates a file.
            .effect(Effect::Observes)
            .timeout(self.timeout.unwrap_or(Duration::from_secs(90)))
    }

    /// Reads a page; a `save_to` also writes that file.
    fn subject(&self, args: &Value, workdir: &std::path::Path) -> Option<Subject> {
        use crate::subjects::{resolved, text};
        let save_to = text(args, "save_to");
        let access = if save_to.is_some() {
            Access::Changes
        } else {
            Access::Reads
        };
        let mut subject = Subject::new(access).paths(resolved(workdir, save_to));
        subject.urls.extend(text(args, "link").map(str::to_string));
        Some(subject)
    }

    /// A save_to creates a file: a read of that path from before the save ("no such file")
    /// must not be replayed after it.
    fn effect(&self, args: &Value) -> Option<Effect> {
        Some(match args.get("save_to") {
            None | Some(Value::Null) => Effect::Observes,
            Some(_) => Effect::Mutates,
        })
    }

    async fn run(&self, cx: ToolContext, args: FetchPageArgs) -> Result<ToolOutput, ToolError> {
        let client = self
            .client
            .as_ref()
            .map_err(|e| ToolError::failed(e.clone()))?;
        let mut url = Url::parse(args.link.trim()).map_err(|e| {
            ToolError::failed(format!(
                "link {:?} is not a valid absolute URL ({e}); write it in full, e.g. https://example.com/page",
                args.link
            ))
        })?;
        // The fragment is never sent: page#a and page#b are one page, one entry.
        url.set_fragment(None);
        // Before the cache: a page another process fetched while the host was allow-listed is
        // not served where the guard refuses it (an IP-literal host; a name is checked when
        // it is resolved).
        client
            .policy()
            .check_url(&url)
            .await
            .map_err(|r| ToolError::failed(r.message))?;
        let key = cache_key(&url, args.format, args.keep_links);
        let skip_key = format!("fetch_page-skip|{url}");
        let cache = self.cache.clone();
        let jar = args.same_session.then(|| self.jar(&cx.session_id));
        let cookies = jar.as_deref().and_then(|j| j.cookies(&url));
        // A page seen with this session's cookies may be personal (DESIGN §3.8: a request that
        // carried credentials is never shared): its entries stay in the session.
        let scope = if cookies.is_some() {
            CacheScope::Session {
                session: cx.session_id.to_string(),
            }
        } else {
            CacheScope::Shared
        };

        let mut page = None;
        if !args.force
            && let Some(cache) = &cache
        {
            // A cache that cannot be read is a miss: the fetch itself still works.
            if let Ok(Some(hit)) = cache.cache_get(&scope, &key).await
                && let Ok(cached) = serde_json::from_str::<Page>(&hit.value)
            {
                page = Some((hit.note(), cached));
            } else if let Ok(Some(skip)) = cache.cache_get(&scope, &skip_key).await {
                // A 4xx stays for good; a 5xx or an empty page says when it may be tried again.
                let until = if skip.expires_in_ms < SKIP_EMPTY.as_millis() as u64 * 2 {
                    format!(" for another {}", age(skip.expires_in_ms))
                } else {
                    String::new()
                };
                return Err(ToolError::failed(format!(
                    "{url} blocked: {} {} ago; it is on the skip list{until}, so it was not fetched again. Pass force=true to try anyway",
                    skip.value,
                    age(skip.age_ms)
                )));
            }
        }
        let (note, page) = match page {
            Some(cached) => cached,
            None => {
                let fetched = fetch(
                    client,
                    &url,
                    jar.as_deref(),
                    cookies,
                    args.format,
                    args.keep_links,
                )
                .await;
                match fetched {
                    Ok(page) => {
                        if let Some(cache) = &cache {
                            // The unfiltered page; a failed write costs a later fetch.
                            if let Ok(value) = serde_json::to_string(&page) {
                                let _ = cache.cache_put(&scope, &key, &value, CACHE_TTL).await;
                            }
                            if args.force {
                                // It answered after all: a later call must not find it blocked.
                                let _ = cache.cache_remove(&scope, &skip_key).await;
                            }
                        }
                        (String::new(), page)
                    }
                    Err(Failure { message, skip }) => {
                        if let (Some(cache), Some((why, ttl))) = (&cache, skip) {
                            let _ = cache.cache_put(&scope, &skip_key, &why, ttl).await;
                        }
                        return Err(ToolError::failed(message));
                    }
                }
            }
        };

        let mut paths = Vec::new();
        let mut saved = Vec::new();
        if args.save {
            let path = save_private(&cx, &url, args.format, &page.text).await?;
            saved.push(format!("saved to {}", path.display()));
        }
        if let Some(target) = &args.save_to {
            let (path, shown) = save_to(self.history.as_ref(), &cx, target, &page.text).await?;
            saved.push(format!("saved to {shown}"));
            paths.push(path);
        }
        let saved = saved.join("; ");
        // The lines above the text count against the result budget too, or the engine would
        // cut the middle out of a page the filter had fitted. The cache note gets fixed room,
        // so a cached return is the fresh one plus its note line, never cut differently.
        let above = CACHE_NOTE_ROOM
            + page.notes.iter().map(|n| n.len() + 1).sum::<usize>()
            + if saved.is_empty() { 0 } else { saved.len() + 1 };
        let mut budget = cx.result_budget.saturating_sub(above);
        // A page over the budget also says how to read the rest, so room is kept for that line.
        let over = page.text.len() > budget && args.format != PageFormat::Outline;
        if over {
            budget = budget.saturating_sub(READ_ON_ROOM);
        }
        let filtered = if args.format == PageFormat::Outline {
            fit_outline(&page.text, args.focus.as_deref(), budget)
        } else {
            self.filter
                .filter(&page.text, args.focus.as_deref(), budget)
                .await
        };
        let mut out = String::new();
        // What the model must know about the page whatever the filter keeps: where the text came
        // from (cache, redirect), what was cut, where it was saved.
        let read_on = (over && filtered.text.len() < page.text.len())
            .then(|| read_on(page.text.len(), filtered.text.len(), !saved.is_empty()));
        let lines = std::iter::once(note)
            .chain(page.notes)
            .chain(filtered.note)
            .chain(std::iter::once(saved))
            .chain(read_on);
        for line in lines.filter(|l| !l.is_empty()) {
            out.push_str(&line);
            out.push('\n');
        }
        out.push_str(&filtered.text);
        Ok(ToolOutput::text(out).with_paths(paths))
    }
}

/// What the cache keeps: the unfiltered text and the remarks shown above it on every return.
#[derive(Serialize, Deserialize)]
struct Page {
    notes: Vec<String>,
    text: String,
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

    fn empty(url: &Url) -> Self {
        Failure {
            message: format!(
                "{url} has no readable text (it may be empty or built by scripts, which do not run here); it is not fetched again for 72 hours unless force=true. Try another source for this information"
            ),
            skip: Some(("it had no readable text".to_string(), SKIP_EMPTY)),
        }
    }
}

/// Fetch and extract; the page returned is what the cache keeps.
async fn fetch(
    client: &WebClient,
    url: &Url,
    jar: Option<&Jar>,
    cookies: Option<HeaderValue>,
    format: PageFormat,
    keep_links: bool,
) -> Result<Page, Failure> {
    let mut headers = HeaderMap::new();
    headers.insert(
        ACCEPT,
        HeaderValue::from_static(
            "text/html,application/xhtml+xml;q=0.9,text/plain;q=0.8,*/*;q=0.5",
        ),
    );
    if let Some(cookies) = cookies {
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
    // The verdicts that need no body come first: an error page or a PDF is not read at all.
    if !status.is_success() {
        let reason = status.canonical_reason().unwrap_or("");
        // 408 and 429 say "not now", not "never": they wait like a server error.
        let (ttl, retry) = if status.is_client_error() && !matches!(status.as_u16(), 408 | 429) {
            (SKIP_4XX, "it is not fetched again")
        } else {
            (SKIP_5XX, "it is not fetched again for 12 hours")
        };
        // The engine's next: line points to store_secret on a 401/403; fetch_page cannot send
        // a secret, so the message says which tool can.
        let then = if matches!(status.as_u16(), 401 | 403) {
            "If the page needs a login or an API key, fetch_page cannot send one: store it with store_secret and call http_request with it in a header; otherwise look for another source"
        } else {
            "Look for another source, or use http_request to see the response itself"
        };
        return Err(Failure {
            message: format!(
                "{url} answered {} {reason}; {retry} unless force=true. {then}",
                status.as_u16()
            ),
            skip: Some((format!("it answered {} {reason}", status.as_u16()), ttl)),
        });
    }
    let content_type = response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let kind = content_type
        .as_deref()
        .and_then(|t| t.split(';').next())
        .map(|t| t.trim().to_ascii_lowercase())
        .unwrap_or_else(|| "text/html".to_string());
    // XHTML and XML pages go through the HTML parser; an SVG is an image, not a page.
    let is_html = kind.contains("html") || (kind.ends_with("xml") && !kind.starts_with("image/"));
    if !(is_html || kind.starts_with("text/") || kind.ends_with("json")) {
        return Err(Failure::plain(format!(
            "{url} is {kind}, not a web page; use download_file to save it, or http_request to look at it"
        )));
    }
    let body = read_capped(&mut response, MAX_PAGE_BYTES, |_| {})
        .await
        .map_err(Failure::plain)?;
    let mut notes = Vec::new();
    if final_url != *url {
        notes.push(format!("(redirected to {final_url})"));
    }
    if body.truncated {
        notes.push(format!(
            "Note: the page is longer than {0} MiB; only its first {0} MiB were read.",
            MAX_PAGE_BYTES / (1024 * 1024)
        ));
    }
    let text = if is_html {
        let html = decode_html(&body.bytes, content_type.as_deref());
        let page = extract(&html, final_url.as_str(), format, keep_links).map_err(|e| match e {
            ExtractError::NoText { .. } => Failure::empty(url),
            other => Failure::plain(other.to_string()),
        })?;
        match (page.title, format) {
            (Some(title), PageFormat::Markdown) if !title.trim().is_empty() => {
                format!("# {}\n\n{}", title.trim(), page.text)
            }
            (_, _) => page.text,
        }
    } else {
        decode_html(&body.bytes, content_type.as_deref())
    };
    if text.trim().is_empty() {
        return Err(Failure::empty(url));
    }
    Ok(Page { notes, text })
}

/// Room kept for the line that says how to read the rest of a page over the budget.
const READ_ON_ROOM: usize = 260;

/// How to read what the filter left out: the whole text is one `save=true` away (the page is
/// cached, so that call sends no request), and read_files pages through a file of any size.
fn read_on(whole: usize, shown: usize, saved: bool) -> String {
    let left = whole.saturating_sub(shown) as f64 / 1024.0;
    let whole = whole as f64 / 1024.0;
    if saved {
        format!(
            "About {left:.1} KB of the page's {whole:.1} KB are not shown below; the saved file has all of it: read_files it with offset to read on."
        )
    } else {
        format!(
            "About {left:.1} KB of the page's {whole:.1} KB are not shown below: call fetch_page again with save=true (served from the cache, no new request) to keep the whole text in a file, then read_files that file with offset to read on."
        )
    }
}

/// Room kept above a page for the cache note: "(cached 59 min ago, shared across sessions; …)".
const CACHE_NOTE_ROOM: usize = 100;
/// Room kept for the line that says what an outline lost.
const OUTLINE_NOTE_ROOM: usize = 300;

/// The outline within `budget`, still valid JSON: the section filter would cut it mid-value.
/// With a focus, the headings and links that mention it are kept first; then the last links go,
/// then the last headings, each list counting what it lost in `*_omitted`.
fn fit_outline(text: &str, focus: Option<&str>, budget: usize) -> Filtered {
    let whole = Filtered {
        text: text.to_string(),
        note: None,
    };
    if text.len() <= budget {
        return whole;
    }
    let Ok(mut outline) = serde_json::from_str::<Value>(text) else {
        return DeterministicFilter.apply(text, focus, budget);
    };
    let terms: Vec<String> = focus
        .unwrap_or("")
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| w.chars().count() >= 2)
        .map(str::to_lowercase)
        .collect();
    let mentions = |item: &Value| {
        let text = item.to_string().to_lowercase();
        terms.iter().any(|t| text.contains(t.as_str()))
    };
    let lists = ["headings", "links"];
    let totals = lists.map(|name| list_len(&outline, name));
    let focused = lists.iter().any(|name| {
        outline[*name]
            .as_array()
            .is_some_and(|l| l.iter().any(mentions))
    });
    if focused {
        for name in lists {
            if let Some(list) = outline[name].as_array_mut() {
                list.retain(mentions);
            }
        }
    }
    let room = budget.saturating_sub(OUTLINE_NOTE_ROOM);
    let mut size = outline.to_string().len();
    // Links go first, from the end (the page's order is kept), then headings.
    for name in ["links", "headings"] {
        while size > room {
            let Some(item) = outline[name].as_array_mut().and_then(Vec::pop) else {
                break;
            };
            size = size.saturating_sub(item.to_string().len() + 1);
        }
    }
    let kept = lists.map(|name| list_len(&outline, name));
    for (i, name) in lists.iter().enumerate() {
        let lost = totals[i] - kept[i];
        if lost > 0 {
            let before = outline[format!("{name}_omitted")].as_u64().unwrap_or(0);
            outline[format!("{name}_omitted")] = json!(before + lost as u64);
        }
    }
    let (about, next) = match (focused, focus) {
        (true, Some(f)) => (
            format!(" (those about {:?} first)", f.trim()),
            "call again with another focus",
        ),
        _ => (String::new(), "give a focus to keep the ones about it"),
    };
    let line = format!(
        "[outline cut to fit: kept {} of {} headings and {} of {} links{about}; {next}, or use type \"markdown\" for the text]",
        kept[0], totals[0], kept[1], totals[1]
    );
    Filtered {
        text: format!("{line}\n\n{outline}"),
        note: None,
    }
}

fn list_len(outline: &Value, name: &str) -> usize {
    outline[name].as_array().map_or(0, Vec::len)
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
    history: Option<&Arc<dyn FileHistory>>,
    cx: &ToolContext,
    target: &str,
    text: &str,
) -> Result<(std::path::PathBuf, String), ToolError> {
    let recorder = Recorder::for_call(history, cx, FetchPage::NAME)?;
    let confine = Confinement::for_call(cx)?;
    let path = confine.resolve(target)?;
    let shown = confine.display(&path).into_owned();
    if std::fs::symlink_metadata(&path).is_ok() {
        return Err(exists(&shown));
    }
    let version = recorder
        .record(&path, &shown, FileAction::Create, None, None)
        .await?;
    let (file, bytes, shown_owned) = (path.clone(), text.as_bytes().to_vec(), shown.clone());
    blocking(move || {
        // Made and written beneath the work directory without following a link.
        let target = Target::open(&confine, &file, &shown_owned, true)?;
        target.create_new(&bytes).map_err(|e| match e.kind() {
            std::io::ErrorKind::AlreadyExists => exists(&shown_owned),
            _ => io_error("write", &shown_owned, &e),
        })
    })
    .await?;
    Ok((
        path,
        format!(
            "{shown} (a new file; version {version} records that it did not exist; undo with restore_file(version={version}))"
        ),
    ))
}

fn exists(shown: &str) -> ToolError {
    ToolError::failed(format!(
        "save_to {shown} already exists; fetch_page only creates new files. Choose another path, or write over it with edit_file"
    ))
}

#[cfg(test)]
#[path = "fetch_page_tests.rs"]
mod tests;
