//! Integration tests of the engine, one binary (see CONVENTIONS: linking stays fast).
mod suite;
