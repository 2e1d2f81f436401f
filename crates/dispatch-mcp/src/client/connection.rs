//! One configured MCP server: starting it, the handshake, its tool list, its calls, and
//! restarting it with back-off when it dies.

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dispatch_engine::{Registry, Tool, ToolContext, ToolError, ToolOutput};
use rmcp::ServiceError;
use rmcp::model::{CallToolRequestParams, ProtocolVersion};
use rmcp::service::{
    ClientInitializeError, ClientLifecycleMode, ClientServiceExt, RoleClient, RunningService,
};
use serde_json::Value;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::config::{ServerConfig, Transport};
use super::handler::{CurrentCall, Handler, Shared};
use super::tool::McpTool;
use super::{ClientOptions, ServerState, ServerStatus, content};

type Service = RunningService<RoleClient, Handler>;

/// Tools kept from one server: its list goes into every prompt's turn context.
const MAX_TOOLS: usize = 200;
/// Pages of `tools/list` read from one server.
const MAX_PAGES: usize = 20;
/// Lines of a stdio server's stderr kept to explain why it failed.
const STDERR_LINES: usize = 12;
/// The longest wait between two restarts.
const MAX_BACKOFF: Duration = Duration::from_secs(60);
/// A server that ran this long before dying starts the back-off again from one second.
const STABLE_UPTIME: Duration = Duration::from_secs(60);

pub(crate) struct Connection {
    pub name: String,
    pub config: ServerConfig,
    transport: Result<Transport, String>,
    options: Arc<ClientOptions>,
    shared: Arc<Shared>,
    state: Mutex<State>,
    /// One call at a time: MCP tools are serial, and what the server sends during a call
    /// (progress, questions for the user) is then known to belong to it.
    calls: tokio::sync::Mutex<()>,
    stderr: Arc<Mutex<VecDeque<String>>>,
    /// Told whenever this server's tools change (it started, restarted, died, or said so).
    changed: Arc<Notify>,
    stop: CancellationToken,
    /// How to open the handshake: probe first, until a slow server's late answer says which
    /// revision it speaks.
    handshake: Mutex<Handshake>,
    /// This connection, for the tools it makes (they must not keep it alive).
    me: std::sync::Weak<Connection>,
}

/// How a connection opens the MCP handshake.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Handshake {
    /// `server/discover` for ten seconds, then `initialize` (what a new connection does).
    Probe,
    /// The server answered the probe late with a result: it speaks 2026-07-28.
    Discover,
    /// The server answered the probe late with an error: it only knows `initialize`.
    Initialize,
}

/// Why one handshake attempt failed.
enum Failure {
    /// A late answer to the probe arrived instead of the answer to `initialize`.
    Late(Handshake),
    Other(String),
}

impl From<String> for Failure {
    fn from(e: String) -> Self {
        Failure::Other(e)
    }
}

impl From<&str> for Failure {
    fn from(e: &str) -> Self {
        Failure::Other(e.to_string())
    }
}

/// The revision a server's late answer to the probe reveals: rmcp reports it as an answer to
/// the wrong request id.
fn late_answer(e: &ClientInitializeError) -> Option<Handshake> {
    match e {
        ClientInitializeError::ConflictInitResponseId(..) => Some(Handshake::Discover),
        ClientInitializeError::UncorrelatedErrorResponse { .. } => Some(Handshake::Initialize),
        _ => None,
    }
}

struct State {
    phase: ServerState,
    reason: Option<String>,
    protocol: Option<String>,
    tools: Vec<Arc<dyn Tool>>,
    refused: Vec<String>,
    service: Option<Arc<Service>>,
}

