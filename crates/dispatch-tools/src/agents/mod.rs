//! Tools that run agents: `subagents` runs a subtask in a session of its own and waits for its
//! answer. The agent loop lives in dispatch-model, which builds on this crate; it puts a
//! [`LegRunner`] in the [`Legs`] slot once the engine the legs run on exists.

use std::sync::{Arc, OnceLock};

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

mod subagents;

pub use subagents::Subagents;

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
    /// Cancelled with the parent's call.
    pub cancel: CancellationToken,
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

    fn runner(&self) -> Option<Arc<dyn LegRunner>> {
        self.0.get().cloned()
    }
}
