//! `tooldispatch bench`: the engine's own cost per call (no-op tools), the concurrency bound
//! (sleeping tools) and how a round's cost grows with the length of its run (runlen).
//! Bench-only tools are registered here and nowhere else.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use clap::{Args, ValueEnum};
use dispatch_engine::{
    Effect, Engine, EngineConfig, EventKind, Headless, Provider, RawCall, Registry, RoundOutcome,
    RoundRequest, Tool, ToolContext, ToolError, ToolOutput, ToolSpec, default_max_concurrent,
    register_system_tools,
};
use serde_json::{Value, json};

use crate::CliError;

#[derive(Args)]
pub struct BenchArgs {
    /// overhead (no-op calls), sleep (calls that sleep --sleep-ms), http (the daemon under load),
    /// sandbox (starting `true` with and without the OS sandbox, --reps times), runlen (one
    /// run of sequential 4-call rounds: the latency around each of --at, per store) or scripts
    /// (the round-start check for edited script tools with none and the largest --n installed,
    /// and one script call as a round against the same program started directly), or memory
    /// (peak resident memory and time of rounds of --n calls through the CLI and the daemon,
    /// and the daemon's memory after them; default sizes 1,100,512, --reps 3), or agent (the
    /// agent loop's own time per model turn against a scripted model server on 127.0.0.1:
    /// --turns, --calls per turn, --reps runs; default 10, 1, 30), or extract (fetch_page's
    /// extractor on the marked pages of bench/extract: precision, recall, F1, the worst pages
    /// and time per page, best of --reps passes, default 3; --peers adds other extractors).
    kind: BenchKind,
    /// Calls per round; several sizes separated by commas (default 1,4,16,64; for memory
    /// 1,100,512).
    #[arg(long, value_delimiter = ',')]
    n: Vec<usize>,
    /// Rounds measured per size (default: 300 for overhead, 3 for sleep).
    #[arg(long)]
    reps: Option<usize>,
    /// How long each call of the sleep benchmark sleeps, in milliseconds.
    #[arg(long, default_value_t = 100)]
    sleep_ms: u64,
    /// The store the rounds commit to: memory: or sqlite:PATH (default: memory:, the engine
    /// alone; for http a SQLite file in a temp dir, the daemon's default).
    #[arg(long)]
    store: Option<String>,
    /// The concurrency bound (default: max(3, cores/2)).
    #[arg(long, env = "TOOLDISPATCH_MAX_CONCURRENT_TOOLS")]
    max_concurrent: Option<usize>,
    /// runlen: the round numbers measured (the median of --reps rounds around each).
    #[arg(long, value_delimiter = ',', default_value = "10,1000,10000")]
    at: Vec<u64>,
    #[command(flatten)]
    http: crate::bench_http::HttpArgs,
    #[command(flatten)]
    agent: crate::bench_agent::AgentArgs,
    #[command(flatten)]
    extract: crate::bench_extract::ExtractArgs,
}

#[derive(Clone, Copy, ValueEnum, PartialEq, Eq)]
enum BenchKind {
    Overhead,
    Sleep,
    Http,
    Sandbox,
    Runlen,
    Scripts,
    Memory,
    Agent,
    Extract,
}

/// A concurrent, read-only tool that returns at once or after a sleep.
struct BenchTool {
    spec: ToolSpec,
    sleep: Option<Duration>,
}

#[async_trait]
impl Tool for BenchTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }
    async fn call(&self, _cx: ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        if let Some(d) = self.sleep {
            tokio::time::sleep(d).await;
        }
        Ok(ToolOutput::text(format!("ok {}", args["i"])))
    }
}

