//! dispatch-mcp: MCP both ways.
//!
//! - [`client`]: MCP servers (stdio child processes or Streamable HTTP) whose tools become
//!   tooldispatch tools named `mcp__<server>__<tool>`: deferred, always serial, asking before
//!   they run unless the user trusts the server's read-only annotations.
//! - [`server`]: tooldispatch as an MCP server (`tooldispatch mcp` on stdio, `/mcp` on the
//!   daemon): its tools, checked, gated and committed by the engine like any round.

pub mod client;
pub mod server;
