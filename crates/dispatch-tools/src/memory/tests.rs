//! The memory tools through a real engine over the memory store (error memory and chat
//! history wired as in production): every mode, the caps, hostile inputs, and the error-memory
//! loop from a failed call to its recorded fix in `related_errors`.

use std::sync::Arc;

use dispatch_engine::{ApproveAll, RoundOutcome, Status};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use crate::test_support::*;

const TOOLS: &str = "write_error,error_history,edit_file";

async fn harness() -> Harness {
    let h = Harness::with_confirmer(Arc::new(ApproveAll));
    h.select("s", TOOLS).await;
    h
}

async fn one(h: &Harness, run: &str, tool: &str, args: Value) -> (Status, String) {
    let out: RoundOutcome = h.round("s", run, vec![run_tool("c", tool, args)]).await;
    (out.results[0].status, out.results[0].content.clone())
}

async fn direct(h: &Harness, session: &str, run: &str, args: Value) -> (Status, String) {
    let out = h
        .round(session, run, vec![call("c", "chat_history", args)])
        .await;
    (out.results[0].status, out.results[0].content.clone())
}

fn note(tool: &str, symptom: &str, action: &str) -> Value {
    json!({
        "tool_name": tool,
        "keywords": ["Patch", "whitespace", "patch"],
        "symptom": symptom,
        "cause": "tabs in the file",
        "action": action,
        "outcome": "resolved"
    })
}

/// The 8-character id from `[write_error] recorded <id>`.
fn recorded_id(text: &str) -> String {
    let id = text.strip_prefix("[write_error] recorded ").unwrap();
    assert_eq!(id.len(), 8, "{text}");
    assert!(id.chars().all(|c| c.is_ascii_hexdigit()), "{text}");
    id.to_string()
}

#[tokio::test]
async fn a_recorded_error_is_found_by_search_and_read_by_prefix() {
    let h = harness().await;
    let (status, text) = one(
        &h,
        "r1",
        "write_error",
        note(
            "edit_file",
            "old_string was not found",
            "read the file first, copy exact bytes",
        ),
    )
    .await;
    assert_eq!(status, Status::Ok, "{text}");
    let id = recorded_id(&text);

    let (status, text) = one(
        &h,
        "r1",
        "error_history",
        json!({"keyword": "WHITESPACE exact"}),
    )
    .await;
    assert_eq!(status, Status::Ok, "{text}");
    assert_eq!(
        text,
        format!(
            "[error_history] 1 record(s), newest first:\n{id} tool=edit_file outcome=resolved age=0s symptom: old_string was not found | action: read the file first, copy exact bytes"
        )
    );
    // The tool filter narrows; an omitted mode with a hash reads.
    let (_, other_tool) = one(
        &h,
        "r1",
        "error_history",
        json!({"keyword": "patch", "tool": "read_files"}),
    )
    .await;
    assert!(
        other_tool
            .contains("0 records: no records match keyword \"patch\" and tool \"read_files\""),
        "{other_tool}"
    );
    let (status, full) = one(
        &h,
        "r1",
        "error_history",
        json!({"hash": id.to_uppercase()}),
    )
    .await;
    assert_eq!(status, Status::Ok, "{full}");
    assert!(
        full.contains("\ntool: edit_file\noutcome: resolved\n"),
        "{full}"
    );
    assert!(
        full.contains("keywords: patch, whitespace, error_type:no_result\n"),
        "{full}"
    );
    assert!(
        full.contains("cause: tabs in the file\naction: read the file first"),
        "{full}"
    );
    let full_id = full
        .lines()
        .next()
        .unwrap()
        .strip_prefix("[error_history] id: ")
        .unwrap();
    assert_eq!((full_id.len(), &full_id[..8]), (64, id.as_str()));
}

#[tokio::test]
async fn a_note_written_twice_is_recorded_twice() {
    let h = harness().await;
    let args = note("edit_file", "boom", "retry");
    let (_, first) = one(&h, "r1", "write_error", args.clone()).await;
    // Ids come from the tool, the millisecond and the text: the same note needs a new moment.
    tokio::time::sleep(std::time::Duration::from_millis(3)).await;
    let (_, second) = one(&h, "r1", "write_error", args).await;
    assert!(first.starts_with("[write_error] recorded "), "{first}");
    assert!(second.starts_with("[write_error] recorded "), "{second}");
    let (_, list) = one(&h, "r1", "error_history", json!({"mode": "search"})).await;
    assert!(list.starts_with("[error_history] 2 record(s)"), "{list}");
}

