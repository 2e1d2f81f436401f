//! A tool's `tool.json`, read and checked field by field. Every problem names its file, its
//! field and what to change; a definition with problems is refused whole, never half-loaded.
//!
//! One format serves script tools (a program in the tool's folder) and an extension's API
//! tools (an `endpoint` instead of a program).

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use dispatch_engine::registry::kind_of as kind;
use serde_json::{Map, Value, json};

use super::api::ApiDef;

/// The file a tool folder declares its tool in.
pub const DEFINITION_FILE: &str = "tool.json";
/// Largest `tool.json` read.
const MAX_DEFINITION_BYTES: u64 = 256 * 1024;
/// Longest description (what find_tools shows the model).
pub const MAX_DESCRIPTION_CHARS: usize = 2048;
/// Largest parameters schema, as compact JSON text: the engine's limit for every tool.
pub use dispatch_engine::registry::MAX_SCHEMA_BYTES;
/// The seed's default timeout of one call.
pub const DEFAULT_TIMEOUT_SECS: u64 = 60;
/// Longest timeout a definition may declare.
pub const MAX_TIMEOUT_SECS: u64 = 1800;
/// Most argv items in `command`.
const MAX_COMMAND_ITEMS: usize = 64;

/// One thing wrong with a definition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    pub file: PathBuf,
    /// The field (`name`, `parameters`, `endpoint.url`…), or `(file)` for the file as a whole.
    pub field: String,
    pub reason: String,
}

impl Problem {
    pub fn new(file: &Path, field: impl Into<String>, reason: impl Into<String>) -> Problem {
        Problem {
            file: file.to_path_buf(),
            field: field.into(),
            reason: reason.into(),
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {}: {}",
            self.file.display(),
            self.field,
            self.reason
        )
    }
}

/// Where a definition was found; it decides the tool's prefix and how it is gated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Scope {
    /// `$XDG_CONFIG_HOME/tooldispatch/tools/`: the user's own.
    User,
    /// `<work dir>/.tooldispatch/tools/` of a trusted work directory: asks once per session.
    Project,
    /// An installed extension (`ext_` tools).
    Extension(String),
    /// A folder in the work directory that test_tool runs before it is installed.
    Draft,
}

impl Scope {
    /// The prefix of the registered name.
    pub fn prefix(&self) -> &'static str {
        match self {
            Scope::Extension(_) => "ext_",
            _ => "script_",
        }
    }
    pub fn describe(&self) -> String {
        match self {
            Scope::User => "user tool".into(),
            Scope::Project => "project tool".into(),
            Scope::Extension(ext) => format!("tool of the extension {ext}"),
            Scope::Draft => "draft".into(),
        }
    }
}

/// What runs when the tool is called.
#[derive(Clone, Debug, PartialEq)]
pub enum Body {
    /// A program, started with the arguments on stdin. Items naming a file of the tool's
    /// folder are run from there.
    Script { command: Vec<String> },
    /// An HTTP endpoint (extensions only).
    Api(ApiDef),
}

/// A checked definition.
#[derive(Clone, Debug, PartialEq)]
pub struct Definition {
    /// As declared, without the prefix.
    pub name: String,
    pub description: String,
    pub parameters: Value,
    pub concurrent: bool,
    /// Runs without asking (a user's tool only) and in the read-only sandbox.
    pub read_only: bool,
    pub timeout: Duration,
    /// The program may use the network (then every call asks).
    pub network: bool,
    pub body: Body,
    /// The tool's folder, resolved.
    pub dir: PathBuf,
    pub scope: Scope,
}

impl Definition {
    /// The name the model calls: `script_<name>` or `ext_<name>`.
    pub fn tool_name(&self) -> String {
        format!("{}{}", self.scope.prefix(), self.name)
    }
    pub fn file(&self) -> PathBuf {
        self.dir.join(DEFINITION_FILE)
    }
}

/// The fields every tool may declare. `always_allow` and `timeout` are the seed's names for
/// `read_only` and `timeout_s`.
const COMMON_FIELDS: &[&str] = &[
    "name",
    "description",
    "parameters",
    "concurrent",
    "read_only",
    "always_allow",
    "timeout_s",
    "timeout",
];
/// And those of a script tool, and of an API tool.
const SCRIPT_FIELDS: &[&str] = &["network", "command"];
const API_FIELDS: &[&str] = &["endpoint", "auth"];

