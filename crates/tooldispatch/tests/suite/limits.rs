//! `max_calls_per_round`: a reply with more tool calls than a round takes is bad input (exit
//! 2, one line naming the limit and where to change it), and nothing of it is committed.

use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use super::support::*;

/// `n` distinct calculate calls through run_tool (distinct, so none is deduplicated).
pub fn calculations(n: usize) -> String {
    let calls: Vec<(String, Value)> = (0..n)
        .map(|i| {
            (
                format!("c{i}"),
                run_tool("calculate", json!({"expressions": [format!("{i}+1")]})),
            )
        })
        .collect();
    let calls: Vec<(&str, &str, Value)> = calls
        .iter()
        .map(|(id, args)| (id.as_str(), "run_tool", args.clone()))
        .collect();
    openai(&calls)
}

/// Exit code, stdout and stderr of `round --session s --run r [extra]` with this reply.
fn round_output(td: &Td, extra: &[&str], reply: &str) -> (Option<i32>, String, String) {
    let mut args = vec!["round", "--session", "s", "--run", "r"];
    args.extend_from_slice(extra);
    let output = td.cmd(&args).write_stdin(reply).output().unwrap();
    (
        output.status.code(),
        String::from_utf8(output.stdout).unwrap(),
        String::from_utf8(output.stderr).unwrap(),
    )
}

#[test]
fn a_reply_over_512_calls_exits_2_naming_the_limit_and_commits_nothing() {
    let td = Td::new();
    td.round("s", "r", &[], &select("m", "calculate"));
    assert_eq!(
        round_output(&td, &[], &calculations(513)),
        (
            Some(2),
            String::new(),
            "tooldispatch: the reply has 513 tool calls; a round takes at most 512 (max_calls_per_round in the config file)\n"
                .to_string()
        )
    );
    // The refused reply left no round behind: the next one is round 2 of the run, and all
    // 512 of its calls ran.
    let report = td.report("s", "r", &[], &calculations(512));
    assert_eq!(report["round"], json!(2));
    let results = report["results"].as_array().unwrap();
    assert_eq!(results.len(), 512);
    assert!(results.iter().all(|r| r["status"] == "ok"), "{report}");
}

#[test]
fn the_config_files_max_calls_per_round_is_the_limit() {
    let td = Td::new();
    let config = td.file("config.toml", "max_calls_per_round = 2\n");
    let config = config.to_str().unwrap();
    td.round("s", "r", &["--config", config], &select("m", "calculate"));
    let (code, stdout, stderr) = round_output(&td, &["--config", config], &calculations(3));
    assert_eq!((code, stdout.as_str()), (Some(2), ""), "{stderr}");
    assert_eq!(
        stderr,
        "tooldispatch: the reply has 3 tool calls; a round takes at most 2 (max_calls_per_round in the config file)\n"
    );
    let answered = td.round("s", "r", &["--config", config], &calculations(2));
    assert_eq!(answered.as_array().unwrap().len(), 2);
    // And a larger limit lets a larger reply through.
    let config = td.file("more.toml", "max_calls_per_round = 600\n");
    let answered = td.round(
        "s",
        "r",
        &["--config", config.to_str().unwrap()],
        &calculations(513),
    );
    assert_eq!(answered.as_array().unwrap().len(), 513);
}

#[test]
fn a_zero_limit_in_the_config_file_is_refused() {
    let td = Td::new();
    let config = td.file("config.toml", "max_calls_per_round = 0\n");
    let (code, _, stderr) = round_output(
        &td,
        &["--config", config.to_str().unwrap()],
        &calculations(1),
    );
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("max_calls_per_round must be at least 1"),
        "{stderr}"
    );
}

#[test]
fn replay_refuses_an_oversized_line_naming_the_file_and_line() {
    let td = Td::new();
    let file = td.file(
        "replies.jsonl",
        &format!("{}\n{}\n", select("m", "calculate"), calculations(513)),
    );
    let output = td
        .cmd(&["replay", file.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert_eq!(
        stderr,
        format!(
            "tooldispatch: {}:2: the reply has 513 tool calls; a round takes at most 512 (max_calls_per_round in the config file)\n",
            file.display()
        )
    );
}

/// `--report` holds each call's arguments in the events that name the call (ToolCall and
/// ToolResult), never in the results, however large they are.
#[test]
fn the_report_carries_a_large_argument_once_per_call_event() {
    let td = Td::new();
    td.round("s", "r", &[], &select("m", "calculate"));
    // An argument calculate refuses (it takes only `expressions`), so no result quotes it.
    let big = format!("BIG{}", "x".repeat(200_000));
    let args = json!({"expressions": ["1+1"], "note": big});
    let reply = openai(&[("big", "run_tool", run_tool("calculate", args.clone()))]);
    let output = td
        .cmd(&["round", "--session", "s", "--run", "r", "--report"])
        .write_stdin(reply)
        .output()
        .unwrap();
    let text = String::from_utf8(output.stdout.clone()).unwrap();
    let report = stdout_json(&output);
    assert_eq!(
        report["results"][0]["status"], "invalid",
        "{}",
        report["results"]
    );
    let carrying: Vec<&str> = report["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["tool_args"] == args.to_string().as_str())
        .map(|e| e["type"].as_str().unwrap())
        .collect();
    assert_eq!(carrying, vec!["ToolCall", "ToolResult"]);
    assert_eq!(text.matches("BIGx").count(), 2);
}
