//! An extension's declarative API tool: an HTTP endpoint with `{param}` placeholders, sent
//! through http_request, so it gets the same network guard, redirect rules, secrets handling
//! and result rendering. GET and HEAD run without asking and are cached for 30 minutes per
//! session; every other method asks.
//!
//! The definition fixes the scheme, host and port; arguments fill only the path and the query
//! (percent-encoded), so a model cannot send the tool's credential anywhere else.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use dispatch_engine::{
    Access, CachePolicy, CachePut, Effect, Gate, Origin, Subject, Tool, ToolContext, ToolError,
    ToolOutput, ToolSpec,
};
use dispatch_store::{CacheScope, ResultCache};
use serde_json::{Map, Value, json};

use super::definition::Definition;
use crate::Stores;
use crate::web::{HttpRequest, NetPolicy};
use dispatch_engine::registry::kind_of as kind;

/// How long a GET result is cached (seed §5, like http_request).
const CACHE_TTL: std::time::Duration = std::time::Duration::from_secs(30 * 60);
/// Longest endpoint timeout (http_request's limit).
const MAX_TIMEOUT_SECS: u64 = 300;

const ENDPOINT_FIELDS: &[&str] = &[
    "url",
    "method",
    "content_type",
    "headers",
    "query",
    "timeout_s",
];
const AUTH_FIELDS: &[&str] = &["type", "header", "param", "secret"];
const METHODS: &[&str] = &["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD"];

/// A checked endpoint.
#[derive(Clone, Debug, PartialEq)]
pub struct ApiDef {
    /// Absolute http(s) URL; `{param}` only in the path and the query.
    pub url: String,
    pub method: String,
    /// `json` or `form`, for the methods that send a body.
    pub content_type: String,
    pub headers: BTreeMap<String, String>,
    /// Query parameters added to every request; values may hold `{param}`.
    pub query: BTreeMap<String, String>,
    pub timeout_s: Option<u64>,
    pub auth: Option<Auth>,
}

/// Where the stored secret goes.
#[derive(Clone, Debug, PartialEq)]
pub enum Auth {
    /// `Authorization: Bearer <secret>`.
    Bearer { secret: String },
    /// `<header>: <secret>`.
    Header { header: String, secret: String },
    /// `?<param>=<secret>`.
    Query { param: String, secret: String },
}

impl Auth {
    pub fn secret(&self) -> &str {
        match self {
            Auth::Bearer { secret } | Auth::Header { secret, .. } | Auth::Query { secret, .. } => {
                secret
            }
        }
    }
}

type Found = Vec<(String, String)>;

