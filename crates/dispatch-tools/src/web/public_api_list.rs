//! `public_api_list`: our own curated catalogue of free public APIs (`public_apis.json`),
//! listed by category, keyword and authentication, so the model can pick one for http_request.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use async_trait::async_trait;
use dispatch_engine::{Effect, ToolContext, ToolError, ToolOutput, ToolSpec};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::BuiltinTool;

/// How an API authenticates callers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum Auth {
    #[serde(rename = "none")]
    None,
    #[serde(rename = "apiKey")]
    ApiKey,
    #[serde(rename = "OAuth")]
    OAuth,
}

impl Auth {
    fn as_str(self) -> &'static str {
        match self {
            Auth::None => "none",
            Auth::ApiKey => "apiKey",
            Auth::OAuth => "OAuth",
        }
    }
}

/// One API of the catalogue.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApiEntry {
    pub name: String,
    pub category: String,
    /// The API's base or documentation URL.
    pub url: String,
    pub auth: Auth,
    pub https: bool,
    /// Whether browsers may call it cross-origin ("yes", "no"), when known.
    #[serde(default)]
    pub cors: Option<String>,
    pub description: String,
}

/// The catalogue, parsed once; an error here is a bug in public_apis.json (a test catches it).
static CATALOGUE: LazyLock<Result<Vec<ApiEntry>, String>> = LazyLock::new(|| {
    serde_json::from_str(include_str!("public_apis.json"))
        .map_err(|e| format!("the built-in API catalogue is damaged: {e}"))
});

fn catalogue() -> Result<&'static [ApiEntry], ToolError> {
    CATALOGUE
        .as_deref()
        .map_err(|e| ToolError::Fatal(e.clone()))
}

const DEFAULT_LIMIT: usize = 20;

fn default_limit() -> usize {
    DEFAULT_LIMIT
}

/// List free public APIs.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PublicApiListArgs {
    /// Only this category (case-insensitive), e.g. "Weather"; call with no arguments to see the categories.
    #[serde(default)]
    #[schemars(length(max = 100))]
    category: Option<String>,
    /// Only APIs whose name, category or description contain every one of these words.
    #[serde(default)]
    #[schemars(length(max = 200))]
    keyword: Option<String>,
    /// Only APIs with this authentication: "none" (no key needed), "apiKey" or "OAuth".
    #[serde(default)]
    auth: Option<Auth>,
    /// How many APIs to list, 1-200 (default 20).
    #[serde(default = "default_limit")]
    #[schemars(range(min = 1, max = 200))]
    limit: usize,
}

/// The public_api_list tool.
pub struct PublicApiList;

/// Category name → number of APIs, sorted by name.
fn categories(entries: &[ApiEntry]) -> BTreeMap<&str, usize> {
    let mut counts = BTreeMap::new();
    for e in entries {
        *counts.entry(e.category.as_str()).or_insert(0) += 1;
    }
    counts
}

fn category_list(entries: &[ApiEntry]) -> String {
    categories(entries)
        .into_iter()
        .map(|(name, n)| format!("{name} ({n})"))
        .collect::<Vec<_>>()
        .join(", ")
}

const POINTER: &str = "Call one with http_request(url=...); if you do not know its endpoints, read its docs URL with fetch_page first.";

fn list(entries: &[ApiEntry], args: &PublicApiListArgs) -> Result<String, ToolError> {
    let category = args
        .category
        .as_deref()
        .map(str::trim)
        .filter(|c| !c.is_empty());
    let keyword = args
        .keyword
        .as_deref()
        .map(str::trim)
        .filter(|k| !k.is_empty());
    if category.is_none() && keyword.is_none() && args.auth.is_none() {
        let counts = categories(entries);
        let mut out = format!(
            "{} categories, {} APIs. Pass category, keyword and/or auth to list APIs.\n",
            counts.len(),
            entries.len()
        );
        for (name, n) in counts {
            out.push_str(&format!("{name} ({n})\n"));
        }
        return Ok(out.trim_end().to_string());
    }
    let category = match category {
        Some(wanted) => {
            let known = categories(entries)
                .into_keys()
                .find(|c| c.eq_ignore_ascii_case(wanted));
            match known {
                Some(c) => Some(c),
                None => {
                    return Err(ToolError::failed(format!(
                        "unknown category \"{wanted}\"; use one of: {}",
                        category_list(entries)
                    )));
                }
            }
        }
        None => None,
    };
    let words: Vec<String> = keyword
        .map(|k| k.split_whitespace().map(str::to_lowercase).collect())
        .unwrap_or_default();
    let matches: Vec<&ApiEntry> = entries
        .iter()
        .filter(|e| category.is_none_or(|c| e.category == c))
        .filter(|e| args.auth.is_none_or(|a| e.auth == a))
        .filter(|e| {
            let text = format!("{} {} {}", e.name, e.category, e.description).to_lowercase();
            words.iter().all(|w| text.contains(w.as_str()))
        })
        .collect();
    let mut filters = Vec::new();
    if let Some(c) = category {
        filters.push(format!("category={c}"));
    }
    if let Some(k) = keyword {
        filters.push(format!("keyword=\"{k}\""));
    }
    if let Some(a) = args.auth {
        filters.push(format!("auth={}", a.as_str()));
    }
    let filters = filters.join(", ");
    if matches.is_empty() {
        return Ok(format!(
            "no APIs match {filters}; try other words or drop a filter. Categories: {}",
            category_list(entries)
        ));
    }
    let shown = matches.len().min(args.limit);
    let mut out = if shown < matches.len() {
        format!(
            "{shown} of {} APIs matching {filters} (raise limit or add a keyword for the rest):\n",
            matches.len()
        )
    } else {
        let noun = if shown == 1 { "API" } else { "APIs" };
        format!("{shown} {noun} matching {filters}:\n")
    };
    for e in matches.iter().take(shown) {
        let cors = e
            .cors
            .as_deref()
            .map(|c| format!(", CORS {c}"))
            .unwrap_or_default();
        out.push_str(&format!(
            "- {} [{}] {} (auth: {}{cors})\n  {}\n",
            e.name,
            e.category,
            e.url,
            e.auth.as_str(),
            e.description
        ));
    }
    out.push_str(POINTER);
    Ok(out)
}

#[async_trait]
impl BuiltinTool for PublicApiList {
    const NAME: &'static str = "public_api_list";
    const DESCRIPTION: &'static str = "Find a free public API for a task (weather, countries, books, science, finance, test data, ...). No arguments: the categories with counts. With category, keyword and/or auth: matching APIs with their URL and authentication, to call with http_request.";
    type Args = PublicApiListArgs;

    fn declare(&self, spec: ToolSpec) -> ToolSpec {
        spec.read_only().concurrent().effect(Effect::Pure)
    }

    async fn run(
        &self,
        _cx: ToolContext,
        args: PublicApiListArgs,
    ) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::text(list(catalogue()?, &args)?))
    }
}

#[cfg(test)]
#[path = "public_api_list_tests.rs"]
mod tests;
