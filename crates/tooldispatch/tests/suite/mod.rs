mod bench;
mod cli;
mod config;
mod crash;
mod files;
mod interactive;
mod replay;
mod store;
pub mod support;
