//! tooldispatch as an MCP server, driven by the official Python and TypeScript SDK clients.
