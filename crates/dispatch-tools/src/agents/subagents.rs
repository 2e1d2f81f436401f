//! `subagents`: run a subtask in a session of its own and return its answer. At most three
//! legs of one parent session run at once; a fourth waits for a free place (its timeout keeps
//! running while it waits). A leg never gets the agent tools (no recursion) or the tools that
//! change files, and inherits the parent's exclusions.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use async_trait::async_trait;
use dispatch_engine::{Effect, ToolContext, ToolError, ToolOutput, ToolSpec};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use tokio::sync::Semaphore;

use super::{LegRequest, Legs};
use crate::BuiltinTool;

/// Legs of one parent session that run at once (the seed's cap).
pub const MAX_RUNNING_LEGS: usize = 3;

/// A leg's whole time, waiting for a place included (the seed's subagent timeout).
const LEG_TIMEOUT: Duration = Duration::from_secs(30 * 60);

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

#[derive(Deserialize, JsonSchema, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
enum Mode {
    Invoke,
    List,
}

#[derive(Deserialize, JsonSchema, Clone, Copy)]
#[serde(rename_all = "snake_case")]
enum Reasoning {
    Low,
    Medium,
    High,
}

/// Run a subtask in its own session, or list the models and named sessions.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SubagentsArgs {
    /// invoke (default with a task): run it and return the answer; list: models, named sessions.
    mode: Option<Mode>,
    /// The subtask, written to stand on its own: the subagent sees nothing of this conversation.
    #[schemars(length(min = 1, max = 100000))]
    task: Option<String>,
    /// A name for the subagent's session ("researcher"); calling again with the same name
    /// continues that conversation. Without it (and without session_id) the session is new.
    #[schemars(length(min = 1, max = 64), regex(pattern = r"^[A-Za-z0-9._-]+$"))]
    name: Option<String>,
    /// Continue this exact session (as returned in a result's header).
    session_id: Option<String>,
    /// A model from mode=list (default: the first configured).
    model: Option<String>,
    /// How hard a reasoning model thinks (default: the model's setting).
    reasoning: Option<Reasoning>,
    /// Replaces the subagent's default system prompt.
    system_prompt: Option<String>,
    /// Tools the subagent may not use, on top of this session's own exclusions.
    exclude_tools: Option<Vec<String>>,
}

pub struct Subagents {
    legs: Legs,
    /// Per parent session: the places legs take; an entry goes once nothing holds it.
    places: Mutex<HashMap<String, Weak<Semaphore>>>,
    /// Named sessions started through this tool, per parent, for mode=list.
    named: Mutex<HashMap<String, Vec<String>>>,
}

impl Subagents {
    pub fn new(legs: Legs) -> Self {
        Subagents {
            legs,
            places: Mutex::default(),
            named: Mutex::default(),
        }
    }

    fn places_of(&self, parent: &str) -> Arc<Semaphore> {
        let mut places = self.places.lock().unwrap_or_else(|e| e.into_inner());
        places.retain(|_, weak| weak.strong_count() > 0);
        if let Some(places) = places.get(parent).and_then(Weak::upgrade) {
            return places;
        }
        let fresh = Arc::new(Semaphore::new(MAX_RUNNING_LEGS));
        places.insert(parent.to_string(), Arc::downgrade(&fresh));
        fresh
    }
}

/// A session id for a leg: `<parent>:sub:<name>`, or a new one; ids keep to the session rule.
fn leg_session(parent: &str, args: &SubagentsArgs, call_id: &str) -> Result<String, ToolError> {
    if let Some(id) = &args.session_id {
        return match dispatch_engine::ids::session_id_problem(id) {
            None => Ok(id.clone()),
            Some(problem) => Err(ToolError::failed(format!("session_id: {problem}"))),
        };
    }
    let leaf = match &args.name {
        Some(name) => name.clone(),
        None => format!(
            "tmp-{}",
            short_hash(&format!(
                "{parent}|{call_id}|{:?}",
                std::time::SystemTime::now()
            ))
        ),
    };
    // Long parents are shortened by a hash so the id stays within the session-id limit.
    let parent = if parent.len() > 48 {
        let head: String = parent.chars().take(32).collect();
        format!("{head}-{}", short_hash(parent))
    } else {
        parent.to_string()
    };
    Ok(format!("{parent}:sub:{leaf}"))
}

