//! `tooldispatch agent "task"`: a whole agent at the terminal. The model from `[models.<name>]`
//! answers, its calls run through the engine, and so on until it answers; tool lines and a
//! spinner go to stderr, confirmations and questions to the terminal, the answer to stdout.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Args;
use dispatch_engine::{Event, EventKind, EventSink};
use dispatch_model::{Agent, AgentEnd, AgentEvent, AgentRequest, ModelClient};
use tokio_util::sync::CancellationToken;

use crate::{Approve, CliError, Common, setup};

#[derive(Args)]
pub struct AgentArgs {
    /// What the agent should do (several arguments are joined with spaces). With --answer:
    /// the answers to the waiting task's questions, one argument per question.
    #[arg(required = true, num_args = 1..)]
    task: Vec<String>,
    /// Go on with the turn that waits on you: the waiting task's id (the agent printed it when
    /// it stopped to ask); the arguments are the answers.
    #[arg(long, value_name = "TASK", requires = "session")]
    answer: Option<String>,
    /// Which `[models.<name>]` of the config file (default: the first).
    #[arg(long)]
    model: Option<String>,
    /// Continue this session's conversation (default: a new session, named on stderr).
    #[arg(long, value_parser = crate::parse_session)]
    session: Option<String>,
    /// Rounds of tool calls before the agent is stopped.
    #[arg(long, default_value_t = dispatch_model::DEFAULT_MAX_ROUNDS)]
    max_rounds: u32,
    /// Print the outcome as JSON (answer, rounds, tokens) instead of the answer's text.
    #[arg(long)]
    json: bool,
    /// Who approves calls that need confirmation: ask (the terminal, the default), all, or none.
    #[arg(long, value_enum, default_value_t = Approve::Ask)]
    approve: Approve,
    /// The work directory tools are confined to (default: the current directory).
    #[arg(long)]
    workdir: Option<PathBuf>,
    /// Store URL: sqlite:PATH (default under $XDG_DATA_HOME/tooldispatch/), redis://HOST:PORT/DB or memory:.
    #[arg(long, env = "TOOLDISPATCH_STORE")]
    store: Option<String>,
    /// The config file (default: $XDG_CONFIG_HOME/tooldispatch/config.toml when it exists).
    #[arg(long, env = "TOOLDISPATCH_CONFIG")]
    config: Option<PathBuf>,
    /// At most this many concurrent calls at once (default: max(3, cores/2)).
    #[arg(long, env = "TOOLDISPATCH_MAX_CONCURRENT_TOOLS")]
    max_concurrent: Option<usize>,
    /// Tool names the agent may not use (a trailing * matches a prefix).
    #[arg(long = "exclude", value_delimiter = ',')]
    exclude: Vec<String>,
}

pub async fn run(args: AgentArgs) -> Result<(), CliError> {
    let config = crate::config::Config::load(args.config.as_deref())?;
    let (name, model_config) = config
        .models
        .pick(args.model.as_deref())
        .map_err(CliError::input)?;
    let (name, model_config) = (name.to_string(), model_config.clone());
    let common = Common {
        provider: model_config.provider.wire(),
        workdir: args.workdir,
        store: args.store,
        config: args.config,
        approve: args.approve,
        max_concurrent: args.max_concurrent,
        client_tools: None,
        exclude: args.exclude,
    };
    let setup = setup::engine(&common, None).await?;
    let key = resolve_key(&model_config, setup.store.as_ref()).await?;
    let client = ModelClient::new(model_config, key).map_err(|e| CliError::input(e.to_string()))?;
    let session = match args.session {
        Some(session) => session,
        None => {
            let session = format!("agent-{}", now_ms());
            eprintln!("tooldispatch: session {session} (continue it with --session {session})");
            session
        }
    };
    let crate::setup::Setup {
        engine,
        mcp: _mcp,
        store,
        ..
    } = setup;
    let agent = Agent::new(engine, store, Arc::new(client), name);

    let progress = Arc::new(Progress::new(std::io::stderr().is_terminal()));
    let mut req = match args.answer {
        None => AgentRequest::new(session.clone(), args.task.join(" ")),
        Some(task) => {
            let mut req = AgentRequest::new(session.clone(), String::new());
            req.answer = Some(dispatch_model::TaskAnswer {
                task,
                answers: args.task,
            });
            req
        }
    };
    req.max_rounds = args.max_rounds;
    req.exclude = common.exclude.clone();
    let shown = progress.clone();
    req.on_event = Some(Arc::new(move |e: AgentEvent| shown.agent_event(&e)));
    req.round_events = Some(progress.clone());
    let cancel = req.cancel.clone();
    let watcher = tokio::spawn(async move {
        if crate::commands::stop_requested().await {
            cancel.cancel();
        }
    });
    let outcome = agent.run(req).await;
    watcher.abort();
    progress.stop_spinner();
    let outcome = outcome.map_err(|e| CliError::failed(e.to_string()))?;
    if args.json {
        crate::print_line(&serde_json::to_string(&outcome).unwrap_or_default());
    }
    let tokens = format!(
        "{} round(s), {} input / {} output tokens",
        outcome.rounds, outcome.input_tokens, outcome.output_tokens
    );
    match &outcome.end {
        AgentEnd::Answer { text } => {
            if !args.json {
                crate::print_line(text);
            }
            eprintln!("tooldispatch: done in {tokens}");
            Ok(())
        }
        AgentEnd::Waiting { task } => {
            eprintln!(
                "tooldispatch: the agent waits on the user ({}, task {}): {}\ngo on with `tooldispatch agent --session {session} --answer {} \"ANSWER\"…` (one argument per question), or run the agent at a terminal with --approve ask to answer as it asks",
                task.tool,
                task.task_hash,
                questions_text(&task.questions),
                task.task_hash
            );
            Ok(())
        }
        AgentEnd::HandedBack => Err(CliError::failed(
            "the model called a client tool, which the agent command cannot run",
        )),
        AgentEnd::Fatal { reason } => Err(CliError::failed(format!(
            "a tool stopped the run: {reason} ({tokens})"
        ))),
        AgentEnd::MaxRounds { rounds } => Err(CliError::failed(format!(
            "stopped after {rounds} rounds without an answer; continue with `tooldispatch agent --session {session} \"go on\"` or raise --max-rounds ({tokens})"
        ))),
        AgentEnd::Stopped { reason, text } => {
            if !args.json && !text.is_empty() {
                crate::print_line(text);
            }
            Err(CliError::failed(format!("{reason} ({tokens})")))
        }
    }
}

