//! `test_tool`: run a script tool once with a given input and show everything that happened —
//! exit, stdout, the tail of stderr, the definition's problems and whether the input fits its
//! parameters — so the model can write a tool, try it and fix it before a person installs it.
//!
//! A draft is code the model just wrote, so it runs in the read-only sandbox (no writes but a
//! private /tmp, no network, credentials hidden) and needs no approval there; `allow_writes`
//! runs it in the workspace sandbox instead and asks. Without an OS sandbox every run asks.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use dispatch_engine::{
    Access, Effect, Registry, Subject, ToolContext, ToolError, ToolOutput, ToolSpec,
};
use dispatch_sandbox::{Availability, Level};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::definition::{self, Definition, Problem, Scope};
use super::script::{self, ScriptTool};
use super::source::{ExtensionTools, registration_problem};
use crate::BuiltinTool;
use crate::files::confine::Confinement;
use crate::shell::process::SandboxConfig;

/// How long one test run may take (seed).
const TEST_TIMEOUT: Duration = Duration::from_secs(60);

/// Run a script tool once.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TestToolArgs {
    /// An installed script tool to run: its name, with or without "script_". Give this or path.
    #[serde(default)]
    name: Option<String>,
    /// A draft tool's folder in the work directory (its tool.json and script), to try before a
    /// person installs it with `tooldispatch tools install`. Give this or name.
    #[serde(default)]
    path: Option<String>,
    /// The arguments to send: a JSON object, or a JSON text of one (default {}).
    #[serde(default)]
    input: Option<Value>,
    /// Run in the workspace sandbox (writes in the work directory; network if the tool declares
    /// it) instead of the read-only one. Asks the user first.
    #[serde(default)]
    allow_writes: bool,
}

pub struct TestTool {
    sandbox: SandboxConfig,
    installed: Option<Arc<ExtensionTools>>,
}

impl TestTool {
    /// A test_tool that runs drafts, and the installed tools of `installed` when given.
    pub fn new(sandbox: SandboxConfig, installed: Option<Arc<ExtensionTools>>) -> TestTool {
        TestTool { sandbox, installed }
    }
}

/// The sandbox level a call runs at.
fn level(allow_writes: bool) -> Level {
    if allow_writes {
        Level::Workspace
    } else {
        Level::ReadOnly
    }
}

/// `allow_writes` as sent (raw arguments, before validation).
fn writes(args: &Value) -> bool {
    args.get("allow_writes").and_then(Value::as_bool) == Some(true)
}

#[async_trait]
impl BuiltinTool for TestTool {
    const NAME: &'static str = "test_tool";
    const DESCRIPTION: &'static str = "Try a script tool: run an installed one (name) or a draft folder in the work directory (path: tool.json with name, description, parameters, and script.py / script.sh / run) once with input as its JSON arguments on stdin. Returns the exit, stdout, the tail of stderr, the definition's problems and whether input fits its parameters. Runs in the read-only sandbox (no writes, no network) for 60 s; allow_writes=true asks the user and runs it in the workspace sandbox. A person installs a finished draft with `tooldispatch tools install DIR`.";
    type Args = TestToolArgs;

    fn declare(&self, spec: ToolSpec) -> ToolSpec {
        spec.concurrent()
            .read_only()
            .timeout(TEST_TIMEOUT + Duration::from_secs(10))
    }

    fn effect(&self, args: &Value) -> Option<Effect> {
        Some(match level(writes(args)) {
            Level::ReadOnly => Effect::Observes,
            Level::Workspace => Effect::Mutates,
        })
    }

    fn subject(&self, args: &Value, workdir: &Path) -> Option<Subject> {
        // The read-only sandbox is what makes a run safe without asking; turned off, or missing
        // on this machine, every run asks.
        let unconfined = match self.sandbox.sandbox().availability() {
            Availability::Available { .. } => None,
            Availability::Unavailable { reason } => Some(reason.clone()),
            Availability::Off => Some("it is turned off in the config ([sandbox] mode)".into()),
        };
        let mut subject = match (level(writes(args)), unconfined) {
            (Level::Workspace, _) => Subject::new(Access::Changes).why(
                "test_tool runs a script tool with allow_writes: it can change files in the work directory",
            ),
            (Level::ReadOnly, Some(reason)) => Subject::new(Access::Changes).why(format!(
                "test_tool runs a script, and there is no OS sandbox to keep it read-only: {reason}"
            )),
            (Level::ReadOnly, None) => Subject::new(Access::Reads),
        };
        if let Some(path) = crate::subjects::text(args, "path") {
            subject = subject.path(dispatch_engine::subject::resolve_path(workdir, path));
        }
        // A project's tool asks the first time it runs in a session, through test_tool too.
        if let Some(name) = crate::subjects::text(args, "name")
            && let Some(def) = self.installed.as_ref().and_then(|t| t.script(name.trim()))
            && def.scope == Scope::Project
        {
            subject = subject.ask_once(super::script::ask_once_key(&def));
        }
        Some(subject)
    }