/// Read and check the definition in `dir`. `Err` holds every problem found.
pub fn load(dir: &Path, scope: Scope) -> Result<Definition, Vec<Problem>> {
    let file = dir.join(DEFINITION_FILE);
    let one = |field: &str, reason: String| vec![Problem::new(&file, field, reason)];
    let dir = dir
        .canonicalize()
        .map_err(|e| one("(file)", format!("the tool's folder cannot be read: {e}")))?;
    let file = dir.join(DEFINITION_FILE);
    let meta = std::fs::metadata(&file).map_err(|e| {
        one(
            "(file)",
            format!("cannot read it: {e}; every tool folder needs a tool.json"),
        )
    })?;
    if !meta.is_file() {
        return Err(one("(file)", "is not a regular file".into()));
    }
    if meta.len() > MAX_DEFINITION_BYTES {
        return Err(one(
            "(file)",
            format!(
                "is {} bytes, over the limit of {MAX_DEFINITION_BYTES}; keep large data in other files of the folder",
                meta.len()
            ),
        ));
    }
    let mut bytes = Vec::new();
    {
        use std::io::Read;
        std::fs::File::open(&file)
            .and_then(|f| f.take(MAX_DEFINITION_BYTES + 1).read_to_end(&mut bytes))
            .map_err(|e| one("(file)", format!("cannot read it: {e}")))?;
    }
    if bytes.len() as u64 > MAX_DEFINITION_BYTES {
        return Err(one(
            "(file)",
            format!("is over the limit of {MAX_DEFINITION_BYTES} bytes"),
        ));
    }
    let value: Value = serde_json::from_slice(&bytes)
        .map_err(|e| one("(file)", format!("is not valid JSON: {e}")))?;
    let Value::Object(fields) = value else {
        return Err(one(
            "(file)",
            "must be a JSON object: {\"name\", \"description\", \"parameters\", …}".into(),
        ));
    };
    match check(&dir, &file, &fields, scope) {
        (Some(def), problems) if problems.is_empty() => Ok(def),
        (_, problems) => Err(problems),
    }
}

/// Like [`load`], but a definition whose program can still be started comes back with its
/// problems (test_tool runs a draft that is not finished yet).
pub fn load_draft(dir: &Path) -> (Option<Definition>, Vec<Problem>) {
    let file = dir.join(DEFINITION_FILE);
    let fields = std::fs::File::open(&file)
        .and_then(|f| {
            use std::io::Read;
            let mut bytes = Vec::new();
            f.take(MAX_DEFINITION_BYTES + 1).read_to_end(&mut bytes)?;
            Ok(bytes)
        })
        .ok()
        .filter(|bytes| bytes.len() as u64 <= MAX_DEFINITION_BYTES)
        .and_then(|bytes| serde_json::from_slice::<Value>(&bytes).ok());
    match (load(dir, Scope::Draft), fields) {
        (Ok(def), _) => (Some(def), Vec::new()),
        (Err(problems), Some(Value::Object(fields))) => {
            let Ok(dir) = dir.canonicalize() else {
                return (None, problems);
            };
            let (def, _) = check(&dir, &dir.join(DEFINITION_FILE), &fields, Scope::Draft);
            (def, problems)
        }
        (Err(problems), _) => (None, problems),
    }
}

