//! The served daemon on 127.0.0.1:0: event streams with resume, confirmations and answers
//! through the API while a round waits, and shutdown.

use std::time::Duration;

use serde_json::{Value, json};

use super::support::{Message, TestDaemon, reply, select};

fn types(messages: &[Message]) -> Vec<&str> {
    messages
        .iter()
        .map(|m| m.data["type"].as_str().unwrap())
        .collect()
}

#[tokio::test]
async fn events_stream_live_and_resume_after_the_last_event_id() {
    let d = TestDaemon::new();
    let served = d.serve().await;
    let mut sse = served.events("/v1/sessions/e1/events", None).await;

    let (status, _) = served
        .post("/v1/sessions/e1/rounds", &select("c0", "calculate"))
        .await;
    assert_eq!(status, 200);
    let first = sse.until("Committed").await;
    assert_eq!(types(&first)[0], "RoundStarted");
    let committed = first.last().unwrap();
    let first_last = committed
        .id
        .expect("the Committed marker carries the last event id");
    assert_eq!(committed.data["round"], 1);
    assert_eq!(committed.data["last_event_id"], first_last);
    // Live events carry no id: only committed ones can be resumed from.
    assert!(first[..first.len() - 1].iter().all(|m| m.id.is_none()));

    let two = reply(&[
        ("c1", "calculate", json!({"expressions": ["6*7"]})),
        ("c2", "calculate", json!({"expressions": ["1+2"]})),
    ]);
    served.post("/v1/sessions/e1/rounds", &two).await;
    let second = sse.until("Committed").await;
    let live_results: Vec<&Value> = second
        .iter()
        .filter(|m| m.data["type"] == "ToolResult")
        .map(|m| &m.data)
        .collect();
    assert_eq!(live_results.len(), 2);
    let second_last = second.last().unwrap().id.unwrap();
    assert!(second_last > first_last);

    // A client that saw the first round resumes with exactly the second one's events, as
    // the store committed them: each with its id, in order, the same results.
    let mut resumed = served
        .events("/v1/sessions/e1/events", Some(first_last))
        .await;
    let mut replayed = Vec::new();
    loop {
        let m = resumed.next().await;
        let id = m.id.expect("replayed events carry their id");
        replayed.push(m);
        if id == second_last {
            break;
        }
    }
    let ids: Vec<u64> = replayed.iter().map(|m| m.id.unwrap()).collect();
    assert!(
        ids.windows(2).all(|w| w[0] < w[1]) && ids[0] > first_last,
        "{ids:?}"
    );
    let replayed_results: Vec<&Value> = replayed
        .iter()
        .filter(|m| m.data["type"] == "ToolResult")
        .map(|m| &m.data)
        .collect();
    assert_eq!(replayed_results, live_results);
    assert!(!types(&replayed).contains(&"RoundStarted"));

    // `?after=` does the same for clients that cannot set headers; 0 replays everything.
    let mut all = served.events("/v1/sessions/e1/events?after=0", None).await;
    let m = all.next().await;
    assert!(m.id.unwrap() <= first_last);
}

/// Post a round in the background; its response arrives when the round ends.
fn spawn_round(
    served: &super::support::Served,
    session: &str,
    body: Value,
) -> tokio::task::JoinHandle<(u16, Value)> {
    let client = served.client.clone();
    let url = format!("{}/v1/sessions/{session}/rounds?report=1", served.url);
    tokio::spawn(async move {
        let response = client.post(url).json(&body).send().await.unwrap();
        (response.status().as_u16(), response.json().await.unwrap())
    })
}

