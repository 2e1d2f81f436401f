mod commit_tests;
mod deferred_tests;
mod gate_tests;
mod preflight_tests;
mod properties;
mod scheduler_tests;
mod smoke;
pub mod support;
