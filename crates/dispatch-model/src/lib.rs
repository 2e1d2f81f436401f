//! Model providers and the agent loop ([`Agent`]). Providers: one request per model turn to OpenAI Chat Completions (or any compatible
//! server), OpenAI Responses, Anthropic Messages or Gemini generateContent, streamed, retried on
//! 429/5xx, with token usage.
//!
//! The history and the tools array are provider-native JSON (the engine's wire formats render
//! results and tools), so this crate never translates between providers: a turn's `message` is
//! what the engine's `parse_reply` reads and what the next request carries back.

mod agent;
mod anthropic;
mod client;
mod config;
mod error;
mod filter;
mod gemini;
mod history;
mod legs;
mod media;
mod openai;
mod responses;
mod retry;
mod sse;

pub use agent::{
    Agent, AgentEnd, AgentError, AgentEvent, AgentOutcome, AgentRequest, DEFAULT_MAX_ROUNDS,
    DEFAULT_SYSTEM_PROMPT, RoundRunner, TaskAnswer, user_message,
};
pub use client::{ModelClient, ModelEvent, StopReason, Turn, TurnRequest, Usage};
pub use config::{ApiKey, KeySource, ModelConfig, ProviderKind, Reasoning};
pub use error::ModelError;
pub use filter::{DEFAULT_FILTER_TIMEOUT, ModelResultFilter};
pub use history::append_round;
pub use legs::AgentLegs;
pub use media::OpenAiMedia;
pub use retry::{RetryPolicy, retry_after};
pub use sse::{SseEvent, SseParser};
