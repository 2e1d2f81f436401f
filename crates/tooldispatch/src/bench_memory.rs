//! `tooldispatch bench memory`: the peak resident memory and the time of rounds of `--n`
//! calls, through the CLI (one `tooldispatch round` process per round) and through the daemon
//! (one `tooldispatch serve` process, rounds over HTTP), and what the daemon keeps resident
//! after its largest round and after a refused body of the largest size it reads.
//!
//! Every process is this binary, started as a child on a SQLite store in a temp dir, with no
//! config file but the bench's own (`max_calls_per_round` raised to the largest `--n` when that
//! is over the default). Each call is a distinct `calculate` expression, so nothing is answered
//! from dedupe or a cache. Memory is read from `/proc/<pid>/status`: `VmHWM` (the peak) and
//! `VmRSS` (now); before each daemon round the peak is reset (`/proc/<pid>/clear_refs`), so
//! each round's peak is its own. Linux only.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::CliError;
use crate::bench_http::{TempDir, reply};

/// How long the daemon is left idle before its resident memory is read "after" a round: the
/// allocator returns freed memory after a short delay, not at once.
const SETTLE: Duration = Duration::from_millis(1000);

pub async fn run(sizes: &[usize], reps: usize) -> Result<(), CliError> {
    let mut sizes: Vec<usize> = sizes.iter().map(|&n| n.max(1)).collect();
    sizes.sort_unstable();
    sizes.dedup();
    let reps = reps.max(1);
    let temp = TempDir::new()?;
    let exe = std::env::current_exe()
        .map_err(|e| CliError::failed(format!("cannot find this program's own file: {e}")))?;
    let largest = sizes.last().copied().unwrap_or(1);
    let limit = largest.max(dispatch_engine::DEFAULT_MAX_CALLS_PER_ROUND);
    let config = temp.0.join("config.toml");
    std::fs::write(&config, format!("max_calls_per_round = {limit}\n"))
        .map_err(|e| failed("cannot write the bench's config file", e))?;
    let world = World {
        exe,
        dir: temp.0.clone(),
        config,
    };

    let cli = {
        let world = world.clone();
        let sizes = sizes.clone();
        tokio::task::spawn_blocking(move || cli_rounds(&world, &sizes, reps))
            .await
            .map_err(|e| CliError::failed(format!("the benchmark stopped: {e}")))??
    };
    for line in cli {
        crate::print_line(&line.to_string());
    }
    for line in daemon_rounds(&world, &sizes, reps).await? {
        crate::print_line(&line.to_string());
    }
    Ok(())
}

/// The bench's temp dir, its config file and the program every child runs.
#[derive(Clone)]
struct World {
    exe: PathBuf,
    dir: PathBuf,
    config: PathBuf,
}

impl World {
    /// This program with the bench's data dir, config file and store: never the user's.
    fn command(&self, store: &str) -> Command {
        let mut cmd = Command::new(&self.exe);
        cmd.env("XDG_DATA_HOME", self.dir.join("data"))
            .env("XDG_CONFIG_HOME", self.dir.join("no-config"))
            .env_remove("TOOLDISPATCH_MAX_CONCURRENT_TOOLS")
            .env_remove("TOOLDISPATCH_ADDR")
            .env("TOOLDISPATCH_CONFIG", &self.config)
            .env(
                "TOOLDISPATCH_STORE",
                format!("sqlite:{}", self.dir.join(store).display()),
            );
        cmd
    }
}

fn failed(what: &str, e: impl std::fmt::Display) -> CliError {
    CliError::failed(format!("{what}: {e}"))
}