impl ApiDef {
    /// Check `endpoint` and `auth` of a definition; every problem as (field, reason).
    pub fn check(fields: &Map<String, Value>, parameters: &Value) -> Result<ApiDef, Found> {
        let mut found: Found = Vec::new();
        let mut problem = |field: &str, reason: String| found.push((field.to_string(), reason));
        let Some(Value::Object(endpoint)) = fields.get("endpoint") else {
            return Err(vec![(
                "endpoint".into(),
                "must be an object: {\"url\", \"method\", …}".into(),
            )]);
        };
        for key in endpoint.keys() {
            if !ENDPOINT_FIELDS.contains(&key.as_str()) {
                problem(
                    &format!("endpoint.{key}"),
                    format!(
                        "unknown field; the known ones are {}",
                        ENDPOINT_FIELDS.join(", ")
                    ),
                );
            }
        }
        let declared: Vec<&str> = parameters
            .get("properties")
            .and_then(Value::as_object)
            .map(|p| p.keys().map(String::as_str).collect())
            .unwrap_or_default();
        let required: Vec<&str> = parameters
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let check_placeholders =
            |field: &str, text: &str, problem: &mut dyn FnMut(&str, String)| {
                for name in placeholders(text) {
                    if !declared.contains(&name.as_str()) || !required.contains(&name.as_str()) {
                        problem(
                            field,
                            format!(
                                "uses {{{name}}}, which must be a required property of parameters"
                            ),
                        );
                    }
                }
            };
        let url = match endpoint.get("url") {
            Some(Value::String(url)) => {
                match check_url(url) {
                    Ok(()) => check_placeholders("endpoint.url", url, &mut problem),
                    Err(reason) => problem("endpoint.url", reason),
                }
                url.clone()
            }
            Some(other) => {
                problem(
                    "endpoint.url",
                    format!("must be a string, not {}", kind(other)),
                );
                String::new()
            }
            None => {
                problem(
                    "endpoint.url",
                    "missing; the absolute http(s) URL to call".into(),
                );
                String::new()
            }
        };
        let method = match endpoint.get("method") {
            None => "GET".to_string(),
            Some(Value::String(m)) if METHODS.contains(&m.to_uppercase().as_str()) => {
                m.to_uppercase()
            }
            Some(other) => {
                problem(
                    "endpoint.method",
                    format!("must be one of {}, not {other}", METHODS.join(", ")),
                );
                "GET".to_string()
            }
        };
        let content_type = match endpoint.get("content_type").map(|v| (v, v.as_str())) {
            None => "json".to_string(),
            Some((_, Some("json" | "application/json"))) => "json".to_string(),
            Some((_, Some("form" | "application/x-www-form-urlencoded"))) => "form".to_string(),
            Some((other, _)) => {
                problem(
                    "endpoint.content_type",
                    format!("must be \"json\" or \"form\", not {other}"),
                );
                "json".to_string()
            }
        };
        let strings = |field: &str, problem: &mut dyn FnMut(&str, String)| {
            let mut out = BTreeMap::new();
            match endpoint.get(field) {
                None => {}
                Some(Value::Object(map)) => {
                    for (k, v) in map {
                        match v {
                            Value::String(s) => {
                                out.insert(k.clone(), s.clone());
                            }
                            other => problem(
                                &format!("endpoint.{field}.{k}"),
                                format!("must be a string, not {}", kind(other)),
                            ),
                        }
                    }
                }
                Some(other) => problem(
                    &format!("endpoint.{field}"),
                    format!("must be an object of name → text, not {}", kind(other)),
                ),
            }
            out
        };
        let headers = strings("headers", &mut problem);
        let query = strings("query", &mut problem);
        for (name, value) in &headers {
            if reqwest::header::HeaderName::from_bytes(name.as_bytes()).is_err()
                || reqwest::header::HeaderValue::from_str(value).is_err()
            {
                problem(
                    &format!("endpoint.headers.{name}"),
                    "is not a valid HTTP header name and value".into(),
                );
            }
            if value.contains("{{secret:") {
                problem(
                    &format!("endpoint.headers.{name}"),
                    "must not carry a secret; declare it in auth {\"type\": \"header\", \"header\", \"secret\"} instead".into(),
                );
            }
        }
        for (name, value) in &query {
            check_placeholders(&format!("endpoint.query.{name}"), value, &mut problem);
        }
        let timeout_s = match endpoint.get("timeout_s") {
            None => None,
            Some(v) => match v.as_u64() {
                Some(s) if (1..=MAX_TIMEOUT_SECS).contains(&s) => Some(s),
                _ => {
                    problem(
                        "endpoint.timeout_s",
                        format!(
                            "must be a whole number of seconds from 1 to {MAX_TIMEOUT_SECS}, not {v}"
                        ),
                    );
                    None
                }
            },
        };
        let auth = match fields.get("auth") {
            None => None,
            Some(Value::Object(auth)) => check_auth(auth, &headers, &mut problem),
            Some(other) => {
                problem("auth", format!("must be an object, not {}", kind(other)));
                None
            }
        };
        if found.is_empty() {
            Ok(ApiDef {
                url,
                method,
                content_type,
                headers,
                query,
                timeout_s,
                auth,
            })
        } else {
            Err(found)
        }
    }
}

