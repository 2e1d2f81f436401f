mod bench;
mod cli;
mod config;
mod crash;
mod replay;
mod store;
pub mod support;
