//! `tooldispatch bench http`: the daemon under load, on loopback, beside a bare axum handler
//! that echoes the body. Both servers run in this process on 127.0.0.1:0; the same client
//! drives `--sessions` sessions at once, each sending `--rounds` rounds of `--calls` calculate
//! calls one after another. Every answer is checked (status, call ids in call order, results),
//! and the daemon's rounds/s is reported as a ratio of the echo handler's.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use clap::Args;
use dispatch_engine::Provider;
use dispatch_server::{Access, Daemon, Hub};
use serde_json::{Value, json};
use tokio::sync::Barrier;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::{Approve, CliError, Common, setup};

#[derive(Args)]
pub struct HttpArgs {
    /// http: sessions driven at once (one task and one connection each).
    #[arg(long, default_value_t = 200)]
    sessions: usize,
    /// http: rounds per session, sent one after another.
    #[arg(long, default_value_t = 50)]
    rounds: usize,
    /// http: calculate calls per round (default 4); agent: per model turn (default 1).
    #[arg(long)]
    pub(crate) calls: Option<usize>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Target {
    Daemon,
    Echo,
}

impl Target {
    fn name(self) -> &'static str {
        match self {
            Target::Daemon => "daemon",
            Target::Echo => "echo",
        }
    }
}

/// What one target's load produced.
#[derive(Default)]
struct Tally {
    /// Measured rounds sent.
    requests: usize,
    /// Transport failures and non-200 answers (setup requests included).
    errors: usize,
    /// Calls answered wrongly, out of order, twice or not at all (for echo: bodies that did
    /// not come back intact).
    wrong_results: usize,
    latencies_ms: Vec<f64>,
    /// The first few problems, for stderr.
    problems: Vec<String>,
}

impl Tally {
    fn merge(&mut self, other: Tally) {
        self.requests += other.requests;
        self.errors += other.errors;
        self.wrong_results += other.wrong_results;
        self.latencies_ms.extend(other.latencies_ms);
        for p in other.problems {
            self.note(p);
        }
    }
    fn note(&mut self, problem: String) {
        if self.problems.len() < 5 {
            self.problems.push(problem);
        }
    }
}

/// A directory under the system temp dir, removed when dropped.
pub(crate) struct TempDir(pub(crate) PathBuf);

