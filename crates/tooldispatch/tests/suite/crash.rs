//! Exactly-once across a crash (DESIGN §4.7): a `tooldispatch round` process killed with
//! SIGKILL in the middle of a mutating call; the next process reports the call as
//! interrupted, keeps the transcript before it, and never runs it again.

use std::time::{Duration, Instant};

use serde_json::json;

use super::support::*;

/// Wait until the command the round runs has written a whole line to `marker`; the round
/// must still be running then.
fn wait_for_line(marker: &std::path::Path, child: &mut std::process::Child) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !std::fs::read_to_string(marker).is_ok_and(|t| t.ends_with('\n')) {
        assert!(Instant::now() < deadline, "the command never started");
        assert!(
            child.try_wait().unwrap().is_none(),
            "the round ended before the command wrote its line"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_round_killed_mid_write_reports_the_call_interrupted_and_never_reruns_it() {
    let td = Td::new();
    let marker = td.workdir().join("started.txt");
    // Kill whatever the killed round left running (its command leads its own process group).
    let _cleanup = KillGroups(marker.clone());

    // Round 1 of run r1 commits normally: the transcript has something before the crash.
    td.round("s", "r1", &[], &select("c1", "calculate,run_command"));

    // Round 2 runs a slow mutating command; the process dies while it runs.
    // The sleep starts before the line is written, so the group to kill is complete by then.
    let script = "sleep 30 & echo $$ >> started.txt; wait";
    let reply = openai(&[(
        "w1",
        "run_tool",
        run_tool("run_command", json!({"argv": ["sh", "-c", script]})),
    )]);
    let mut child = td.spawn_round("s", "r1", &reply);
    wait_for_line(&marker, &mut child);
    child.kill().unwrap(); // SIGKILL: no cleanup, no commit
    child.wait().unwrap();

    // A new process, a later round of the session: the call is reported, not re-run.
    let report = td.report(
        "s",
        "r2",
        &[],
        &openai(&[(
            "c3",
            "run_tool",
            run_tool("calculate", json!({"expressions": ["1+1"]})),
        )]),
    );
    let interrupted = report["interrupted"]
        .as_array()
        .expect("an interrupted list");
    assert_eq!(interrupted.len(), 1, "{report}");
    assert_eq!(interrupted[0]["tool_call_id"], "w1");
    assert_eq!(interrupted[0]["tool_name"], "run_command");
    assert_eq!(report["results"][0]["status"], "ok", "{report}");

    // Reported once: the round after that has nothing interrupted.
    let again = td.report(
        "s",
        "r2",
        &[],
        &openai(&[(
            "c4",
            "run_tool",
            run_tool("calculate", json!({"expressions": ["2+2"]})),
        )]),
    );
    assert!(
        again["interrupted"].as_array().is_none_or(|a| a.is_empty()),
        "{again}"
    );

    // The transcript before the crash is intact, and the killed round left nothing half-written.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let transcript = runtime.block_on(async {
        let store = dispatch_store::open(&format!("sqlite:{}", td.store_path().display())).unwrap();
        store.transcript("s", None).await.unwrap()
    });
    let runs: Vec<(&str, u64)> = transcript
        .iter()
        .map(|e| (e.run.as_str(), e.round))
        .collect();
    assert!(runs.contains(&("r1", 1)), "{runs:?}");
    assert!(
        !runs.contains(&("r1", 2)),
        "the killed round committed nothing: {runs:?}"
    );

    // Never re-run: the command started exactly once.
    let starts = std::fs::read_to_string(&marker).unwrap();
    assert_eq!(starts.lines().count(), 1, "{starts}");
}

#[test]
fn sigterm_cancels_the_round_and_stops_its_command() {
    let td = Td::new();
    let marker = td.workdir().join("child.txt");
    let _cleanup = KillGroups(marker.clone());
    td.round("s", "r1", &[], &select("c1", "run_command"));
    // Found by its command line: a pid printed inside the sandbox is not the host's.
    let sleeper = format!("sleep 30.{}1", std::process::id());
    let reply = openai(&[(
        "w1",
        "run_tool",
        run_tool(
            "run_command",
            json!({"argv": ["sh", "-c", format!("{sleeper} & echo $! >> child.txt; wait")]}),
        ),
    )]);
    let mut child = td.spawn_round("s", "r1", &reply);
    wait_for_line(&marker, &mut child);
    std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("cancelled"), "{stderr}");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !processes_with(&sleeper).is_empty() {
        assert!(
            Instant::now() < deadline,
            "the command's child {sleeper} outlived the round"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
