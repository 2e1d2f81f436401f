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
