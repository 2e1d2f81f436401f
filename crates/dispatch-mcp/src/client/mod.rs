//! MCP servers as tooldispatch tools.
