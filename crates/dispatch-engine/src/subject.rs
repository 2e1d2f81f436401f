//! What one call touches, as its tool declares it (DESIGN §6: subjects, not argument names).
//!
//! The engine never reads a tool's arguments by name. A tool that knows its arguments says,
//! per call, which paths, URLs, command line and environment the call uses and whether it only
//! reads; the confirm gate, the rules and the sensitive-path checks read only that. A tool that
//! declares nothing keeps the safe default of its spec: a tool that can change things asks.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::spec::Gate;

/// How a call acts on the world, as far as asking the user is concerned.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Access {
    /// Only reads: runs without asking (sensitive paths, stored secrets and rules aside).
    Reads,
    /// Can change things: asks unless an allow rule matches.
    #[default]
    Changes,
    /// Removes or overwrites: asks unless the run or the turn is allow-all.
    Destroys,
}

/// What one call touches.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Subject {
    /// How the call acts.
    pub access: Access,
    /// The program and its arguments, for a call that runs one.
    pub argv: Vec<String>,
    /// Files and directories the call reads or writes: absolute, with `..` and symlinks
    /// resolved as far as they exist, so a link cannot hide where a call goes.
    pub paths: Vec<PathBuf>,
    /// URLs the call fetches or sends to.
    pub urls: Vec<String>,
    /// Environment variables the call sets or passes to a program (names only).
    pub env: Vec<String>,
    /// Why the call asks whatever the rules say (a shell line, network access), or `None`.
    pub always_ask: Option<String>,
    /// The tool's own words for why this call asks, shown instead of the generic reason.
    pub why: Option<String>,
    /// Ask the first time a call with this key comes in a session, even if it only reads;
    /// once the user approved one, the session's later calls with the key are judged by
    /// `access` alone. A project's script tool sets it, so a tool that came with a cloned
    /// repository never runs unseen. The engine remembers approvals in memory, per session.
    pub ask_once: Option<String>,
}

impl Subject {
    /// A call that touches nothing the engine can check, with this access.
    pub fn new(access: Access) -> Self {
        Subject {
            access,
            ..Subject::default()
        }
    }
    /// What a call touches when its tool says nothing more: the access its spec's gate stands
    /// for, so a tool that can change things asks.
    pub fn from_gate(gate: Gate) -> Self {
        Subject::new(match gate {
            Gate::ReadOnly | Gate::Interactive => Access::Reads,
            Gate::Ask => Access::Changes,
            Gate::Destructive => Access::Destroys,
        })
    }
    pub fn argv(mut self, argv: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.argv = argv.into_iter().map(Into::into).collect();
        self
    }
    pub fn path(mut self, path: impl Into<PathBuf>) -> Self {
        self.paths.push(path.into());
        self
    }
    pub fn paths(mut self, paths: impl IntoIterator<Item = PathBuf>) -> Self {
        self.paths.extend(paths);
        self
    }
    pub fn url(mut self, url: impl Into<String>) -> Self {
        self.urls.push(url.into());
        self
    }
    pub fn env(mut self, names: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.env.extend(names.into_iter().map(Into::into));
        self
    }
    pub fn always_ask(mut self, why: impl Into<String>) -> Self {
        self.always_ask = Some(why.into());
        self
    }
    pub fn why(mut self, why: impl Into<String>) -> Self {
        self.why = Some(why.into());
        self
    }
    pub fn ask_once(mut self, key: impl Into<String>) -> Self {
        self.ask_once = Some(key.into());
        self
    }
}

/// `path` made absolute against `base`, with `.` and `..` folded and every existing prefix's
/// symlinks followed; the part that does not exist yet is appended as written. This is how
/// tools report paths in a [`Subject`]: the gate judges the file a call reaches, not the
/// name the model wrote.
pub fn resolve_path(base: &Path, path: &str) -> PathBuf {
    let expanded;
    let path = match path.strip_prefix("~/") {
        Some(rest) => match std::env::var_os("HOME") {
            Some(home) => {
                expanded = Path::new(&home).join(rest);
                expanded.as_path()
            }
            None => Path::new(path),
        },
        None => Path::new(path),
    };
    let joined = base.join(path);
    // Resolve the longest prefix that exists the way the OS will (links first, then `..`),
    // and fold what does not exist yet lexically: a missing file's directory may still be a
    // link that points elsewhere.
    let parts: Vec<std::path::Component> = joined.components().collect();
    for split in (1..=parts.len()).rev() {
        let prefix: PathBuf = parts[..split].iter().collect();
        if let Ok(mut out) = prefix.canonicalize() {
            for part in &parts[split..] {
                match part {
                    std::path::Component::ParentDir => {
                        out.pop();
                    }
                    std::path::Component::CurDir => {}
                    other => out.push(other),
                }
            }
            return out;
        }
    }
    joined
}

/// Every `{{secret:NAME}}` reference in the parsed arguments, wherever it sits. Read from the
/// parsed values, so a JSON escape (`{{secret\u003aNAME}}`) cannot hide one.
pub fn secret_references(args: &Value) -> Vec<String> {
    let mut found = Vec::new();
    let mut stack = vec![args];
    while let Some(value) = stack.pop() {
        match value {
            Value::String(text) => collect_references(text, &mut found),
            Value::Array(items) => stack.extend(items),
            Value::Object(fields) => {
                for (key, value) in fields {
                    collect_references(key, &mut found);
                    stack.push(value);
                }
            }
            _ => {}
        }
    }
    found.sort();
    found.dedup();
    found
}

fn collect_references(text: &str, found: &mut Vec<String>) {
    let mut rest = text;
    while let Some(start) = rest.find("{{secret:") {
        let after = &rest[start + "{{secret:".len()..];
        let Some(len) = after.find("}}") else {
            return;
        };
        found.push(after[..len].trim().to_string());
        rest = &after[len..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use serde_json::json;

    #[test]
    fn secret_references_are_found_in_parsed_values_at_any_depth() {
        let raw = r#"{"headers": {"Authorization": "Bearer {{secret\u003aTOKEN}}"}, "x": ["{{secret:B}} {{secret: A }}"]}"#;
        let args: Value = serde_json::from_str(raw).unwrap();
        assert!(!raw.contains("{{secret:TOKEN"));
        assert_eq!(secret_references(&args), vec!["A", "B", "TOKEN"]);
        assert_eq!(
            secret_references(&json!({"a": "{{secret:unterminated"})),
            Vec::<String>::new()
        );
    }

    #[test]
    fn resolve_path_follows_links_and_folds_dots() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().canonicalize().unwrap();
        std::fs::create_dir(base.join("real")).unwrap();
        std::os::unix::fs::symlink(base.join("real"), base.join("link")).unwrap();
        assert_eq!(
            resolve_path(&base, "link/new.txt"),
            base.join("real/new.txt")
        );
        assert_eq!(resolve_path(&base, "a/../real/./x"), base.join("real/x"));
        assert_eq!(
            resolve_path(&base, "/etc/../etc/hostname"),
            PathBuf::from("/etc/hostname")
        );
    }
}
