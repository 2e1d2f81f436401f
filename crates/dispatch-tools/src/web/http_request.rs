//! `http_request`: one raw HTTP request through the network guard (seed §9, DESIGN §3.8).
//!
//! 4xx and 5xx answers are results the model reads, except 401 and 403, which are credential
//! errors so the engine points the model to store_secret. GET results are cached per session
//! for 30 minutes (written in pass 3 through `ToolOutput::cache_put`); `force` skips the read.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use dispatch_engine::{
    Access, CachePolicy, CachePut, Effect, Gate, Subject, ToolContext, ToolError, ToolOutput,
    ToolSpec,
};
use dispatch_store::{CACHE_TTL, CacheScope, ResultCache};
use reqwest::Method;
use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;
use url::Url;

use super::client::{FetchError, Outgoing, WebClient, read_capped};
use super::guard::{MAX_HEADER_BYTES, NetPolicy};
use crate::{BuiltinTool, Stores};

/// Response body bytes shown; the rest is cut with a note.
pub const MAX_BODY: usize = 2 * 1024 * 1024;
/// Default and largest `timeout`, in seconds.
const DEFAULT_TIMEOUT_SECS: u64 = 60;
const MAX_TIMEOUT_SECS: u64 = 300;
/// Longest URL accepted.
const MAX_URL_BYTES: usize = 8 * 1024;
/// Most request headers accepted.
const MAX_HEADERS: usize = 100;
/// Body text quoted in a 401/403 failure.
const CREDENTIAL_EXCERPT: usize = 1024;
/// Bytes of a binary body shown in hex.
const HEX_PREVIEW: usize = 32;

/// Response headers worth showing besides the rate-limit family.
const SHOWN_HEADERS: &[&str] = &[
    "content-type",
    "content-length",
    "content-encoding",
    "location",
    "retry-after",
    "www-authenticate",
    "etag",
    "last-modified",
    "cache-control",
    "link",
];

/// Send one HTTP request.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HttpRequestArgs {
    /// Absolute http:// or https:// URL, query string included.
    url: String,
    /// HTTP method; GET (the default) and HEAD run without asking, the others ask the user first.
    #[serde(default)]
    method: Option<HttpMethod>,
    /// Request headers, name → value. A value may use {{secret:NAME}} to send a stored secret
    /// (e.g. "Authorization": "Bearer {{secret:GITHUB_TOKEN}}").
    #[serde(default)]
    headers: Option<BTreeMap<String, String>>,
    /// Request body: any JSON value; sent as JSON unless body_type says otherwise.
    #[serde(default)]
    body: Option<Value>,
    /// How to encode body: json (default for objects and arrays), form (urlencoded), multipart
    /// (form-data text fields), text (default for strings).
    #[serde(default)]
    body_type: Option<BodyType>,
    /// Seconds before giving up (default 60, max 300; 0 means the default).
    #[serde(default)]
    #[schemars(range(min = 0, max = 300))]
    timeout: Option<u64>,
    /// Skip the 30-minute cache of GET results and fetch again.
    #[serde(default)]
    force: bool,
}

#[derive(Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "UPPERCASE")]
enum HttpMethod {
    Get,
    Post,
    Put,
    Patch,
    Delete,
    Head,
}

impl HttpMethod {
    fn method(self) -> Method {
        match self {
            HttpMethod::Get => Method::GET,
            HttpMethod::Post => Method::POST,
            HttpMethod::Put => Method::PUT,
            HttpMethod::Patch => Method::PATCH,
            HttpMethod::Delete => Method::DELETE,
            HttpMethod::Head => Method::HEAD,
        }
    }
}

#[derive(Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
enum BodyType {
    Json,
    Form,
    Multipart,
    Text,
}

/// The `http_request` tool.
pub struct HttpRequest {
    client: Result<WebClient, String>,
    /// Where GET results are looked up (pass 3 writes them, from `ToolOutput::cache_put`).
    cache: Option<Arc<dyn ResultCache>>,
}

impl HttpRequest {
    /// An http_request that reaches public hosts and those `policy` allow-lists.
    pub fn new(policy: Arc<NetPolicy>, stores: &Stores) -> Self {
        HttpRequest {
            client: WebClient::new(policy),
            cache: stores.cache.clone(),
        }
    }
}

