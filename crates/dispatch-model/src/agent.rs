//! The agent loop: the model answers, its tool calls go through one engine round, the results
//! go back, and so on, until the model answers without calling a tool, the run waits on the
//! user, the caller's own tools are called, a tool reports a fatal error, or `max_rounds`
//! rounds have run. Each user turn is a new run of the session; the conversation is kept in the
//! store in the provider's own message format, so a session continues in the next process.

use std::sync::Arc;

use async_trait::async_trait;
use dispatch_engine::{
    AnswerRequest, Engine, EngineError, EventSink, RoundOutcome, RoundRequest, Status,
};
use dispatch_store::{AgentStore, ConversationEntry, PendingTask, StoreError};
use serde::Serialize;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::{ModelClient, ModelError, ModelEvent, ProviderKind, StopReason, TurnRequest};

/// Rounds one user turn may take before the loop stops it (the seed's default).
pub const DEFAULT_MAX_ROUNDS: u32 = 50;

/// What the agent is told before the conversation, ahead of the work directory and the
/// deferred tools' names.
pub const DEFAULT_SYSTEM_PROMPT: &str = "You are an agent working in the user's work directory with the tools you are given. Use them to do the task, check your work, and end with a short answer that says what you did and what you found. Ask the user (ask_user) only when you cannot go on without them.";

/// One user turn for the loop.
pub struct AgentRequest {
    pub session: String,
    pub task: String,
    pub max_rounds: u32,
    /// Replaces [`DEFAULT_SYSTEM_PROMPT`].
    pub system_prompt: Option<String>,
    /// Tools (or `prefix*`) the model may not use.
    pub exclude: Vec<String>,
    /// Every call of the turn is allowed: the gate applies deny rules only.
    pub allow_all: bool,
    pub cancel: CancellationToken,
    /// Sees the model's turns as they happen.
    pub on_event: Option<Arc<dyn Fn(AgentEvent) + Send + Sync>>,
    /// Sees every round event as it happens.
    pub round_events: Option<Arc<dyn EventSink>>,
    /// Runs the turn's rounds; `None`: the engine's own `round`. The daemon runs them on the
    /// session's feed, so watchers see them and approve their calls.
    pub rounds: Option<Arc<dyn RoundRunner>>,
    /// Go on with a turn that waits on the user ([`AgentEnd::Waiting`]): the answers become
    /// the asking call's result and the model is called again. `task` is not used then.
    pub answer: Option<TaskAnswer>,
    /// The session this turn works for, when not its own (a subagent leg's parent): the
    /// turn's confirmations go to whoever answers for that session.
    pub parent_session: Option<String>,
}

/// The user's answers to the task a turn waits on.
#[derive(Clone, Debug)]
pub struct TaskAnswer {
    /// The waiting task's `task_hash`.
    pub task: String,
    /// One answer per question, in order.
    pub answers: Vec<String>,
}

/// Runs the loop's rounds (and answers) in place of [`Engine::round`] and [`Engine::answer`].
#[async_trait]
pub trait RoundRunner: Send + Sync {
    async fn round(&self, req: RoundRequest) -> Result<RoundOutcome, AgentError>;
    async fn answer(&self, req: AnswerRequest) -> Result<RoundOutcome, AgentError>;
}

impl AgentRequest {
    pub fn new(session: impl Into<String>, task: impl Into<String>) -> Self {
        AgentRequest {
            session: session.into(),
            task: task.into(),
            max_rounds: DEFAULT_MAX_ROUNDS,
            system_prompt: None,
            exclude: Vec::new(),
            allow_all: false,
            cancel: CancellationToken::new(),
            on_event: None,
            round_events: None,
            rounds: None,
            answer: None,
            parent_session: None,
        }
    }
}

/// What the loop reports while it runs.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "type")]
pub enum AgentEvent {
    /// A model request starts (turn 1 is the first of this user turn).
    ModelCall { turn: u32, model: String },
    /// More of the model's answer text.
    ModelText { text: String },
    /// The request failed and is tried again.
    ModelRetry {
        attempt: u32,
        wait_ms: u64,
        reason: String,
    },
    /// The model answered.
    ModelDone {
        turn: u32,
        input_tokens: u64,
        output_tokens: u64,
        tool_calls: usize,
    },
}

/// How a user turn ended.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum AgentEnd {
    /// The model answered without calling a tool.
    Answer { text: String },
    /// The run waits on the user (ask_user or store_secret, with nobody to answer now):
    /// answer the task, then send the next message.
    Waiting { task: Box<PendingTask> },
    /// The model called the caller's own tools: run them and answer.
    HandedBack,
    /// A tool reported a fatal error; the run stops.
    Fatal { reason: String },
    /// `max_rounds` rounds ran and the model still called tools.
    MaxRounds { rounds: u32 },
    /// The model stopped without an answer (cut off at max_tokens, a safety stop…).
    Stopped { reason: String, text: String },
}

