//! Tools the user adds without writing Rust: `script_` tools (a folder with `tool.json` and a
//! program), an installed extension's `ext_` tools (script tools, or declarative API tools over
//! an HTTP endpoint), and test_tool, with which the model tries a draft before a person
//! installs it.
//!
//! - [`definition`]: `tool.json`, checked field by field.
//! - [`script`]: running a script tool in the OS sandbox.
//! - [`api`]: an extension's API tool, sent through http_request.
//! - [`source`]: where definitions are found, and reloading them when their files change.
//! - [`test_tool`]: the `test_tool` tool.
//! - [`install`]: `tooldispatch tools install` and `tooldispatch ext install|list|remove`.

pub mod api;
pub mod definition;
pub mod install;
pub mod script;
pub mod source;
pub mod test_tool;
#[cfg(test)]
mod tests;

pub use definition::{Definition, Problem, Scope};
pub use source::{ExtensionTools, ToolDirs};
pub use test_tool::TestTool;
