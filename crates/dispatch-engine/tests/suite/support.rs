//! Test tools and fixtures: real engine, real store, tools whose behaviour a test chooses.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use dispatch_engine::subject::resolve_path;
use dispatch_engine::{
    Access, ApproveAll, ClientTools, ConfirmReply, ConfirmRequest, Confirmer, Effect, Engine,
    EngineConfig, Event, Gate, Headless, Provider, RawCall, Registry, RoundOutcome, RoundRequest,
    Subject, Tool, ToolContext, ToolError, ToolOutput, ToolSpec, register_system_tools,
};
use dispatch_store::SessionStore;
use serde_json::{Value, json};

/// What a test tool does when called.
#[derive(Clone)]
pub enum Behaviour {
    /// Returns `echo:<canonical args>`.
    Echo,
    /// Returns this text.
    Text(String),
    /// Sleeps, then echoes.
    Sleep(Duration),
    Fail(String),
    Credential(Option<String>),
    Fatal(String),
    Panic(String),
    /// Emits `ticks` progress lines `every` apart, then returns "done".
    Progress {
        ticks: usize,
        every: Duration,
    },
    /// Reads the `path` argument (resolved against the workdir) and reports it.
    ReadPath,
    /// Appends `x` to the `path` file and reports it as touched.
    WritePath,
    /// Mutates without reporting paths (like run_command).
    MutateUnknown,
    /// Returns this many 1x1 PNG images.
    Images(usize),
    /// Blocks the thread without yielding (ignores cancellation).
    BlockThread(Duration),
}

pub const PNG_DATA_URL: &str = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==";

/// How a test tool declares what a call touches.
pub type SubjectFn = Arc<dyn Fn(&Value, &Path, Access) -> Subject + Send + Sync>;

pub struct TestTool {
    spec: ToolSpec,
    behaviour: Behaviour,
    pub calls: Arc<AtomicUsize>,
    subject: SubjectFn,
}

impl TestTool {
    pub fn new(spec: ToolSpec, behaviour: Behaviour) -> Self {
        TestTool {
            spec,
            behaviour,
            calls: Arc::new(AtomicUsize::new(0)),
            subject: Arc::new(declared_subject),
        }
    }

    /// This tool declares its calls' subjects with `subject` (given the args, the work
    /// directory and the access its spec's gate implies).
    pub fn declaring(
        mut self,
        subject: impl Fn(&Value, &Path, Access) -> Subject + Send + Sync + 'static,
    ) -> Self {
        self.subject = Arc::new(subject);
        self
    }
}

/// What a test tool that knows its arguments declares: `path`, `file`, `target`, `save_to`,
/// `dir`, `cwd`, `paths` and `write_paths` are files; `url` and `link` are URLs; `argv` is a
/// command line; `env` and `pass_env` are variables.
pub fn declared_subject(args: &Value, workdir: &Path, access: Access) -> Subject {
    let strings = |key: &str| -> Vec<String> {
        match args.get(key) {
            Some(Value::String(s)) if !s.is_empty() => vec![s.clone()],
            Some(Value::Array(items)) => items
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect(),
            _ => Vec::new(),
        }
    };
    let mut subject = Subject::new(access);
    for key in [
        "path",
        "file",
        "target",
        "save_to",
        "dir",
        "cwd",
        "paths",
        "write_paths",
    ] {
        for path in strings(key) {
            subject = subject.path(resolve_path(workdir, &path));
        }
    }
    for key in ["url", "link"] {
        for url in strings(key) {
            subject = subject.url(url);
        }
    }
    subject.argv = strings("argv");
    if let Some(Value::Object(env)) = args.get("env") {
        subject = subject.env(env.keys().cloned());
    }
    subject.env(strings("pass_env"))
}

/// A permissive schema: an object with optional `path` and `x`.
pub fn loose_schema() -> Value {
    json!({"type": "object", "properties": {"path": {"type": "string"}, "x": {}}})
}

/// A spec for a concurrent, read-only, pure tool with a loose schema.
pub fn spec(name: &str) -> ToolSpec {
    ToolSpec::new(name, format!("test tool {name}"), loose_schema())
        .read_only()
        .concurrent()
        .effect(Effect::Pure)
}

