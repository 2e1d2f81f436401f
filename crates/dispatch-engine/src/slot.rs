//! One call of a round as the passes see it: its [`Slot`] from pre-flight to commit, what
//! running it gave ([`Execution`], [`Failure`]), and the [`SlotResult`] the caller gets back.

use std::sync::Arc;

use serde::Serialize;
use serde_json::Value;

use crate::canonical::DedupeKey;
use crate::spec::Effect;
use crate::status::Status;
use crate::tool::{Tool, ToolOutput};
use crate::wire::IdOrigin;

/// One call while the round is in flight.
pub(crate) struct Slot {
    pub id: Arc<str>,
    /// The name after trimming, `<|` cut and run_tool unwrap.
    pub name: Arc<str>,
    /// The argument text after unwrap.
    pub args_raw: Arc<str>,
    pub key: Option<DedupeKey>,
    pub state: SlotState,
    /// What the call does to the world, judged in pass 1 from its arguments
    /// (`Tool::effect`); `Observes` for a call that never runs.
    pub effect: Effect,
}

pub(crate) enum SlotState {
    /// Passed pre-flight; runs in pass 2.
    Ready { tool: Arc<dyn Tool>, args: Value },
    /// Decided in pre-flight (or by the round stopping); never runs.
    Settled {
        status: Status,
        text: String,
        images: Vec<String>,
    },
    /// The same call already has a result in this run.
    Deduped {
        text: String,
        images: Vec<String>,
        is_error: bool,
    },
    /// Same key as an earlier ready call of this round: shares its result.
    SameAs(usize),
    /// Ran in pass 2.
    Executed(Execution),
    /// Taken by the scheduler; a slot still here at commit lost its result.
    Running,
    /// The ask_user call that parked the run; answered later.
    Parked,
    /// Handed back to the client.
    Client,
}

pub(crate) struct Execution {
    pub outcome: Result<ToolOutput, Failure>,
    pub started_ms: f64,
    pub ended_ms: f64,
    /// The concurrent batch it ran in (its first call's index), when it overlapped others.
    pub batch: Option<usize>,
}

pub(crate) struct Failure {
    pub status: Status,
    pub message: String,
    /// `Some` when the tool said a credential is missing or was rejected (with its name if known).
    pub credential: Option<Option<String>>,
    pub fatal: bool,
    /// Stopped part-way (timeout, panic, cancellation): a mutating call may have half-done its work.
    pub interrupted: bool,
}

/// One call's result, in call order.
#[derive(Clone, Debug, Serialize)]
pub struct SlotResult {
    pub tool_call_id: String,
    /// `made_up` when the provider sent the call without an id: `tool_call_id` then names it
    /// for this report only, and the wire result carries no id.
    #[serde(skip_serializing_if = "IdOrigin::is_sent")]
    pub id_origin: IdOrigin,
    pub name: String,
    /// The name exactly as the model wrote it, when that is not `name` (`run_tool` for a
    /// wrapped call, or spaces around the name): formats that match a result to its call by
    /// name (Gemini, claude-code) answer with this one.
    #[serde(skip)]
    pub called_as: Option<String>,
    pub status: Status,
    /// The model should read the content as a failure (a deduplicated failure is one too).
    pub is_error: bool,
    pub content: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<String>,
    pub started_ms: Option<f64>,
    pub ended_ms: Option<f64>,
}