impl TempDir {
    pub(crate) fn new() -> Result<TempDir, CliError> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let dir = std::env::temp_dir().join(format!(
            "tooldispatch-bench-http-{}-{nanos}",
            std::process::id()
        ));
        std::fs::create_dir_all(dir.join("work")).map_err(|e| {
            CliError::failed(format!(
                "cannot create the benchmark's temp dir {} (set TMPDIR to a writable directory): {e}",
                dir.display()
            ))
        })?;
        Ok(TempDir(dir))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub async fn run(
    args: HttpArgs,
    store: Option<&str>,
    max_concurrent: Option<usize>,
) -> Result<(), CliError> {
    let sessions = args.sessions.max(1);
    let rounds = args.rounds.max(1);
    let calls = args.calls.unwrap_or(4).max(1);
    let temp = TempDir::new()?;
    // The daemon's default store is SQLite; the bench's is a fresh file in the temp dir.
    let store_url = store
        .map(String::from)
        .unwrap_or_else(|| format!("sqlite:{}", temp.0.join("store.db").display()));
    let common = Common {
        provider: Provider::OpenAi,
        workdir: Some(temp.0.join("work")),
        store: Some(store_url),
        config: None,
        approve: Approve::None,
        max_concurrent,
        client_tools: None,
        exclude: Vec::new(),
    };
    // As `serve` builds it, minus the machine's config file (a benchmark should not depend on it).
    let hub = Hub::new(dispatch_engine::EngineConfig::new(".").confirm_timeout);
    let (engine, store, _legs) = setup::build(&common, None, &Config::default(), hub.clone())?;
    let bytes_before = store_bytes(store.as_ref()).await;
    let daemon = Daemon::new(Arc::new(engine), hub, store.clone());

    let stop = CancellationToken::new();
    let daemon_listener = listen().await?;
    let daemon_addr = local_addr(&daemon_listener)?;
    let daemon_server = tokio::spawn(dispatch_server::serve(
        daemon_listener,
        daemon,
        Access::default(),
        stop.clone().cancelled_owned(),
    ));
    let echo_listener = listen().await?;
    let echo_addr = local_addr(&echo_listener)?;
    let echo_app = axum::Router::new().route(
        "/echo",
        axum::routing::post(|body: Bytes| async move { body }),
    );
    let echo_server = tokio::spawn(
        axum::serve(echo_listener, echo_app)
            .with_graceful_shutdown(stop.clone().cancelled_owned())
            .into_future(),
    );

    let client = dispatch_tools::web::client::builder()
        .no_proxy()
        .pool_max_idle_per_host(sessions)
        .timeout(Duration::from_secs(120))
        .build()
        .map_err(|e| CliError::failed(format!("cannot build the HTTP client: {e}")))?;
    let shape = Shape {
        sessions,
        rounds,
        calls,
    };
    let mut results = Vec::new();
    for (target, addr) in [(Target::Daemon, daemon_addr), (Target::Echo, echo_addr)] {
        let base = format!("http://{addr}");
        let (tally, wall) = drive(&client, &base, target, shape).await;
        results.push((target, tally, wall));
    }
    drop(client);
    stop.cancel();
    for server in [daemon_server, echo_server] {
        // Connections are closed with the client; a server that still hangs is not waited for.
        let _ = tokio::time::timeout(Duration::from_secs(5), server).await;
    }

    // What the load added on disk, per round (SQLite: the file after a checkpoint).
    let bytes_per_round = match (bytes_before, store_bytes(store.as_ref()).await) {
        (Some(before), Some(after)) => {
            Some((after.saturating_sub(before)) as f64 / (sessions * rounds) as f64)
        }
        _ => None,
    };
    let mut rates = [0.0f64; 2];
    let mut failures = Vec::new();
    let mut daemon_correct = false;
    for (target, mut tally, wall) in results {
        let wall_s = wall.as_secs_f64();
        let rate = if wall_s > 0.0 {
            tally.requests as f64 / wall_s
        } else {
            0.0
        };
        rates[usize::from(target == Target::Echo)] = rate;
        tally.latencies_ms.sort_by(f64::total_cmp);
        crate::print_line(
            &json!({
                "bench": "http",
                "target": target.name(),
                "sessions": sessions,
                "rounds": rounds,
                "calls": calls,
                "requests": tally.requests,
                "errors": tally.errors,
                "wrong_results": tally.wrong_results,
                "rounds_per_s": round2(rate),
                "p50_ms": round2(percentile(&tally.latencies_ms, 0.50)),
                "p99_ms": round2(percentile(&tally.latencies_ms, 0.99)),
                "wall_ms": round2(wall_s * 1000.0),
                "store_bytes_per_round": (target == Target::Daemon)
                    .then_some(bytes_per_round)
                    .flatten()
                    .map(|b| b.round()),
            })
            .to_string(),
        );
        let complete = tally.requests == sessions * rounds;
        if target == Target::Daemon {
            daemon_correct = complete && tally.errors == 0 && tally.wrong_results == 0;
        }
        if !complete || tally.errors > 0 || tally.wrong_results > 0 {
            failures.push(format!(
                "{}: {} errors, {} wrong results, {} of {} rounds sent (first problems: {})",
                target.name(),
                tally.errors,
                tally.wrong_results,
                tally.requests,
                sessions * rounds,
                tally.problems.join("; ")
            ));
        }
    }
    let ratio = if rates[1] > 0.0 {
        rates[0] / rates[1]
    } else {
        0.0
    };
    crate::print_line(
        &json!({
            "bench": "http",
            "ratio_vs_echo": (ratio * 1000.0).round() / 1000.0,
            "all_calls_answered_once_in_order": daemon_correct,
        })
        .to_string(),
    );
    if failures.is_empty() {
        Ok(())
    } else {
        Err(CliError::failed(format!(
            "the load was not answered correctly (a correctness failure, not a timing one): {}",
            failures.join(" | ")
        )))
    }
}

/// This process's tag for the sessions it creates: six hex digits, short because every row
/// of a round stores the session id (and `store_bytes_per_round` counts them).
fn run_tag() -> &'static str {
    static TAG: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    TAG.get_or_init(|| {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let mixed = nanos ^ (u128::from(std::process::id()) << 20);
        format!("{:06x}", mixed & 0xff_ffff)
    })
}

