//! `calculate`: evaluate a batch of arithmetic expressions; one bad expression fails alone.

use async_trait::async_trait;
use dispatch_engine::{Effect, Tool, ToolContext, ToolError, ToolOutput, ToolSpec};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value};

use super::evaluate::evaluate;
use crate::{parse_args, schema_of};

/// Evaluate arithmetic expressions.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct CalculateArgs {
    /// Expressions such as "2^10 / 3" or "sqrt(2) * PI"; numbers only, no variables.
    #[schemars(length(min = 1, max = 64))]
    expressions: Vec<String>,
}

pub struct Calculate {
    spec: ToolSpec,
}

impl Calculate {
    pub fn new() -> Self {
        Calculate {
            spec: ToolSpec::new(
                "calculate",
                "Evaluate arithmetic exactly instead of doing it in your head: + - * / ^ %, parentheses, sqrt, exp, ln, log, sin, cos, tan, abs, floor, ceil, round, PI, E. Send several expressions at once; returns a JSON object mapping each expression to its result or to \"error: ...\".",
                schema_of::<CalculateArgs>(),
            )
            .read_only()
            .concurrent()
            .effect(Effect::Pure),
        }
    }
}

impl Default for Calculate {
    fn default() -> Self {
        Self::new()
    }
}

#[async_trait]
impl Tool for Calculate {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, _cx: ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        let args: CalculateArgs = parse_args("calculate", args)?;
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
