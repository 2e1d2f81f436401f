//! The HTTP client the web tools share: reqwest with the guard's resolver, no proxy, no
//! automatic redirects; redirects are followed here one hop at a time, each hop checked again.
//!
//! Redirect rules:
//! - at most `NetPolicy::max_redirects` hops;
//! - 301/302 turn a POST into a GET, 303 turns anything but HEAD into a GET (the body and its
//!   content headers are dropped); 307/308 keep the method and the body;
//! - when a hop changes the origin (scheme, host or port), the credential headers
//!   (Authorization, Proxy-Authorization, Cookie, and every header the caller marked as
//!   carrying a secret) are dropped, so a token sent to an API never reaches whoever it
//!   redirects to;
//! - an https → http downgrade is followed (as curl and browsers do for public pages) but it is
//!   an origin change, so credentials never travel over it in clear text.

use std::sync::Arc;
use std::time::Duration;

use reqwest::header::{
    AUTHORIZATION, CONTENT_LENGTH, CONTENT_TYPE, COOKIE, HeaderMap, HeaderName, LOCATION,
    PROXY_AUTHORIZATION,
};
use reqwest::{Method, StatusCode};
use url::Url;

use super::guard::{NetPolicy, Refusal, Rule, refusal_in};

/// Time allowed to open a connection (the call's own timeout bounds the whole request).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// The shared client: one per tool instance, so connections are reused across calls.
#[derive(Clone)]
pub struct WebClient {
    policy: Arc<NetPolicy>,
    client: reqwest::Client,
}

/// One request as the caller wants it sent.
#[derive(Clone, Debug)]
pub struct Outgoing {
    pub method: Method,
    pub url: Url,
    pub headers: HeaderMap,
    pub body: Option<Vec<u8>>,
    /// Headers that carry a secret besides the usual credential headers: dropped on an origin change.
    pub secret_headers: Vec<HeaderName>,
}

/// A response after the redirects.
pub struct Fetched {
    /// The URL that answered.
    pub url: Url,
    pub response: reqwest::Response,
    /// The URLs that redirected, in order.
    pub redirects: Vec<Url>,
}

/// Why a request got no response.
#[derive(Debug)]
pub enum FetchError {
    /// The guard refused a URL or an address.
    Refused(Refusal),
    /// The request failed; the message says how, for the model.
    Failed(String),
}

impl FetchError {
    /// The text for the model.
    pub fn message(&self) -> &str {
        match self {
            FetchError::Refused(r) => &r.message,
            FetchError::Failed(m) => m,
        }
    }
}

