//! Error memory in the round (seed §8, checklist items 64 and 68): a recorded fix comes back
//! as `related_errors` the next time the same tool fails the same way.

use dispatch_engine::Status;
use dispatch_store::{ErrorRecord, Outcome};
use pretty_assertions::assert_eq;
use serde_json::json;

use super::support::*;

fn fix(tool: &str, symptom: &str, action: &str, at: u64) -> ErrorRecord {
    ErrorRecord::new(
        tool,
        &["config".to_string()],
        symptom,
        "",
        action,
        Outcome::Resolved,
        at,
    )
}

#[tokio::test]
async fn a_recorded_fix_shows_up_as_related_errors_when_the_tool_fails_the_same_way() {
    let fx = fixture()
        .tool(TestTool::new(
            spec("load"),
            Behaviour::Fail("config.toml not found".into()),
        ))
        .build();
    let older = fix("load", "config file not found", "look in ./etc first", 1);
    let newer = fix("load", "settings not found", "pass the absolute path", 2);
    let other_class = fix("load", "request timed out", "raise the timeout", 3);
    let other_tool = fix("save", "file not found", "create the directory", 4);
    for r in [&older, &newer, &other_class, &other_tool] {
        fx.errors.error_write(r.clone()).await.unwrap();
    }
    fx.mark_all("s").await;
    let out = fx
        .run("s", "r", vec![wrapped("a", "load", json!({}))])
        .await;
    let related = json!([
        {"id": &newer.id[..8], "symptom": "settings not found", "cause": "", "action": "pass the absolute path", "outcome": "resolved"},
        {"id": &older.id[..8], "symptom": "config file not found", "cause": "", "action": "look in ./etc first", "outcome": "resolved"}
    ]);
    assert_eq!(
        (out.results[0].status, out.results[0].content.clone()),
        (
            Status::Failed,
            format!(
                "[load] tool=load failed: config.toml not found\nrelated_errors: {related}\n{}",
                write_error_hint("load")
            )
        )
    );
}

#[tokio::test]
async fn a_failure_with_nothing_recorded_gets_no_related_errors_line() {
    let fx = fixture()
        .tool(TestTool::new(
            spec("load"),
            Behaviour::Fail("config.toml not found".into()),
        ))
        .build();
    fx.errors
        .error_write(fix("load", "request timed out", "raise the timeout", 1))
        .await
        .unwrap();
    fx.mark_all("s").await;
    let out = fx
        .run("s", "r", vec![wrapped("a", "load", json!({}))])
        .await;
    assert_eq!(
        out.results[0].content,
        format!(
            "[load] tool=load failed: config.toml not found\n{}",
            write_error_hint("load")
        )
    );
}

#[tokio::test]
async fn no_data_carries_what_was_learned_the_last_time_the_tool_found_nothing() {
    let fx = fixture()
        .tool(TestTool::new(spec("search"), Behaviour::Text("".into())))
        .tool(TestTool::new(
            spec("lookup"),
            Behaviour::Text("no data".into()),
        ))
        .build();
    let hint = fix(
        "search",
        "no data for a long query",
        "search with two words",
        1,
    );
    fx.errors.error_write(hint.clone()).await.unwrap();
    fx.mark_all("s").await;
    let out = fx
        .run(
            "s",
            "r",
            vec![
                wrapped("a", "search", json!({"q": "x"})),
                wrapped("b", "lookup", json!({"q": "x"})),
            ],
        )
        .await;
    let related = json!([{"id": &hint.id[..8], "symptom": "no data for a long query", "cause": "", "action": "search with two words", "outcome": "resolved"}]);
    assert_eq!(
        results(&out),
        vec![
            (
                Status::Ok,
                format!("[search] no data\nrelated_errors: {related}")
            ),
            (Status::Ok, "[lookup] no data".to_string()),
        ]
    );
}
