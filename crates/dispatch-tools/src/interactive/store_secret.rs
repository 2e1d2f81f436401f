//! `store_secret`: the user types a credential; it is stored encrypted and only its name is
//! ever shown (DESIGN §3.17).

use std::time::Duration;

use async_trait::async_trait;
use dispatch_engine::{Effect, Question, ToolContext, ToolError, ToolOutput, ToolSpec};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use crate::BuiltinTool;

/// Ask the user for a credential and store it under a name.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StoreSecretArgs {
    /// The secret's name, UPPER_SNAKE like GITHUB_TOKEN (letters, digits, `_ . -`).
    #[schemars(length(min = 1, max = 128), regex(pattern = r"^[A-Za-z0-9_.-]+$"))]
    key: String,
    /// What to tell the user about the value (where to find it, which scopes it needs).
    #[serde(default)]
    #[schemars(length(max = 2000))]
    question: Option<String>,
}

pub struct StoreSecret;

#[async_trait]
impl BuiltinTool for StoreSecret {
    const NAME: &'static str = "store_secret";
    const DESCRIPTION: &'static str = "Ask the user to enter a credential (API key, token) at a masked prompt and store it encrypted under `key`. You never see the value: use it as {{secret:KEY}} in http_request headers.";
    type Args = StoreSecretArgs;

    fn declare(&self, spec: ToolSpec) -> ToolSpec {
        spec.asks_user()
            .timeout(Duration::from_secs(24 * 60 * 60))
            // A new credential changes what calls that failed without it would return now.
            .effect(Effect::Mutates)
            .no_dedupe()
    }

    fn questions(&self, args: &StoreSecretArgs) -> Vec<Question> {
        vec![Question {
            question: format!("Enter the value for {}", args.key),
            detail: Some(match args.question.as_deref() {
                Some(why) if !why.trim().is_empty() => format!(
                    "{} (stored encrypted; the model only ever sees the name)",
                    why.trim()
                ),
                _ => "stored encrypted; the model only ever sees the name".to_string(),
            }),
            secret: true,
            ..Question::default()
        }]
    }

    async fn run(&self, cx: ToolContext, args: StoreSecretArgs) -> Result<ToolOutput, ToolError> {
        let questions = self.questions(&args);
        let Some(answers) = cx.user.ask(&questions).await else {
            return Err(ToolError::failed(
                "the user did not enter a value (the prompt was closed); continue without it, or ask again later",
            ));
        };
        self.answered(cx, args, answers).await
    }

    async fn answered(
        &self,
        cx: ToolContext,
        args: StoreSecretArgs,
        answers: Vec<String>,
    ) -> Result<ToolOutput, ToolError> {
        let Some(secrets) = &cx.secrets else {
            return Err(ToolError::failed(
                "this dispatcher has no secret store, so the value was not kept",
            ));
        };
        // A pasted value often brings a newline with it; inner spaces may be meaningful.
        let value = answers
            .into_iter()
            .next()
            .unwrap_or_default()
            .trim_matches(['\r', '\n'])
            .to_string();
        if value.trim().is_empty() {
            return Err(ToolError::failed(format!(
                "the user entered no value for {}; nothing was stored",
                args.key
            )));
        }
        secrets
            .set(&args.key, &value)
            .await
            .map_err(|e| ToolError::failed(format!("cannot store the secret {}: {e}", args.key)))?;
        // The seed's result, in the seed's key order.
        Ok(ToolOutput::text(format!(
            r#"{{"ok":true,"key":{}}}"#,
            Value::String(args.key)
        )))
    }
}