/// The start of every HTTP client tooldispatch makes. reqwest is built without a TLS crypto
/// provider of its own (aws-lc-rs, whose C build took minutes of every cold build) and panics
/// without one, so this installs ring's as the process default first.
pub fn builder() -> reqwest::ClientBuilder {
    static INSTALL: std::sync::Once = std::sync::Once::new();
    INSTALL.call_once(|| {
        // Err: another provider is already the default, which serves as well.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
    reqwest::Client::builder()
}

impl WebClient {
    /// A client that only reaches what `policy` allows.
    pub fn new(policy: Arc<NetPolicy>) -> Result<WebClient, String> {
        let client = builder()
            .redirect(reqwest::redirect::Policy::none())
            // A proxy would resolve the target itself, out of the guard's sight.
            .no_proxy()
            .dns_resolver(Arc::new(super::guard::GuardedResolver::new(policy.clone())))
            .user_agent(concat!("tooldispatch/", env!("CARGO_PKG_VERSION")))
            .connect_timeout(CONNECT_TIMEOUT)
            .referer(false)
            .build()
            .map_err(|e| format!("the HTTP client cannot start: {}", error_chain(&e)))?;
        Ok(WebClient { policy, client })
    }

    /// The policy this client enforces.
    pub fn policy(&self) -> &NetPolicy {
        &self.policy
    }

    /// Send `req`, following redirects; every hop is checked by the guard.
    pub async fn send(&self, mut req: Outgoing) -> Result<Fetched, FetchError> {
        let mut redirects: Vec<Url> = Vec::new();
        loop {
            self.policy
                .check_url(&req.url)
                .await
                .map_err(FetchError::Refused)?;
            let mut builder = self
                .client
                .request(req.method.clone(), req.url.clone())
                .headers(req.headers.clone());
            if let Some(body) = &req.body {
                builder = builder.body(body.clone());
            }
            let response = builder
                .send()
                .await
                .map_err(|e| describe_error(&e, &req.url))?;
            let header_bytes: usize = response
                .headers()
                .iter()
                .map(|(k, v)| k.as_str().len() + v.len() + 4)
                .sum();
            if header_bytes > self.policy.max_header_bytes {
                return Err(FetchError::Failed(format!(
                    "{} sent {header_bytes} bytes of response headers, over the limit of {} bytes; the response was dropped",
                    req.url, self.policy.max_header_bytes
                )));
            }
            let status = response.status();
            let location = response
                .headers()
                .get(LOCATION)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string);
            let is_redirect = matches!(status.as_u16(), 301 | 302 | 303 | 307 | 308);
            let Some(location) = location.filter(|_| is_redirect) else {
                return Ok(Fetched {
                    url: req.url,
                    response,
                    redirects,
                });
            };
            if redirects.len() >= self.policy.max_redirects {
                let chain: Vec<String> = redirects.iter().map(Url::to_string).collect();
                return Err(FetchError::Refused(Refusal::new(
                    Rule::TooManyRedirects,
                    format!(
                        "refused: more than {} redirects starting at {} (rule: too_many_redirects); the chain was {} → {}. Request the final URL directly if it is right",
                        self.policy.max_redirects,
                        chain.first().map_or(req.url.as_str(), String::as_str),
                        chain.join(" → "),
                        req.url
                    ),
                )));
            }
            let next = req.url.join(&location).map_err(|e| {
                FetchError::Failed(format!(
                    "{} redirected ({status}) to {location:?}, which is not a valid URL ({e})",
                    req.url
                ))
            })?;
            redirect_request(&mut req, status, next, &mut redirects);
        }
    }
}

/// Turn `req` into the request for the next hop.
fn redirect_request(req: &mut Outgoing, status: StatusCode, next: Url, redirects: &mut Vec<Url>) {
    let to_get = match status.as_u16() {
        303 => req.method != Method::HEAD,
        301 | 302 => req.method == Method::POST,
        _ => false,
    };
    if to_get {
        req.method = Method::GET;
        req.body = None;
        req.headers.remove(CONTENT_TYPE);
        req.headers.remove(CONTENT_LENGTH);
    }
    if next.origin() != req.url.origin() {
        for name in [AUTHORIZATION, PROXY_AUTHORIZATION, COOKIE] {
            req.headers.remove(name);
        }
        for name in &req.secret_headers {
            req.headers.remove(name);
        }
    }
    let previous = std::mem::replace(&mut req.url, next);
    redirects.push(previous);
}

/// A reqwest error in words the model can act on; a guard refusal comes back as itself.
fn describe_error(e: &reqwest::Error, url: &Url) -> FetchError {
    if let Some(refusal) = refusal_in(e) {
        return FetchError::Refused(refusal.for_url(url));
    }
    let detail = error_chain(e);
    if e.is_connect() {
        FetchError::Failed(format!(
            "could not connect to {url}: {detail}; check the host and port, or retry later if the server is down"
        ))
    } else if e.is_timeout() {
        FetchError::Failed(format!("{url} did not answer in time: {detail}"))
    } else {
        FetchError::Failed(format!("the request to {url} failed: {detail}"))
    }
}

/// An error and its sources, joined, without repeating a source that its parent already quotes.
pub fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut current = e.source();
    while let Some(source) = current {
        let s = source.to_string();
        if !text.contains(&s) {
            text.push_str(": ");
            text.push_str(&s);
        }
        current = source.source();
    }
    text
}

/// A body read up to a cap.
pub struct Body {
    pub bytes: Vec<u8>,
    /// More bytes followed the cap and were not read.
    pub truncated: bool,
}

/// Read `response`'s body, stopping after `cap` bytes; `on_chunk` sees the bytes read so far.
pub async fn read_capped(
    response: &mut reqwest::Response,
    cap: usize,
    mut on_chunk: impl FnMut(u64),
) -> Result<Body, String> {
    let mut bytes: Vec<u8> = Vec::new();
    let mut total: u64 = 0;
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| format!("the response body broke off: {}", error_chain(&e)))?
    {
        total += chunk.len() as u64;
        let room = cap.saturating_sub(bytes.len());
        if chunk.len() > room {
            bytes.extend_from_slice(&chunk[..room]);
            return Ok(Body {
                bytes,
                truncated: true,
            });
        }
        bytes.extend_from_slice(&chunk);
        on_chunk(total);
    }
    Ok(Body {
        bytes,
        truncated: false,
    })
}
