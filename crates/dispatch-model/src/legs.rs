//! The agent loop as the runner of `subagents` and `background_subagents` legs: each leg is an
//! [`Agent`] turn over the same engine, in the leg's own session, with the model it asked for.
//! A leg that wants progress hears of each model call and each tool call's start and end, one
//! line each (never the streamed text).

use std::sync::{Arc, Weak};

use async_trait::async_trait;
use dispatch_engine::{Engine, Event, EventKind, EventSink};
use dispatch_store::Store;
use dispatch_tools::agents::{LegOutcome, LegProgress, LegRequest, LegRunner};

use crate::{Agent, AgentEnd, AgentEvent, AgentRequest, ModelClient, ModelConfig, Reasoning};

pub struct AgentLegs {
    /// Weak: the engine's own registry holds the subagents tool that holds this runner.
    engine: Weak<Engine>,
    store: Arc<dyn Store>,
    /// `[models.<name>]` in file order, the default first.
    models: Vec<(String, ModelConfig)>,
}

impl AgentLegs {
    pub fn new(
        engine: Weak<Engine>,
        store: Arc<dyn Store>,
        models: Vec<(String, ModelConfig)>,
    ) -> Self {
        AgentLegs {
            engine,
            store,
            models,
        }
    }

    /// The model a leg asked for, its key resolved now (a secret may have been stored since
    /// the process started).
    async fn client(&self, leg: &LegRequest) -> Result<(String, ModelClient), String> {
        let (name, config) = match &leg.model {
            None => self.models.first(),
            Some(wanted) => self.models.iter().find(|(n, _)| n == wanted),
        }
        .ok_or_else(|| {
            let names: Vec<&str> = self.models.iter().map(|(n, _)| n.as_str()).collect();
            match &leg.model {
                Some(wanted) => format!(
                    "no model named {wanted:?}; use one of: {}",
                    names.join(", ")
                ),
                None => "no model is configured".to_string(),
            }
        })?;
        let mut config = config.clone();
        if let Some(effort) = &leg.reasoning {
            config.reasoning = Some(match effort.as_str() {
                "low" => Reasoning::Low,
                "high" => Reasoning::High,
                _ => Reasoning::Medium,
            });
        }
        let secret = match config.key_source().map_err(|e| e.to_string())? {
            crate::KeySource::Secret(name) => self
                .store
                .secret_get(&name)
                .await
                .map_err(|e| e.to_string())?,
            _ => None,
        };
        let key = config
            .resolve_key(&|_| secret.clone(), &|var| std::env::var(var).ok())
            .map_err(|e| e.to_string())?;
        let client = ModelClient::new(config, key).map_err(|e| e.to_string())?;
        Ok((name.clone(), client))
    }
}

#[async_trait]
impl LegRunner for AgentLegs {
    async fn run_leg(&self, leg: LegRequest) -> Result<LegOutcome, String> {
        let engine = self
            .engine
            .upgrade()
            .ok_or_else(|| "the dispatcher is shutting down".to_string())?;
        let (name, client) = self.client(&leg).await?;
        let agent = Agent::new(engine, self.store.clone(), Arc::new(client), name.clone());
        let mut req = AgentRequest::new(leg.session, leg.task);
        req.parent_session = Some(leg.parent);
        req.exclude = leg.exclude;
        req.system_prompt = leg.system_prompt;
        req.cancel = leg.cancel;
        if let Some(progress) = leg.progress {
            req.on_event = Some(Arc::new({
                let progress = progress.clone();
                move |event: AgentEvent| {
                    if let Some(line) = model_line(&event) {
                        progress(line);
                    }
                }
            }));
            req.round_events = Some(Arc::new(ToolLines(progress)));
        }
        let outcome = agent.run(req).await.map_err(|e| e.to_string())?;
        let (answer, stopped) = match outcome.end {
            AgentEnd::Answer { text } => (text, None),
            AgentEnd::Stopped { reason, text } => (text, Some(reason)),
            AgentEnd::MaxRounds { rounds } => (
                String::new(),
                Some(format!("{rounds} rounds of tool calls without an answer")),
            ),
            AgentEnd::Waiting { task } => (
                String::new(),
                Some(format!(
                    "it waits on the user ({}, task {})",
                    task.tool, task.task_hash
                )),
            ),
            AgentEnd::Fatal { reason } => (String::new(), Some(reason)),
            AgentEnd::HandedBack => (String::new(), Some("it called a client tool".to_string())),
        };
        Ok(LegOutcome {
            model: name,
            answer,
            stopped,
            input_tokens: outcome.input_tokens,
            output_tokens: outcome.output_tokens,
        })
    }

    fn models(&self) -> Vec<String> {
        self.models.iter().map(|(n, _)| n.clone()).collect()
    }
}

/// A model event as a progress line; streamed text is not one.
fn model_line(event: &AgentEvent) -> Option<String> {
    match event {
        AgentEvent::ModelCall { turn, model } => Some(format!("turn {turn}: asking {model}")),
        AgentEvent::ModelText { .. } => None,
        AgentEvent::ModelRetry {
            attempt, wait_ms, ..
        } => Some(format!(
            "the model request failed; try {attempt} in {wait_ms} ms"
        )),
        AgentEvent::ModelDone {
            turn, tool_calls, ..
        } => Some(match tool_calls {
            0 => format!("turn {turn}: the model answered"),
            n => format!("turn {turn}: the model called {n} tool(s)"),
        }),
    }
}

/// A leg's round events as progress lines: each tool call as it starts and as it ends.
struct ToolLines(LegProgress);

impl EventSink for ToolLines {
    fn send(&self, event: &Arc<Event>) {
        match &event.kind {
            EventKind::ToolCallStart { tool_name, .. } => (self.0)(format!("running {tool_name}")),
            EventKind::ToolResult {
                tool_name, status, ..
            } => (self.0)(format!(
                "{tool_name}: {}",
                serde_json::to_value(status)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default()
            )),
            _ => {}
        }
    }
}
