//! dispatch-engine: one model reply's tool calls in, their results out — checked, run and
//! committed in call order, in the provider's wire format, with events.
//!
//! Read in this order: [`spec`] and [`tool`] (what a tool is), [`registry`], [`engine`] (how
//! an engine is set up), [`round`] (one round, start to end), then the passes: [`preflight`]
//! (pass 1), [`scheduler`] (pass 2), [`commit`] (pass 3), over the calls' slots (`slot.rs`).
//! The engine knows no concrete tool and no database; tools and stores plug in through traits.

mod answer;
pub mod canonical;
pub mod client;
mod commit;
pub mod deferred;
pub mod engine;
mod escapes;
pub mod events;
pub mod gate;
mod handoff;
pub mod hints;
pub mod ids;
mod preflight;
pub mod redact;
pub mod registry;
pub mod round;
pub mod rules;
mod scheduler;
pub mod sensitive;
pub mod shaping;
mod slot;
pub mod spec;
pub mod spill;
pub mod status;
pub mod subject;
pub mod tool;
pub mod wire;

pub use answer::AnswerRequest;
pub use client::{ClientToolProblem, ClientTools, check_client_tools};
pub use deferred::{CORE_TOOLS, Catalog, ClientTool, register_system_tools};
pub use engine::{
    DEFAULT_MAX_CALLS_PER_ROUND, Engine, EngineConfig, EngineError, HeldSession, ToolSource,
    default_max_concurrent,
};
pub use events::{Event, EventKind, EventSink};
pub use gate::{ApproveAll, ConfirmReply, ConfirmRequest, Confirmer, Headless, Question};
pub use redact::ToolSecrets;
pub use registry::{CompiledSchema, Registry, RegistryError, SchemaProblem};
pub use round::{RoundOutcome, RoundRequest};
pub use slot::SlotResult;
pub use spec::{CachePolicy, Concurrency, Effect, Gate, Origin, ToolSpec};
pub use status::Status;
pub use subject::{Access, Subject};
pub use tool::{CachePut, Exclude, Progress, Tool, ToolContext, ToolError, ToolOutput};
pub use wire::{IdOrigin, Provider, RawCall};
