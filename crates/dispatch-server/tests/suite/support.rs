//! A daemon over the real built-in tools and a real SQLite file, in a temp dir.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use dispatch_engine::{Engine, EngineConfig};
use dispatch_server::{Access, Daemon, Hub};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tower::ServiceExt;

pub struct TestDaemon {
    pub daemon: Arc<Daemon>,
    pub dir: tempfile::TempDir,
}

impl TestDaemon {
    pub fn new() -> TestDaemon {
        Self::with_timeout(Duration::from_secs(300))
    }

    pub fn with_timeout(confirm_timeout: Duration) -> TestDaemon {
        Self::build(confirm_timeout, dispatch_server::SHUTDOWN_GRACE)
    }

    pub fn with_grace(grace: Duration) -> TestDaemon {
        Self::build(Duration::from_secs(300), grace)
    }

    pub fn with_limits(limits: dispatch_server::Limits) -> TestDaemon {
        Self::build_with(
            Duration::from_secs(300),
            dispatch_server::SHUTDOWN_GRACE,
            limits,
        )
    }

    fn build(confirm_timeout: Duration, grace: Duration) -> TestDaemon {
        Self::build_with(confirm_timeout, grace, dispatch_server::Limits::default())
    }

    fn build_with(
        confirm_timeout: Duration,
        grace: Duration,
        limits: dispatch_server::Limits,
    ) -> TestDaemon {
        let dir = tempfile::tempdir().unwrap();
        let work = dir.path().join("work");
        std::fs::create_dir_all(&work).unwrap();
        let store: Arc<dyn dispatch_store::Store> = Arc::new(
            dispatch_store::sqlite::SqliteStore::open(&dir.path().join("store.db")).unwrap(),
        );
        let hub = Hub::new(confirm_timeout);
        let mut config = EngineConfig::new(work.canonicalize().unwrap());
        config.confirm_timeout = confirm_timeout;
        let engine = Engine::new(
            dispatch_tools::builtin_registry_with(
                &dispatch_tools::ToolsConfig::default(),
                &dispatch_tools::Stores::all(&store),
            )
            .unwrap(),
            store.clone(),
            hub.clone(),
            config,
        )
        .unwrap()
        .with_error_memory(store.clone())
        .with_result_cache(store.clone())
        .with_secrets(store.clone());
        let daemon = Daemon::with_limits(Arc::new(engine), hub, store, grace, limits);
        TestDaemon { daemon, dir }
    }

    pub fn work(&self) -> std::path::PathBuf {
        self.dir.path().join("work")
    }

    /// One request through the router, in-process.
    pub async fn call(
        &self,
        access: Access,
        request: Request<Body>,
    ) -> (StatusCode, axum::http::HeaderMap, Value) {
        let app = dispatch_server::router(self.daemon.clone(), access);
        let response = app.oneshot(request).await.unwrap();
        let status = response.status();
        let headers = response.headers().clone();
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        let body = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes)
                .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()))
        };
        (status, headers, body)
    }

    pub async fn get(&self, path: &str) -> (StatusCode, Value) {
        let (status, _, body) = self.call(Access::default(), get(path)).await;
        (status, body)
    }

    pub async fn post(&self, path: &str, body: &Value) -> (StatusCode, Value) {
        let (status, _, body) = self
            .call(Access::default(), post(path, &body.to_string()))
            .await;
        (status, body)
    }

    /// Serve on 127.0.0.1:0 until the returned sender is dropped or fired.
    pub async fn serve(&self) -> Served {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(dispatch_server::serve(
            listener,
            self.daemon.clone(),
            Access::default(),
            async move {
                let _ = stopped.await;
            },
        ));
        Served {
            url,
            stop: Some(stop),
            task,
            client: dispatch_tools::web::client::builder().build().unwrap(),
        }
    }
}

