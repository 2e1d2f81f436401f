//! Anthropic Messages.
//!
//! Reasoning maps to extended thinking, `thinking: {type: "enabled", budget_tokens}`, with
//! budgets of 2048 (low), 8192 (medium) and 24576 (high) tokens; `max_tokens` counts thinking
//! too, so its default grows by the budget. The stream opens each content block
//! (`content_block_start`), grows it by deltas (text, tool input as partial JSON, thinking
//! and its signature) and closes it; `message_delta` carries the stop reason and usage.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use crate::client::{ModelEvent, StopReason, StreamState, Turn, TurnRequest, Usage, u64_at};
use crate::sse::SseEvent;
use crate::{ModelConfig, Reasoning};

/// The answer's own share of `max_tokens` when none is configured (the API requires one).
const DEFAULT_MAX_TOKENS: u32 = 8192;

pub(crate) fn thinking_budget(effort: Reasoning) -> u32 {
    match effort {
        Reasoning::Low => 2048,
        Reasoning::Medium => 8192,
        Reasoning::High => 24576,
    }
}

pub(crate) fn request(config: &ModelConfig, request: &TurnRequest<'_>) -> (String, Value) {
    let budget = config.reasoning.map(thinking_budget);
    let max_tokens = config
        .max_tokens
        .unwrap_or(DEFAULT_MAX_TOKENS + budget.unwrap_or(0));
    let mut body = json!({
        "model": config.model,
        "max_tokens": max_tokens,
        "messages": request.history,
        "stream": true,
    });
    if !request.system.is_empty() {
        body["system"] = json!(request.system);
    }
    if !request.tools.is_empty() {
        body["tools"] = Value::from(request.tools.to_vec());
    }
    if let Some(budget) = budget {
        body["thinking"] = json!({"type": "enabled", "budget_tokens": budget});
    }
    (format!("{}/messages", config.base_url()), body)
}

#[derive(Default)]
pub(crate) struct MessageStream {
    blocks: BTreeMap<u64, Block>,
    text: String,
    stop_reason: Option<String>,
    usage: Usage,
    stopped: bool,
}

struct Block {
    value: Map<String, Value>,
    /// A tool_use block's input as streamed so far (partial JSON).
    input_json: String,
}

