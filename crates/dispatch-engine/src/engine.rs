//! The engine: how it is set up, what it is built from, and the hold on a session that keeps
//! one session's rounds from overlapping. A round itself is in [`crate::round`].

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dispatch_store::{ErrorMemory, ResultCache, Secrets, SessionStore, StoreError};
use serde_json::Value;

use crate::answer::AnswerRequest;
use crate::deferred::{Catalog, ClientTool};
use crate::gate::{CONFIRM_TIMEOUT, Confirmer, GatePolicy};
use crate::redact::RedactorCache;
use crate::registry::Registry;
use crate::round::{RoundOutcome, RoundRequest};
use crate::rules::{RuleLint, Rules};
use crate::shaping::DEFAULT_RESULT_BUDGET;
use crate::tool::Exclude;
use crate::wire::Provider;

/// `MAX_CONCURRENT_TOOLS`: half the cores, at least 3 (seed v1.3.0).
pub fn default_max_concurrent() -> usize {
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    (cores / 2).max(3)
}

/// The most calls one round takes unless configured otherwise
/// ([`EngineConfig::max_calls_per_round`]).
pub const DEFAULT_MAX_CALLS_PER_ROUND: usize = 512;

/// How an engine is set up.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// The directory file tools are confined to; `.tooldispatch/rules` lives here.
    pub workdir: PathBuf,
    /// Per-session files (spilled results); `None` keeps nothing on disk.
    pub data_dir: Option<PathBuf>,
    pub max_concurrent: usize,
    pub confirm_timeout: Duration,
    /// Per-result budget in bytes before output shaping.
    pub result_budget: usize,
    /// The user trusts the work directory (`tooldispatch trust`): only then are its
    /// `.tooldispatch/rules` obeyed. A cloned repository's rules must not grant themselves
    /// permissions.
    pub trust_workdir: bool,
    /// Paths every call that touches them must ask about, even under "allow for this turn":
    /// the store and its key, tooldispatch's config directory. The work directory's
    /// `.tooldispatch/` (resolved) is always added.
    pub protected: Vec<PathBuf>,
    /// Bytes of spilled output one session keeps (over-budget results; see [`crate::spill`]).
    pub spill_quota: u64,
    /// The most tool calls one round takes; a reply with more is refused whole, before
    /// anything is loaded or run ([`EngineError::TooManyCalls`]). A round's memory and its
    /// report grow with its calls: this bounds them by design, not by the body size.
    pub max_calls_per_round: usize,
}

impl EngineConfig {
    pub fn new(workdir: impl Into<PathBuf>) -> Self {
        EngineConfig {
            workdir: workdir.into(),
            data_dir: None,
            max_concurrent: default_max_concurrent(),
            confirm_timeout: CONFIRM_TIMEOUT,
            result_budget: DEFAULT_RESULT_BUDGET,
            trust_workdir: false,
            protected: Vec::new(),
            spill_quota: crate::spill::DEFAULT_SPILL_QUOTA,
            max_calls_per_round: DEFAULT_MAX_CALLS_PER_ROUND,
        }
    }
}

/// What can stop a round from producing results.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("the round was cancelled before its results were committed")]
    Cancelled,
    #[error("cannot read the stored secrets, so results could not be kept free of them: {0}")]
    Secrets(String),
    #[error("session {session} has no pending task {task}; {}", pending_list(.pending))]
    NoSuchTask {
        session: String,
        task: String,
        pending: Vec<String>,
    },
    #[error("{0}")]
    BadAnswer(String),
    #[error(
        "a round of session {asked} was given to the hold of session {held}; hold its own session"
    )]
    NotHeld { held: String, asked: String },
    /// The reply has more calls than a round takes; nothing of it ran or was recorded.
    #[error(
        "the reply has {calls} tool calls; a round takes at most {max} (max_calls_per_round in the config file)"
    )]
    TooManyCalls { calls: usize, max: usize },
    #[error("cannot read the rules file {path}: {source}")]
    Rules {
        path: String,
        source: std::io::Error,
    },
}

fn pending_list(pending: &[String]) -> String {
    if pending.is_empty() {
        "it has none (already answered, or never parked)".to_string()
    } else {
        format!("its pending tasks are: {}", pending.join(", "))
    }
}

