//! MCP servers from the registries as tooldispatch tools.
