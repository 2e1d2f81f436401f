//! Deferred schemas (spec §2): which tools go in the request's tools array, the turn-context
//! listing of the rest, and the two tools that make the mechanism work, `run_tool` and
//! `find_tools`. They belong to the engine because they act on the registry and the session's
//! marked set, not on the world.

use std::collections::BTreeSet;
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Value, json};

pub use crate::client::ClientTool;
use crate::client::empty_object_schema;
use crate::registry::{Registered, Registry, RegistryError};
use crate::spec::{Effect, ToolSpec};
use crate::tool::{Exclude, Tool, ToolContext, ToolError, ToolOutput};
use crate::wire::{Provider, ToolDecl};

pub const RUN_TOOL: &str = "run_tool";
pub const FIND_TOOLS: &str = "find_tools";

/// The tools every provider except claude-code gets in its tools array (seed, v1.3.5).
pub const CORE_TOOLS: [&str; 7] = [
    FIND_TOOLS,
    RUN_TOOL,
    "reasoning_guide",
    "write_todo",
    "chat_history",
    "ask_user",
    "write_result",
];

/// Names removed from the seed over time, with what to use instead (spec §10).
pub fn removed_tool_hint(name: &str) -> Option<&'static str> {
    match name {
        "find_note" => Some("find_note was removed in v1.0.23; search past work with chat_history"),
        "run_command_readonly" => Some(
            "run_command_readonly was removed in v1.0.25; use run_command (read-only commands need no confirmation)",
        ),
        "run_command_background" => {
            Some("run_command_background was renamed background_command in v1.3.2")
        }
        "run_websocket" => Some("run_websocket was dropped in v1.3.2 and has no replacement"),
        n if n.starts_with("api_") => Some(
            "user-defined api_* tools were removed in v1.3.2; find an API with public_api_list and call it with http_request",
        ),
        _ => None,
    }
}

/// A mode removed from a tool's interface, with what to use instead (spec §10).
pub fn removed_mode_hint(name: &str, args: Option<&Value>) -> Option<&'static str> {
    let mode = args?.get("mode")?.as_str()?.trim();
    match (name, mode) {
        ("error_history", "write") => Some(
            "error_history(mode=write) was removed in v1.3.11; record what fixed (or did not fix) a failure with write_error(tool_name, keywords, symptom, action, outcome) instead",
        ),
        _ => None,
    }
}

/// Which tools a session sees and which of them are marked, for one provider.
pub struct Catalog<'a> {
    pub registry: &'a Registry,
    pub provider: Provider,
    pub exclude: &'a Exclude,
    pub client_tools: &'a [ClientTool],
    pub marked: &'a BTreeSet<String>,
}

impl Catalog<'_> {
    fn is_client(&self, name: &str) -> bool {
        self.client_tools.iter().any(|c| c.name == name)
    }

    /// In the request's tools array, so callable directly.
    pub fn is_loaded(&self, name: &str) -> bool {
        if self.exclude.contains(name) {
            return false;
        }
        if self.is_client(name) {
            return true;
        }
        match self.provider {
            Provider::ClaudeCode => name != RUN_TOOL && self.registry.contains(name),
            _ => CORE_TOOLS.contains(&name) && self.registry.contains(name),
        }
    }

    /// The model has not been shown this tool's schema yet in this session.
    pub fn is_unmarked(&self, name: &str) -> bool {
        if !self.registry.contains(name) || self.is_client(name) || self.marked.contains(name) {
            return false;
        }
        match self.provider {
            Provider::ClaudeCode => name != FIND_TOOLS,
            _ => !self.is_loaded(name),
        }
    }

    /// The request's tools array in the provider's format. claude-code gets stubs (name and
    /// description, empty parameters) for tools it has not been shown yet.
    pub fn tools_array(&self) -> Vec<Value> {
        let stub = empty_object_schema();
        let mut decls: Vec<ToolDecl<'_>> = self
            .registry
            .iter()
            .filter(|t| self.is_loaded(t.name()) && !self.is_client(t.name()))
            .map(|t| {
                let spec = t.spec();
                let parameters =
                    if self.provider == Provider::ClaudeCode && self.is_unmarked(&spec.name) {
                        &stub
                    } else {
                        &spec.parameters
                    };
                ToolDecl {
                    name: &spec.name,
                    description: &spec.description,
                    parameters,
                }
            })
            .collect();
        decls.extend(
            self.client_tools
                .iter()
                .filter(|c| !self.exclude.contains(&c.name))
                .map(|c| ToolDecl {
                    name: &c.name,
                    description: &c.description,
                    parameters: &c.parameters,
                }),
        );
        self.provider.format().render_tools(&decls)
    }

    /// The turn-context text: the work directory and, when run_tool is loaded, the deferred names.
    pub fn turn_context(&self, workdir: &std::path::Path) -> String {
        let mut text = format!("Work directory: {}", workdir.display());
        if self.is_loaded(RUN_TOOL) {
            let names: Vec<&str> = self
                .registry
                .iter()
                .map(Registered::name)
                .filter(|n| *n != FIND_TOOLS && *n != RUN_TOOL && !self.exclude.contains(n))
                .collect();
            text.push_str("\nTools (call through run_tool): ");
            text.push_str(&names.join(", "));
        }
        text
    }
}

