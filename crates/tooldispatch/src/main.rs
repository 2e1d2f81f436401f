//! `tooldispatch`: the CLI over the engine, the built-in tools and the stores (DESIGN §5).

mod agent_cmd;
mod bench;
mod bench_agent;
mod bench_extract;
mod bench_http;
mod bench_memory;
mod bench_scripts;
mod chatbot_cmd;
mod commands;
mod config;
mod mcp_cmd;
mod mcp_list;
mod secret_cmd;
mod serve;
mod serve_agent;
mod setup;
mod store_cmd;
mod terminal;
mod tools_cmd;
mod trust;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand, ValueEnum};
use dispatch_engine::Provider;

// A round allocates many small short-lived values (JSON, events); mimalloc handles that pattern
// much better than the system allocator (see `tooldispatch bench overhead`).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "tooldispatch",
    version,
    about = "Tool dispatch for LLM agents: check, run and commit one model reply's tool calls"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the HTTP daemon: the API, live events, confirmations and the web console.
    Serve(serve::ServeArgs),
    /// Run a whole agent at the terminal: the model from [models.<name>] in the config file,
    /// its calls through the engine, until it answers (on stdout).
    Agent(agent_cmd::AgentArgs),
    /// Dispatch one model reply read from stdin; print the tool-result messages (or the report).
    Round(RoundArgs),
    /// Print the request's tools array and the turn context for a session (`--session`);
    /// `--check`: every tool definition and why any was refused; `install DIR`: install a
    /// draft script tool.
    Tools(ToolsArgs),
    /// Extensions: `install DIR|FILE.tar.gz`, `list`, `remove NAME` (their tools are `ext_…`).
    Ext(tools_cmd::ExtArgs),
    /// Dispatch a JSONL file of model replies (one per line; {"new_run": true} starts a new run).
    Replay(ReplayArgs),
    /// Answer a run that waits on the user (ask_user, store_secret), or cancel it with --cancel;
    /// without --task, list them.
    Answer(AnswerArgs),
    /// Measure the engine: per-call overhead, the concurrency bound with sleeping calls, the
    /// daemon under HTTP load (http), or the agent loop per model turn (agent).
    Bench(bench::BenchArgs),
    /// Store housekeeping: `stats` (what it holds) and `gc` (drop what is no longer needed).
    Store(store_cmd::StoreArgs),
    /// Trust a work directory, so its own .tooldispatch/rules apply (`--list`, `--remove DIR`).
    Trust(trust::TrustArgs),
    /// Serve tooldispatch's tools to an MCP client on stdin/stdout (Claude Desktop, Claude
    /// Code, Codex, …); `mcp list`: the configured MCP servers and how each one fared.
    Mcp(mcp_cmd::McpArgs),
    /// Secrets configs and tools refer to as {{secret:NAME}}: `set NAME` (value on stdin or
    /// typed hidden), `list` (names only), `remove NAME`.
    Secret(secret_cmd::SecretArgs),
    /// The chats list_chatbot and send_to_chatbot may use: `pending telegram|discord`,
    /// `authorize PLATFORM ID [--name N]`, `list`, `revoke PLATFORM ID`.
    Chatbot(chatbot_cmd::ChatbotArgs),
    /// Show the OS sandbox commands run in on this machine: mechanism, levels, limits, hidden
    /// paths (or why there is none).
    Sandbox(SandboxArgs),
}

#[derive(Args)]
struct SandboxArgs {
    /// The work directory whose `.tooldispatch/` is hidden too (default: the current directory).
    #[arg(long)]
    workdir: Option<PathBuf>,
    /// The config file (default: $XDG_CONFIG_HOME/tooldispatch/config.toml when it exists).
    #[arg(long, env = "TOOLDISPATCH_CONFIG")]
    config: Option<PathBuf>,
    /// Store URL (its file and key are hidden from commands).
    #[arg(long, env = "TOOLDISPATCH_STORE")]
    store: Option<String>,
}

