//! ask_user and store_secret through a real engine: parked and answered later (headless), or
//! answered inline by a user who is present.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use dispatch_engine::{
    AnswerRequest, ConfirmReply, ConfirmRequest, Confirmer, EngineError, Question, Status,
};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use crate::test_support::*;

fn ask(questions: Value) -> Value {
    json!({
        "questions": questions,
        "state": {"objective": "paint the shed", "completed": ["bought brushes"], "next_steps": ["paint"]}
    })
}

/// Everything a session left behind that a person or a log could read.
async fn everything(
    h: &Harness,
    session: &str,
    outcomes: &[&dispatch_engine::RoundOutcome],
) -> String {
    let mut all = String::new();
    for out in outcomes {
        all.push_str(&out.report().to_string());
    }
    for (_, event) in h.store.events(session, 0).await.unwrap() {
        all.push_str(&event);
    }
    for entry in h.store.transcript(session, None).await.unwrap() {
        all.push_str(&entry.message_json().to_string());
    }
    for task in h.store.pending(session).await.unwrap() {
        all.push_str(&serde_json::to_string(&task).unwrap());
    }
    all
}

#[tokio::test]
async fn a_headless_ask_user_parks_the_run_and_the_answer_becomes_its_result() {
    let h = Harness::new();
    h.select("s", "calculate").await;
    let out = h
        .round(
            "s",
            "r",
            vec![
                run_tool("c", "calculate", json!({"expressions": ["1+1"]})),
                call("q", "ask_user", ask(json!([
                    {"question": "Which colour?", "options": ["red", "blue"]},
                    {"question": "Which  sides?\n", "options": ["north", "south", "east"], "multi_select": true},
                    {"question": "Anything else?"}
                ]))),
            ],
        )
        .await;
    // The other call was not run, and the asking call has no result yet.
    assert_eq!(
        results(&out),
        vec![result(
            "c",
            Status::NotRun,
            "tool=calculate failed: not run — the round paused to ask the user (ask_user); call it again after the answer if you still need it."
        )]
    );
    let pending = out.pending.clone().unwrap();
    assert_eq!(
        (pending.tool.as_str(), pending.tool_call_id.as_str()),
        ("ask_user", "q")
    );
    assert_eq!(pending.questions[1]["multi_select"], json!(true));
    assert_eq!(pending.state["objective"], json!("paint the shed"));
    assert_eq!(h.store.pending("s").await.unwrap(), vec![pending.clone()]);

    let answered = h
        .engine
        .answer(AnswerRequest::new(
            "s",
            pending.task_hash.clone(),
            vec!["2".into(), "1, 3".into(), " no ".into()],
        ))
        .await
        .unwrap();
    assert_eq!(
        results(&answered),
        vec![result(
            "q",
            Status::Ok,
            "[ask_user] The user answered:\n1. Which colour?\n   → blue\n2. Which sides?\n   → north, east\n3. Anything else?\n   → no"
        )]
    );
    assert_eq!((answered.run.as_str(), answered.round), ("r", 2));
    assert_eq!(h.store.pending("s").await.unwrap(), vec![]);
    // The result joins the run's transcript right after the round that asked.
    let transcript = h.store.transcript("s", Some("r")).await.unwrap();
    let last = transcript.last().unwrap().message_json();
    assert_eq!(last["tool_call_id"], json!("q"));
    assert_eq!(last["role"], json!("tool"));

    // An answer lands once.
    let again = h
        .engine
        .answer(AnswerRequest::new(
            "s",
            pending.task_hash.clone(),
            vec!["x".into(); 3],
        ))
        .await
        .unwrap_err();
    assert_eq!(
        again.to_string(),
        format!(
            "session s has no pending task {}; it has none (already answered, or never parked)",
            pending.task_hash
        )
    );
}

#[tokio::test]
async fn an_answer_must_give_one_answer_per_question() {
    let h = Harness::new();
    let out = h
        .round(
            "s",
            "r",
            vec![call(
                "q",
                "ask_user",
                ask(json!([{"question": "A?"}, {"question": "B?"}])),
            )],
        )
        .await;
    let task = out.pending.unwrap().task_hash;
    let err = h
        .engine
        .answer(AnswerRequest::new(
            "s",
            task.clone(),
            vec!["only one".into()],
        ))
        .await
        .unwrap_err();
    assert!(matches!(err, EngineError::BadAnswer(_)));
    assert_eq!(
        err.to_string(),
        format!(
            "task {task} asks 2 question(s) and got 1 answer(s); give one answer per question, in order"
        )
    );
    // Still pending: a bad answer changes nothing.
    assert_eq!(h.store.pending("s").await.unwrap().len(), 1);
}

