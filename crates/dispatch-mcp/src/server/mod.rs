//! tooldispatch as an MCP server: `tooldispatch mcp` on stdio and `/mcp` on the daemon.
//!
//! An MCP client gets tooldispatch's tools with their schemas and annotations; each
//! `tools/call` is dispatched by the engine as a round of one call, so the gate, rules,
//! sandbox, output shaping and secret redaction apply exactly as for a model reply.
//!
//! - **Session**: one MCP session (a stdio connection, or one `Mcp-Session-Id` on `/mcp`) is
//!   one tooldispatch session: its transcript, todo list and marked tools.
//! - **Run**: every `tools/call` is a run of its own. tooldispatch's run is one user turn,
//!   and an MCP client shows us no turns; worse, its own tools change files behind our back,
//!   so a dedupe map kept across calls could answer a read with stale text.
//! - **Confirmations** go to the client as `elicitation/create` when it declared the
//!   capability ([`confirm::Elicitation`]); otherwise the headless rule declines them (stdio)
//!   or the daemon's usual confirmer answers (`/mcp`).
//!
//! The protocol versions offered end at 2025-11-25, the last with the `initialize`
//! handshake: from 2026-07-28 on a server may not send requests to the client (elicitation
//! must come back as an `InputRequiredResult` and a retried call), while the engine asks
//! for a confirmation in the middle of a call. A client that probes `server/discover` at
//! 2026-07-28 is told which versions we speak and falls back to `initialize`.

pub mod confirm;
pub mod content;
mod progress;

use std::borrow::Cow;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use dispatch_engine::{
    AnswerRequest, CORE_TOOLS, Confirmer, Effect, Engine, EngineError, EventSink, Gate, Origin,
    Provider, Question, RawCall, RoundOutcome, RoundRequest, ToolSpec,
};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, Implementation,
    InitializeRequestParams, InitializeResult, ListToolsResult, PaginatedRequestParams,
    ProtocolVersion, ServerCapabilities, ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::{Peer, RequestContext, RoleServer};
use rmcp::{ErrorData as McpError, ServerHandler};
use serde_json::Value;

pub use confirm::{Elicitation, NO_ELICITATION_REASON, NoElicitation};

/// The newest protocol version served (see the module notes for why not 2026-07-28).
pub const NEWEST_PROTOCOL: ProtocolVersion = ProtocolVersion::V_2025_11_25;

/// Which tools an MCP client is shown.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ToolSet {
    /// Every tool with its full schema and annotations (the default): MCP clients approve,
    /// describe and defer tools per tool, which needs each tool's own name and hints.
    #[default]
    All,
    /// The core tools only (find_tools, run_tool, ask_user, …); the rest are reached through
    /// find_tools and run_tool, as a model of a non-MCP provider does. For clients that load
    /// every listed schema into the model's context.
    Core,
}

impl ToolSet {
    /// The engine's view of the calls: with `All` every tool is callable directly, with
    /// `Core` only the core tools are (the engine's deferred-schema rules).
    fn provider(self) -> Provider {
        match self {
            ToolSet::All => Provider::ClaudeCode,
            ToolSet::Core => Provider::OpenAi,
        }
    }

    /// Whether the client is shown this tool.
    fn lists(self, spec: &ToolSpec) -> bool {
        match self {
            // The client lists and searches tools itself: find_tools and run_tool would only
            // be a second way to reach the same tools.
            ToolSet::All => !matches!(spec.name.as_str(), "run_tool" | "find_tools"),
            ToolSet::Core => CORE_TOOLS.contains(&spec.name.as_str()),
        }
    }

    /// Names the session's rounds treat as absent.
    fn exclude(self) -> Vec<String> {
        match self {
            ToolSet::All => vec!["run_tool".into(), "find_tools".into()],
            ToolSet::Core => Vec::new(),
        }
    }
}

/// A process that serves many MCP sessions beside other clients (the daemon): it runs their
/// rounds where its watchers see them, and sends a session's confirmations to that session's
/// client while the session lives, when the client can be asked.
#[async_trait::async_trait]
pub trait SessionHost: Send + Sync {
    fn attach(&self, session: &str, confirmer: Arc<dyn Confirmer>);
    fn detach(&self, session: &str);
    /// Run a round, or resume a parked run with the user's answers; the outer error is the
    /// host's (it is shutting down), the inner the engine's.
    async fn run(&self, work: Work) -> Result<Result<RoundOutcome, EngineError>, String>;
}