/// The questions of a waiting task, one per line.
fn questions_text(questions: &serde_json::Value) -> String {
    questions
        .as_array()
        .map(|list| {
            list.iter()
                .enumerate()
                .map(|(i, q)| {
                    format!(
                        "  {}. {}",
                        i + 1,
                        crate::terminal::shown(
                            q.get("question").and_then(|v| v.as_str()).unwrap_or("?"),
                            500
                        )
                    )
                })
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default()
}

/// The model's key from where its `key` says: a stored secret, a variable, or none.
pub(crate) async fn resolve_key(
    model: &dispatch_model::ModelConfig,
    store: &dyn dispatch_store::Store,
) -> Result<dispatch_model::ApiKey, CliError> {
    let source = model
        .key_source()
        .map_err(|e| CliError::input(e.to_string()))?;
    let stored = match &source {
        dispatch_model::KeySource::Secret(name) => store
            .secret_get(name)
            .await
            .map_err(|e| CliError::failed(e.to_string()))?,
        _ => None,
    };
    model
        .resolve_key(&|_| stored.clone(), &|var| std::env::var(var).ok())
        .map_err(|e| CliError::input(e.to_string()))
}

/// Tool lines as calls start and end, and a spinner while the model thinks (at a terminal).
struct Progress {
    tty: bool,
    spinner: Mutex<Option<CancellationToken>>,
}

impl Progress {
    fn new(tty: bool) -> Self {
        Progress {
            tty,
            spinner: Mutex::new(None),
        }
    }

    fn agent_event(&self, event: &AgentEvent) {
        match event {
            AgentEvent::ModelCall { turn, model } if self.tty => {
                self.start_spinner(format!("{model} is thinking (turn {turn})"));
            }
            AgentEvent::ModelRetry {
                attempt,
                wait_ms,
                reason,
            } => {
                self.stop_spinner();
                eprintln!(
                    "  model request {attempt} failed ({reason}); trying again in {:.1} s",
                    *wait_ms as f64 / 1000.0
                );
            }
            AgentEvent::ModelDone { .. } => self.stop_spinner(),
            _ => {}
        }
    }

    fn start_spinner(&self, what: String) {
        let stop = CancellationToken::new();
        if let Ok(mut slot) = self.spinner.lock()
            && let Some(old) = slot.replace(stop.clone())
        {
            old.cancel();
        }
        tokio::spawn(async move {
            const FRAMES: [char; 4] = ['|', '/', '-', '\\'];
            let started = Instant::now();
            let mut frame = 0;
            loop {
                let line = format!(
                    "\r{} {what} {}s ",
                    FRAMES[frame % FRAMES.len()],
                    started.elapsed().as_secs()
                );
                let _ = std::io::stderr().write_all(line.as_bytes());
                frame += 1;
                tokio::select! {
                    () = stop.cancelled() => break,
                    () = tokio::time::sleep(Duration::from_millis(120)) => {}
                }
            }
            // Clear the spinner's line.
            let _ = std::io::stderr().write_all(b"\r\x1b[2K");
        });
    }

    fn stop_spinner(&self) {
        if let Some(stop) = self.spinner.lock().ok().and_then(|mut s| s.take()) {
            stop.cancel();
            // Let the spinner clear its line before the next output.
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl EventSink for Progress {
    fn send(&self, event: &Arc<Event>) {
        match &event.kind {
            EventKind::ToolCallStart { tool_name, .. } => {
                self.stop_spinner();
                eprintln!("  → {tool_name}");
            }
            EventKind::ToolResult {
                tool_name,
                status,
                result,
                ..
            } => {
                self.stop_spinner();
                let first = result.lines().next().unwrap_or_default();
                let first: String = first.chars().take(100).collect();
                let status = serde_json::to_value(status)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default();
                eprintln!("  ← {tool_name} {status}: {first}");
            }
            _ => {}
        }
    }
}

fn now_ms() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis())
}