#[async_trait]
impl BuiltinTool for HttpRequest {
    const NAME: &'static str = "http_request";
    const DESCRIPTION: &'static str = "Send one HTTP request (GET, POST, PUT, PATCH, DELETE, HEAD) to a public http(s) URL and get the status, the useful response headers and the body (JSON pretty-printed, text decoded, binary summarised; capped at 2 MiB). 4xx/5xx answers are returned as results. Put stored secrets in headers as {{secret:NAME}}. GET and HEAD run without asking; GET is cached for 30 minutes per session (force=true refetches); other methods ask the user. Private and local addresses are refused unless the user allow-listed the host.";
    type Args = HttpRequestArgs;

    fn declare(&self, spec: ToolSpec) -> ToolSpec {
        spec.concurrent()
            .gate(Gate::Ask)
            // Per call (`effect` below): GET and HEAD observe, the other methods change things.
            .effect(Effect::Mutates)
            .cache(CachePolicy::Session(CACHE_TTL))
            // The call enforces `timeout` itself and says so; this is only the backstop.
            .timeout(Duration::from_secs(MAX_TIMEOUT_SECS + 10))
    }

    fn subject(&self, args: &Value, _workdir: &std::path::Path) -> Option<Subject> {
        let access = match method_effect(args) {
            Effect::Mutates => Access::Changes,
            _ => Access::Reads,
        };
        let mut subject = Subject::new(access);
        subject
            .urls
            .extend(crate::subjects::text(args, "url").map(str::to_string));
        Some(subject)
    }

    fn effect(&self, args: &Value) -> Option<Effect> {
        Some(method_effect(args))
    }

    async fn run(&self, cx: ToolContext, args: HttpRequestArgs) -> Result<ToolOutput, ToolError> {
        let client = self
            .client
            .as_ref()
            .map_err(|e| ToolError::failed(e.clone()))?;
        let method = args.method.unwrap_or(HttpMethod::Get).method();
        let url = parse_url(&args.url)?;
        let timeout = Duration::from_secs(match args.timeout {
            None | Some(0) => DEFAULT_TIMEOUT_SECS,
            Some(t) => t.min(MAX_TIMEOUT_SECS),
        });
        let written_headers = args.headers.unwrap_or_default();
        let is_get = method == Method::GET;
        let cache_key = cache_key(&url, &written_headers);
        let scope = CacheScope::Session {
            session: cx.session_id.to_string(),
        };
        if is_get
            && !args.force
            && let Some(cache) = &self.cache
            // A cache that fails costs a fetch, never the call.
            && let Ok(Some(hit)) = cache.cache_get(&scope, &cache_key).await
        {
            return Ok(ToolOutput::text(format!("{}\n{}", hit.note(), hit.value)));
        }

        let (mut headers, secret_headers) = build_headers(&cx, &written_headers).await?;
        let body = match args.body {
            Some(body) if method != Method::GET && method != Method::HEAD => {
                let (bytes, content_type) = encode_body(&body, args.body_type, &cx)?;
                if bytes.len() > client.policy().max_request_body {
                    return Err(ToolError::failed(format!(
                        "the request body is {} bytes, over the limit of {} bytes; send less, or upload in parts",
                        bytes.len(),
                        client.policy().max_request_body
                    )));
                }
                if !headers.contains_key(CONTENT_TYPE) {
                    headers.insert(CONTENT_TYPE, content_type);
                }
                Some(bytes)
            }
            Some(_) => {
                return Err(ToolError::failed(format!(
                    "a {method} request carries no body; drop `body`, or use POST/PUT/PATCH"
                )));
            }
            None => None,
        };
        let request = Outgoing {
            method: method.clone(),
            url: url.clone(),
            headers,
            body,
            secret_headers,
        };
        let exchange = async {
            let mut fetched = client.send(request).await?;
            let progress = cx.progress.clone();
            let mut next_report: u64 = 1024 * 1024;
            let body = read_capped(&mut fetched.response, MAX_BODY, |read| {
                // A long body is a sign of life: it keeps an idle timeout from firing.
                if read >= next_report {
                    progress.emit(format!("{read} bytes received\n"));
                    next_report = read + 1024 * 1024;
                }
            })
            .await
            .map_err(FetchError::Failed)?;
            Ok::<_, FetchError>((fetched, body))
        };
        let (fetched, body) = tokio::select! {
            r = tokio::time::timeout(timeout, exchange) => match r {
                Ok(Ok(done)) => done,
                Ok(Err(FetchError::Refused(r))) => return Err(ToolError::failed(r.message)),
                Ok(Err(FetchError::Failed(m))) => return Err(ToolError::failed(m)),
                Err(_) => return Err(ToolError::failed(format!(
                    "timed out after {} s waiting for {url} (timeout={}); retry with a larger timeout (max {MAX_TIMEOUT_SECS} s) if the server is slow",
                    timeout.as_secs(), timeout.as_secs()
                ))),
            },
            _ = cx.cancel.cancelled() => return Err(ToolError::failed("the request was cancelled")),
        };

        let status = fetched.response.status();
        let text = render(&method, &fetched, &body.bytes, body.truncated);
        if status.as_u16() == 401 || status.as_u16() == 403 {
            let excerpt = excerpt(&body.bytes, CREDENTIAL_EXCERPT, body.truncated);
            let key = first_secret_name(&written_headers);
            return Err(ToolError::Credential {
                key,
                message: format!(
                    "HTTP {status} from {}: the server rejected the request's credentials (or wants some). Store the API key or token with store_secret and send it in a header such as \"Authorization\": \"Bearer {{{{secret:NAME}}}}\". Response body: {excerpt}",
                    fetched.url
                ),
            });
        }
        let mut output = ToolOutput::text(text.clone());
        if is_get && status.as_u16() < 400 {
            output.cache_put = Some(CachePut {
                scope,
                key: cache_key,
                value: text,
                ttl: CACHE_TTL,
            });
        }
        Ok(output)
    }
}