fn short_hash(text: &str) -> String {
    blake3::hash(text.as_bytes()).to_hex()[..12].to_string()
}

#[async_trait]
impl BuiltinTool for Subagents {
    const NAME: &'static str = "subagents";
    const DESCRIPTION: &'static str = "Hand a subtask to a subagent: another model run in a session of its own, with the tools but none of this conversation, and get its answer back. Write the task so it stands on its own (goal, inputs, what to return). Several calls in one reply run in parallel, at most 3 at once. name= keeps a subagent's session so a later call continues it; mode=list shows the models and named sessions.";
    type Args = SubagentsArgs;

    fn declare(&self, spec: ToolSpec) -> ToolSpec {
        // It runs without asking: each of the leg's own calls passes the gate.
        spec.read_only()
            .concurrent()
            .no_dedupe()
            .effect(Effect::Mutates)
            .timeout(LEG_TIMEOUT)
    }

    async fn run(&self, cx: ToolContext, args: SubagentsArgs) -> Result<ToolOutput, ToolError> {
        let Some(runner) = self.legs.runner() else {
            return Err(ToolError::failed(
                "no model is configured for subagents: the user adds a [models.<name>] table to tooldispatch's config file; do the subtask yourself meanwhile",
            ));
        };
        let mode = args.mode.unwrap_or(match args.task {
            Some(_) => Mode::Invoke,
            None => Mode::List,
        });
        if mode == Mode::List {
            let named = self
                .named
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(&*cx.session_id)
                .cloned()
                .unwrap_or_default();
            return Ok(ToolOutput::text(
                json!({"models": runner.models(), "named_sessions": named}).to_string(),
            ));
        }
        let Some(task) = args.task.clone().filter(|t| !t.trim().is_empty()) else {
            return Err(ToolError::failed(
                "mode=invoke needs a task: the whole subtask, written to stand on its own",
            ));
        };
        let parent = cx.session_id.to_string();
        let session = leg_session(&parent, &args, &cx.call_id)?;
        if session == parent {
            return Err(ToolError::failed(
                "session_id is this session; a subagent runs in a session of its own",
            ));
        }
        let mut exclude: Vec<String> = cx.exclude.entries().to_vec();
        exclude.extend(NEVER_IN_A_LEG.iter().map(|s| s.to_string()));
        exclude.extend(args.exclude_tools.clone().unwrap_or_default());
        let places = self.places_of(&parent);
        // Cancellation first: when the parent is cancelled, its running legs stop and free
        // their places, and a queued leg must not take one.
        let _place = tokio::select! {
            biased;
            () = cx.cancel.cancelled() => return Err(ToolError::failed("cancelled while waiting for a free subagent place")),
            place = places.acquire_owned() => place.map_err(|_| ToolError::failed("the subagent queue closed"))?,
        };
        if let Some(name) = &args.name {
            let mut named = self.named.lock().unwrap_or_else(|e| e.into_inner());
            let names = named.entry(parent.clone()).or_default();
            if !names.contains(name) {
                names.push(name.clone());
            }
        }
        let outcome = runner
            .run_leg(LegRequest {
                parent,
                session: session.clone(),
                task,
                model: args.model.clone(),
                reasoning: args.reasoning.map(|r| {
                    match r {
                        Reasoning::Low => "low",
                        Reasoning::Medium => "medium",
                        Reasoning::High => "high",
                    }
                    .to_string()
                }),
                system_prompt: args.system_prompt.clone(),
                exclude,
                cancel: cx.cancel.clone(),
            })
            .await
            .map_err(|e| ToolError::failed(format!("the subagent failed: {e}")))?;
        let header = format!(
            "[subagent · {} · session={session} · usage: {}/{} tokens]",
            outcome.model, outcome.input_tokens, outcome.output_tokens
        );
        match outcome.stopped {
            None => Ok(ToolOutput::text(format!("{header}\n{}", outcome.answer))),
            Some(why) => Err(ToolError::failed(format!(
                "{header}\nthe subagent stopped without an answer: {why}{}",
                if outcome.answer.is_empty() {
                    String::new()
                } else {
                    format!("\nwhat it had: {}", outcome.answer)
                }
            ))),
        }
    }
}