impl Connection {
    /// A connection for this entry; `unusable` says why it must not start when the caller
    /// already knows.
    pub fn new(
        name: String,
        config: ServerConfig,
        unusable: Option<String>,
        options: Arc<ClientOptions>,
        changed: Arc<Notify>,
        stop: CancellationToken,
    ) -> Arc<Self> {
        let transport = match unusable {
            Some(reason) => Err(reason),
            None => config.transport(&name),
        };
        let (phase, reason) = match (&transport, config.enabled) {
            (Err(reason), _) => (ServerState::Failed, Some(reason.clone())),
            (Ok(_), false) => (ServerState::Disabled, Some("enabled = false".into())),
            (Ok(_), true) => (ServerState::Starting, None),
        };
        Arc::new_cyclic(|me| Connection {
            me: me.clone(),
            name,
            config,
            transport,
            options,
            shared: Arc::default(),
            state: Mutex::new(State {
                phase,
                reason,
                protocol: None,
                tools: Vec::new(),
                refused: Vec::new(),
                service: None,
            }),
            calls: tokio::sync::Mutex::new(()),
            handshake: Mutex::new(Handshake::Probe),
            stderr: Arc::default(),
            changed,
            stop,
        })
    }

    /// Whether a supervisor should run (the entry is usable and enabled).
    pub fn wanted(&self) -> bool {
        self.transport.is_ok() && self.config.enabled
    }

    pub fn status(&self) -> ServerStatus {
        let state = self.lock();
        ServerStatus {
            name: self.name.clone(),
            transport: if self.config.url.is_some() {
                "http"
            } else {
                "stdio"
            },
            state: state.phase,
            reason: state.reason.clone(),
            protocol_version: state.protocol.clone(),
            tools: state.tools.len(),
            refused: state.refused.clone(),
        }
    }

