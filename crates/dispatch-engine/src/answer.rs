//! Parking a run on the user and resuming it (spec §1.4, DESIGN §3.15): a call that needs
//! the user (ask_user, store_secret) parks its run, and the user's answer later becomes that
//! call's result, committed as the run's next round. The caller appends it to the
//! conversation and calls the model again.

use std::collections::HashMap;
use std::sync::Arc;

use dispatch_store::{PendingTask, TranscriptEntry, TranscriptMessage};
use serde_json::{Value, json};

use crate::deferred::RUN_TOOL;
use crate::engine::{Engine, EngineError};
use crate::events::EventKind;
use crate::preflight::split_run_tool;
use crate::registry::truncate_chars;
use crate::round::{RoundCx, RoundOutcome, RoundRequest, now_unix_ms};
use crate::slot::{Slot, SlotState};
use crate::spec::Effect;
use crate::status::Status;
use crate::wire::{IdOrigin, RawCall};

/// The user's answers to one pending task.
pub struct AnswerRequest {
    /// The `task_hash` of the pending task (from the `Pending` event or the round report).
    pub task: String,
    /// One answer per question, in order.
    pub answers: Vec<String>,
    /// The user cancelled the task instead of answering it (`answers` is not read): the
    /// asking call's result says so, with status `declined`.
    pub user_cancelled: bool,
    /// The session, the wire format, cancellation and the live event channel; the run and the
    /// call come from the pending task.
    pub request: RoundRequest,
}

impl AnswerRequest {
    pub fn new(session: impl Into<String>, task: impl Into<String>, answers: Vec<String>) -> Self {
        AnswerRequest {
            request: RoundRequest::new(
                session,
                String::new(),
                crate::wire::Provider::OpenAi,
                Vec::new(),
            ),
            task: task.into(),
            answers,
            user_cancelled: false,
        }
    }

    /// The user cancels the task: the run goes on without the answer (see `user_cancelled`).
    pub fn cancel(session: impl Into<String>, task: impl Into<String>) -> Self {
        AnswerRequest {
            user_cancelled: true,
            ..AnswerRequest::new(session, task, Vec::new())
        }
    }
}

/// Most characters of one result, and of one call's arguments, a pending task keeps.
const PENDING_RESULT_CHARS: usize = 2_000;
const PENDING_ARGS_CHARS: usize = 1_000;

impl Engine {
    /// The session's runs parked on the user, oldest first.
    pub async fn pending(&self, session: &str) -> Result<Vec<PendingTask>, EngineError> {
        Ok(self.store.pending(session).await?)
    }

    /// Deliver the user's answers to a pending task: the parked call finishes with them, its
    /// result is committed in the task's run (removing the task in the same commit, so an
    /// answer lands once), and the outcome carries that one result. A cancel
    /// ([`AnswerRequest::cancel`]) commits the same way, with a result that tells the model
    /// the user cancelled.
    pub async fn answer(&self, req: AnswerRequest) -> Result<RoundOutcome, EngineError> {
        self.hold_session(&req.request.session)
            .await
            .answer(req)
            .await
    }

    /// [`Engine::answer`] once the session is held.
    pub(crate) async fn answer_held(
        &self,
        req: AnswerRequest,
    ) -> Result<RoundOutcome, EngineError> {
        let session = req.request.session.clone();
        let pending = self.store.pending(&session).await?;
        let Some(task) = pending.iter().find(|t| t.task_hash == req.task).cloned() else {
            return Err(EngineError::NoSuchTask {
                session,
                task: req.task,
                pending: pending.into_iter().map(|t| t.task_hash).collect(),
            });
        };
        let expected = task.questions.as_array().map_or(0, Vec::len);
        if !req.user_cancelled && req.answers.len() != expected {
            return Err(EngineError::BadAnswer(format!(
                "task {} asks {expected} question(s) and got {} answer(s); give one answer per question, in order",
                task.task_hash,
                req.answers.len()
            )));
        }
        let tool = match self.registry().get(&task.tool) {
            Some(registered) => Some(registered.tool.clone()),
            // A cancel runs nothing, so the tool need not be here.
            None if req.user_cancelled => None,
            None => {
                return Err(EngineError::BadAnswer(format!(
                    "task {} waits on {}, which this dispatcher does not have; answer it where it was asked",
                    task.task_hash, task.tool
                )));
            }
        };

        let mut round = req.request;
        round.run = task.run.clone();
        round.calls = Vec::new();
        let mut cx = self.begin(round).await?;
        let call = RawCall {
            id_origin: if task.id_made_up {
                IdOrigin::MadeUp
            } else {
                IdOrigin::Sent
            },
            // Named as the model called it, so the answer's result matches the call.
            ..RawCall::new(
                task.tool_call_id.clone(),
                task.called_as.clone().unwrap_or_else(|| task.tool.clone()),
                task.args.to_string(),
            )
        };
        let args = match task.args {
            Value::Null => Value::Object(Default::default()),
            args => args,
        };
        let mut slot = Slot {
            id: Arc::from(call.id.as_str()),
            name: Arc::from(task.tool.as_str()),
            args_raw: Arc::from(call.arguments.as_str()),
            key: None,
            effect: Effect::Observes,
            state: SlotState::Parked,
        };
        let tool = match tool {
            Some(tool) if !req.user_cancelled => tool,
            _ => {
                // Cancelled: the call never runs, and its result tells the model why.
                let text = format!(
                    "The user cancelled this {} instead of answering it, so there is no answer. Do not ask it again; go on without it, or end the turn and say what you could not do without it.",
                    task.tool
                );
                cx.emit(EventKind::ToolSkipped {
                    tool_id: slot.id.clone(),
                    tool_name: slot.name.clone(),
                    tool_args: slot.args_raw.clone(),
                    text: "cancelled by the user".to_string(),
                });
                slot.state = SlotState::Settled {
                    status: Status::Declined,
                    text,
                    images: Vec::new(),
                };
                cx.record.answered.push(task.task_hash);
                let mut slots = vec![slot];
                let results = cx.commit(&[call], &mut slots);
                return cx.finish(results).await;
            }
        };
        slot.effect = tool.effect(&args);
        slot.state = SlotState::Ready { tool, args };
        let mut slots = vec![slot];
        cx.execute_answered(&mut slots, 0, req.answers).await;
        if cx.req.cancel.is_cancelled() {
            return cx.cancelled(&slots).await;
        }
        cx.record.answered.push(task.task_hash);
        cx.recall_errors(&slots).await;
        let results = cx.commit(&[call], &mut slots);
        cx.finish(results).await
    }
}