/// The find_tools output for `select:` of these names (used by schema-before-fetch too).
pub fn select_output(registry: &Registry, names: &str, exclude: &Exclude) -> (String, Vec<String>) {
    let hits = registry.select(names, exclude);
    let query = format!("select:{names}");
    render_injected(registry, &hits, &query)
}

fn render_injected(
    registry: &Registry,
    hits: &[&Registered],
    query: &str,
) -> (String, Vec<String>) {
    let injected: Vec<Value> = hits
        .iter()
        .map(|t| {
            let spec = t.spec();
            json!({"name": spec.name, "description": spec.description, "parameters": spec.parameters})
        })
        .collect();
    let marks = hits.iter().map(|t| t.name().to_string()).collect();
    let text =
        json!({"injected": injected, "query": query, "total_tools": registry.len()}).to_string();
    (text, marks)
}

/// Register run_tool and find_tools.
pub fn register_system_tools(registry: &mut Registry) -> Result<(), RegistryError> {
    registry.register(Arc::new(RunTool::new()))?;
    registry.register(Arc::new(FindTools::new()))
}

/// `run_tool(name, args)`: resolved in pass 1, never dispatched.
struct RunTool {
    spec: ToolSpec,
}

impl RunTool {
    fn new() -> Self {
        RunTool {
            spec: ToolSpec::new(
                RUN_TOOL,
                "Run a listed tool by name. Every tool other than find_tools and the ones in your tools array goes through run_tool. The turn context lists tool names only: before the first call to a name, fetch its schema with find_tools(query=\"select:NAME[,NAME...]\") — several names at once. Use keyword search in find_tools only when no listed name fits.",
                json!({
                    "type": "object",
                    "properties": {
                        "name": {"type": "string", "description": "Exact tool name from the list."},
                        "args": {"type": "object", "description": "Arguments matching that tool's schema.", "default": {}}
                    },
                    "required": ["name"]
                }),
            )
            .read_only()
            .effect(Effect::Pure)
            .system(),
        }
    }
}

#[async_trait]
impl Tool for RunTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }
    async fn call(&self, _cx: ToolContext, _args: Value) -> Result<ToolOutput, ToolError> {
        Err(ToolError::failed(
            "run_tool is resolved by the dispatcher and cannot be dispatched directly",
        ))
    }
}

/// `find_tools`: fetch schemas (`select:`), search by keyword, or list.
struct FindTools {
    spec: ToolSpec,
}

impl FindTools {
    fn new() -> Self {
        FindTools {
            spec: ToolSpec::new(
                FIND_TOOLS,
                "Fetch tool schemas before calling tools through run_tool. query=\"select:NAME[,NAME...]\" returns exactly those tools' schemas (ask for several at once). A keyword query (all words must match) searches names and descriptions. mode=list lists every tool by name. Prefer specific tools (mcp__*, script_*) over [system-default] ones for the same job.",
                json!({
                    "type": "object",
                    "properties": {
                        "mode": {"type": "string", "enum": ["search", "list"], "description": "search (default when query is given) or list."},
                        "query": {"type": "string", "description": "select:NAME[,NAME...] or keywords."},
                        "mcp": {"type": "boolean", "description": "list only: keep built-in, script_ and ext_ tools, drop MCP tools."},
                        "system": {"type": "boolean", "description": "list only: include system-use tools."}
                    }
                }),
            )
            .read_only()
            .concurrent()
            .effect(Effect::Pure)
            .system(),
        }
    }
}

#[async_trait]
impl Tool for FindTools {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, cx: ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        let query = args
            .get("query")
            .and_then(Value::as_str)
            .unwrap_or("")
            .trim();
        let mode = match args.get("mode").and_then(Value::as_str).map(str::trim) {
            Some(m) if !m.is_empty() => m.to_string(),
            _ if query.is_empty() => "list".to_string(),
            _ => "search".to_string(),
        };
        let registry = &cx.registry;
        match mode.as_str() {
            "search" => {
                if query.is_empty() {
                    return Err(ToolError::failed("query is required when mode=search"));
                }
                let (text, marks) = match query.strip_prefix("select:") {
                    Some(names) => select_output(registry, names, &cx.exclude),
                    None => {
                        let hits = registry.search(query, &cx.exclude);
                        render_injected(registry, &hits, query)
                    }
                };
                Ok(ToolOutput {
                    text,
                    marks,
                    ..ToolOutput::default()
                })
            }
            "list" => {
                let flag = |k: &str| args.get(k).and_then(Value::as_bool).unwrap_or(false);
                let (system, builtin_only) = (flag("system"), flag("mcp"));
                let tools: Vec<Value> = registry
                    .iter()
                    .map(Registered::spec)
                    .filter(|s| !cx.exclude.contains(&s.name))
                    .filter(|s| system || !s.system)
                    .filter(|s| !builtin_only || !s.name.starts_with("mcp__"))
                    .map(|s| {
                        let mut entry = json!({"name": s.name, "description": s.description});
                        if s.description.starts_with("[system-default]") {
                            entry["system_default"] = json!(true);
                        }
                        entry
                    })
                    .collect();
                Ok(ToolOutput::text(
                    json!({"tools": tools, "total_tools": registry.len()}).to_string(),
                ))
            }
            other => Err(ToolError::failed(format!(
                "unknown mode \"{other}\"; available: search, list"
            ))),
        }
    }
}
