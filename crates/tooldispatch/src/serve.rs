//! `tooldispatch serve`: the HTTP daemon (dispatch-server) over the engine, the built-in
//! tools and the store.

use std::io::Write;
use std::sync::Arc;

use clap::Args;
use dispatch_engine::{ApproveAll, Confirmer};
use dispatch_server::{Access, Daemon, Hub};

use crate::config::Config;
use crate::{Approve, CliError, Common, setup};

#[derive(Args)]
pub struct ServeArgs {
    /// Where to listen. On loopback (the default) no token is needed; any other address
    /// requires `Authorization: Bearer <token>` (the token is generated on first start).
    #[arg(long, default_value = "127.0.0.1:7878", env = "TOOLDISPATCH_ADDR")]
    addr: String,
    #[command(flatten)]
    common: Common,
}

pub async fn run(args: ServeArgs) -> Result<(), CliError> {
    let config = Config::load(args.common.config.as_deref())?;
    let engine_config_timeout = dispatch_engine::EngineConfig::new(".").confirm_timeout;
    let hub = Hub::new(engine_config_timeout);
    // Confirmations go to whoever watches the session (the console or an API client);
    // `--approve all` approves everything instead.
    let confirmer: Arc<dyn Confirmer> = match args.common.approve {
        Approve::All => Arc::new(ApproveAll),
        Approve::None => hub.clone(),
        Approve::Ask => {
            return Err(CliError::input(
                "serve has no terminal to ask at: approve calls in the web console or with POST /v1/confirmations/{id} (or use --approve all)",
            ));
        }
    };
    let (engine, store, _following) = setup::long_lived(&args.common, &config, confirmer).await?;
    let listener = tokio::net::TcpListener::bind(&args.addr)
        .await
        .map_err(|e| CliError::failed(format!("cannot listen on {}: {e}", args.addr)))?;
    let local = listener
        .local_addr()
        .map_err(|e| CliError::failed(format!("cannot read the listening address: {e}")))?;
    let mut access = Access {
        token: None,
        cors_origins: config.server.cors_origins.clone(),
    };
    if !local.ip().is_loopback() {
        let path = setup::data_dir().join("daemon-token");
        let (token, created) =
            dispatch_server::access::load_or_create_token(&path).map_err(|e| {
                CliError::failed(format!(
                    "cannot set up the API token in {}: {e}",
                    path.display()
                ))
            })?;
        if created {
            eprintln!(
                "tooldispatch: a token is required on {local}; it is stored in {} (mode 0600) and shown this once:\n{token}",
                path.display()
            );
        } else {
            eprintln!(
                "tooldispatch: a token is required on {local}: send `Authorization: Bearer <the token in {}>`",
                path.display()
            );
        }
        access.token = Some(token);
    }
    let sweeper = dispatch_store::spawn_sweeper(store.clone(), dispatch_store::SWEEP_EVERY, |e| {
        eprintln!("tooldispatch: the cache sweep failed (retried in 10 min): {e}");
    });
    let daemon = Daemon::new(engine.clone(), hub, store.clone());
    if !config.models.0.is_empty() {
        // `POST /v1/sessions/{id}/agent` and the console's prompt box.
        let _ = daemon.agent.set(Arc::new(crate::serve_agent::DaemonAgents {
            store,
            models: config.models.clone(),
        }));
    }
    // `/mcp`: MCP clients over Streamable HTTP, behind the same access rules as the API. Their
    // rounds run like the API's (on the session's feed, seen by the console); a client that
    // can ask its user (elicitation) answers its own session's confirmations, the others are
    // the hub's, as for any API session.
    let mcp_server = dispatch_mcp::server::http_service(
        engine,
        dispatch_mcp::server::ToolSet::All,
        Arc::new(McpHost(daemon.clone())),
        daemon.stop_rounds.clone(),
    );
    let extra = axum::Router::new().route_service("/mcp", mcp_server);
    {
        // The first stdout line is the address, for scripts and tests that bind port 0.
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "listening on http://{local}").and_then(|_| out.flush());
    }
    eprintln!("tooldispatch: the web console is at http://{local}/");
    let served = dispatch_server::serve_with(listener, daemon, access, extra, async {
        crate::commands::stop_requested().await;
    })
    .await;
    sweeper.abort();
    served.map_err(|e| CliError::failed(format!("the daemon stopped: {e}")))
}

/// The daemon as the host of the MCP sessions on `/mcp`.
struct McpHost(Arc<Daemon>);

#[async_trait::async_trait]
impl dispatch_mcp::server::SessionHost for McpHost {
    fn attach(&self, session: &str, confirmer: Arc<dyn Confirmer>) {
        self.0.hub.route_confirmations(session, confirmer);
    }
    fn detach(&self, session: &str) {
        self.0.hub.unroute_confirmations(session);
    }
    async fn run(
        &self,
        work: dispatch_mcp::server::Work,
    ) -> Result<Result<dispatch_engine::RoundOutcome, dispatch_engine::EngineError>, String> {
        let ran = match work {
            dispatch_mcp::server::Work::Round(req) => {
                dispatch_server::api::run_round(&self.0, req).await
            }
            dispatch_mcp::server::Work::Answer(req) => {
                dispatch_server::api::run_answer(&self.0, req).await
            }
        };
        ran.map_err(|e| e.message)
    }
}
