//! `tooldispatch mcp`: tooldispatch's tools served to an MCP client on stdin/stdout
//! (dispatch-mcp's server). stdout carries protocol messages only; everything for the user
//! goes to stderr.

use std::sync::Arc;

use clap::{Args, ValueEnum};
use dispatch_engine::{ApproveAll, Confirmer};
use dispatch_mcp::server::{Elicitation, McpServer, NoElicitation, ToolSet, new_session_id};

use crate::config::Config;
use crate::terminal::TerminalConfirmer;
use crate::{Approve, CliError, Common, setup};

/// `tooldispatch mcp …`. Serving is what it does without a subcommand; subcommands about the
/// configured MCP servers (`mcp list`) go in an optional `#[command(subcommand)]` field here,
/// beside the flattened serve options.
#[derive(Args)]
pub struct McpArgs {
    #[command(flatten)]
    serve: McpServeArgs,
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
    #[arg(long)]
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
    let (engine, _store) = setup::build(&args.common, None, &config, confirmer)?;
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
    let server = McpServer::single(Arc::new(engine), tools, session, elicitation)
        .with_exclude(args.common.exclude.iter().cloned());
    dispatch_mcp::server::serve_stdio(server)
        .await
        .map_err(|e| CliError::failed(e.to_string()))
}