    pub fn tools(&self) -> Vec<Arc<dyn Tool>> {
        self.lock().tools.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Keep the server running until `stop`: connect, serve, and after a failure wait and
    /// connect again (1 s, 2 s, 4 s … up to a minute). `first` is told once the first
    /// attempt has ended either way, so a caller can wait for the start before its first
    /// round.
    pub async fn supervise(self: Arc<Self>, first: tokio::sync::oneshot::Sender<()>) {
        let mut first = Some(first);
        let mut backoff = Duration::from_secs(1);
        loop {
            let started = Instant::now();
            let limit = self.config.startup_timeout();
            let connected = tokio::select! {
                () = self.stop.cancelled() => return,
                r = tokio::time::timeout(limit, self.connect()) => r,
            };
            let failure = match connected {
                Ok(Ok((service, child))) => {
                    let service = Arc::new(service);
                    match self.install(&service).await {
                        Ok(()) => {
                            // Listening before anyone is told the server is up, so a change
                            // made by the first call is not missed.
                            let listener = self.listen_for_changes(&service).await;
                            if let Some(tx) = first.take() {
                                let _ = tx.send(());
                            }
                            let ended = self.watch(&service, child, listener).await;
                            self.lock().service = None;
                            if self.stop.is_cancelled() {
                                return;
                            }
                            if started.elapsed() >= STABLE_UPTIME {
                                backoff = Duration::from_secs(1);
                            }
                            ended
                        }
                        Err(e) => {
                            drop(child);
                            e
                        }
                    }
                }
                Ok(Err(e)) => e,
                Err(_) => format!(
                    "did not finish starting and the MCP handshake within {} s (startup_timeout_s){}",
                    limit.as_secs(),
                    self.last_words()
                ),
            };
            {
                let mut state = self.lock();
                state.phase = ServerState::Failed;
                // Tools it listed before stay registered: a call then says the server is
                // down and why, instead of "no such tool".
                state.service = None;
                // Retried below while the process lives (the daemon); a one-shot command
                // only needs to know why.
                state.reason = Some(failure);
            }
            self.changed.notify_one();
            if let Some(tx) = first.take() {
                let _ = tx.send(());
            }
            tokio::select! {
                () = self.stop.cancelled() => return,
                () = tokio::time::sleep(backoff) => {}
            }
            backoff = (backoff * 2).min(MAX_BACKOFF);
            self.lock().phase = ServerState::Starting;
        }
    }

    /// Start or reach the server and complete the handshake.
    ///
    /// The probe (the newest revision's discovery, falling back to `initialize` for servers
    /// that answer it with "method not found") gives a server ten seconds, rmcp's fixed
    /// limit, before it sends `initialize` on the same stream. A server slower than that to
    /// start (a Python server on a loaded machine) then answers the probe late, and the
    /// handshake fails on the mismatched id. That late answer says what the server speaks, so
    /// it is started again at once with the handshake of its revision, and later restarts
    /// skip the probe.
    async fn connect(&self) -> Result<(Service, Option<Child>), String> {
        loop {
            let handshake = *self.handshake.lock().unwrap_or_else(|p| p.into_inner());
            match self.connect_with(handshake).await {
                Err(Failure::Late(learned)) if handshake == Handshake::Probe => {
                    *self.handshake.lock().unwrap_or_else(|p| p.into_inner()) = learned;
                }
                Err(Failure::Late(_)) => {
                    return Err(
                        "the MCP handshake failed: the server answered an earlier request instead of this one"
                            .into(),
                    );
                }
                Err(Failure::Other(e)) => return Err(e),
                Ok(connected) => return Ok(connected),
            }
        }
    }

    async fn connect_with(
        &self,
        handshake: Handshake,
    ) -> Result<(Service, Option<Child>), Failure> {
        let handler = Handler {
            shared: self.shared.clone(),
            server: self.name.clone(),
            root_uri: format!("file://{}", self.options.workdir.display()),
            legacy: handshake == Handshake::Initialize,
        };
        let lifecycle = match handshake {
            Handshake::Probe => ClientLifecycleMode::Auto {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
                legacy_version: Some(ProtocolVersion::V_2025_11_25),
            },
            Handshake::Discover => ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            },
            Handshake::Initialize => ClientLifecycleMode::Initialize,
        };
        match self.transport.as_ref().map_err(Clone::clone)? {
            Transport::Stdio { command, args } => {
                let mut child = self.spawn(command, args)?;
                let (Some(stdout), Some(stdin)) =
                    (child.process.stdout.take(), child.process.stdin.take())
                else {
                    return Err("its stdin and stdout could not be connected".into());
                };
                match handler
                    .serve_with_lifecycle((stdout, stdin), lifecycle)
                    .await
                {
                    Ok(service) => Ok((service, Some(child))),
                    Err(e) => {
                        if let Some(learned) = late_answer(&e) {
                            return Err(Failure::Late(learned));
                        }
                        let why = self.exit_words(&mut child).await;
                        drop(child);
                        Err(format!("the MCP handshake failed: {e}{why}").into())
                    }
                }
            }
            Transport::Http { url } => {
                use rmcp::transport::StreamableHttpClientTransport;
                install_tls_provider();
                use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
                let mut config = StreamableHttpClientTransportConfig::with_uri(url.as_str());
                let mut custom = HashMap::new();
                for (name, value) in &self.config.headers {
                    if name.eq_ignore_ascii_case("authorization")
                        && let Some(token) = value.strip_prefix("Bearer ")
                    {
                        config = config.auth_header(token.to_string());
                        continue;
                    }
                    let name = http::HeaderName::try_from(name.as_str())
                        .map_err(|e| format!("header {name:?} is not a valid header name: {e}"))?;
                    let value = http::HeaderValue::try_from(value.as_str()).map_err(|e| {
                        format!("header {name} has a value that cannot be sent: {e}")
                    })?;
                    custom.insert(name, value);
                }
                let transport =
                    StreamableHttpClientTransport::from_config(config.custom_headers(custom));
                let service = handler
                    .serve_with_lifecycle(transport, lifecycle)
                    .await
                    .map_err(|e| match late_answer(&e) {
                        Some(learned) => Failure::Late(learned),
                        None => {
                            format!("cannot reach {url} or complete the MCP handshake: {e}").into()
                        }
                    })?;
                Ok((service, None))
            }
        }
    }