/// Options every dispatching command shares.
#[derive(Args, Clone)]
struct Common {
    /// The model API the reply comes from: openai, anthropic, claude-code, openai-responses or
    /// gemini.
    #[arg(long, default_value = "openai", value_parser = parse_provider)]
    provider: Provider,
    /// The work directory tools are confined to (default: the current directory).
    #[arg(long)]
    workdir: Option<PathBuf>,
    /// Store URL: sqlite:PATH (default under $XDG_DATA_HOME/tooldispatch/), redis://HOST:PORT/DB or memory:.
    #[arg(long, env = "TOOLDISPATCH_STORE")]
    store: Option<String>,
    /// The config file (default: $XDG_CONFIG_HOME/tooldispatch/config.toml when it exists).
    #[arg(long, env = "TOOLDISPATCH_CONFIG")]
    config: Option<PathBuf>,
    /// Who approves calls that need confirmation: none (decline, the default), all, or ask (terminal).
    #[arg(long, value_enum, default_value_t = Approve::None)]
    approve: Approve,
    /// At most this many concurrent calls at once (default: max(3, cores/2)).
    #[arg(long, env = "TOOLDISPATCH_MAX_CONCURRENT_TOOLS")]
    max_concurrent: Option<usize>,
    /// A JSON file with the client tools the caller runs itself: [{"name", "description", "parameters"}].
    #[arg(long)]
    client_tools: Option<PathBuf>,
    /// Tool names not available in this session (a trailing * matches a prefix).
    #[arg(long = "exclude", value_delimiter = ',')]
    exclude: Vec<String>,
}

#[derive(Clone, Copy, ValueEnum, PartialEq, Eq)]
enum Approve {
    None,
    All,
    Ask,
}

#[derive(Args)]
struct RoundArgs {
    /// The session (one conversation): 1–128 characters of A–Z a–z 0–9 . _ : -.
    #[arg(long, value_parser = parse_session)]
    session: String,
    /// The run (one user turn); dedupe and "allow for this turn" live here.
    #[arg(long, default_value = "default", value_parser = parse_run)]
    run: String,
    /// Print the round report instead of the result messages.
    #[arg(long)]
    report: bool,
    /// Read the reply from this file instead of stdin.
    #[arg(long)]
    input: Option<PathBuf>,
    #[command(flatten)]
    common: Common,
}

#[derive(Args)]
#[command(args_conflicts_with_subcommands = true)]
struct ToolsArgs {
    #[command(subcommand)]
    action: Option<tools_cmd::ToolsAction>,
    /// The session whose tools array to print.
    #[arg(long, required_unless_present = "check", value_parser = parse_session)]
    session: Option<String>,
    /// List every tool definition (script, ext, client, MCP) and why any was refused; exit 2
    /// when one was.
    #[arg(long, conflicts_with = "session")]
    check: bool,
    #[command(flatten)]
    common: Common,
}

#[derive(Args)]
struct ReplayArgs {
    /// A JSONL file: one model reply per line.
    file: PathBuf,
    /// The session the replies run in.
    #[arg(long, default_value = "replay", value_parser = parse_session)]
    session: String,
    /// Print round reports instead of result messages.
    #[arg(long)]
    report: bool,
    #[command(flatten)]
    common: Common,
}

#[derive(Args)]
struct AnswerArgs {
    /// The session whose waiting task to answer.
    #[arg(long, value_parser = parse_session)]
    session: String,
    /// The waiting task (its task_hash); omit to list the session's waiting tasks.
    #[arg(long)]
    task: Option<String>,
    /// One answer per question, in order. Without it the answers are read from stdin (a JSON
    /// array of strings, or plain text for a single question), or asked at the terminal.
    #[arg(long = "answer")]
    answers: Vec<String>,
    /// Cancel the task instead of answering it: the asking call's result tells the model the
    /// user cancelled (status declined), and the task is gone.
    #[arg(long, requires = "task", conflicts_with = "answers")]
    cancel: bool,
    /// Print the round report instead of the result message.
    #[arg(long)]
    report: bool,
    #[command(flatten)]
    common: Common,
}

/// A session id the daemon would take too (`dispatch_engine::ids`).
pub(crate) fn parse_session(s: &str) -> Result<String, String> {
    match dispatch_engine::ids::session_id_problem(s) {
        None => Ok(s.to_string()),
        Some(problem) => Err(problem.to_string()),
    }
}

/// A run id the daemon would take too.
fn parse_run(s: &str) -> Result<String, String> {
    match dispatch_engine::ids::run_id_problem(s) {
        None => Ok(s.to_string()),
        Some(problem) => Err(problem.to_string()),
    }
}

fn parse_provider(s: &str) -> Result<Provider, String> {
    s.parse::<Provider>().map_err(|e| e.to_string())
}