/// A GET or HEAD reads: it is not journalled and ends nothing remembered. Any other method
/// may change what a later GET (or run_command) returns.
fn method_effect(args: &Value) -> Effect {
    match args.get("method").and_then(Value::as_str) {
        None => Effect::Observes,
        Some(m) if m.eq_ignore_ascii_case("GET") || m.eq_ignore_ascii_case("HEAD") => {
            Effect::Observes
        }
        Some(_) => Effect::Mutates,
    }
}

fn parse_url(raw: &str) -> Result<Url, ToolError> {
    let raw = raw.trim();
    if raw.len() > MAX_URL_BYTES {
        return Err(ToolError::failed(format!(
            "the url is {} bytes long, over the limit of {MAX_URL_BYTES}",
            raw.len()
        )));
    }
    Url::parse(raw).map_err(|e| {
        ToolError::failed(format!(
            "url {raw:?} is not a valid absolute URL ({e}); write it in full, e.g. https://api.example.com/v1/items?page=2"
        ))
    })
}

/// The cache key: the canonical URL and the headers as written (secrets by name, not value).
fn cache_key(url: &Url, headers: &BTreeMap<String, String>) -> String {
    let lowered: BTreeMap<String, &String> = headers
        .iter()
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v))
        .collect();
    let canonical = serde_json::json!({"url": url.as_str(), "headers": lowered}).to_string();
    format!(
        "http_request:GET:{}",
        blake3::hash(canonical.as_bytes()).to_hex()
    )
}

