//! `calculate`: evaluate a batch of arithmetic expressions; one bad expression fails alone.

use async_trait::async_trait;
use dispatch_engine::{Effect, ToolContext, ToolError, ToolOutput, ToolSpec};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value};

use super::evaluate::evaluate;
use crate::BuiltinTool;

/// Evaluate arithmetic expressions.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CalculateArgs {
    /// Expressions such as "2^10 / 3" or "sqrt(2) * PI"; numbers only, no variables.
    #[schemars(length(min = 1, max = 64))]
    expressions: Vec<String>,
}

pub struct Calculate;

#[async_trait]
impl BuiltinTool for Calculate {
    const NAME: &'static str = "calculate";
    const DESCRIPTION: &'static str = "Evaluate arithmetic exactly instead of doing it in your head: + - * / ^ %, parentheses, sqrt, exp, ln, log, sin, cos, tan, abs, floor, ceil, round, PI, E. Send several expressions at once; returns a JSON object mapping each expression to its result or to \"error: ...\".";
    type Args = CalculateArgs;

    fn declare(&self, spec: ToolSpec) -> ToolSpec {
        spec.read_only().concurrent().effect(Effect::Pure)
    }

    async fn run(&self, _cx: ToolContext, args: CalculateArgs) -> Result<ToolOutput, ToolError> {
        let mut results = Map::new();
        for expr in args.expressions {
            let value = match evaluate(&expr) {
                Ok(v) => v,
                Err(e) => format!("error: {e}"),
            };
            results.insert(expr, Value::String(value));
        }
        Ok(ToolOutput::text(Value::Object(results).to_string()))
    }
}

#[cfg(test)]
mod tests {
    use dispatch_engine::Status;
    use pretty_assertions::assert_eq;
    use serde_json::{Value, json};

    use crate::test_support::*;

    #[tokio::test]
    async fn one_bad_expression_leaves_the_others_their_results() {
        let h = Harness::new();
        h.select("s", "calculate").await;
        let out = h
            .round(
                "s",
                "r",
                vec![run_tool(
                    "c1",
                    "calculate",
                    json!({"expressions": ["2^10", "1/0", "(1 + 2) * 3", "2 +"]}),
                )],
            )
            .await;
        assert_eq!(out.results[0].status, Status::Ok);
        let body = out.results[0].content.strip_prefix("[calculate] ").unwrap();
        assert_eq!(
            serde_json::from_str::<Value>(body).unwrap(),
            json!({
                "2^10": "1024",
                "1/0": "error: division by zero or undefined result",
                "(1 + 2) * 3": "9",
                "2 +": "error: operator \"+\" at position 3 has no value on its right"
            })
        );
    }

    #[tokio::test]
    async fn an_empty_or_oversized_batch_is_refused_by_the_schema() {
        let h = Harness::new();
        h.select("s", "calculate").await;
        let many: Vec<String> = (0..65).map(|i| i.to_string()).collect();
        let out = h
            .round(
                "s",
                "r",
                vec![
                    run_tool("c1", "calculate", json!({"expressions": []})),
                    run_tool("c2", "calculate", json!({"expressions": many})),
                ],
            )
            .await;
        let statuses: Vec<Status> = out.results.iter().map(|r| r.status).collect();
        assert_eq!(statuses, [Status::Invalid, Status::Invalid]);
        assert_eq!(
            out.results[0].content,
            "tool=calculate failed: invalid arguments: /expressions: [] has less than 1 item"
        );
    }

    #[tokio::test]
    async fn a_direct_call_is_refused_because_calculate_is_deferred() {
        let h = Harness::new();
        h.select("s", "calculate").await;
        let out = h
            .round(
                "s",
                "r",
                vec![call("c1", "calculate", json!({"expressions": ["1+1"]}))],
            )
            .await;
        assert_eq!(
            results(&out),
            [result(
                "c1",
                Status::Refused,
                "tool=calculate failed: calculate is not callable directly. Fetch its schema with find_tools, then call run_tool(name=calculate, args=...)."
            )]
        );
    }
}
