//! A tiny HTTP/1.1 server on 127.0.0.1:0 for the web tools' tests: one request per connection,
//! answered by the test's own function, every request recorded.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A request as the server saw it.
#[derive(Clone, Debug)]
pub struct Seen {
    pub method: String,
    pub path: String,
    /// Names lower-cased.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Seen {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// What the server answers.
#[derive(Clone, Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// Wait this long before answering.
    pub delay: Duration,
    /// Send the body in pieces of this size, pausing `chunk_pause` between them.
    pub chunk: usize,
    pub chunk_pause: Duration,
}

impl Reply {
    pub fn new(status: u16, content_type: &str, body: impl Into<Vec<u8>>) -> Self {
        Reply {
            status,
            headers: vec![("content-type".into(), content_type.into())],
            body: body.into(),
            delay: Duration::ZERO,
            chunk: usize::MAX,
            chunk_pause: Duration::ZERO,
        }
    }
    pub fn redirect(status: u16, location: &str) -> Self {
        let mut r = Reply::new(status, "text/plain", "moved");
        r.headers.push(("location".into(), location.into()));
        r
    }
    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }
    pub fn delay(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }
    pub fn chunked(mut self, chunk: usize, pause: Duration) -> Self {
        self.chunk = chunk;
        self.chunk_pause = pause;
        self
    }
}

type Handler = Arc<dyn Fn(&Seen) -> Reply + Send + Sync>;

/// A running server; it stops when dropped.
pub struct TestServer {
    pub addr: SocketAddr,
    pub seen: Arc<Mutex<Vec<Seen>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl TestServer {
    /// A server on 127.0.0.1:0 answering with `handler`.
    pub async fn start(handler: impl Fn(&Seen) -> Reply + Send + Sync + 'static) -> Self {
        Self::start_on("127.0.0.1:0", handler).await
    }

    pub async fn start_on(
        bind: &str,
        handler: impl Fn(&Seen) -> Reply + Send + Sync + 'static,
    ) -> Self {
        let listener = TcpListener::bind(bind).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let handler: Handler = Arc::new(handler);
        let (seen2, handler2) = (seen.clone(), handler.clone());
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (seen, handler) = (seen2.clone(), handler2.clone());
                tokio::spawn(async move {
                    let _ = serve(stream, seen, handler).await;
                });
            }
        });
        TestServer { addr, seen, task }
    }

    /// `http://127.0.0.1:PORT{path}`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// `127.0.0.1:PORT`, for an allow list.
    pub fn host_port(&self) -> String {
        self.addr.to_string()
    }

    pub fn requests(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

async fn serve(
    mut stream: TcpStream,
    seen: Arc<Mutex<Vec<Seen>>>,
    handler: Handler,
) -> std::io::Result<()> {
    let mut buf = Vec::new();
    let mut piece = [0u8; 8192];
    let head_end = loop {
        let n = stream.read(&mut piece).await?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&piece[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let mut lines = head.split("\r\n");
    let mut first = lines.next().unwrap_or("").split(' ');
    let method = first.next().unwrap_or("").to_string();
    let path = first.next().unwrap_or("").to_string();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let length: usize = headers
        .iter()
        .find(|(k, _)| k == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = buf[head_end..].to_vec();
    while body.len() < length {
        let n = stream.read(&mut piece).await?;
        if n == 0 {
            break;
        }
        body.extend_from_slice(&piece[..n]);
    }
    let request = Seen {
        method,
        path,
        headers,
        body,
    };
    seen.lock().unwrap().push(request.clone());
    let reply = handler(&request);
    tokio::time::sleep(reply.delay).await;
    let mut out = format!("HTTP/1.1 {} X\r\n", reply.status);
    for (k, v) in &reply.headers {
        out.push_str(&format!("{k}: {v}\r\n"));
    }
    out.push_str(&format!(
        "content-length: {}\r\nconnection: close\r\n\r\n",
        reply.body.len()
    ));
    stream.write_all(out.as_bytes()).await?;
    if request.method != "HEAD" {
        for part in reply.body.chunks(reply.chunk.max(1)) {
            stream.write_all(part).await?;
            if !reply.chunk_pause.is_zero() {
                tokio::time::sleep(reply.chunk_pause).await;
            }
        }
    }
    stream.flush().await?;
    Ok(())
}