#[tokio::test]
async fn write_error_refuses_oversized_blank_and_malformed_fields() {
    let h = harness().await;
    let cases: Vec<(Value, Status, &str)> = vec![
        (
            json!({"tool_name": "x", "keywords": (0..17).map(|i| format!("k{i}")).collect::<Vec<_>>(), "symptom": "s", "action": "a", "outcome": "resolved"}),
            Status::Invalid,
            "has more than 16 items",
        ),
        (
            json!({"tool_name": "x", "keywords": [], "symptom": "s", "action": "a", "outcome": "resolved"}),
            Status::Invalid,
            "has less than 1 item",
        ),
        (
            json!({"tool_name": "x", "keywords": ["k".repeat(65)], "symptom": "s", "action": "a", "outcome": "resolved"}),
            Status::Invalid,
            "is longer than 64 characters",
        ),
        (
            json!({"tool_name": "x", "keywords": ["k"], "symptom": "s".repeat(2001), "action": "a", "outcome": "resolved"}),
            Status::Invalid,
            "/symptom",
        ),
        (
            json!({"tool_name": "x", "keywords": ["k"], "symptom": "s", "action": "a", "outcome": "fixed"}),
            Status::Invalid,
            "/outcome",
        ),
        (
            json!({"tool_name": "x", "keywords": ["k"], "symptom": "s", "outcome": "resolved"}),
            Status::Invalid,
            "action",
        ),
        (
            json!({"tool_name": "x", "keywords": ["k"], "symptom": "  \n ", "action": "a", "outcome": "resolved"}),
            // The engine counts a blank required string as missing.
            Status::Invalid,
            "missing required field(s) symptom",
        ),
        (
            json!({"tool_name": "x", "keywords": ["ok", "   "], "symptom": "s", "action": "a", "outcome": "resolved"}),
            Status::Failed,
            "keywords[1] is blank",
        ),
        (
            json!({"tool_name": "x", "keywords": ["error_type:timeout"], "symptom": "s", "action": "a", "outcome": "resolved"}),
            Status::Failed,
            "error_type: keywords are derived",
        ),
        (
            json!({"tool_name": "rm -rf /; echo", "keywords": ["k"], "symptom": "s", "action": "a", "outcome": "resolved"}),
            Status::Failed,
            "is not a tool name",
        ),
    ];
    for (args, status, needle) in cases {
        let (got, text) = one(&h, "r1", "write_error", args.clone()).await;
        assert_eq!(got, status, "{args}: {text}");
        assert!(text.contains(needle), "{args}: {text}");
    }
    // Nothing was recorded.
    let (_, list) = one(&h, "r1", "error_history", json!({})).await;
    assert_eq!(list, "[error_history] 0 records: the error memory is empty");
}

#[tokio::test]
async fn error_history_refuses_write_bad_hashes_and_limits_and_survives_hostile_keywords() {
    let h = harness().await;
    one(&h, "r1", "write_error", note("edit_file", "boom", "retry")).await;

    let (status, text) = one(
        &h,
        "r1",
        "error_history",
        json!({"mode": "write", "keyword": "x"}),
    )
    .await;
    assert_ne!(status, Status::Ok, "{text}");
    assert!(
        text.contains("write_error(tool_name, keywords, symptom, action, outcome)"),
        "{text}"
    );

    for (args, status, needle) in [
        (
            json!({"mode": "read"}),
            Status::Failed,
            "mode=read needs hash",
        ),
        (
            json!({"hash": "1234567"}),
            Status::Failed,
            "is not a record id",
        ),
        (
            json!({"hash": "%%%%%%%%"}),
            Status::Failed,
            "is not a record id",
        ),
        (
            json!({"hash": "0123456789abcdef"}),
            Status::Failed,
            "no error record 0123456789abcdef",
        ),
        (json!({"limit": 17}), Status::Invalid, "/limit"),
        (json!({"limit": 0}), Status::Invalid, "/limit"),
        (
            json!({"keyword": "k".repeat(501)}),
            Status::Invalid,
            "/keyword",
        ),
        (json!({"mode": "delete"}), Status::Invalid, "/mode"),
    ] {
        let (got, text) = one(&h, "r1", "error_history", args.clone()).await;
        assert_eq!(got, status, "{args}: {text}");
        assert!(text.contains(needle), "{args}: {text}");
    }
    for hostile in [
        "\"boom\" OR *",
        "NEAR(boom retry)",
        "boom' --",
        "%_%",
        "\u{0}",
    ] {
        let (got, text) = one(&h, "r1", "error_history", json!({"keyword": hostile})).await;
        assert_eq!(got, Status::Ok, "{hostile}: {text}");
        assert!(
            text.contains("0 records: no records match"),
            "{hostile}: {text}"
        );
    }
    let (_, limited) = one(
        &h,
        "r1",
        "error_history",
        json!({"limit": 1, "keyword": "boom"}),
    )
    .await;
    assert!(
        limited.starts_with("[error_history] 1 record(s)"),
        "{limited}"
    );
}

