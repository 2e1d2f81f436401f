//! One tool of an MCP server as a tooldispatch tool: `mcp__<server>__<tool>`.

use std::path::Path;
use std::sync::Weak;

use async_trait::async_trait;
use dispatch_engine::{
    Access, Effect, Gate, Origin, Subject, Tool, ToolContext, ToolError, ToolOutput, ToolSpec,
};
use serde_json::Value;

use super::clip;
use super::config::ServerConfig;
use super::connection::Connection;

/// Longest description kept: a server's text goes into the model's prompt.
const MAX_DESCRIPTION: usize = 2048;
/// Largest input schema taken, as JSON: find_tools shows it to the model.
const MAX_SCHEMA: usize = 64 * 1024;
/// Tool names every provider accepts.
const MAX_NAME: usize = 64;

pub(crate) struct McpTool {
    spec: ToolSpec,
    /// The tool's name on its server.
    remote: String,
    /// The server's annotations say it only reads, and the user trusts them.
    trusted_read_only: bool,
    connection: Weak<Connection>,
}

impl McpTool {
    /// A tool from its `tools/list` entry (JSON, as on the wire), or why it cannot be used.
    pub fn new(
        server: &str,
        config: &ServerConfig,
        listed: &Value,
        connection: Weak<Connection>,
    ) -> Result<Self, String> {
        let remote = listed
            .get("name")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
            .ok_or_else(|| format!("MCP server {server} listed a tool without a name"))?;
        let name = local_name(server, remote);
        let mut parameters = listed
            .get("inputSchema")
            .cloned()
            .unwrap_or_else(|| serde_json::json!({"type": "object"}));
        let size = parameters.to_string().len();
        if size > MAX_SCHEMA {
            return Err(format!(
                "tool {name:?} has an input schema of {size} bytes; at most {MAX_SCHEMA} are taken (it is shown to the model)"
            ));
        }
        // The spec requires an object schema; some servers leave out the `type`.
        if let Value::Object(schema) = &mut parameters
            && !schema.contains_key("type")
        {
            schema.insert("type".into(), "object".into());
        }
        let annotations = listed.get("annotations");
        let hint = |key: &str| {
            annotations
                .and_then(|a| a.get(key))
                .and_then(Value::as_bool)
        };
        let trusted_read_only = config.trust_annotations
            && hint("readOnlyHint") == Some(true)
            && hint("destructiveHint") != Some(true);
        let description = listed
            .get("description")
            .and_then(Value::as_str)
            .or_else(|| listed.get("title").and_then(Value::as_str))
            .unwrap_or("");
        let description = format!(
            "{} (tool {remote} of the MCP server {server})",
            clip(description.trim(), MAX_DESCRIPTION)
        );
        let spec = ToolSpec::new(name, description.trim_start().to_string(), parameters)
            .origin(Origin::Mcp {
                server: server.to_string(),
            })
            // `timeout_s` is the time a call may go without a result or progress; progress
            // keeps a long call alive up to ten times that.
            .idle_timeout(config.timeout())
            .timeout(config.timeout() * 10)
            .gate(if trusted_read_only {
                Gate::ReadOnly
            } else {
                Gate::Ask
            })
            // A tool that may change anything ends what the run remembered about the world.
            .effect(if trusted_read_only {
                Effect::Observes
            } else {
                Effect::Mutates
            });
        Ok(McpTool {
            spec,
            remote: remote.to_string(),
            trusted_read_only,
            connection,
        })
    }
}

#[async_trait]
impl Tool for McpTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn subject(&self, _args: &Value, _workdir: &Path) -> Subject {
        if self.trusted_read_only {
            return Subject::new(Access::Reads);
        }
        let Origin::Mcp { server } = &self.spec.origin else {
            return Subject::new(Access::Changes);
        };
        Subject::new(Access::Changes).why(format!(
            "{} runs on the MCP server {server}, and tooldispatch cannot see what it does",
            self.spec.name
        ))
    }

    async fn call(&self, cx: ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        let Some(connection) = self.connection.upgrade() else {
            return Err(ToolError::failed(format!(
                "{} belongs to an MCP server that is no longer configured",
                self.spec.name
            )));
        };
        connection
            .call(&self.spec.name, &self.remote, args, &cx)
            .await
    }
}

