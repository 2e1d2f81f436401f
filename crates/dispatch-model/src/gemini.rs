//! Gemini generateContent, streamed (`:streamGenerateContent?alt=sse`).
//!
//! Reasoning maps to `generationConfig.thinkingConfig.thinkingBudget`: 1024 (low), 8192
//! (medium), 24576 (high) tokens. Each event is a whole GenerateContentResponse holding the
//! next parts of the one candidate; the turn is their concatenation, adjacent text pieces
//! joined. Parts are otherwise kept as sent: Gemini wants its `thoughtSignature` fields back
//! unchanged, on the part that carried them.

use serde_json::{Map, Value, json};

use crate::client::{ModelEvent, StopReason, StreamState, Turn, TurnRequest, Usage, u64_at};
use crate::sse::SseEvent;
use crate::{ModelConfig, Reasoning};

fn thinking_budget(effort: Reasoning) -> u32 {
    match effort {
        Reasoning::Low => 1024,
        Reasoning::Medium => 8192,
        Reasoning::High => 24576,
    }
}

pub(crate) fn request(config: &ModelConfig, request: &TurnRequest<'_>) -> (String, Value) {
    let mut body = json!({"contents": request.history});
    if !request.system.is_empty() {
        body["systemInstruction"] = json!({"parts": [{"text": request.system}]});
    }
    if !request.tools.is_empty() {
        body["tools"] = Value::from(request.tools.to_vec());
    }
    let mut generation = Map::new();
    if let Some(max) = config.max_tokens {
        generation.insert("maxOutputTokens".into(), json!(max));
    }
    if let Some(effort) = config.reasoning {
        generation.insert(
            "thinkingConfig".into(),
            json!({"thinkingBudget": thinking_budget(effort)}),
        );
    }
    if !generation.is_empty() {
        body["generationConfig"] = Value::Object(generation);
    }
    // Model names are accepted with or without the API's own `models/` prefix.
    let model = config.model.trim_start_matches("models/");
    let url = format!(
        "{}/models/{model}:streamGenerateContent?alt=sse",
        config.base_url()
    );
    (url, body)
}

#[derive(Default)]
pub(crate) struct ContentStream {
    parts: Vec<Map<String, Value>>,
    text: String,
    finish_reason: Option<String>,
    usage: Usage,
}

impl StreamState for ContentStream {
    fn event(&mut self, event: &SseEvent, emit: &dyn Fn(ModelEvent)) -> Result<bool, String> {
        let data: Value = serde_json::from_str(&event.data)
            .map_err(|e| format!("an event is not JSON ({e}): {:?}", event.data))?;
        if let Some(error) = data.get("error") {
            let message = error
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("no message");
            return Err(format!("the server reported an error: {message}"));
        }
        if let Some(usage) = data.get("usageMetadata") {
            // Thinking is billed as output, and counted apart from the candidates.
            self.usage = Usage {
                input_tokens: u64_at(usage, "/promptTokenCount").unwrap_or(0),
                output_tokens: u64_at(usage, "/candidatesTokenCount").unwrap_or(0)
                    + u64_at(usage, "/thoughtsTokenCount").unwrap_or(0),
            };
        }
        let candidate = match data.get("candidates") {
            Some(Value::Array(candidates)) => candidates.first(),
            None | Some(Value::Null) => None,
            Some(_) => return Err(format!("candidates is not an array in {:?}", event.data)),
        };
        let Some(candidate) = candidate else {
            if let Some(reason) = data
                .pointer("/promptFeedback/blockReason")
                .and_then(Value::as_str)
            {
                return Err(format!("the prompt was blocked (blockReason {reason})"));
            }
            return Ok(false);
        };
        match candidate.pointer("/content/parts") {
            None | Some(Value::Null) => {}
            Some(Value::Array(parts)) => {
                for part in parts {
                    let Value::Object(part) = part else {
                        return Err(format!("a part is not an object in {:?}", event.data));
                    };
                    self.add(part.clone(), emit);
                }
            }
            Some(_) => return Err(format!("content.parts is not an array in {:?}", event.data)),
        }
        if let Some(reason) = candidate.get("finishReason").and_then(Value::as_str) {
            self.finish_reason = Some(reason.to_owned());
        }
        // The stream simply ends after the event with the finish reason (and usage).
        Ok(false)
    }

    fn finish(self: Box<Self>) -> Result<Turn, String> {
        let Some(reason) = self.finish_reason else {
            return Err(
                "the stream ended before a finishReason: the answer is incomplete (connection cut?)"
                    .to_owned(),
            );
        };
        let has_calls = self.parts.iter().any(|p| p.contains_key("functionCall"));
        let stop = match reason.as_str() {
            _ if has_calls => StopReason::ToolCalls,
            "STOP" => StopReason::End,
            "MAX_TOKENS" => StopReason::MaxTokens,
            other => StopReason::Other(other.to_owned()),
        };
        let parts: Vec<Value> = self.parts.into_iter().map(Value::Object).collect();
        Ok(Turn {
            message: json!({"role": "model", "parts": parts}),
            text: self.text,
            usage: self.usage,
            stop,
        })
    }
}

impl ContentStream {
    fn add(&mut self, part: Map<String, Value>, emit: &dyn Fn(ModelEvent)) {
        let thought = is_thought(&part);
        if let Some(text) = plain_text(&part) {
            if !thought && !text.is_empty() {
                self.text.push_str(text);
                emit(ModelEvent::TextDelta(text.to_owned()));
            }
            // A bare text piece continues the text before it; a piece with a signature (or
            // a previous piece with one) stays its own part, so the signature keeps its place.
            if let Some(last) = self.parts.last_mut()
                && plain_text(last).is_some()
                && is_thought(last) == thought
                && !last.contains_key("thoughtSignature")
            {
                let text = text.to_owned();
                if let Some(Value::String(previous)) = last.get_mut("text") {
                    previous.push_str(&text);
                }
                return;
            }
        }
        self.parts.push(part);
    }
}

/// The text of a part holding only text (and the `thought` flag), the kind that may be joined.
fn plain_text(part: &Map<String, Value>) -> Option<&str> {
    let only_text = part.keys().all(|k| k == "text" || k == "thought");
    only_text
        .then(|| part.get("text").and_then(Value::as_str))
        .flatten()
}

fn is_thought(part: &Map<String, Value>) -> bool {
    part.get("thought").and_then(Value::as_bool) == Some(true)
}
