//! OpenAI Responses.
//!
//! Reasoning maps to `reasoning: {effort}`. The stream's `response.output_text.delta` events
//! carry the live text; the final `response.completed` (or `response.incomplete`) carries the
//! whole response, whose `output` items are the turn: they go into the next request's `input`
//! as they are, reasoning items included.

use serde_json::{Value, json};

use crate::ModelConfig;
use crate::client::{ModelEvent, StopReason, StreamState, Turn, TurnRequest, Usage, u64_at};
use crate::sse::SseEvent;

pub(crate) fn request(config: &ModelConfig, request: &TurnRequest<'_>) -> (String, Value) {
    let mut body = json!({
        "model": config.model,
        "input": request.history,
        "stream": true,
    });
    if !request.system.is_empty() {
        body["instructions"] = json!(request.system);
    }
    if !request.tools.is_empty() {
        body["tools"] = Value::from(request.tools.to_vec());
    }
    if let Some(max) = config.max_tokens {
        body["max_output_tokens"] = json!(max);
    }
    if let Some(effort) = config.reasoning {
        body["reasoning"] = json!({"effort": effort.as_str()});
    }
    (format!("{}/responses", config.base_url()), body)
}

#[derive(Default)]
pub(crate) struct ResponseStream {
    streamed_text: String,
    response: Option<Value>,
}

impl StreamState for ResponseStream {
    fn event(&mut self, event: &SseEvent, emit: &dyn Fn(ModelEvent)) -> Result<bool, String> {
        let (data, kind) = crate::client::typed(event)?;
        match kind.as_str() {
            "response.output_text.delta" => {
                let delta = data
                    .get("delta")
                    .and_then(Value::as_str)
                    .ok_or_else(|| format!("{kind} has no delta text: {:?}", event.data))?;
                self.streamed_text.push_str(delta);
                emit(ModelEvent::TextDelta(delta.to_owned()));
                Ok(false)
            }
            "response.completed" | "response.incomplete" => {
                let response = data
                    .get("response")
                    .filter(|r| r.get("output").is_some_and(Value::is_array))
                    .ok_or_else(|| format!("{kind} carries no response with an output array"))?;
                self.response = Some(response.clone());
                Ok(true)
            }
            "response.failed" => {
                let message = data
                    .pointer("/response/error/message")
                    .and_then(Value::as_str)
                    .unwrap_or("no message");
                Err(format!("the response failed: {message}"))
            }
            "error" => {
                let message = data
                    .get("message")
                    .or_else(|| data.pointer("/error/message"))
                    .and_then(Value::as_str)
                    .unwrap_or("no message");
                Err(format!("the server reported an error: {message}"))
            }
            // Item and part boundaries, argument deltas, reasoning summaries: the final
            // response holds them all.
            _ => Ok(false),
        }
    }

    fn finish(self: Box<Self>) -> Result<Turn, String> {
        let response = self.response.ok_or(
            "the stream ended before response.completed: the answer is incomplete (connection cut?)",
        )?;
        let output = response.get("output").cloned().unwrap_or_default();
        let items = output.as_array().map(Vec::as_slice).unwrap_or_default();
        let text: String = items
            .iter()
            .filter(|i| i.get("type").and_then(Value::as_str) == Some("message"))
            .filter_map(|i| i.get("content").and_then(Value::as_array))
            .flatten()
            .filter(|c| c.get("type").and_then(Value::as_str) == Some("output_text"))
            .filter_map(|c| c.get("text").and_then(Value::as_str))
            .collect();
        let has_calls = items
            .iter()
            .any(|i| i.get("type").and_then(Value::as_str) == Some("function_call"));
        let stop = match response.get("status").and_then(Value::as_str) {
            _ if has_calls => StopReason::ToolCalls,
            Some("completed") => StopReason::End,
            Some("incomplete") => {
                match response
                    .pointer("/incomplete_details/reason")
                    .and_then(Value::as_str)
                {
                    Some("max_output_tokens") => StopReason::MaxTokens,
                    Some(reason) => StopReason::Other(reason.to_owned()),
                    None => StopReason::Other("incomplete".to_owned()),
                }
            }
            Some(status) => StopReason::Other(status.to_owned()),
            None => StopReason::Other("no status".to_owned()),
        };
        let usage = response.get("usage").unwrap_or(&Value::Null);
        Ok(Turn {
            text: if text.is_empty() {
                self.streamed_text
            } else {
                text
            },
            usage: Usage {
                input_tokens: u64_at(usage, "/input_tokens").unwrap_or(0),
                output_tokens: u64_at(usage, "/output_tokens").unwrap_or(0),
            },
            stop,
            message: output,
        })
    }
}
