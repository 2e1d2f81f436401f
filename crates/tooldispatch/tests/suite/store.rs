//! `tooldispatch store stats` and `store gc` on the test's SQLite store.

use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use super::support::*;

/// `store <sub> --store <the test's store> [extra]`, parsed (no --workdir: these take none).
fn store(td: &Td, sub: &str, extra: &[&str]) -> Value {
    let mut cmd = td.bare();
    cmd.args(["store", sub, "--store"])
        .arg(format!("sqlite:{}", td.store_path().display()))
        .args(extra);
    stdout_json(&cmd.output().unwrap())
}

#[test]
fn stats_after_one_round_count_one_session_and_one_run() {
    let td = Td::new();
    td.round("s", "r", &[], &select("c1", "calculate"));
    let stats = store(&td, "stats", &[]);
    assert_eq!(
        (
            stats["backend"].clone(),
            stats["sessions"].clone(),
            stats["runs"].clone()
        ),
        (json!("sqlite"), json!(1), json!(1))
    );
    assert!(stats["bytes"].as_u64().is_some_and(|b| b > 0), "{stats}");
    // A fresh process has looked nothing up yet.
    assert_eq!(
        (stats["cache_hits"].clone(), stats["cache_hit_rate"].clone()),
        (json!(0), Value::Null)
    );
}

#[test]
fn gc_prints_what_it_dropped() {
    let td = Td::new();
    td.round("s", "r", &[], &select("c1", "calculate"));
    td.round("s", "r", &[], &calculate_reply("c2"));
    // The run committed just now is younger than a day: nothing of it goes.
    let report = store(&td, "gc", &["--older-than-days", "1"]);
    assert_eq!(
        report,
        json!({
            "backend": "sqlite",
            "cache_entries_swept": 0,
            "error_records_dropped": 0,
            "runs_pruned": 0,
            "dedupe_entries_dropped": 0,
            "compacted": true,
            "trash_files_dropped": 0,
            "trash_bytes_dropped": 0
        })
    );
    // With no age limit every run is old, and the calculation's dedupe entry goes.
    let report = store(&td, "gc", &["--older-than-days", "0"]);
    assert_eq!(report["runs_pruned"], json!(1), "{report}");
    assert_eq!(store(&td, "stats", &[])["dedupe_entries"], json!(0));
}

#[test]
fn gc_empties_old_trash_and_keeps_recent_trash() {
    let td = Td::new();
    std::fs::write(td.workdir().join("gone.txt"), "bye").unwrap();
    td.round("s", "r", &[], &select("c1", "remove_file"));
    let reply = openai(&[(
        "c2",
        "run_tool",
        run_tool("remove_file", json!({"path": "gone.txt"})),
    )]);
    let out = td.report("s", "r", &["--approve", "all"], &reply);
    assert_eq!(out["results"][0]["status"], "ok", "{out}");
    assert!(!td.workdir().join("gone.txt").exists());

    let report = store(&td, "gc", &[]);
    assert_eq!(
        report["trash_files_dropped"],
        json!(0),
        "30 days by default: {report}"
    );
    std::thread::sleep(std::time::Duration::from_millis(5));
    let report = store(&td, "gc", &["--trash-older-than-days", "0"]);
    assert_eq!(
        (
            report["trash_files_dropped"].clone(),
            report["trash_bytes_dropped"].clone()
        ),
        (json!(1), json!(3)),
        "{report}"
    );
    let trash = td.data_dir().join("tooldispatch/trash");
    assert_eq!(std::fs::read_dir(&trash).unwrap().count(), 0);
}

#[test]
fn a_bad_store_url_is_exit_2() {
    let td = Td::new();
    for sub in ["stats", "gc"] {
        let output = td
            .bare()
            .args(["store", sub, "--store", "nope:"])
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(2), "store {sub}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains("nope:"), "{stderr}");
    }
}