#[tokio::test]
async fn a_confirmation_is_approved_through_the_api_while_the_round_waits() {
    let d = TestDaemon::new();
    let served = d.serve().await;
    served
        .post("/v1/sessions/c1/rounds", &select("m", "edit_file"))
        .await;
    let mut sse = served.events("/v1/sessions/c1/events", None).await;
    let round = spawn_round(
        &served,
        "c1",
        reply(&[(
            "w1",
            "edit_file",
            json!({"path": "notes.txt", "content": "approved\n"}),
        )]),
    );
    let seen = sse.until("ConfirmationRequested").await;
    let confirmation = seen.last().unwrap().data["confirmation"].clone();
    let id = confirmation["id"].as_str().unwrap();
    assert_eq!(confirmation["tool_name"], "edit_file");
    assert!(!confirmation["remember_rule"].as_str().unwrap().is_empty());

    let listed = served.get("/v1/confirmations?session=c1").await;
    assert_eq!(listed["confirmations"][0]["id"], id);
    assert_eq!(
        served.get("/v1/confirmations?session=other").await,
        json!({"confirmations": []})
    );
    assert!(
        !d.work().join("notes.txt").exists(),
        "nothing runs before the answer"
    );

    let (status, body) = served
        .post(
            &format!("/v1/confirmations/{id}"),
            &json!({"approve": true}),
        )
        .await;
    assert_eq!((status, body), (200, json!({"id": id, "approve": true})));
    let (status, report) = round.await.unwrap();
    assert_eq!(status, 200);
    assert_eq!(report["results"][0]["status"], "ok", "{report}");
    assert_eq!(
        std::fs::read_to_string(d.work().join("notes.txt")).unwrap(),
        "approved\n"
    );
    let after = sse.until("Committed").await;
    assert!(types(&after).contains(&"ConfirmationResolved"));
    // The engine's own ToolConfirm arrives live, or, when the round had begun before the
    // stream caught up, from the store when it commits; either way exactly once.
    let confirms = seen
        .iter()
        .chain(&after)
        .filter(|m| m.data["type"] == "ToolConfirm")
        .count();
    assert_eq!(confirms, 1);
    // Answered once: a second answer finds nothing waiting.
    let (status, body) = served
        .post(
            &format!("/v1/confirmations/{id}"),
            &json!({"approve": false}),
        )
        .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (404, Some("no_such_confirmation"))
    );
}