/// One MCP session's server: the engine, the tools shown, and how the user is asked.
pub struct McpServer {
    engine: Arc<Engine>,
    tools: ToolSet,
    session: String,
    elicitation: Arc<Elicitation>,
    /// The daemon; `None` when the engine's confirmer is `elicitation` itself and rounds go
    /// straight to the engine (stdio).
    host: Option<Arc<dyn SessionHost>>,
    attached: AtomicBool,
    /// Numbers the calls, for their run and call ids.
    calls: AtomicU64,
    /// Makes run ids unique across processes that reuse a session id (`--session`).
    started_ms: u128,
    /// Tool names not available in this session (`--exclude`), beside those of the tool set.
    exclude: Vec<String>,
}

static SESSIONS: AtomicU64 = AtomicU64::new(1);

fn now_ms() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0)
}

/// A session id no other MCP session of this or another process has.
pub fn new_session_id() -> String {
    let n = SESSIONS.fetch_add(1, Ordering::Relaxed);
    format!("mcp-{:x}-{}-{n}", now_ms(), std::process::id())
}

impl McpServer {
    /// The server of a process with one client (stdio): `elicitation` must be the engine's
    /// confirmer, so that confirmations reach this client.
    pub fn single(
        engine: Arc<Engine>,
        tools: ToolSet,
        session: String,
        elicitation: Arc<Elicitation>,
    ) -> Self {
        Self::build(engine, tools, session, elicitation, None)
    }

    /// A new session of a process with many clients (`/mcp`): while it lives, its
    /// confirmations are routed to its client when the client can be asked.
    pub fn session(engine: Arc<Engine>, tools: ToolSet, host: Arc<dyn SessionHost>) -> Self {
        let elicitation = Elicitation::new(Arc::new(NoElicitation));
        Self::build(engine, tools, new_session_id(), elicitation, Some(host))
    }

    fn build(
        engine: Arc<Engine>,
        tools: ToolSet,
        session: String,
        elicitation: Arc<Elicitation>,
        host: Option<Arc<dyn SessionHost>>,
    ) -> Self {
        McpServer {
            engine,
            tools,
            session,
            elicitation,
            host,
            attached: AtomicBool::new(false),
            calls: AtomicU64::new(0),
            started_ms: now_ms(),
            exclude: tools.exclude(),
        }
    }

    /// Also leave out these tools (a trailing `*` matches a prefix), as `--exclude` does for
    /// a round.
    pub fn with_exclude(mut self, names: impl IntoIterator<Item = String>) -> Self {
        self.exclude.extend(names);
        self
    }

    /// Whether the client is shown this tool and may call it.
    fn offers(&self, spec: &ToolSpec) -> bool {
        self.tools.lists(spec)
            && !dispatch_engine::Exclude::new(self.exclude.clone()).contains(&spec.name)
    }

    /// The tooldispatch session this MCP session is.
    pub fn session_id(&self) -> &str {
        &self.session
    }

    /// The client has said who it is: ask it from now on, if it can be asked.
    fn connect(&self, peer: &Peer<RoleServer>) {
        self.elicitation.connect(peer);
        if let Some(host) = &self.host
            && self.elicitation.can_elicit()
            && !self.attached.swap(true, Ordering::SeqCst)
        {
            host.attach(&self.session, self.elicitation.clone());
        }
    }

    /// What the client's model is told about the server. With `--tools core` it is also the
    /// turn context a model of another provider gets: the names reachable through run_tool.
    fn instructions(&self) -> String {
        let mut text = String::from(
            "tooldispatch's tools: files confined to the work directory, commands in an OS sandbox, web, memory and planning. Calls that change things may ask the user for approval first; a declined call says why.",
        );
        if self.tools == ToolSet::Core {
            let exclude = dispatch_engine::Exclude::new(self.exclude.clone());
            let registry = self.engine.registry();
            // The listed (core) tools are called directly; the rest are reached by name.
            let names: Vec<&str> = registry
                .iter()
                .map(|t| t.spec())
                .filter(|spec| spec.name != "find_tools" && !self.tools.lists(spec))
                .map(|spec| spec.name.as_str())
                .filter(|n| !exclude.contains(n))
                .collect();
            text.push_str("\nTools (call through run_tool, after find_tools(query=\"select:NAME\") shows the schema): ");
            text.push_str(&names.join(", "));
        }
        text
    }