/// issue 6 Show: a tool fails → write_error(resolved) → the same failure later carries the
/// recorded action in `related_errors`.
#[tokio::test]
async fn a_recorded_fix_shows_up_when_the_same_tool_fails_the_same_way_again() {
    let h = harness().await;
    std::fs::write(h.root().join("a.txt"), "hello\n").unwrap();
    let bad_patch =
        json!({"path": "a.txt", "targets": [{"old_string": "goodbye", "new_string": "hi"}]});

    let (status, first) = one(&h, "r1", "edit_file", bad_patch.clone()).await;
    assert_eq!(status, Status::Failed, "{first}");
    assert!(first.contains("old_string was not found"), "{first}");
    assert!(!first.contains("related_errors"), "{first}");
    assert!(
        first.ends_with("outcome=\"resolved\") so the next run finds it"),
        "{first}"
    );

    let (_, text) = one(
        &h,
        "r1",
        "write_error",
        json!({
            "tool_name": "edit_file",
            "keywords": ["patch"],
            "symptom": "old_string was not found",
            "action": "read_files the file and copy old_string byte for byte",
            "outcome": "resolved"
        }),
    )
    .await;
    let id = recorded_id(&text);

    let (status, again) = one(&h, "r2", "edit_file", bad_patch).await;
    assert_eq!(status, Status::Failed, "{again}");
    let line = again
        .lines()
        .find(|l| l.starts_with("related_errors: "))
        .unwrap_or_else(|| panic!("no related_errors in {again}"));
    let records: Value =
        serde_json::from_str(line.strip_prefix("related_errors: ").unwrap()).unwrap();
    assert_eq!(records[0]["id"], id.as_str());
    assert_eq!(
        records[0]["action"],
        "read_files the file and copy old_string byte for byte"
    );
    assert_eq!(records[0]["outcome"], "resolved");

    // A different failure class of the same tool does not get it.
    let (_, other) = one(
        &h,
        "r2",
        "edit_file",
        json!({"path": "../outside.txt", "content": "x"}),
    )
    .await;
    assert!(!other.contains(&id), "{other}");
}

fn todo(text: &str) -> Value {
    json!({"todos": [{"content": text}]})
}

async fn seed_history(h: &Harness) {
    h.round(
        "s",
        "r1",
        vec![call("c1", "write_todo", todo("zebra7 plan"))],
    )
    .await;
    h.round(
        "s",
        "r1",
        vec![call(
            "c2",
            "reasoning_guide",
            json!({"topic": "write_todo"}),
        )],
    )
    .await;
    h.round(
        "s",
        "r2",
        vec![call("c3", "write_todo", todo("zebra7 again"))],
    )
    .await;
    h.round(
        "other",
        "secret-run",
        vec![call("c4", "write_todo", todo("zebra7 31337"))],
    )
    .await;
}

#[tokio::test]
async fn chat_history_lists_this_sessions_runs_most_recent_first() {
    let h = Harness::new();
    seed_history(&h).await;
    let (status, text) = direct(&h, "s", "r3", json!({})).await;
    assert_eq!(status, Status::Ok, "{text}");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[0],
        "[chat_history] 2 run(s) of this session in the last 1d, most recent first:"
    );
    assert!(
        lines[1].starts_with("r2 rounds=1 calls=1 first=0s ago"),
        "{text}"
    );
    assert!(lines[2].starts_with("r1 rounds=2 calls=2 "), "{text}");
    assert_eq!(lines.len(), 3, "{text}");
    assert!(!text.contains("secret-run"), "{text}");

    let (_, one_run) = direct(
        &h,
        "s",
        "r3",
        json!({"mode": "list", "limit": 1, "time_range": "1y"}),
    )
    .await;
    assert!(
        one_run.starts_with("[chat_history] 1 run(s) of this session in the last 1y"),
        "{one_run}"
    );
    let (_, empty) = direct(&h, "fresh", "r1", json!({"mode": "list"})).await;
    assert!(
        empty.contains("0 runs of this session in the last 1d"),
        "{empty}"
    );
}

