//! `POST /v1/sessions/{id}/agent`: one user turn of a whole agent, run by the daemon. The
//! daemon does not know models: its caller gives it an [`AgentDriver`] (tooldispatch's serve
//! command runs the agent loop of dispatch-model). The turn's rounds run as the API's do, on
//! the session's feed, so the console shows them and approves their calls; the model's side
//! (each request, its text, retries, the end) goes on the same feed as `Agent*` events.

use std::sync::Arc;

use async_trait::async_trait;
use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::Daemon;
use crate::api::{json_text, session_id};
use crate::error::ApiError;

/// One user turn for the driver.
pub struct AgentTurn {
    pub session: String,
    /// What the user asks (empty when `answer` is given).
    pub task: String,
    /// The answers to the task the session's agent waits on (`task_hash`, one per question):
    /// the waiting turn goes on instead of a new one starting.
    pub answer: Option<(String, Vec<String>)>,
    /// A configured model's name; `None`: the default.
    pub model: Option<String>,
    /// `None`: the driver's default.
    pub max_rounds: Option<u32>,
    /// The session's exclusions (from `POST /v1/sessions`).
    pub exclude: Vec<String>,
    /// Cancelled when the daemon's shutdown grace ends.
    pub cancel: CancellationToken,
    /// Puts an event of the model's side on the session's feed (`type` starts with `Agent`).
    pub announce: Arc<dyn Fn(Value) + Send + Sync>,
}

/// Runs agent turns for the daemon.
#[async_trait]
pub trait AgentDriver: Send + Sync {
    /// The models a turn may name, the default first.
    fn models(&self) -> Vec<String>;

    /// Run the turn to its end, its rounds through [`crate::api::run_round`]; the outcome as
    /// JSON (`end.kind`: answer, waiting, handed_back, fatal, max_rounds, stopped).
    async fn turn(&self, daemon: &Arc<Daemon>, turn: AgentTurn) -> Result<Value, ApiError>;
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TurnBody {
    #[serde(default)]
    task: String,
    answer: Option<TurnAnswer>,
    model: Option<String>,
    max_rounds: Option<u32>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TurnAnswer {
    task: String,
    answers: Vec<String>,
}

/// Takes the session's one agent turn slot; gives it back when dropped.
struct Busy<'a> {
    daemon: &'a Daemon,
    session: String,
}

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        crate::hub::lock(&self.daemon.agent_turns).remove(&self.session);
    }
}

/// `POST /v1/sessions/{id}/agent`
pub async fn turn(
    State(daemon): State<Arc<Daemon>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    let id = session_id(id)?;
    let Some(driver) = daemon.agent.get().cloned() else {
        return Err(ApiError::new(
            StatusCode::NOT_IMPLEMENTED,
            "no_model",
            "this daemon has no model to run an agent with: add a [models.<name>] table to tooldispatch's config file and restart `tooldispatch serve` (see the README's Models section)",
        ));
    };
    let text = json_text(&headers, body)?;
    let body: TurnBody = serde_json::from_str(&text).map_err(|e| {
        ApiError::bad_request(
            "bad_json",
            format!("an agent turn is {{\"task\" or \"answer\": {{\"task\", \"answers\"}}, \"model\"?, \"max_rounds\"?}}: {e}"),
        )
    })?;
    match (&body.answer, body.task.trim().is_empty()) {
        (None, true) => {
            return Err(ApiError::bad_request(
                "bad_request",
                "task is empty: say what the agent should do (or send \"answer\" to go on with a turn that waits on you)",
            ));
        }
        (Some(_), false) => {
            return Err(ApiError::bad_request(
                "bad_request",
                "send either a task or an answer: an answer goes on with the waiting turn, and the task can follow once it has ended",
            ));
        }
        _ => {}
    }
    if let Some(model) = &body.model {
        let models = driver.models();
        if !models.contains(model) {
            return Err(ApiError::bad_request(
                "unknown_model",
                format!(
                    "no model named {model:?} is configured; use one of: {}",
                    models.join(", ")
                ),
            ));
        }
    }
    if daemon.hub.closing() {
        return Err(ApiError::shutting_down());
    }
    if !crate::hub::lock(&daemon.agent_turns).insert(id.clone()) {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "agent_busy",
            format!(
                "session {id} is running an agent turn already; wait for its answer (its events are on GET /v1/sessions/{id}/events), or use another session"
            ),
        ));
    }
    let info = daemon.hub.session(&id);
    let hub = daemon.hub.clone();
    let session = id.clone();
    let announce: Arc<dyn Fn(Value) + Send + Sync> =
        Arc::new(move |event: Value| hub.announce_agent(&session, &event));
    let turn = AgentTurn {
        session: id.clone(),
        task: body.task.clone(),
        answer: body.answer.map(|a| (a.task, a.answers)),
        model: body.model,
        max_rounds: body.max_rounds,
        exclude: (*info.exclude).clone(),
        cancel: daemon.stop_rounds.child_token(),
        announce: announce.clone(),
    };
    // In a task of its own: a client that hangs up does not stop the turn half-way.
    let task = tokio::spawn({
        let daemon = daemon.clone();
        async move {
            let _busy = Busy {
                daemon: &daemon,
                session: turn.session.clone(),
            };
            announce(match &turn.answer {
                None => json!({"type": "AgentStarted", "task": turn.task}),
                Some((task, _)) => json!({"type": "AgentStarted", "answered": task}),
            });
            let announce = turn.announce.clone();
            let outcome = driver.turn(&daemon, turn).await;
            match &outcome {
                Ok(outcome) => announce(json!({"type": "AgentFinished", "outcome": outcome})),
                Err(e) => announce(json!({"type": "AgentFailed", "text": e.message})),
            }
            outcome
        }
    });
    let outcome = task.await.map_err(|e| {
        ApiError::internal(format!(
            "the agent turn stopped unexpectedly ({e}); the rounds it committed stay in the session; send the task again to continue"
        ))
    })??;
    Ok(Json(outcome))
}
