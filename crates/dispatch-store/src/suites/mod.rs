//! Suites of tests every backend must pass, one module per trait; each runs its checks
//! against the memory store, SQLite, and Redis when one answers on 127.0.0.1.

mod agents;
mod cache;
mod chat;
mod chatbots;
mod errors;
mod files;
mod maintenance;
mod secrets;
pub(crate) mod session;