fn check_auth(
    auth: &Map<String, Value>,
    headers: &BTreeMap<String, String>,
    problem: &mut dyn FnMut(&str, String),
) -> Option<Auth> {
    for key in auth.keys() {
        if !AUTH_FIELDS.contains(&key.as_str()) {
            problem(
                &format!("auth.{key}"),
                format!(
                    "unknown field; the known ones are {}",
                    AUTH_FIELDS.join(", ")
                ),
            );
        }
    }
    let text = |key: &str| auth.get(key).and_then(Value::as_str).map(str::to_string);
    let secret = match text("secret") {
        Some(s) if !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') => s,
        _ => {
            problem(
                "auth.secret",
                "must name a stored secret (A-Z, 0-9 and _), e.g. \"WEATHER_API_KEY\"; a person stores it with store_secret".into(),
            );
            return None;
        }
    };
    match text("type").as_deref() {
        Some("bearer") => {
            if headers
                .keys()
                .any(|h| h.eq_ignore_ascii_case("authorization"))
            {
                problem(
                    "auth",
                    "bearer auth sets Authorization; remove it from endpoint.headers".into(),
                );
            }
            Some(Auth::Bearer { secret })
        }
        Some("header") => match text("header") {
            Some(header) if reqwest::header::HeaderName::from_bytes(header.as_bytes()).is_ok() => {
                Some(Auth::Header { header, secret })
            }
            _ => {
                problem(
                    "auth.header",
                    "a header auth needs the header's name, e.g. \"X-Api-Key\"".into(),
                );
                None
            }
        },
        Some("query") => match text("param") {
            Some(param) if !param.is_empty() => Some(Auth::Query { param, secret }),
            _ => {
                problem(
                    "auth.param",
                    "a query auth needs the query parameter's name, e.g. \"api_key\"".into(),
                );
                None
            }
        },
        _ => {
            problem(
                "auth.type",
                "must be \"bearer\", \"header\" or \"query\"".into(),
            );
            None
        }
    }
}

/// The URL must be absolute http(s), and `{…}` may appear only after the host.
fn check_url(raw: &str) -> Result<(), String> {
    let (scheme, rest) = raw
        .split_once("://")
        .ok_or_else(|| format!("{raw:?} is not an absolute http(s) URL"))?;
    if scheme != "http" && scheme != "https" {
        return Err(format!("{raw:?} must use http or https"));
    }
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    if authority.contains(['{', '}']) {
        return Err(
            "placeholders may fill the path and the query, never the host: the host is where the tool's credential goes"
                .into(),
        );
    }
    if authority.contains('@') {
        return Err("must not carry a user or password; use auth".into());
    }
    let sample = fill(raw, &|_| Some("x".into()));
    url::Url::parse(&sample).map_err(|e| format!("{raw:?} is not a valid URL: {e}"))?;
    Ok(())
}

/// The `{name}` placeholders of a text.
fn placeholders(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find('{') {
        let after = &rest[start + 1..];
        let Some(end) = after.find('}') else { break };
        out.push(after[..end].to_string());
        rest = &after[end + 1..];
    }
    out
}

