//! Reading a call's own arguments for its [`Subject`](dispatch_engine::Subject): each tool
//! names its fields here, next to the tool, so the engine never has to. The gate calls
//! `subject` before schema validation, so everything is read leniently: a field of the wrong
//! type is simply not there (and the call then fails validation).

use std::path::{Path, PathBuf};

use dispatch_engine::subject::resolve_path;
use serde_json::Value;

/// The string at `key`.
pub(crate) fn text<'a>(args: &'a Value, key: &str) -> Option<&'a str> {
    args.get(key)
        .and_then(Value::as_str)
        .filter(|t| !t.is_empty())
}

/// The strings at `key`: one string, or a list of them.
pub(crate) fn texts<'a>(args: &'a Value, key: &str) -> Vec<&'a str> {
    match args.get(key) {
        Some(Value::String(one)) if !one.is_empty() => vec![one.as_str()],
        Some(Value::Array(items)) => items
            .iter()
            .filter_map(Value::as_str)
            .filter(|t| !t.is_empty())
            .collect(),
        _ => Vec::new(),
    }
}

/// The string at `key` of every object in the list at `list` (`files[].path`).
pub(crate) fn nested<'a>(args: &'a Value, list: &str, key: &str) -> Vec<&'a str> {
    args.get(list)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|item| text(item, key))
        .collect()
}

/// Paths as written, resolved against the work directory.
pub(crate) fn resolved<'a>(
    workdir: &Path,
    paths: impl IntoIterator<Item = &'a str>,
) -> Vec<PathBuf> {
    paths
        .into_iter()
        .map(|path| resolve_path(workdir, path))
        .collect()
}
