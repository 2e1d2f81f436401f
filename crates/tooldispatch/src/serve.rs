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
    /// Require `Authorization: Bearer <token>` on loopback too, so other local users are kept
    /// out; the token is in daemon-token in the data directory (mode 0600, its path printed),
    /// and a one-time login link for the web console is printed at start.
    #[arg(long)]
    require_token: bool,
    /// Serve on a Unix socket at PATH (mode 0600: only this user may connect) instead of TCP;
    /// `--addr` is then unused. A stale socket left at PATH is replaced; anything else there
    /// is refused.
    #[arg(long, value_name = "PATH")]
    unix: Option<std::path::PathBuf>,
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
    let listener = match &args.unix {
        Some(path) => Listener::Unix(bind_unix(path)?, path.clone()),
        None => {
            let listener = tokio::net::TcpListener::bind(&args.addr)
                .await
                .map_err(|e| CliError::failed(format!("cannot listen on {}: {e}", args.addr)))?;
            let local = listener
                .local_addr()
                .map_err(|e| CliError::failed(format!("cannot read the listening address: {e}")))?;
            Listener::Tcp(listener, local)
        }
    };
    let mut access = Access {
        token: None,
        cors_origins: config.server.cors_origins.clone(),
        console: None,
    };
    let on_loopback = match &listener {
        Listener::Tcp(_, local) => local.ip().is_loopback(),
        Listener::Unix(..) => true,
    };
    if args.require_token || !on_loopback {
        let path = setup::data_dir().join("daemon-token");
        let (token, created) =
            dispatch_server::access::load_or_create_token(&path).map_err(|e| {
                CliError::failed(format!(
                    "cannot set up the API token in {}: {e}",
                    path.display()
                ))
            })?;
        let place = listener.describe();
        if created {
            eprintln!(
                "tooldispatch: a token is required on {place}; it is stored in {} (mode 0600) and shown this once:\n{token}",
                path.display()
            );
        } else {
            eprintln!(
                "tooldispatch: a token is required on {place}: send `Authorization: Bearer <the token in {}>`",
                path.display()
            );
        }
        access.token = Some(token);
        let login = dispatch_server::access::ConsoleLogin::new()
            .map_err(|e| CliError::failed(format!("cannot make the console's login code: {e}")))?;
        access.console = Some(Arc::new(login));
    }
    let sweeper = dispatch_store::spawn_sweeper(store.clone(), dispatch_store::SWEEP_EVERY, |e| {
        eprintln!("tooldispatch: the cache sweep failed (retried in 10 min): {e}");
    });
    let daemon = Daemon::with_limits(
        engine.clone(),
        hub,
        store.clone(),
        dispatch_server::SHUTDOWN_GRACE,
        config.server.limits(),
    );
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
    // Watched from before the address is announced: whoever reads it may stop us at once.
    let stop = crate::commands::stop_signals();
    let stop = async {
        stop.await;
    };
    {
        // The first stdout line is the address, for scripts and tests that bind port 0.
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "listening on {}", listener.describe()).and_then(|_| out.flush());
    }
    let code = access.console.as_ref().and_then(|c| c.code());
    match (&listener, code) {
        (Listener::Tcp(_, local), Some(code)) => eprintln!(
            "tooldispatch: the web console is at http://{local}/ ; log a browser in once with http://{local}/#login={code} (the link works one time)"
        ),
        (Listener::Tcp(_, local), None) => {
            eprintln!("tooldispatch: the web console is at http://{local}/");
        }
        (Listener::Unix(_, path), _) => eprintln!(
            "tooldispatch: serving on the Unix socket {} (mode 0600); try `curl --unix-socket {} http://localhost/v1/health`",
            path.display(),
            path.display()
        ),
    }
    let served = match listener {
        Listener::Tcp(listener, _) => {
            dispatch_server::serve_with(listener, daemon, access, extra, stop).await
        }
        Listener::Unix(listener, path) => {
            let served = dispatch_server::serve_with(listener, daemon, access, extra, stop).await;
            // Ours (bound above): gone with the daemon, so the next start finds no stale file.
            let _ = std::fs::remove_file(&path);
            served
        }
    };
    sweeper.abort();
    served.map_err(|e| CliError::failed(format!("the daemon stopped: {e}")))
}

/// Where the daemon listens.
enum Listener {
    Tcp(tokio::net::TcpListener, std::net::SocketAddr),
    Unix(tokio::net::UnixListener, std::path::PathBuf),
}

impl Listener {
    /// `http://127.0.0.1:7878` or `unix:/run/user/1000/td.sock`.
    fn describe(&self) -> String {
        match self {
            Listener::Tcp(_, local) => format!("http://{local}"),
            Listener::Unix(_, path) => format!("unix:{}", path.display()),
        }
    }
}

/// Listen on a Unix socket at `path` whose file has mode 0600 from the moment it exists: the
/// socket is created under umask 077 (the file's mode is fixed at bind), so no other user can
/// connect in between. A socket left by a daemon that is gone (nobody accepts on it) is
/// replaced; a live one, or anything that is not a socket, is refused.
fn bind_unix(path: &std::path::Path) -> Result<tokio::net::UnixListener, CliError> {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_socket() => {
            if std::os::unix::net::UnixStream::connect(path).is_ok() {
                return Err(CliError::failed(format!(
                    "{} is the socket of a daemon that is running; stop it first, or pick another --unix path",
                    path.display()
                )));
            }
            std::fs::remove_file(path).map_err(|e| {
                CliError::failed(format!(
                    "cannot remove the stale socket {}: {e}",
                    path.display()
                ))
            })?;
        }
        Ok(_) => {
            return Err(CliError::input(format!(
                "{} exists and is not a socket; pick another --unix path (nothing there was changed)",
                path.display()
            )));
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => {
            return Err(CliError::failed(format!(
                "cannot look at {}: {e}",
                path.display()
            )));
        }
    }
    // umask is process-wide; nothing else of this process creates files while it is set
    // (the daemon has not started serving yet).
    let before = rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o177));
    let bound = tokio::net::UnixListener::bind(path);
    rustix::process::umask(before);
    let listener =
        bound.map_err(|e| CliError::failed(format!("cannot listen on {}: {e}", path.display())))?;
    // The mode the umask gave it, said once more for filesystems that ignore the umask.
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(|e| {
        CliError::failed(format!("cannot set {} to mode 0600: {e}", path.display()))
    })?;
    Ok(listener)
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
        // An internal error's message is already the pointer to the daemon's log.
        ran.map_err(|e| e.message)
    }
}
