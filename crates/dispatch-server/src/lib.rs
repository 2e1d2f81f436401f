//! dispatch-server: the HTTP daemon (DESIGN §5). An agent in any language posts a model reply
//! as a round and gets the tool-result messages back; watchers follow every session's events
//! as SSE, approve confirmations and answer ask_user; the web console at `/` does all of that
//! in a browser.
//!
//! Read [`api`] (the endpoints), [`stream`] (SSE), [`hub`] (live state and the HTTP
//! confirmer), [`access`] (who may call).

pub mod access;
pub mod agent;
pub mod api;
mod console;
pub mod error;
pub mod hub;
pub mod stream;

use std::collections::HashSet;
use std::future::Future;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::{delete, get, post};
use dispatch_engine::Engine;
use dispatch_store::SessionStore;
use tokio_util::sync::CancellationToken;

pub use access::Access;
pub use agent::{AgentDriver, AgentTurn};
pub use hub::Hub;

/// The largest request body taken (a model reply with its tool arguments).
pub const BODY_LIMIT: usize = 8 * 1024 * 1024;

/// How long shutdown waits for rounds in flight before cancelling them.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(30);

/// Caps on what API clients make the daemon hold in memory: a session's client-tool
/// declarations live (compiled) as long as the daemon knows the session, so many sessions
/// with large declarations would otherwise grow it without bound. Set in the config's
/// `[server]` table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Most client tools one session may declare (`[server] max_client_tools`).
    pub max_client_tools: usize,
    /// Most bytes of client-tool declarations (names, descriptions and schemas as JSON) one
    /// session may declare (`[server] client_tools_kib_per_session`).
    pub client_tool_bytes: usize,
    /// Most bytes of client-tool declarations all the sessions the daemon knows may hold
    /// together (`[server] client_tools_budget_mib`); past it, `POST /v1/sessions` with
    /// client tools gets 429 until sessions are released (`DELETE /v1/sessions/{id}`).
    pub client_tools_budget: usize,
}

impl Limits {
    pub const DEFAULT_MAX_CLIENT_TOOLS: usize = 128;
    pub const DEFAULT_CLIENT_TOOLS_KIB_PER_SESSION: usize = 1024;
    pub const DEFAULT_CLIENT_TOOLS_BUDGET_MIB: usize = 64;
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_client_tools: Self::DEFAULT_MAX_CLIENT_TOOLS,
            client_tool_bytes: Self::DEFAULT_CLIENT_TOOLS_KIB_PER_SESSION * 1024,
            client_tools_budget: Self::DEFAULT_CLIENT_TOOLS_BUDGET_MIB * 1024 * 1024,
        }
    }
}

/// What the handlers share.
pub struct Daemon {
    pub engine: Arc<Engine>,
    /// The engine's confirmer, and the sessions' live feeds.
    pub hub: Arc<Hub>,
    /// Where the events log is read from for replay.
    pub store: Arc<dyn SessionStore>,
    /// Cancelled when the shutdown grace period ends: rounds still running stop, commit
    /// nothing, and their started mutating calls are reported interrupted later.
    pub stop_rounds: CancellationToken,
    /// How long shutdown waits for rounds in flight ([`SHUTDOWN_GRACE`] unless set).
    pub shutdown_grace: Duration,
    /// Runs `POST /v1/sessions/{id}/agent` turns; unset: the daemon has no model.
    pub agent: OnceLock<Arc<dyn AgentDriver>>,
    /// Sessions with an agent turn running (one at a time per session).
    agent_turns: Mutex<HashSet<String>>,
    /// What API clients may make the daemon hold.
    pub limits: Limits,
}

impl Daemon {
    /// A daemon over an engine whose confirmer is `hub`.
    pub fn new(engine: Arc<Engine>, hub: Arc<Hub>, store: Arc<dyn SessionStore>) -> Arc<Daemon> {
        Self::with_grace(engine, hub, store, SHUTDOWN_GRACE)
    }

    /// The same, with another shutdown grace period.
    pub fn with_grace(
        engine: Arc<Engine>,
        hub: Arc<Hub>,
        store: Arc<dyn SessionStore>,
        shutdown_grace: Duration,
    ) -> Arc<Daemon> {
        Self::with_limits(engine, hub, store, shutdown_grace, Limits::default())
    }

