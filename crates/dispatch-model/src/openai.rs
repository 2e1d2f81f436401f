//! OpenAI Chat Completions, and every server that speaks it (vLLM, Ollama, OpenRouter…).
//!
//! Reasoning maps to `reasoning_effort`. The stream sends the assistant message in deltas:
//! text in `content`, each tool call in pieces under its `index`, then a `finish_reason`, a
//! last chunk with `usage` (asked for with `stream_options.include_usage`) and `[DONE]`.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::client::{ModelEvent, StopReason, StreamState, Turn, TurnRequest, Usage, u64_at};
use crate::sse::SseEvent;
use crate::{ModelConfig, ProviderKind};

pub(crate) fn request(config: &ModelConfig, request: &TurnRequest<'_>) -> (String, Value) {
    let mut messages = Vec::with_capacity(request.history.len() + 1);
    if !request.system.is_empty() {
        messages.push(json!({"role": "system", "content": request.system}));
    }
    messages.extend(request.history.iter().cloned());
    let mut body = json!({
        "model": config.model,
        "messages": messages,
        "stream": true,
        "stream_options": {"include_usage": true},
    });
    if !request.tools.is_empty() {
        body["tools"] = Value::from(request.tools.to_vec());
    }
    if let Some(max) = config.max_tokens {
        // OpenAI's reasoning models refuse the older `max_tokens`; compatible servers do not
        // all know the newer name.
        let field = if config.base_url() == ProviderKind::OpenAi.default_base_url() {
            "max_completion_tokens"
        } else {
            "max_tokens"
        };
        body[field] = json!(max);
    }
    if let Some(effort) = config.reasoning {
        body["reasoning_effort"] = json!(effort.as_str());
    }
    (format!("{}/chat/completions", config.base_url()), body)
}

#[derive(Default)]
pub(crate) struct ChatStream {
    text: String,
    /// By the index the deltas carry; a BTreeMap keeps the model's order.
    calls: BTreeMap<u64, Call>,
    finish_reason: Option<String>,
    usage: Usage,
    done: bool,
}

#[derive(Default)]
struct Call {
    id: String,
    name: String,
    arguments: String,
}

impl StreamState for ChatStream {
    fn event(&mut self, event: &SseEvent, emit: &dyn Fn(ModelEvent)) -> Result<bool, String> {
        if event.data.trim() == "[DONE]" {
            self.done = true;
            return Ok(true);
        }
        let chunk: Value = serde_json::from_str(&event.data)
            .map_err(|e| format!("a chunk is not JSON ({e}): {:?}", event.data))?;
        if let Some(error) = chunk.get("error") {
            let message = error
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("no message");
            return Err(format!("the server reported an error: {message}"));
        }
        if let Some(usage) = chunk.get("usage").filter(|u| u.is_object()) {
            self.usage = Usage {
                input_tokens: u64_at(usage, "/prompt_tokens").unwrap_or(0),
                output_tokens: u64_at(usage, "/completion_tokens").unwrap_or(0),
            };
        }
        let choices = match chunk.get("choices") {
            None | Some(Value::Null) => return Ok(false),
            Some(Value::Array(choices)) => choices,
            Some(_) => return Err(format!("choices is not an array in {:?}", event.data)),
        };
        // One choice is asked for (no `n`); a server numbering it differently still sends one.
        let Some(choice) = choices.first() else {
            return Ok(false); // the usage chunk has no choices
        };
        let delta = choice.get("delta").unwrap_or(&Value::Null);
        if let Some(text) = delta.get("content").and_then(Value::as_str)
            && !text.is_empty()
        {
            self.text.push_str(text);
            emit(ModelEvent::TextDelta(text.to_owned()));
        }
        match delta.get("tool_calls") {
            None | Some(Value::Null) => {}
            Some(Value::Array(calls)) => {
                for call in calls {
                    self.call_delta(call)?;
                }
            }
            Some(_) => {
                return Err(format!(
                    "delta.tool_calls is not an array in {:?}",
                    event.data
                ));
            }
        }
        if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
            self.finish_reason = Some(reason.to_owned());
        }
        Ok(false)
    }

    fn finish(self: Box<Self>) -> Result<Turn, String> {
        if !self.done && self.finish_reason.is_none() {
            return Err(
                "the stream ended before a finish_reason or [DONE]: the answer is incomplete (connection cut?)"
                    .to_owned(),
            );
        }
        let mut message = json!({
            "role": "assistant",
            "content": if self.text.is_empty() { Value::Null } else { json!(self.text) },
        });
        if !self.calls.is_empty() {
            let calls: Vec<Value> = self
                .calls
                .into_values()
                .map(|c| {
                    json!({
                        "id": c.id,
                        "type": "function",
                        "function": {"name": c.name, "arguments": c.arguments},
                    })
                })
                .collect();
            message["tool_calls"] = Value::from(calls);
        }
        let has_calls = message.get("tool_calls").is_some();
        let stop = match self.finish_reason.as_deref() {
            // Some compatible servers say "stop" even when they called tools.
            _ if has_calls => StopReason::ToolCalls,
            Some("stop") => StopReason::End,
            Some("length") => StopReason::MaxTokens,
            Some(other) => StopReason::Other(other.to_owned()),
            None => StopReason::Other("no finish_reason".to_owned()),
        };
        Ok(Turn {
            message,
            text: self.text,
            usage: self.usage,
            stop,
        })
    }
}

impl ChatStream {
    fn call_delta(&mut self, delta: &Value) -> Result<(), String> {
        let index = match delta.get("index") {
            Some(index) => index
                .as_u64()
                .ok_or_else(|| format!("a tool_calls delta has index {index}, not a number"))?,
            // A server that sends each call whole may leave the index out: a new id opens a
            // new call, pieces without one continue the last.
            None => {
                let last = self.calls.keys().next_back().copied();
                match (last, delta.get("id").and_then(Value::as_str)) {
                    (Some(last), None) => last,
                    (Some(last), Some(_)) => last + 1,
                    (None, _) => 0,
                }
            }
        };
        let call = self.calls.entry(index).or_default();
        if let Some(id) = delta.get("id").and_then(Value::as_str) {
            call.id = id.to_owned();
        }
        let function = delta.get("function").unwrap_or(&Value::Null);
        if let Some(name) = function.get("name").and_then(Value::as_str)
            && call.name.is_empty()
        {
            call.name = name.to_owned();
        }
        if let Some(arguments) = function.get("arguments").and_then(Value::as_str) {
            call.arguments.push_str(arguments);
        }
        Ok(())
    }
}