/// One `tooldispatch round` process per measured round; a JSON line per size.
fn cli_rounds(world: &World, sizes: &[usize], reps: usize) -> Result<Vec<Value>, CliError> {
    let work = world.dir.join("work");
    let out = world.dir.join("round.out");
    let round = |run: &str, reply: &str| -> Result<(f64, u64, usize), CliError> {
        let stdout =
            std::fs::File::create(&out).map_err(|e| failed("cannot create a temp file", e))?;
        let started = Instant::now();
        let mut child = world
            .command("cli.db")
            .args(["round", "--session", "mem", "--run", run, "--workdir"])
            .arg(&work)
            .stdin(Stdio::piped())
            .stdout(stdout)
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| failed("cannot start tooldispatch round", e))?;
        if let Some(mut stdin) = child.stdin.take() {
            stdin
                .write_all(reply.as_bytes())
                .map_err(|e| failed("cannot send the reply to tooldispatch round", e))?;
        }
        let peak = peak_until_exit(&mut child)?;
        let wall_ms = started.elapsed().as_secs_f64() * 1000.0;
        let answered: Value = std::fs::read_to_string(&out)
            .ok()
            .and_then(|text| serde_json::from_str(&text).ok())
            .unwrap_or(Value::Null);
        Ok((wall_ms, peak, answered.as_array().map_or(0, Vec::len)))
    };
    std::fs::create_dir_all(&work).map_err(|e| failed("cannot create a temp dir", e))?;
    round("mark", &select_calculate())?;
    let mut lines = Vec::new();
    let mut next = 0;
    for &n in sizes {
        let mut walls = Vec::with_capacity(reps);
        let mut peaks = Vec::with_capacity(reps);
        for rep in 0..reps {
            let (reply, bytes) = calculations(n, &mut next);
            let (wall, peak, answered) = round(&format!("n{n}-r{rep}"), &reply)?;
            if answered != n {
                return Err(CliError::failed(format!(
                    "tooldispatch round answered {answered} of {n} calls ({bytes} bytes of reply)"
                )));
            }
            walls.push(wall);
            peaks.push(peak as f64);
        }
        lines.push(json!({
            "bench": "memory",
            "target": "cli",
            "n": n,
            "reps": reps,
            "peak_rss_kib_median": median(&mut peaks).round(),
            "wall_ms_median": round2(median(&mut walls)),
        }));
    }
    Ok(lines)
}

/// The peak resident memory (KiB) of `child` until it exits, which must be with success.
/// `VmHWM` is a high-water mark, so reading it every millisecond misses only growth in the
/// child's last millisecond (its exit).
fn peak_until_exit(child: &mut Child) -> Result<u64, CliError> {
    let pid = child.id();
    let mut peak = 0;
    loop {
        if let Some(hwm) = status_kib(pid, "VmHWM") {
            peak = peak.max(hwm);
        }
        match child.try_wait() {
            Ok(Some(status)) if status.success() => return Ok(peak),
            Ok(Some(status)) => {
                let mut stderr = String::new();
                if let Some(mut pipe) = child.stderr.take() {
                    let _ = pipe.read_to_string(&mut stderr);
                }
                return Err(CliError::failed(format!(
                    "a measured tooldispatch process failed ({status}): {}",
                    stderr.trim()
                )));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(1)),
            Err(e) => return Err(failed("cannot wait for a measured process", e)),
        }
    }
}

/// A `/proc/<pid>/status` field in KiB (`VmHWM`, `VmRSS`).
fn status_kib(pid: u32, field: &str) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    text.lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|kib| kib.parse().ok())
}