/// The dispatcher: a registry, a store, a confirmer and the gate policy.
pub struct Engine {
    /// The tools, replaced whole when they change (see [`Engine::update_registry`]); each
    /// round works on the registry it started with.
    registry: std::sync::RwLock<Arc<Registry>>,
    pub(crate) workdir: Arc<std::path::Path>,
    pub(crate) data_dir: Option<Arc<std::path::Path>>,
    pub(crate) store: Arc<dyn SessionStore>,
    pub(crate) confirmer: Arc<dyn Confirmer>,
    pub(crate) policy: Mutex<GatePolicy>,
    pub(crate) config: EngineConfig,
    /// One lock per session seen by this engine: rounds of a session commit one at a time, so
    /// none of them builds on state another is about to replace.
    sessions: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// Where `related_errors` come from; none means no hints.
    pub(crate) error_memory: Option<Arc<dyn ErrorMemory>>,
    /// Where pass 3 writes the cache entries committed results ask for.
    pub(crate) result_cache: Option<Arc<dyn ResultCache>>,
    /// The stored secrets: redacted from everything a round keeps, and handed to tools.
    pub(crate) secrets: Option<Arc<dyn Secrets>>,
    /// The redactor of `secrets`, rebuilt only when they change.
    pub(crate) redaction: RedactorCache,
    /// Where tools that can change between rounds come from (script tools on disk).
    sources: Vec<Arc<dyn ToolSource>>,
    /// Per session, the `Subject::ask_once` keys the user approved.
    approved_once: Mutex<HashMap<String, HashSet<String>>>,
}

/// Tools kept outside the engine that can change while it runs (script tools on disk). The
/// engine asks each source when a round starts, so an edited definition is used by the next
/// round and never changes one half-way through.
pub trait ToolSource: Send + Sync {
    /// Whether the tools changed since the last [`ToolSource::apply`]; called at every round
    /// start, so it must be cheap (a few file times, not a reload).
    fn changed(&self) -> bool;
    /// Bring `registry` (a copy, swapped in afterwards) up to date with this source's tools.
    fn apply(&self, registry: &mut Registry);
}

/// Sessions whose `ask_once` approvals are kept; past it they are all forgotten (they only
/// spare the user a question, so forgetting is safe).
const MAX_APPROVAL_SESSIONS: usize = 4096;

/// A session held for one caller (see [`Engine::hold_session`]): rounds and answers run on
/// it one after another, and no other caller's round of the session runs meanwhile.
pub struct HeldSession<'e> {
    engine: &'e Engine,
    session: String,
    _one_round_at_a_time: tokio::sync::OwnedMutexGuard<()>,
}

impl HeldSession<'_> {
    /// Dispatch one round of the held session (see [`Engine::round`]).
    pub async fn round(&self, req: RoundRequest) -> Result<RoundOutcome, EngineError> {
        self.check_session(&req.session)?;
        self.engine.check_round_size(req.calls.len())?;
        if req.calls.is_empty() {
            return Ok(RoundOutcome::no_calls(req.session, req.run));
        }
        self.engine.round_held(req).await
    }

    /// Deliver the user's answers to a pending task of the held session (see
    /// [`Engine::answer`]).
    pub async fn answer(&self, req: AnswerRequest) -> Result<RoundOutcome, EngineError> {
        self.check_session(&req.request.session)?;
        self.engine.answer_held(req).await
    }

    /// A round of another session would run without its own session's lock.
    fn check_session(&self, session: &str) -> Result<(), EngineError> {
        if session == self.session {
            Ok(())
        } else {
            Err(EngineError::NotHeld {
                held: self.session.clone(),
                asked: session.to_string(),
            })
        }
    }
}

impl Engine {
    /// An engine over this registry and store. Reads `.tooldispatch/rules` from the work directory.
    pub fn new(
        registry: Registry,
        store: Arc<dyn SessionStore>,
        confirmer: Arc<dyn Confirmer>,
        config: EngineConfig,
    ) -> Result<Self, EngineError> {
        let rules = if config.trust_workdir {
            Rules::load(&config.workdir).map_err(|source| EngineError::Rules {
                path: config.workdir.join(Rules::FILE).display().to_string(),
                source,
            })?
        } else {
            Rules::untrusted(&config.workdir)
        };
        let mut protected: Vec<PathBuf> = config
            .protected
            .iter()
            .map(|p| p.canonicalize().unwrap_or_else(|_| p.clone()))
            .collect();
        // By its resolved path: a `.tooldispatch` that is a link guards where it points.
        protected.push(crate::subject::resolve_path(
            &config.workdir,
            ".tooldispatch",
        ));
        let policy = GatePolicy {
            rules,
            workdir: config
                .workdir
                .canonicalize()
                .unwrap_or_else(|_| config.workdir.clone()),
            protected,
        };
        Ok(Engine {
            registry: std::sync::RwLock::new(Arc::new(registry)),
            workdir: Arc::from(config.workdir.as_path()),
            data_dir: config.data_dir.as_deref().map(Arc::from),
            store,
            confirmer,
            policy: Mutex::new(policy),
            config,
            sessions: Mutex::default(),
            error_memory: None,
            result_cache: None,
            secrets: None,
            redaction: RedactorCache::default(),
            sources: Vec::new(),
            approved_once: Mutex::default(),
        })
    }

    /// Take tools from `source` now and keep them in step with it: it is asked at every round
    /// start whether they changed.
    pub fn with_tool_source(mut self, source: Arc<dyn ToolSource>) -> Self {
        self.update_registry(|registry| source.apply(registry));
        self.sources.push(source);
        self
    }

    /// Bring the registry up to date with every source that changed.
    pub(crate) fn refresh_sources(&self) {
        for source in &self.sources {
            if source.changed() {
                self.update_registry(|registry| source.apply(registry));
            }
        }
    }

