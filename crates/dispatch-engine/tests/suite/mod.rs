mod commit_tests;
mod deferred_tests;
mod gate_tests;
mod preflight_tests;
mod properties;
pub mod regression_tests;
mod scheduler_tests;
mod smoke;
pub mod support;