/// `{name, id, args, result}` of every result in `entries` (a run's transcript, oldest first):
/// what a pending task holds, so whoever answers sees what the run did so far (seed checklist
/// item 84). Results and arguments are clamped; arguments are the tool's own (a run_tool
/// call's inner ones), as the transcript keeps them.
pub(crate) fn results_so_far<'a>(
    entries: impl IntoIterator<Item = &'a TranscriptEntry>,
) -> Vec<Value> {
    let mut args_of: HashMap<&str, Value> = HashMap::new();
    let mut out = Vec::new();
    for entry in entries {
        match &entry.message {
            TranscriptMessage::Assistant { tool_calls } => {
                for call in tool_calls {
                    args_of.insert(&call.id, pending_args(&call.name, &call.arguments));
                }
            }
            TranscriptMessage::Tool {
                tool_call_id,
                name,
                content,
            } => {
                let mut result = content.clone();
                truncate_chars(&mut result, PENDING_RESULT_CHARS);
                let args = args_of.get(tool_call_id.as_str()).cloned();
                out.push(json!({
                    "name": name,
                    "id": tool_call_id,
                    "args": args.unwrap_or(Value::Null),
                    "result": result,
                }));
            }
            TranscriptMessage::User { .. } => {}
        }
    }
    out
}

/// A recorded call's arguments for a pending task: parsed when they are JSON and short, else
/// their text, clamped.
fn pending_args(name: &str, raw: &str) -> Value {
    let unwrapped = if name == RUN_TOOL {
        split_run_tool(raw).ok()
    } else {
        None
    };
    let (text, parsed) = match unwrapped {
        Some((_, inner, parsed)) => (inner, parsed),
        None => (raw.to_string(), serde_json::from_str(raw).ok()),
    };
    match parsed {
        Some(args) if text.chars().count() <= PENDING_ARGS_CHARS => args,
        _ => {
            let mut text = text;
            truncate_chars(&mut text, PENDING_ARGS_CHARS);
            Value::String(text)
        }
    }
}

impl RoundCx<'_> {
    /// Spec §1.4: a ready call that needs the user (ask_user, store_secret), with no one to
    /// answer inline, parks the run: the other ready calls are not run, and the answer later
    /// becomes the parked call's result (`Engine::answer`).
    pub(crate) fn park_for_ask_user(
        &mut self,
        calls: &[RawCall],
        slots: &mut [Slot],
    ) -> Option<PendingTask> {
        if self.engine.confirmer.interactive() {
            return None;
        }
        let ask_index = slots.iter().position(|s| match &s.state {
            SlotState::Ready { tool, .. } => tool.spec().asks_user,
            _ => false,
        })?;
        let ask_name = slots[ask_index].name.clone();
        let mut parked = None;
        for (i, slot) in slots.iter_mut().enumerate() {
            if i == ask_index {
                if let SlotState::Ready { tool, args, .. } =
                    std::mem::replace(&mut slot.state, SlotState::Parked)
                {
                    parked = Some((tool, args));
                }
                continue;
            }
            if matches!(slot.state, SlotState::Ready { .. } | SlotState::SameAs(_)) {
                slot.state = SlotState::Settled {
                    status: Status::NotRun,
                    text: format!(
                        "tool={} failed: not run — the round paused to ask the user ({ask_name}); call it again after the answer if you still need it.",
                        slot.name
                    ),
                    images: Vec::new(),
                };
            }
        }
        let (tool, args) = parked?;
        let slot = &slots[ask_index];
        let task_hash = blake3::hash(
            format!(
                "{}|{}|{}|{}",
                self.req.session, self.req.run, self.record.round, slot.id
            )
            .as_bytes(),
        )
        .to_hex()[..16]
            .to_string();
        let questions = serde_json::to_value(tool.questions(&args)).unwrap_or(Value::Null);
        // The call as the model sent it: its answer goes back with the same id and name.
        let call = calls.iter().find(|c| *c.id == *slot.id);
        let pending = PendingTask {
            task_hash: task_hash.clone(),
            session: self.req.session.clone(),
            run: self.req.run.clone(),
            tool_call_id: slot.id.to_string(),
            id_made_up: call.is_some_and(|c| c.id_origin == IdOrigin::MadeUp),
            called_as: call
                .map(|c| c.name.clone())
                .filter(|called| *called != *ask_name),
            tool: ask_name.to_string(),
            state: tool.parked_state(&args),
            args,
            questions,
            tool_results: Vec::new(),
            todos: self.session.todos.clone(),
            created_at_ms: now_unix_ms(),
        };
        self.emit(EventKind::Pending {
            task_hash: task_hash.clone(),
            pending_session: self.req.session.clone(),
            text: task_hash,
        });
        Some(pending)
    }
}
