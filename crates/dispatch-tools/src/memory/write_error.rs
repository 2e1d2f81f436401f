//! `write_error`: remember how a tool failure ended, so the next time that tool fails the same
//! way the engine can show the fix in `related_errors` (seed §8). It changes the error memory
//! and nothing else: `Effect::Pure` (no write epoch, so the run's file reads stay deduped) with
//! dedupe off (recording the same note twice must record it twice, never replay "recorded").

use std::sync::Arc;

use async_trait::async_trait;
use dispatch_engine::{Effect, ToolContext, ToolError, ToolOutput, ToolSpec};
use dispatch_store::{ErrorMemory, ErrorRecord, Outcome};
use schemars::JsonSchema;
use serde::Deserialize;

use super::{error_memory, now_ms, required, store_failed};
use crate::{BuiltinTool, Stores};

/// Record how a tool failure ended.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WriteErrorArgs {
    /// The tool that failed, exactly as called (e.g. "edit_file").
    #[schemars(length(min = 1, max = 128))]
    tool_name: String,
    /// 1 to 16 short search words (e.g. ["patch", "whitespace"]); each at most 64 characters.
    #[schemars(length(min = 1, max = 16))]
    keywords: Vec<KeywordArg>,
    /// The failure as seen: the key part of the error message.
    #[schemars(length(min = 1, max = 2000))]
    symptom: String,
    /// Why it failed, if known.
    #[serde(default)]
    #[schemars(length(max = 2000))]
    cause: Option<String>,
    /// What was done: the fix that worked, or what was tried.
    #[schemars(length(min = 1, max = 2000))]
    action: String,
    /// resolved (the action fixed it), failed (it did not) or abandoned.
    outcome: OutcomeArg,
}

#[derive(Deserialize, JsonSchema)]
#[serde(transparent)]
struct KeywordArg(#[schemars(length(min = 1, max = 64))] String);

#[derive(Deserialize, JsonSchema, Clone, Copy)]
#[serde(rename_all = "snake_case")]
enum OutcomeArg {
    Resolved,
    Failed,
    Abandoned,
}

pub struct WriteError {
    /// The recorded failures and fixes.
    memory: Option<Arc<dyn ErrorMemory>>,
}

impl WriteError {
    pub fn new(stores: &Stores) -> Self {
        WriteError {
            memory: stores.error_memory.clone(),
        }
    }
}

/// A tool name as tools are named: letters, digits and `_ - . :` only.
fn tool_name(raw: &str) -> Result<String, ToolError> {
    let name = raw.trim();
    let ok = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | ':'));
    if !ok {
        return Err(ToolError::failed(format!(
            "tool_name {:?} is not a tool name; give the failed tool's name exactly as called (letters, digits, _ - . :)",
            super::clip(raw, 64)
        )));
    }
    Ok(name.to_string())
}

#[async_trait]
impl BuiltinTool for WriteError {
    const NAME: &'static str = "write_error";
    const DESCRIPTION: &'static str = "Record how a tool failure ended, so the next time that tool fails the same way its result shows your fix under related_errors. Call it once a different fix works (outcome=resolved), or when you give up (failed/abandoned). Returns the record's 8-character id.";
    type Args = WriteErrorArgs;

    fn declare(&self, spec: ToolSpec) -> ToolSpec {
        spec.read_only()
            .concurrent()
            .effect(Effect::Pure)
            .no_dedupe()
    }

    async fn run(&self, _cx: ToolContext, args: WriteErrorArgs) -> Result<ToolOutput, ToolError> {
        let tool = tool_name(&args.tool_name)?;
        let mut keywords = Vec::with_capacity(args.keywords.len());
        for (i, KeywordArg(k)) in args.keywords.into_iter().enumerate() {
            let k = k.trim();
            if k.is_empty() {
                return Err(ToolError::failed(format!(
                    "keywords[{i}] is blank; give short search words such as the error's key terms"
                )));
            }
            if k.starts_with("error_type:") {
                return Err(ToolError::failed(format!(
                    "keywords[{i}] {k:?}: error_type: keywords are derived from the symptom and cause; leave them out"
                )));
            }
            keywords.push(k.to_string());
        }
        let symptom = required("symptom", &args.symptom)?;
        let action = required("action", &args.action)?;
        let cause = args.cause.unwrap_or_default();
        let outcome = match args.outcome {
            OutcomeArg::Resolved => Outcome::Resolved,
            OutcomeArg::Failed => Outcome::Failed,
            OutcomeArg::Abandoned => Outcome::Abandoned,
        };
        let memory = error_memory(&self.memory, Self::NAME)?;
        let record = ErrorRecord::new(
            &tool,
            &keywords,
            &symptom,
            cause.trim(),
            &action,
            outcome,
            now_ms(),
        );
        let short = record.id.get(..8).unwrap_or(&record.id).to_string();
        memory
            .error_write(record)
            .await
            .map_err(|e| store_failed("recording the error", e))?;
        Ok(ToolOutput::text(format!("recorded {short}")))
    }
}
