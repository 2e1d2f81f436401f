//! Integration tests of the CLI, one binary (see CONVENTIONS: linking stays fast).
#![allow(clippy::unwrap_used, clippy::expect_used)]
mod suite;
