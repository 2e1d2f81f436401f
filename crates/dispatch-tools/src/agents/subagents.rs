//! `subagents`: run a subtask in a session of its own and return its answer. At most three
//! legs of one parent session run at once; a fourth waits for a free place (its timeout keeps
//! running while it waits). A leg never gets the agent tools (no recursion) or the tools that
//! change files, and inherits the parent's exclusions (see `super::leg_request`). Legs of
//! background_subagents have places of their own and do not take these.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use async_trait::async_trait;
use dispatch_engine::{Effect, ToolContext, ToolError, ToolOutput, ToolSpec};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use tokio::sync::Semaphore;

use super::{LegChoice, Legs, Reasoning, leg_header, leg_request, short_hash, stopped_text};
use crate::BuiltinTool;

/// Legs of one parent session that run at once (the seed's cap).
pub const MAX_RUNNING_LEGS: usize = 3;

/// A leg's whole time, waiting for a place included (the seed's subagent timeout).
const LEG_TIMEOUT: Duration = Duration::from_secs(30 * 60);

#[derive(Deserialize, JsonSchema, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
enum Mode {
    Invoke,
    List,
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
        let runner = self.legs.runner()?;
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
        let fresh = format!(
            "tmp-{}",
            short_hash(&format!(
                "{parent}|{}|{:?}",
                cx.call_id,
                std::time::SystemTime::now()
            ))
        );
        let choice = LegChoice {
            name: args.name.as_deref(),
            session_id: args.session_id.as_deref(),
            model: args.model.as_deref(),
            reasoning: args.reasoning,
            system_prompt: args.system_prompt.as_deref(),
            exclude_tools: args.exclude_tools.as_deref(),
        };
        let leg = leg_request(&cx, task, &choice, &fresh, cx.cancel.clone())?;
        let session = leg.session.clone();
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
            .run_leg(leg)
            .await
            .map_err(|e| ToolError::failed(format!("the subagent failed: {e}")))?;
        let header = leg_header(
            &outcome.model,
            &session,
            outcome.input_tokens,
            outcome.output_tokens,
        );
        match outcome.stopped {
            None => Ok(ToolOutput::text(format!("{header}\n{}", outcome.answer))),
            Some(why) => Err(ToolError::failed(format!(
                "{header}\n{}",
                stopped_text(&why, &outcome.answer)
            ))),
        }
    }
}