/// `text` with each `{name}` replaced by `value(name)` (left as it is when `None`).
fn fill(text: &str, value: &dyn Fn(&str) -> Option<String>) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find('{') {
        out.push_str(&rest[..start]);
        let after = &rest[start + 1..];
        match after.find('}') {
            Some(end) => {
                let name = &after[..end];
                match value(name) {
                    Some(v) => out.push_str(&v),
                    None => {
                        out.push('{');
                        out.push_str(name);
                        out.push('}');
                    }
                }
                rest = &after[end + 1..];
            }
            None => {
                out.push('{');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// An argument as text for a URL: strings as they are, everything else as JSON.
fn as_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn encode_component(text: &str) -> String {
    url::form_urlencoded::byte_serialize(text.as_bytes())
        .collect::<String>()
        .replace('+', "%20")
}

/// An `ext_` API tool.
pub struct ApiTool {
    spec: ToolSpec,
    def: Arc<Definition>,
    api: ApiDef,
    /// http_request itself, which sends every request.
    http: Arc<dyn Tool>,
    cache: Option<Arc<dyn ResultCache>>,
}

impl ApiTool {
    pub fn new(def: Arc<Definition>, api: ApiDef, net: Arc<NetPolicy>, stores: &Stores) -> ApiTool {
        let reads = api.method == "GET" || api.method == "HEAD";
        let mut spec = ToolSpec::new(
            def.tool_name(),
            def.description.clone(),
            def.parameters.clone(),
        )
        .origin(Origin::Ext)
        .gate(if reads { Gate::ReadOnly } else { Gate::Ask })
        .effect(if reads {
            Effect::Observes
        } else {
            Effect::Mutates
        })
        .timeout(def.timeout + std::time::Duration::from_secs(5));
        if reads {
            spec = spec.cache(CachePolicy::Session(CACHE_TTL));
        }
        if def.concurrent {
            spec = spec.concurrent();
        }
        ApiTool {
            spec,
            def,
            api,
            http: crate::builtin(HttpRequest::new(net, stores)),
            cache: stores.cache.clone(),
        }
    }

    /// The URL a call reaches (its secret not yet in it) and the arguments left for the
    /// query or the body.
    fn request_of(&self, args: &Value) -> (String, Map<String, Value>) {
        let mut rest = args.as_object().cloned().unwrap_or_default();
        let mut used = Vec::new();
        let url_value = |name: &str| -> Option<String> {
            let v = args.get(name)?;
            Some(encode_component(&as_text(v)))
        };
        let mut url = fill(&self.api.url, &url_value);
        used.extend(placeholders(&self.api.url));
        let mut query: Vec<(String, String)> = Vec::new();
        for (name, template) in &self.api.query {
            used.extend(placeholders(template));
            query.push((name.clone(), fill(template, &|p| args.get(p).map(as_text))));
        }
        for name in &used {
            rest.remove(name);
        }
        let sends_body = matches!(self.api.method.as_str(), "POST" | "PUT" | "PATCH");
        if !sends_body {
            for (name, value) in std::mem::take(&mut rest) {
                match value {
                    Value::Null => {}
                    Value::Array(items) => {
                        query.extend(items.iter().map(|i| (name.clone(), as_text(i))))
                    }
                    other => query.push((name, as_text(&other))),
                }
            }
        }
        if !query.is_empty() {
            let encoded: String = url::form_urlencoded::Serializer::new(String::new())
                .extend_pairs(query)
                .finish();
            url.push(if url.contains('?') { '&' } else { '?' });
            url.push_str(&encoded);
        }
        (url, rest)
    }
}

#[async_trait]
impl Tool for ApiTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn subject(&self, args: &Value, _workdir: &Path) -> Subject {
        let access = if self.spec.gate == Gate::ReadOnly {
            Access::Reads
        } else {
            Access::Changes
        };
        let (url, _) = self.request_of(args);
        Subject::new(access).url(url).why(format!(
            "{} sends {} {} for the extension {}",
            self.spec.name,
            self.api.method,
            self.api.url,
            match &self.def.scope {
                super::definition::Scope::Extension(ext) => ext.as_str(),
                _ => "?",
            }
        ))
    }

    async fn call(&self, cx: ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        let (mut url, rest) = self.request_of(&args);
        // `.` and `..` survive percent-encoding and would move the request to another path of
        // the host, with the tool's credential: no segment of the filled path may be one.
        let path = url.split(['?', '#']).next().unwrap_or("");
        let path = path.split_once("://").map_or(path, |(_, rest)| rest);
        if path
            .split('/')
            .skip(1)
            .any(|segment| segment == "." || segment == "..")
        {
            let names = placeholders(&self.api.url).join(", ");
            return Err(ToolError::failed(format!(
                "the arguments that fill the URL's path ({names}) may not make a path segment \".\" or \"..\""
            )));
        }
        let reads = self.spec.gate == Gate::ReadOnly;
        // The cache key is the request without its secret: the secret's value never reaches
        // the store, and rotating it does not empty the cache.
        let key = format!("{}\n{} {url}", self.spec.name, self.api.method);
        let scope = CacheScope::Session {
            session: cx.session_id.to_string(),
        };
        if reads
            && let Some(cache) = &self.cache
            && let Ok(Some(hit)) = cache.cache_get(&scope, &key).await
        {
            return Ok(ToolOutput::text(format!("{}\n{}", hit.note(), hit.value)));
        }
        let mut headers: Map<String, Value> = self
            .api
            .headers
            .iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect();
        match &self.api.auth {
            None => {}
            Some(Auth::Bearer { secret }) => {
                headers.insert(
                    "Authorization".into(),
                    format!("Bearer {{{{secret:{secret}}}}}").into(),
                );
            }
            Some(Auth::Header { header, secret }) => {
                headers.insert(header.clone(), format!("{{{{secret:{secret}}}}}").into());
            }
            Some(Auth::Query { param, secret }) => {
                // http_request fills secrets in headers only; this one goes in the URL, and
                // the round's redactor keeps its value out of the result and the events.
                let secrets = cx.secrets.as_ref().ok_or_else(|| ToolError::Credential {
                    key: Some(secret.clone()),
                    message: format!(
                        "{} needs the stored secret {secret}, but this dispatcher has no secret store",
                        self.spec.name
                    ),
                })?;
                let value = secrets.expand(&format!("{{{{secret:{secret}}}}}")).await?;
                url.push(if url.contains('?') { '&' } else { '?' });
                url.push_str(&format!(
                    "{}={}",
                    encode_component(param),
                    encode_component(&value)
                ));
            }
        }
        let mut request = json!({
            "url": url,
            "method": self.api.method,
            "headers": headers,
            // This tool reads and writes its own cache entry.
            "force": true,
        });
        if let Some(t) = self.api.timeout_s {
            request["timeout"] = json!(t);
        }
        if matches!(self.api.method.as_str(), "POST" | "PUT" | "PATCH") {
            request["body"] = Value::Object(rest);
            request["body_type"] = json!(self.api.content_type);
        }
        let mut output = self.http.call(cx, request).await.map_err(|e| match e {
            ToolError::Credential { message, .. } => ToolError::Credential {
                key: self.api.auth.as_ref().map(|a| a.secret().to_string()),
                message: format!(
                    "{message} (the extension's tool {} sends the stored secret {}; ask the user to store a valid one)",
                    self.spec.name,
                    self.api
                        .auth
                        .as_ref()
                        .map(|a| a.secret())
                        .unwrap_or("(none: the extension declares no auth)")
                ),
            },
            other => other,
        })?;
        output.cache_put = match output.cache_put.take() {
            Some(put) if reads => Some(CachePut {
                scope,
                key,
                value: put.value,
                ttl: CACHE_TTL,
            }),
            _ => None,
        };
        Ok(output)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn placeholders_fill_only_what_is_named() {
        assert_eq!(placeholders("/a/{x}/b?{y}"), vec!["x", "y"]);
        assert_eq!(
            fill("/a/{x}/{z}", &|n| (n == "x").then(|| "1".to_string())),
            "/a/1/{z}"
        );
        assert!(check_url("https://{host}.example.com/x").is_err());
        assert!(check_url("https://u:p@example.com/x").is_err());
        assert!(check_url("ftp://example.com/x").is_err());
        assert!(check_url("https://example.com/v1/{city}?q={q}").is_ok());
    }
}
