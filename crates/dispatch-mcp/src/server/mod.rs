//! tooldispatch as an MCP server.
