//! `tooldispatch bench scripts`: what script tools cost. The check every round makes for
//! edited definitions (with none and with `--n` tools installed), and one `script_` call as a
//! whole round beside the same program started directly, unconfined.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use dispatch_engine::{
    Engine, EngineConfig, Headless, Provider, RawCall, RoundRequest, ToolSource,
};
use dispatch_tools::extensions::{ExtensionTools, ToolDirs};
use serde_json::{Value, json};

use crate::CliError;

/// One JSON line: `check_us_median` per tool count, and the call's cost against the direct run.
pub async fn run(tools: usize, reps: usize) -> Result<Value, CliError> {
    let failed = |e: String| CliError::failed(e);
    let dir = crate::bench_http::TempDir::new()?;
    let root = dir.0.canonicalize().map_err(|e| failed(e.to_string()))?;
    let work = root.join("work");
    let user = root.join("tools");
    std::fs::create_dir_all(&work).map_err(|e| failed(e.to_string()))?;
    let script = "cat > /dev/null\necho '{\"ok\": true}'\n";
    for i in 0..tools.max(1) {
        let folder = user.join(format!("t{i}"));
        std::fs::create_dir_all(&folder).map_err(|e| failed(e.to_string()))?;
        let def = json!({"name": format!("t{i}"), "description": "bench", "read_only": true});
        std::fs::write(folder.join("tool.json"), def.to_string())
            .and_then(|()| std::fs::write(folder.join("script.sh"), script))
            .map_err(|e| failed(e.to_string()))?;
    }

    // The round-start check: no tool installed (the folders do not exist), and `tools` tools.
    let mut check_us = serde_json::Map::new();
    let missing = root.join("missing");
    for (label, dirs) in [
        (
            "0",
            ToolDirs {
                user: Some(missing.join("tools")),
                project: Some(missing.join(".tooldispatch/tools")),
                extensions: Some(missing.join("extensions")),
            },
        ),
        (
            "n",
            ToolDirs {
                user: Some(user.clone()),
                ..ToolDirs::default()
            },
        ),
    ] {
        let source = ExtensionTools::new(
            dirs,
            Default::default(),
            Default::default(),
            Default::default(),
        );
        source.apply(&mut dispatch_engine::Registry::empty());
        let mut times: Vec<f64> = (0..reps)
            .map(|_| {
                let started = Instant::now();
                let changed = source.changed();
                let us = started.elapsed().as_secs_f64() * 1e6;
                debug_assert!(!changed);
                us
            })
            .collect();
        let key = if label == "0" {
            "none".to_string()
        } else {
            tools.to_string()
        };
        check_us.insert(key, json!(round2(median(&mut times))));
    }

    // One script call as a round, against the program started directly.
    let source = Arc::new(ExtensionTools::new(
        ToolDirs {
            user: Some(user.clone()),
            ..ToolDirs::default()
        },
        Default::default(),
        Default::default(),
        Default::default(),
    ));
    let tools_config = dispatch_tools::ToolsConfig {
        extensions: Some(source.clone()),
        ..Default::default()
    };
    let registry = dispatch_tools::builtin_registry_with(&tools_config, &Default::default())
        .map_err(|e| failed(e.to_string()))?;
    let store = dispatch_store::open("memory:").map_err(|e| failed(e.to_string()))?;
    let engine = Engine::new(
        registry,
        store,
        Arc::new(Headless),
        EngineConfig::new(&work),
    )
    .map_err(|e| failed(e.to_string()))?
    .with_tool_source(source);
    let call = |id: &str, name: &str, args: Value| RawCall::new(id, name, args.to_string());
    let round = |run: String, calls: Vec<RawCall>| {
        engine.round(RoundRequest::new("bench", run, Provider::OpenAi, calls))
    };
    round(
        "select".into(),
        vec![call(
            "s",
            "find_tools",
            json!({"query": "select:script_t0"}),
        )],
    )
    .await
    .map_err(|e| failed(e.to_string()))?;
    let mut via_round = Vec::with_capacity(reps);
    for rep in 0..=reps {
        let started = Instant::now();
        let out = round(
            format!("r{rep}"),
            vec![call(
                "c",
                "run_tool",
                json!({"name": "script_t0", "args": {}}),
            )],
        )
        .await
        .map_err(|e| failed(e.to_string()))?;
        if out.results[0].status != dispatch_engine::Status::Ok {
            return Err(failed(format!(
                "the script call failed: {}",
                out.results[0].content
            )));
        }
        if rep > 0 {
            via_round.push(started.elapsed().as_secs_f64() * 1e3);
        }
    }
    let mut direct = Vec::with_capacity(reps);
    for rep in 0..=reps {
        let started = Instant::now();
        run_direct(&user.join("t0/script.sh"), &work)?;
        if rep > 0 {
            direct.push(started.elapsed().as_secs_f64() * 1e3);
        }
    }
    let round_ms = median(&mut via_round);
    let direct_ms = median(&mut direct);
    Ok(json!({
        "bench": "scripts",
        "reps": reps,
        "check_us_median": check_us,
        "script_round_ms_median": round2(round_ms),
        "direct_ms_median": round2(direct_ms),
        "ratio": round2(direct_ms / round_ms),
        "sandboxed": dispatch_sandbox::Sandbox::shared().available(),
    }))
}

fn run_direct(script: &Path, work: &Path) -> Result<(), CliError> {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let mut child = Command::new("sh")
        .arg(script)
        .current_dir(work)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| CliError::failed(format!("cannot start sh: {e}")))?;
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(b"{}");
    }
    let out = child
        .wait_with_output()
        .map_err(|e| CliError::failed(e.to_string()))?;
    if !out.status.success() {
        return Err(CliError::failed("the direct run failed"));
    }
    Ok(())
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(0.0)
}

fn round2(v: f64) -> f64 {
    (v * 100.0).round() / 100.0
}
