//! Turning CLI options into an engine: store, data directory, registry, confirmer, rules.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use dispatch_engine::{
    ApproveAll, ClientTool, ClientTools, Confirmer, Engine, EngineConfig, Headless,
};
use dispatch_mcp::client::McpClients;

use crate::config::Config;
use crate::terminal::TerminalConfirmer;
use crate::{Approve, CliError, Common};

/// Where script and ext tools are loaded from: the user's tools (beside the config file),
/// the work directory's `.tooldispatch/tools` when the user trusts it, and the installed
/// extensions (in the data directory).
pub fn tool_dirs(workdir: &Path, trusted: bool) -> dispatch_tools::extensions::ToolDirs {
    // Only absolute places: without HOME (or with a relative XDG variable) they would be
    // relative to wherever tooldispatch runs, which may be a cloned repository.
    dispatch_tools::extensions::ToolDirs {
        user: user_tools_dir().filter(|d| d.is_absolute()),
        project: trusted.then(|| workdir.join(".tooldispatch/tools")),
        extensions: Some(extensions_dir()).filter(|d| d.is_absolute()),
    }
}

/// `$XDG_CONFIG_HOME/tooldispatch/tools`: the user's script tools.
pub fn user_tools_dir() -> Option<PathBuf> {
    crate::config::default_path().and_then(|p| p.parent().map(|d| d.join("tools")))
}

/// `$XDG_DATA_HOME/tooldispatch/extensions`: the installed extensions.
pub fn extensions_dir() -> PathBuf {
    data_dir().join("extensions")
}

/// `$XDG_DATA_HOME/tooldispatch`, else `~/.local/share/tooldispatch`.
pub fn data_dir() -> PathBuf {
    let base = std::env::var_os("XDG_DATA_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/share")))
        .unwrap_or_else(|| PathBuf::from("."));
    base.join("tooldispatch")
}

/// The store's files and its secrets key: every call that names one asks, even under
/// "allow for this turn" (the OS sandbox hides them from commands as well).
fn protected_paths(option: Option<&str>, config: &Config) -> Vec<PathBuf> {
    let url = store_url(option.or(config.store.as_deref()));
    // The trusted-directories list and the config file: a call that could edit them could
    // grant itself permissions.
    let mut paths: Vec<PathBuf> = crate::config::default_path()
        .and_then(|p| p.parent().map(Path::to_path_buf))
        .into_iter()
        .collect();
    if let Some(file) = url.strip_prefix("sqlite:").filter(|f| !f.is_empty()) {
        paths.extend(store_files(Path::new(file)));
    }
    paths
}

/// The temp directory that stands in for the data dir while the store keeps nothing
/// (`memory:`), made on first use and removed by [`remove_scratch`] when the command ends.
static SCRATCH: std::sync::Mutex<Option<PathBuf>> = std::sync::Mutex::new(None);

/// Where the engine keeps per-session files (spilled results): the data dir, or, when the
/// store keeps nothing (`memory:`), a private temp directory removed at exit, so a run that
/// leaves no state leaves no spilled output in the real data dir either.
fn session_files_dir(store_url: &str) -> Result<PathBuf, CliError> {
    if !store_url.starts_with("memory:") {
        return Ok(data_dir());
    }
    let mut scratch = SCRATCH.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(dir) = scratch.as_ref() {
        return Ok(dir.clone());
    }
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let dir = std::env::temp_dir().join(format!("tooldispatch-{}-{nanos:08x}", std::process::id()));
    // Made new (never an existing path someone else prepared) and readable by this user only.
    std::os::unix::fs::DirBuilderExt::mode(&mut std::fs::DirBuilder::new(), 0o700)
        .create(&dir)
        .map_err(|e| {
            CliError::failed(format!(
                "cannot make a temp directory for spilled results at {}: {e}; set TMPDIR to a writable directory",
                dir.display()
            ))
        })?;
    *scratch = Some(dir.clone());
    Ok(dir)
}