    /// Start a stdio server: a small default environment plus its own `env` (tooldispatch's
    /// own variables, API keys included, are not passed on), in the sandbox when asked.
    fn spawn(&self, command: &str, args: &[String]) -> Result<Child, String> {
        let cwd = match &self.config.cwd {
            Some(dir) => self.options.workdir.join(dir),
            // Our own start directory lies in the data directory, which the sandbox hides; a
            // sandboxed server outside a trusted work directory starts at `/`, where it can
            // write nothing.
            None if self.config.sandbox && self.options.start_dir != self.options.workdir => {
                PathBuf::from("/")
            }
            None => self.options.start_dir.clone(),
        };
        let mut cgroup = None;
        let mut cmd = if self.config.sandbox {
            let program =
                find_program(command).ok_or_else(|| format!("{command} is not found on PATH"))?;
            let mut policy = dispatch_sandbox::Policy::new(
                dispatch_sandbox::Level::Workspace,
                &self.options.workdir,
            );
            policy.network = self.config.network;
            policy.hidden.extend(self.options.hidden.iter().cloned());
            let args: Vec<std::ffi::OsString> = args.iter().map(Into::into).collect();
            let wrapped = self
                .options
                .sandbox
                .wrap(&policy, &program, &args, &cwd)
                .map_err(|e| format!("cannot start it in the sandbox (sandbox = true): {e}"))?;
            cgroup = wrapped.cgroup;
            let mut cmd = tokio::process::Command::new(&wrapped.program);
            cmd.args(&wrapped.args);
            cmd
        } else {
            let mut cmd = tokio::process::Command::new(command);
            cmd.args(args);
            cmd
        };
        cmd.current_dir(&cwd)
            .env_clear()
            .envs(default_env())
            .envs(&self.config.env)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        let mut process = cmd
            .spawn()
            .map_err(|e| format!("cannot start {command}: {e}"))?;
        if let Some(stderr) = process.stderr.take() {
            let kept = self.stderr.clone();
            if let Ok(mut lines) = kept.lock() {
                lines.clear();
            }
            tokio::spawn(keep_last_lines(stderr, kept));
        }
        Ok(Child {
            process,
            _cgroup: cgroup,
        })
    }

    /// List the server's tools and make them ours; a tool whose name or schema cannot be
    /// used is refused with the reason, the rest are kept.
    async fn install(&self, service: &Arc<Service>) -> Result<(), String> {
        let protocol = service
            .peer()
            .peer_info()
            .map(|info| info.protocol_version.to_string());
        let listed = tokio::time::timeout(self.config.startup_timeout(), list_tools(service))
            .await
            .map_err(|_| {
                format!(
                    "did not answer tools/list within {} s",
                    self.config.startup_timeout().as_secs()
                )
            })??;
        let (tools, refused) = adopt(&self.name, &self.config, &listed, &self.me);
        let mut state = self.lock();
        state.phase = ServerState::Ready;
        state.reason = None;
        state.protocol = protocol;
        state.tools = tools;
        state.refused = refused;
        state.service = Some(service.clone());
        drop(state);
        self.changed.notify_one();
        Ok(())
    }

    /// Serve until the server dies or we stop; refresh the tools when it says they changed.
    /// Returns why it ended.
    async fn watch(
        &self,
        service: &Arc<Service>,
        mut child: Option<Child>,
        listener: Option<tokio::task::JoinHandle<()>>,
    ) -> String {
        let ended = self.serve(service, &mut child).await;
        if let Some(listener) = listener {
            listener.abort();
        }
        drop(child);
        ended
    }

    /// From 2026-07-28 on, a server sends `notifications/tools/list_changed` only on a
    /// subscription the client opened; older revisions send it unasked (to the handler).
    async fn listen_for_changes(
        &self,
        service: &Arc<Service>,
    ) -> Option<tokio::task::JoinHandle<()>> {
        let version = service.peer().peer_info()?.protocol_version.clone();
        if version.has_initialize() {
            return None;
        }
        let filter = rmcp::model::SubscriptionFilter::builder()
            .tools_list_changed()
            .build();
        // A server that never acknowledges must not hold up the start.
        let mut subscription =
            tokio::time::timeout(self.config.startup_timeout(), service.peer().listen(filter))
                .await
                .ok()?
                .ok()?;
        let shared = self.shared.clone();
        Some(tokio::spawn(async move {
            // Only tool-list changes were asked for, so every notification is one.
            while let Ok(Some(_)) = subscription.next().await {
                shared.list_changed.notify_one();
            }
        }))
    }

