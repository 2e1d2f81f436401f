//! Every tool the engine can dispatch, its schema compiled once, and the search behind
//! `find_tools` (select, keyword ranking, list).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;

use serde_json::Value;

use crate::spec::ToolSpec;
use crate::tool::{Exclude, Tool};

/// Why a tool was refused at registration.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RegistryError {
    #[error("tool {0:?} is already registered; tool names must be unique")]
    Duplicate(String),
    #[error(
        "tool name {0:?} is not allowed; use 1-64 characters from a-z, A-Z, 0-9, _ and - (what every provider accepts)"
    )]
    BadName(String),
    #[error("tool {name:?} has a parameters schema that does not compile: {reason}")]
    BadSchema { name: String, reason: String },
    #[error("tool {name:?} has a {field} of {size} bytes; the limit is {limit} bytes")]
    TooLarge {
        name: String,
        field: &'static str,
        size: usize,
        limit: usize,
    },
}

/// Longest tool description accepted, in bytes (DESIGN §6: size limits on declarations).
/// The longest built-in description is under a tenth of it.
pub const MAX_DESCRIPTION_BYTES: usize = 16 * 1024;
/// Largest parameters schema accepted, as compact JSON text, in bytes.
pub const MAX_SCHEMA_BYTES: usize = 64 * 1024;

/// Why a name cannot be a tool's name, or `None` when it can: 1-64 characters from
/// a-z, A-Z, 0-9, `_` and `-`, the one pattern every provider accepts.
pub fn name_problem(name: &str) -> Option<String> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    (!ok).then(|| {
        "use 1-64 characters from a-z, A-Z, 0-9, _ and - (what every provider accepts)".into()
    })
}

/// Why a declaration's description or schema is too large, as (field, size, limit).
pub fn size_problem(description: &str, parameters: &Value) -> Option<(&'static str, usize, usize)> {
    if description.len() > MAX_DESCRIPTION_BYTES {
        return Some(("description", description.len(), MAX_DESCRIPTION_BYTES));
    }
    let schema_bytes = serde_json::to_string(parameters).map_or(usize::MAX, |t| t.len());
    (schema_bytes > MAX_SCHEMA_BYTES).then_some(("parameters", schema_bytes, MAX_SCHEMA_BYTES))
}

/// Why a parameters schema was refused: where in the schema (a JSON pointer, `""` for the
/// top level) and what is wrong there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SchemaProblem {
    pub pointer: String,
    pub reason: String,
}

impl std::fmt::Display for SchemaProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.pointer.is_empty() {
            f.write_str(&self.reason)
        } else {
            write!(f, "at {}: {}", self.pointer, self.reason)
        }
    }
}

/// The `$schema` dialects a tool schema may name. Without `$schema` a schema is read as
/// 2020-12, the latest dialect.
const DIALECTS: &str = "draft-07 (http://json-schema.org/draft-07/schema#), 2019-09 (https://json-schema.org/draft/2019-09/schema) or 2020-12 (https://json-schema.org/draft/2020-12/schema)";

/// A tool's parameters schema, compiled once: what pass 1 checks a call's arguments
/// against, for every kind of tool (built-in, script, ext, MCP and client tools alike).
pub struct CompiledSchema {
    validator: jsonschema::Validator,
    required: Vec<String>,
}

impl std::fmt::Debug for CompiledSchema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompiledSchema")
            .field("required", &self.required)
            .finish_non_exhaustive()
    }
}

