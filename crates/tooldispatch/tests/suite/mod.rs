mod bench;
mod cli;
mod replay;
pub mod support;