#[async_trait]
impl Tool for TestTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    /// A test tool that asks the user takes ask_user's `questions` and `state`.
    fn questions(&self, args: &Value) -> Vec<dispatch_engine::Question> {
        args.get("questions")
            .and_then(|q| serde_json::from_value(q.clone()).ok())
            .unwrap_or_default()
    }

    fn parked_state(&self, args: &Value) -> Value {
        args.get("state").cloned().unwrap_or(Value::Null)
    }

    fn subject(&self, args: &Value, workdir: &Path) -> Subject {
        let access = match self.spec.gate {
            Gate::ReadOnly | Gate::Interactive => Access::Reads,
            Gate::Ask => Access::Changes,
            Gate::Destructive => Access::Destroys,
        };
        (self.subject)(args, workdir, access)
    }

    async fn call(&self, cx: ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let path = || {
            cx.workdir.join(
                args.get("path")
                    .and_then(Value::as_str)
                    .unwrap_or("missing"),
            )
        };
        match &self.behaviour {
            Behaviour::Echo => Ok(ToolOutput::text(format!("echo:{args}"))),
            Behaviour::Text(t) => Ok(ToolOutput::text(t.clone())),
            Behaviour::Sleep(d) => {
                tokio::time::sleep(*d).await;
                Ok(ToolOutput::text(format!("echo:{args}")))
            }
            Behaviour::Fail(m) => Err(ToolError::failed(m.clone())),
            Behaviour::Credential(k) => Err(ToolError::Credential {
                key: k.clone(),
                message: "the API rejected the key".into(),
            }),
            Behaviour::Fatal(m) => Err(ToolError::Fatal(m.clone())),
            Behaviour::Panic(m) => panic!("{}", m),
            Behaviour::Progress { ticks, every } => {
                for i in 0..*ticks {
                    tokio::time::sleep(*every).await;
                    cx.progress.emit(format!("tick {i}\n"));
                }
                Ok(ToolOutput::text("done"))
            }
            Behaviour::ReadPath => {
                let p = path();
                let text =
                    std::fs::read_to_string(&p).map_err(|e| ToolError::failed(e.to_string()))?;
                Ok(ToolOutput::text(text).with_paths(vec![p]))
            }
            Behaviour::WritePath => {
                let p = path();
                let mut text = std::fs::read_to_string(&p).unwrap_or_default();
                text.push('x');
                std::fs::write(&p, text).map_err(|e| ToolError::failed(e.to_string()))?;
                Ok(ToolOutput::text("wrote").with_paths(vec![p]))
            }
            Behaviour::MutateUnknown => Ok(ToolOutput::text("mutated")),
            Behaviour::Images(n) => {
                Ok(ToolOutput::text("").with_images(vec![PNG_DATA_URL.to_string(); *n]))
            }
            Behaviour::BlockThread(d) => {
                std::thread::sleep(*d);
                Ok(ToolOutput::text("blocked"))
            }
        }
    }
}

/// A confirmer that answers every request the same way and records what it was asked.
pub struct Scripted {
    pub reply: ConfirmReply,
    pub asked: std::sync::Mutex<Vec<ConfirmRequest>>,
    /// Never answers (for the timeout).
    pub hang: bool,
    pub interactive: bool,
}

impl Scripted {
    pub fn approve() -> Arc<Self> {
        Arc::new(Scripted::with(ConfirmReply {
            approve: true,
            ..ConfirmReply::default()
        }))
    }
    pub fn decline(reason: Option<&str>) -> Arc<Self> {
        Arc::new(Scripted::with(ConfirmReply {
            approve: false,
            reason: reason.map(str::to_string),
            ..ConfirmReply::default()
        }))
    }
    pub fn with(reply: ConfirmReply) -> Self {
        Scripted {
            reply,
            asked: Default::default(),
            hang: false,
            interactive: false,
        }
    }
    pub fn asked(&self) -> Vec<String> {
        self.asked
            .lock()
            .unwrap()
            .iter()
            .map(|r| r.tool_name.clone())
            .collect()
    }
}

#[async_trait]
impl Confirmer for Scripted {
    async fn confirm(&self, request: &ConfirmRequest) -> ConfirmReply {
        self.asked.lock().unwrap().push(request.clone());
        if self.hang {
            std::future::pending::<()>().await;
        }
        self.reply.clone()
    }
    fn interactive(&self) -> bool {
        self.interactive
    }
}

/// An engine over a temp work directory and a memory store.
pub struct Fixture {
    pub engine: Engine,
    pub store: Arc<dyn SessionStore>,
    /// The engine's error memory (related_errors).
    pub errors: Arc<dyn dispatch_store::ErrorMemory>,
    pub dir: tempfile::TempDir,
}

/// A change to the engine configuration a test wants.
type ConfigTweak = Box<dyn FnOnce(&mut EngineConfig)>;

pub struct FixtureBuilder {
    tools: Vec<Arc<dyn Tool>>,
    confirmer: Arc<dyn Confirmer>,
    rules: Option<String>,
    max_concurrent: usize,
    store: Option<Arc<dyn SessionStore>>,
    result_cache: Option<Arc<dyn dispatch_store::ResultCache>>,
    dir: Option<tempfile::TempDir>,
    tweak: Option<ConfigTweak>,
}

