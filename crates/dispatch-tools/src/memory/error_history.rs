//! `error_history`: look up what earlier runs learned about tool failures before retrying a
//! failed call a second time (seed §8). `mode=write` is gone (v1.3.11): the schema's enum has
//! no `write`, and the engine refuses it first with a hint naming `write_error`.
//!
//! Dedupe is off: the memory changes under a run (write_error does not bump the write epoch),
//! so a repeated search must ask the store again.

use std::sync::Arc;

use async_trait::async_trait;
use dispatch_engine::{Effect, ToolContext, ToolError, ToolOutput, ToolSpec};
use dispatch_store::{ErrorMemory, ErrorRecord};
use schemars::JsonSchema;
use serde::Deserialize;

use super::{age, clip, error_memory, now_ms, store_failed};
use crate::{BuiltinTool, Stores};

const DEFAULT_LIMIT: usize = 4;

/// Search or read the error memory.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ErrorHistoryArgs {
    /// search (default) or read (one record by hash; the default when hash is given).
    #[serde(default)]
    mode: Option<ModeArg>,
    /// Words that must all appear in the record (tool, keywords, symptom, cause or action);
    /// omitted: every record.
    #[serde(default)]
    #[schemars(length(max = 500))]
    keyword: Option<String>,
    /// Only records of this tool.
    #[serde(default)]
    #[schemars(length(max = 128))]
    tool: Option<String>,
    /// Records to return, newest first (default 4, max 16).
    #[serde(default)]
    #[schemars(range(min = 1, max = 16))]
    limit: Option<u32>,
    /// For read: the record id, or its first 8 or more characters.
    #[serde(default)]
    #[schemars(length(max = 64))]
    hash: Option<String>,
}

#[derive(Deserialize, JsonSchema, Clone, Copy, PartialEq)]
#[serde(rename_all = "snake_case")]
enum ModeArg {
    Search,
    Read,
}

pub struct ErrorHistory {
    /// The recorded failures and fixes.
    memory: Option<Arc<dyn ErrorMemory>>,
}

impl ErrorHistory {
    pub fn new(stores: &Stores) -> Self {
        ErrorHistory {
            memory: stores.error_memory.clone(),
        }
    }
}

fn outcome(r: &ErrorRecord) -> String {
    serde_json::to_value(r.outcome)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

fn compact(r: &ErrorRecord, now: u64) -> String {
    format!(
        "{} tool={} outcome={} age={} symptom: {} | action: {}",
        r.id.get(..8).unwrap_or(&r.id),
        r.tool_name,
        outcome(r),
        age(now, r.timestamp_ms),
        clip(&r.symptom, 200),
        clip(&r.action, 200)
    )
}

fn full(r: &ErrorRecord, now: u64) -> String {
    let cause = if r.cause.is_empty() { "-" } else { &r.cause };
    format!(
        "id: {}\ntool: {}\noutcome: {}\nage: {}\nkeywords: {}\nsymptom: {}\ncause: {}\naction: {}",
        r.id,
        r.tool_name,
        outcome(r),
        age(now, r.timestamp_ms),
        r.keywords.join(", "),
        r.symptom,
        cause,
        r.action
    )
}

#[async_trait]
impl BuiltinTool for ErrorHistory {
    const NAME: &'static str = "error_history";
    const DESCRIPTION: &'static str = "Search the recorded tool failures and their fixes (newest first), or read one record by its id (hash). Use it before retrying a failed call a second time. To record a fix, call write_error.";
    type Args = ErrorHistoryArgs;

    fn declare(&self, spec: ToolSpec) -> ToolSpec {
        spec.read_only()
            .concurrent()
            .effect(Effect::Observes)
            .no_dedupe()
    }

    async fn run(&self, _cx: ToolContext, args: ErrorHistoryArgs) -> Result<ToolOutput, ToolError> {
        let hash = args
            .hash
            .as_deref()
            .map(str::trim)
            .filter(|h| !h.is_empty());
        let mode = args.mode.unwrap_or(if hash.is_some() {
            ModeArg::Read
        } else {
            ModeArg::Search
        });
        let memory = error_memory(&self.memory, Self::NAME)?;
        let now = now_ms();
        if mode == ModeArg::Read {
            let Some(hash) = hash else {
                return Err(ToolError::failed(
                    "mode=read needs hash: the record id or its first 8 characters (from a search result)",
                ));
            };
            if hash.len() < 8 || !hash.chars().all(|c| c.is_ascii_hexdigit()) {
                return Err(ToolError::failed(format!(
                    "hash {:?} is not a record id; give 8 to 64 hex characters as shown by error_history(mode=search)",
                    clip(hash, 64)
                )));
            }
            let record = memory
                .error_read(hash)
                .await
                .map_err(|e| store_failed("reading the error record", e))?;
            return match record {
                Some(r) => Ok(ToolOutput::text(full(&r, now))),
                None => Err(ToolError::failed(format!(
                    "no error record {hash} (it may have expired after 90 days unused, or the prefix is shared by two records: give more characters); error_history(mode=search) lists records"
                ))),
            };
        }
        let keyword = args.keyword.as_deref().unwrap_or("").trim().to_string();
        let tool = args
            .tool
            .as_deref()
            .map(str::trim)
            .filter(|t| !t.is_empty());
        let limit = args
            .limit
            .map_or(DEFAULT_LIMIT, |l| l as usize)
            .clamp(1, 16);
        let records = memory
            .error_search(tool, &keyword, limit)
            .await
            .map_err(|e| store_failed("searching the error memory", e))?;
        if records.is_empty() {
            let mut filter = Vec::new();
            if !keyword.is_empty() {
                filter.push(format!("keyword {:?}", clip(&keyword, 80)));
            }
            if let Some(t) = tool {
                filter.push(format!("tool {:?}", clip(t, 64)));
            }
            let filter = if filter.is_empty() {
                "the error memory is empty".to_string()
            } else {
                format!(
                    "no records match {}; try fewer words or drop the tool filter",
                    filter.join(" and ")
                )
            };
            return Ok(ToolOutput::text(format!("0 records: {filter}")));
        }
        let mut text = format!("{} record(s), newest first:", records.len());
        for r in &records {
            text.push('\n');
            text.push_str(&compact(r, now));
        }
        Ok(ToolOutput::text(text))
    }
}