/// Every problem of a definition, and the definition as far as it can be used: present
/// whenever its program can be started.
fn check(
    dir: &Path,
    file: &Path,
    fields: &Map<String, Value>,
    scope: Scope,
) -> (Option<Definition>, Vec<Problem>) {
    let mut problems = Vec::new();
    let mut problem =
        |field: &str, reason: String| problems.push(Problem::new(file, field, reason));
    let is_api = fields.contains_key("endpoint");
    if is_api && !matches!(scope, Scope::Extension(_)) {
        problem(
            "endpoint",
            "API tools (an endpoint instead of a program) come only with extensions; install it with `tooldispatch ext install`, or call the API with http_request".into(),
        );
    }
    let known: Vec<&str> = COMMON_FIELDS
        .iter()
        .chain(if is_api { API_FIELDS } else { SCRIPT_FIELDS })
        .copied()
        .collect();
    for key in fields.keys() {
        if !known.contains(&key.as_str()) {
            problem(
                key,
                format!("unknown field; the known ones are {}", known.join(", ")),
            );
        }
    }

    let folder = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let max_name = 64 - scope.prefix().len();
    let name = match fields.get("name") {
        None => {
            problem(
                "name",
                format!("missing; name the tool {folder:?}, like its folder"),
            );
            String::new()
        }
        Some(Value::String(name)) => {
            if name.is_empty() || name.len() > max_name {
                problem(
                    "name",
                    format!(
                        "must be 1-{max_name} characters (the model sees {}<name>, and providers allow 64)",
                        scope.prefix()
                    ),
                );
            } else if !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
            {
                problem(
                    "name",
                    format!(
                        "{name:?} may use only a-z, A-Z, 0-9, _ and - (what every provider accepts)"
                    ),
                );
            } else if *name != folder {
                problem(
                    "name",
                    format!(
                        "{name:?} differs from its folder {folder:?}; rename one so a tool is found where its name says"
                    ),
                );
            }
            name.clone()
        }
        Some(other) => {
            problem("name", format!("must be a string, not {}", kind(other)));
            String::new()
        }
    };
    let description = match fields.get("description") {
        Some(Value::String(d)) if !d.trim().is_empty() => {
            let chars = d.chars().count();
            if chars > MAX_DESCRIPTION_CHARS {
                problem(
                    "description",
                    format!(
                        "is {chars} characters, over {MAX_DESCRIPTION_CHARS}; the model reads it in every find_tools result, so keep it to what and when"
                    ),
                );
            }
            d.trim().to_string()
        }
        Some(Value::String(_)) | None => {
            problem(
                "description",
                "missing or empty; say what the tool does and when to use it (the model chooses tools by it)".into(),
            );
            String::new()
        }
        Some(other) => {
            problem(
                "description",
                format!("must be a string, not {}", kind(other)),
            );
            String::new()
        }
    };
    let parameters = match fields.get("parameters") {
        None => json!({"type": "object", "properties": {}}),
        Some(schema @ Value::Object(map)) => {
            let size = schema.to_string().len();
            if size > MAX_SCHEMA_BYTES {
                problem(
                    "parameters",
                    format!("is {size} bytes of schema, over {MAX_SCHEMA_BYTES}"),
                );
            } else if map.get("type").and_then(Value::as_str) != Some("object") {
                problem(
                    "parameters",
                    "the top level must be {\"type\": \"object\", \"properties\": {…}}: tools take an arguments object".into(),
                );
            }
            schema.clone()
        }
        Some(other) => {
            problem(
                "parameters",
                format!("must be a JSON Schema object, not {}", kind(other)),
            );
            Value::Null
        }
    };
    let mut flag = |key: &str, alias: Option<&str>| -> bool {
        let (field, value) = match (
            fields.get(key),
            alias.and_then(|a| fields.get(a).map(|v| (a, v))),
        ) {
            (Some(_), Some((alias, _))) => {
                problem(
                    alias,
                    format!("is another name for {key}; give only one of them"),
                );
                return false;
            }
            (Some(v), None) => (key, v),
            (None, Some((alias, v))) => (alias, v),
            (None, None) => return false,
        };
        match value {
            Value::Bool(b) => *b,
            other => {
                problem(field, format!("must be true or false, not {}", kind(other)));
                false
            }
        }
    };
    let concurrent = flag("concurrent", None);
    let read_only = flag("read_only", Some("always_allow"));
    let network = !is_api && flag("network", None);
    let timeout = {
        let (field, value) = match (fields.get("timeout_s"), fields.get("timeout")) {
            (Some(_), Some(_)) => {
                problem(
                    "timeout",
                    "is another name for timeout_s; give only one of them".into(),
                );
                ("timeout_s", None)
            }
            (Some(v), None) => ("timeout_s", Some(v)),
            (None, Some(v)) => ("timeout", Some(v)),
            (None, None) => ("timeout_s", None),
        };
        match value {
            None => DEFAULT_TIMEOUT_SECS,
            Some(v) => match v.as_u64() {
                Some(secs) if (1..=MAX_TIMEOUT_SECS).contains(&secs) => secs,
                _ => {
                    problem(
                        field,
                        format!(
                            "must be a whole number of seconds from 1 to {MAX_TIMEOUT_SECS}, not {v}"
                        ),
                    );
                    DEFAULT_TIMEOUT_SECS
                }
            },
        }
    };
    let body = if is_api {
        match ApiDef::check(fields, &parameters) {
            Ok(api) => Some(Body::Api(api)),
            Err(found) => {
                for (field, reason) in found {
                    problem(&field, reason);
                }
                None
            }
        }
    } else {
        match command(dir, fields.get("command")) {
            Ok(command) => Some(Body::Script { command }),
            Err(reason) => {
                problem("command", reason);
                None
            }
        }
    };
    let parameters = if parameters.is_object() {
        parameters
    } else {
        json!({"type": "object", "properties": {}})
    };
    let def = body.map(|body| Definition {
        name,
        description,
        parameters,
        concurrent,
        read_only,
        timeout: Duration::from_secs(timeout),
        network,
        body,
        dir: dir.to_path_buf(),
        scope,
    });
    (def, problems)
}

