//! Integration tests of the model providers, one binary (see CONVENTIONS: linking stays fast).
#![allow(clippy::unwrap_used, clippy::expect_used)]
mod suite;
