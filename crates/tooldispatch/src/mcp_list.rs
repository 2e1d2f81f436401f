//! `tooldispatch mcp list`: each configured MCP server's state, protocol version and tools.

use crate::{CliError, Common, setup};

/// Start the configured servers as a round would, and say how each one fared.
pub async fn list(common: &Common, json: bool) -> Result<(), CliError> {
    let setup = setup::engine(common, Some("memory:")).await?;
    let Some(clients) = &setup.mcp else {
        let path = common
            .config
            .clone()
            .or_else(crate::config::default_path)
            .map_or_else(
                || "the config file".to_string(),
                |p| p.display().to_string(),
            );
        if json {
            crate::print_line("[]");
        } else {
            crate::print_line(&format!(
                "no MCP servers are configured; add [mcp.servers.<name>] with command or url to {path}"
            ));
        }
        return Ok(());
    };
    let statuses = clients.statuses();
    if json {
        let text = serde_json::to_string(&statuses)
            .map_err(|e| CliError::failed(format!("cannot write the list as JSON: {e}")))?;
        crate::print_line(&text);
    } else {
        for status in statuses {
            crate::print_line(&status.line());
        }
    }
    Ok(())
}
