//! One model turn: build the provider's request, send it (retrying 429/5xx and broken
//! connections), and read its event stream into a [`Turn`].
//!
//! Every request streams, also when nobody watches the text: one code path per provider
//! instead of two, live text for a terminal, and a long answer never sits behind an idle
//! timeout of a proxy on the way.

use std::time::{Duration, SystemTime};

use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::retry::{RetryPolicy, is_retryable, retry_after};
use crate::sse::{SseEvent, SseParser};
use crate::{ApiKey, KeySource, ModelConfig, ModelError, ProviderKind};

/// What one turn sends: everything but the model settings, which the client holds.
#[derive(Clone, Copy, Debug)]
pub struct TurnRequest<'a> {
    /// The system prompt; empty sends none.
    pub system: &'a str,
    /// The conversation so far in the provider's own shape: Chat Completions `messages`,
    /// Responses `input` items, Anthropic `messages`, Gemini `contents`.
    pub history: &'a [Value],
    /// The tools array as the engine's `render_tools` made it for this provider.
    pub tools: &'a [Value],
}

/// The model's answer to one request.
#[derive(Clone, Debug, PartialEq)]
pub struct Turn {
    /// What the engine's `parse_reply` reads and what the history gets appended (see
    /// [`crate::append_round`]): the assistant message (OpenAI, Anthropic), the output items
    /// array (Responses), the candidate's Content (Gemini).
    pub message: Value,
    /// The answer's text, without reasoning.
    pub text: String,
    pub usage: Usage,
    pub stop: StopReason,
}

/// Tokens one request used, as the provider counted them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// The prompt, cached parts included.
    pub input_tokens: u64,
    /// The answer, reasoning included (it is billed as output).
    pub output_tokens: u64,
}

/// Why the model stopped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StopReason {
    /// It called tools: run the round and send the results back.
    ToolCalls,
    /// It finished its answer.
    End,
    /// It hit `max_tokens`: the answer is cut off.
    MaxTokens,
    /// Anything else, as the provider named it (a safety stop, a refusal, `pause_turn`…).
    Other(String),
}

/// What happens while a turn runs, for a live display.
#[derive(Clone, Debug, PartialEq)]
pub enum ModelEvent {
    /// More of the answer's text.
    TextDelta(String),
    /// An attempt failed and another follows after `wait`.
    Retrying {
        /// The attempt that failed, from 1.
        attempt: u32,
        max_attempts: u32,
        wait: Duration,
        /// The status and message, or the connection error.
        reason: String,
    },
}

/// A provider's reading of its stream; the provider files implement it.
pub(crate) trait StreamState: Send {
    /// Takes one event; `Ok(true)` when it was the stream's last.
    fn event(&mut self, event: &SseEvent, emit: &dyn Fn(ModelEvent)) -> Result<bool, String>;
    /// The turn, once the stream is over; an error when it ended before its end marker.
    fn finish(self: Box<Self>) -> Result<Turn, String>;
}

/// An event's JSON and its type: the `type` field, which repeats the SSE event name and which
/// every event of the Anthropic and Responses streams carries, else the event name.
pub(crate) fn typed(event: &SseEvent) -> Result<(Value, String), String> {
    let data: Value = serde_json::from_str(&event.data)
        .map_err(|e| format!("an event is not JSON ({e}): {:?}", event.data))?;
    let kind = data
        .get("type")
        .and_then(Value::as_str)
        .or(event.event.as_deref())
        .ok_or_else(|| format!("an event has no type: {:?}", event.data))?
        .to_owned();
    Ok((data, kind))
}

/// A model from `[models.<name>]`, ready to take turns.
#[derive(Debug)]
pub struct ModelClient {
    config: ModelConfig,
    key: ApiKey,
    retry: RetryPolicy,
    http: reqwest::Client,
}

