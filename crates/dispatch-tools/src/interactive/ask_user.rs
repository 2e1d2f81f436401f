//! `ask_user`: put questions to the user and continue with their answers.

use std::time::Duration;

use async_trait::async_trait;
use dispatch_engine::{Question, ToolContext, ToolError, ToolOutput, ToolSpec};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use crate::BuiltinTool;

/// Ask the user, and say where the task stands so it can resume from the answer.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AskUserArgs {
    /// The questions, asked together; one answer comes back for each.
    #[schemars(length(min = 1, max = 10))]
    questions: Vec<QuestionArg>,
    /// Where the task stands, kept with the questions so it can resume from the answers.
    #[allow(dead_code)]
    state: StateArg,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct QuestionArg {
    /// One question, answerable on its own.
    #[schemars(length(min = 1, max = 2000))]
    question: String,
    /// Context the user needs to answer well.
    #[serde(default)]
    #[schemars(length(max = 4000))]
    detail: Option<String>,
    /// Suggested answers; the user may pick by number or write their own.
    #[serde(default)]
    #[schemars(length(max = 20))]
    options: Vec<String>,
    /// Several options may be picked.
    #[serde(default)]
    multi_select: bool,
    /// The answer is a credential: it is stored as a secret and only its name comes back.
    #[serde(default)]
    secret: bool,
}

/// Read by the engine, which keeps it with the pending task; declared here for the schema.
#[allow(dead_code)]
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct StateArg {
    /// What the task is for.
    objective: String,
    /// Steps already done.
    completed: Vec<String>,
    /// What happens after the answer.
    next_steps: Vec<String>,
}

/// Longest answer kept in the result; a longer one is cut with a note.
const MAX_ANSWER: usize = 20_000;

pub struct AskUser;

#[async_trait]
impl BuiltinTool for AskUser {
    const NAME: &'static str = "ask_user";
    const DESCRIPTION: &'static str = "Ask the user when only they can decide or know (a preference, a missing fact, approval of a plan). The task pauses until they answer; each answer comes back as this call's result. Do not ask what a tool can find out.";
    type Args = AskUserArgs;

    fn declare(&self, spec: ToolSpec) -> ToolSpec {
        spec.asks_user()
            // A human may take their time; the terminal prompt itself has no deadline.
            .timeout(Duration::from_secs(24 * 60 * 60))
            // Asking again is a new question to the user, never a remembered answer.
            .no_dedupe()
    }

    fn parked_state(&self, args: &Value) -> Value {
        args.get("state").cloned().unwrap_or(Value::Null)
    }

    fn questions(&self, args: &AskUserArgs) -> Vec<Question> {
        args.questions
            .iter()
            .map(|q| Question {
                question: one_line(&q.question),
                detail: q.detail.clone(),
                options: q.options.clone(),
                multi_select: q.multi_select,
                secret: q.secret,
            })
            .collect()
    }

    async fn run(&self, cx: ToolContext, args: AskUserArgs) -> Result<ToolOutput, ToolError> {
        check(&args)?;
        let questions = self.questions(&args);
        let Some(answers) = cx.user.ask(&questions).await else {
            return Err(ToolError::failed(
                "the user did not answer (the prompt was closed); continue with what you know, or ask again later",
            ));
        };
        self.answered(cx, args, answers).await
    }

    async fn answered(
        &self,
        cx: ToolContext,
        args: AskUserArgs,
        answers: Vec<String>,
    ) -> Result<ToolOutput, ToolError> {
        let questions = self.questions(&args);
        let mut text = String::from("The user answered:\n");
        for (n, (question, answer)) in questions.iter().zip(answers).enumerate() {
            let n = n + 1;
            text.push_str(&format!("{n}. {}\n", question.question));
            let shown = if question.secret {
                secret_answer(&cx, n, &answer).await?
            } else {
                choice(question, answer.trim())
            };
            text.push_str(&format!("   → {shown}\n"));
        }
        Ok(ToolOutput::text(text.trim_end()))
    }
}

/// Refuse blank questions: the schema counts characters, not words.
fn check(args: &AskUserArgs) -> Result<(), ToolError> {
    if let Some(n) = args
        .questions
        .iter()
        .position(|q| q.question.trim().is_empty())
    {
        return Err(ToolError::failed(format!(
            "question {} is blank; write each question out",
            n + 1
        )));
    }
    Ok(())
}

/// An answer by option number (`2`, or `1,3` for multi_select) reads as the options' text.
fn choice(question: &Question, answer: &str) -> String {
    let pick = |part: &str| -> Option<String> {
        let n: usize = part.trim().parse().ok()?;
        question.options.get(n.checked_sub(1)?).cloned()
    };
    let picked: Option<Vec<String>> = if question.options.is_empty() {
        None
    } else if question.multi_select {
        answer.split(',').map(pick).collect()
    } else {
        pick(answer).map(|one| vec![one])
    };
    let text = match picked {
        Some(options) => options.join(", "),
        None if answer.is_empty() => "(no answer)".to_string(),
        None => answer.to_string(),
    };
    if text.len() > MAX_ANSWER {
        let mut cut = MAX_ANSWER;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        return format!(
            "{} … (answer cut at {MAX_ANSWER} bytes of {})",
            &text[..cut],
            text.len()
        );
    }
    text
}

/// A secret answer is stored, never shown: the model gets the name to use as `{{secret:NAME}}`.
async fn secret_answer(cx: &ToolContext, n: usize, answer: &str) -> Result<String, ToolError> {
    let Some(secrets) = &cx.secrets else {
        return Ok(
            "(a secret answer; withheld, and not kept: this dispatcher has no secret store)".into(),
        );
    };
    if answer.is_empty() {
        return Ok("(no answer)".into());
    }
    let id = blake3::hash(format!("{}|{}", cx.session_id, cx.call_id).as_bytes()).to_hex();
    let name = format!("ANSWER_{}_{n}", id[..8].to_uppercase());
    secrets
        .set(&name, answer)
        .await
        .map_err(|e| ToolError::failed(format!("cannot store the secret answer: {e}")))?;
    Ok(format!(
        "(a secret; stored as {name} — pass it as {{{{secret:{name}}}}} where it is needed)"
    ))
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}