/// A finished user turn.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AgentOutcome {
    pub session: String,
    pub run: String,
    pub model: String,
    pub end: AgentEnd,
    /// Rounds of tool calls this turn ran.
    pub rounds: u32,
    pub input_tokens: u64,
    pub output_tokens: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error(transparent)]
    Model(#[from] ModelError),
    #[error(transparent)]
    Engine(#[from] EngineError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("{0}")]
    Conversation(String),
    #[error("the agent was cancelled")]
    Cancelled,
    /// A new task came while the session's turn waits on the user.
    #[error(
        "session {session} waits on the user: its {tool} call (task {task}) needs an answer before the agent can take a new task; send the answers for that task to continue"
    )]
    WaitsOnUser {
        session: String,
        tool: String,
        task: String,
    },
    /// The round could not be run where the loop runs its rounds (a daemon shutting down…).
    #[error("{0}")]
    Dispatch(String),
}

/// A model, an engine and the store the conversation lives in.
pub struct Agent {
    engine: Arc<Engine>,
    store: Arc<dyn AgentStore>,
    model: Arc<ModelClient>,
    /// The `[models.<name>]` name, for reports.
    name: String,
}

impl Agent {
    pub fn new(
        engine: Arc<Engine>,
        store: Arc<dyn AgentStore>,
        model: Arc<ModelClient>,
        name: impl Into<String>,
    ) -> Self {
        Agent {
            engine,
            store,
            model,
            name: name.into(),
        }
    }

    fn provider(&self) -> ProviderKind {
        self.model.config().provider
    }

