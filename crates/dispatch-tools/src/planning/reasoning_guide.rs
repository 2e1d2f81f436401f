//! `reasoning_guide`: a short guide on how to go about a kind of work.

use async_trait::async_trait;
use dispatch_engine::{Effect, Tool, ToolContext, ToolError, ToolOutput, ToolSpec};
use serde_json::{Value, json};

use super::guides::{guide, topics};

pub struct ReasoningGuide {
    spec: ToolSpec,
}

impl ReasoningGuide {
    pub fn new() -> Self {
        // The topic enum comes from the guide table itself, so a new guide is offered at once.
        let topics: Vec<&str> = topics().collect();
        ReasoningGuide {
            spec: ToolSpec::new(
                "reasoning_guide",
                "Read a short guide before a kind of work you have not done well yet: tool_error (a call failed), targeted_read (reading code or files), rag_web (web research), ask_user, subagent_dispatch, write_todo (multi-step work), html_render, tool_generate (writing a tool), market_analysis.",
                json!({
                    "type": "object",
                    "properties": {"topic": {"type": "string", "enum": topics, "description": "The guide to read."}},
                    "required": ["topic"],
                    "additionalProperties": false
                }),
            )
            .read_only()
            .concurrent()
            .effect(Effect::Pure),
        }
    }
}

impl Default for ReasoningGuide {
    fn default() -> Self {
        Self::new()
    }
}

#[async_trait]
impl Tool for ReasoningGuide {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, _cx: ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        let topic = args
            .get("topic")
            .and_then(Value::as_str)
            .unwrap_or("")
            .trim();
        match guide(topic) {
            Some(text) => Ok(ToolOutput::text(text)),
            None => Err(ToolError::failed(format!(
                "unknown topic \"{topic}\"; topics: {}",
                topics().collect::<Vec<_>>().join(", ")
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use dispatch_engine::{Status, Tool};
    use pretty_assertions::assert_eq;
    use serde_json::{Value, json};

    use super::ReasoningGuide;
    use crate::planning::guides::GUIDES;
    use crate::test_support::*;

    #[tokio::test]
    async fn every_topic_returns_its_guide() {
        let h = Harness::new();
        let calls = GUIDES
            .iter()
            .map(|(topic, _)| call(topic, "reasoning_guide", json!({"topic": topic})))
            .collect();
        let out = h.round("s", "r", calls).await;
        let expected: Vec<_> = GUIDES
            .iter()
            .map(|(topic, text)| {
                result(
                    topic,
                    Status::Ok,
                    &format!("[reasoning_guide] {}", text.trim()),
                )
            })
            .collect();
        assert_eq!(results(&out), expected);
    }

    #[tokio::test]
    async fn an_unknown_topic_is_invalid_through_the_schema_enum() {
        let h = Harness::new();
        let out = h
            .round(
                "s",
                "r",
                vec![call("c1", "reasoning_guide", json!({"topic": "nope"}))],
            )
            .await;
        assert_eq!(
            results(&out),
            [result(
                "c1",
                Status::Invalid,
                "tool=reasoning_guide failed: invalid arguments: /topic: \"nope\" is not one of \"tool_error\", \"targeted_read\" or 7 other candidates"
            )]
        );
    }

    #[test]
    fn the_topic_enum_lists_every_guide_in_order() {
        let tool = ReasoningGuide::new();
        let topics: Vec<Value> = GUIDES.iter().map(|(t, _)| json!(t)).collect();
        assert_eq!(
            tool.spec().parameters["properties"]["topic"]["enum"],
            Value::Array(topics)
        );
    }
}