    async fn run(&self, cx: ToolContext, args: TestToolArgs) -> Result<ToolOutput, ToolError> {
        let level = level(args.allow_writes);
        let (def, problems, source) = match (&args.name, &args.path) {
            (Some(_), Some(_)) | (None, None) => {
                return Err(ToolError::failed(
                    "give either name (an installed script tool) or path (a draft folder in the work directory), not both or neither",
                ));
            }
            (Some(name), None) => {
                let found = self.installed.as_ref().and_then(|t| t.script(name.trim()));
                let Some(def) = found else {
                    return Err(ToolError::failed(format!(
                        "no installed script tool is named {name:?}; list them with find_tools(query=\"script\"), or test a draft folder with path"
                    )));
                };
                let source = format!("the {} in {}", def.scope.describe(), def.dir.display());
                ((*def).clone(), Vec::new(), source)
            }
            (None, Some(path)) => {
                let dir = Confinement::for_call(&cx)?
                    .resolve(path)
                    .map_err(|e| ToolError::failed(format!("path: {e}")))?;
                if !dir.is_dir() {
                    return Err(ToolError::failed(format!(
                        "path {path:?} is not a folder; give the draft tool's folder (the one holding tool.json)"
                    )));
                }
                let (def, problems) = definition::load_draft(&dir);
                let Some(def) = def else {
                    return Ok(ToolOutput::text(report(&json!({
                        "tool": path,
                        "ran": false,
                        "why_not_run": "the definition does not say how to start the tool; fix the problems below",
                        "problems": shown(&problems, &dir),
                    }))));
                };
                (def, problems, format!("draft {path}"))
            }
        };
        let mut problems = shown(&problems, &def.dir);
        let (input_text, input) = match args.input {
            None | Some(Value::Null) => ("{}".to_string(), Some(json!({}))),
            Some(Value::String(text)) => {
                let parsed = serde_json::from_str::<Value>(&text).ok();
                (text, parsed)
            }
            Some(value) => (value.to_string(), Some(value)),
        };
        let def = Arc::new(def);
        let input_check = check_input(&def, input, &input_text, &self.sandbox, &mut problems);
        let run = script::run(
            &cx,
            &def,
            input_text.as_bytes(),
            &self.sandbox,
            level,
            TEST_TIMEOUT.min(def.timeout),
        )
        .await?;
        let ran_in = match run.level {
            Some(Level::ReadOnly) => "read-only sandbox".to_string(),
            Some(Level::Workspace) if def.network => "workspace sandbox with network".to_string(),
            Some(Level::Workspace) => "workspace sandbox".to_string(),
            None => "no OS sandbox".to_string(),
        };
        let mut out = json!({
            "tool": def.tool_name(),
            "source": source,
            "ran_in": ran_in,
            "ok": run.succeeded(),
            "exit": run.describe_end(),
            "exit_code": run.status.and_then(|s| s.code()),
            "stdout": run.result_text(),
            "stderr_tail": run.stderr_tail,
            "problems": problems,
        });
        match input_check {
            Ok(()) => out["input_valid"] = json!(true),
            Err(Some(reason)) => {
                out["input_valid"] = json!(false);
                out["input_errors"] = json!(reason);
            }
            Err(None) => out["input_valid"] = Value::Null,
        }
        if let Some(note) = run.sandbox_note {
            out["sandbox_note"] = json!(note);
        }
        Ok(ToolOutput::text(report(&out)))
    }
}

/// Whether `input` fits the definition's parameters: `Err(Some(why))` when it does not,
/// `Err(None)` when the parameters themselves are broken (that problem is added).
fn check_input(
    def: &Arc<Definition>,
    input: Option<Value>,
    raw: &str,
    sandbox: &SandboxConfig,
    problems: &mut Vec<String>,
) -> Result<(), Option<String>> {
    let mut scratch = Registry::empty();
    if let Err(e) = scratch.register(Arc::new(ScriptTool::new(def.clone(), sandbox.clone()))) {
        let problem = registration_problem(def, e);
        problems.push(format!("{}: {}", problem.field, problem.reason));
        return Err(None);
    }
    let name = def.tool_name();
    let registered = scratch.get(&name).ok_or(None)?;
    registered.check_args(input, raw).map(|_| ()).map_err(Some)
}

/// Problems as `tool.json: field: reason`, paths shown relative to the tool's folder.
fn shown(problems: &[Problem], dir: &Path) -> Vec<String> {
    problems
        .iter()
        .map(|p| {
            let file = p.file.strip_prefix(dir).unwrap_or(&p.file);
            format!("{}: {}: {}", file.display(), p.field, p.reason)
        })
        .collect()
}

fn report(value: &Value) -> String {
    serde_json::to_string_pretty(value).unwrap_or_default()
}
