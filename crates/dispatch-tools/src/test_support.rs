//! A real engine over the built-in tools and a memory store, for the tools' unit tests: a
//! `ToolContext` can only be built by the engine, so tools are called through rounds.

use std::borrow::Borrow;
use std::sync::Arc;

use dispatch_engine::{
    Confirmer, Engine, EngineConfig, Event, EventKind, Headless, Provider, RawCall, Registry,
    RoundOutcome, RoundRequest, Status,
};
use dispatch_store::Store;
use serde_json::{Value, json};
use tempfile::TempDir;

use crate::{Stores, ToolsConfig};

/// An engine with every built-in tool, a `memory:` store (also every store the tools keep
/// state in, the engine's result cache and secrets), no confirmer, and its own work and data
/// directories.
#[allow(dead_code)] // workdir/data_dir/root serve the file tool tests as they land
pub struct Harness {
    pub engine: Engine,
    pub store: Arc<dyn Store>,
    pub workdir: TempDir,
    pub data_dir: TempDir,
}

impl Harness {
    pub fn new() -> Self {
        Self::with_confirmer(Arc::new(Headless))
    }

    /// A harness whose confirmation requests go to `confirmer`.
    pub fn with_confirmer(confirmer: Arc<dyn Confirmer>) -> Self {
        Self::with_config(&ToolsConfig::default(), confirmer)
    }

    /// A harness over the built-ins set up by `config` (such as web tools allow-listing the
    /// test's own loopback server).
    pub fn with_config(config: &ToolsConfig, confirmer: Arc<dyn Confirmer>) -> Self {
        Self::with_registry(
            |stores| crate::builtin_registry_with(config, stores).unwrap(),
            confirmer,
        )
    }

    /// A harness over the registry `make` builds with the harness's stores (the built-ins plus
    /// tools built with test settings).
    pub fn with_registry(
        make: impl FnOnce(&Stores) -> Registry,
        confirmer: Arc<dyn Confirmer>,
    ) -> Self {
        Self::build(
            make,
            confirmer,
            dispatch_store::open("memory:").unwrap(),
            None,
        )
    }

    /// A harness whose work directory has these `.tooldispatch/rules` and is trusted.
    #[allow(dead_code)]
    pub fn with_rules(
        make: impl FnOnce(&Stores) -> Registry,
        confirmer: Arc<dyn Confirmer>,
        rules: &str,
    ) -> Self {
        Self::build_in(
            make,
            confirmer,
            dispatch_store::open("memory:").unwrap(),
            None,
            Some(rules),
        )
    }

    /// The harness over `store` (one with a manual clock, for cache ages) and, when given, a
    /// concurrency bound of `max_concurrent`; `make` builds the registry with its stores.
    pub fn build(
        make: impl FnOnce(&Stores) -> Registry,
        confirmer: Arc<dyn Confirmer>,
        store: Arc<dyn Store>,
        max_concurrent: Option<usize>,
    ) -> Self {
        Self::build_in(make, confirmer, store, max_concurrent, None)
    }

    fn build_in(
        make: impl FnOnce(&Stores) -> Registry,
        confirmer: Arc<dyn Confirmer>,
        store: Arc<dyn Store>,
        max_concurrent: Option<usize>,
        rules: Option<&str>,
    ) -> Self {
        let registry = make(&Stores::all(&store));
        let workdir = tempfile::tempdir().unwrap();
        let data_dir = tempfile::tempdir().unwrap();
        let mut config = EngineConfig::new(workdir.path().canonicalize().unwrap());
        if let Some(rules) = rules {
            std::fs::create_dir_all(workdir.path().join(".tooldispatch")).unwrap();
            std::fs::write(workdir.path().join(".tooldispatch/rules"), rules).unwrap();
            config.trust_workdir = true;
        }
        config.data_dir = Some(data_dir.path().canonicalize().unwrap());
        if let Some(n) = max_concurrent {
            config.max_concurrent = n;
        }
        let engine = Engine::new(registry, store.clone(), confirmer, config)
            .unwrap()
            .with_error_memory(store.clone())
            .with_result_cache(store.clone())
            .with_secrets(store.clone());
        Harness {
            engine,
            store,
            workdir,
            data_dir,
        }
    }

    /// The work directory, resolved (what tools see).
    #[allow(dead_code)]
    pub fn root(&self) -> std::path::PathBuf {
        self.workdir.path().canonicalize().unwrap()
    }

    /// One OpenAI round of these calls.
    pub async fn round(&self, session: &str, run: &str, calls: Vec<RawCall>) -> RoundOutcome {
        self.engine
            .round(RoundRequest::new(session, run, Provider::OpenAi, calls))
            .await
            .unwrap()
    }

    /// Fetch these schemas (`find_tools(query="select:NAMES")`) so run_tool runs them.
    pub async fn select(&self, session: &str, names: &str) {
        let out = self
            .round(
                session,
                "select",
                vec![call(
                    "select",
                    "find_tools",
                    json!({"query": format!("select:{names}")}),
                )],
            )
            .await;
        assert_eq!(
            out.results[0].status,
            Status::Ok,
            "{}",
            out.results[0].content
        );
    }
}

/// A direct call.
pub fn call(id: &str, name: &str, args: Value) -> RawCall {
    RawCall::new(id.to_string(), name.to_string(), args.to_string())
}

/// `run_tool(name, args)`.
pub fn run_tool(id: &str, name: &str, args: Value) -> RawCall {
    call(id, "run_tool", json!({"name": name, "args": args}))
}

/// `(tool_call_id, status, content)` of every result, in call order.
pub fn results(out: &RoundOutcome) -> Vec<(String, Status, String)> {
    out.results
        .iter()
        .map(|r| (r.tool_call_id.clone(), r.status, r.content.clone()))
        .collect()
}

pub fn result(id: &str, status: Status, content: &str) -> (String, Status, String) {
    (id.to_string(), status, content.to_string())
}

/// The kinds of the round's events of one type (`"TodoUpdate"`, ...).
pub fn events_of<'a, E: Borrow<Event>>(events: &'a [E], kind: &str) -> Vec<&'a EventKind> {
    events
        .iter()
        .map(Borrow::borrow)
        .filter(|e| serde_json::to_value(e).unwrap()["type"] == kind)
        .map(|e| &e.kind)
        .collect()
}

/// Whether the machine's sandbox is there; without it the caller skips, saying why, unless
/// `TOOLDISPATCH_REQUIRE_SANDBOX=1` (CI) makes that a failure.
pub fn sandbox_present() -> bool {
    let missing = dispatch_sandbox::Sandbox::shared().missing();
    if let Some(why) = &missing {
        dispatch_testkit::skip(dispatch_testkit::Need::Sandbox, why);
    }
    missing.is_none()
}
