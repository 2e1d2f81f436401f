//! Error memory (seed §8): what went wrong with a tool and what fixed it, written by
//! `write_error`, searched by `error_history`, and offered back as `related_errors` the next
//! time the same tool fails the same way.

use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::StoreResult;

/// How long a record lives without being found again (each hit starts the period anew).
pub const ERROR_TTL: Duration = Duration::from_secs(90 * 24 * 3600);

/// `ERROR_TTL` in milliseconds, the unit every backend stores expiry times in.
pub(crate) const ERROR_TTL_MS: u64 = 90 * 24 * 3600 * 1000;

/// How an attempt to fix a failure ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Resolved,
    Failed,
    Abandoned,
}

/// The kind of a failure, derived from its text (seed §8), used to match records to a failure.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorClass {
    ToolNotExist,
    RequiredParam,
    InvalidParam,
    Timeout,
    Permission,
    NoResult,
    Other,
}

impl ErrorClass {
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorClass::ToolNotExist => "tool_not_exist",
            ErrorClass::RequiredParam => "required_param",
            ErrorClass::InvalidParam => "invalid_param",
            ErrorClass::Timeout => "timeout",
            ErrorClass::Permission => "permission",
            ErrorClass::NoResult => "no_result",
            ErrorClass::Other => "other",
        }
    }

    /// The keyword a record of this class carries.
    pub fn keyword(self) -> String {
        format!("error_type:{}", self.as_str())
    }
}

/// The class of an error text: the first rule that matches, case-insensitively (seed §8).
pub fn classify(text: &str) -> ErrorClass {
    let t = text.to_lowercase();
    let any = |words: &[&str]| words.iter().any(|w| t.contains(w));
    if any(&["not exist:", "tool not found", "unsupported tool"]) {
        ErrorClass::ToolNotExist
    } else if any(&["required"]) {
        ErrorClass::RequiredParam
    } else if any(&["invalid"]) {
        ErrorClass::InvalidParam
    } else if any(&["timeout", "timed out", "deadline exceeded"]) {
        ErrorClass::Timeout
    } else if any(&[
        "unauthorized",
        "forbidden",
        "permission denied",
        "access denied",
    ]) {
        ErrorClass::Permission
    } else if any(&["no result", "no data", "not found", "empty result"]) {
        ErrorClass::NoResult
    } else {
        ErrorClass::Other
    }
}

/// One remembered failure and what was done about it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorRecord {
    /// 64 hex characters; `error_history(mode=read)` also accepts its first 8.
    pub id: String,
    pub timestamp_ms: u64,
    pub tool_name: String,
    /// Trimmed, lower-cased, de-duplicated, plus `error_type:<class>`.
    pub keywords: Vec<String>,
    pub symptom: String,
    pub cause: String,
    pub action: String,
    pub outcome: Outcome,
}

impl ErrorRecord {
    /// A record as `write_error` makes it: keywords normalised, the error class derived from
    /// the symptom and cause, an id from the tool, the time and the symptom.
    pub fn new(
        tool_name: &str,
        keywords: &[String],
        symptom: &str,
        cause: &str,
        action: &str,
        outcome: Outcome,
        now_ms: u64,
    ) -> Self {
        let mut normalised: Vec<String> = Vec::new();
        for k in keywords {
            let k = k.trim().to_lowercase();
            if !k.is_empty() && !normalised.contains(&k) {
                normalised.push(k);
            }
        }
        let class = classify(&format!("{symptom} {cause}")).keyword();
        if !normalised.contains(&class) {
            normalised.push(class);
        }
        let id = blake3::hash(format!("{tool_name}|{now_ms}|{symptom}|{action}").as_bytes())
            .to_hex()
            .to_string();
        ErrorRecord {
            id,
            timestamp_ms: now_ms,
            tool_name: tool_name.trim().to_string(),
            keywords: normalised,
            symptom: symptom.trim().to_string(),
            cause: cause.trim().to_string(),
            action: action.trim().to_string(),
            outcome,
        }
    }

    /// Whether every word of `query` appears in the record (case-insensitive).
    /// The text a search looks in: tool, keywords, symptom, cause and action. Every backend
    /// indexes exactly this, so they all find the same records.
    pub fn searched_text(&self) -> String {
        format!(
            "{} {} {} {} {}",
            self.tool_name,
            self.keywords.join(" "),
            self.symptom,
            self.cause,
            self.action
        )
    }

    pub fn matches(&self, query: &str) -> bool {
        let text = self.searched_text().to_lowercase();
        query
            .split_whitespace()
            .all(|word| text.contains(&word.to_lowercase()))
    }
}

/// The error memory.
#[async_trait]
pub trait ErrorMemory: Send + Sync {
    async fn error_write(&self, record: ErrorRecord) -> StoreResult<()>;
    /// Records where every word of `query` appears (empty query: all), only of `tool` when
    /// given, newest first; every hit's 90 days start again.
    async fn error_search(
        &self,
        tool: Option<&str>,
        query: &str,
        limit: usize,
    ) -> StoreResult<Vec<ErrorRecord>>;
    /// Records of `tool` with this error class, newest first (for `related_errors`); every
    /// hit's 90 days start again.
    async fn error_related(
        &self,
        tool: &str,
        class: ErrorClass,
        limit: usize,
    ) -> StoreResult<Vec<ErrorRecord>>;
    /// A record by its id, or by a prefix of at least 8 characters that only it has.
    async fn error_read(&self, id: &str) -> StoreResult<Option<ErrorRecord>>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ttl_in_milliseconds_is_the_ttl() {
        assert_eq!(u128::from(ERROR_TTL_MS), ERROR_TTL.as_millis());
    }

    #[test]
    fn classes_follow_the_seed_rules_first_match_wins() {
        assert_eq!(classify("not exist: frob"), ErrorClass::ToolNotExist);
        assert_eq!(
            classify("missing required field(s) path"),
            ErrorClass::RequiredParam
        );
        assert_eq!(classify("invalid arguments: /x"), ErrorClass::InvalidParam);
        assert_eq!(
            classify("tool \"x\" timed out after 1m0s"),
            ErrorClass::Timeout
        );
        assert_eq!(classify("HTTP 403 Forbidden"), ErrorClass::Permission);
        assert_eq!(classify("file not found"), ErrorClass::NoResult);
        assert_eq!(classify("boom"), ErrorClass::Other);
        // `required` is checked before `invalid`.
        assert_eq!(
            classify("invalid: x is required"),
            ErrorClass::RequiredParam
        );
    }

    #[test]
    fn a_new_record_normalises_keywords_and_adds_its_class() {
        let r = ErrorRecord::new(
            "read_files",
            &[" PDF ".into(), "pdf".into(), "".into()],
            "file not found",
            "wrong dir",
            "used find_files first",
            Outcome::Resolved,
            1,
        );
        assert_eq!(r.keywords, vec!["pdf", "error_type:no_result"]);
        assert_eq!(r.id.len(), 64);
        assert!(r.matches("PDF find_files"));
        assert!(!r.matches("pdf docx"));
    }
}
