//! `round`, `tools`, `replay`, `answer` and `sandbox`.

use std::io::{IsTerminal, Read};

use dispatch_engine::{
    AnswerRequest, ClientTools, Confirmer, Engine, EngineError, Provider, Question, RoundOutcome,
    RoundRequest,
};
use serde_json::{Value, json};

use crate::setup::{self, client_tools, compiled_client_tools};
use crate::terminal::TerminalConfirmer;
use crate::{AnswerArgs, CliError, Common, ReplayArgs, RoundArgs, SandboxArgs, ToolsArgs};

/// `tooldispatch sandbox`: what sandbox commands get on this machine, and why.
pub fn sandbox(args: SandboxArgs) -> Result<(), CliError> {
    use dispatch_sandbox::{Level, Policy, Sandbox};
    let config = crate::config::Config::load(args.config.as_deref())?;
    let workdir = match args.workdir {
        Some(dir) => dir,
        None => std::env::current_dir()
            .map_err(|e| CliError::failed(format!("cannot read the current directory: {e}")))?,
    };
    let sandbox = Sandbox::detect(config.sandbox.mode.to_mode());
    let store = setup::store_url(args.store.as_deref().or(config.store.as_deref()));
    let extra = setup::sandbox_config(&config, setup::store_file(&store));
    let mut policy = Policy::new(Level::Workspace, &workdir);
    policy.hidden.extend(extra.hidden.iter().cloned());
    policy.limits = extra.limits;
    print!("{}", sandbox.describe(&policy));
    Ok(())
}

pub async fn round(args: RoundArgs) -> Result<(), CliError> {
    let input = match &args.input {
        Some(path) => std::fs::read_to_string(path)
            .map_err(|e| CliError::input(format!("cannot read --input {}: {e}", path.display())))?,
        None => {
            let mut text = String::new();
            std::io::stdin()
                .read_to_string(&mut text)
                .map_err(|e| CliError::input(format!("cannot read the reply from stdin: {e}")))?;
            text
        }
    };
    let declared = client_tools(&args.common)?;
    let engine = setup::engine(&args.common, None).await?;
    let clients = compiled_client_tools(&args.common, declared, &engine)?;
    let outcome = dispatch(
        &engine,
        &args.common,
        &clients,
        &args.session,
        &args.run,
        &input,
    )
    .await?;
    print_outcome(&outcome, args.common.provider, args.report);
    Ok(())
}

pub async fn tools(args: ToolsArgs) -> Result<(), CliError> {
    let declared = client_tools(&args.common)?;
    let engine = setup::engine(&args.common, None).await?;
    let clients = compiled_client_tools(&args.common, declared, &engine)?;
    let (tools, turn_context) = engine
        .tools(
            args.session.as_deref().unwrap_or_default(),
            args.common.provider,
            clients.declarations(),
            &args.common.exclude,
        )
        .await
        .map_err(|e| CliError::failed(e.to_string()))?;
    crate::print_line(&json!({"tools": tools, "turn_context": turn_context}).to_string());
    Ok(())
}

pub async fn replay(args: ReplayArgs) -> Result<(), CliError> {
    let text = std::fs::read_to_string(&args.file)
        .map_err(|e| CliError::input(format!("cannot read {}: {e}", args.file.display())))?;
    let declared = client_tools(&args.common)?;
    // A replay is reproducible by default: it keeps its state in memory unless --store says otherwise.
    let engine = setup::engine(&args.common, Some("memory:")).await?;
    // Read, checked and compiled once: every line's round shares them.
    let clients = compiled_client_tools(&args.common, declared, &engine)?;
    let mut run = 1;
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        if serde_json::from_str::<Value>(line)
            .is_ok_and(|v| v.get("new_run") == Some(&Value::Bool(true)))
        {
            run += 1;
            continue;
        }
        let outcome = dispatch(
            &engine,
            &args.common,
            &clients,
            &args.session,
            &format!("run-{run}"),
            line,
        )
        .await
        .map_err(|e| CliError {
            code: e.code,
            message: format!("{}:{}: {}", args.file.display(), n + 1, e.message),
        })?;
        print_outcome(&outcome, args.common.provider, args.report);
    }
    Ok(())
}

async fn dispatch(
    engine: &Engine,
    common: &Common,
    clients: &ClientTools,
    session: &str,
    run: &str,
    input: &str,
) -> Result<RoundOutcome, CliError> {
    let calls =
        common.provider.format().parse_reply(input).map_err(|e| {
            CliError::input(format!("cannot read the {} reply: {e}", common.provider))
        })?;
    let mut request = RoundRequest::new(session, run, common.provider, calls);
    request.client_tools = clients.clone();
    request.exclude = common.exclude.clone();
    // Ctrl-C, SIGTERM (an orchestrator stopping us) and SIGHUP (the terminal closed) cancel
    // the round: running calls are stopped, their process groups killed, nothing committed.
    let cancel = request.cancel.clone();
    let watcher = tokio::spawn(async move {
        if stop_requested().await {
            cancel.cancel();
        }
    });
    let outcome = engine.round(request).await;
    watcher.abort();
    let outcome = outcome.map_err(|e| match e {
        EngineError::Cancelled => {
            CliError::failed("the round was cancelled (interrupt); no results were committed")
        }
        EngineError::TooManyCalls { .. } => CliError::input(e.to_string()),
        other => CliError::failed(other.to_string()),
    })?;
    if let Some(pending) = &outcome.pending {
        eprintln!(
            "tooldispatch: the run waits on the user ({}, task {}); answer with `tooldispatch answer --session {session} --task {}`, whose output is the result of call {}",
            pending.tool, pending.task_hash, pending.task_hash, pending.tool_call_id
        );
    }
    if let Some(fatal) = &outcome.fatal {
        eprintln!("tooldispatch: {fatal}; the results are committed, but the run should stop");
    }
    Ok(outcome)
}

