//! Command tools: run_command (run to completion) and background_command (start, read, stop).
//!
//! Both take an argv rather than a shell string, run in a directory confined to the work
//! directory, inherit an environment scrubbed of secrets, and lead their own process group so
//! that stopping a command also stops everything it started ([`process`]).

mod background_command;
pub(crate) mod capture;
mod git;
mod jobs;
pub mod process;
pub mod readonly;
mod run_command;
mod subject;

pub use background_command::BackgroundCommand;
pub use readonly::ReadOnlyCommands;
pub use run_command::RunCommand;

#[cfg(test)]
mod hostile_tests;
#[cfg(test)]
mod tests;
