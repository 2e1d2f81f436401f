//! Resuming a parked run (spec §1.4, DESIGN §3.15): the user's answer to a call that needed
//! them (ask_user, store_secret) becomes that call's result, committed as the run's next round.
//! The caller appends it to the conversation and calls the model again.

use std::sync::Arc;

use dispatch_store::PendingTask;
use serde_json::Value;

use crate::round::{Engine, EngineError, RoundOutcome, RoundRequest};
use crate::slot::{Slot, SlotState};
use crate::wire::RawCall;

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
        let Some(tool) = self.registry.get(&task.tool).map(|r| r.tool.clone()) else {
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
            id: task.tool_call_id.clone(),
            name: task.tool.clone(),
            arguments: task.args.to_string(),
        };
        let args = match task.args {
            Value::Null => Value::Object(Default::default()),
            args => args,
        };
        let mut slots = vec![Slot {
            id: Arc::from(call.id.as_str()),
            name: Arc::from(call.name.as_str()),
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
