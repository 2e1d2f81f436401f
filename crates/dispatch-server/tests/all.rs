//! Integration tests of the daemon, one binary: the router in-process (`oneshot`), and the
//! served daemon on 127.0.0.1:0 for the event streams, confirmations and answers.
#![allow(clippy::unwrap_used, clippy::expect_used)]
mod suite;
