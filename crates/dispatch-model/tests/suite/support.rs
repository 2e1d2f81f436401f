//! A fake model server on 127.0.0.1: a raw HTTP/1.1 listener that answers each request with the
//! next scripted reply and records what it was sent. Raw, so a test decides exactly where the
//! stream is cut into chunks and when it stops.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dispatch_model::{
    ApiKey, KeySource, ModelClient, ModelConfig, ModelError, ModelEvent, ProviderKind, RetryPolicy,
    Turn, TurnRequest,
};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// The key every test client sends; no error may ever contain it.
pub const KEY: &str = "sk-test-3f9a7c1e-never-in-errors";

/// One scripted answer.
#[derive(Clone)]
pub struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    chunks: Vec<Vec<u8>>,
    /// Keep the connection open after the last chunk, as a model still thinking would.
    hang: bool,
    /// Wait this long before answering, as a model thinking would.
    delay: Duration,
}

impl Reply {
    /// A 200 event stream of these `data:` payloads, cut into 7-byte chunks so that events,
    /// lines, CRLFs and UTF-8 characters are split across reads.
    pub fn sse(events: &[(Option<&str>, Value)]) -> Reply {
        let mut body = String::new();
        for (name, data) in events {
            if let Some(name) = name {
                body.push_str(&format!("event: {name}\r\n"));
            }
            body.push_str(&format!("data: {data}\r\n\r\n"));
        }
        Reply::raw_sse(&body)
    }

    /// A 200 event stream of this exact text.
    pub fn raw_sse(body: &str) -> Reply {
        Reply {
            status: 200,
            headers: vec![("content-type".into(), "text/event-stream".into())],
            chunks: body.as_bytes().chunks(7).map(<[u8]>::to_vec).collect(),
            hang: false,
            delay: Duration::ZERO,
        }
    }

    pub fn status(status: u16, body: &str) -> Reply {
        Reply {
            status,
            headers: vec![("content-type".into(), "application/json".into())],
            chunks: vec![body.as_bytes().to_vec()],
            hang: false,
            delay: Duration::ZERO,
        }
    }

    /// A 200 answer of these bytes, as a media API sends a file.
    pub fn bytes(content_type: &str, body: &[u8]) -> Reply {
        Reply {
            status: 200,
            headers: vec![("content-type".into(), content_type.into())],
            chunks: body.chunks(4096).map(<[u8]>::to_vec).collect(),
            hang: false,
            delay: Duration::ZERO,
        }
    }

    pub fn header(mut self, name: &str, value: &str) -> Reply {
        self.headers.push((name.into(), value.into()));
        self
    }

    pub fn hang(mut self) -> Reply {
        self.hang = true;
        self
    }

    pub fn delay(mut self, delay: Duration) -> Reply {
        self.delay = delay;
        self
    }
}

/// What one request carried.
#[derive(Clone, Debug)]
pub struct Recorded {
    pub at: Instant,
    /// The path with its query.
    pub path: String,
    /// Header names in lower case.
    pub headers: HashMap<String, String>,
    /// The body as JSON (`Null` when it is none, e.g. multipart).
    pub body: Value,
    /// The body as sent.
    pub raw: Vec<u8>,
}

pub struct FakeServer {
    /// The base URL to configure (`http://127.0.0.1:PORT/v1`).
    pub base_url: String,
    requests: Arc<Mutex<Vec<Recorded>>>,
}

