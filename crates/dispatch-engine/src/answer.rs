//! Parking a run on the user and resuming it (spec §1.4, DESIGN §3.15): a call that needs
//! the user (ask_user, store_secret) parks its run, and the user's answer later becomes that
//! call's result, committed as the run's next round. The caller appends it to the
//! conversation and calls the model again.

use std::sync::Arc;

use dispatch_store::PendingTask;
use serde_json::Value;

use crate::engine::{Engine, EngineError};
use crate::events::EventKind;
use crate::round::{RoundCx, RoundOutcome, RoundRequest, now_unix_ms};
use crate::slot::{Slot, SlotState};
use crate::status::Status;
use crate::wire::{IdOrigin, RawCall};

/// The user's answers to one pending task.
pub struct AnswerRequest {
    /// The `task_hash` of the pending task (from the `Pending` event or the round report).
    pub task: String,
    /// One answer per question, in order.
    pub answers: Vec<String>,
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
        }
    }
}

impl Engine {
    /// The session's runs parked on the user, oldest first.
    pub async fn pending(&self, session: &str) -> Result<Vec<PendingTask>, EngineError> {
        Ok(self.store.pending(session).await?)
    }

    /// Deliver the user's answers to a pending task: the parked call finishes with them, its
    /// result is committed in the task's run (removing the task in the same commit, so an
    /// answer lands once), and the outcome carries that one result.
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
        if req.answers.len() != expected {
            return Err(EngineError::BadAnswer(format!(
                "task {} asks {expected} question(s) and got {} answer(s); give one answer per question, in order",
                task.task_hash,
                req.answers.len()
            )));
        }
        let Some(tool) = self.registry().get(&task.tool).map(|r| r.tool.clone()) else {
            return Err(EngineError::BadAnswer(format!(
                "task {} waits on {}, which this dispatcher does not have; answer it where it was asked",
                task.task_hash, task.tool
            )));
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
        let mut slots = vec![Slot {
            id: Arc::from(call.id.as_str()),
            name: Arc::from(task.tool.as_str()),
            args_raw: Arc::from(call.arguments.as_str()),
            key: None,
            effect: tool.effect(&args),
            state: SlotState::Ready { tool, args },
        }];
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