impl CompiledSchema {
    /// Compile a tool's parameters schema: an object at the top level; the dialect its
    /// `$schema` names (draft-04 to 2020-12; 2020-12 when absent), with that dialect's full
    /// semantics; every `$ref` resolved inside the document (nothing is fetched); known
    /// `format`s asserted; ECMA-262 regexes with Unicode classes.
    pub fn compile(parameters: &Value) -> Result<Self, SchemaProblem> {
        let top = |reason: String| SchemaProblem {
            pointer: String::new(),
            reason,
        };
        if parameters.get("type").and_then(Value::as_str) != Some("object") {
            return Err(top(
                "the top level must be {\"type\": \"object\", ...}: tools take an arguments object"
                    .into(),
            ));
        }
        if let Some(found) = parameters.get("$schema")
            && !found.is_string()
        {
            return Err(SchemaProblem {
                pointer: "/$schema".into(),
                reason: format!("$schema must be a string naming {DIALECTS}"),
            });
        }
        // At the top or in an embedded resource: the library would read an unknown dialect
        // as its parent's, which is not what the schema says.
        if let Some((pointer, uri)) = unknown_dialect(parameters, "") {
            return Err(SchemaProblem {
                pointer,
                reason: format!(
                    "unknown dialect {uri:?}; name {DIALECTS}, or leave $schema out for 2020-12"
                ),
            });
        }
        let refused = NoRemote::default();
        let validator = jsonschema::options()
            .with_retriever(refused.clone())
            // One rule for every dialect: a known format is checked (2019-09 and 2020-12
            // would only annotate it), so a call that would fail in the tool fails in pass 1
            // with a pointer instead. Unknown formats (`uint64`, ...) stay annotations.
            .should_validate_formats(true)
            // Patterns that need backtracking (look-arounds, back-references) give up instead
            // of spinning on a hostile argument: the arguments come from the model.
            .with_pattern_options(
                jsonschema::PatternOptions::fancy_regex().backtrack_limit(1_000_000),
            )
            .build(parameters)
            .map_err(|e| {
                if let Some(uri) = refused.first() {
                    // A relative reference resolves against the library's own base URI.
                    let uri = uri.strip_prefix("json-schema:///").unwrap_or(&uri);
                    // Named as written, where it is written, when it can be found.
                    let (pointer, uri) = find_ref(parameters, "", &|target| {
                        target.split('#').next() == uri.split('#').next()
                    })
                    .unwrap_or_else(|| (String::new(), uri.to_string()));
                    return SchemaProblem {
                        pointer,
                        reason: format!(
                            "$ref {uri:?} points outside the schema; remote references are never fetched, so copy what it names under \"$defs\" (draft-07: \"definitions\") and refer to it as \"#/$defs/NAME\""
                        ),
                    };
                }
                let pointer = e.instance_path().to_string();
                // A local reference that names nothing: say which one.
                let dangling = |target: &str| {
                    target.strip_prefix('#').is_some_and(|inner| {
                        inner.starts_with('/')
                            && !inner.contains('%')
                            && parameters.pointer(inner).is_none()
                    })
                };
                if pointer.is_empty()
                    && let Some((at, target)) = find_ref(parameters, "", &dangling)
                {
                    return SchemaProblem {
                        pointer: at,
                        reason: format!("$ref {target:?} points at nothing in this schema"),
                    };
                }
                let mut reason = e.to_string();
                if pointer.ends_with("/type") {
                    reason.push_str(
                        "; a type is one of string, number, integer, boolean, object, array, null",
                    );
                }
                truncate_chars(&mut reason, MAX_VIOLATION_CHARS);
                SchemaProblem { pointer, reason }
            })?;
        let required = parameters
            .get("required")
            .and_then(Value::as_array)
            .map(|r| {
                r.iter()
                    .filter_map(|v| v.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        Ok(CompiledSchema {
            validator,
            required,
        })
    }

    /// Parse and validate a call's raw argument text for tool `name`. `Err` is the message
    /// after `tool=<N> failed: `.
    pub fn check_args(
        &self,
        name: &str,
        parsed: Option<Value>,
        raw: &str,
    ) -> Result<Value, String> {
        let required = self.required.join(", ");
        let trimmed = raw.trim();
        let args = if trimmed.is_empty() || trimmed == "null" {
            Value::Object(Default::default())
        } else {
            match parsed {
                Some(v @ Value::Object(_)) => v,
                Some(other) => {
                    return Err(format!(
                        "invalid JSON for {name}: expected an object, got {}. Re-send arguments as a JSON object with required fields: {required}",
                        kind_of(&other)
                    ));
                }
                None => {
                    let err = serde_json::from_str::<Value>(trimmed)
                        .err()
                        .map(|e| e.to_string())
                        .unwrap_or_else(|| "not a JSON object".into());
                    return Err(format!(
                        "invalid JSON for {name}: {err}. Re-send arguments as a JSON object with required fields: {required}"
                    ));
                }
            }
        };
        let missing: Vec<&str> = self
            .required
            .iter()
            .filter(|key| match args.get(key.as_str()) {
                None | Some(Value::Null) => true,
                Some(Value::String(s)) => s.trim().is_empty(),
                Some(_) => false,
            })
            .map(String::as_str)
            .collect();
        if !missing.is_empty() {
            return Err(format!(
                "missing required field(s) {} for {name}. All required fields: {required}",
                missing.join(", ")
            ));
        }
        if self.validator.is_valid(&args) {
            return Ok(args);
        }
        let mut text = String::from("invalid arguments: ");
        let mut count = 0;
        for error in self.validator.iter_errors(&args) {
            count += 1;
            if count > MAX_VIOLATIONS {
                continue;
            }
            if count > 1 {
                text.push_str("; ");
            }
            let pointer = error.instance_path().to_string();
            let pointer = if pointer.is_empty() {
                "/".to_string()
            } else {
                pointer
            };
            let mut reason = error.to_string();
            truncate_chars(&mut reason, MAX_VIOLATION_CHARS);
            let _ = write!(text, "{pointer}: {reason}");
        }
        if count > MAX_VIOLATIONS {
            let _ = write!(text, "; and {} more", count - MAX_VIOLATIONS);
        }
        Err(text)
    }
}

/// Where the first `$ref` under `node` whose target `pick` accepts is, and its target; to say
/// which reference broke when a compile fails.
fn find_ref(node: &Value, at: &str, pick: &dyn Fn(&str) -> bool) -> Option<(String, String)> {
    match node {
        Value::Object(map) => {
            if let Some(Value::String(target)) = map.get("$ref")
                && pick(target)
            {
                return Some((format!("{at}/$ref"), target.clone()));
            }
            map.iter().find_map(|(key, value)| {
                let key = key.replace('~', "~0").replace('/', "~1");
                find_ref(value, &format!("{at}/{key}"), pick)
            })
        }
        Value::Array(items) => items
            .iter()
            .enumerate()
            .find_map(|(i, value)| find_ref(value, &format!("{at}/{i}"), pick)),
        _ => None,
    }
}

/// Where the first `$schema` naming no known dialect is, and what it names. Values that are
/// data, not schemas (`const`, `enum`, `default`, `examples`), are not looked into.
fn unknown_dialect(node: &Value, at: &str) -> Option<(String, String)> {
    match node {
        Value::Object(map) => {
            if let Some(Value::String(uri)) = map.get("$schema")
                && jsonschema::Draft::from_schema_uri(uri) == jsonschema::Draft::Unknown
            {
                return Some((format!("{at}/$schema"), uri.clone()));
            }
            map.iter()
                .filter(|(key, _)| {
                    !["const", "enum", "default", "examples"].contains(&key.as_str())
                })
                .find_map(|(key, value)| {
                    let key = key.replace('~', "~0").replace('/', "~1");
                    unknown_dialect(value, &format!("{at}/{key}"))
                })
        }
        Value::Array(items) => items
            .iter()
            .enumerate()
            .find_map(|(i, value)| unknown_dialect(value, &format!("{at}/{i}"))),
        _ => None,
    }
}

/// The retriever of every schema compile: it fetches nothing and remembers what a `$ref`
/// asked for, so the refusal can name it.
#[derive(Clone, Default)]
struct NoRemote(Arc<std::sync::Mutex<Option<String>>>);

impl NoRemote {
    fn first(&self) -> Option<String> {
        self.0.lock().ok().and_then(|asked| asked.clone())
    }
}

impl jsonschema::Retrieve for NoRemote {
    fn retrieve(
        &self,
        uri: &jsonschema::Uri<String>,
    ) -> Result<Value, Box<dyn std::error::Error + Send + Sync>> {
        if let Ok(mut asked) = self.0.lock() {
            asked.get_or_insert_with(|| uri.to_string());
        }
        Err(format!("{uri} is not fetched: tool schemas must be self-contained").into())
    }
}

/// A registered tool with its compiled schema.
pub struct Registered {
    pub tool: Arc<dyn Tool>,
    schema: CompiledSchema,
}

impl Registered {
    pub fn spec(&self) -> &ToolSpec {
        self.tool.spec()
    }
    pub fn name(&self) -> &str {
        &self.tool.spec().name
    }

    /// Parse and validate a call's raw argument text. `Err` is the message after `tool=<N> failed: `.
    pub fn check_args(&self, parsed: Option<Value>, raw: &str) -> Result<Value, String> {
        self.schema.check_args(self.name(), parsed, raw)
    }
}

/// The registry: tools sorted by name. Cloning shares the compiled schemas, so a registry is
/// copied, changed and swapped in whole when tools come and go (an MCP server's list changed).
#[derive(Clone, Default)]
pub struct Registry {
    tools: BTreeMap<String, Arc<Registered>>,
}

/// Most schema violations listed in one message; more are counted.
const MAX_VIOLATIONS: usize = 8;
/// Longest single violation text kept (the validator quotes the offending value).
const MAX_VIOLATION_CHARS: usize = 240;
/// Keyword results kept per category (seed).
const PER_CATEGORY: usize = 5;

impl Registry {
    /// An empty registry. `crate::deferred::register_system_tools` adds run_tool and find_tools.
    pub fn empty() -> Self {
        Registry::default()
    }

    /// Register a tool, compiling its schema; a bad name, a duplicate, an oversized
    /// declaration or a bad schema is refused.
    pub fn register(&mut self, tool: Arc<dyn Tool>) -> Result<(), RegistryError> {
        let spec = tool.spec();
        let name = spec.name.clone();
        if name_problem(&name).is_some() {
            return Err(RegistryError::BadName(name));
        }
        if self.tools.contains_key(&name) {
            return Err(RegistryError::Duplicate(name));
        }
        if let Some((field, size, limit)) = size_problem(&spec.description, &spec.parameters) {
            return Err(RegistryError::TooLarge {
                name,
                field,
                size,
                limit,
            });
        }
        let schema =
            CompiledSchema::compile(&spec.parameters).map_err(|p| RegistryError::BadSchema {
                name: name.clone(),
                reason: p.to_string(),
            })?;
        self.tools
            .insert(name, Arc::new(Registered { tool, schema }));
        Ok(())
    }

    /// Keep only the tools `keep` accepts (an MCP server's tools are dropped this way before
    /// its new list is registered).
    pub fn retain(&mut self, mut keep: impl FnMut(&Registered) -> bool) {
        self.tools.retain(|_, t| keep(t));
    }

    pub fn get(&self, name: &str) -> Option<&Registered> {
        self.tools.get(name).map(|t| &**t)
    }

    pub fn contains(&self, name: &str) -> bool {
        self.tools.contains_key(name)
    }

    /// All tools, sorted by name.
    pub fn iter(&self) -> impl Iterator<Item = &Registered> {
        self.tools.values().map(|t| &**t)
    }

    pub fn len(&self) -> usize {
        self.tools.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }

    /// `select:a,b`: exactly those tools, case-insensitive, de-duplicated, in the given order.
    pub fn select<'a>(&'a self, names: &str, exclude: &Exclude) -> Vec<&'a Registered> {
        let mut out: Vec<&Registered> = Vec::new();
        for wanted in names.split(',').map(|n| n.trim().to_lowercase()) {
            if wanted.is_empty() {
                continue;
            }
            let found = self
                .iter()
                .find(|t| t.name().to_lowercase() == wanted && !exclude.contains(t.name()));
            if let Some(t) = found
                && !out.iter().any(|o| o.name() == t.name())
            {
                out.push(t);
            }
        }
        out
    }

    /// Keyword search with the seed's ranking: every term must hit; at most five per category.
    pub fn search<'a>(&'a self, query: &str, exclude: &Exclude) -> Vec<&'a Registered> {
        let query = query.trim().to_lowercase();
        let terms: Vec<&str> = query.split_whitespace().collect();
        if terms.is_empty() {
            return Vec::new();
        }
        let mut scored: Vec<(i64, &Registered)> = self
            .iter()
            .filter(|t| !exclude.contains(t.name()))
            .filter_map(|t| score(t.spec(), &query, &terms).map(|s| (s, t)))
            .collect();
        // Stable: equal scores keep registry (name) order.
        scored.sort_by_key(|s| std::cmp::Reverse(s.0));
        let mut per_category: BTreeMap<&str, usize> = BTreeMap::new();
        scored
            .into_iter()
            .filter(|(_, t)| {
                let n = per_category.entry(category(t.name())).or_default();
                *n += 1;
                *n <= PER_CATEGORY
            })
            .map(|(_, t)| t)
            .collect()
    }

    /// Names to suggest for an unknown tool, at most three: first the names a typo away
    /// (`calcualte` → `calculate`), closest first, then the top keyword matches.
    pub fn did_you_mean(&self, unknown: &str, exclude: &Exclude) -> Vec<String> {
        let wanted = unknown.to_lowercase();
        // A typo is at most one edit per four characters (and at least one): `fetch_pgae` is
        // fetch_page, `grep` is not `edit`.
        let allowed = (wanted.chars().count() / 4).clamp(1, 3);
        let mut near: Vec<(usize, &str)> = self
            .iter()
            .map(Registered::name)
            .filter(|name| !exclude.contains(name))
            .filter_map(|name| {
                let d = edit_distance(&wanted, &name.to_lowercase());
                (d <= allowed).then_some((d, name))
            })
            .collect();
        near.sort_by_key(|(d, _)| *d);
        let mut out: Vec<String> = near.into_iter().map(|(_, n)| n.to_string()).collect();
        let spaced = unknown.replace(['_', '-'], " ");
        let mut hits = self.search(&spaced, exclude);
        if hits.is_empty() {
            hits = self.search(unknown, exclude);
        }
        for hit in hits {
            if !out.iter().any(|n| n == hit.name()) {
                out.push(hit.name().to_string());
            }
        }
        out.truncate(3);
        out
    }
}

