//! `tooldispatch mcp`: tooldispatch's tools served to an MCP client on stdin/stdout
//! (dispatch-mcp's server). stdout carries protocol messages only; everything for the user
//! goes to stderr. `tooldispatch mcp list`: the configured MCP servers (`crate::mcp_list`).

use std::sync::Arc;

use clap::{Args, ValueEnum};
use dispatch_engine::{ApproveAll, Confirmer};
use dispatch_mcp::server::{Elicitation, McpServer, NoElicitation, ToolSet, new_session_id};

use crate::config::Config;
use crate::terminal::TerminalConfirmer;
use crate::{Approve, CliError, Common, setup};

/// `tooldispatch mcp …`. Serving is what it does without a subcommand; `mcp list` is about
/// the configured MCP servers whose tools tooldispatch offers.
#[derive(Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct McpArgs {
    #[command(subcommand)]
    command: Option<McpCommand>,
    #[command(flatten)]
    serve: McpServeArgs,
}

#[derive(clap::Subcommand)]
enum McpCommand {
    /// Start the configured MCP servers ([mcp.servers.<name>] in the config file) and print
    /// each one's state, protocol version and tool count, or why it is not ready.
    List(McpListArgs),
}

#[derive(Args)]
struct McpListArgs {
    /// Print a JSON array instead of one line per server.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    common: Common,
}

/// Options of the stdio MCP server.
#[derive(Args)]
pub struct McpServeArgs {
    /// Which tools the client sees: all (each tool with its schema and hints; the default,
    /// since MCP clients approve and defer tools one by one) or core (find_tools, run_tool
    /// and the other core tools; the rest through run_tool, for clients that put every
    /// listed schema in the model's context).
    #[arg(long, value_enum, default_value_t = Tools::All)]
    tools: Tools,
    /// The tooldispatch session to use (its todo list, history and marked tools); default:
    /// a new session per connection.
    #[arg(long, value_parser = crate::parse_session)]
    session: Option<String>,
    #[command(flatten)]
    common: Common,
}

#[derive(Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum Tools {
    All,
    Core,
}

pub async fn run(args: McpArgs) -> Result<(), CliError> {
    if let Some(McpCommand::List(list)) = args.command {
        return crate::mcp_list::list(&list.common, list.json).await;
    }
    let args = args.serve;
    let config = Config::load(args.common.config.as_deref())?;
    // Calls that need approval ask the client's user through elicitation when the client
    // supports it; otherwise `--approve` decides: none declines (headless), ask asks at this
    // machine's terminal (/dev/tty, since stdin and stdout belong to the protocol).
    let elicitation = match args.common.approve {
        Approve::All => None,
        Approve::None => Some(Elicitation::new(Arc::new(NoElicitation))),
        Approve::Ask => Some(Elicitation::new(Arc::new(
            TerminalConfirmer::open().map_err(CliError::input)?,
        ))),
    };
    let confirmer: Arc<dyn Confirmer> = match &elicitation {
        Some(elicitation) => elicitation.clone(),
        None => Arc::new(ApproveAll),
    };
    // The configured MCP servers' tools are offered too, behind the same gate, while this
    // server runs.
    let (engine, _store, _following) = setup::long_lived(&args.common, &config, confirmer).await?;
    let session = args.session.clone().unwrap_or_else(new_session_id);
    let tools = match args.tools {
        Tools::All => ToolSet::All,
        Tools::Core => ToolSet::Core,
    };
    eprintln!(
        "tooldispatch: MCP server on stdio (session {session}, work directory {})",
        engine.config().workdir.display()
    );
    // With --approve all nobody is asked; the elicitation slot is then never filled.
    let elicitation = elicitation.unwrap_or_else(|| Elicitation::new(Arc::new(ApproveAll)));
    let server = McpServer::single(engine, tools, session, elicitation)
        .with_exclude(args.common.exclude.iter().cloned());
    dispatch_mcp::server::serve_stdio(server)
        .await
        .map_err(|e| CliError::failed(e.to_string()))
}