#[tokio::test]
async fn chat_history_reads_one_run_of_this_session_only() {
    let h = Harness::new();
    seed_history(&h).await;
    let (status, text) = direct(&h, "s", "r3", json!({"task_id": "r1"})).await;
    assert_eq!(status, Status::Ok, "{text}");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[0],
        "[chat_history] run r1: tool calls and results in order"
    );
    assert!(lines[1].starts_with("round 1 ("), "{text}");
    assert_eq!(
        lines[2],
        "  call write_todo {\"todos\":[{\"content\":\"zebra7 plan\"}]}"
    );
    assert_eq!(
        lines[3],
        "  result write_todo: [write_todo] checklist saved: 1 step(s) — 0 done, 0 in progress, 1 pending"
    );
    assert!(lines[4].starts_with("round 2 ("), "{text}");
    assert_eq!(
        lines[5],
        "  call reasoning_guide {\"topic\":\"write_todo\"}"
    );
    assert!(lines[6].starts_with("  result reasoning_guide: "), "{text}");
    assert!(!text.contains("again"), "{text}");

    // Another session's run is unknown here, as is a made-up one.
    for task in ["secret-run", "nope", "' OR 1=1 --"] {
        let (status, text) = direct(&h, "s", "r3", json!({"mode": "read", "task_id": task})).await;
        assert_eq!(status, Status::Failed, "{text}");
        assert!(
            text.contains("in this session; chat_history(mode=list) lists the runs"),
            "{text}"
        );
        assert!(!text.contains("31337"), "{text}");
    }
    let (status, text) = direct(&h, "s", "r3", json!({"mode": "read"})).await;
    assert_eq!(status, Status::Failed);
    assert!(text.contains("mode=read needs task_id"), "{text}");
    // "current" is the calling run, whose earlier rounds are already committed.
    let (status, text) = direct(&h, "s", "r1", json!({"task_id": "current"})).await;
    assert_eq!(status, Status::Ok, "{text}");
    assert!(text.starts_with("[chat_history] run r1:"), "{text}");
}

#[tokio::test]
async fn chat_history_search_shows_run_round_tool_and_a_snippet_from_this_session() {
    let h = Harness::new();
    seed_history(&h).await;
    let (status, text) = direct(&h, "s", "r3", json!({"keyword": "ZEBRA7"})).await;
    assert_eq!(status, Status::Ok, "{text}");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[0],
        "[chat_history] 2 match(es) for zebra7, newest first:"
    );
    assert_eq!(
        lines[1],
        "run=r2 round=1 call write_todo (0s ago): write_todo {\"todos\":[{\"content\":\"zebra7 again\"}]}"
    );
    assert!(
        lines[2].starts_with("run=r1 round=1 call write_todo"),
        "{text}"
    );
    assert_eq!(lines.len(), 3, "{text}");
    assert!(!text.contains("31337"), "{text}");

    let (_, limited) = direct(&h, "s", "r3", json!({"keyword": "zebra7", "limit": 1})).await;
    assert!(
        limited.starts_with("[chat_history] 1 match(es)"),
        "{limited}"
    );
    // The other session's words are not found here.
    let (status, none) = direct(&h, "s", "r3", json!({"mode": "search", "keyword": "31337"})).await;
    assert_eq!(status, Status::Ok, "{none}");
    assert!(
        none.contains("0 matches for 31337 in this session's last 1d"),
        "{none}"
    );
    // FTS syntax is just words.
    let (status, fts) = direct(&h, "s", "r3", json!({"keyword": "\"zebra7\" OR NEAR(x) *"})).await;
    assert_eq!(status, Status::Ok, "{fts}");
    assert!(fts.contains("0 matches for zebra7 or near x"), "{fts}");
}

#[tokio::test]
async fn chat_history_refuses_bad_ranges_limits_and_wordless_keywords() {
    let h = Harness::new();
    seed_history(&h).await;
    for (args, status, needle) in [
        (json!({"time_range": "2d"}), Status::Invalid, "/time_range"),
        (json!({"limit": 33}), Status::Invalid, "/limit"),
        (json!({"mode": "delete"}), Status::Invalid, "/mode"),
        (
            json!({"keyword": "k".repeat(501)}),
            Status::Invalid,
            "/keyword",
        ),
        (
            json!({"task_id": "t".repeat(201)}),
            Status::Invalid,
            "/task_id",
        ),
        (json!({"session": "other"}), Status::Invalid, "session"),
        (
            json!({"keyword": " -- !! \"\" "}),
            Status::Failed,
            "has no words to search for",
        ),
        (
            json!({"mode": "search"}),
            Status::Failed,
            "mode=search needs keyword",
        ),
    ] {
        let (got, text) = direct(&h, "s", "r3", args.clone()).await;
        assert_eq!(got, status, "{args}: {text}");
        assert!(text.contains(needle), "{args}: {text}");
    }
}