/// The bytes an SQLite store holds on disk once its WAL is checkpointed into the file; `None`
/// for the other backends (Redis reports the whole server's memory, not this store's).
async fn store_bytes(store: &dyn dispatch_store::Store) -> Option<u64> {
    // Keeps every run (the cutoff is far in the past); only checkpoints and optimizes.
    let keep_all = dispatch_store::GcPolicy {
        finished_runs_older_than: Duration::from_secs(100 * 365 * 24 * 3600),
    };
    store.gc(&keep_all).await.ok()?;
    let stats = store.stats().await.ok()?;
    (stats.backend == "sqlite").then_some(stats.bytes).flatten()
}

#[derive(Clone, Copy)]
struct Shape {
    sessions: usize,
    rounds: usize,
    calls: usize,
}

async fn listen() -> Result<tokio::net::TcpListener, CliError> {
    tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| CliError::failed(format!("cannot listen on 127.0.0.1:0: {e}")))
}

fn local_addr(listener: &tokio::net::TcpListener) -> Result<std::net::SocketAddr, CliError> {
    listener
        .local_addr()
        .map_err(|e| CliError::failed(format!("cannot read the listening address: {e}")))
}

/// All sessions at once against one target. The sessions set up first (create, mark
/// calculate; not measured), then start their rounds together; the wall time runs from that
/// start to the last session's last answer.
async fn drive(
    client: &reqwest::Client,
    base: &str,
    target: Target,
    shape: Shape,
) -> (Tally, Duration) {
    let barrier = Arc::new(Barrier::new(shape.sessions + 1));
    let mut tasks = Vec::with_capacity(shape.sessions);
    for s in 0..shape.sessions {
        let client = client.clone();
        let base = base.to_string();
        let barrier = barrier.clone();
        tasks.push(tokio::spawn(async move {
            session(&client, &base, target, shape, s, &barrier).await
        }));
    }
    barrier.wait().await;
    let started = Instant::now();
    let mut total = Tally::default();
    for task in tasks {
        match task.await {
            Ok(tally) => total.merge(tally),
            Err(e) => {
                total.errors += 1;
                total.note(format!("a session task stopped: {e}"));
            }
        }
    }
    (total, started.elapsed())
}

async fn session(
    client: &reqwest::Client,
    base: &str,
    target: Target,
    shape: Shape,
    s: usize,
    barrier: &Barrier,
) -> Tally {
    let mut tally = Tally::default();
    // Names no earlier run used: a shared store (Redis) keeps sessions between runs, and a
    // reused session would answer from an earlier run's remembered results.
    let id = format!("load-{}-{s}", run_tag());
    let rounds_url = match target {
        Target::Daemon => format!("{base}/v1/sessions/{id}/rounds?provider=openai&run=load"),
        Target::Echo => format!("{base}/echo"),
    };
    let create_url = match target {
        Target::Daemon => format!("{base}/v1/sessions"),
        Target::Echo => format!("{base}/echo"),
    };
    // Setup, not measured: create the session, then mark calculate (a find_tools round).
    let create = json!({"id": id}).to_string();
    let mark = reply(&[(
        "mark".to_string(),
        "find_tools",
        json!({"query": "select:calculate"}),
    )]);
    for (url, body, want) in [(&create_url, create, 201u16), (&rounds_url, mark, 200)] {
        let want = if target == Target::Echo { 200 } else { want };
        match post(client, url, body).await {
            Ok((status, _)) if status == want => {}
            Ok((status, text)) => {
                tally.errors += 1;
                tally.note(format!("setup of {id}: HTTP {status}: {text}"));
            }
            Err(e) => {
                tally.errors += 1;
                tally.note(format!("setup of {id}: {e}"));
            }
        }
    }
    barrier.wait().await;
    for r in 0..shape.rounds {
        // Every expression is distinct across the whole load, so no answer can come from
        // dedupe or a cache; `a+b` is known, so each result can be checked.
        let expected: Vec<(String, String, String)> = (0..shape.calls)
            .map(|c| {
                let a = (s * shape.rounds + r) * shape.calls + c + 1;
                let b = s + 7;
                (format!("r{r}c{c}"), format!("{a}+{b}"), (a + b).to_string())
            })
            .collect();
        let body = reply(
            &expected
                .iter()
                .map(|(call_id, expr, _)| {
                    (
                        call_id.clone(),
                        "run_tool",
                        json!({"name": "calculate", "args": {"expressions": [expr]}}),
                    )
                })
                .collect::<Vec<_>>(),
        );
        let sent = body.clone();
        let started = Instant::now();
        let answer = post(client, &rounds_url, body).await;
        let elapsed = started.elapsed();
        tally.requests += 1;
        let (status, text) = match answer {
            Ok(answer) => answer,
            Err(e) => {
                tally.errors += 1;
                tally.note(format!("{id} round {r}: {e}"));
                continue;
            }
        };
        tally.latencies_ms.push(elapsed.as_secs_f64() * 1000.0);
        if status != 200 {
            tally.errors += 1;
            tally.note(format!("{id} round {r}: HTTP {status}: {text}"));
            continue;
        }
        let wrong = match target {
            Target::Echo => usize::from(text != sent),
            Target::Daemon => wrong_calls(&text, &expected),
        };
        if wrong > 0 {
            tally.wrong_results += wrong;
            tally.note(format!("{id} round {r}: {wrong} wrong: {text}"));
        }
    }
    tally
}

