//! `reasoning_guide`: a short guide on how to go about a kind of work.

use async_trait::async_trait;
use dispatch_engine::{Effect, ToolContext, ToolError, ToolOutput, ToolSpec};
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::Deserialize;

use super::guides::{guide, topics};
use crate::BuiltinTool;

// No doc comment: the schema the model has always seen has no top-level description.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReasoningGuideArgs {
    /// The guide to read.
    #[schemars(schema_with = "topic_enum")]
    topic: String,
}

/// The topic enum comes from the guide table itself, so a new guide is offered at once.
fn topic_enum(_: &mut SchemaGenerator) -> Schema {
    let topics: Vec<&str> = topics().collect();
    json_schema!({"type": "string", "enum": topics})
}

pub struct ReasoningGuide;

#[async_trait]
impl BuiltinTool for ReasoningGuide {
    const NAME: &'static str = "reasoning_guide";
    const DESCRIPTION: &'static str = "Read a short guide before a kind of work you have not done well yet: tool_error (a call failed), targeted_read (reading code or files), rag_web (web research), ask_user, subagent_dispatch, write_todo (multi-step work), html_render, tool_generate (writing a tool), market_analysis.";
    type Args = ReasoningGuideArgs;

    fn declare(&self, spec: ToolSpec) -> ToolSpec {
        spec.read_only().concurrent().effect(Effect::Pure)
    }

    async fn run(
        &self,
        _cx: ToolContext,
        args: ReasoningGuideArgs,
    ) -> Result<ToolOutput, ToolError> {
        let topic = args.topic.trim();
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
    use crate::Builtin;
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
        let tool = Builtin::new(ReasoningGuide);
        let topics: Vec<Value> = GUIDES.iter().map(|(t, _)| json!(t)).collect();
        assert_eq!(
            tool.spec().parameters["properties"]["topic"]["enum"],
            Value::Array(topics)
        );
    }
}