/// Request headers with `{{secret:NAME}}` filled in, and the names of those that carry one.
async fn build_headers(
    cx: &ToolContext,
    written: &BTreeMap<String, String>,
) -> Result<(HeaderMap, Vec<HeaderName>), ToolError> {
    if written.len() > MAX_HEADERS {
        return Err(ToolError::failed(format!(
            "{} headers given, over the limit of {MAX_HEADERS}",
            written.len()
        )));
    }
    let total: usize = written.iter().map(|(k, v)| k.len() + v.len() + 4).sum();
    if total > MAX_HEADER_BYTES {
        return Err(ToolError::failed(format!(
            "the headers are {total} bytes, over the limit of {} bytes",
            MAX_HEADER_BYTES
        )));
    }
    let mut headers = HeaderMap::new();
    let mut secret_headers = Vec::new();
    for (name, value) in written {
        let header = HeaderName::from_bytes(name.trim().as_bytes()).map_err(|_| {
            ToolError::failed(format!(
                "header name {name:?} is not a valid HTTP header name"
            ))
        })?;
        if matches!(
            header.as_str(),
            "host" | "content-length" | "transfer-encoding" | "connection" | "te" | "upgrade"
        ) {
            return Err(ToolError::failed(format!(
                "header {name:?} is set by the client itself; drop it from headers"
            )));
        }
        let value = if value.contains("{{secret:") {
            let secrets = cx.secrets.as_ref().ok_or_else(|| ToolError::Credential {
                key: None,
                message: format!(
                    "header {name:?} uses {{{{secret:…}}}}, but this dispatcher has no secret store; ask the user to start it with a store, or send the request without the secret"
                ),
            })?;
            secret_headers.push(header.clone());
            secrets.expand(value).await?
        } else {
            value.clone()
        };
        let mut value = HeaderValue::from_str(&value).map_err(|_| {
            ToolError::failed(format!(
                "the value of header {name:?} has characters HTTP headers cannot carry (control characters or non-ASCII)"
            ))
        })?;
        if secret_headers.last() == Some(&header) {
            value.set_sensitive(true);
        }
        headers.append(header, value);
    }
    Ok((headers, secret_headers))
}

/// The body's bytes and its content type.
fn encode_body(
    body: &Value,
    body_type: Option<BodyType>,
    cx: &ToolContext,
) -> Result<(Vec<u8>, HeaderValue), ToolError> {
    let body_type = body_type.unwrap_or(if body.is_string() {
        BodyType::Text
    } else {
        BodyType::Json
    });
    let as_text = |v: &Value| match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    };
    let fields = |kind: &str| {
        body.as_object().ok_or_else(|| {
            ToolError::failed(format!(
                "body_type={kind} needs body to be an object of field → value"
            ))
        })
    };
    Ok(match body_type {
        BodyType::Json => (
            serde_json::to_vec(body).map_err(|e| ToolError::failed(e.to_string()))?,
            HeaderValue::from_static("application/json"),
        ),
        BodyType::Text => (
            as_text(body).into_bytes(),
            HeaderValue::from_static("text/plain; charset=utf-8"),
        ),
        BodyType::Form => {
            let mut form = url::form_urlencoded::Serializer::new(String::new());
            for (k, v) in fields("form")? {
                form.append_pair(k, &as_text(v));
            }
            (
                form.finish().into_bytes(),
                HeaderValue::from_static("application/x-www-form-urlencoded"),
            )
        }
        BodyType::Multipart => {
            let boundary = format!(
                "tooldispatch-{}",
                &blake3::hash(cx.call_id.as_bytes()).to_hex()[..24]
            );
            let mut out = Vec::new();
            for (k, v) in fields("multipart")? {
                let name = k.replace(['"', '\r', '\n'], "_");
                out.extend_from_slice(
                    format!(
                        "--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n"
                    )
                    .as_bytes(),
                );
                out.extend_from_slice(as_text(v).as_bytes());
                out.extend_from_slice(b"\r\n");
            }
            out.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
            let content_type =
                HeaderValue::from_str(&format!("multipart/form-data; boundary={boundary}"))
                    .map_err(|e| ToolError::failed(e.to_string()))?;
            (out, content_type)
        }
    })
}

/// The first `{{secret:NAME}}` used in the headers: the credential a 401 most likely concerns.
fn first_secret_name(headers: &BTreeMap<String, String>) -> Option<String> {
    headers.values().find_map(|v| {
        let at = v.find("{{secret:")?;
        let rest = &v[at + "{{secret:".len()..];
        Some(rest[..rest.find("}}")?].trim().to_string())
    })
}

