//! `[mcp.servers.<name>]`: how to reach one MCP server and how far to trust it.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use dispatch_engine::subject::secret_references;
use serde::Deserialize;

/// One configured server, as written in the config file.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    /// stdio: the program to start (looked up on PATH when not a path).
    pub command: Option<String>,
    #[serde(default)]
    pub args: Vec<String>,
    /// stdio: variables set for the program, on top of a small default environment (values
    /// may be `{{secret:NAME}}`).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// stdio: where the program starts (default: the work directory).
    pub cwd: Option<PathBuf>,
    /// Streamable HTTP: the server's endpoint.
    pub url: Option<String>,
    /// Streamable HTTP: headers sent with every request (values may be `{{secret:NAME}}`).
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Seconds a call may go without a result or a progress notification (default 60).
    #[serde(default = "default_timeout_s")]
    pub timeout_s: u64,
    /// Seconds the server has to start and answer the handshake (default 10).
    #[serde(default = "default_startup_timeout_s")]
    pub startup_timeout_s: u64,
    #[serde(default = "default_enabled")]
    pub enabled: bool,
    /// Believe the server when its annotations say a tool only reads: such a tool then runs
    /// without asking. Off by default, because annotations are the server's claim.
    #[serde(default)]
    pub trust_annotations: bool,
    /// stdio: run the server in the command sandbox (workspace level: it writes only in the
    /// work directory and cannot read credentials or tooldispatch's files).
    #[serde(default)]
    pub sandbox: bool,
    /// With `sandbox`: whether the server may use the network (default true: most servers
    /// that fetch or call APIs need it).
    #[serde(default = "default_enabled")]
    pub network: bool,
}

fn default_timeout_s() -> u64 {
    60
}
fn default_startup_timeout_s() -> u64 {
    10
}
fn default_enabled() -> bool {
    true
}

/// How the server is reached, once the config has been checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Transport {
    Stdio { command: String, args: Vec<String> },
    Http { url: String },
}

impl Transport {
    pub fn kind(&self) -> &'static str {
        match self {
            Transport::Stdio { .. } => "stdio",
            Transport::Http { .. } => "http",
        }
    }
}

impl ServerConfig {
    /// A stdio server with the defaults.
    pub fn stdio(command: impl Into<String>, args: &[&str]) -> Self {
        ServerConfig {
            command: Some(command.into()),
            args: args.iter().map(|a| a.to_string()).collect(),
            ..ServerConfig::blank()
        }
    }

    /// A Streamable HTTP server with the defaults.
    pub fn http(url: impl Into<String>) -> Self {
        ServerConfig {
            url: Some(url.into()),
            ..ServerConfig::blank()
        }
    }

    fn blank() -> Self {
        ServerConfig {
            command: None,
            args: Vec::new(),
            env: BTreeMap::new(),
            cwd: None,
            url: None,
            headers: BTreeMap::new(),
            timeout_s: default_timeout_s(),
            startup_timeout_s: default_startup_timeout_s(),
            enabled: true,
            trust_annotations: false,
            sandbox: false,
            network: true,
        }
    }

    /// The transport, or why this server's entry cannot be used (said about `name`).
    pub fn transport(&self, name: &str) -> Result<Transport, String> {
        check_name(name)?;
        let at = format!("[mcp.servers.{name}]");
        let stdio_only = !self.args.is_empty() || !self.env.is_empty() || self.cwd.is_some();
        match (&self.command, &self.url) {
            (Some(command), None) => {
                if command.trim().is_empty() {
                    return Err(format!("{at}: command is empty"));
                }
                if !self.headers.is_empty() {
                    return Err(format!(
                        "{at}: headers apply to url servers; a command server takes env"
                    ));
                }
                Ok(Transport::Stdio {
                    command: command.clone(),
                    args: self.args.clone(),
                })
            }
            (None, Some(url)) => {
                if !(url.starts_with("http://") || url.starts_with("https://")) {
                    return Err(format!("{at}: url must start with http:// or https://"));
                }
                if stdio_only || self.sandbox {
                    return Err(format!(
                        "{at}: args, env, cwd and sandbox apply to command servers; a url server takes headers"
                    ));
                }
                Ok(Transport::Http { url: url.clone() })
            }
            (Some(_), Some(_)) => Err(format!(
                "{at}: give either command (a stdio server) or url (a Streamable HTTP server), not both"
            )),
            (None, None) => Err(format!(
                "{at}: give command (a stdio server) or url (a Streamable HTTP server)"
            )),
        }
    }

