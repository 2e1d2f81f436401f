//! `tools --check`, `tools install DIR` and `ext install|list|remove`: the user's side of
//! script and ext tools (the model writes drafts and tries them with test_tool; a person
//! installs them).

use std::path::PathBuf;

use clap::{Args, Subcommand};
use dispatch_engine::ToolSource;
use dispatch_tools::extensions::ExtensionTools;
use dispatch_tools::extensions::install::{self, InstallError};
use serde_json::json;

use crate::{CliError, Common, print_line, setup};

#[derive(Subcommand)]
pub enum ToolsAction {
    /// Install a draft tool folder (tool.json and its program) as your own script tool.
    Install(InstallArgs),
}

#[derive(Args)]
pub struct InstallArgs {
    /// The draft's folder.
    dir: PathBuf,
    /// Overwrite an installed tool of the same name.
    #[arg(long)]
    replace: bool,
}

#[derive(Args)]
pub struct ExtArgs {
    #[command(subcommand)]
    action: ExtAction,
}

#[derive(Subcommand)]
enum ExtAction {
    /// Install an extension from a folder or a .tar.gz: a folder of tool folders, each with a
    /// tool.json (a script tool, or an API tool with an endpoint).
    Install(InstallArgs),
    /// The installed extensions and their tools.
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Remove an installed extension.
    Remove {
        /// The extension's name (see `ext list`).
        name: String,
    },
}

fn install_error(e: InstallError) -> CliError {
    match e {
        InstallError::Io { .. } => CliError::failed(e.to_string()),
        other => CliError::input(other.to_string()),
    }
}

/// `tooldispatch tools install DIR`.
pub fn install_tool(args: InstallArgs) -> Result<(), CliError> {
    let dir = setup::user_tools_dir()
        .ok_or_else(|| CliError::failed("no HOME or XDG_CONFIG_HOME to install tools under"))?;
    let name = install::install_tool(&args.dir, &dir, args.replace).map_err(install_error)?;
    print_line(&format!(
        "installed {name} in {}; the next round offers it (find_tools(query=\"select:{name}\"))",
        dir.display()
    ));
    Ok(())
}

/// `tooldispatch ext …`.
pub fn ext(args: ExtArgs) -> Result<(), CliError> {
    let dir = setup::extensions_dir();
    match args.action {
        ExtAction::Install(args) => {
            let ext =
                install::install_extension(&args.dir, &dir, args.replace).map_err(install_error)?;
            print_line(&format!(
                "installed the extension {} in {}: {}",
                ext.name,
                ext.dir.display(),
                ext.tools.join(", ")
            ));
        }
        ExtAction::List { json } => {
            let all = install::list_extensions(&dir);
            if json {
                let items: Vec<_> = all
                    .iter()
                    .map(|e| {
                        json!({
                            "name": e.name, "description": e.description, "version": e.version,
                            "tools": e.tools, "dir": e.dir,
                            "problems": e.problems.iter().map(ToString::to_string).collect::<Vec<_>>(),
                        })
                    })
                    .collect();
                print_line(&serde_json::Value::Array(items).to_string());
            } else if all.is_empty() {
                print_line(&format!(
                    "no extensions are installed in {}; add one with `tooldispatch ext install DIR|FILE.tar.gz`",
                    dir.display()
                ));
            }
            if !json {
                for e in all {
                    let version = e.version.map(|v| format!(" {v}")).unwrap_or_default();
                    print_line(&format!(
                        "{}{version}: {}{}",
                        e.name,
                        if e.tools.is_empty() {
                            "no tools".to_string()
                        } else {
                            e.tools.join(", ")
                        },
                        e.description.map(|d| format!(" — {d}")).unwrap_or_default()
                    ));
                    for p in e.problems {
                        print_line(&format!("  refused {p}"));
                    }
                }
            }
        }
        ExtAction::Remove { name } => {
            let removed = install::remove_extension(&dir, &name).map_err(install_error)?;
            print_line(&format!(
                "removed the extension {name} ({})",
                removed.display()
            ));
        }
    }
    Ok(())
}

/// `tooldispatch tools --check`: every tool definition (script, ext, client, MCP) and why any
/// was refused. Exit 2 when one was.
pub async fn check(common: &Common) -> Result<(), CliError> {
    let setup = setup::engine(common, Some("memory:")).await?;
    let registry = setup.registry();
    let mut lines = Vec::new();
    let mut refused = 0usize;
    // Loaded again here, the same way the engine loads them, to list each with its problems.
    let config = setup.config();
    let extensions = ExtensionTools::new(
        setup::tool_dirs(&config.workdir, config.trust_workdir),
        Default::default(),
        Default::default(),
        Default::default(),
    );
    extensions.apply(&mut dispatch_engine::Registry::clone(&registry));
    for def in extensions.definitions() {
        lines.push(format!(
            "ok      {} ({} in {})",
            def.tool_name(),
            def.scope.describe(),
            def.dir.display()
        ));
    }
    for problem in extensions.problems() {
        refused += 1;
        lines.push(format!("refused {problem}"));
    }
    if let Some(clients) = &setup.mcp {
        for status in clients.statuses() {
            lines.push(format!("mcp     {}", status.line()));
            refused += status.refused.len();
        }
    }
    let clients = setup::client_tools(common)?;
    let problems = dispatch_engine::check_client_tools(&clients, &registry);
    for (index, client) in clients.iter().enumerate() {
        if !problems.iter().any(|p| p.index == index) {
            lines.push(format!("ok      {} (client tool)", client.name));
        }
    }
    for problem in problems {
        refused += 1;
        lines.push(format!("refused {problem}"));
    }
    let builtins = registry
        .iter()
        .filter(|t| t.spec().origin == dispatch_engine::Origin::Builtin)
        .count();
    lines.insert(0, format!("{builtins} built-in tools"));
    for line in lines {
        print_line(&line);
    }
    if refused > 0 {
        return Err(CliError::input(format!(
            "{refused} tool definition(s) refused; each is listed above with its file, field and reason"
        )));
    }
    Ok(())
}
