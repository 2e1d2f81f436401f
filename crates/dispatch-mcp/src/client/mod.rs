//! MCP servers as tooldispatch tools.
//!
//! Each `[mcp.servers.<name>]` entry becomes a [`Connection`](connection::Connection): a stdio
//! child process (optionally in the command sandbox) or a Streamable HTTP endpoint, kept
//! running by a supervisor that restarts it with back-off. Its tools are registered as
//! `mcp__<server>__<tool>` ([`tool`]); they are deferred like every non-core tool, always
//! serial, and ask before they run unless the user trusts the server's read-only
//! annotations. Results are read by [`content`]; what the server sends during a call
//! (progress, questions for the user) is handled by [`handler`].
//!
//! ```no_run
//! # async fn demo(engine: &dispatch_engine::Engine, options: dispatch_mcp::client::ClientOptions) {
//! use dispatch_mcp::client::{McpClients, ServerConfig};
//! let servers = [("git".to_string(), ServerConfig::stdio("uvx", &["mcp-server-git"]))];
//! let clients = McpClients::start(servers, options).await;
//! engine.update_registry(|registry| clients.register_into(registry));
//! # }
//! ```

mod config;
mod connection;
pub mod content;
mod handler;
mod tool;

use std::path::PathBuf;
use std::sync::Arc;

use dispatch_engine::{Origin, Registry};
use serde::Serialize;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

pub use config::{ServerConfig, Transport, check_name};
use connection::Connection;

/// What every server shares: where it works, and the sandbox a `sandbox = true` server runs in.
pub struct ClientOptions {
    /// The work directory: the one root offered to servers, and where a server's relative
    /// `cwd` starts.
    pub workdir: PathBuf,
    /// Where a stdio server without `cwd` starts. Launchers read the directory they start in
    /// (`npx` runs `./node_modules/.bin`, `python -m` imports from it, `uvx` reads its
    /// `uv.toml`), so an untrusted work directory must not be it: the caller passes the work
    /// directory only when the user trusts it, else an empty directory of its own.
    pub start_dir: PathBuf,
    pub sandbox: Arc<dispatch_sandbox::Sandbox>,
    /// Paths hidden from a sandboxed server besides the sandbox's defaults (the store, its key).
    pub hidden: Vec<PathBuf>,
}

impl ClientOptions {
    /// Options for a trusted work directory: servers start in it.
    pub fn new(workdir: impl Into<PathBuf>) -> Self {
        let workdir = workdir.into();
        ClientOptions {
            start_dir: workdir.clone(),
            workdir,
            sandbox: dispatch_sandbox::Sandbox::shared(),
            hidden: Vec::new(),
        }
    }
}

/// Where a server is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ServerState {
    Starting,
    Ready,
    /// It could not start, or died; `reason` says why and when it is tried again.
    Failed,
    Disabled,
}

/// One server as `tooldispatch mcp list` shows it.
#[derive(Clone, Debug, Serialize)]
pub struct ServerStatus {
    pub name: String,
    pub transport: &'static str,
    pub state: ServerState,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub protocol_version: Option<String>,
    pub tools: usize,
    /// Tools the server listed that could not be registered, each with the reason.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub refused: Vec<String>,
}

impl ServerStatus {
    /// One line for a person: `git: ready (stdio, protocol 2025-11-25, 12 tools)`.
    pub fn line(&self) -> String {
        let state = match self.state {
            ServerState::Starting => "starting",
            ServerState::Ready => "ready",
            ServerState::Failed => "failed",
            ServerState::Disabled => "disabled",
        };
        let mut line = format!("{}: {state} ({}", self.name, self.transport);
        if let Some(version) = &self.protocol_version {
            line.push_str(&format!(", protocol {version}"));
        }
        line.push_str(&format!(", {} tools)", self.tools));
        if let Some(reason) = &self.reason {
            line.push_str(&format!(": {reason}"));
        }
        for refused in &self.refused {
            line.push_str(&format!("\n  refused: {refused}"));
        }
        line
    }
}

/// `text` cut to `max` characters, with `…` when cut: a server's words go into the model's
/// prompt and the event log, so none of them is taken whole.
pub(crate) fn clip(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_string(),
    }
}

/// The configured MCP servers, running.
pub struct McpClients {
    connections: Vec<Arc<Connection>>,
    changed: Arc<Notify>,
    stop: CancellationToken,
}

impl McpClients {
    /// Start every enabled server and wait until each has either finished its handshake and
    /// listed its tools or failed (each within its `startup_timeout_s`). Servers that failed
    /// keep being retried in the background while the returned value lives.
    pub async fn start(
        servers: impl IntoIterator<Item = (String, ServerConfig)>,
        options: ClientOptions,
    ) -> McpClients {
        McpClients::start_checked(servers.into_iter().map(|(n, c)| (n, c, None)), options).await
    }

    /// [`McpClients::start`] for entries the caller may already have found unusable: an entry
    /// with `Some(reason)` (a secret its env needs is not stored) is listed as failed with the
    /// reason and never started.
    pub async fn start_checked(
        servers: impl IntoIterator<Item = (String, ServerConfig, Option<String>)>,
        options: ClientOptions,
    ) -> McpClients {
        let options = Arc::new(options);
        let changed = Arc::new(Notify::new());
        let stop = CancellationToken::new();
        let mut connections = Vec::new();
        let mut started = Vec::new();
        for (name, config, unusable) in servers {
            let connection = Connection::new(
                name,
                config,
                unusable,
                options.clone(),
                changed.clone(),
                stop.clone(),
            );
            if connection.wanted() {
                let (tx, rx) = tokio::sync::oneshot::channel();
                tokio::spawn(connection.clone().supervise(tx));
                started.push(rx);
            }
            connections.push(connection);
        }
        for first in started {
            let _ = first.await;
        }
        McpClients {
            connections,
            changed,
            stop,
        }
    }

    /// Replace the MCP tools in `registry` with the servers' current tools.
    pub fn register_into(&self, registry: &mut Registry) {
        let ours: Vec<&str> = self.connections.iter().map(|c| c.name.as_str()).collect();
        registry.retain(|t| match &t.spec().origin {
            Origin::Mcp { server } => !ours.contains(&server.as_str()),
            _ => true,
        });
        for connection in &self.connections {
            for tool in connection.tools() {
                // Refusals were found and recorded when the server listed its tools.
                let _ = registry.register(tool);
            }
        }
    }

    /// Every configured server: state, protocol version, tools, and why it is not ready.
    pub fn statuses(&self) -> Vec<ServerStatus> {
        self.connections.iter().map(|c| c.status()).collect()
    }

    /// Wait until some server's tools change (it started, restarted, died or said so).
    pub async fn changed(&self) {
        self.changed.notified().await;
    }

    /// Keep `engine`'s tools in step with the servers for as long as this runs (a long-lived
    /// process spawns it beside its engine): each change reaches the next round.
    pub async fn follow(&self, engine: &dispatch_engine::Engine) {
        loop {
            self.changed().await;
            engine.update_registry(|registry| self.register_into(registry));
        }
    }

    pub fn is_empty(&self) -> bool {
        self.connections.is_empty()
    }
}

impl Drop for McpClients {
    /// Stop the supervisors; they kill their servers.
    fn drop(&mut self) {
        self.stop.cancel();
    }
}