#[tokio::test]
async fn a_parked_store_secret_stores_the_answer_and_shows_only_its_name() {
    const VALUE: &str = "tok-3f9a77c1e2";
    let h = Harness::new();
    h.select("s", "store_secret").await;
    let out = h
        .round(
            "s",
            "r",
            vec![run_tool(
                "k",
                "store_secret",
                json!({"key": "API_TOKEN", "question": "From the dashboard, read scope"}),
            )],
        )
        .await;
    let task = out.pending.clone().unwrap();
    assert_eq!(
        task.questions,
        json!([{"question": "Enter the value for API_TOKEN", "detail": "From the dashboard, read scope (stored encrypted; the model only ever sees the name)", "secret": true}])
    );
    let answered = h
        .engine
        .answer(AnswerRequest::new(
            "s",
            task.task_hash,
            vec![format!("{VALUE}\n")],
        ))
        .await
        .unwrap();
    assert_eq!(
        results(&answered),
        vec![result(
            "k",
            Status::Ok,
            r#"[store_secret] {"ok":true,"key":"API_TOKEN"}"#
        )]
    );
    assert_eq!(
        h.store.secret_get("API_TOKEN").await.unwrap().as_deref(),
        Some(VALUE)
    );
    let all = everything(&h, "s", &[&out, &answered]).await;
    assert!(all.contains("API_TOKEN"));
    assert!(!all.contains(VALUE), "the secret leaked: {all}");
}

#[tokio::test]
async fn an_empty_secret_is_not_stored() {
    let h = Harness::new();
    h.select("s", "store_secret").await;
    let out = h
        .round(
            "s",
            "r",
            vec![run_tool("k", "store_secret", json!({"key": "API_TOKEN"}))],
        )
        .await;
    let answered = h
        .engine
        .answer(AnswerRequest::new(
            "s",
            out.pending.unwrap().task_hash,
            vec!["\n".into()],
        ))
        .await
        .unwrap();
    assert_eq!(answered.results[0].status, Status::Failed);
    assert!(
        answered.results[0].content.starts_with(
            "[store_secret] tool=store_secret failed: the user entered no value for API_TOKEN; nothing was stored"
        ),
        "{}",
        answered.results[0].content
    );
    assert_eq!(h.store.secret_get("API_TOKEN").await.unwrap(), None);
}

/// A user at the keyboard: approves everything, answers from a script, remembers the questions.
struct PresentUser {
    answers: Mutex<Vec<Vec<String>>>,
    asked: Mutex<Vec<Vec<Question>>>,
}

impl PresentUser {
    fn new(answers: Vec<Vec<&str>>) -> Arc<Self> {
        Arc::new(PresentUser {
            answers: Mutex::new(
                answers
                    .into_iter()
                    .rev()
                    .map(|a| a.into_iter().map(String::from).collect())
                    .collect(),
            ),
            asked: Mutex::default(),
        })
    }
}

#[async_trait]
impl Confirmer for PresentUser {
    async fn confirm(&self, _request: &ConfirmRequest) -> ConfirmReply {
        ConfirmReply {
            approve: true,
            ..ConfirmReply::default()
        }
    }
    async fn ask(&self, questions: &[Question]) -> Option<Vec<String>> {
        self.asked.lock().unwrap().push(questions.to_vec());
        self.answers.lock().unwrap().pop()
    }
    fn interactive(&self) -> bool {
        true
    }
}

