//! dispatch-sandbox's integration tests: one binary (see CONVENTIONS, habit 6).

mod suite;
