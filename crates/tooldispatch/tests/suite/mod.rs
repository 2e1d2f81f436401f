mod bench;
mod cli;
mod config;
mod replay;
mod store;
pub mod support;