/// The declared command, or the default for the folder: `python3 script.py`, `sh script.sh`
/// or an executable `run`, whichever exists (in that order).
fn command(dir: &Path, declared: Option<&Value>) -> Result<Vec<String>, String> {
    let argv: Vec<String> = match declared {
        None => {
            if dir.join("script.py").is_file() {
                vec!["python3".into(), "script.py".into()]
            } else if dir.join("script.sh").is_file() {
                vec!["sh".into(), "script.sh".into()]
            } else if dir.join("run").is_file() {
                vec!["./run".into()]
            } else {
                return Err("missing, and the folder has no script.py, script.sh or run to start by default; add one, or declare the program as an argv such as [\"node\", \"index.js\"]".into());
            }
        }
        Some(Value::Array(items)) => {
            if items.is_empty() || items.len() > MAX_COMMAND_ITEMS {
                return Err(format!(
                    "must hold 1-{MAX_COMMAND_ITEMS} items: the program and its arguments"
                ));
            }
            let mut argv = Vec::with_capacity(items.len());
            for item in items {
                match item {
                    Value::String(s) if !s.is_empty() && !s.contains('\0') => argv.push(s.clone()),
                    other => {
                        return Err(format!(
                            "every item must be a non-empty string, not {other}; an argv like [\"python3\", \"script.py\"]"
                        ));
                    }
                }
            }
            argv
        }
        Some(Value::String(line)) => {
            return Err(format!(
                "must be an argv array, not a command line: [{}]",
                line.split_whitespace()
                    .map(|w| format!("{w:?}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        Some(other) => {
            return Err(format!(
                "must be an argv array such as [\"python3\", \"script.py\"], not {}",
                kind(other)
            ));
        }
    };
    // An argument that names a file must name one of the folder's own: anything else would
    // be found in the work directory, where the code that runs could change after the tool
    // was approved (or come from the model).
    for item in &argv[1..] {
        if looks_like_a_file(item) && in_folder(dir, item).is_none() {
            return Err(format!(
                "{item:?} is not a file of the tool's folder (a link out of it does not count); put the file in the folder, or pass paths in the arguments instead"
            ));
        }
    }
    let program = &argv[0];
    match in_folder(dir, program) {
        Some(path) => {
            use std::os::unix::fs::PermissionsExt;
            let executable = std::fs::metadata(&path)
                .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
                .unwrap_or(false);
            if !executable {
                return Err(format!(
                    "{program:?} is not executable; run `chmod +x {program}` in the tool's folder, or start it through its interpreter (e.g. [\"sh\", {program:?}])"
                ));
            }
        }
        None if program.contains('/') => {
            return Err(format!(
                "{program:?} is not a file of the tool's folder; name a file in the folder (\"./run\") or a program on PATH (\"python3\")"
            ));
        }
        None => {
            if find_on_path(program).is_none() {
                return Err(format!(
                    "{program:?} is not on PATH; install it, or name a program that is"
                ));
            }
        }
    }
    Ok(argv)
}

/// An argv item that reads as a file name: a path, or a name with a script's extension.
fn looks_like_a_file(item: &str) -> bool {
    const SCRIPTS: &[&str] = &[
        ".py", ".sh", ".bash", ".js", ".mjs", ".cjs", ".ts", ".rb", ".pl", ".php", ".lua", ".r",
        ".jar",
    ];
    !item.starts_with('-')
        && (item.contains('/') || SCRIPTS.iter().any(|ext| item.to_lowercase().ends_with(ext)))
}

/// The file of `dir` an argv item names: a relative path inside the folder (no `..`) that
/// exists, resolved, and still inside the folder after links are followed.
pub fn in_folder(dir: &Path, item: &str) -> Option<PathBuf> {
    let path = Path::new(item);
    if path.is_absolute()
        || item.starts_with('-')
        || path
            .components()
            .any(|c| matches!(c, std::path::Component::ParentDir))
    {
        return None;
    }
    let resolved = dir.join(path).canonicalize().ok()?;
    (resolved.starts_with(dir) && resolved.is_file()).then_some(resolved)
}

/// `program` resolved on this process's PATH.
pub fn find_on_path(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    std::env::split_paths(&path)
        .filter(|dir| dir.is_absolute())
        .map(|dir| dir.join(program))
        .find(|candidate| {
            use std::os::unix::fs::PermissionsExt;
            std::fs::metadata(candidate)
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}