/// `mcp__<server>__<tool>` with characters providers refuse replaced by `_`, and a name too
/// long for them shortened with a hash of the original so two long names stay apart.
pub(crate) fn local_name(server: &str, remote: &str) -> String {
    let cleaned: String = remote
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let name = format!("mcp__{server}__{cleaned}");
    if name.len() <= MAX_NAME && cleaned == remote {
        return name;
    }
    // Cleaned or cut: a hash of the original keeps `a.b` and `a/b`, or two long names that
    // share their first 57 characters, apart. The name is ASCII, so any cut is a boundary.
    let tag = format!("_{:06x}", fnv(remote) & 0xff_ffff);
    let keep = name.len().min(MAX_NAME - tag.len());
    format!("{}{tag}", &name[..keep])
}

fn fnv(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    #[test]
    fn names_are_what_providers_accept_and_stay_apart() {
        assert_eq!(local_name("git", "git_status"), "mcp__git__git_status");
        assert_eq!(local_name("e", "get-sum"), "mcp__e__get-sum");
        let dotted = local_name("e", "a.b");
        let slashed = local_name("e", "a/b");
        assert!(
            dotted.starts_with("mcp__e__a_b_") && dotted != slashed,
            "{dotted} {slashed}"
        );
        let long = local_name("server", &"x".repeat(100));
        let long2 = local_name("server", &format!("{}y", "x".repeat(99)));
        assert_eq!(long.len(), 64);
        assert_ne!(long, long2);
        assert!(
            long.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        );
    }

    fn tool(config: &ServerConfig, annotations: Value) -> McpTool {
        let listed = json!({"name": "look", "description": "Looks.", "inputSchema": {"properties": {}},
            "annotations": annotations});
        McpTool::new("srv", config, &listed, Weak::new()).unwrap()
    }

    #[test]
    fn annotations_count_only_when_the_server_is_trusted() {
        let read_only = json!({"readOnlyHint": true, "destructiveHint": false});
        let untrusted = tool(&ServerConfig::stdio("x", &[]), read_only.clone());
        assert_eq!(untrusted.spec.gate, Gate::Ask);
        assert_eq!(untrusted.spec.effect, Effect::Mutates);
        assert_eq!(
            untrusted.subject(&json!({}), Path::new("/")).access,
            Access::Changes
        );
        let trusting = ServerConfig {
            trust_annotations: true,
            ..ServerConfig::stdio("x", &[])
        };
        let trusted = tool(&trusting, read_only);
        assert_eq!(trusted.spec.gate, Gate::ReadOnly);
        assert_eq!(
            trusted.subject(&json!({}), Path::new("/")).access,
            Access::Reads
        );
        // Read-only and destructive contradict each other: the cautious claim wins.
        let both = tool(
            &trusting,
            json!({"readOnlyHint": true, "destructiveHint": true}),
        );
        assert_eq!(both.spec.gate, Gate::Ask);
        assert!(!both.spec.is_concurrent(), "MCP tools are always serial");
        assert_eq!(both.spec.parameters["type"], "object");
    }

    #[test]
    fn a_huge_schema_or_description_is_not_passed_on_whole() {
        let huge = json!({"name": "big", "inputSchema": {"type": "object", "description": "x".repeat(70_000)}});
        let config = ServerConfig::stdio("x", &[]);
        let err = McpTool::new("srv", &config, &huge, Weak::new())
            .err()
            .unwrap();
        assert!(err.contains("at most 65536"), "{err}");
        let wordy = json!({"name": "wordy", "description": "y".repeat(5000)});
        let tool = McpTool::new("srv", &config, &wordy, Weak::new()).unwrap();
        assert!(
            tool.spec.description.len() < 2200,
            "{}",
            tool.spec.description.len()
        );
    }
}