    async fn serve(&self, service: &Arc<Service>, child: &mut Option<Child>) -> String {
        let mut tick = tokio::time::interval(Duration::from_millis(250));
        loop {
            tokio::select! {
                () = self.stop.cancelled() => {
                    service.cancellation_token().cancel();
                    return "stopped".into();
                }
                status = wait(child) => {
                    return format!("it exited ({status}){}", self.last_words());
                }
                () = self.shared.list_changed.notified() => {
                    if let Err(e) = self.install(service).await {
                        let mut state = self.lock();
                        state.reason = Some(format!("it said its tools changed, but {e}"));
                    }
                }
                _ = tick.tick() => {
                    if service.peer().is_transport_closed() {
                        return format!("it closed the connection{}", self.last_words());
                    }
                }
            }
        }
    }

    /// How a failed start ended, in words: the exit status and the last stderr lines.
    async fn exit_words(&self, child: &mut Child) -> String {
        let status = tokio::time::timeout(Duration::from_millis(300), child.process.wait()).await;
        let mut words = match status {
            Ok(Ok(status)) => format!(" (it exited: {status})"),
            _ => String::new(),
        };
        words.push_str(&self.last_words());
        words
    }

    /// `; its last words on stderr: …` when it printed any.
    fn last_words(&self) -> String {
        let lines = self.stderr.lock().map(|l| l.clone()).unwrap_or_default();
        let text: Vec<&str> = lines
            .iter()
            .map(|l| l.trim())
            .filter(|l| !l.is_empty())
            .collect();
        if text.is_empty() {
            String::new()
        } else {
            let tail = &text[text.len().saturating_sub(3)..];
            format!("; its last words on stderr: {}", tail.join(" | "))
        }
    }

    /// Why calls cannot reach the server right now.
    fn unavailable(&self) -> String {
        let state = self.lock();
        let why = state
            .reason
            .clone()
            .unwrap_or_else(|| "it is starting".into());
        format!(
            "the MCP server {} is not available: {why}. Call the tool again once it is back, or use another tool",
            self.name
        )
    }

    /// Run one call of `remote` on the server.
    pub async fn call(
        &self,
        tool: &str,
        remote: &str,
        args: Value,
        cx: &ToolContext,
    ) -> Result<ToolOutput, ToolError> {
        let service = self.lock().service.clone();
        let Some(service) = service else {
            return Err(ToolError::failed(self.unavailable()));
        };
        let _one_at_a_time = match self.calls.try_lock() {
            Ok(guard) => guard,
            Err(_) => {
                cx.progress.emit(format!(
                    "waiting: the MCP server {} is running another call\n",
                    self.name
                ));
                self.calls.lock().await
            }
        };
        let _current = CurrentGuard::set(
            &self.shared,
            CurrentCall::new(cx.progress.clone(), cx.user.clone()),
        );
        let arguments = match args {
            Value::Object(map) => map,
            _ => serde_json::Map::new(),
        };
        let params = CallToolRequestParams::new(remote.to_string()).with_arguments(arguments);
        // Dropping this future (a timeout, a cancelled round) sends notifications/cancelled.
        match service.call_tool(params).await {
            Ok(result) => content::to_output(&serde_json::to_value(&result).unwrap_or(Value::Null)),
            Err(ServiceError::TransportClosed) => {
                self.lost(&service);
                Err(ToolError::failed(format!(
                    "the MCP server {} stopped while running {tool}{}; it is being restarted, so call the tool again in a few seconds",
                    self.name,
                    self.last_words()
                )))
            }
            Err(ServiceError::McpError(e)) => Err(ToolError::failed(format!(
                "the MCP server {} refused the call: {} (error {})",
                self.name, e.message, e.code.0
            ))),
            Err(other) => Err(ToolError::failed(format!(
                "the call to the MCP server {} failed: {other}",
                self.name
            ))),
        }
    }
}

