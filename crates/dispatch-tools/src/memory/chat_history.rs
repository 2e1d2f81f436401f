//! `chat_history`: what this session did in earlier runs — the runs, one run's tool calls and
//! results, or a keyword search over them. The dispatcher never sees the user's messages or the
//! model's answers, so the history holds tool calls and results only; and it is always this
//! session's: the session id comes from the context, never from the arguments.
//!
//! Dedupe is off: the history grows with every round, so a repeated call must look again.

use std::sync::Arc;

use async_trait::async_trait;
use dispatch_engine::{Effect, ToolContext, ToolError, ToolOutput, ToolSpec};
use dispatch_store::{ChatHistory, ChatHit, TranscriptMessage, chat};
use schemars::JsonSchema;
use serde::Deserialize;

use super::{age, chat_history, clip, now_ms, store_failed};
use crate::{BuiltinTool, Stores};

const LIST_LIMIT: usize = 10;
const SEARCH_LIMIT: usize = 8;
const MAX_LIMIT: usize = 32;
/// Messages shown by a read; a longer run says how to page past them.
const READ_MESSAGES: usize = 200;
/// Characters of one message shown by a read.
const READ_CLIP: usize = 1500;
const DAY_MS: u64 = 86_400_000;

/// This session's history of tool calls and results.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ChatHistoryArgs {
    /// list (runs), read (one run) or search. Omitted: task_id → read, keyword → search, else list.
    #[serde(default)]
    mode: Option<ModeArg>,
    /// For read: a run id from list ("current" = this run).
    #[serde(default)]
    #[schemars(length(max = 200))]
    task_id: Option<String>,
    /// For search: words that must all appear (whole words, any case) in a call or result.
    #[serde(default)]
    #[schemars(length(max = 500))]
    keyword: Option<String>,
    /// How far back list and search look: 1d (default), 7d, 1m or 1y.
    #[serde(default)]
    time_range: Option<RangeArg>,
    /// Entries to return: list default 10, search default 8, max 32.
    #[serde(default)]
    #[schemars(range(min = 1, max = 32))]
    limit: Option<u32>,
}

#[derive(Deserialize, JsonSchema, Clone, Copy, PartialEq)]
#[serde(rename_all = "snake_case")]
enum ModeArg {
    List,
    Read,
    Search,
}

#[derive(Deserialize, JsonSchema, Clone, Copy)]
enum RangeArg {
    #[serde(rename = "1d")]
    Day,
    #[serde(rename = "7d")]
    Week,
    #[serde(rename = "1m")]
    Month,
    #[serde(rename = "1y")]
    Year,
}

impl RangeArg {
    fn ms(self) -> u64 {
        match self {
            RangeArg::Day => DAY_MS,
            RangeArg::Week => 7 * DAY_MS,
            RangeArg::Month => 30 * DAY_MS,
            RangeArg::Year => 365 * DAY_MS,
        }
    }
    fn label(self) -> &'static str {
        match self {
            RangeArg::Day => "1d",
            RangeArg::Week => "7d",
            RangeArg::Month => "1m",
            RangeArg::Year => "1y",
        }
    }
}

pub struct ChatHistoryTool {
    /// The sessions' transcripts, searchable.
    history: Option<Arc<dyn ChatHistory>>,
}

impl ChatHistoryTool {
    pub fn new(stores: &Stores) -> Self {
        ChatHistoryTool {
            history: stores.chat_history.clone(),
        }
    }
}

/// Who said it, in a line: `call <name> <args>` or `result <name>: <content>`.
fn describe(message: &TranscriptMessage, max: usize) -> Vec<String> {
    match message {
        TranscriptMessage::Assistant { tool_calls } => tool_calls
            .iter()
            .map(|c| format!("call {} {}", c.name, clip(&c.arguments, max)))
            .collect(),
        TranscriptMessage::Tool { name, content, .. } => {
            vec![format!("result {name}: {}", clip(content, max))]
        }
        TranscriptMessage::User { images } => vec![format!("{} image(s)", images.len())],
    }
}

/// The tool a hit belongs to.
fn tool_of(message: &TranscriptMessage) -> String {
    match message {
        TranscriptMessage::Assistant { tool_calls } => {
            let names: Vec<&str> = tool_calls.iter().map(|c| c.name.as_str()).collect();
            format!("call {}", names.join(","))
        }
        TranscriptMessage::Tool { name, .. } => format!("result {name}"),
        TranscriptMessage::User { .. } => "images".to_string(),
    }
}

/// About 200 characters of `text` around the first word that is one of `query`.
fn snippet(text: &str, query: &[String]) -> String {
    let mut start = None;
    let mut word_start = None;
    for (i, c) in text
        .char_indices()
        .chain(std::iter::once((text.len(), ' ')))
    {
        let in_word = c.is_alphanumeric() || c == '_';
        match (in_word, word_start) {
            (true, None) => word_start = Some(i),
            (false, Some(s)) => {
                if query.contains(&text[s..i].to_lowercase()) {
                    start = Some(s);
                    break;
                }
                word_start = None;
            }
            _ => {}
        }
    }
    let at = start.unwrap_or(0);
    let before: Vec<char> = text[..at].chars().rev().take(60).collect();
    let head: String = before.into_iter().rev().collect();
    let tail: String = text[at..].chars().take(140).collect();
    let lead = if head.len() < at { "…" } else { "" };
    let trail = if at + tail.len() < text.len() {
        "…"
    } else {
        ""
    };
    format!("{lead}{}{trail}", clip(&format!("{head}{tail}"), 400))
}