#[tokio::test]
async fn a_declined_confirmation_gives_the_model_the_users_reason() {
    let d = TestDaemon::new();
    let served = d.serve().await;
    served
        .post("/v1/sessions/c2/rounds", &select("m", "edit_file"))
        .await;
    // The console watches every session through the global stream: that is a watcher too.
    let mut all = served.events("/v1/events", None).await;
    served.post("/v1/sessions", &json!({"id": "fresh"})).await;
    let created = all.next().await;
    assert_eq!(
        created.data,
        json!({"session": "fresh", "type": "SessionCreated"})
    );
    let round = spawn_round(
        &served,
        "c2",
        reply(&[("w1", "edit_file", json!({"path": "x.txt", "content": "x"}))]),
    );
    let seen = all.until("ConfirmationRequested").await;
    assert!(seen.iter().all(|m| m.data["session"] == "c2"));
    let id = seen.last().unwrap().data["confirmation"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    served
        .post(
            &format!("/v1/confirmations/{id}"),
            &json!({"approve": false, "reason": "write it under docs/ instead"}),
        )
        .await;
    let (_, report) = round.await.unwrap();
    assert_eq!(report["results"][0]["status"], "declined");
    assert!(
        report["results"][0]["content"]
            .as_str()
            .unwrap()
            .contains("write it under docs/ instead")
    );
    assert!(!d.work().join("x.txt").exists());
}

#[tokio::test]
async fn an_unanswered_confirmation_is_declined_when_its_time_is_up() {
    let d = TestDaemon::with_timeout(Duration::from_millis(300));
    let served = d.serve().await;
    served
        .post("/v1/sessions/c3/rounds", &select("m", "edit_file"))
        .await;
    let _watching = served.events("/v1/sessions/c3/events", None).await;
    let (status, report) = spawn_round(
        &served,
        "c3",
        reply(&[("w1", "edit_file", json!({"path": "y.txt", "content": "y"}))]),
    )
    .await
    .unwrap();
    assert_eq!(status, 200);
    assert_eq!(report["results"][0]["status"], "declined");
    assert!(
        report["results"][0]["content"]
            .as_str()
            .unwrap()
            .contains("no answer within"),
        "{report}"
    );
    assert_eq!(
        served.get("/v1/confirmations").await,
        json!({"confirmations": []})
    );
}

#[tokio::test]
async fn an_ask_user_answered_through_the_api_resumes_the_run() {
    let d = TestDaemon::new();
    let served = d.serve().await;
    let mut sse = served.events("/v1/sessions/q1/events", None).await;
    let ask = reply(&[(
        "a1",
        "ask_user",
        json!({"questions": [{"question": "Deploy to which region?", "options": ["eu", "us"]}], "state": {"objective": "deploy", "completed": ["build"], "next_steps": ["deploy"]}}),
    )]);
    let (status, report) = spawn_round(&served, "q1", ask).await.unwrap();
    assert_eq!(status, 200);
    let task = report["pending"]["task_hash"].as_str().unwrap().to_string();
    let parked = sse.until("Committed").await;
    assert!(
        parked
            .iter()
            .any(|m| m.data["type"] == "Pending" && m.data["task_hash"] == task.as_str())
    );

    let pending = served.get("/v1/sessions/q1/pending").await;
    assert_eq!(
        pending["tasks"][0]["questions"][0]["options"],
        json!(["eu", "us"])
    );
    let (status, body) = served
        .post(
            "/v1/sessions/q1/answers",
            &json!({"task": task, "answers": ["eu"]}),
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(body[0]["tool_call_id"], "a1");
    assert!(body[0]["content"].as_str().unwrap().contains("eu"));
    let resumed = sse.until("Committed").await;
    assert_eq!(
        resumed[0].data,
        json!({"type": "RoundStarted", "run": "default"})
    );
    let result = resumed
        .iter()
        .find(|m| m.data["type"] == "ToolResult")
        .unwrap();
    assert_eq!(result.data["tool_id"], "a1");
    assert_eq!(result.data["status"], "ok");
    assert_eq!(
        served.get("/v1/sessions/q1/pending").await,
        json!({"tasks": []})
    );
}

#[tokio::test]
async fn shutdown_declines_waiting_confirmations_finishes_the_round_and_ends_the_streams() {
    let d = TestDaemon::new();
    let mut served = d.serve().await;
    served
        .post("/v1/sessions/d1/rounds", &select("m", "edit_file"))
        .await;
    let mut sse = served.events("/v1/sessions/d1/events", None).await;
    let round = spawn_round(
        &served,
        "d1",
        reply(&[("w1", "edit_file", json!({"path": "z.txt", "content": "z"}))]),
    );
    sse.until("ConfirmationRequested").await;
    served.stop.take().unwrap().send(()).unwrap();
    let (status, report) = round.await.unwrap();
    assert_eq!(status, 200);
    assert_eq!(report["results"][0]["status"], "declined");
    assert!(
        report["results"][0]["content"]
            .as_str()
            .unwrap()
            .contains("shutting down"),
        "{report}"
    );
    let stopped = tokio::time::timeout(Duration::from_secs(30), served.task).await;
    assert!(
        matches!(stopped, Ok(Ok(Ok(())))),
        "the server did not stop: {stopped:?}"
    );
}

#[tokio::test]
async fn a_client_that_never_reads_its_stream_cannot_hold_the_shutdown_up() {
    use tokio::io::AsyncWriteExt;
    let d = TestDaemon::with_grace(Duration::from_millis(300));
    let mut served = d.serve().await;
    // Enough stored events (each carries its 200 KB arguments) to fill every buffer between
    // the replay and a client that reads nothing.
    let big = "9".repeat(200_000);
    for i in 0..20 {
        let calls = reply(&[(&format!("c{i}"), "calculate", json!({"expressions": [big]}))]);
        served.post("/v1/sessions/big/rounds", &calls).await;
    }
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut stalled = socket
        .connect(served.url.trim_start_matches("http://").parse().unwrap())
        .await
        .unwrap();
    stalled
        .write_all(b"GET /v1/sessions/big/events?after=0 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    served.stop.take().unwrap().send(()).unwrap();
    // Two grace periods at most; the 30 s bound only keeps a regression from hanging.
    let stopped = tokio::time::timeout(Duration::from_secs(30), served.task).await;
    assert!(
        matches!(stopped, Ok(Ok(Ok(())))),
        "the server did not stop: {stopped:?}"
    );
    drop(stalled);
}
