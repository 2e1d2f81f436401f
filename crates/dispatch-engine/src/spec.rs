//! What a tool declares about itself: everything the engine needs to check, schedule,
//! gate, cache and dedupe a call without knowing what the tool does.

use std::time::Duration;

use serde_json::Value;

/// The seed's default per-tool timeout.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// A tool's declaration.
#[derive(Clone, Debug)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    /// JSON Schema of the arguments object.
    pub parameters: Value,
    pub concurrency: Concurrency,
    pub gate: Gate,
    pub cache: CachePolicy,
    /// Hard limit on one call.
    pub timeout: Duration,
    /// Limit on the time between two progress events; `None` means only the hard limit applies.
    pub idle_timeout: Option<Duration>,
    /// Started and not awaited: the slot's result is `ok` at once.
    pub fire_and_forget: bool,
    pub origin: Origin,
    /// What a remembered (deduplicated) result of this tool depends on.
    pub effect: Effect,
    /// Argument keys dropped from the stored assistant message after a successful call
    /// (their size is kept as `wrote_bytes` / `edits`).
    pub elide_args: &'static [&'static str],
    /// Hidden from `find_tools(mode=list)` unless `system=true`.
    pub system: bool,
    /// The call needs the user's answer: the run parks unless someone can answer inline.
    pub asks_user: bool,
    /// A repeated identical call may return the earlier result. Off for tools whose call *is*
    /// the effect (write_todo: A, B, A must store A again).
    pub dedupe: bool,
}

/// Whether calls may overlap other calls of their round.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Concurrency {
    Concurrent,
    Serial,
}

/// How the confirm gate treats a tool's calls by default. A tool whose arguments decide it
/// (run_command's argv, http_request's method) says so per call in
/// [`Tool::subject`](crate::Tool::subject); this is what a call declares when it says nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gate {
    /// Never asks (except for sensitive paths and stored secrets).
    ReadOnly,
    /// Asks unless a rule allows it.
    Ask,
    /// Always asks unless the run or the turn is allow-all (remove_file, restore_file).
    Destructive,
    /// Talks to the user itself; its own prompt is the confirmation (ask_user, store_secret).
    Interactive,
}

/// Whether and where the 30-minute result cache keeps this tool's results.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CachePolicy {
    None,
    Session(Duration),
    Shared(Duration),
}

/// Where a tool comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Origin {
    Builtin,
    Script,
    Ext,
    Mcp { server: String },
    Client,
}

/// What a tool's result depends on, for state-aware dedupe (DESIGN §4.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Effect {
    /// Depends only on its arguments (calculate, find_tools).
    Pure,
    /// Depends on the files it reports in `ToolOutput::paths` (read_files).
    ReadsPaths,
    /// Observes the world at large (find_files, http_request GET): dies when anything mutates.
    Observes,
    /// Changes the world; a success bumps the run's write epoch.
    Mutates,
}

impl ToolSpec {
    /// A spec with the seed's defaults: serial, asks, no cache, 60 s, observes the world.
    pub fn new(name: impl Into<String>, description: impl Into<String>, parameters: Value) -> Self {
        ToolSpec {
            name: name.into(),
            description: description.into(),
            parameters,
            concurrency: Concurrency::Serial,
            gate: Gate::Ask,
            cache: CachePolicy::None,
            timeout: DEFAULT_TIMEOUT,
            idle_timeout: None,
            fire_and_forget: false,
            origin: Origin::Builtin,
            effect: Effect::Observes,
            elide_args: &[],
            system: false,
            asks_user: false,
            dedupe: true,
        }
    }

    pub fn concurrent(mut self) -> Self {
        self.concurrency = Concurrency::Concurrent;
        self
    }
    pub fn gate(mut self, gate: Gate) -> Self {
        self.gate = gate;
        self
    }
    pub fn read_only(self) -> Self {
        self.gate(Gate::ReadOnly)
    }
    pub fn effect(mut self, effect: Effect) -> Self {
        self.effect = effect;
        self
    }
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }
    pub fn idle_timeout(mut self, idle: Duration) -> Self {
        self.idle_timeout = Some(idle);
        self
    }
    pub fn cache(mut self, cache: CachePolicy) -> Self {
        self.cache = cache;
        self
    }
    pub fn origin(mut self, origin: Origin) -> Self {
        self.origin = origin;
        self
    }
    pub fn fire_and_forget(mut self) -> Self {
        self.fire_and_forget = true;
        self
    }
    pub fn elide_args(mut self, keys: &'static [&'static str]) -> Self {
        self.elide_args = keys;
        self
    }
    pub fn system(mut self) -> Self {
        self.system = true;
        self
    }
    pub fn no_dedupe(mut self) -> Self {
        self.dedupe = false;
        self
    }
    pub fn asks_user(mut self) -> Self {
        self.asks_user = true;
        self.gate = Gate::Interactive;
        self
    }

    pub fn is_concurrent(&self) -> bool {
        // MCP tools run serially whatever their definition says (seed).
        self.concurrency == Concurrency::Concurrent && !matches!(self.origin, Origin::Mcp { .. })
    }
}
