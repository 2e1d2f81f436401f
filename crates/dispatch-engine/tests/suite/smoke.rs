//! A first end-to-end round: mark, run, dedupe, commit order.

use dispatch_engine::{Provider, Status};
use serde_json::json;

use super::support::*;

#[tokio::test]
async fn a_round_runs_marked_tools_through_run_tool_in_call_order() {
    let fx = fixture()
        .tool(TestTool::new(spec("echo"), Behaviour::Echo))
        .tool(TestTool::new(
            spec("slow"),
            Behaviour::Sleep(std::time::Duration::from_millis(30)),
        ))
        .build();
    fx.mark_all("s").await;
    let out = fx
        .run(
            "s",
            "r",
            vec![
                wrapped("a", "slow", json!({"x": 1})),
                wrapped("b", "echo", json!({"x": 2})),
            ],
        )
        .await;
    let statuses: Vec<Status> = out.results.iter().map(|r| r.status).collect();
    assert_eq!(statuses, vec![Status::Ok, Status::Ok]);
    assert_eq!(out.results[0].content, r#"[slow] echo:{"x":1}"#);
    assert_eq!(out.results[1].content, r#"[echo] echo:{"x":2}"#);
    let rendered = out.render(Provider::OpenAi);
    assert_eq!(rendered[0]["tool_call_id"], "a");
    assert_eq!(rendered[1]["tool_call_id"], "b");

    let again = fx
        .run("s", "r", vec![wrapped("c", "echo", json!({"x": 2}))])
        .await;
    assert_eq!(again.results[0].status, Status::Deduped);
    assert_eq!(again.results[0].content, r#"[echo] echo:{"x":2}"#);
}