/// Edits (insert, delete, substitute, swap two neighbours) between `a` and `b`, by character;
/// names are short, so the table is small.
fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    // Rows i-2, i-1 and i of the table.
    let mut before: Vec<usize> = vec![0; b.len() + 1];
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    for i in 1..=a.len() {
        let mut current = vec![i; b.len() + 1];
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (previous[j] + 1)
                .min(current[j - 1] + 1)
                .min(previous[j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(before[j - 2] + 1);
            }
            current[j] = best;
        }
        before = std::mem::replace(&mut previous, current);
    }
    previous[b.len()]
}

/// `a string`, `an object`, …: a JSON value's kind, for messages that say what was sent.
pub fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

pub(crate) fn truncate_chars(text: &mut String, max: usize) {
    if let Some((cut, _)) = text.char_indices().nth(max) {
        text.truncate(cut);
        text.push('…');
    }
}

/// The seed's categories for the per-category cap.
fn category(name: &str) -> &'static str {
    if name.starts_with("mcp__") {
        "mcp"
    } else if name.starts_with("api_") {
        "api"
    } else if name.starts_with("script_") {
        "script"
    } else if name.starts_with("ext_") {
        "extension"
    } else {
        "sys"
    }
}

/// +10 term equals a `_` part of the name, +5 a part contains it, +3 the name contains it,
/// +4 the description has it as a word; a term that hits nowhere excludes the tool.
fn score(spec: &ToolSpec, query: &str, terms: &[&str]) -> Option<i64> {
    let name = spec.name.to_lowercase();
    if name == query {
        return Some(9999);
    }
    let parts: Vec<&str> = name.split('_').filter(|p| !p.is_empty()).collect();
    let description = spec.description.to_lowercase();
    let mut total = 0;
    for term in terms {
        total += if parts.iter().any(|p| p == term) {
            10
        } else if parts.iter().any(|p| p.contains(term)) {
            5
        } else if name.contains(term) {
            3
        } else if has_word(&description, term) {
            4
        } else {
            return None;
        };
    }
    if spec.description.starts_with("[system-default]") {
        total -= 1;
    }
    Some(total)
}

