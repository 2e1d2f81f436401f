//! `tooldispatch bench`: one JSON line per n with the keys of DESIGN §5. Timings are printed,
//! never asserted.

use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use super::support::*;

/// The keys of DESIGN §5 whose values are measurements (numbers, not compared).
const TIMINGS: [&str; 3] = ["round_us_median", "per_call_us_median", "wall_ms_median"];

/// Each line with the timings checked to be numbers ≥ 0 and then dropped, keeping the
/// contract's other keys.
fn bench_lines(output: &std::process::Output) -> Vec<Value> {
    assert!(
        output.status.success(),
        "exit {:?}: {}",
        output.status.code(),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout.clone())
        .unwrap()
        .lines()
        .map(|line| {
            let value: Value = serde_json::from_str(line).unwrap();
            for key in TIMINGS {
                let ms = value[key]
                    .as_f64()
                    .unwrap_or_else(|| panic!("{key} is not a number: {line}"));
                assert!(ms >= 0.0, "{line}");
            }
            json!({
                "bench": value["bench"],
                "n": value["n"],
                "max_inflight": value["max_inflight"],
                "results_in_call_order": value["results_in_call_order"],
            })
        })
        .collect()
}

#[test]
fn bench_overhead_prints_one_line_per_n_within_the_bound() {
    let td = Td::new();
    let output = td
        .bare()
        .args(["bench", "overhead", "--n", "1,4", "--reps", "5"])
        .output()
        .unwrap();
    let bound = dispatch_engine::default_max_concurrent();
    let lines = bench_lines(&output);
    // No-op calls may or may not overlap; never more than the bound, never none.
    let inflight: Vec<u64> = lines
        .iter()
        .map(|l| l["max_inflight"].as_u64().unwrap())
        .collect();
    assert!(
        inflight.iter().all(|&m| (1..=bound as u64).contains(&m)),
        "{inflight:?} not within 1..={bound}"
    );
    let without_inflight: Vec<Value> = lines
        .into_iter()
        .map(|mut l| {
            l.as_object_mut().unwrap().remove("max_inflight");
            l
        })
        .collect();
    assert_eq!(
        without_inflight,
        vec![
            json!({"bench": "overhead", "n": 1, "results_in_call_order": true}),
            json!({"bench": "overhead", "n": 4, "results_in_call_order": true}),
        ]
    );
}

#[test]
fn bench_sleep_runs_exactly_max_concurrent_calls_at_once() {
    let td = Td::new();
    let output = td
        .bare()
        .args([
            "bench",
            "sleep",
            "--n",
            "4",
            "--sleep-ms",
            "20",
            "--reps",
            "1",
            "--max-concurrent",
            "2",
        ])
        .output()
        .unwrap();
    assert_eq!(
        bench_lines(&output),
        vec![json!({"bench": "sleep", "n": 4, "max_inflight": 2, "results_in_call_order": true})]
    );
}

#[test]
fn bench_sleep_honours_the_max_concurrent_env() {
    let td = Td::new();
    let output = td
        .bare()
        .env("TOOLDISPATCH_MAX_CONCURRENT_TOOLS", "1")
        .args([
            "bench",
            "sleep",
            "--n",
            "4",
            "--sleep-ms",
            "20",
            "--reps",
            "1",
        ])
        .output()
        .unwrap();
    assert_eq!(
        bench_lines(&output),
        vec![json!({"bench": "sleep", "n": 4, "max_inflight": 1, "results_in_call_order": true})]
    );
}

