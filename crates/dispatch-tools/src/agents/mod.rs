//! Tools that run agents: `subagents` runs a subtask in a session of its own and waits for its
//! answer; `background_subagents` starts one that runs on after the call and is read later.
//! The agent loop lives in dispatch-model, which builds on this crate; it puts a
//! [`LegRunner`] in the [`Legs`] slot once the engine the legs run on exists.

use std::sync::{Arc, OnceLock};

use async_trait::async_trait;
use dispatch_engine::{ToolContext, ToolError};
use schemars::JsonSchema;
use serde::Deserialize;
use tokio_util::sync::CancellationToken;

mod background;
mod subagents;

pub use background::{BackgroundSubagents, MAX_BACKGROUND_LEGS};
pub use subagents::{MAX_RUNNING_LEGS, Subagents};

/// Sees a leg's progress, one short line at a time (a model call, a tool starting or ending).
pub type LegProgress = Arc<dyn Fn(String) + Send + Sync>;

/// One leg: a task for a model, in a session of its own.
pub struct LegRequest {
    /// The session that asked for it.
    pub parent: String,
    /// The session the leg runs in (a named one continues its conversation).
    pub session: String,
    /// The task, which must stand on its own: the leg sees nothing of the parent's conversation.
    pub task: String,
    /// A `[models.<name>]` name; `None`: the default.
    pub model: Option<String>,
    /// `low`, `medium` or `high`.
    pub reasoning: Option<String>,
    pub system_prompt: Option<String>,
    /// Tools the leg may not use (the parent's exclusions, the agent tools, the caller's own).
    pub exclude: Vec<String>,
    /// Cancelled with the parent's call (subagents) or by mode=stop (background_subagents).
    pub cancel: CancellationToken,
    /// Told what the leg is doing as it goes; `None`: nobody asks.
    pub progress: Option<LegProgress>,
}

/// What a leg came back with.
pub struct LegOutcome {
    pub model: String,
    /// The leg's answer, or what it had when it stopped.
    pub answer: String,
    /// `None` when it answered; why it stopped otherwise (max rounds, waiting on the user…).
    pub stopped: Option<String>,
    pub input_tokens: u64,
    pub output_tokens: u64,
}

/// Runs legs: the agent loop over the engine the calls come from.
#[async_trait]
pub trait LegRunner: Send + Sync {
    async fn run_leg(&self, leg: LegRequest) -> Result<LegOutcome, String>;
    /// The models a leg may ask for, the default first.
    fn models(&self) -> Vec<String>;
}

/// Where the leg runner is put once it exists; empty when no model is configured.
#[derive(Clone, Default)]
pub struct Legs(Arc<OnceLock<Arc<dyn LegRunner>>>);

impl Legs {
    /// Put the runner in; `false` when one is there already.
    pub fn bind(&self, runner: Arc<dyn LegRunner>) -> bool {
        self.0.set(runner).is_ok()
    }

    /// The runner, or the error that tells the model no model is configured.
    fn runner(&self) -> Result<Arc<dyn LegRunner>, ToolError> {
        self.0.get().cloned().ok_or_else(|| {
            ToolError::failed(
                "no model is configured for subagents: the user adds a [models.<name>] table to tooldispatch's config file; do the subtask yourself meanwhile",
            )
        })
    }
}

/// Tools a leg never has (the seed's charter): the agent tools, as a leg starting legs could
/// fan out without bound; the file-changing tools, so parallel legs never edit the same files
/// behind the parent's back; and the media tools, which cost money.
const NEVER_IN_A_LEG: [&str; 6] = [
    "subagents",
    "background_subagents",
    "edit_file",
    "remove_file",
    "restore_file",
    "generate_*",
];

#[derive(Deserialize, JsonSchema, Clone, Copy)]
#[serde(rename_all = "snake_case")]
enum Reasoning {
    Low,
    Medium,
    High,
}

impl Reasoning {
    fn as_str(self) -> &'static str {
        match self {
            Reasoning::Low => "low",
            Reasoning::Medium => "medium",
            Reasoning::High => "high",
        }
    }
}

/// What both agent tools take to set a leg up, beside its task.
struct LegChoice<'a> {
    name: Option<&'a str>,
    session_id: Option<&'a str>,
    model: Option<&'a str>,
    reasoning: Option<Reasoning>,
    system_prompt: Option<&'a str>,
    exclude_tools: Option<&'a [String]>,
}

/// The leg a call asks for: its session (`<parent>:sub:<name>`, the given session_id, or
/// `<parent>:sub:<fresh_leaf>`), the parent's exclusions plus [`NEVER_IN_A_LEG`] plus the
/// call's own, and a cancel token of the caller's choosing.
fn leg_request(
    cx: &ToolContext,
    task: String,
    choice: &LegChoice<'_>,
    fresh_leaf: &str,
    cancel: CancellationToken,
) -> Result<LegRequest, ToolError> {
    let parent = cx.session_id.to_string();
    let session = match choice.session_id {
        Some(id) => match dispatch_engine::ids::session_id_problem(id) {
            None => id.to_string(),
            Some(problem) => return Err(ToolError::failed(format!("session_id: {problem}"))),
        },
        None => format!(
            "{}:sub:{}",
            short_parent(&parent),
            choice.name.unwrap_or(fresh_leaf)
        ),
    };
    if session == parent {
        return Err(ToolError::failed(
            "session_id is this session; a subagent runs in a session of its own",
        ));
    }
    let mut exclude: Vec<String> = cx.exclude.entries().to_vec();
    exclude.extend(NEVER_IN_A_LEG.iter().map(|s| s.to_string()));
    exclude.extend(choice.exclude_tools.unwrap_or_default().iter().cloned());
    Ok(LegRequest {
        parent,
        session,
        task,
        model: choice.model.map(str::to_string),
        reasoning: choice.reasoning.map(|r| r.as_str().to_string()),
        system_prompt: choice.system_prompt.map(str::to_string),
        exclude,
        cancel,
        progress: None,
    })
}

/// A long parent id shortened by a hash, so a leg's session id stays within the id limit.
fn short_parent(parent: &str) -> String {
    if parent.len() > 48 {
        let head: String = parent.chars().take(32).collect();
        format!("{head}-{}", short_hash(parent))
    } else {
        parent.to_string()
    }
}

fn short_hash(text: &str) -> String {
    blake3::hash(text.as_bytes()).to_hex()[..12].to_string()
}

/// The first line of every leg's result: which model, which session, what it cost.
fn leg_header(model: &str, session: &str, input_tokens: u64, output_tokens: u64) -> String {
    format!(
        "[subagent · {model} · session={session} · usage: {input_tokens}/{output_tokens} tokens]"
    )
}

/// Why a leg stopped without an answer, and what it had by then.
fn stopped_text(why: &str, answer: &str) -> String {
    format!(
        "the subagent stopped without an answer: {why}{}",
        if answer.is_empty() {
            String::new()
        } else {
            format!("\nwhat it had: {answer}")
        }
    )
}