/// Word-boundary match for ASCII terms (like regex `\b`), plain substring otherwise.
fn has_word(text: &str, term: &str) -> bool {
    if !term.is_ascii() {
        return text.contains(term);
    }
    let is_word = |c: char| c.is_alphanumeric() || c == '_';
    let first_is_word = term.chars().next().is_some_and(is_word);
    let last_is_word = term.chars().last().is_some_and(is_word);
    text.match_indices(term).any(|(i, m)| {
        let before_ok = !first_is_word || !text[..i].chars().next_back().is_some_and(is_word);
        let after_ok = !last_is_word || !text[i + m.len()..].chars().next().is_some_and(is_word);
        before_ok && after_ok
    })
}

#[cfg(test)]
mod edit_distance_tests {
    use super::edit_distance;

    #[test]
    fn counts_insertions_deletions_substitutions_and_swaps() {
        for (a, b, d) in [
            ("", "", 0),
            ("calculate", "calculate", 0),
            ("calcualte", "calculate", 1),
            ("calculat", "calculate", 1),
            ("calculatee", "calculate", 1),
            ("kalculate", "calculate", 1),
            ("fetch_pgae", "fetch_page", 1),
            ("grep", "edit", 4),
            ("", "abc", 3),
            ("éa", "aé", 1),
        ] {
            assert_eq!(edit_distance(a, b), d, "{a} → {b}");
            assert_eq!(edit_distance(b, a), d, "{b} → {a}");
        }
    }
}