#[test]
fn bench_http_answers_every_call_once_in_order_on_the_daemon_and_the_echo_baseline() {
    let td = Td::new();
    let output = td
        .bare()
        .args(["bench", "http", "--sessions", "20", "--rounds", "5"])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "exit {:?}: {}",
        output.status.code(),
        String::from_utf8_lossy(&output.stderr)
    );
    let lines: Vec<Value> = String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(lines.len(), 3, "{lines:?}");
    for (line, target) in lines.iter().zip(["daemon", "echo"]) {
        // Timings are numbers ≥ 0; their values are not compared.
        for key in ["rounds_per_s", "p50_ms", "p99_ms", "wall_ms"] {
            let v = line[key]
                .as_f64()
                .unwrap_or_else(|| panic!("{key} is not a number: {line}"));
            assert!(v >= 0.0, "{line}");
        }
        assert_eq!(
            json!({
                "bench": line["bench"], "target": line["target"], "sessions": line["sessions"],
                "rounds": line["rounds"], "calls": line["calls"], "requests": line["requests"],
                "errors": line["errors"], "wrong_results": line["wrong_results"],
            }),
            json!({
                "bench": "http", "target": target, "sessions": 20, "rounds": 5, "calls": 4,
                "requests": 100, "errors": 0, "wrong_results": 0,
            })
        );
    }
    assert!(lines[2]["ratio_vs_echo"].as_f64().is_some(), "{}", lines[2]);
    assert_eq!(lines[2]["bench"], "http");
    assert_eq!(lines[2]["all_calls_answered_once_in_order"], true);
}

/// `bench memory` with tiny sizes: a line per size for the CLI and the daemon, and one for the
/// refused largest body. Only the shape and the refusal are checked; the numbers are printed.
#[test]
fn bench_memory_prints_a_line_per_size_and_target_and_the_refused_body() {
    let td = Td::new();
    let output = td
        .bare()
        .args(["bench", "memory", "--n", "1,2", "--reps", "1"])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "exit {:?}: {}",
        output.status.code(),
        String::from_utf8_lossy(&output.stderr)
    );
    let lines: Vec<Value> = String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let shape: Vec<(Value, Value, Value)> = lines
        .iter()
        .map(|l| (l["target"].clone(), l["n"].clone(), l["code"].clone()))
        .collect();
    assert_eq!(
        shape,
        vec![
            (json!("cli"), json!(1), Value::Null),
            (json!("cli"), json!(2), Value::Null),
            (json!("daemon"), json!(1), Value::Null),
            (json!("daemon"), json!(2), Value::Null),
            (json!("daemon"), Value::Null, json!("too_many_calls")),
        ]
    );
    for line in &lines {
        let peak = line
            .get("peak_rss_kib_median")
            .or_else(|| line.get("peak_rss_kib"))
            .and_then(Value::as_f64)
            .unwrap_or_else(|| panic!("no peak: {line}"));
        assert!(peak > 0.0, "{line}");
    }
    assert_eq!(lines[4]["status"], json!(400));
}

/// The measurements of a `bench agent` line are numbers (the overhead may come out below zero
/// on a noisy machine); the rest of the line is returned for a whole-value comparison.
fn agent_line(output: &std::process::Output) -> Value {
    assert!(
        output.status.success(),
        "exit {:?}: {}{}",
        output.status.code(),
        String::from_utf8_lossy(&output.stderr),
        String::from_utf8_lossy(&output.stdout)
    );
    let stdout = String::from_utf8(output.stdout.clone()).unwrap();
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 1, "{stdout}");
    let mut line: Value = serde_json::from_str(lines[0]).unwrap();
    for key in [
        "turn_us_median",
        "model_rtt_us_median",
        "overhead_us_median",
    ] {
        let value = line.as_object_mut().unwrap().remove(key);
        assert!(
            value.as_ref().and_then(Value::as_f64).is_some(),
            "{key} is not a number: {stdout}"
        );
    }
    line
}

#[test]
fn bench_agent_runs_the_loop_to_a_final_answer_that_counts_every_result_right() {
    let td = Td::new();
    let output = td
        .bare()
        .args([
            "bench", "agent", "--turns", "2", "--calls", "3", "--reps", "2",
        ])
        .output()
        .unwrap();
    assert_eq!(
        agent_line(&output),
        json!({"bench": "agent", "peer": "tooldispatch", "turns": 2, "calls": 3, "reps": 2,
               "model_requests": 3, "answered": true, "problem": null})
    );
}