impl FakeServer {
    pub async fn start(replies: Vec<Reply>) -> FakeServer {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let replies = Arc::new(Mutex::new(VecDeque::from(replies)));
        let recorded = requests.clone();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let recorded = recorded.clone();
                let replies = replies.clone();
                tokio::spawn(async move {
                    let Some(request) = read_request(&mut stream).await else {
                        return;
                    };
                    recorded.lock().unwrap().push(request);
                    let reply = replies.lock().unwrap().pop_front().unwrap_or_else(|| {
                        Reply::status(599, r#"{"error":{"message":"no scripted reply left"}}"#)
                    });
                    tokio::time::sleep(reply.delay).await;
                    let mut head = format!("HTTP/1.1 {} Scripted\r\n", reply.status);
                    for (name, value) in &reply.headers {
                        head.push_str(&format!("{name}: {value}\r\n"));
                    }
                    // No length: the body ends when the connection closes, as a stream does.
                    head.push_str("connection: close\r\n\r\n");
                    if stream.write_all(head.as_bytes()).await.is_err() {
                        return;
                    }
                    for chunk in &reply.chunks {
                        if stream.write_all(chunk).await.is_err() || stream.flush().await.is_err() {
                            return;
                        }
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    }
                    if reply.hang {
                        std::future::pending::<()>().await;
                    }
                });
            }
        });
        FakeServer {
            base_url: format!("http://{addr}/v1"),
            requests,
        }
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.requests.lock().unwrap().clone()
    }

    pub fn only_request(&self) -> Recorded {
        let requests = self.requests();
        assert_eq!(requests.len(), 1, "expected one request");
        requests.into_iter().next().unwrap()
    }
}

async fn read_request(stream: &mut tokio::net::TcpStream) -> Option<Recorded> {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(at) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buffer.extend_from_slice(&chunk[..n]);
    };
    let at = Instant::now();
    let head = String::from_utf8_lossy(&buffer[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let path = lines.next()?.split(' ').nth(1)?.to_owned();
    let headers: HashMap<String, String> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let length: usize = headers
        .get("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    while buffer.len() < head_end + length {
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buffer.extend_from_slice(&chunk[..n]);
    }
    let raw = buffer[head_end..head_end + length].to_vec();
    let body = serde_json::from_slice(&raw).unwrap_or(Value::Null);
    Some(Recorded {
        at,
        path,
        headers,
        body,
        raw,
    })
}

/// A client of `provider` at the fake server, with short back-offs.
pub fn client(provider: ProviderKind, server: &FakeServer) -> ModelClient {
    client_with(ModelConfig::new(provider, "test-model"), server)
}

pub fn client_with(mut config: ModelConfig, server: &FakeServer) -> ModelClient {
    config.base_url = Some(server.base_url.clone());
    ModelClient::new(config, ApiKey::new(KEY, KeySource::Env("TEST_KEY".into())))
        .unwrap()
        .with_retry_policy(RetryPolicy {
            max_attempts: 4,
            base_wait: Duration::from_millis(10),
            max_wait: Duration::from_secs(60),
        })
}

/// One turn with this history and tools; the events the callback saw.
pub async fn turn(
    client: &ModelClient,
    history: &[Value],
    tools: &[Value],
) -> (Result<Turn, ModelError>, Vec<ModelEvent>) {
    turn_cancelling(client, history, tools, |_| false).await
}

/// Like [`turn`], cancelling the token when `cancel_on` says so for an event.
pub async fn turn_cancelling(
    client: &ModelClient,
    history: &[Value],
    tools: &[Value],
    cancel_on: impl Fn(&ModelEvent) -> bool + Send + Sync,
) -> (Result<Turn, ModelError>, Vec<ModelEvent>) {
    let events = Mutex::new(Vec::new());
    let cancel = CancellationToken::new();
    let on_event = |event: ModelEvent| {
        if cancel_on(&event) {
            cancel.cancel();
        }
        events.lock().unwrap().push(event);
    };
    let request = TurnRequest {
        system: "You are terse.",
        history,
        tools,
    };
    let result = client.turn(&request, &cancel, &on_event).await;
    (result, events.into_inner().unwrap())
}

/// The text deltas among `events`, joined.
pub fn streamed_text(events: &[ModelEvent]) -> String {
    events
        .iter()
        .filter_map(|e| match e {
            ModelEvent::TextDelta(t) => Some(t.as_str()),
            _ => None,
        })
        .collect()
}

/// The error's Display and Debug, checked to hold no key.
pub fn error_text(error: &ModelError) -> String {
    let shown = format!("{error} {error:?}");
    assert!(!shown.contains(KEY), "the key leaked: {shown}");
    error.to_string()
}