    /// One user turn: the task, then rounds until the turn ends (see the module docs).
    pub async fn run(&self, req: AgentRequest) -> Result<AgentOutcome, AgentError> {
        if req.cancel.is_cancelled() {
            // Nothing of a turn cancelled before it starts is kept.
            return Err(AgentError::Cancelled);
        }
        let provider = self.provider();
        let wire = provider.wire();
        let api = wire.as_str();
        let stored = self.store.conversation(&req.session).await?;
        if let Some(other) = stored.iter().find(|e| e.api != api) {
            return Err(AgentError::Conversation(format!(
                "session {} holds a conversation with a {} model, which a {api} model cannot continue; use a model of that provider or another session",
                req.session, other.api
            )));
        }
        let turn_number = 1 + stored.iter().filter(|e| is_user_task(&e.message)).count();
        let mut run = format!("turn-{turn_number}");
        let mut history: Vec<Value> = stored.into_iter().map(|e| e.message).collect();
        let waiting = self.engine.pending(&req.session).await?;

        // A parked call has no result yet: the conversation cannot take a new task (its
        // provider would refuse the unanswered call) until the answer gives it one.
        let answered = match &req.answer {
            None => {
                if let Some(task) = waiting.first() {
                    return Err(AgentError::WaitsOnUser {
                        session: req.session.clone(),
                        tool: task.tool.clone(),
                        task: task.task_hash.clone(),
                    });
                }
                let user = user_message(provider, &req.task);
                self.remember(&req.session, api, vec![user.clone()]).await?;
                history.push(user);
                None
            }
            Some(answer) => {
                let Some(task) = waiting.iter().find(|t| t.task_hash == answer.task) else {
                    let open: Vec<&str> = waiting.iter().map(|t| t.task_hash.as_str()).collect();
                    return Err(AgentError::Conversation(format!(
                        "session {} has no task {} waiting for an answer{}",
                        req.session,
                        answer.task,
                        if open.is_empty() {
                            "; nothing waits, so send a new task instead".to_string()
                        } else {
                            format!(" (waiting: {})", open.join(", "))
                        }
                    )));
                };
                // The turn that asked goes on, in the run that parked.
                run = task.run.clone();
                let mut resume = AnswerRequest::new(
                    req.session.clone(),
                    task.task_hash.clone(),
                    answer.answers.clone(),
                );
                resume.request.provider = wire;
                resume.request.cancel = req.cancel.clone();
                resume.request.live = req.round_events.clone();
                let done = match &req.rounds {
                    Some(runner) => runner.answer(resume).await?,
                    None => self.engine.answer(resume).await?,
                };
                let results = done.render(wire);
                self.remember(&req.session, api, results.clone()).await?;
                history.extend(results);
                Some(done)
            }
        };
        let mut history = crate::history::coalesce(provider, history);

        let mut outcome = AgentOutcome {
            session: req.session.clone(),
            run: run.clone(),
            model: self.name.clone(),
            end: AgentEnd::MaxRounds {
                rounds: req.max_rounds,
            },
            rounds: u32::from(answered.is_some()),
            input_tokens: 0,
            output_tokens: 0,
        };
        let emit = |event: AgentEvent| {
            if let Some(on_event) = &req.on_event {
                on_event(event);
            }
        };
        for turn in 1..=req.max_rounds + 1 {
            if req.cancel.is_cancelled() {
                return Err(AgentError::Cancelled);
            }
            let (tools, context) = self
                .engine
                .tools(&req.session, wire, &[], &req.exclude)
                .await?;
            let system = format!(
                "{}\n\n{context}",
                req.system_prompt
                    .as_deref()
                    .unwrap_or(DEFAULT_SYSTEM_PROMPT)
            );
            emit(AgentEvent::ModelCall {
                turn,
                model: self.name.clone(),
            });
            let on_model = |event: ModelEvent| match event {
                ModelEvent::TextDelta(text) => emit(AgentEvent::ModelText { text }),
                ModelEvent::Retrying {
                    attempt,
                    wait,
                    reason,
                    ..
                } => emit(AgentEvent::ModelRetry {
                    attempt,
                    wait_ms: u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
                    reason,
                }),
            };
            let request = TurnRequest {
                system: &system,
                history: &history,
                tools: &tools,
            };
            let answer = self.model.turn(&request, &req.cancel, &on_model).await?;
            outcome.input_tokens += answer.usage.input_tokens;
            outcome.output_tokens += answer.usage.output_tokens;
            let calls = wire
                .format()
                .parse_reply(&answer.message.to_string())
                .map_err(|e| {
                    AgentError::Conversation(format!(
                        "the model's reply could not be read as {api} tool calls: {e}"
                    ))
                })?;
            emit(AgentEvent::ModelDone {
                turn,
                input_tokens: answer.usage.input_tokens,
                output_tokens: answer.usage.output_tokens,
                tool_calls: calls.len(),
            });
            if calls.is_empty() {
                let mut entries = Vec::new();
                crate::append_round(provider, &mut entries, &answer.message, Vec::new());
                self.remember(&req.session, api, entries).await?;
                outcome.end = match answer.stop {
                    StopReason::End | StopReason::ToolCalls => {
                        AgentEnd::Answer { text: answer.text }
                    }
                    StopReason::MaxTokens => AgentEnd::Stopped {
                        reason: "the answer reached max_tokens and is cut off".to_string(),
                        text: answer.text,
                    },
                    StopReason::Other(reason) => AgentEnd::Stopped {
                        reason: format!("the model stopped: {reason}"),
                        text: answer.text,
                    },
                };
                return Ok(outcome);
            }
            if turn > req.max_rounds {
                // The model still calls tools after the last round: its calls are not run.
                return Ok(outcome);
            }
            let mut round = RoundRequest::new(req.session.clone(), run.clone(), wire, calls);
            round.exclude = req.exclude.clone();
            round.allow_all = req.allow_all;
            round.cancel = req.cancel.clone();
            round.live = req.round_events.clone();
            round.parent_session = req.parent_session.clone();
            let done = match &req.rounds {
                Some(runner) => runner.round(round).await?,
                None => self.engine.round(round).await?,
            };
            outcome.rounds += 1;
            let mut entries = Vec::new();
            crate::append_round(provider, &mut entries, &answer.message, done.render(wire));
            self.remember(&req.session, api, entries.clone()).await?;
            history.extend(entries);
            if let Some(task) = done.pending {
                outcome.end = AgentEnd::Waiting {
                    task: Box::new(task),
                };
                return Ok(outcome);
            }
            if let Some(reason) = done.fatal {
                outcome.end = AgentEnd::Fatal { reason };
                return Ok(outcome);
            }
            if done.results.iter().any(|r| r.status == Status::Client) {
                outcome.end = AgentEnd::HandedBack;
                return Ok(outcome);
            }
        }
        Ok(outcome)
    }

    async fn remember(
        &self,
        session: &str,
        api: &str,
        messages: Vec<Value>,
    ) -> Result<(), AgentError> {
        let at_ms = now_ms();
        let entries = messages
            .into_iter()
            .map(|message| ConversationEntry {
                api: api.to_string(),
                message,
                at_ms,
            })
            .collect();
        Ok(self.store.append_conversation(session, entries).await?)
    }
}

/// The user's task as a message of `provider`'s format.
pub fn user_message(provider: ProviderKind, task: &str) -> Value {
    match provider {
        ProviderKind::Gemini => json!({"role": "user", "parts": [{"text": task}]}),
        _ => json!({"role": "user", "content": task}),
    }
}

/// A message the user wrote (not a round's results, which some formats also send as `user`).
fn is_user_task(message: &Value) -> bool {
    if message.get("role").and_then(Value::as_str) != Some("user") {
        return false;
    }
    match (message.get("content"), message.get("parts")) {
        (Some(Value::String(_)), _) => true,
        (_, Some(Value::Array(parts))) => parts.iter().all(|p| p.get("text").is_some()),
        _ => false,
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