#[async_trait]
impl BuiltinTool for ChatHistoryTool {
    const NAME: &'static str = "chat_history";
    const DESCRIPTION: &'static str = "This session's earlier work: the tool calls and their results (not the user's messages or your answers). list = recent runs; read = one run's calls and results (task_id from list); search = calls and results containing every keyword word.";
    type Args = ChatHistoryArgs;

    fn declare(&self, spec: ToolSpec) -> ToolSpec {
        spec.read_only()
            .concurrent()
            .effect(Effect::Observes)
            .no_dedupe()
    }

    async fn run(&self, cx: ToolContext, args: ChatHistoryArgs) -> Result<ToolOutput, ToolError> {
        let task_id = args
            .task_id
            .as_deref()
            .map(str::trim)
            .filter(|t| !t.is_empty());
        let keyword = args
            .keyword
            .as_deref()
            .map(str::trim)
            .filter(|k| !k.is_empty());
        let mode = args.mode.unwrap_or(match (task_id, keyword) {
            (Some(_), _) => ModeArg::Read,
            (None, Some(_)) => ModeArg::Search,
            (None, None) => ModeArg::List,
        });
        let history = chat_history(&self.history)?;
        let session: &str = &cx.session_id;
        let now = now_ms();
        let range = args.time_range.unwrap_or(RangeArg::Day);
        let since = Some(now.saturating_sub(range.ms()));
        let limit = |default: usize| {
            args.limit
                .map_or(default, |l| l as usize)
                .clamp(1, MAX_LIMIT)
        };
        match mode {
            ModeArg::List => {
                let runs = history
                    .chat_runs(session, since, limit(LIST_LIMIT))
                    .await
                    .map_err(|e| store_failed("listing the runs", e))?;
                if runs.is_empty() {
                    return Ok(ToolOutput::text(format!(
                        "0 runs of this session in the last {}; a wider time_range (7d, 1m, 1y) looks further back",
                        range.label()
                    )));
                }
                let mut text = format!(
                    "{} run(s) of this session in the last {}, most recent first:",
                    runs.len(),
                    range.label()
                );
                for r in &runs {
                    let current = if *r.run == *cx.run_id {
                        " (this run)"
                    } else {
                        ""
                    };
                    text.push_str(&format!(
                        "\n{}{current} rounds={} calls={} first={} ago last={} ago",
                        r.run,
                        r.rounds,
                        r.calls,
                        age(now, r.first_ms),
                        age(now, r.last_ms)
                    ));
                }
                Ok(ToolOutput::text(text))
            }
            ModeArg::Search => {
                let Some(keyword) = keyword else {
                    return Err(ToolError::failed(
                        "mode=search needs keyword: the words to look for",
                    ));
                };
                let words = chat::query_words(keyword);
                if words.is_empty() {
                    return Err(ToolError::failed(format!(
                        "keyword {:?} has no words to search for (letters or digits); give plain words",
                        clip(keyword, 80)
                    )));
                }
                let hits = history
                    .chat_search(session, keyword, since, limit(SEARCH_LIMIT))
                    .await
                    .map_err(|e| store_failed("searching the chat history", e))?;
                if hits.is_empty() {
                    return Ok(ToolOutput::text(format!(
                        "0 matches for {} in this session's last {}; try fewer words or a wider time_range",
                        words.join(" "),
                        range.label()
                    )));
                }
                let mut text = format!(
                    "{} match(es) for {}, newest first:",
                    hits.len(),
                    words.join(" ")
                );
                for hit in &hits {
                    let searched = chat::searchable_text(&hit.entry.message);
                    text.push_str(&format!(
                        "\nrun={} round={} {} ({} ago): {}",
                        hit.entry.run,
                        hit.entry.round,
                        tool_of(&hit.entry.message),
                        age(now, hit.at_ms),
                        snippet(&searched, &words)
                    ));
                }
                Ok(ToolOutput::text(text))
            }
            ModeArg::Read => {
                let Some(task_id) = task_id else {
                    return Err(ToolError::failed(
                        "mode=read needs task_id: a run id from chat_history(mode=list), or \"current\"",
                    ));
                };
                let run = if task_id == "current" {
                    cx.run_id.to_string()
                } else {
                    task_id.to_string()
                };
                let hits: Vec<ChatHit> = history
                    .chat_read(session, &run, READ_MESSAGES + 1)
                    .await
                    .map_err(|e| store_failed("reading the run", e))?;
                if hits.is_empty() {
                    return Err(ToolError::failed(format!(
                        "no run {:?} in this session; chat_history(mode=list) lists the runs",
                        clip(&run, 80)
                    )));
                }
                let more = hits.len() > READ_MESSAGES;
                let mut text = format!("run {run}: tool calls and results in order");
                let mut round = None;
                for hit in hits.iter().take(READ_MESSAGES) {
                    if round != Some(hit.entry.round) {
                        round = Some(hit.entry.round);
                        text.push_str(&format!(
                            "\nround {} ({} ago):",
                            hit.entry.round,
                            age(now, hit.at_ms)
                        ));
                    }
                    for line in describe(&hit.entry.message, READ_CLIP) {
                        text.push_str("\n  ");
                        text.push_str(&line);
                    }
                }
                if more {
                    text.push_str(&format!(
                        "\n(only the first {READ_MESSAGES} messages are shown; search with a keyword for later ones)"
                    ));
                }
                Ok(ToolOutput::text(text))
            }
        }
    }
}
