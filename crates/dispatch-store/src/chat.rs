//! Chat history: the session's transcript as something to search and list (the storage side
//! of `chat_history`, spec §9).
//!
//! Search is by keywords: every word of the query must occur as a whole word (case-insensitive)
//! in a message's searchable text — a tool result's tool name and content, or the names and
//! arguments of an assistant message's calls. SQLite answers it with an FTS5 index built in
//! the round's commit transaction; the memory and Redis backends scan the session's transcript
//! with [`words`], the same tokenisation FTS5's `unicode61` tokenizer applies (letters and
//! digits, `_` kept inside words, case folded), so all three agree.

use std::collections::BTreeMap;

use async_trait::async_trait;

use crate::{StoreResult, TranscriptEntry, TranscriptMessage};

/// The most query words honoured; a longer query is cut (its first words are kept).
pub const MAX_QUERY_WORDS: usize = 16;

/// A message that matched a search.
#[derive(Clone, Debug, PartialEq)]
pub struct ChatHit {
    /// The message's position in the session transcript (increasing in commit order).
    pub seq: u64,
    /// When its round was committed (ms since the epoch, by the store's clock).
    pub at_ms: u64,
    pub entry: TranscriptEntry,
}

/// One run (task) of a session, for `chat_history(mode=list)`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunSummary {
    pub run: String,
    /// Rounds with transcript messages.
    pub rounds: u64,
    /// Tool calls made (assistant messages' calls).
    pub calls: u64,
    pub first_ms: u64,
    pub last_ms: u64,
}

/// Searching and listing a session's history.
#[async_trait]
pub trait ChatHistory: Send + Sync {
    /// Messages of `session` committed at or after `since_ms` whose text holds every word of
    /// `query`, newest first, at most `limit`. A query with no words matches nothing.
    async fn chat_search(
        &self,
        session: &str,
        query: &str,
        since_ms: Option<u64>,
        limit: usize,
    ) -> StoreResult<Vec<ChatHit>>;

    /// The session's runs with a message at or after `since_ms`, most recently active first,
    /// at most `limit`.
    async fn chat_runs(
        &self,
        session: &str,
        since_ms: Option<u64>,
        limit: usize,
    ) -> StoreResult<Vec<RunSummary>>;

    /// The messages of one run of `session`, in commit order, at most the first `limit`
    /// (`chat_history(mode=read)`). An unknown run, or a run of another session, is empty.
    async fn chat_read(&self, session: &str, run: &str, limit: usize) -> StoreResult<Vec<ChatHit>>;
}

/// The words of `text`: runs of letters, digits and `_`, lower-cased, in order (repeats kept).
pub fn words(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
}

/// The distinct words of a query, at most [`MAX_QUERY_WORDS`].
pub fn query_words(query: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for word in words(query) {
        if !out.contains(&word) {
            out.push(word);
        }
        if out.len() == MAX_QUERY_WORDS {
            break;
        }
    }
    out
}

/// What a search looks in for one message.
pub fn searchable_text(message: &TranscriptMessage) -> String {
    match message {
        TranscriptMessage::Tool { name, content, .. } => format!("{name}\n{content}"),
        TranscriptMessage::Assistant { tool_calls } => tool_calls
            .iter()
            .map(|c| format!("{} {}", c.name, c.arguments))
            .collect::<Vec<_>>()
            .join("\n"),
        TranscriptMessage::User { .. } => String::new(),
    }
}

/// Whether every one of `query` (from [`query_words`]) is a word of `message`.
pub fn matches(query: &[String], message: &TranscriptMessage) -> bool {
    if query.is_empty() {
        return false;
    }
    let text = searchable_text(message);
    let mut found = vec![false; query.len()];
    for word in words(&text) {
        if let Some(i) = query.iter().position(|q| *q == word) {
            found[i] = true;
            if found.iter().all(|f| *f) {
                return true;
            }
        }
    }
    false
}

/// Search a transcript held as `(seq, at_ms, entry)` in commit order (the scanning backends).
pub fn search_scan<'a>(
    entries: impl DoubleEndedIterator<Item = (u64, u64, &'a TranscriptEntry)>,
    query: &str,
    since_ms: Option<u64>,
    limit: usize,
) -> Vec<ChatHit> {
    let query = query_words(query);
    entries
        .rev()
        .filter(|(_, at, _)| since_ms.is_none_or(|s| *at >= s))
        .filter(|(_, _, e)| matches(&query, &e.message))
        .take(limit)
        .map(|(seq, at_ms, entry)| ChatHit {
            seq,
            at_ms,
            entry: entry.clone(),
        })
        .collect()
}

/// One run's messages of a transcript held as `(seq, at_ms, entry)` in commit order.
pub fn read_scan<'a>(
    entries: impl Iterator<Item = (u64, u64, &'a TranscriptEntry)>,
    run: &str,
    limit: usize,
) -> Vec<ChatHit> {
    entries
        .filter(|(_, _, e)| e.run == run)
        .take(limit)
        .map(|(seq, at_ms, entry)| ChatHit {
            seq,
            at_ms,
            entry: entry.clone(),
        })
        .collect()
}

/// Summarise the runs of a transcript held as `(seq, at_ms, entry)` in commit order.
pub fn runs_scan<'a>(
    entries: impl Iterator<Item = (u64, u64, &'a TranscriptEntry)>,
    since_ms: Option<u64>,
    limit: usize,
) -> Vec<RunSummary> {
    // run → (summary, last seq, distinct rounds seen)
    let mut runs: BTreeMap<&str, (RunSummary, u64, std::collections::BTreeSet<u64>)> =
        BTreeMap::new();
    for (seq, at, entry) in entries {
        if since_ms.is_some_and(|s| at < s) {
            continue;
        }
        let (summary, last_seq, rounds) = runs.entry(entry.run.as_str()).or_insert_with(|| {
            (
                RunSummary {
                    run: entry.run.clone(),
                    rounds: 0,
                    calls: 0,
                    first_ms: at,
                    last_ms: at,
                },
                seq,
                Default::default(),
            )
        });
        rounds.insert(entry.round);
        summary.rounds = rounds.len() as u64;
        summary.first_ms = summary.first_ms.min(at);
        summary.last_ms = summary.last_ms.max(at);
        *last_seq = (*last_seq).max(seq);
        if let TranscriptMessage::Assistant { tool_calls } = &entry.message {
            summary.calls += tool_calls.len() as u64;
        }
    }
    let mut out: Vec<(RunSummary, u64)> = runs.into_values().map(|(s, seq, _)| (s, seq)).collect();
    out.sort_by_key(|(_, last_seq)| std::cmp::Reverse(*last_seq));
    out.into_iter().take(limit).map(|(s, _)| s).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_alphanumeric_runs_with_underscores_lower_cased() {
        let w: Vec<String> = words("Read_Files: src/Main.rs -> ERROR 42 café").collect();
        assert_eq!(
            w,
            ["read_files", "src", "main", "rs", "error", "42", "café"]
        );
        assert_eq!(query_words("Error error ERROR main"), ["error", "main"]);
        assert!(query_words("  -- !! ").is_empty());
    }
}