/// Pages of `tools/list` until the list ends or holds more tools than are kept (a server
/// could page forever).
async fn list_tools(service: &Service) -> Result<Vec<Value>, String> {
    let mut tools = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..MAX_PAGES {
        let params = cursor
            .take()
            .and_then(|c| serde_json::from_value(serde_json::json!({"cursor": c})).ok());
        let page = service
            .peer()
            .list_tools(params)
            .await
            .map_err(|e| format!("tools/list failed: {e}"))?;
        tools.extend(
            page.tools
                .iter()
                .map(|tool| serde_json::to_value(tool).unwrap_or(Value::Null)),
        );
        match page.next_cursor {
            Some(next) if tools.len() <= MAX_TOOLS => cursor = Some(next),
            _ => break,
        }
    }
    Ok(tools)
}

/// The listed tools (JSON, as on the wire) as ours, and the ones that cannot be used, each
/// with the reason: a name or schema the registry refuses, or two tools whose names clash
/// once made into tool names.
pub(crate) fn adopt(
    server: &str,
    config: &ServerConfig,
    listed: &[Value],
    me: &std::sync::Weak<Connection>,
) -> (Vec<Arc<dyn Tool>>, Vec<String>) {
    // A scratch registry compiles each schema once and finds duplicate names.
    let mut scratch = Registry::empty();
    let mut tools: Vec<Arc<dyn Tool>> = Vec::new();
    let mut refused = Vec::new();
    if listed.len() > MAX_TOOLS {
        refused.push(format!(
            "the server lists {} tools; the first {MAX_TOOLS} are kept",
            listed.len()
        ));
    }
    for remote in listed.iter().take(MAX_TOOLS) {
        match McpTool::new(server, config, remote, me.clone()) {
            Ok(tool) => {
                let tool: Arc<dyn Tool> = Arc::new(tool);
                match scratch.register(tool.clone()) {
                    Ok(()) => tools.push(tool),
                    Err(e) => refused.push(e.to_string()),
                }
            }
            Err(reason) => refused.push(reason),
        }
    }
    (tools, refused)
}

/// Keep the last `STDERR_LINES` lines of a server's stderr, each cut to 300 characters, in
/// bounded memory however long a line it writes.
async fn keep_last_lines(
    mut stderr: tokio::process::ChildStderr,
    kept: Arc<Mutex<VecDeque<String>>>,
) {
    use tokio::io::AsyncReadExt;
    const LINE: usize = 300;
    let mut buf = [0u8; 8192];
    let mut line: Vec<u8> = Vec::new();
    let push = |line: &mut Vec<u8>| {
        if let Ok(mut kept) = kept.lock() {
            if kept.len() == STDERR_LINES {
                kept.pop_front();
            }
            // Control characters (C0 and C1) could drive the terminal these lines reach.
            let text: String = String::from_utf8_lossy(line)
                .chars()
                .filter(|c| *c == '\t' || !c.is_control())
                .collect();
            kept.push_back(text);
        }
        line.clear();
    };
    while let Ok(n) = stderr.read(&mut buf).await {
        if n == 0 {
            break;
        }
        for &byte in &buf[..n] {
            if byte == b'\n' {
                push(&mut line);
            } else if line.len() < LINE {
                line.push(byte);
            }
        }
    }
    if !line.is_empty() {
        push(&mut line);
    }
}

impl Connection {
    /// A call found the connection gone: say so at once (the supervisor notices too, and
    /// restarts it), unless a newer connection has already replaced this one.
    fn lost(&self, service: &Arc<Service>) {
        let mut state = self.lock();
        if state
            .service
            .as_ref()
            .is_some_and(|s| Arc::ptr_eq(s, service))
        {
            state.phase = ServerState::Failed;
            state.reason = Some("it stopped while running a call".into());
            state.service = None;
            drop(state);
            self.changed.notify_one();
        }
    }
}

/// A started stdio server and the cgroup that limits it.
pub(crate) struct Child {
    process: tokio::process::Child,
    _cgroup: Option<dispatch_sandbox::CgroupGuard>,
}

async fn wait(child: &mut Option<Child>) -> String {
    match child {
        Some(child) => match child.process.wait().await {
            Ok(status) => status.to_string(),
            Err(e) => format!("cannot read its exit status: {e}"),
        },
        None => std::future::pending().await,
    }
}