pub fn fixture() -> FixtureBuilder {
    FixtureBuilder {
        tools: Vec::new(),
        confirmer: Arc::new(Headless),
        rules: None,
        max_concurrent: 3,
        store: None,
        result_cache: None,
        dir: None,
        tweak: None,
    }
}

impl FixtureBuilder {
    pub fn tool(mut self, tool: impl Tool) -> Self {
        self.tools.push(Arc::new(tool));
        self
    }
    pub fn tool_arc(mut self, tool: Arc<dyn Tool>) -> Self {
        self.tools.push(tool);
        self
    }
    pub fn confirmer(mut self, confirmer: Arc<dyn Confirmer>) -> Self {
        self.confirmer = confirmer;
        self
    }
    pub fn approve_all(self) -> Self {
        self.confirmer(Arc::new(ApproveAll))
    }
    pub fn rules(mut self, text: &str) -> Self {
        self.rules = Some(text.to_string());
        self
    }
    pub fn max_concurrent(mut self, n: usize) -> Self {
        self.max_concurrent = n;
        self
    }
    pub fn store(mut self, store: Arc<dyn SessionStore>) -> Self {
        self.store = Some(store);
        self
    }
    /// The cache pass 3 writes to (a tool that reads it is given the same one).
    pub fn result_cache(mut self, cache: Arc<dyn dispatch_store::ResultCache>) -> Self {
        self.result_cache = Some(cache);
        self
    }
    pub fn dir(mut self, dir: tempfile::TempDir) -> Self {
        self.dir = Some(dir);
        self
    }
    pub fn config(mut self, tweak: impl FnOnce(&mut EngineConfig) + 'static) -> Self {
        self.tweak = Some(Box::new(tweak));
        self
    }
    pub fn build(self) -> Fixture {
        let dir = self.dir.unwrap_or_else(|| tempfile::tempdir().unwrap());
        if let Some(rules) = &self.rules {
            std::fs::create_dir_all(dir.path().join(".tooldispatch")).unwrap();
            std::fs::write(dir.path().join(".tooldispatch/rules"), rules).unwrap();
        }
        let mut registry = Registry::empty();
        register_system_tools(&mut registry).unwrap();
        for tool in self.tools {
            registry.register(tool).unwrap();
        }
        // Error memory always comes from a memory store (the session store may be another).
        let full = dispatch_store::open("memory:").unwrap();
        let errors: Arc<dyn dispatch_store::ErrorMemory> = full.clone();
        let full_cache = self.result_cache.unwrap_or_else(|| full.clone());
        let store: Arc<dyn SessionStore> = self.store.unwrap_or(full);
        let mut config = EngineConfig::new(dir.path());
        config.max_concurrent = self.max_concurrent;
        config.data_dir = Some(dir.path().join(".data"));
        // The test wrote these rules; an untrusted directory's rules are tested on their own.
        config.trust_workdir = true;
        if let Some(tweak) = self.tweak {
            tweak(&mut config);
        }
        let engine = Engine::new(registry, store.clone(), self.confirmer, config)
            .unwrap()
            .with_error_memory(errors.clone())
            .with_result_cache(full_cache);
        Fixture {
            engine,
            store,
            errors,
            dir,
        }
    }
}

/// A call: (id, name, arguments JSON text).
pub fn call(id: &str, name: &str, args: &str) -> RawCall {
    RawCall::new(id, name, args)
}

/// `run_tool(name, args)` as a call.
pub fn wrapped(id: &str, name: &str, args: Value) -> RawCall {
    call(
        id,
        "run_tool",
        &json!({"name": name, "args": args}).to_string(),
    )
}