pub struct Served {
    pub url: String,
    pub stop: Option<tokio::sync::oneshot::Sender<()>>,
    pub task: tokio::task::JoinHandle<std::io::Result<()>>,
    pub client: reqwest::Client,
}

impl Served {
    pub async fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        let response = self
            .client
            .post(format!("{}{path}", self.url))
            .json(body)
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    pub async fn get(&self, path: &str) -> Value {
        self.client
            .get(format!("{}{path}", self.url))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }

    /// Open an event stream; `last_event_id` resumes after that id.
    pub async fn events(&self, path: &str, last_event_id: Option<u64>) -> Sse {
        let mut request = self.client.get(format!("{}{path}", self.url));
        if let Some(id) = last_event_id {
            request = request.header("last-event-id", id.to_string());
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), 200);
        assert_eq!(
            response.headers()["content-type"].to_str().unwrap(),
            "text/event-stream"
        );
        Sse {
            response,
            buffer: String::new(),
        }
    }
}

/// A reader of one SSE stream.
pub struct Sse {
    response: reqwest::Response,
    buffer: String,
}

/// One SSE message: its id (if any) and its JSON data.
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    pub id: Option<u64>,
    pub data: Value,
}

impl Sse {
    /// The next message, waiting at most 30 s (a hang fails the test instead of blocking it).
    pub async fn next(&mut self) -> Message {
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let block: String = self.buffer.drain(..end + 2).collect();
                let mut id = None;
                let mut data = String::new();
                for line in block.lines() {
                    if let Some(v) = line.strip_prefix("id:") {
                        id = Some(v.trim().parse().unwrap());
                    } else if let Some(v) = line.strip_prefix("data:") {
                        data.push_str(v.strip_prefix(' ').unwrap_or(v));
                    }
                }
                if data.is_empty() {
                    continue; // a keep-alive comment
                }
                return Message {
                    id,
                    data: serde_json::from_str(&data).unwrap(),
                };
            }
            let chunk = tokio::time::timeout(Duration::from_secs(30), self.response.chunk())
                .await
                .expect("no SSE message within 30 s")
                .unwrap()
                .expect("the event stream ended");
            self.buffer.push_str(&String::from_utf8_lossy(&chunk));
        }
    }

    /// Messages until (and including) the first one of `kind`.
    pub async fn until(&mut self, kind: &str) -> Vec<Message> {
        let mut seen = Vec::new();
        loop {
            let m = self.next().await;
            let done = m.data["type"] == kind;
            seen.push(m);
            if done {
                return seen;
            }
        }
    }
}

pub fn get(path: &str) -> Request<Body> {
    Request::get(path)
        .header("host", "127.0.0.1:7878")
        .body(Body::empty())
        .unwrap()
}

pub fn post(path: &str, body: &str) -> Request<Body> {
    Request::post(path)
        .header("host", "127.0.0.1:7878")
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .unwrap()
}

/// An OpenAI assistant message with these calls: (id, tool, args). Tools other than the core
/// ones go through run_tool.
pub fn reply(calls: &[(&str, &str, Value)]) -> Value {
    let core = [
        "find_tools",
        "write_todo",
        "ask_user",
        "reasoning_guide",
        "chat_history",
        "write_result",
    ];
    let tool_calls: Vec<Value> = calls
        .iter()
        .map(|(id, name, args)| {
            let (name, args) = if core.contains(name) {
                (name.to_string(), args.clone())
            } else {
                ("run_tool".to_string(), json!({"name": name, "args": args}))
            };
            json!({"id": id, "type": "function",
                   "function": {"name": name, "arguments": args.to_string()}})
        })
        .collect();
    json!({"role": "assistant", "content": null, "tool_calls": tool_calls})
}

/// Mark tools (fetch their schemas) so run_tool runs them.
pub fn select(id: &str, names: &str) -> Value {
    reply(&[(
        id,
        "find_tools",
        json!({"query": format!("select:{names}")}),
    )])
}