pub async fn run(mut args: BenchArgs) -> Result<(), CliError> {
    if args.kind == BenchKind::Http {
        return crate::bench_http::run(args.http, args.store.as_deref(), args.max_concurrent).await;
    }
    if args.kind == BenchKind::Agent {
        return crate::bench_agent::run(
            args.agent,
            args.http.calls,
            args.reps,
            args.max_concurrent,
        )
        .await;
    }
    if args.kind == BenchKind::Extract {
        return crate::bench_extract::run(args.extract, args.reps.unwrap_or(3));
    }
    if args.kind == BenchKind::Memory {
        let sizes = if args.n.is_empty() {
            vec![1, 100, dispatch_engine::DEFAULT_MAX_CALLS_PER_ROUND]
        } else {
            args.n.clone()
        };
        return crate::bench_memory::run(&sizes, args.reps.unwrap_or(3)).await;
    }
    if args.n.is_empty() {
        args.n = vec![1, 4, 16, 64];
    }
    if args.kind == BenchKind::Runlen {
        return bench_runlen(&args).await;
    }
    if args.kind == BenchKind::Scripts {
        let tools = args.n.iter().copied().max().unwrap_or(64);
        let line = crate::bench_scripts::run(tools, args.reps.unwrap_or(50).max(1)).await?;
        crate::print_line(&line.to_string());
        return Ok(());
    }
    if args.kind == BenchKind::Sandbox {
        let reps = args.reps.unwrap_or(200).max(1);
        let line = tokio::task::spawn_blocking(move || bench_sandbox(reps))
            .await
            .map_err(|e| CliError::failed(format!("the benchmark stopped: {e}")))??;
        crate::print_line(&line.to_string());
        return Ok(());
    }
    let max = args
        .max_concurrent
        .unwrap_or_else(default_max_concurrent)
        .max(1);
    let (name, sleep) = match args.kind {
        BenchKind::Overhead => ("bench_noop", None),
        BenchKind::Sleep
        | BenchKind::Http
        | BenchKind::Sandbox
        | BenchKind::Runlen
        | BenchKind::Scripts
        | BenchKind::Memory
        | BenchKind::Agent
        | BenchKind::Extract => ("bench_sleep", Some(Duration::from_millis(args.sleep_ms))),
    };
    let reps = args
        .reps
        .unwrap_or(if sleep.is_some() { 3 } else { 300 })
        .max(1);
    if sleep.is_none() {
        // Prime the process heap with a throwaway engine, so the first size is measured in the
        // same steady state as the others (a cold heap page-faults on every new round).
        let largest = args.n.iter().copied().max().unwrap_or(1).max(1);
        let engine = bench_engine(name, sleep, max, "memory:", Effect::Observes).await?;
        for rep in 0..reps {
            let calls = Provider::OpenAi
                .format()
                .parse_reply(&openai_reply(name, largest))
                .map_err(|e| CliError::failed(e.to_string()))?;
            let request = RoundRequest::new("warmup", format!("r{rep}"), Provider::OpenAi, calls);
            engine
                .round(request)
                .await
                .map_err(|e| CliError::failed(e.to_string()))?;
        }
    }
    for &n in &args.n {
        let n = n.max(1);
        // A fresh engine and store per size, so one size's retained rounds do not slow the next.
        let engine = bench_engine(
            name,
            sleep,
            max,
            args.store.as_deref().unwrap_or("memory:"),
            Effect::Observes,
        )
        .await?;
        let mut round_us = Vec::with_capacity(reps);
        let mut wire_us = Vec::with_capacity(reps);
        let mut max_inflight = 0;
        let mut in_order = true;
        // Warm-up rounds are not measured.
        let warmup = if sleep.is_some() { 0 } else { reps / 10 };
        for rep in 0..reps + warmup {
            let reply = openai_reply(name, n);
            let parse_started = Instant::now();
            let calls = Provider::OpenAi
                .format()
                .parse_reply(&reply)
                .map_err(|e| CliError::failed(e.to_string()))?;
            let parse_time = parse_started.elapsed();
            let request =
                RoundRequest::new("bench", format!("n{n}-r{rep}"), Provider::OpenAi, calls);
            // The engine's own work: pass 1, pass 2 with no-op tools, pass 3, events, store commit.
            let started = Instant::now();
            let outcome = engine
                .round(request)
                .await
                .map_err(|e| CliError::failed(e.to_string()))?;
            let elapsed = started.elapsed();
            let render_started = Instant::now();
            let rendered = outcome.render(Provider::OpenAi);
            let wire_time = parse_time + render_started.elapsed();
            std::hint::black_box(rendered);
            if rep < warmup {
                continue;
            }
            wire_us.push(wire_time.as_secs_f64() * 1e6);
            round_us.push(elapsed.as_secs_f64() * 1e6);
            max_inflight = max_inflight.max(inflight(&outcome));
            in_order &= in_call_order(&outcome, n);
        }
        let median = median(&mut round_us);
        let mut line = json!({
            "bench": if sleep.is_some() { "sleep" } else { "overhead" },
            "n": n,
            "reps": reps,
            "max_concurrent": max,
            "round_us_median": round2(median),
            // Parsing the provider's reply and rendering the result messages, outside the round.
            "wire_us_median": round2(self::median(&mut wire_us)),
            "per_call_us_median": round2(median / n as f64),
            "wall_ms_median": round2(median / 1000.0),
            "max_inflight": max_inflight,
            "results_in_call_order": in_order,
        });
        if let Some(d) = sleep {
            let expected = (n.div_ceil(max) as f64) * d.as_secs_f64() * 1000.0;
            line["expected_ms"] = json!(round2(expected));
            line["over_expected_pct"] =
                json!(round2((median / 1000.0 - expected) / expected * 100.0));
        }
        crate::print_line(&line.to_string());
    }
    Ok(())
}

