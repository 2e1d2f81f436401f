//! State-aware dedupe across the real file and command tools (DESIGN §4.2, issue 4 §9): an
//! edit drops exactly the reads of the file it changed; any mutating call drops the results of
//! tools that observe the world at large (find_files, file_history, run_command); a command,
//! which reports no paths, may have changed any file and drops every read.

use std::sync::Arc;

use dispatch_engine::{ApproveAll, RoundOutcome, Status};
use serde_json::json;

use crate::test_support::{Harness, run_tool};

async fn harness() -> Harness {
    let h = Harness::with_confirmer(Arc::new(ApproveAll));
    h.select(
        "s",
        "read_files,edit_file,find_files,file_history,run_command",
    )
    .await;
    std::fs::write(h.root().join("a.txt"), "alpha\n").unwrap();
    std::fs::write(h.root().join("b.txt"), "beta\n").unwrap();
    h
}

fn statuses(out: &RoundOutcome) -> Vec<Status> {
    out.results.iter().map(|r| r.status).collect()
}

/// read a.txt, read b.txt, search for "alpha|gamma" — in one round of run `r`.
async fn observe(h: &Harness, tag: &str) -> RoundOutcome {
    h.round(
        "s",
        "r",
        vec![
            run_tool(
                &format!("{tag}a"),
                "read_files",
                json!({"files": [{"path": "a.txt"}]}),
            ),
            run_tool(
                &format!("{tag}b"),
                "read_files",
                json!({"files": [{"path": "./b.txt"}]}),
            ),
            run_tool(
                &format!("{tag}f"),
                "find_files",
                json!({"mode": "search", "queries": [{"pattern": "alpha|gamma"}]}),
            ),
        ],
    )
    .await
}

#[tokio::test]
async fn an_edit_drops_exactly_the_reads_it_made_stale_and_every_observation() {
    let h = harness().await;
    let first = observe(&h, "1").await;
    assert_eq!(statuses(&first), vec![Status::Ok; 3], "{:?}", first.results);

    // Nothing changed: every result is remembered.
    let second = observe(&h, "2").await;
    assert_eq!(statuses(&second), vec![Status::Deduped; 3]);

    // An edit of a.txt, named through a detour: the resolved path is what counts.
    std::fs::create_dir(h.root().join("sub")).unwrap();
    let edit = h
        .round(
            "s",
            "r",
            vec![run_tool(
                "e2",
                "edit_file",
                json!({"path": "sub/../a.txt", "targets": [{"old_string": "alpha", "new_string": "gamma"}]}),
            )],
        )
        .await;
    assert_eq!(edit.results[0].status, Status::Ok, "{:?}", edit.results);

    let third = observe(&h, "3").await;
    assert_eq!(
        statuses(&third),
        vec![Status::Ok, Status::Deduped, Status::Ok],
        "a.txt is read again, b.txt is not; the search runs again"
    );
    assert!(
        third.results[0].content.contains("gamma"),
        "{}",
        third.results[0].content
    );
    assert!(
        third.results[2].content.contains("gamma"),
        "{}",
        third.results[2].content
    );
}

#[tokio::test]
async fn a_command_runs_again_after_a_write_and_drops_every_read() {
    let h = harness().await;
    let ls = |id: &str| run_tool(id, "run_command", json!({"argv": ["ls"]}));
    let read_b = |id: &str| run_tool(id, "read_files", json!({"files": [{"path": "b.txt"}]}));

    let out = h.round("s", "r", vec![read_b("1b"), ls("1l")]).await;
    assert_eq!(statuses(&out), vec![Status::Ok, Status::Ok]);
    assert!(
        out.results[1].content.contains("a.txt"),
        "{}",
        out.results[1].content
    );

    // The command may have changed b.txt: its read runs again. The command itself, repeated
    // with nothing written since, is remembered.
    let out = h.round("s", "r", vec![ls("2l"), read_b("2b")]).await;
    assert_eq!(statuses(&out), vec![Status::Deduped, Status::Ok]);

    // A write (a new file) makes the listing stale: it runs again and shows the file.
    let out = h
        .round(
            "s",
            "r",
            vec![run_tool(
                "w",
                "edit_file",
                json!({"path": "c.txt", "content": "new\n"}),
            )],
        )
        .await;
    assert_eq!(out.results[0].status, Status::Ok, "{:?}", out.results);
    let out = h.round("s", "r", vec![ls("3l")]).await;
    assert_eq!(out.results[0].status, Status::Ok);
    assert!(
        out.results[0].content.contains("c.txt"),
        "{}",
        out.results[0].content
    );
}
