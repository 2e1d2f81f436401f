//! Client tools: declared by the API caller and run by the caller (spec §1.1). They are checked
//! when declared by the rules every tool meets at registration (name, size, a schema that
//! compiles through [`CompiledSchema::compile`]), must not take a registered tool's name, and
//! are compiled once, so pass 1 checks a client call's arguments the way it checks any call's.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::{Value, json};

use crate::registry::{CompiledSchema, Registry, name_problem, size_problem};

/// A tool the API caller declares and runs itself.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ClientTool {
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default = "empty_object_schema")]
    pub parameters: Value,
}

pub(crate) fn empty_object_schema() -> Value {
    json!({"type": "object", "properties": {}})
}

/// Most client tools one session may declare: past it the tools array alone is larger than
/// what providers take in one request.
pub const MAX_CLIENT_TOOLS: usize = 256;

/// Name prefixes of tools the runtime registers while it runs (MCP servers' tools, script and
/// extension tools, which appear when a server starts or a definition is added): a client tool
/// that took one of these names could be shadowed by, or shadow, a tool that arrives later.
pub const RESERVED_PREFIXES: [&str; 3] = ["mcp__", "script_", "ext_"];

/// One thing wrong with a client-tool declaration.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct ClientToolProblem {
    /// The declaration's position in the list, from 0 (a bad or repeated name does not say
    /// which declaration is meant).
    pub index: usize,
    /// The tool's name as declared.
    pub tool: String,
    /// The field at fault: `name`, `description`, `parameters`, or a place inside the schema
    /// as `parameters` followed by a JSON pointer (`parameters/properties/q/pattern`); `tools`
    /// for the list as a whole.
    pub field: String,
    /// What is wrong and what to do about it.
    pub reason: String,
}

impl std::fmt::Display for ClientToolProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "client tool {:?} (#{}), field {}: {}",
            self.tool, self.index, self.field, self.reason
        )
    }
}

/// Every problem with `declared` as a session's client tools next to the tools in
/// `registry`, in declaration order; empty when all are fine. Each declaration is checked
/// whole (one problem per field at fault), so a caller can fix the list in one go.
///
/// A declaration is refused when its name does not match `^[a-zA-Z0-9_-]{1,64}$`, repeats an
/// earlier declaration's, is a registered tool's (built-in, MCP, script or ext), or starts
/// with one of [`RESERVED_PREFIXES`]; when its description or schema is over
/// [`crate::registry::MAX_DESCRIPTION_BYTES`] / [`crate::registry::MAX_SCHEMA_BYTES`]; or when
/// its schema does not compile the way a registered tool's must (an object at the top level,
/// a known `$schema` dialect, every `$ref` resolved inside the schema, valid keywords and
/// regexes). More than [`MAX_CLIENT_TOOLS`] declarations are refused as a list.
pub fn check_client_tools(declared: &[ClientTool], registry: &Registry) -> Vec<ClientToolProblem> {
    match compile(declared, registry) {
        Ok(_) => Vec::new(),
        Err(problems) => problems,
    }
}

/// A session's client tools, checked and compiled once; cloning shares them, so a daemon's
/// session or a replay hands the same set to every round.
#[derive(Clone, Default)]
pub struct ClientTools(Arc<Compiled>);

#[derive(Default)]
struct Compiled {
    tools: Vec<ClientTool>,
    schemas: Vec<CompiledSchema>,
    by_name: HashMap<String, usize>,
}

impl std::fmt::Debug for ClientTools {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.0.tools.iter().map(|t| &t.name))
            .finish()
    }
}

impl ClientTools {
    /// Check `declared` against `registry` (see [`check_client_tools`]) and compile each
    /// schema; every problem found when any declaration is refused.
    pub fn compile(
        declared: Vec<ClientTool>,
        registry: &Registry,
    ) -> Result<ClientTools, Vec<ClientToolProblem>> {
        let schemas = compile(&declared, registry)?;
        let by_name = declared
            .iter()
            .enumerate()
            .map(|(i, t)| (t.name.clone(), i))
            .collect();
        Ok(ClientTools(Arc::new(Compiled {
            tools: declared,
            schemas,
            by_name,
        })))
    }

    /// The declarations, in the order given (for the tools array).
    pub fn declarations(&self) -> &[ClientTool] {
        &self.0.tools
    }

    pub fn is_empty(&self) -> bool {
        self.0.tools.is_empty()
    }

    pub fn len(&self) -> usize {
        self.0.tools.len()
    }

    pub fn contains(&self, name: &str) -> bool {
        self.0.by_name.contains_key(name)
    }

    /// The compiled schema of client tool `name`.
    pub(crate) fn schema(&self, name: &str) -> Option<&CompiledSchema> {
        self.0
            .by_name
            .get(name)
            .and_then(|&i| self.0.schemas.get(i))
    }
}

/// Each declaration's compiled schema, or every problem.
fn compile(
    declared: &[ClientTool],
    registry: &Registry,
) -> Result<Vec<CompiledSchema>, Vec<ClientToolProblem>> {
    let mut problems = Vec::new();
    if declared.len() > MAX_CLIENT_TOOLS {
        problems.push(ClientToolProblem {
            index: MAX_CLIENT_TOOLS,
            tool: declared[MAX_CLIENT_TOOLS].name.clone(),
            field: "tools".into(),
            reason: format!(
                "{} client tools are declared; at most {MAX_CLIENT_TOOLS} are accepted",
                declared.len()
            ),
        });
    }
    let mut first_of: HashMap<&str, usize> = HashMap::new();
    let mut schemas = Vec::with_capacity(declared.len());
    for (index, tool) in declared.iter().enumerate() {
        let mut problem = |field: &str, reason: String| {
            problems.push(ClientToolProblem {
                index,
                tool: tool.name.clone(),
                field: field.to_string(),
                reason,
            });
        };
        let name = tool.name.as_str();
        if let Some(reason) = name_problem(name) {
            problem("name", format!("{name:?} is not a tool name; {reason}"));
        } else if let Some(first) = first_of.get(name) {
            problem(
                "name",
                format!(
                    "{name:?} is declared twice (first as #{first}); tool names must be unique"
                ),
            );
        } else if registry.contains(name) {
            problem(
                "name",
                format!(
                    "{name:?} is a tool tooldispatch provides; a client tool may not replace it, so give yours another name"
                ),
            );
        } else if let Some(prefix) = RESERVED_PREFIXES.iter().find(|p| name.starts_with(**p)) {
            problem(
                "name",
                format!(
                    "names starting with {prefix} are kept for the tools tooldispatch registers while it runs (MCP, script and extension tools); give yours another name"
                ),
            );
        }
        first_of.entry(name).or_insert(index);
        if let Some((field, size, limit)) = size_problem(&tool.description, &tool.parameters) {
            problem(
                field,
                format!("{size} bytes is over the limit of {limit} bytes; shorten it"),
            );
            continue;
        }
        match CompiledSchema::compile(&tool.parameters) {
            Ok(schema) => schemas.push(schema),
            Err(p) => problem(&format!("parameters{}", p.pointer), p.reason),
        }
    }
    if problems.is_empty() {
        Ok(schemas)
    } else {
        Err(problems)
    }
}
