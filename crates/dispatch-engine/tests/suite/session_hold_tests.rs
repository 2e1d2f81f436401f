//! One session, one round at a time: a caller that holds the session (as the daemon does
//! around its event feed) runs rounds on the hold, and everyone else's round waits.

use std::time::Duration;

use dispatch_engine::{EngineError, Provider, RoundRequest, Status};
use serde_json::json;

use super::support::*;

#[tokio::test]
async fn a_held_session_runs_rounds_on_the_hold_and_keeps_other_rounds_waiting() {
    let fx = fixture()
        .tool(TestTool::new(spec("echo"), Behaviour::Echo))
        .build();
    fx.mark_all("s").await;
    let call = |id: &str| vec![wrapped(id, "echo", json!({"x": id}))];

    let held = fx.engine.hold_session("s").await;
    let on_hold = held
        .round(RoundRequest::new("s", "r", Provider::OpenAi, call("a")))
        .await
        .unwrap();
    assert_eq!(on_hold.results[0].status, Status::Ok);

    // Another caller's round of the session cannot start while the hold lives.
    let waiting = tokio::time::timeout(
        Duration::from_millis(100),
        fx.engine
            .round(RoundRequest::new("s", "r", Provider::OpenAi, call("b"))),
    )
    .await;
    assert!(waiting.is_err(), "a round ran while its session was held");

    // Another session is not held.
    let other = fx
        .engine
        .round(RoundRequest::new("t", "r", Provider::OpenAi, call("c")))
        .await
        .unwrap();
    assert_eq!(other.round, 1);

    drop(held);
    let after = fx
        .engine
        .round(RoundRequest::new("s", "r", Provider::OpenAi, call("b")))
        .await
        .unwrap();
    assert_eq!(after.round, 2);
}

#[tokio::test]
async fn a_hold_refuses_a_round_of_another_session() {
    let fx = fixture()
        .tool(TestTool::new(spec("echo"), Behaviour::Echo))
        .build();
    let held = fx.engine.hold_session("s").await;
    let err = held
        .round(RoundRequest::new(
            "t",
            "r",
            Provider::OpenAi,
            vec![wrapped("a", "echo", json!({}))],
        ))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, EngineError::NotHeld { held, asked } if held == "s" && asked == "t"),
        "{err:?}"
    );
}