impl StreamState for MessageStream {
    fn event(&mut self, event: &SseEvent, emit: &dyn Fn(ModelEvent)) -> Result<bool, String> {
        let (data, kind) = crate::client::typed(event)?;
        match kind.as_str() {
            "message_start" => {
                let usage = data.pointer("/message/usage").unwrap_or(&Value::Null);
                // input_tokens leaves out what the cache served; the prompt is all three.
                self.usage.input_tokens = [
                    "input_tokens",
                    "cache_creation_input_tokens",
                    "cache_read_input_tokens",
                ]
                .iter()
                .filter_map(|k| u64_at(usage, &format!("/{k}")))
                .sum();
                self.usage.output_tokens = u64_at(usage, "/output_tokens").unwrap_or(0);
            }
            "content_block_start" => {
                let index = index_of(&data, &kind)?;
                let Some(Value::Object(block)) = data.get("content_block") else {
                    return Err(format!("{kind} {index} has no content_block object"));
                };
                self.blocks.insert(
                    index,
                    Block {
                        value: block.clone(),
                        input_json: String::new(),
                    },
                );
            }
            "content_block_delta" => {
                let index = index_of(&data, &kind)?;
                let delta = data.get("delta").unwrap_or(&Value::Null);
                let block = self
                    .blocks
                    .get_mut(&index)
                    .ok_or_else(|| format!("a delta for block {index}, which was never started"))?;
                let text_of = |field: &str| {
                    delta
                        .get(field)
                        .and_then(Value::as_str)
                        .ok_or_else(|| format!("a delta of block {index} has no {field}"))
                };
                match delta.get("type").and_then(Value::as_str) {
                    Some("text_delta") => {
                        let text = text_of("text")?;
                        append(&mut block.value, "text", text);
                        self.text.push_str(text);
                        emit(ModelEvent::TextDelta(text.to_owned()));
                    }
                    Some("input_json_delta") => block.input_json.push_str(text_of("partial_json")?),
                    Some("thinking_delta") => {
                        append(&mut block.value, "thinking", text_of("thinking")?)
                    }
                    // The signature must go back unchanged for the thinking to be accepted.
                    Some("signature_delta") => {
                        block
                            .value
                            .insert("signature".into(), json!(text_of("signature")?));
                    }
                    Some("citations_delta") => {
                        let citation = delta.get("citation").cloned().unwrap_or_default();
                        match block.value.entry("citations").or_insert_with(|| json!([])) {
                            Value::Array(list) => list.push(citation),
                            other => *other = json!([citation]),
                        }
                    }
                    other => {
                        return Err(format!(
                            "block {index} got a delta of unknown type {other:?}"
                        ));
                    }
                }
            }
            "content_block_stop" => {
                let index = index_of(&data, &kind)?;
                let block = self
                    .blocks
                    .get_mut(&index)
                    .ok_or_else(|| format!("block {index} stopped but was never started"))?;
                if !block.input_json.is_empty() {
                    let input: Value = serde_json::from_str(&block.input_json).map_err(|e| {
                        format!(
                            "the input of block {index} ({}) is not valid JSON once assembled: {e}",
                            block
                                .value
                                .get("name")
                                .and_then(Value::as_str)
                                .unwrap_or("?")
                        )
                    })?;
                    block.value.insert("input".into(), input);
                }
            }
            "message_delta" => {
                if let Some(reason) = data.pointer("/delta/stop_reason").and_then(Value::as_str) {
                    self.stop_reason = Some(reason.to_owned());
                }
                // The counts are cumulative, so the last one is the total.
                if let Some(out) = u64_at(&data, "/usage/output_tokens") {
                    self.usage.output_tokens = out;
                }
            }
            "message_stop" => {
                self.stopped = true;
                return Ok(true);
            }
            "error" => {
                let error = data.get("error").unwrap_or(&Value::Null);
                let kind = error.get("type").and_then(Value::as_str).unwrap_or("error");
                let message = error
                    .get("message")
                    .and_then(Value::as_str)
                    .unwrap_or("no message");
                return Err(format!("the server reported {kind}: {message}"));
            }
            // `ping` keeps the connection alive; later event types are additions.
            _ => {}
        }
        Ok(false)
    }

    fn finish(self: Box<Self>) -> Result<Turn, String> {
        if !self.stopped {
            return Err(
                "the stream ended before message_stop: the answer is incomplete (connection cut?)"
                    .to_owned(),
            );
        }
        let content: Vec<Value> = self
            .blocks
            .into_values()
            .map(|b| Value::Object(b.value))
            .collect();
        let stop = match self.stop_reason.as_deref() {
            Some("tool_use") => StopReason::ToolCalls,
            Some("end_turn" | "stop_sequence") => StopReason::End,
            Some("max_tokens") => StopReason::MaxTokens,
            Some(other) => StopReason::Other(other.to_owned()),
            None => StopReason::Other("no stop_reason".to_owned()),
        };
        Ok(Turn {
            message: json!({"role": "assistant", "content": content}),
            text: self.text,
            usage: self.usage,
            stop,
        })
    }
}

fn index_of(data: &Value, kind: &str) -> Result<u64, String> {
    data.get("index")
        .and_then(Value::as_u64)
        .ok_or_else(|| format!("{kind} has no index"))
}

fn append(block: &mut Map<String, Value>, field: &str, text: &str) {
    match block.get_mut(field) {
        Some(Value::String(s)) => s.push_str(text),
        _ => {
            block.insert(field.to_owned(), json!(text));
        }
    }
}