#[tokio::test]
async fn with_a_user_present_both_tools_run_inline_and_a_new_secret_is_hidden_at_once() {
    const VALUE: &str = "sk-live-8c1d2e3f";
    let user = PresentUser::new(vec![vec!["blue"], vec![VALUE]]);
    let h = Harness::with_confirmer(user.clone());
    std::fs::write(h.root().join("key.txt"), VALUE).unwrap();
    h.select("s", "run_command,store_secret").await;
    let out = h
        .round(
            "s",
            "r",
            vec![
                call("q", "ask_user", ask(json!([{"question": "Colour?"}]))),
                run_tool("k", "store_secret", json!({"key": "LIVE_KEY"})),
                // Prints the value just stored (the user also keeps it in a file): the round
                // must already hide it.
                run_tool("p", "run_command", json!({"argv": ["cat", "key.txt"]})),
            ],
        )
        .await;
    assert_eq!(out.pending, None);
    // How long the command took is not the point (and varies with the machine's load).
    let timeless: Vec<_> = results(&out)
        .into_iter()
        .map(|(id, status, text)| {
            let text = match text.split_once(" (") {
                Some((head, rest)) if head.starts_with("[run_command] exit code") => {
                    format!("{head} (T s){}", &rest[rest.find(" s)").unwrap() + 3..])
                }
                _ => text,
            };
            (id, status, text)
        })
        .collect();
    assert_eq!(
        timeless,
        vec![
            result(
                "q",
                Status::Ok,
                "[ask_user] The user answered:\n1. Colour?\n   → blue"
            ),
            result(
                "k",
                Status::Ok,
                r#"[store_secret] {"ok":true,"key":"LIVE_KEY"}"#
            ),
            result(
                "p",
                Status::Ok,
                "[run_command] exit code 0 (T s)\n$ cat key.txt  (in .)\n--- stdout ---\n[secret:LIVE_KEY]"
            ),
        ]
    );
    assert_eq!(user.asked.lock().unwrap()[1][0].secret, true);
    let all = everything(&h, "s", &[&out]).await;
    assert!(!all.contains(VALUE), "the secret leaked: {all}");
}