    /// `timeout_s`, between 1 s and a day.
    pub fn timeout(&self) -> Duration {
        Duration::from_secs(self.timeout_s.clamp(1, 86_400))
    }

    /// `startup_timeout_s`, between 1 s and ten minutes.
    pub fn startup_timeout(&self) -> Duration {
        Duration::from_secs(self.startup_timeout_s.clamp(1, 600))
    }

    /// Every `{{secret:NAME}}` the entry's env and headers refer to.
    pub fn secret_names(&self) -> Vec<String> {
        let values: Vec<&String> = self.env.values().chain(self.headers.values()).collect();
        secret_references(&serde_json::json!(values))
    }

    /// The entry with each `{{secret:NAME}}` replaced by `lookup(NAME)`; a name without a
    /// value is an error that says how to store it.
    pub fn with_secrets(
        &self,
        name: &str,
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<ServerConfig, String> {
        let fill = |value: &String| -> Result<String, String> {
            let mut out = value.clone();
            for secret in secret_references(&serde_json::Value::String(value.clone())) {
                let Some(found) = lookup(&secret) else {
                    return Err(format!(
                        "[mcp.servers.{name}] needs the stored secret {secret}, which is not set in this store (the store_secret tool stores one: the model calls it and the user types the value)"
                    ));
                };
                out = out.replace(&format!("{{{{secret:{secret}}}}}"), &found);
            }
            Ok(out)
        };
        let mut filled = self.clone();
        for value in filled.env.values_mut().chain(filled.headers.values_mut()) {
            *value = fill(value)?;
        }
        Ok(filled)
    }
}

/// A server name becomes part of tool names (`mcp__<server>__<tool>`): letters, digits, `-`
/// and single `_`, so the `__` separators stay unambiguous.
pub fn check_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 24
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        && !name.contains("__")
        && !name.starts_with('_')
        && !name.ends_with('_');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "[mcp.servers.{name}]: a server name is 1-24 letters, digits, - and single _ (it becomes part of tool names mcp__<server>__<tool>)"
        ))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn an_entry_is_a_command_or_a_url() {
        assert_eq!(
            ServerConfig::stdio("uvx", &["mcp-server-git"])
                .transport("git")
                .unwrap(),
            Transport::Stdio {
                command: "uvx".into(),
                args: vec!["mcp-server-git".into()]
            }
        );
        let both = ServerConfig {
            url: Some("http://x".into()),
            ..ServerConfig::stdio("a", &[])
        };
        assert!(both.transport("x").unwrap_err().contains("not both"));
        let neither = ServerConfig::blank();
        assert!(neither.transport("x").unwrap_err().contains("give command"));
        let sandboxed_url = ServerConfig {
            sandbox: true,
            ..ServerConfig::http("http://127.0.0.1:1/mcp")
        };
        assert!(
            sandboxed_url
                .transport("x")
                .unwrap_err()
                .contains("command servers")
        );
        assert!(ServerConfig::http("ftp://x").transport("x").is_err());
    }

    #[test]
    fn server_names_keep_tool_names_unambiguous() {
        for good in ["git", "my-server", "fs_2"] {
            assert!(check_name(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "a__b",
            "_a",
            "a_",
            "a.b",
            "a b",
            "abcdefghijklmnopqrstuvwxyz",
        ] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn secrets_fill_env_and_headers_or_say_which_is_missing() {
        let mut config = ServerConfig::http("https://api.example/mcp");
        config
            .headers
            .insert("Authorization".into(), "Bearer {{secret:API_TOKEN}}".into());
        assert_eq!(config.secret_names(), vec!["API_TOKEN".to_string()]);
        let filled = config
            .with_secrets("api", |n| (n == "API_TOKEN").then(|| "s3cr3t".to_string()))
            .unwrap();
        assert_eq!(filled.headers["Authorization"], "Bearer s3cr3t");
        let missing = config.with_secrets("api", |_| None).unwrap_err();
        assert!(
            missing.contains("API_TOKEN") && missing.contains("store_secret"),
            "{missing}"
        );
    }
}