impl Fixture {
    pub fn path(&self) -> &Path {
        self.dir.path()
    }
    pub fn file(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// One round for the claude-code provider (every tool directly callable, so tests can call
    /// tools by name); tools start unmarked there, so use `mark` first or `round_marked`.
    pub async fn round(
        &self,
        session: &str,
        run: &str,
        provider: Provider,
        calls: Vec<RawCall>,
    ) -> RoundOutcome {
        self.engine
            .round(RoundRequest::new(session, run, provider, calls))
            .await
            .unwrap()
    }

    /// Client tools checked and compiled against this fixture's tools; panics on a bad one.
    pub fn client_tools(&self, declared: Vec<dispatch_engine::ClientTool>) -> ClientTools {
        ClientTools::compile(declared, &self.engine.registry()).unwrap()
    }

    pub async fn request(&self, req: RoundRequest) -> RoundOutcome {
        self.engine.round(req).await.unwrap()
    }

    /// Mark every registered tool in `session` (as if find_tools had fetched them all).
    pub async fn mark_all(&self, session: &str) {
        let names: Vec<String> = self
            .engine
            .registry()
            .iter()
            .map(|t| t.name().to_string())
            .collect();
        let query = format!("select:{}", names.join(","));
        let out = self
            .round(
                session,
                "mark",
                Provider::OpenAi,
                vec![call(
                    "mark",
                    "find_tools",
                    &json!({"query": query}).to_string(),
                )],
            )
            .await;
        assert_eq!(
            out.results[0].status,
            dispatch_engine::Status::Ok,
            "{}",
            out.results[0].content
        );
    }

    /// A round through run_tool for the OpenAI provider, after marking everything.
    pub async fn run(&self, session: &str, run: &str, calls: Vec<RawCall>) -> RoundOutcome {
        self.round(session, run, Provider::OpenAi, calls).await
    }
}

/// The event type names in order, for one tool id (or all when `id` is None). Every committed
/// round ends with `RoundCommitted`; `the_last_event_of_a_committed_round_names_it` checks
/// that, so these helpers leave it out.
pub fn event_types(events: &[std::sync::Arc<Event>], id: Option<&str>) -> Vec<String> {
    events
        .iter()
        .map(|e| serde_json::to_value(e).unwrap())
        .filter(|v| v["type"] != "RoundCommitted")
        .filter(|v| id.is_none_or(|id| v["tool_id"] == id))
        .map(|v| v["type"].as_str().unwrap().to_string())
        .collect()
}

/// Events as JSON values.
pub fn events_json(events: &[std::sync::Arc<Event>]) -> Vec<Value> {
    events
        .iter()
        .map(|e| serde_json::to_value(e).unwrap())
        .collect()
}

// ---- Helpers for the scheduler, gate and commit tests ----

/// A serial, read-only, pure tool spec with the loose schema.
pub fn serial_spec(name: &str) -> ToolSpec {
    ToolSpec::new(name, format!("test tool {name}"), loose_schema())
        .read_only()
        .effect(Effect::Pure)
}

/// `(type, tool_id)` of every event in emission order but the closing `RoundCommitted`; `""`
/// for events without a tool id.
#[allow(clippy::unwrap_used)]
pub fn event_seq(events: &[std::sync::Arc<Event>]) -> Vec<(String, String)> {
    events_json(events)
        .iter()
        .filter(|v| v["type"] != "RoundCommitted")
        .map(|v| {
            (
                v["type"].as_str().unwrap().to_string(),
                v["tool_id"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

/// The most calls in flight at once, counted from ToolCallStart / ToolCallEnd in emission order.
pub fn max_in_flight(events: &[std::sync::Arc<Event>]) -> usize {
    let (mut now, mut max) = (0usize, 0usize);
    for (kind, _) in event_seq(events) {
        match kind.as_str() {
            "ToolCallStart" => {
                now += 1;
                max = max.max(now);
            }
            "ToolCallEnd" => now -= 1,
            _ => {}
        }
    }
    max
}

/// `at_ms` of the first event of this type for this tool id.
#[allow(clippy::unwrap_used)]
pub fn event_at(events: &[std::sync::Arc<Event>], kind: &str, id: &str) -> f64 {
    events_json(events)
        .iter()
        .find(|v| v["type"] == kind && v["tool_id"] == id)
        .unwrap_or_else(|| panic!("no {kind} event for {id}"))["at_ms"]
        .as_f64()
        .unwrap()
}

/// The `next:` line that ends an executed failure that is not about a credential.
pub fn write_error_hint(tool: &str) -> String {
    format!(
        "next: once a different fix works, call write_error(tool_name=\"{tool}\", keywords=[...], symptom=..., action=..., outcome=\"resolved\") so the next run finds it"
    )
}

/// `(tool_call_id, status, content)` of every result, in order.
pub fn result_rows(out: &RoundOutcome) -> Vec<(String, dispatch_engine::Status, String)> {
    out.results
        .iter()
        .map(|r| (r.tool_call_id.clone(), r.status, r.content.clone()))
        .collect()
}

/// A test tool and its call counter.
pub fn counted(spec: ToolSpec, behaviour: Behaviour) -> (TestTool, Arc<AtomicUsize>) {
    let tool = TestTool::new(spec, behaviour);
    let calls = tool.calls.clone();
    (tool, calls)
}

/// How many times a counted tool ran.
pub fn count(calls: &Arc<AtomicUsize>) -> usize {
    calls.load(Ordering::SeqCst)
}

/// (status, content) of every result, in call order.
pub fn results(out: &RoundOutcome) -> Vec<(dispatch_engine::Status, String)> {
    out.results
        .iter()
        .map(|r| (r.status, r.content.clone()))
        .collect()
}