/// Remove the `memory:` store's temp directory, if this command made one.
pub fn remove_scratch() {
    let dir = SCRATCH.lock().unwrap_or_else(|e| e.into_inner()).take();
    if let Some(dir) = dir {
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// The store URL to use: the option, else the default SQLite file.
pub fn store_url(option: Option<&str>) -> String {
    match option {
        Some(url) => url.to_string(),
        None => format!("sqlite:{}", data_dir().join("store.db").display()),
    }
}

/// The `--client-tools` file's declarations, read and parsed once per process (not yet
/// checked: that needs the engine's tools, see [`compiled_client_tools`]).
pub fn client_tools(common: &Common) -> Result<Vec<ClientTool>, CliError> {
    let Some(path) = &common.client_tools else {
        return Ok(Vec::new());
    };
    let text = std::fs::read_to_string(path).map_err(|e| {
        CliError::input(format!(
            "cannot read --client-tools {}: {e}",
            path.display()
        ))
    })?;
    serde_json::from_str(&text).map_err(|e| {
        CliError::input(format!(
            "--client-tools {} is not a JSON array of {{\"name\", \"description\", \"parameters\"}}: {e}",
            path.display()
        ))
    })
}

/// Most declaration problems spelled out on the one line of a refusal; the rest are counted.
const PROBLEMS_SHOWN: usize = 5;

/// `declared` checked against the engine's tools and compiled, once for every round of this
/// process; any problem is bad input (exit 2), with every problem on one line.
pub fn compiled_client_tools(
    common: &Common,
    declared: Vec<ClientTool>,
    engine: &Engine,
) -> Result<ClientTools, CliError> {
    ClientTools::compile(declared, &engine.registry()).map_err(|problems| {
        let file = common
            .client_tools
            .as_deref()
            .map(|p| p.display().to_string())
            .unwrap_or_default();
        let mut line = problems
            .iter()
            .take(PROBLEMS_SHOWN)
            .map(|p| p.to_string().replace(['\n', '\r'], " "))
            .collect::<Vec<_>>()
            .join("; ");
        if problems.len() > PROBLEMS_SHOWN {
            line.push_str(&format!("; and {} more", problems.len() - PROBLEMS_SHOWN));
        }
        CliError::input(format!("--client-tools {file} is refused: {line}"))
    })
}

/// Open the store `--store` names, else the config file's, else the default; a bad URL is
/// bad input (exit 2).
pub fn open_store(
    option: Option<&str>,
    config: &Config,
) -> Result<Arc<dyn dispatch_store::Store>, CliError> {
    let url = store_url(option.or(config.store.as_deref()));
    dispatch_store::open(&url).map_err(|e| match e {
        dispatch_store::StoreError::BadUrl { .. } => CliError::input(e.to_string()),
        other => CliError::failed(other.to_string()),
    })
}

/// The built-in tools' settings from the config file, and `TOOLDISPATCH_ALLOW_HOSTS`
/// (comma-separated, added to the file's `net.allow_hosts`).
fn tools_config(
    config: &Config,
    store_file: Option<PathBuf>,
) -> Result<dispatch_tools::ToolsConfig, CliError> {
    let mut tools = dispatch_tools::ToolsConfig {
        sandbox: sandbox_config(config, store_file),
        ..Default::default()
    };
    tools
        .read_only_commands
        .extend(config.commands.read_only.iter().cloned());
    tools.search.searxng_url = config.search.searxng_url.clone();
    tools.search.duckduckgo_url = config.search.duckduckgo_url.clone();
    tools.search.google_news_url = config.search.google_news_url.clone();
    tools.chatbot = config.chatbot.to_config();
    if let Some(ms) = config.search.min_gap_ms {
        tools.search.min_gap = std::time::Duration::from_millis(ms);
    }
    let mut allow = config.net.allow_hosts.clone();
    if let Ok(list) = std::env::var("TOOLDISPATCH_ALLOW_HOSTS") {
        allow.extend(
            list.split(',')
                .map(str::trim)
                .filter(|h| !h.is_empty())
                .map(String::from),
        );
    }
    let policy = dispatch_tools::web::NetPolicy::from_list(&allow).map_err(|e| {
        CliError::input(format!(
            "{e} (in the config file or TOOLDISPATCH_ALLOW_HOSTS)"
        ))
    })?;
    tools.net = Arc::new(policy);
    Ok(tools)
}

/// The `[filter]` model: a `[models.<name>]` entry, or an OpenAI-compatible server of its own.
fn model_filter(
    filter: &crate::config::Filter,
    config: &Config,
    store: Arc<dyn dispatch_store::Store>,
) -> dispatch_model::ModelResultFilter {
    let model = match &filter.base_url {
        Some(base_url) => {
            let mut model = dispatch_model::ModelConfig::new(
                dispatch_model::ProviderKind::OpenAi,
                filter.model.clone(),
            );
            model.base_url = Some(base_url.clone());
            model.key = Some(match &filter.api_key_env {
                Some(var) => format!("env:{var}"),
                None => "none".to_string(),
            });
            model
        }
        // Checked when the config was read: the name is there.
        None => config
            .models
            .pick(Some(&filter.model))
            .map(|(_, model)| model.clone())
            .unwrap_or_else(|_| {
                dispatch_model::ModelConfig::new(dispatch_model::ProviderKind::OpenAi, "")
            }),
    };
    let timeout = filter.timeout_secs.map_or(
        dispatch_model::DEFAULT_FILTER_TIMEOUT,
        std::time::Duration::from_secs,
    );
    dispatch_model::ModelResultFilter::new(model, store, timeout)
}

/// The sandbox commands run in: the machine's unless `[sandbox] mode = "off"`; the store file
/// and its key are hidden besides the defaults (they may lie outside the data dir).
pub fn sandbox_config(
    config: &Config,
    store_file: Option<PathBuf>,
) -> dispatch_tools::shell::process::SandboxConfig {
    use dispatch_tools::shell::process::SandboxConfig;
    let sandbox = match config.sandbox.mode.to_mode() {
        dispatch_sandbox::Mode::Off => {
            SandboxConfig::new(Arc::new(dispatch_sandbox::Sandbox::off()))
        }
        dispatch_sandbox::Mode::Auto => SandboxConfig::default(),
    };
    let mut hidden = vec![data_dir()];
    if let Some(file) = store_file {
        hidden.extend(store_files(&file));
    }
    sandbox.with_hidden(hidden)
}

/// A SQLite store's file and every file beside it that holds its data or its key: the gate
/// asks about each, and the sandbox hides each.
fn store_files(file: &Path) -> Vec<PathBuf> {
    ["", "-wal", "-shm", "-journal", ".key"]
        .iter()
        .map(|suffix| {
            let mut name = file.as_os_str().to_owned();
            name.push(suffix);
            PathBuf::from(name)
        })
        .collect()
}

/// The SQLite file a store URL names, if any.
pub fn store_file(url: &str) -> Option<PathBuf> {
    url.strip_prefix("sqlite:").map(PathBuf::from)
}

/// An engine with the MCP servers its tools come from; the servers stop when it drops.
pub struct Setup {
    pub engine: Arc<Engine>,
    pub mcp: Option<McpClients>,
    /// The store the engine keeps its state in (the agent keeps its conversation there too).
    pub store: Arc<dyn dispatch_store::Store>,
}

impl std::ops::Deref for Setup {
    type Target = Engine;
    fn deref(&self) -> &Engine {
        &self.engine
    }
}

/// Build the engine for a command, with the config file's MCP servers started and their
/// tools registered. `default_store` applies when `--store` is absent (before the config
/// file's store).
pub async fn engine(common: &Common, default_store: Option<&str>) -> Result<Setup, CliError> {
    let config = Config::load(common.config.as_deref())?;
    let confirmer: Arc<dyn Confirmer> = match common.approve {
        Approve::None => Arc::new(Headless),
        Approve::All => Arc::new(ApproveAll),
        Approve::Ask => Arc::new(TerminalConfirmer::open().map_err(CliError::input)?),
    };
    let (engine, store, legs) = build(common, default_store, &config, confirmer)?;
    // Secrets for the servers' env and headers live in the user's store, also when this
    // command keeps its own state in memory (replay, mcp list).
    let secrets = match (&common.store, default_store) {
        (None, Some(_))
            if config
                .mcp
                .servers
                .values()
                .any(|s| !s.secret_names().is_empty()) =>
        {
            open_store(None, &config)?
        }
        _ => store.clone(),
    };
    let mcp = start_mcp(&config, &engine, secrets.as_ref(), common.store.as_deref()).await?;
    print_rule_lints(&engine);
    let engine = shared(engine, &legs, &store, &config);
    Ok(Setup { engine, mcp, store })
}

/// Start the config file's MCP servers and register their tools with `engine`; `None` when
/// none is configured. A server that cannot start leaves its tools out and says why on stderr
/// (and in `tooldispatch mcp list`).
pub async fn start_mcp(
    config: &Config,
    engine: &Engine,
    secrets: &dyn dispatch_store::Secrets,
    store_option: Option<&str>,
) -> Result<Option<McpClients>, CliError> {
    if config.mcp.servers.is_empty() {
        return Ok(None);
    }
    let mut values = std::collections::HashMap::new();
    for server in config.mcp.servers.values() {
        for name in server.secret_names() {
            if let Ok(Some(value)) = secrets.secret_get(&name).await {
                values.insert(name, value);
            }
        }
    }
    let mut servers = Vec::new();
    for (name, server) in &config.mcp.servers {
        // A missing secret stops that server only: it is listed as failed, with the reason.
        match server.with_secrets(name, |n| values.get(n).cloned()) {
            Ok(filled) => servers.push((name.clone(), filled, None)),
            Err(reason) => servers.push((name.clone(), server.clone(), Some(reason))),
        }
    }
    let store_file = store_file(&store_url(store_option.or(config.store.as_deref())));
    let sandbox = sandbox_config(config, store_file);
    let workdir = engine.config().workdir.clone();
    // A server starts in the work directory only when the user trusts it: launchers read the
    // directory they start in (./node_modules/.bin, python -m imports, uv.toml), and a cloned
    // repository must not choose what runs.
    let start_dir = if engine.config().trust_workdir {
        workdir.clone()
    } else {
        let dir = data_dir().join("mcp-start");
        std::fs::create_dir_all(&dir).map_err(|e| {
            CliError::failed(format!(
                "cannot create {}, where MCP servers start: {e}",
                dir.display()
            ))
        })?;
        dir
    };
    let options = dispatch_mcp::client::ClientOptions {
        workdir,
        start_dir,
        sandbox: sandbox.sandbox(),
        hidden: sandbox.hidden.clone(),
    };
    let clients = McpClients::start_checked(servers, options).await;
    engine.update_registry(|registry| clients.register_into(registry));
    for status in clients.statuses() {
        if status.state != dispatch_mcp::client::ServerState::Ready {
            eprintln!("tooldispatch: MCP server {}", status.line());
        }
    }
    Ok(Some(clients))
}

/// The engine with this confirmer, the store it uses, and the slot subagents find the agent
/// loop in (bound by [`shared`] once the engine is shared).
pub fn build(
    common: &Common,
    default_store: Option<&str>,
    config: &Config,
    confirmer: Arc<dyn Confirmer>,
) -> Result<
    (
        Engine,
        Arc<dyn dispatch_store::Store>,
        dispatch_tools::agents::Legs,
    ),
    CliError,
> {
    let workdir = match &common.workdir {
        Some(dir) => dir.clone(),
        None => std::env::current_dir()
            .map_err(|e| CliError::failed(format!("cannot read the current directory: {e}")))?,
    };
    let workdir = workdir.canonicalize().map_err(|e| {
        CliError::input(format!(
            "--workdir {} is not a usable directory: {e}",
            workdir.display()
        ))
    })?;
    if !workdir.is_dir() {
        return Err(CliError::input(format!(
            "--workdir {} is a file, not a directory; give the directory the tools work in",
            workdir.display()
        )));
    }
    let store_option = common.store.as_deref().or(default_store);
    let store = open_store(store_option, config)?;
    let store_file = store_file(&store_url(store_option.or(config.store.as_deref())));
    let trusted = crate::trust::is_trusted(&workdir);
    let stores = dispatch_tools::Stores::all(&store);
    let mut tools = tools_config(config, store_file)?;
    if let Some(filter) = &config.filter {
        tools.filter = Arc::new(model_filter(filter, config, store.clone()));
    }
    let extensions = Arc::new(dispatch_tools::extensions::ExtensionTools::new(
        tool_dirs(&workdir, trusted),
        tools.sandbox.clone(),
        tools.net.clone(),
        stores.clone(),
    ));
    tools.extensions = Some(extensions.clone());
    let legs = tools.legs.clone();
    tools.media = Some(Arc::new(dispatch_model::OpenAiMedia::new(
        store.clone(),
        &config.models.0,
        config.media.image_model.as_deref(),
        config.media.audio_model.as_deref(),
    )));
    let registry = dispatch_tools::builtin_registry_with(&tools, &stores)
        .map_err(|e| CliError::failed(e.to_string()))?;
    let mut config_engine = EngineConfig::new(workdir.clone());
    config_engine.data_dir = Some(session_files_dir(&store_url(
        store_option.or(config.store.as_deref()),
    ))?);
    config_engine.trust_workdir = trusted;
    config_engine.protected = protected_paths(common.store.as_deref().or(default_store), config);
    if let Some(mib) = config.spill_quota_mib {
        config_engine.spill_quota = mib.saturating_mul(1024 * 1024);
    }
    if let Some(n) = config.max_calls_per_round {
        config_engine.max_calls_per_round = n;
    }
    if let Some(n) = common.max_concurrent.or(config.max_concurrent) {
        if n == 0 {
            return Err(CliError::input("--max-concurrent must be at least 1"));
        }
        config_engine.max_concurrent = n;
    }
    let engine = Engine::new(registry, store.clone(), confirmer, config_engine)
        .map_err(|e| CliError::failed(e.to_string()))?
        .with_error_memory(store.clone())
        .with_result_cache(store.clone())
        .with_secrets(store.clone())
        .with_tool_source(extensions.clone());
    let refused = extensions.problems().len();
    if refused > 0 {
        eprintln!(
            "tooldispatch: {refused} problem(s) in script or ext tool definitions; those tools are left out (see `tooldispatch tools --check`)"
        );
    }
    Ok((engine, store, legs))
}

/// The engine, shared, with subagents' legs running the agent loop on it when the config
/// file names a model (without one, subagents says so when called).
fn shared(
    engine: Engine,
    legs: &dispatch_tools::agents::Legs,
    store: &Arc<dyn dispatch_store::Store>,
    config: &Config,
) -> Arc<Engine> {
    let engine = Arc::new(engine);
    if !config.models.0.is_empty() {
        legs.bind(Arc::new(dispatch_model::AgentLegs::new(
            Arc::downgrade(&engine),
            store.clone(),
            config.models.0.clone(),
        )));
    }
    engine
}

/// The engine of a long-lived command (`serve`, `mcp`): built with this confirmer, the MCP
/// servers started and their tools registered, and kept in step with them (a server that
/// starts late, restarts or changes its tools) until the returned [`Following`] drops.
pub async fn long_lived(
    common: &Common,
    config: &Config,
    confirmer: Arc<dyn Confirmer>,
) -> Result<(Arc<Engine>, Arc<dyn dispatch_store::Store>, Following), CliError> {
    let (engine, store, legs) = build(common, None, config, confirmer)?;
    let clients = start_mcp(config, &engine, store.as_ref(), common.store.as_deref()).await?;
    print_rule_lints(&engine);
    let engine = shared(engine, &legs, &store, config);
    let following = Following(clients.map(|clients| {
        let engine = engine.clone();
        tokio::spawn(async move { clients.follow(&engine).await })
    }));
    Ok((engine, store, following))
}

/// Keeps an engine's tools in step with its MCP servers; stops them when dropped.
pub struct Following(Option<tokio::task::JoinHandle<()>>);

impl Drop for Following {
    fn drop(&mut self) {
        if let Some(task) = &self.0 {
            task.abort();
        }
    }
}

/// Problems in the work directory's rules file, on stderr; after the MCP servers' tools are
/// registered, so a rule naming one of them is not reported as naming no tool.
pub fn print_rule_lints(engine: &Engine) {
    for lint in engine.rule_lints() {
        eprintln!("tooldispatch: .tooldispatch/rules: {}", lint.message);
    }
}
