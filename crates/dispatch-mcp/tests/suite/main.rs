//! dispatch-mcp's integration tests, in one binary: MCP servers' tools inside tooldispatch
//! (`client_tests`) and tooldispatch as an MCP server (`server_tests`), against real servers
//! and clients from the npm and PyPI registries started as child processes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod client_tests;
mod server_tests;
mod support;