    /// The same, with other [`Limits`].
    pub fn with_limits(
        engine: Arc<Engine>,
        hub: Arc<Hub>,
        store: Arc<dyn SessionStore>,
        shutdown_grace: Duration,
        limits: Limits,
    ) -> Arc<Daemon> {
        Arc::new(Daemon {
            engine,
            hub,
            store,
            stop_rounds: CancellationToken::new(),
            shutdown_grace,
            agent: OnceLock::new(),
            agent_turns: Mutex::default(),
            limits,
        })
    }
}

/// The whole API, the console, and the access rules in front of them.
pub fn router(daemon: Arc<Daemon>, access: Access) -> Router {
    router_with(daemon, access, Router::new())
}

/// [`router`] plus `extra` routes (the MCP endpoint, `/mcp`), behind the same access rules
/// and body limit. The daemon takes them from its caller so that it does not depend on MCP.
pub fn router_with(daemon: Arc<Daemon>, access: Access, extra: Router) -> Router {
    let api = Router::new()
        .route("/v1/health", get(api::health))
        .route("/v1/version", get(api::version))
        .route(
            "/v1/sessions",
            post(api::create_session).get(api::list_sessions),
        )
        .route(
            "/v1/sessions/{id}",
            axum::routing::delete(api::release_session),
        )
        .route("/v1/sessions/{id}/tools", get(api::tools))
        .route("/v1/sessions/{id}/rounds", post(api::round))
        .route("/v1/sessions/{id}/events", get(stream::session_events))
        .route("/v1/sessions/{id}/pending", get(api::pending))
        .route(
            "/v1/sessions/{id}/pending/{task}",
            delete(api::cancel_pending),
        )
        .route("/v1/sessions/{id}/answers", post(api::answer))
        .route("/v1/sessions/{id}/agent", post(agent::turn))
        .route("/v1/confirmations", get(api::confirmations))
        .route("/v1/confirmations/{id}", post(api::resolve_confirmation))
        .route("/v1/events", get(stream::all_events))
        .route("/", get(console::index))
        .route("/console.js", get(console::script))
        .route("/console.css", get(console::style))
        .fallback(api::no_route)
        .with_state(daemon)
        // Before `extra`: the MCP endpoint answers in its own protocol's terms.
        .layer(axum::middleware::map_response(error::json_errors))
        .merge(extra);
    api.layer(DefaultBodyLimit::max(BODY_LIMIT))
        .layer(axum::middleware::from_fn_with_state(
            Arc::new(access),
            access::guard,
        ))
}

/// Serve until `shutdown` resolves; then stop taking rounds, decline waiting confirmations,
/// end the event streams, and give rounds in flight the grace period to finish before
/// cancelling them. A client that never reads what it asked for cannot hold the exit up:
/// after a second grace period the server returns with whatever is still open.
pub async fn serve(
    listener: tokio::net::TcpListener,
    daemon: Arc<Daemon>,
    access: Access,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_with(listener, daemon, access, Router::new(), shutdown).await
}

/// [`serve`] with `extra` routes (see [`router_with`]), on any listener axum serves: a
/// `TcpListener`, or a `UnixListener` (`serve --unix`).
pub async fn serve_with<L>(
    listener: L,
    daemon: Arc<Daemon>,
    access: Access,
    extra: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()>
where
    L: axum::serve::Listener,
    L::Addr: std::fmt::Debug,
{
    let app = router_with(daemon.clone(), access, extra);
    let hub = daemon.hub.clone();
    let stop_rounds = daemon.stop_rounds.clone();
    let grace = daemon.shutdown_grace;
    let (stopped, stopping_now) = tokio::sync::oneshot::channel::<()>();
    let stopping = async move {
        shutdown.await;
        hub.close();
        // Rounds still running after the grace period are cancelled; axum then finishes
        // their requests with the `interrupted` error.
        tokio::spawn(async move {
            tokio::time::sleep(grace).await;
            stop_rounds.cancel();
        });
        let _ = stopped.send(());
    };
    let server = axum::serve(listener, app).with_graceful_shutdown(stopping);
    let deadline = async {
        if stopping_now.await.is_err() {
            // The server ended without a shutdown: nothing to bound.
            std::future::pending::<()>().await;
        }
        tokio::time::sleep(grace * 2).await;
    };
    tokio::select! {
        served = server => served,
        () = deadline => Ok(()),
    }
}
