//! `tooldispatch replay FILE.jsonl`: one result array (or report) per reply; `{"new_run": true}`
//! starts a new run.

use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use super::support::*;

/// A core tool whose result is remembered for dedupe (write_todo is not: writing is its point).
fn todo_reply(id: &str) -> String {
    openai(&[(id, "find_tools", json!({"query": "select:calculate"}))])
}

/// Three replies with the same call; the third comes after `{"new_run": true}`.
fn replay_file(td: &Td) -> String {
    let text = format!(
        "{}\n{}\n{{\"new_run\": true}}\n\n{}\n",
        todo_reply("c1"),
        todo_reply("c2"),
        todo_reply("c3")
    );
    td.file("replay.jsonl", &text).to_str().unwrap().to_string()
}

fn stdout_lines(output: &std::process::Output) -> Vec<Value> {
    assert!(
        output.status.success(),
        "exit {:?}: {}",
        output.status.code(),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout.clone())
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

#[test]
fn replay_prints_one_array_per_reply_and_the_reply_after_new_run_executes_again() {
    let td = Td::new();
    let file = replay_file(&td);
    let output = td.cmd(&["replay", &file]).output().unwrap();
    let lines = stdout_lines(&output);
    let first = lines[0][0]["content"].as_str().unwrap().to_string();
    let schema = first.strip_prefix("[find_tools] ").unwrap().to_string();
    assert!(schema.contains("\"name\":\"calculate\""), "{schema}");
    assert_eq!(
        lines,
        vec![
            json!([{"role": "tool", "tool_call_id": "c1", "content": first}]),
            // Same run: deduplicated, the first result byte for byte.
            json!([{"role": "tool", "tool_call_id": "c2", "content": first}]),
            // New run: executed again.
            json!([{"role": "tool", "tool_call_id": "c3", "content": first}]),
        ]
    );
}

#[test]
fn replay_report_numbers_runs_and_rounds() {
    let td = Td::new();
    let file = replay_file(&td);
    let output = td.cmd(&["replay", &file, "--report"]).output().unwrap();
    let rows: Vec<Value> = stdout_lines(&output)
        .iter()
        .map(|r| {
            json!([
                r["session"],
                r["run"],
                r["round"],
                r["results"][0]["status"],
                r["pending"]
            ])
        })
        .collect();
    assert_eq!(
        rows,
        vec![
            json!(["replay", "run-1", 1, "ok", null]),
            json!(["replay", "run-1", 2, "deduped", null]),
            json!(["replay", "run-2", 1, "ok", null]),
        ]
    );
}

#[test]
fn replay_names_the_line_of_a_bad_reply_and_exits_2() {
    let td = Td::new();
    let file = td.file("bad.jsonl", &format!("{}\nnot json\n", todo_reply("c1")));
    let output = td
        .cmd(&["replay", file.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(
        (
            output.status.code(),
            String::from_utf8(output.stderr).unwrap()
        ),
        (
            Some(2),
            format!(
                "tooldispatch: {}:2: cannot read the openai reply: the reply is not valid JSON: expected ident at line 1 column 2\n",
                file.display()
            )
        )
    );
}

#[test]
fn a_memory_store_spills_into_a_temp_dir_that_is_gone_after_exit() {
    let td = Td::new();
    let tmp = tempfile::tempdir().unwrap();
    // Over the 20,000-byte result budget: shaped, with the whole text spilled to a file.
    let text = format!(
        "{}\n{}\n",
        select("c1", "run_command"),
        openai(&[(
            "c2",
            "run_tool",
            run_tool("run_command", json!({"argv": ["seq", "1", "30000"]}))
        )])
    );
    let file = td.file("replay.jsonl", &text);
    let output = td
        .bare()
        .arg("replay")
        .arg(&file)
        .arg("--workdir")
        .arg(td.workdir())
        .args(["--approve", "all"])
        .env("TMPDIR", tmp.path())
        .output()
        .unwrap();
    let lines = stdout_lines(&output);
    let content = lines[1][0]["content"].as_str().unwrap();
    // The whole text went to a file in the temp dir, not in the real data dir…
    let tmp_path = tmp.path().display().to_string();
    assert!(content.contains(&tmp_path), "{content}");
    assert!(!td.data_dir().join("tooldispatch/sessions").exists());
    // …and that dir is removed when the command ends. (The sandbox's own per-user dir of
    // placeholders, tooldispatch-sandbox-<uid>, is shared by every process and stays.)
    let at = content.find(&tmp_path).unwrap();
    let spilled = content[at..]
        .split(|c: char| c.is_whitespace() || c == ')' || c == ',' || c == ';')
        .next()
        .unwrap();
    assert!(spilled.ends_with(".txt"), "{spilled}");
    assert!(!std::path::Path::new(spilled).exists(), "{spilled} is left");
    let left: Vec<String> = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| !name.starts_with("tooldispatch-sandbox-"))
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}