/// A daemon child, killed and reaped when dropped.
struct Daemon {
    child: Child,
    url: String,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Daemon {
    fn start(world: &World) -> Result<Daemon, CliError> {
        let mut child = world
            .command("daemon.db")
            .args(["serve", "--addr", "127.0.0.1:0", "--workdir"])
            .arg(world.dir.join("work"))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| failed("cannot start tooldispatch serve", e))?;
        let Some(stdout) = child.stdout.take() else {
            return Err(CliError::failed("tooldispatch serve has no stdout"));
        };
        let mut reader = BufReader::new(stdout);
        let mut first = String::new();
        let _ = reader.read_line(&mut first);
        // The rest is drained so the daemon never blocks on a full pipe.
        std::thread::spawn(move || std::io::copy(&mut reader, &mut std::io::sink()));
        let mut daemon = Daemon {
            child,
            url: String::new(),
        };
        let Some(addr) = first.trim().strip_prefix("listening on ") else {
            return Err(CliError::failed(format!(
                "tooldispatch serve did not start (first line: {first:?})"
            )));
        };
        daemon.url = addr.to_string();
        Ok(daemon)
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn rss(&self) -> u64 {
        status_kib(self.pid(), "VmRSS").unwrap_or(0)
    }

    /// Reset the peak to the resident memory now, so the next read is one round's peak.
    fn reset_peak(&self) -> Result<(), CliError> {
        std::fs::write(format!("/proc/{}/clear_refs", self.pid()), "5")
            .map_err(|e| failed("cannot reset the daemon's peak memory (clear_refs)", e))
    }

    fn peak(&self) -> u64 {
        status_kib(self.pid(), "VmHWM").unwrap_or(0)
    }
}

/// Rounds through one daemon, the sizes in order; then a refused body as large as it takes.
async fn daemon_rounds(
    world: &World,
    sizes: &[usize],
    reps: usize,
) -> Result<Vec<Value>, CliError> {
    let daemon = {
        let world = world.clone();
        tokio::task::spawn_blocking(move || Daemon::start(&world))
            .await
            .map_err(|e| CliError::failed(format!("the benchmark stopped: {e}")))??
    };
    let client = dispatch_tools::web::client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(600))
        .build()
        .map_err(|e| failed("cannot build the HTTP client", e))?;
    let post = |run: String, body: String| {
        let url = format!("{}/v1/sessions/mem/rounds?run={run}", daemon.url);
        let client = client.clone();
        async move {
            let response = client
                .post(url)
                .header("content-type", "application/json")
                .body(body)
                .send()
                .await
                .map_err(|e| failed("a round request failed", e))?;
            let status = response.status().as_u16();
            let text = response
                .text()
                .await
                .map_err(|e| failed("reading a round's answer failed", e))?;
            Ok::<_, CliError>((status, text))
        }
    };
    let (status, text) = post("mark".into(), select_calculate()).await?;
    if status != 200 {
        return Err(CliError::failed(format!(
            "the daemon refused the marking round: HTTP {status}: {text}"
        )));
    }
    tokio::time::sleep(SETTLE).await;
    let idle = daemon.rss();
    let mut lines = Vec::new();
    let mut next = 1_000_000;
    for &n in sizes {
        let mut walls = Vec::with_capacity(reps);
        let mut peaks = Vec::with_capacity(reps);
        for rep in 0..reps {
            let (reply, _) = calculations(n, &mut next);
            daemon.reset_peak()?;
            let started = Instant::now();
            let (status, text) = post(format!("n{n}-r{rep}"), reply).await?;
            walls.push(started.elapsed().as_secs_f64() * 1000.0);
            peaks.push(daemon.peak() as f64);
            let answered = serde_json::from_str::<Value>(&text)
                .ok()
                .and_then(|v| v.as_array().map(Vec::len));
            if status != 200 || answered != Some(n) {
                return Err(CliError::failed(format!(
                    "the daemon did not answer all {n} calls: HTTP {status}: {}",
                    text.chars().take(300).collect::<String>()
                )));
            }
        }
        tokio::time::sleep(SETTLE).await;
        lines.push(json!({
            "bench": "memory",
            "target": "daemon",
            "n": n,
            "reps": reps,
            "rss_idle_kib": idle,
            "peak_rss_kib_median": median(&mut peaks).round(),
            "rss_after_kib": daemon.rss(),
            "wall_ms_median": round2(median(&mut walls)),
        }));
    }
    // The largest body the daemon reads, full of calls: refused by max_calls_per_round.
    let (body, calls) = body_of_calls(dispatch_server::BODY_LIMIT);
    daemon.reset_peak()?;
    let started = Instant::now();
    let body_bytes = body.len();
    let (status, text) = post("refused".into(), body).await?;
    let wall = started.elapsed().as_secs_f64() * 1000.0;
    let peak = daemon.peak();
    let code = serde_json::from_str::<Value>(&text)
        .ok()
        .and_then(|v| v["error"]["code"].as_str().map(str::to_string));
    tokio::time::sleep(SETTLE).await;
    lines.push(json!({
        "bench": "memory",
        "target": "daemon",
        "refused_body_bytes": body_bytes,
        "refused_calls": calls,
        "status": status,
        "code": code,
        "peak_rss_kib": peak,
        "rss_after_kib": daemon.rss(),
        "wall_ms": round2(wall),
    }));
    Ok(lines)
}

/// The reply that fetches calculate's schema, so later rounds call it through run_tool.
fn select_calculate() -> String {
    reply(&[(
        "mark".to_string(),
        "find_tools",
        json!({"query": "select:calculate"}),
    )])
}

/// `n` calls of `calculate` through run_tool, each with an expression no other call of the
/// bench uses (`next` counts them); the reply and its size.
fn calculations(n: usize, next: &mut usize) -> (String, usize) {
    let calls: Vec<(String, &str, Value)> = (0..n)
        .map(|i| {
            *next += 1;
            (
                format!("c{i}"),
                "run_tool",
                json!({"name": "calculate", "args": {"expressions": [format!("{}+1", *next)]}}),
            )
        })
        .collect();
    let text = reply(&calls);
    let bytes = text.len();
    (text, bytes)
}

/// A reply of small calculate calls as large as fits in `bytes`, and how many calls it has.
fn body_of_calls(bytes: usize) -> (String, usize) {
    let mut body = String::from(r#"{"role":"assistant","content":null,"tool_calls":["#);
    let mut calls = 0;
    loop {
        let args = json!({"expressions": [format!("{calls}+1")]}).to_string();
        let call = json!({"id": format!("c{calls}"), "type": "function",
                          "function": {"name": "calculate", "arguments": args}})
        .to_string();
        if body.len() + call.len() + 3 > bytes {
            break;
        }
        if calls > 0 {
            body.push(',');
        }
        body.push_str(&call);
        calls += 1;
    }
    body.push_str("]}");
    (body, calls)
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(0.0)
}

fn round2(v: f64) -> f64 {
    (v * 100.0).round() / 100.0
}
