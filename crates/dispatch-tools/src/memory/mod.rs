//! Memory tools: what the agent learned from failures (`write_error`, `error_history`) and what
//! it did earlier in the session (`chat_history`). They only read and write the stores they are
//! given when built — never files — so they are read-only for the gate and concurrent.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use dispatch_engine::ToolError;
use dispatch_store::{ChatHistory, ErrorMemory};

mod chat_history;
mod error_history;
mod write_error;

pub use chat_history::ChatHistoryTool;
pub use error_history::ErrorHistory;
pub use write_error::WriteError;

#[cfg(test)]
mod tests;

/// The error memory a tool was given, or a failure that says there is none.
fn error_memory(
    memory: &Option<Arc<dyn ErrorMemory>>,
    tool: &str,
) -> Result<Arc<dyn ErrorMemory>, ToolError> {
    memory.clone().ok_or_else(|| {
        ToolError::failed(format!(
            "{tool} is unavailable: this dispatcher runs without an error memory store; continue without it"
        ))
    })
}

/// The chat history a tool was given, or a failure that says there is none.
fn chat_history(history: &Option<Arc<dyn ChatHistory>>) -> Result<Arc<dyn ChatHistory>, ToolError> {
    history.clone().ok_or_else(|| {
        ToolError::failed(
            "chat_history is unavailable: this dispatcher runs without a chat history store; continue without it",
        )
    })
}

/// A store failure, told to the model as a failure it cannot fix by changing arguments.
fn store_failed(what: &str, e: impl std::fmt::Display) -> ToolError {
    ToolError::failed(format!("{what} failed in the store: {e}; try again later"))
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// How long ago `at_ms` was, coarsely: `12s`, `5m`, `3h`, `4d`.
fn age(now_ms: u64, at_ms: u64) -> String {
    let s = now_ms.saturating_sub(at_ms) / 1000;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m", s / 60),
        3600..86_400 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86_400),
    }
}

/// `text` on one line (whitespace runs collapsed), at most `max` characters, `…` when cut.
fn clip(text: &str, max: usize) -> String {
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() <= max {
        return flat;
    }
    let mut out: String = flat.chars().take(max).collect();
    out.push('…');
    out
}

/// A required text argument, trimmed; blank is refused naming the field.
fn required(field: &str, value: &str) -> Result<String, ToolError> {
    let v = value.trim();
    if v.is_empty() {
        return Err(ToolError::failed(format!(
            "{field} is empty; give a short, specific text"
        )));
    }
    Ok(v.to_string())
}

#[cfg(test)]
mod unit {
    use super::*;

    #[test]
    fn ages_and_clips() {
        assert_eq!(age(10_000, 0), "10s");
        assert_eq!(age(0, 10_000), "0s");
        assert_eq!(age(3_600_000, 0), "1h");
        assert_eq!(age(90 * 86_400_000, 0), "90d");
        assert_eq!(clip("a\n\n b  c", 10), "a b c");
        assert_eq!(clip("ééééé", 3), "ééé…");
    }
}