/// A failure the CLI reports in one line, with its exit code.
pub struct CliError {
    pub code: u8,
    pub message: String,
}

impl CliError {
    /// Bad input: exit code 2.
    pub fn input(message: impl Into<String>) -> Self {
        CliError {
            code: 2,
            message: message.into(),
        }
    }
    /// Anything else that stopped the command: exit code 1.
    pub fn failed(message: impl Into<String>) -> Self {
        CliError {
            code: 1,
            message: message.into(),
        }
    }
}

/// Print one line of output. A reader that went away (`| head`) is not an error worth a panic.
pub fn print_line(line: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}").and_then(|_| out.flush());
}

/// Parse the command line; a usage error becomes one line on stderr and exit code 2 (DESIGN §5).
fn parse_cli() -> Result<Cli, ExitCode> {
    match Cli::try_parse() {
        Ok(cli) => Ok(cli),
        Err(e) if !e.use_stderr() => {
            // --help and --version: print them as clap renders them.
            let _ = e.print();
            Err(ExitCode::SUCCESS)
        }
        Err(e) => {
            let rendered = e.render().to_string();
            let line = rendered
                .lines()
                .take_while(|l| !l.trim().is_empty() && !l.starts_with("Usage:"))
                .map(str::trim)
                .collect::<Vec<_>>()
                .join(" ");
            let line = line.strip_prefix("error: ").unwrap_or(&line);
            eprintln!("tooldispatch: {line} (see tooldispatch --help)");
            Err(ExitCode::from(2))
        }
    }
}

fn main() -> ExitCode {
    let cli = match parse_cli() {
        Ok(cli) => cli,
        Err(code) => return code,
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("tooldispatch: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Serve(args) => serve::run(args).await,
            Command::Round(args) => commands::round(args).await,
            Command::Agent(args) => agent_cmd::run(args).await,
            Command::Tools(args) => match args.action {
                Some(tools_cmd::ToolsAction::Install(install)) => tools_cmd::install_tool(install),
                None if args.check => tools_cmd::check(&args.common).await,
                None => commands::tools(args).await,
            },
            Command::Ext(args) => tools_cmd::ext(args),
            Command::Replay(args) => commands::replay(args).await,
            Command::Answer(args) => commands::answer(args).await,
            Command::Store(args) => store_cmd::run(args).await,
            Command::Trust(args) => trust::run(args),
            Command::Mcp(args) => mcp_cmd::run(args).await,
            Command::Sandbox(args) => commands::sandbox(args),
            Command::Secret(args) => secret_cmd::run(args).await,
            Command::Chatbot(args) => chatbot_cmd::run(args).await,
            // Measured on a worker thread, where the daemon's rounds run too.
            Command::Bench(args) => tokio::spawn(bench::run(args))
                .await
                .unwrap_or_else(|e| Err(CliError::failed(format!("the benchmark stopped: {e}")))),
        }
    });
    // A terminal prompt that timed out may still be blocked reading /dev/tty: do not wait for it.
    runtime.shutdown_timeout(std::time::Duration::from_millis(100));
    setup::remove_scratch();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tooldispatch: {}", e.message);
            ExitCode::from(e.code)
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    /// Every subcommand and every flag or argument in `--help` says what it is for: an empty
    /// help line leaves a newcomer guessing.
    #[test]
    fn every_command_and_flag_has_help_text() {
        fn walk(cmd: &clap::Command, path: &str, missing: &mut Vec<String>) {
            for arg in cmd.get_arguments() {
                let id = arg.get_id().as_str();
                if matches!(id, "help" | "version") {
                    continue;
                }
                if arg
                    .get_help()
                    .is_none_or(|h| h.to_string().trim().is_empty())
                {
                    missing.push(format!("{path} {}", arg.get_long().unwrap_or(id)));
                }
            }
            for sub in cmd.get_subcommands() {
                let sub_path = format!("{path} {}", sub.get_name());
                if sub.get_name() != "help" && sub.get_about().is_none() {
                    missing.push(format!("{sub_path} (the command itself)"));
                }
                walk(sub, &sub_path, missing);
            }
        }
        let mut missing = Vec::new();
        walk(&super::Cli::command(), "tooldispatch", &mut missing);
        assert!(missing.is_empty(), "no help text: {missing:#?}");
    }
}