    /// The tools the client is shown, as MCP tools.
    pub fn list(&self) -> Vec<Tool> {
        let registry = self.engine.registry();
        registry
            .iter()
            .map(|t| t.spec())
            .filter(|spec| self.offers(spec))
            .map(mcp_tool)
            .collect()
    }

    /// Dispatch one `tools/call` as a round of one call.
    pub async fn call(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let n = self.calls.fetch_add(1, Ordering::Relaxed) + 1;
        let run = format!("mcp-call-{:x}-{n}", self.started_ms);
        let call = RawCall::new(
            format!("call-{n}"),
            request.name.to_string(),
            Value::Object(request.arguments.unwrap_or_default()).to_string(),
        );
        let progress = context
            .meta
            .get_progress_token()
            .map(|token| progress::Forwarder::start(context.peer.clone(), token, &call.id));
        let mut req = RoundRequest::new(
            self.session.clone(),
            run.clone(),
            self.tools.provider(),
            vec![call.clone()],
        );
        req.exclude = self.exclude.clone();
        // With every tool listed, the client has shown the model every schema: no call
        // waits for find_tools.
        req.schemas_shown = self.tools == ToolSet::All;
        // The client's notifications/cancelled cancels this token, which stops the round
        // the way Ctrl-C stops `tooldispatch round`.
        req.cancel = context.ct.clone();
        req.live = progress.as_ref().map(|p| p.sink() as Arc<dyn EventSink>);
        let outcome = self.run(Work::Round(req)).await?;
        // ask_user parked the run (the daemon's confirmer cannot ask inline): put the
        // questions to this client and resume the run with the answers.
        let outcome = match outcome {
            Ok(parked) => match self
                .answer_parked(&parked, &call.id, &context, &progress)
                .await?
            {
                Some(answered) => answered,
                None => Ok(parked),
            },
            Err(e) => Err(e),
        };
        if let Some(progress) = progress {
            progress.finish().await;
        }
        match outcome {
            Ok(outcome) => Ok(content::call_result(&outcome, &call.id)),
            Err(EngineError::Cancelled) => Err(McpError::internal_error(
                "the call was cancelled; nothing it did was committed",
                None,
            )),
            Err(e) => Err(McpError::internal_error(
                format!("tooldispatch could not dispatch the call: {e}"),
                None,
            )),
        }
    }
}

/// What one step of a call runs.
pub enum Work {
    Round(RoundRequest),
    Answer(AnswerRequest),
}

impl McpServer {
    /// Run on the host when there is one (the daemon's feeds see it), else on the engine.
    async fn run(&self, work: Work) -> Result<Result<RoundOutcome, EngineError>, McpError> {
        match &self.host {
            Some(host) => host.run(work).await.map_err(|e| {
                McpError::internal_error(format!("tooldispatch could not run the call: {e}"), None)
            }),
            None => Ok(match work {
                Work::Round(req) => self.engine.round(req).await,
                Work::Answer(req) => self.engine.answer(req).await,
            }),
        }
    }

    /// When `outcome` parked the run on call `call_id` and this client can be asked: ask,
    /// and resume the run with the answers. `None` leaves the outcome as it is.
    async fn answer_parked(
        &self,
        outcome: &RoundOutcome,
        call_id: &str,
        context: &RequestContext<RoleServer>,
        progress: &Option<progress::Forwarder>,
    ) -> Result<Option<Result<RoundOutcome, EngineError>>, McpError> {
        let Some(task) = outcome
            .pending
            .as_ref()
            .filter(|t| t.tool_call_id == call_id)
        else {
            return Ok(None);
        };
        if !self.elicitation.can_elicit() {
            return Ok(None);
        }
        let Ok(questions) = serde_json::from_value::<Vec<Question>>(task.questions.clone()) else {
            return Ok(None);
        };
        // Secrets are never asked through elicitation (see confirm.rs): the task waits.
        let Some(answers) = self.elicitation.ask(&questions).await else {
            return Ok(None);
        };
        let mut req = AnswerRequest::new(self.session.clone(), task.task_hash.clone(), answers);
        req.request.provider = self.tools.provider();
        req.request.exclude = self.exclude.clone();
        req.request.schemas_shown = self.tools == ToolSet::All;
        req.request.cancel = context.ct.clone();
        req.request.live = progress.as_ref().map(|p| p.sink() as Arc<dyn EventSink>);
        self.run(Work::Answer(req)).await.map(Some)
    }
}

