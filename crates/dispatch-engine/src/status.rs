//! The status of one call's result (DESIGN §3.13), shown in reports, events and UIs.

use serde::Serialize;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Ran and succeeded.
    Ok,
    /// Ran and failed.
    Failed,
    /// Not run: the same call already has a result in this run.
    Deduped,
    /// Not run: not callable this way, not available, or refused by a deny rule.
    Refused,
    /// Not run: the model had not seen the schema; the schema was returned.
    NeedsSchema,
    /// Not run: no such tool.
    NotFound,
    /// Not run: the confirmation was declined or could not be asked.
    Declined,
    /// Not run: the arguments do not fit the schema.
    Invalid,
    /// Ran past its time limit and was stopped.
    TimedOut,
    /// A client tool: handed back to the caller, not run.
    Client,
    /// Not run: the round stopped before it (ask_user paused the run, or a client hand-off).
    NotRun,
}

impl Status {
    /// Whether the model should read the result as a failure.
    pub fn is_error(self) -> bool {
        !matches!(
            self,
            Status::Ok | Status::Deduped | Status::NeedsSchema | Status::Client
        )
    }
}
