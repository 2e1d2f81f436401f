//! The agent loop behind the daemon's `POST /v1/sessions/{id}/agent`: a turn of
//! [`dispatch_model::Agent`] whose rounds run as the API's rounds do (on the session's feed,
//! approved by whoever watches), with the model's side announced on the same feed.

use std::sync::Arc;

use async_trait::async_trait;
use axum::http::StatusCode;
use dispatch_engine::{AnswerRequest, RoundOutcome, RoundRequest};
use dispatch_model::{
    Agent, AgentError, AgentEvent, AgentRequest, ModelClient, RoundRunner, TaskAnswer,
};
use dispatch_server::error::ApiError;
use dispatch_server::{AgentDriver, AgentTurn, Daemon};
use serde_json::Value;

use crate::config::Models;

pub struct DaemonAgents {
    pub store: Arc<dyn dispatch_store::Store>,
    pub models: Models,
}

#[async_trait]
impl AgentDriver for DaemonAgents {
    fn models(&self) -> Vec<String> {
        self.models.0.iter().map(|(n, _)| n.clone()).collect()
    }

    async fn turn(&self, daemon: &Arc<Daemon>, turn: AgentTurn) -> Result<Value, ApiError> {
        let (name, config) = self
            .models
            .pick(turn.model.as_deref())
            .map_err(|e| ApiError::bad_request("unknown_model", e))?;
        // Resolved at each turn: a secret stored since the daemon started is used.
        let key = crate::agent_cmd::resolve_key(config, self.store.as_ref())
            .await
            .map_err(|e| ApiError::bad_request("model_key", e.message))?;
        let client = ModelClient::new(config.clone(), key)
            .map_err(|e| ApiError::bad_request("model_config", e.to_string()))?;
        let agent = Agent::new(
            daemon.engine.clone(),
            self.store.clone(),
            Arc::new(client),
            name,
        );
        let mut req = AgentRequest::new(turn.session, turn.task);
        if let Some(n) = turn.max_rounds {
            req.max_rounds = n;
        }
        req.exclude = turn.exclude;
        req.cancel = turn.cancel;
        req.answer = turn
            .answer
            .map(|(task, answers)| TaskAnswer { task, answers });
        let announce = turn.announce;
        req.on_event = Some(Arc::new(move |event: AgentEvent| {
            announce(agent_event(&event));
        }));
        req.rounds = Some(Arc::new(DaemonRounds(daemon.clone())));
        let outcome = agent.run(req).await.map_err(agent_error)?;
        serde_json::to_value(&outcome)
            .map_err(|e| ApiError::internal(format!("cannot write the agent's outcome: {e}")))
    }
}

/// An [`AgentEvent`] as a feed event: its `type` prefixed with `Agent` (`AgentModelCall`…),
/// so a watcher tells the model's side from the rounds' events.
fn agent_event(event: &AgentEvent) -> Value {
    let mut value = serde_json::to_value(event).unwrap_or(Value::Null);
    if let Some(kind) = value.get("type").and_then(Value::as_str) {
        let prefixed = format!("Agent{kind}");
        value["type"] = Value::String(prefixed);
    }
    value
}

fn agent_error(e: AgentError) -> ApiError {
    match e {
        AgentError::Model(e) => ApiError::new(
            StatusCode::BAD_GATEWAY,
            "model_failed",
            format!(
                "the model request failed: {e}; the rounds before it are kept, so sending a task again continues the session"
            ),
        ),
        e @ AgentError::WaitsOnUser { .. } => ApiError::new(
            StatusCode::CONFLICT,
            "agent_waiting",
            format!("{e} (POST this endpoint with {{\"answer\": {{\"task\", \"answers\"}}}})"),
        ),
        AgentError::Conversation(text) => {
            ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "agent_failed", text)
        }
        AgentError::Cancelled | AgentError::Dispatch(_) => ApiError::shutting_down(),
        AgentError::Engine(e) => ApiError::internal(e.to_string()),
        AgentError::Store(e) => ApiError::internal(e.to_string()),
    }
}

/// Runs the loop's rounds through the daemon, like `POST /v1/sessions/{id}/rounds`.
struct DaemonRounds(Arc<Daemon>);

#[async_trait]
impl RoundRunner for DaemonRounds {
    async fn round(&self, req: RoundRequest) -> Result<RoundOutcome, AgentError> {
        match dispatch_server::api::run_round(&self.0, req).await {
            Ok(outcome) => Ok(outcome?),
            Err(e) => Err(AgentError::Dispatch(e.message)),
        }
    }

    async fn answer(&self, req: AnswerRequest) -> Result<RoundOutcome, AgentError> {
        match dispatch_server::api::run_answer(&self.0, req).await {
            Ok(outcome) => Ok(outcome?),
            Err(e) => Err(AgentError::Dispatch(e.message)),
        }
    }
}