impl Drop for Child {
    /// However the server's handle goes (stopped, timed out, the process ending), its whole
    /// process group goes with it: `npx` or `uvx` is only the parent of the real server.
    fn drop(&mut self) {
        if let Some(pid) = self
            .process
            .id()
            .and_then(|p| rustix::process::Pid::from_raw(p as i32))
        {
            let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
        }
        let _ = self.process.start_kill();
    }
}

/// The variables a stdio server gets besides its own `env`: enough to find programs, a
/// home and a locale, and nothing else of ours.
fn default_env() -> Vec<(String, String)> {
    [
        "HOME", "PATH", "USER", "LOGNAME", "SHELL", "TERM", "LANG", "LC_ALL", "TMPDIR", "TZ",
    ]
    .iter()
    .filter_map(|k| std::env::var(k).ok().map(|v| (k.to_string(), v)))
    .collect()
}

/// `command` as an absolute path: as given when it has a slash, else found on PATH.
fn find_program(command: &str) -> Option<PathBuf> {
    if command.contains('/') {
        return std::fs::canonicalize(command).ok();
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(command))
        .find(|candidate| candidate.is_file())
}

/// Marks a call as the server's current one while it runs.
struct CurrentGuard<'a> {
    shared: &'a Shared,
}

impl<'a> CurrentGuard<'a> {
    fn set(shared: &'a Shared, call: CurrentCall) -> Self {
        if let Ok(mut current) = shared.current.lock() {
            *current = Some(call);
        }
        CurrentGuard { shared }
    }
}

impl Drop for CurrentGuard<'_> {
    fn drop(&mut self) {
        if let Ok(mut current) = self.shared.current.lock() {
            *current = None;
        }
    }
}

/// rmcp's HTTP client is reqwest built without a TLS crypto provider of its own (aws-lc-rs,
/// whose C build took minutes of every cold build), and it panics without one: ring's is
/// installed as the process default before the first connection. Idempotent.
fn install_tls_provider() {
    static INSTALL: std::sync::Once = std::sync::Once::new();
    INSTALL.call_once(|| {
        // Err: another provider is already the default, which serves as well.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_tool_that_cannot_be_used_is_refused_with_the_reason_and_the_rest_kept() {
        let listed = vec![
            json!({"name": "good", "inputSchema": {"type": "object", "properties": {"a": {"type": "string"}}}}),
            json!({"name": "typo", "inputSchema": {"type": "object", "properties": {"a": {"type": "objekt"}}}}),
            json!({"name": "array_root", "inputSchema": {"type": "array"}}),
            json!({"name": "good", "inputSchema": {"type": "object"}}),
            json!({"description": "no name"}),
        ];
        let config = ServerConfig::stdio("x", &[]);
        let (tools, refused) = adopt("srv", &config, &listed, &std::sync::Weak::new());
        let names: Vec<&str> = tools.iter().map(|t| t.spec().name.as_str()).collect();
        assert_eq!(names, vec!["mcp__srv__good"]);
        assert_eq!(refused.len(), 4, "{refused:?}");
        assert!(
            refused[0].contains("mcp__srv__typo") && refused[0].contains("does not compile"),
            "{}",
            refused[0]
        );
        assert!(refused[1].contains("top level must be"), "{}", refused[1]);
        assert!(refused[2].contains("already registered"), "{}", refused[2]);
        assert!(refused[3].contains("without a name"), "{}", refused[3]);

        let many: Vec<Value> = (0..MAX_TOOLS + 3)
            .map(|i| json!({"name": format!("t{i}"), "inputSchema": {"type": "object"}}))
            .collect();
        let (tools, refused) = adopt("srv", &config, &many, &std::sync::Weak::new());
        assert_eq!(tools.len(), MAX_TOOLS);
        assert_eq!(
            refused,
            vec![format!(
                "the server lists {} tools; the first {MAX_TOOLS} are kept",
                MAX_TOOLS + 3
            )]
        );
    }
}