impl Drop for McpServer {
    fn drop(&mut self) {
        if let Some(host) = &self.host
            && self.attached.load(Ordering::SeqCst)
        {
            host.detach(&self.session);
        }
    }
}

/// An engine tool as an MCP tool: its schema, and hints derived from its declaration.
pub fn mcp_tool(spec: &ToolSpec) -> Tool {
    let schema = match &spec.parameters {
        Value::Object(map) => map.clone(),
        _ => serde_json::Map::new(),
    };
    Tool::new(spec.name.clone(), spec.description.clone(), schema)
        .with_annotations(annotations(spec))
}

/// The MCP hints of a tool, from what its spec says (the hints are the client's to show;
/// the engine's gate decides what runs).
pub fn annotations(spec: &ToolSpec) -> ToolAnnotations {
    // Changes nothing outside tooldispatch's own records (todo list, error memory).
    let read_only = spec.effect != Effect::Mutates && spec.gate != Gate::Destructive;
    // A tool the gate asks about by default may overwrite or remove what the user has;
    // store_secret (interactive) only adds.
    let destructive = matches!(spec.gate, Gate::Ask | Gate::Destructive);
    let idempotent = read_only || spec.effect == Effect::Pure;
    // The spec has no network flag: only tools known to stay inside the machine are closed —
    // pure computations, reads of the paths they report, and read-only built-ins without a
    // result cache (the web tools cache). The rest are open, the careful default.
    let closed = spec.effect == Effect::Pure
        || spec.effect == Effect::ReadsPaths
        || (spec.gate == Gate::ReadOnly
            && spec.cache == dispatch_engine::CachePolicy::None
            && spec.origin == Origin::Builtin);
    let mut hints = ToolAnnotations::new()
        .read_only(read_only)
        .idempotent(idempotent)
        .open_world(!closed);
    if !read_only {
        hints = hints.destructive(destructive);
    }
    hints
}

impl ServerHandler for McpServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new(
                "tooldispatch",
                env!("CARGO_PKG_VERSION"),
            ))
            .with_protocol_version(NEWEST_PROTOCOL)
            .with_instructions(self.instructions())
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(ProtocolVersion::known_up_to(&NEWEST_PROTOCOL))
    }

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, McpError> {
        context.peer.set_peer_info(request.clone());
        self.connect(&context.peer);
        self.negotiate_initialize(&request)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(self.list()))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        let registry = self.engine.registry();
        registry
            .get(name)
            .map(|t| t.spec())
            .filter(|spec| self.offers(spec))
            .map(mcp_tool)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        self.call(request, context)
            .await
            .map(CallToolResponse::from)
    }
}

/// Why serving an MCP client stopped.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("the MCP client did not complete the handshake: {0}")]
    Handshake(String),
    #[error("the MCP connection ended abnormally: {0}")]
    Ended(String),
}

/// Serve one client on this process's stdin and stdout until it disconnects. stdout carries
/// protocol messages only.
pub async fn serve_stdio(server: McpServer) -> Result<(), ServeError> {
    let running = rmcp::serve_server(server, rmcp::transport::stdio_pipes())
        .await
        .map_err(|e| ServeError::Handshake(e.to_string()))?;
    match running.waiting().await {
        Ok(_) => Ok(()),
        Err(e) => Err(ServeError::Ended(e.to_string())),
    }
}

/// The Streamable HTTP service for the daemon's `/mcp`: one [`McpServer`] per MCP session.
/// Host, Origin and token checks are the daemon's access layer's, in front of this service,
/// so rmcp's own loopback Host check is off (it would refuse a daemon bound off loopback).
pub fn http_service(
    engine: Arc<Engine>,
    tools: ToolSet,
    host: Arc<dyn SessionHost>,
    stop: tokio_util::sync::CancellationToken,
) -> rmcp::transport::StreamableHttpService<
    McpServer,
    rmcp::transport::streamable_http_server::session::local::LocalSessionManager,
> {
    use rmcp::transport::StreamableHttpServerConfig;
    let config = StreamableHttpServerConfig::default()
        .disable_allowed_hosts()
        .with_legacy_session_mode(true)
        .with_cancellation_token(stop);
    rmcp::transport::StreamableHttpService::new(
        move || Ok(McpServer::session(engine.clone(), tools, host.clone())),
        Arc::default(),
        config,
    )
}
