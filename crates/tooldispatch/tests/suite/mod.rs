mod bench;
mod cli;
mod replay;
mod store;
pub mod support;
