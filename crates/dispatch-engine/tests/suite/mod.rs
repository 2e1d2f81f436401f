mod smoke;
pub mod support;
mod scheduler_tests;