pub async fn answer(args: AnswerArgs) -> Result<(), CliError> {
    let engine = setup::engine(&args.common, None).await?;
    let pending = engine
        .pending(&args.session)
        .await
        .map_err(|e| CliError::failed(e.to_string()))?;
    let Some(hash) = &args.task else {
        let listed: Vec<Value> = pending
            .iter()
            .map(|t| {
                json!({"task": t.task_hash, "run": t.run, "tool": t.tool, "tool_call_id": t.tool_call_id,
                       "questions": t.questions, "state": t.state})
            })
            .collect();
        crate::print_line(&Value::Array(listed).to_string());
        return Ok(());
    };
    if args.cancel {
        // Nothing to read: the result says the user cancelled.
        let mut request = AnswerRequest::cancel(&args.session, hash);
        request.request.provider = args.common.provider;
        let outcome = engine.answer(request).await.map_err(answer_error)?;
        print_outcome(&outcome, args.common.provider, args.report);
        return Ok(());
    }
    // An unknown task is reported by the engine, with the tasks that do wait.
    let questions: Vec<Question> = pending
        .iter()
        .find(|t| &t.task_hash == hash)
        .and_then(|t| serde_json::from_value(t.questions.clone()).ok())
        .unwrap_or_default();
    let answers = read_answers(&args, &questions).await?;
    let mut request = AnswerRequest::new(&args.session, hash, answers);
    request.request.provider = args.common.provider;
    let outcome = engine.answer(request).await.map_err(answer_error)?;
    print_outcome(&outcome, args.common.provider, args.report);
    Ok(())
}

/// A task that does not wait, or answers that do not fit it, are the user's to fix.
fn answer_error(e: EngineError) -> CliError {
    match e {
        EngineError::NoSuchTask { .. } | EngineError::BadAnswer(_) => {
            CliError::input(e.to_string())
        }
        other => CliError::failed(other.to_string()),
    }
}

/// The answers from `--answer`, else stdin, else the terminal. A secret never comes from the
/// command line, where shell history and `ps` would keep it.
async fn read_answers(args: &AnswerArgs, questions: &[Question]) -> Result<Vec<String>, CliError> {
    let secret = questions.iter().any(|q| q.secret);
    if !args.answers.is_empty() {
        if secret {
            return Err(CliError::input(
                "this task asks for a secret: type it at the prompt, or pipe it on stdin; never pass it with --answer",
            ));
        }
        return Ok(args.answers.clone());
    }
    if std::io::stdin().is_terminal() {
        let terminal = TerminalConfirmer::open().map_err(CliError::input)?;
        return terminal
            .ask(questions)
            .await
            .ok_or_else(|| CliError::input("no answer was given (the terminal closed)"));
    }
    let mut text = String::new();
    std::io::stdin()
        .read_to_string(&mut text)
        .map_err(|e| CliError::input(format!("cannot read the answers from stdin: {e}")))?;
    if let Ok(answers) = serde_json::from_str::<Vec<String>>(text.trim()) {
        return Ok(answers);
    }
    if questions.len() == 1 {
        return Ok(vec![text.trim_end_matches(['\r', '\n']).to_string()]);
    }
    Err(CliError::input(format!(
        "this task asks {} questions: pipe a JSON array with one answer per question, or use --answer once per question",
        questions.len()
    )))
}

fn print_outcome(outcome: &RoundOutcome, provider: Provider, report: bool) {
    if report {
        // Straight to stdout: a large round's report is never held in memory as a whole.
        use std::io::Write;
        let mut out = std::io::BufWriter::new(std::io::stdout().lock());
        // A reader that went away (`| head`) is not an error worth reporting.
        let _ = outcome
            .write_report(&mut out)
            .map_err(std::io::Error::from)
            .and_then(|()| writeln!(out))
            .and_then(|()| out.flush());
    } else {
        crate::print_line(&Value::Array(outcome.render(provider)).to_string());
    }
}

/// Resolves when the user or the system asks the process to stop; `false` when no signal can
/// be watched (then the round simply runs to its end).
pub(crate) async fn stop_requested() -> bool {
    stop_signals().await
}

/// [`stop_requested`], with its signal handlers installed now rather than at the first poll:
/// a daemon that has announced its address can be stopped at once, and a SIGTERM sent right
/// after the announcement is a clean stop instead of the default action's kill.
pub(crate) fn stop_signals() -> impl std::future::Future<Output = bool> {
    use tokio::signal::unix::{SignalKind, signal};
    let signals = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
        signal(SignalKind::hangup()),
    );
    async move {
        let (Ok(mut int), Ok(mut term), Ok(mut hup)) = signals else {
            return tokio::signal::ctrl_c().await.is_ok();
        };
        tokio::select! {
            _ = int.recv() => true,
            _ = term.recv() => true,
            _ = hup.recv() => true,
        }
    }
}