#[tokio::test]
async fn a_secret_answer_to_ask_user_is_stored_and_named_not_shown() {
    const VALUE: &str = "hunter2-but-longer";
    let user = PresentUser::new(vec![vec!["yes", VALUE]]);
    let h = Harness::with_confirmer(user);
    let out = h
        .round(
            "s",
            "r",
            vec![call(
                "q",
                "ask_user",
                ask(json!([
                    {"question": "Deploy?"},
                    {"question": "The deploy password?", "secret": true}
                ])),
            )],
        )
        .await;
    let text = &out.results[0].content;
    let name = text
        .split("stored as ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap()
        .to_string();
    assert!(
        name.starts_with("ANSWER_") && name.ends_with("_2"),
        "{name}"
    );
    assert_eq!(
        text,
        &format!(
            "[ask_user] The user answered:\n1. Deploy?\n   → yes\n2. The deploy password?\n   → (a secret; stored as {name} — pass it as {{{{secret:{name}}}}} where it is needed)"
        )
    );
    assert_eq!(
        h.store.secret_get(&name).await.unwrap().as_deref(),
        Some(VALUE)
    );
    assert!(!everything(&h, "s", &[&out]).await.contains(VALUE));
}

#[tokio::test]
async fn a_user_who_closes_the_prompt_gets_a_failure_the_model_can_act_on() {
    let h = Harness::with_confirmer(PresentUser::new(vec![]));
    let out = h
        .round(
            "s",
            "r",
            vec![call("q", "ask_user", ask(json!([{"question": "  "}])))],
        )
        .await;
    assert_eq!(out.results[0].status, Status::Failed);
    assert!(
        out.results[0].content.starts_with(
            "[ask_user] tool=ask_user failed: question 1 is blank; write each question out"
        ),
        "{}",
        out.results[0].content
    );
    let out = h
        .round(
            "s",
            "r2",
            vec![call("q", "ask_user", ask(json!([{"question": "Colour?"}])))],
        )
        .await;
    assert!(
        out.results[0].content.starts_with(
            "[ask_user] tool=ask_user failed: the user did not answer (the prompt was closed); continue with what you know, or ask again later"
        ),
        "{}",
        out.results[0].content
    );
}

/// The result text of `out`'s first call.
fn first_content(out: &dispatch_engine::RoundOutcome) -> String {
    out.results[0].content.clone()
}

/// Seed checklist item 84: a pending task holds every result of its run so far, from every
/// round (an answered question's result included), not only the round that parked it.
#[tokio::test]
async fn a_pending_task_holds_every_result_of_the_run_so_far() {
    let h = Harness::new();
    h.select("s", "calculate").await;
    let one = json!({"expressions": ["1+1"]});
    let r1 = h
        .round("s", "r", vec![run_tool("c1", "calculate", one.clone())])
        .await;
    assert_eq!(r1.results[0].status, Status::Ok);
    let two = json!({"expressions": ["2*3"]});
    let r2 = h
        .round(
            "s",
            "r",
            vec![
                run_tool("c2", "calculate", two.clone()),
                call(
                    "q1",
                    "ask_user",
                    ask(json!([{"question": "Which colour?", "options": ["red", "blue"]}])),
                ),
            ],
        )
        .await;
    let first = r2.pending.clone().unwrap();
    assert_eq!(
        first.tool_results,
        vec![
            json!({"name": "calculate", "id": "c1", "args": one, "result": first_content(&r1)}),
            json!({"name": "calculate", "id": "c2", "args": two, "result": first_content(&r2)}),
        ]
    );
    // The store keeps the same record.
    assert_eq!(h.store.pending("s").await.unwrap(), vec![first.clone()]);

    let answered = h
        .engine
        .answer(AnswerRequest::new(
            "s",
            first.task_hash.clone(),
            vec!["1".into()],
        ))
        .await
        .unwrap();
    let r4 = h
        .round(
            "s",
            "r",
            vec![call(
                "q2",
                "ask_user",
                ask(json!([{"question": "Which shade?"}])),
            )],
        )
        .await;
    let second = r4.pending.clone().unwrap();
    let ids: Vec<(&str, &str)> = second
        .tool_results
        .iter()
        .map(|r| (r["id"].as_str().unwrap(), r["name"].as_str().unwrap()))
        .collect();
    assert_eq!(
        ids,
        vec![("c1", "calculate"), ("c2", "calculate"), ("q1", "ask_user")]
    );
    assert_eq!(
        second.tool_results[2]["result"],
        json!(first_content(&answered))
    );
    assert_eq!(
        second.tool_results[2]["args"]["questions"][0]["question"],
        json!("Which colour?")
    );
    // Another run of the session is not this run's business.
    let other = h
        .round(
            "s",
            "other",
            vec![call("q3", "ask_user", ask(json!([{"question": "Why?"}])))],
        )
        .await;
    assert_eq!(other.pending.unwrap().tool_results, Vec::<Value>::new());
}

/// A task the user cancels is gone, and the asking call's result tells the model so: the
/// caller sends it with the next model call, as it would an answer.
#[tokio::test]
async fn a_cancelled_task_is_removed_and_its_result_tells_the_model() {
    let h = Harness::new();
    let out = h
        .round(
            "s",
            "r",
            vec![call(
                "q",
                "ask_user",
                ask(json!([{"question": "Delete the old backups?"}])),
            )],
        )
        .await;
    let task = out.pending.unwrap().task_hash;
    let cancelled = h
        .engine
        .answer(AnswerRequest::cancel("s", task.clone()))
        .await
        .unwrap();
    let told = "The user cancelled this ask_user instead of answering it, so there is no answer. Do not ask it again; go on without it, or end the turn and say what you could not do without it.";
    assert_eq!(
        results(&cancelled),
        vec![result("q", Status::Declined, told)]
    );
    assert_eq!(
        cancelled.render(dispatch_engine::Provider::OpenAi),
        vec![json!({"role": "tool", "tool_call_id": "q", "content": told})]
    );
    assert_eq!(h.store.pending("s").await.unwrap(), vec![]);
    let skipped: Vec<&str> = events_of(&cancelled.events, "ToolSkipped")
        .into_iter()
        .filter_map(|e| match e {
            dispatch_engine::EventKind::ToolSkipped { text, .. } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(skipped, vec!["cancelled by the user"]);
    // The run goes on: the result is in its transcript, after the round that asked.
    let transcript = h.store.transcript("s", Some("r")).await.unwrap();
    let last = transcript.last().unwrap().message_json();
    assert_eq!(
        (last["tool_call_id"].clone(), last["content"].clone()),
        (json!("q"), json!(told))
    );
    // Cancelled once: a second cancel, or an answer, finds nothing.
    let again = h
        .engine
        .answer(AnswerRequest::cancel("s", task.clone()))
        .await
        .unwrap_err();
    assert!(matches!(again, EngineError::NoSuchTask { .. }), "{again}");
}