/// Status line, selected headers, then the body.
fn render(
    method: &Method,
    fetched: &super::client::Fetched,
    body: &[u8],
    truncated: bool,
) -> String {
    let response = &fetched.response;
    let status = response.status();
    let mut out = format!(
        "HTTP {} {}",
        status.as_u16(),
        status.canonical_reason().unwrap_or("")
    )
    .trim_end()
    .to_string();
    out.push('\n');
    if !fetched.redirects.is_empty() {
        out.push_str(&format!(
            "final url: {} (after {} redirect(s))\n",
            fetched.url,
            fetched.redirects.len()
        ));
    }
    for (name, value) in response.headers() {
        let name = name.as_str();
        let shown = SHOWN_HEADERS.contains(&name)
            || name.contains("ratelimit")
            || name.contains("rate-limit");
        if shown {
            out.push_str(&format!(
                "{name}: {}\n",
                String::from_utf8_lossy(value.as_bytes())
            ));
        }
    }
    out.push('\n');
    if *method == Method::HEAD || body.is_empty() {
        out.push_str("(empty body)");
        return out;
    }
    let content_type = response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_ascii_lowercase();
    if truncated {
        out.push_str(&format!(
            "(body truncated: only the first {} MiB is shown; use download_file to save the whole body)\n",
            MAX_BODY / (1024 * 1024)
        ));
    }
    out.push_str(&render_body(&content_type, body, truncated));
    out
}

fn render_body(content_type: &str, body: &[u8], truncated: bool) -> String {
    let mime = content_type.split(';').next().unwrap_or("").trim();
    let jsonish = mime == "application/json" || mime.ends_with("+json");
    if jsonish
        && !truncated
        && let Ok(value) = serde_json::from_slice::<Value>(body)
        && let Ok(pretty) = serde_json::to_string_pretty(&value)
    {
        return pretty;
    }
    let textual = mime.starts_with("text/")
        || jsonish
        || mime.ends_with("+xml")
        || matches!(
            mime,
            "application/xml"
                | "application/javascript"
                | "application/x-www-form-urlencoded"
                | "application/x-ndjson"
                | "application/yaml"
        );
    let charset = charset_of(content_type);
    if textual || charset.is_some() || (mime.is_empty() && looks_like_text(body)) {
        return decode_text(body, charset);
    }
    let preview: String = body
        .iter()
        .take(HEX_PREVIEW)
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(" ");
    format!(
        "binary body: {}, {} bytes{}; first bytes: {preview}. Use download_file to save it",
        if mime.is_empty() {
            "no content-type"
        } else {
            mime
        },
        body.len(),
        if truncated { " (more not read)" } else { "" }
    )
}

/// The `charset=` parameter of a content type.
fn charset_of(content_type: &str) -> Option<&'static encoding_rs::Encoding> {
    content_type.split(';').skip(1).find_map(|param| {
        let (k, v) = param.split_once('=')?;
        if k.trim() != "charset" {
            return None;
        }
        encoding_rs::Encoding::for_label(v.trim().trim_matches('"').as_bytes())
    })
}

/// Decode by the declared charset; a BOM wins, undeclared bytes are UTF-8, or windows-1252 when
/// they are not valid UTF-8 (HTTP's historical default).
fn decode_text(body: &[u8], charset: Option<&'static encoding_rs::Encoding>) -> String {
    let encoding = charset.unwrap_or(if std::str::from_utf8(body).is_ok() {
        encoding_rs::UTF_8
    } else {
        encoding_rs::WINDOWS_1252
    });
    encoding.decode(body).0.into_owned()
}

fn looks_like_text(body: &[u8]) -> bool {
    let sample = &body[..body.len().min(1024)];
    !sample.contains(&0) && std::str::from_utf8(sample).is_ok()
}

/// Up to `cap` bytes of a body as text, for a failure message; `more` says bytes followed.
pub fn excerpt(body: &[u8], cap: usize, more: bool) -> String {
    if body.is_empty() {
        return "(empty)".into();
    }
    let cut = &body[..body.len().min(cap)];
    let text = String::from_utf8_lossy(cut);
    if more || body.len() > cap {
        format!("{text}… (cut after {} bytes)", cut.len())
    } else {
        text.into_owned()
    }
}

#[cfg(test)]
#[path = "http_request_tests.rs"]
pub(crate) mod tests;