    /// Whether the user approved a call with this `ask_once` key in `session`.
    pub(crate) fn approved_once(&self, session: &str, key: &str) -> bool {
        self.approved_once
            .lock()
            .is_ok_and(|map| map.get(session).is_some_and(|keys| keys.contains(key)))
    }

    pub(crate) fn approve_once(&self, session: &str, key: String) {
        if let Ok(mut map) = self.approved_once.lock() {
            if map.len() >= MAX_APPROVAL_SESSIONS && !map.contains_key(session) {
                map.clear();
            }
            map.entry(session.to_string()).or_default().insert(key);
        }
    }

    /// Replace the values these secrets hold with `[secret:NAME]` in everything a round keeps
    /// or shows (DESIGN §3.17), and let tools read and store them (`{{secret:NAME}}`,
    /// store_secret).
    pub fn with_secrets(mut self, secrets: Arc<dyn Secrets>) -> Self {
        self.secrets = Some(secrets);
        self.redaction = RedactorCache::default();
        self
    }

    /// Write the cache entries committed results ask for here (seed §5). Tools that read the
    /// cache are given it when they are built; give them the same one.
    pub fn with_result_cache(mut self, cache: Arc<dyn ResultCache>) -> Self {
        self.result_cache = Some(cache);
        self
    }

    /// Offer records from this error memory as `related_errors` on failures (seed §8).
    pub fn with_error_memory(mut self, memory: Arc<dyn ErrorMemory>) -> Self {
        self.error_memory = Some(memory);
        self
    }

    /// Wait until no other round or answer of `session` runs on this engine, and keep it so
    /// until the returned hold is dropped. [`Engine::round`] and [`Engine::answer`] take one
    /// themselves; a caller that must do more under the same lock (the daemon opens and
    /// closes the session's event feed around each round) holds one and runs the round on it.
    pub async fn hold_session(&self, session: &str) -> HeldSession<'_> {
        let lock = match self.sessions.lock() {
            Ok(mut sessions) => sessions.entry(session.to_string()).or_default().clone(),
            // A poisoned map only loses the serialisation, never a round.
            Err(_) => Arc::default(),
        };
        HeldSession {
            engine: self,
            session: session.to_string(),
            _one_round_at_a_time: lock.lock_owned().await,
        }
    }

    /// The tools as they are now. A round takes this once at its start, so tools that come or
    /// go meanwhile change the next round, never one half-way through.
    pub fn registry(&self) -> Arc<Registry> {
        match self.registry.read() {
            Ok(registry) => registry.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Change the tools: `change` edits a copy, which then replaces the registry for every
    /// round that starts afterwards (an MCP server's tools arrive, change or leave this way).
    pub fn update_registry(&self, change: impl FnOnce(&mut Registry)) {
        let mut guard = match self.registry.write() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        };
        let mut next = Registry::clone(&guard);
        change(&mut next);
        *guard = Arc::new(next);
    }

    /// Whether a reply with this many calls is a round this engine takes; a caller that
    /// does work before the round (the daemon registers the session, opens its feed) asks
    /// first. [`Engine::round`] asks too, before anything is loaded.
    pub fn check_round_size(&self, calls: usize) -> Result<(), EngineError> {
        let max = self.config.max_calls_per_round;
        if calls > max {
            Err(EngineError::TooManyCalls { calls, max })
        } else {
            Ok(())
        }
    }

    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    /// Problems found in the rules file: bad lines, shadowed rules, rules naming no known tool.
    pub fn rule_lints(&self) -> Vec<RuleLint> {
        let Ok(policy) = self.policy.lock() else {
            return Vec::new();
        };
        let registry = self.registry();
        let names: Vec<&str> = registry.iter().map(|t| t.name()).collect();
        let mut lints = policy.rules.lints().to_vec();
        lints.extend(policy.rules.lint_against_names(&names));
        lints
    }

    /// One line saying the work directory's rules file is ignored because the directory is
    /// not trusted, when that is so.
    pub fn rules_note(&self) -> Option<String> {
        self.policy.lock().ok()?.rules.ignored_note()
    }

    /// The request's tools array and turn context for a session.
    pub async fn tools(
        &self,
        session: &str,
        provider: Provider,
        client_tools: &[ClientTool],
        exclude: &[String],
    ) -> Result<(Vec<Value>, String), EngineError> {
        let (snapshot, _) = self.store.load(session, "").await?;
        let exclude = Exclude::new(exclude.iter().cloned());
        self.refresh_sources();
        let registry = self.registry();
        let catalog = Catalog {
            registry: &registry,
            provider,
            exclude: &exclude,
            client_tools,
            marked: &snapshot.marked,
        };
        let mut context = catalog.turn_context(&self.config.workdir);
        if let Some(note) = self.rules_note() {
            context.push('\n');
            context.push_str(&note);
        }
        Ok((catalog.tools_array(), context))
    }
}