/// Start `true` `reps` times unconfined, in the read-only and in the workspace sandbox (the
/// latter with its pids cgroup where there is one): the sandbox's cost per command.
fn bench_sandbox(reps: usize) -> Result<Value, CliError> {
    use dispatch_sandbox::{Availability, Level, Mode, Policy, Sandbox};
    use std::path::Path;
    use std::process::{Command, Stdio};
    let sandbox = Sandbox::detect(Mode::Auto);
    let mechanism = match sandbox.availability() {
        Availability::Available { mechanism, .. } => mechanism.clone(),
        Availability::Unavailable { reason } => {
            return Err(CliError::failed(format!("no sandbox to measure: {reason}")));
        }
        Availability::Off => return Err(CliError::failed("the sandbox is off")),
    };
    let program = ["/usr/bin/true", "/bin/true"]
        .into_iter()
        .map(Path::new)
        .find(|p| p.exists())
        .ok_or_else(|| CliError::failed("no /usr/bin/true or /bin/true"))?;
    let workdir = std::env::temp_dir();
    let time = |program: &Path, args: &[std::ffi::OsString]| -> Result<f64, CliError> {
        let started = Instant::now();
        let status = Command::new(program)
            .args(args)
            .current_dir(&workdir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .map_err(|e| CliError::failed(format!("cannot start {}: {e}", program.display())))?;
        if !status.success() {
            return Err(CliError::failed(format!(
                "{} failed: {status}",
                program.display()
            )));
        }
        Ok(started.elapsed().as_secs_f64() * 1e6)
    };
    let mut plain = Vec::with_capacity(reps);
    let mut read_only = Vec::with_capacity(reps);
    let mut workspace = Vec::with_capacity(reps);
    for level in [Level::ReadOnly, Level::Workspace] {
        let policy = Policy::new(level, &workdir);
        let out = if level == Level::ReadOnly {
            &mut read_only
        } else {
            &mut workspace
        };
        // One unmeasured start warms the page cache for bwrap.
        for rep in 0..=reps {
            // Wrapping is part of the cost: it creates the command's cgroup.
            let started = Instant::now();
            let wrapped = sandbox
                .wrap(&policy, program, &[], &workdir)
                .map_err(|e| CliError::failed(e.to_string()))?;
            let wrap_us = started.elapsed().as_secs_f64() * 1e6;
            let run_us = time(&wrapped.program, &wrapped.args)?;
            drop(wrapped);
            if rep > 0 {
                out.push(wrap_us + run_us);
            }
        }
    }
    for rep in 0..=reps {
        let us = time(program, &[])?;
        if rep > 0 {
            plain.push(us);
        }
    }
    let plain = median(&mut plain);
    let read_only = median(&mut read_only);
    let workspace = median(&mut workspace);
    Ok(json!({
        "bench": "sandbox",
        "mechanism": mechanism,
        "process_limit": sandbox.limits_processes(),
        "reps": reps,
        "plain_us_median": round2(plain),
        "read_only_us_median": round2(read_only),
        "workspace_us_median": round2(workspace),
        "read_only_ratio": round2(read_only / plain),
        "workspace_ratio": round2(workspace / plain),
    }))
}

/// An engine with only the system tools and the bench tool, its schema already fetched.
async fn bench_engine(
    name: &str,
    sleep: Option<Duration>,
    max: usize,
    store: &str,
    effect: Effect,
) -> Result<Engine, CliError> {
    let failed = |e: String| CliError::failed(e);
    let mut registry = Registry::empty();
    register_system_tools(&mut registry).map_err(|e| failed(e.to_string()))?;
    let schema = json!({
        "type": "object",
        "properties": {"i": {"type": "integer", "minimum": 0}, "note": {"type": "string"}},
        "required": ["i"],
        "additionalProperties": false
    });
    let spec = ToolSpec::new(name, "bench tool", schema)
        .read_only()
        .concurrent()
        .effect(effect);
    registry
        .register(Arc::new(BenchTool { spec, sleep }))
        .map_err(|e| failed(e.to_string()))?;
    let mut config = EngineConfig::new(std::env::temp_dir());
    config.max_concurrent = max;
    // The engine's cost is measured at any --n the user asks for, also past the default limit.
    config.max_calls_per_round = usize::MAX;
    let store = dispatch_store::open(store).map_err(|e| failed(e.to_string()))?;
    let engine = Engine::new(registry, store, Arc::new(Headless), config)
        .map_err(|e| failed(e.to_string()))?;
    let mark = RoundRequest::new(
        "bench",
        "mark",
        Provider::OpenAi,
        vec![RawCall::new(
            "m",
            "find_tools",
            json!({"query": format!("select:{name}")}).to_string(),
        )],
    );
    engine
        .round(mark)
        .await
        .map_err(|e| failed(e.to_string()))?;
    Ok(engine)
}

/// Calls per round of the runlen benchmark.
const RUNLEN_CALLS: usize = 4;

/// One run of sequential rounds of `RUNLEN_CALLS` pure (calculate-like) calls, every call
/// distinct so the run's remembered results pile up: the median round latency around each
/// round of `--at` and its ratio to the first. One JSON line per store: `--store` (several
/// separated by commas), else memory: and a SQLite file in a temp dir.
async fn bench_runlen(args: &BenchArgs) -> Result<(), CliError> {
    // A directory of this process's own for the default SQLite file, removed at the end.
    let dir = std::env::temp_dir().join(format!("tooldispatch-runlen-{}", std::process::id()));
    let stores: Vec<String> = match &args.store {
        Some(list) => list.split(',').map(str::to_string).collect(),
        None => vec![
            "memory:".to_string(),
            format!("sqlite:{}", dir.join("runlen.db").display()),
        ],
    };
    let result = runlen_stores(args, stores).await;
    let _ = std::fs::remove_dir_all(&dir);
    result
}

async fn runlen_stores(args: &BenchArgs, stores: Vec<String>) -> Result<(), CliError> {
    let failed = |e: String| CliError::failed(e);
    let mut at: Vec<u64> = args.at.iter().copied().filter(|n| *n > 0).collect();
    at.sort_unstable();
    at.dedup();
    let reps = args.reps.unwrap_or(21).max(1) as u64;
    let half = reps / 2;
    let last = at.last().copied().unwrap_or(0) + half;
    let max = args
        .max_concurrent
        .unwrap_or_else(default_max_concurrent)
        .max(1);
    let name = "bench_calc";
    for store in stores {
        let engine = bench_engine(name, None, max, &store, Effect::Pure).await?;
        let run = format!("runlen-{}", std::process::id());
        let mut samples: Vec<Vec<f64>> = vec![Vec::new(); at.len()];
        for round in 1..=last {
            let reply = runlen_reply(name, round);
            let calls = Provider::OpenAi
                .format()
                .parse_reply(&reply)
                .map_err(|e| failed(e.to_string()))?;
            let request = RoundRequest::new("bench", run.clone(), Provider::OpenAi, calls);
            let started = Instant::now();
            let outcome = engine
                .round(request)
                .await
                .map_err(|e| failed(e.to_string()))?;
            let elapsed = started.elapsed().as_secs_f64() * 1e6;
            if outcome.results.len() != RUNLEN_CALLS {
                return Err(failed(format!(
                    "round {round} returned {} results",
                    outcome.results.len()
                )));
            }
            // Round numbers count the rounds of this run (the marking round is another run).
            for (i, target) in at.iter().enumerate() {
                let from = target.saturating_sub(half).max(1);
                if (from..from + reps).contains(&round) {
                    samples[i].push(elapsed);
                }
            }
        }
        let medians: Vec<f64> = samples.iter_mut().map(|s| median(s)).collect();
        let base = medians.first().copied().unwrap_or(0.0);
        let points: Vec<Value> = at
            .iter()
            .zip(&medians)
            .map(|(round, us)| {
                json!({
                    "round": round,
                    "round_us_median": round2(*us),
                    "ratio_to_first": if base > 0.0 { round2(us / base) } else { 0.0 },
                })
            })
            .collect();
        let line = json!({
            "bench": "runlen",
            "store": store.split('?').next().unwrap_or(&store),
            "calls_per_round": RUNLEN_CALLS,
            "reps": reps,
            "rounds": last,
            "points": points,
        });
        crate::print_line(&line.to_string());
    }
    Ok(())
}

/// A reply of `RUNLEN_CALLS` calls whose arguments no other round repeats.
fn runlen_reply(name: &str, round: u64) -> String {
    let calls: Vec<Value> = (0..RUNLEN_CALLS)
        .map(|i| {
            let n = round * RUNLEN_CALLS as u64 + i as u64;
            json!({
                "id": format!("call_{i}"),
                "type": "function",
                "function": {"name": "run_tool", "arguments": json!({"name": name, "args": {"i": n, "note": "2*21"}}).to_string()}
            })
        })
        .collect();
    json!({"role": "assistant", "content": null, "tool_calls": calls}).to_string()
}

fn openai_reply(name: &str, n: usize) -> String {
    let calls: Vec<Value> = (0..n)
        .map(|i| {
            json!({
                "id": format!("call_{i}"),
                "type": "function",
                "function": {"name": "run_tool", "arguments": json!({"name": name, "args": {"i": i, "note": "bench"}}).to_string()}
            })
        })
        .collect();
    json!({"role": "assistant", "content": null, "tool_calls": calls}).to_string()
}

/// The most calls running at once, from ToolCallStart / ToolCallEnd events.
fn inflight(outcome: &RoundOutcome) -> usize {
    let mut edges: Vec<(f64, i32)> = outcome
        .events
        .iter()
        .filter_map(|e| match e.kind {
            EventKind::ToolCallStart { .. } => Some((e.at_ms, 1)),
            EventKind::ToolCallEnd { .. } => Some((e.at_ms, -1)),
            _ => None,
        })
        .collect();
    // Ends before starts at the same instant, so touching intervals do not count as overlap.
    edges.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    let (mut now, mut max) = (0i32, 0i32);
    for (_, delta) in edges {
        now += delta;
        max = max.max(now);
    }
    usize::try_from(max).unwrap_or(0)
}

fn in_call_order(outcome: &RoundOutcome, n: usize) -> bool {
    outcome.results.len() == n
        && outcome.results.iter().enumerate().all(|(i, r)| {
            r.tool_call_id == format!("call_{i}") && r.content == format!("[{}] ok {i}", r.name)
        })
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(0.0)
}

fn round2(v: f64) -> f64 {
    (v * 100.0).round() / 100.0
}