/// POST a JSON body; the status and the body text.
async fn post(client: &reqwest::Client, url: &str, body: String) -> Result<(u16, String), String> {
    let response = client
        .post(url)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .map_err(|e| format!("request failed: {e}"))?;
    let status = response.status().as_u16();
    let text = response
        .text()
        .await
        .map_err(|e| format!("reading the answer failed: {e}"))?;
    Ok((status, text))
}

/// An OpenAI chat assistant message with these (id, tool, arguments) calls (also the
/// memory benchmark's rounds).
pub(crate) fn reply(calls: &[(String, &str, Value)]) -> String {
    let calls: Vec<Value> = calls
        .iter()
        .map(|(id, name, args)| {
            json!({"id": id, "type": "function",
                   "function": {"name": name, "arguments": args.to_string()}})
        })
        .collect();
    json!({"role": "assistant", "content": null, "tool_calls": calls}).to_string()
}

/// How many calls of the round were not answered exactly once, in call order, with the right
/// result: a message per expected call that is missing or wrong, plus any extra message.
fn wrong_calls(text: &str, expected: &[(String, String, String)]) -> usize {
    let Ok(Value::Array(messages)) = serde_json::from_str::<Value>(text) else {
        return expected.len();
    };
    let extra = messages.len().saturating_sub(expected.len());
    let wrong = expected
        .iter()
        .enumerate()
        .filter(|(i, (call_id, expr, result))| {
            let Some(message) = messages.get(*i) else {
                return true;
            };
            let content = message["content"]
                .as_str()
                .and_then(|c| c.strip_prefix("[calculate] "))
                .and_then(|c| serde_json::from_str::<Value>(c).ok());
            !(message["role"] == "tool"
                && message["tool_call_id"] == call_id.as_str()
                && content == Some(json!({ expr.as_str(): result })))
        })
        .count();
    wrong + extra
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((sorted.len() as f64) * p).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn round2(v: f64) -> f64 {
    (v * 100.0).round() / 100.0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expected() -> Vec<(String, String, String)> {
        vec![
            ("r0c0".into(), "1+7".into(), "8".into()),
            ("r0c1".into(), "2+7".into(), "9".into()),
        ]
    }

    fn message(id: &str, expr: &str, result: &str) -> Value {
        let content = json!({ expr: result }).to_string();
        json!({"role": "tool", "tool_call_id": id, "content": format!("[calculate] {content}")})
    }

    #[test]
    fn wrong_calls_counts_every_call_not_answered_once_in_order_with_its_result() {
        let good = [message("r0c0", "1+7", "8"), message("r0c1", "2+7", "9")];
        assert_eq!(wrong_calls(&json!(good).to_string(), &expected()), 0);
        let swapped = [good[1].clone(), good[0].clone()];
        assert_eq!(wrong_calls(&json!(swapped).to_string(), &expected()), 2);
        let missing = [good[0].clone()];
        assert_eq!(wrong_calls(&json!(missing).to_string(), &expected()), 1);
        let twice = [good[0].clone(), good[1].clone(), good[1].clone()];
        assert_eq!(wrong_calls(&json!(twice).to_string(), &expected()), 1);
        let bad_result = [good[0].clone(), message("r0c1", "2+7", "10")];
        assert_eq!(wrong_calls(&json!(bad_result).to_string(), &expected()), 1);
        assert_eq!(wrong_calls("not json", &expected()), 2);
    }

    #[test]
    fn percentile_takes_the_nearest_rank() {
        let sorted: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&sorted, 0.5), 50.0);
        assert_eq!(percentile(&sorted, 0.99), 99.0);
        assert_eq!(percentile(&[], 0.5), 0.0);
    }
}