#[test]
fn the_scripted_model_serves_another_process_and_counts_only_right_results() {
    use std::io::{BufRead, BufReader};
    let td = Td::new();
    let mut server = td
        .std_command()
        .args([
            "bench",
            "agent",
            "--serve-model",
            "--turns",
            "1",
            "--calls",
            "2",
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(server.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    let url = serde_json::from_str::<Value>(&first).unwrap()["model_url"]
        .as_str()
        .unwrap()
        .to_string();
    let addr = url
        .strip_prefix("http://")
        .and_then(|rest| rest.strip_suffix("/v1"))
        .unwrap_or_else(|| panic!("not a base URL: {first}"));
    let ask = |body: Value| -> Value {
        let resp = super::daemon::request(
            addr,
            "POST",
            "/v1/chat/completions",
            &[("content-type", "application/json")],
            Some(&body.to_string()),
        )
        .unwrap();
        assert_eq!(resp.status, 200, "{}", resp.body);
        serde_json::from_str::<Value>(&resp.body).unwrap()["choices"][0]["message"].clone()
    };

    // A loop without run_tool (the SDK peer's) is asked to call calculate itself.
    let tools = json!([{"type": "function", "function": {"name": "calculate"}}]);
    let user = json!({"role": "user", "content": "add"});
    let first_turn = ask(json!({"messages": [user], "tools": tools}));
    let calls: Vec<(Value, Value)> = first_turn["tool_calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["function"]["name"].clone(),
                c["function"]["arguments"].clone(),
            )
        })
        .collect();
    assert_eq!(
        calls,
        vec![
            (json!("calculate"), json!(r#"{"expressions":["0+0"]}"#)),
            (json!("calculate"), json!(r#"{"expressions":["0+1"]}"#)),
        ]
    );
    // One right result and one wrong one: the final answer counts one.
    let answer = ask(json!({"messages": [
        user, first_turn,
        {"role": "tool", "tool_call_id": "call_0_0", "content": r#"{"0+0":"0"}"#},
        {"role": "tool", "tool_call_id": "call_0_1", "content": r#"{"0+1":"2"}"#},
    ], "tools": tools}));
    assert_eq!(answer["content"], json!("answered 1/2"));

    let output = td
        .bare()
        .args(["bench", "agent", "--model-url", &url])
        .args(["--turns", "1", "--calls", "2", "--reps", "1"])
        .output()
        .unwrap();
    assert_eq!(
        agent_line(&output),
        json!({"bench": "agent", "peer": "tooldispatch", "turns": 1, "calls": 2, "reps": 1,
               "model_requests": 2, "answered": true, "problem": null})
    );
    // Closing its stdin stops the server.
    drop(server.stdin.take());
    assert!(server.wait().unwrap().success());
}

/// `bench extract` on the checkout's marked set: our row, a peer scored from a file, the worst
/// pages and what the budget cut. A peer that returns each page's marked text must score 1.
#[test]
fn bench_extract_scores_fetch_page_and_peers_on_the_marked_set() {
    let td = Td::new();
    let set = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench/extract");
    let truth: Value =
        serde_json::from_str(&std::fs::read_to_string(set.join("truth.json")).unwrap()).unwrap();
    let texts: serde_json::Map<String, Value> = truth
        .as_object()
        .unwrap()
        .iter()
        .map(|(id, page)| (id.clone(), page["body"].clone()))
        .collect();
    let peers = td.file(
        "peers.json",
        &json!({"oracle": {"version": "1", "ms_per_page": 1.0, "texts": texts}}).to_string(),
    );
    let output = td
        .bare()
        .args(["bench", "extract", "--reps", "1", "--worst", "3", "--pages"])
        .arg(&set)
        .arg("--peers")
        .arg(&peers)
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(out.starts_with("181 pages from "), "{out}");
    let row = |name: &str| {
        out.lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("no {name} row: {out}"))
            .split_whitespace()
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    let ours = row("tooldispatch fetch_page");
    let f1: f64 = ours[5].parse().unwrap();
    assert!(f1 >= 0.96, "{out}");
    assert_eq!(
        &row("oracle")[2..6],
        ["1.000", "1.000", "1.000", "1.000"],
        "{out}"
    );
    let worst = out.split("lowest F1 (fetch_page):\n").nth(1).unwrap();
    assert_eq!(
        worst.lines().take_while(|l| l.starts_with("  F1 ")).count(),
        3,
        "{out}"
    );
    assert!(
        out.contains("cut by the 20000-byte result budget: "),
        "{out}"
    );
}
