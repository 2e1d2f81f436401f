//! The file tools through the real binary, one process per round, on one SQLite store: what
//! a task changed in one process is undone by another, byte for byte.

use serde_json::json;

use super::support::*;

#[test]
fn a_task_edited_in_one_process_is_undone_in_the_next() {
    let td = Td::new();
    let work = td.workdir();
    std::fs::write(work.join("a.txt"), "alpha\r\nbeta\r\n").unwrap();
    std::fs::write(work.join("gone.bin"), [0u8, 159, 146, 150, 255]).unwrap();
    td.round(
        "s",
        "t1",
        &[],
        &select("c0", "edit_file,remove_file,restore_file,read_files"),
    );

    // Process 2: task t1 patches a.txt, creates b.txt and removes gone.bin.
    let edits = openai(&[
        (
            "e1",
            "run_tool",
            run_tool(
                "edit_file",
                json!({"path": "a.txt", "targets": [{"old_string": "beta", "new_string": "gamma"}]}),
            ),
        ),
        (
            "e2",
            "run_tool",
            run_tool("edit_file", json!({"path": "b.txt", "content": "new\n"})),
        ),
        (
            "e3",
            "run_tool",
            run_tool("remove_file", json!({"path": "gone.bin"})),
        ),
    ]);
    let out = td.report("s", "t1", &["--approve", "all"], &edits);
    for result in out["results"].as_array().unwrap() {
        assert_eq!(result["status"], "ok", "{out}");
    }
    assert_eq!(
        std::fs::read(work.join("a.txt")).unwrap(),
        b"alpha\r\ngamma\r\n"
    );
    assert!(work.join("b.txt").exists() && !work.join("gone.bin").exists());

    // Process 3, a later task: undo everything t1 changed.
    let undo = openai(&[(
        "u1",
        "run_tool",
        run_tool("restore_file", json!({"task_id": "t1"})),
    )]);
    let out = td.report("s", "t2", &["--approve", "all"], &undo);
    assert_eq!(out["results"][0]["status"], "ok", "{out}");
    assert_eq!(
        std::fs::read(work.join("a.txt")).unwrap(),
        b"alpha\r\nbeta\r\n"
    );
    assert!(
        !work.join("b.txt").exists(),
        "a file the task created is removed again"
    );
    assert_eq!(
        std::fs::read(work.join("gone.bin")).unwrap(),
        [0u8, 159, 146, 150, 255],
        "a removed binary comes back byte for byte"
    );

    // Headless (no --approve), a restore is declined and changes nothing.
    let out = td.report("s", "t3", &[], &undo);
    assert_eq!(out["results"][0]["status"], "declined", "{out}");
    assert_eq!(
        std::fs::read(work.join("a.txt")).unwrap(),
        b"alpha\r\nbeta\r\n"
    );
}
