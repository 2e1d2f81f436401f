//! Exactly-once for mutating calls (DESIGN §4.7): journalled before they run, closed by the
//! commit; a call a dead round left open is reported as interrupted, never run again.

use std::sync::Arc;

use async_trait::async_trait;
use dispatch_engine::{Effect, Status, Tool, ToolContext, ToolError, ToolOutput, ToolSpec};
use dispatch_store::{JournalEntry, SessionStore};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use super::support::*;

/// A mutating tool that reports how many journal entries of its session are open while it runs.
struct JournalProbe {
    spec: ToolSpec,
    store: Arc<dyn SessionStore>,
}

#[async_trait]
impl Tool for JournalProbe {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }
    async fn call(&self, cx: ToolContext, _args: Value) -> Result<ToolOutput, ToolError> {
        let open = self
            .store
            .journal_open(&cx.session_id)
            .await
            .map_err(|e| ToolError::failed(e.to_string()))?;
        let ids: Vec<String> = open.iter().map(|e| e.tool_call_id.clone()).collect();
        Ok(ToolOutput::text(format!("open while running: {ids:?}")))
    }
}

fn left_open(run: &str, round: u64, call: &str) -> JournalEntry {
    JournalEntry {
        id: format!("{run}|{round}|{call}"),
        session: "s".into(),
        run: run.into(),
        round,
        tool_call_id: call.into(),
        tool_name: "write".into(),
        arguments: r#"{"path":"a.txt"}"#.into(),
        started_ms: 1,
    }
}

#[tokio::test]
async fn a_mutating_call_is_journalled_while_it_runs_and_closed_by_its_commit() {
    let store = dispatch_store::open("memory:").unwrap();
    let probe = JournalProbe {
        spec: serial_spec("probe").effect(Effect::Mutates),
        store: store.clone(),
    };
    let observer = JournalProbe {
        spec: serial_spec("observer"),
        store: store.clone(),
    };
    let fx = fixture()
        .tool(probe)
        .tool(observer)
        .store(store.clone())
        .build();
    fx.mark_all("s").await;
    let out = fx
        .run(
            "s",
            "r",
            vec![
                wrapped("w", "probe", json!({})),
                wrapped("o", "observer", json!({})),
            ],
        )
        .await;
    assert_eq!(
        results(&out),
        vec![
            (
                Status::Ok,
                r#"[probe] open while running: ["w"]"#.to_string()
            ),
            // Still open until the round commits: the commit is what closes it.
            (
                Status::Ok,
                r#"[observer] open while running: ["w"]"#.to_string()
            ),
        ]
    );
    assert_eq!(store.journal_open("s").await.unwrap(), vec![]);
    assert!(out.interrupted.is_empty());
}

#[tokio::test]
async fn a_call_left_open_by_a_dead_round_is_reported_once_and_never_run_again() {
    let write = TestTool::new(
        serial_spec("write").effect(Effect::Mutates),
        Behaviour::WritePath,
    );
    let writes = write.calls.clone();
    let fx = fixture()
        .tool(write)
        .tool(TestTool::new(spec("echo"), Behaviour::Echo))
        .build();
    fx.mark_all("s").await;
    let dead = left_open("r0", 3, "w1");
    fx.store.journal_begin(dead.clone()).await.unwrap();

    let next = fx
        .run("s", "r1", vec![wrapped("e", "echo", json!({}))])
        .await;
    assert_eq!(next.interrupted, vec![dead.clone()]);
    let report = next.report();
    assert_eq!(report["interrupted"][0]["tool_call_id"], "w1");
    let said: Vec<Value> = events_json(&next.events)
        .into_iter()
        .filter(|e| e["type"] == "Error")
        .collect();
    assert_eq!(
        said[0]["text"],
        "call w1 (write) of round 3 in run r0 was interrupted before its result was committed; it was not run again, so check what it may have changed"
    );
    assert_eq!(writes.load(std::sync::atomic::Ordering::SeqCst), 0);

    let after = fx
        .run("s", "r1", vec![wrapped("e2", "echo", json!({"x": 1}))])
        .await;
    assert!(after.interrupted.is_empty(), "reported once");
    assert!(report.get("interrupted").is_some() && after.report().get("interrupted").is_none());
}

#[tokio::test]
async fn an_interrupted_write_of_this_run_drops_what_the_run_remembered() {
    let read = TestTool::new(spec("read").effect(Effect::ReadsPaths), Behaviour::ReadPath);
    let reads = read.calls.clone();
    let fx = fixture().tool(read).build();
    std::fs::write(fx.file("a.txt"), "A").unwrap();
    fx.mark_all("s").await;
    fx.run(
        "s",
        "r",
        vec![wrapped("1", "read", json!({"path": "a.txt"}))],
    )
    .await;
    fx.store
        .journal_begin(left_open("r", 2, "w"))
        .await
        .unwrap();
    let again = fx
        .run(
            "s",
            "r",
            vec![wrapped("2", "read", json!({"path": "a.txt"}))],
        )
        .await;
    assert_eq!(again.results[0].status, Status::Ok);
    assert_eq!(reads.load(std::sync::atomic::Ordering::SeqCst), 2);
}