impl ModelClient {
    pub fn new(config: ModelConfig, key: ApiKey) -> Result<Self, ModelError> {
        config.validate().map_err(ModelError::Config)?;
        let http = dispatch_tools::web::client::builder()
            .connect_timeout(Duration::from_secs(30))
            // A silence, not a total: a long answer may stream for many minutes.
            .read_timeout(config.idle_timeout())
            .build()
            .map_err(|e| ModelError::Config(format!("cannot build the HTTP client: {e}")))?;
        let retry = config.retry_policy();
        Ok(ModelClient {
            config,
            key,
            retry,
            http,
        })
    }

    /// Replaces the retry policy from the config (tests use short waits).
    pub fn with_retry_policy(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    /// One request, one answer. `on_event` sees text as it streams and every retry.
    pub async fn turn(
        &self,
        request: &TurnRequest<'_>,
        cancel: &CancellationToken,
        on_event: &(dyn Fn(ModelEvent) + Send + Sync),
    ) -> Result<Turn, ModelError> {
        let (url, body, state): (String, Value, Box<dyn StreamState>) = match self.provider() {
            ProviderKind::OpenAi => {
                let (url, body) = crate::openai::request(&self.config, request);
                (url, body, Box::new(crate::openai::ChatStream::default()))
            }
            ProviderKind::OpenAiResponses => {
                let (url, body) = crate::responses::request(&self.config, request);
                (
                    url,
                    body,
                    Box::new(crate::responses::ResponseStream::default()),
                )
            }
            ProviderKind::Anthropic => {
                let (url, body) = crate::anthropic::request(&self.config, request);
                (
                    url,
                    body,
                    Box::new(crate::anthropic::MessageStream::default()),
                )
            }
            ProviderKind::Gemini => {
                let (url, body) = crate::gemini::request(&self.config, request);
                (url, body, Box::new(crate::gemini::ContentStream::default()))
            }
        };
        let body = serde_json::to_vec(&body).map_err(|e| self.stream_error(e.to_string()))?;
        let headers = self.headers("application/json", "text/event-stream")?;
        let response = self.send(&url, headers, body, cancel, on_event).await?;
        self.read(response, state, cancel, on_event).await
    }

    /// One plain request to `path` under the API root (`/images/generations`), retried as a
    /// turn is; the whole answer's body, refused past `cap` bytes. For the media APIs, whose
    /// answers are files, not event streams.
    pub(crate) async fn post(
        &self,
        path: &str,
        content_type: &str,
        body: Vec<u8>,
        cap: usize,
        cancel: &CancellationToken,
    ) -> Result<Vec<u8>, ModelError> {
        let url = format!("{}{path}", self.config.base_url());
        let headers = self.headers(content_type, "*/*")?;
        let mut response = self.send(&url, headers, body, cancel, &|_| {}).await?;
        let mut out = Vec::new();
        loop {
            let chunk = tokio::select! {
                _ = cancel.cancelled() => return Err(ModelError::Cancelled),
                chunk = response.chunk() => chunk,
            };
            match chunk {
                Ok(Some(bytes)) => {
                    if out.len() + bytes.len() > cap {
                        return Err(self.stream_error(format!(
                            "the answer is larger than {} MiB; refused",
                            cap >> 20
                        )));
                    }
                    out.extend_from_slice(&bytes);
                }
                Ok(None) => return Ok(out),
                Err(e) => {
                    return Err(ModelError::Connection {
                        provider: self.provider(),
                        message: format!("the answer broke off: {}", root_cause(&e)),
                    });
                }
            }
        }
    }

    fn provider(&self) -> ProviderKind {
        self.config.provider
    }

    fn headers(&self, content_type: &str, accept: &'static str) -> Result<HeaderMap, ModelError> {
        let mut headers = HeaderMap::new();
        headers.insert(
            "content-type",
            HeaderValue::from_str(content_type)
                .map_err(|_| ModelError::Config(format!("{content_type:?} is no header value")))?,
        );
        headers.insert("accept", HeaderValue::from_static(accept));
        if self.provider() == ProviderKind::Anthropic {
            headers.insert("anthropic-version", HeaderValue::from_static("2023-06-01"));
        }
        let Some(key) = self.key.value() else {
            return Ok(headers);
        };
        let (name, value) = match self.provider() {
            ProviderKind::OpenAi | ProviderKind::OpenAiResponses => {
                ("authorization", format!("Bearer {key}"))
            }
            ProviderKind::Anthropic => ("x-api-key", key.to_owned()),
            ProviderKind::Gemini => ("x-goog-api-key", key.to_owned()),
        };
        // The error names the source only: the value may be half a key.
        let mut value = HeaderValue::from_str(&value).map_err(|_| {
            ModelError::Config(format!(
                "the {} key from {} holds characters a header cannot carry (a line break?); store it again",
                self.provider(),
                self.key.source()
            ))
        })?;
        // Keeps the value out of the HTTP stack's own debug output.
        value.set_sensitive(true);
        headers.insert(HeaderName::from_static(name), value);
        Ok(headers)
    }

    /// Sends until a success, a refusal not worth retrying, or the attempts run out.
    async fn send(
        &self,
        url: &str,
        headers: HeaderMap,
        body: Vec<u8>,
        cancel: &CancellationToken,
        on_event: &(dyn Fn(ModelEvent) + Send + Sync),
    ) -> Result<reqwest::Response, ModelError> {
        let max_attempts = self.retry.max_attempts.max(1);
        let mut attempt = 0;
        loop {
            attempt += 1;
            let sent = self
                .http
                .post(url)
                .headers(headers.clone())
                .body(body.clone())
                .send();
            let outcome = tokio::select! {
                _ = cancel.cancelled() => return Err(ModelError::Cancelled),
                outcome = sent => outcome,
            };
            let (wait, reason) = match outcome {
                Ok(response) if response.status().is_success() => return Ok(response),
                Ok(response) => {
                    let status = response.status().as_u16();
                    let asked = retry_after(response.headers(), SystemTime::now());
                    let text = tokio::select! {
                        _ = cancel.cancelled() => return Err(ModelError::Cancelled),
                        text = response.text() => text.unwrap_or_default(),
                    };
                    let message = provider_message(&text);
                    if !is_retryable(status) {
                        return Err(self.refusal(status, message));
                    }
                    if let Some(asked) = asked
                        && asked > self.retry.max_wait
                    {
                        return Err(self.status_error(status, message, format!(
                            "it asked to wait {} s before trying again, longer than max_retry_wait_secs ({} s); try again later",
                            asked.as_secs(),
                            self.retry.max_wait.as_secs()
                        )));
                    }
                    if attempt >= max_attempts {
                        return Err(self.status_error(status, message, format!(
                            "gave up after {attempt} attempts; try again later, or raise max_attempts"
                        )));
                    }
                    let wait = asked.unwrap_or_else(|| self.retry.backoff(attempt));
                    (wait, format!("{status}: {message}"))
                }
                Err(e) => {
                    let message = connection_message(url, &e);
                    if attempt >= max_attempts {
                        return Err(ModelError::Connection {
                            provider: self.provider(),
                            message: format!("{message} (gave up after {attempt} attempts)"),
                        });
                    }
                    (self.retry.backoff(attempt), message)
                }
            };
            on_event(ModelEvent::Retrying {
                attempt,
                max_attempts,
                wait,
                reason,
            });
            tokio::select! {
                _ = cancel.cancelled() => return Err(ModelError::Cancelled),
                _ = tokio::time::sleep(wait) => {}
            }
        }
    }

    /// Reads the event stream to its end marker.
    async fn read(
        &self,
        mut response: reqwest::Response,
        mut state: Box<dyn StreamState>,
        cancel: &CancellationToken,
        on_event: &(dyn Fn(ModelEvent) + Send + Sync),
    ) -> Result<Turn, ModelError> {
        let mut parser = SseParser::new();
        // The start of the body, to show when it held no events at all (a server that
        // ignored `stream: true`, a proxy's HTML page).
        let mut head = Vec::new();
        let mut events_seen = false;
        loop {
            let chunk = tokio::select! {
                _ = cancel.cancelled() => return Err(ModelError::Cancelled),
                chunk = response.chunk() => chunk,
            };
            let ended = matches!(chunk, Ok(None));
            let events = match chunk {
                Ok(Some(bytes)) => {
                    if head.len() < 300 {
                        head.extend_from_slice(&bytes[..bytes.len().min(300 - head.len())]);
                    }
                    parser.push(&bytes)
                }
                Ok(None) => parser.finish().into_iter().collect(),
                Err(e) => {
                    let message = if e.is_timeout() {
                        format!(
                            "the stream went silent for {} s (timeout_secs)",
                            self.config.idle_timeout().as_secs()
                        )
                    } else {
                        format!("the stream broke: {}", root_cause(&e))
                    };
                    return Err(ModelError::Connection {
                        provider: self.provider(),
                        message,
                    });
                }
            };
            for event in &events {
                events_seen = true;
                let emit = |e: ModelEvent| on_event(e);
                if state
                    .event(event, &emit)
                    .map_err(|m| self.stream_error(m))?
                {
                    return state.finish().map_err(|m| self.stream_error(m));
                }
            }
            if ended {
                if !events_seen {
                    let head = String::from_utf8_lossy(&head);
                    return Err(self.stream_error(format!(
                        "the response held no server-sent events (does the server support streaming?); it began: {:?}",
                        head.trim()
                    )));
                }
                return state.finish().map_err(|m| self.stream_error(m));
            }
        }
    }

    fn stream_error(&self, message: String) -> ModelError {
        ModelError::Stream {
            provider: self.provider(),
            message,
        }
    }

    fn status_error(&self, status: u16, message: String, action: String) -> ModelError {
        ModelError::Status {
            provider: self.provider(),
            status,
            message,
            action,
        }
    }

    /// A 4xx other than 429: what the provider said and what to do about it.
    fn refusal(&self, status: u16, message: String) -> ModelError {
        let source = self.key.source();
        let action = match status {
            401 if *source == KeySource::None => {
                "the server wants a key: set key in this model's [models.<name>] entry".to_owned()
            }
            401 => format!("check the API key, which came from {source}"),
            403 => format!(
                "the key from {source} may not use this model or API; check its permissions"
            ),
            404 => format!(
                "check model = {:?} and base_url = {:?}",
                self.config.model,
                self.config.base_url()
            ),
            413 => "the request is too large: shorten the conversation".to_owned(),
            _ => "the request was refused as sent; the message says which part".to_owned(),
        };
        self.status_error(status, message, action)
    }
}

/// The provider's `error.message` (all four put it there; Gemini sometimes wraps the object in
/// an array, vLLM puts `message` at the top), else the start of the body.
fn provider_message(body: &str) -> String {
    let parsed: Option<Value> = serde_json::from_str(body).ok();
    let error = parsed.as_ref().map(|v| match v {
        Value::Array(items) => items.first().unwrap_or(v),
        _ => v,
    });
    let message = error.and_then(|e| {
        e.pointer("/error/message")
            .or_else(|| e.get("message"))
            .and_then(Value::as_str)
    });
    match message {
        Some(message) => message.to_owned(),
        None if body.trim().is_empty() => "(no body)".to_owned(),
        None => {
            let start: String = body.trim().chars().take(300).collect();
            format!("{start:?}")
        }
    }
}

fn connection_message(url: &str, error: &reqwest::Error) -> String {
    if error.is_timeout() {
        return format!("no answer from {url} in time (timeout_secs)");
    }
    format!("cannot reach {url}: {}", root_cause(error))
}

/// The innermost cause: reqwest's own message ("error sending request") says less than the
/// refused connection or the failed DNS lookup beneath it.
fn root_cause(error: &(dyn std::error::Error + 'static)) -> String {
    let mut cause = error;
    while let Some(source) = cause.source() {
        cause = source;
    }
    cause.to_string()
}

/// `value` as an object field, for provider files reading events.
pub(crate) fn u64_at(value: &Value, pointer: &str) -> Option<u64> {
    value.pointer(pointer).and_then(Value::as_u64)
}
