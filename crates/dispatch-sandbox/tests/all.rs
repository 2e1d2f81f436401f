//! Integration tests of the sandbox, one binary (see CONVENTIONS: linking stays fast).
#![allow(clippy::unwrap_used, clippy::expect_used)]
mod suite;
