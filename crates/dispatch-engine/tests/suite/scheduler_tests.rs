//! Pass 2 (spec §1.5, DESIGN §3.12, §4.1, §4.5): ordering, the concurrency bound, failure
//! isolation, timeouts, cancellation and fire-and-forget. Timing runs on paused tokio time.

// Helpers outside #[test] fns unwrap too; a failed unwrap is a failed test.

use std::sync::atomic::Ordering;
use std::time::Duration;

use async_trait::async_trait;
use dispatch_engine::{
    Concurrency, EngineConfig, EngineError, Origin, Provider, RoundRequest, Status, Tool,
    ToolContext, ToolError, ToolOutput, ToolSpec, default_max_concurrent,
};
use serde_json::{Value, json};

use super::support::*;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// Emits `line 1`, `line 2`, … as progress `every` apart, then sleeps `silence`, then returns.
struct Chatty {
    spec: ToolSpec,
    lines: usize,
    every: Duration,
    silence: Duration,
}

#[async_trait]
impl Tool for Chatty {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }
    async fn call(&self, cx: ToolContext, _args: Value) -> Result<ToolOutput, ToolError> {
        for i in 0..self.lines {
            tokio::time::sleep(self.every).await;
            cx.progress.emit(format!("line {}\n", i + 1));
        }
        tokio::time::sleep(self.silence).await;
        Ok(ToolOutput::text("finished"))
    }
}

#[test]
fn max_concurrent_tools_is_half_the_cores_but_at_least_three() {
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    assert_eq!(default_max_concurrent(), std::cmp::max(3, cores / 2));
    assert_eq!(
        EngineConfig::new("/tmp").max_concurrent,
        default_max_concurrent()
    );
}

#[tokio::test(start_paused = true)]
async fn concurrent_calls_never_exceed_max_concurrent_and_queue_until_a_slot_frees() {
    let tool = TestTool::new(spec("nap"), Behaviour::Sleep(ms(100)));
    let calls = tool.calls.clone();
    let fx = fixture().tool(tool).max_concurrent(3).build();
    fx.mark_all("s").await;
    let round: Vec<_> = (0..10)
        .map(|i| wrapped(&format!("c{i}"), "nap", json!({"x": i})))
        .collect();
    let out = fx.run("s", "r", round).await;

    assert_eq!(max_in_flight(&out.events), 3);
    assert_eq!(calls.load(Ordering::SeqCst), 10);
    let expected: Vec<_> = (0..10)
        .map(|i| {
            (
                format!("c{i}"),
                Status::Ok,
                format!(r#"[nap] echo:{{"x":{i}}}"#),
            )
        })
        .collect();
    assert_eq!(result_rows(&out), expected);
    // Queued calls start in waves of three as slots free up (virtual time).
    let waves: Vec<u64> = (0..10)
        .map(|i| (event_at(&out.events, "ToolCallStart", &format!("c{i}")) / 100.0).round() as u64)
        .collect();
    assert_eq!(waves, vec![0, 0, 0, 1, 1, 1, 2, 2, 2, 3]);
}

#[tokio::test(start_paused = true)]
async fn the_bound_is_the_configured_max_concurrent() {
    let fx = fixture()
        .tool(TestTool::new(spec("nap"), Behaviour::Sleep(ms(100))))
        .max_concurrent(10)
        .build();
    fx.mark_all("s").await;
    let round: Vec<_> = (0..10)
        .map(|i| wrapped(&format!("c{i}"), "nap", json!({"x": i})))
        .collect();
    let out = fx.run("s", "r", round).await;
    assert_eq!(max_in_flight(&out.events), 10);
}

#[tokio::test(start_paused = true)]
async fn a_serial_call_waits_for_earlier_calls_and_blocks_later_ones() {
    let fx = fixture()
        .tool(TestTool::new(spec("long"), Behaviour::Sleep(ms(50))))
        .tool(TestTool::new(spec("short"), Behaviour::Sleep(ms(30))))
        .tool(TestTool::new(
            serial_spec("barrier"),
            Behaviour::Sleep(ms(10)),
        ))
        .tool(TestTool::new(spec("tiny"), Behaviour::Sleep(ms(5))))
        .build();
    fx.mark_all("s").await;
    let out = fx
        .run(
            "s",
            "r",
            vec![
                wrapped("a", "long", json!({})),
                wrapped("b", "short", json!({})),
                wrapped("c", "barrier", json!({})),
                wrapped("d", "tiny", json!({})),
            ],
        )
        .await;
    let at = |kind: &str, id: &str| event_at(&out.events, kind, id);
    // a and b overlap each other (one concurrent batch).
    assert!(at("ToolCallStart", "b") < at("ToolCallEnd", "a"));
    // The serial call starts only after both earlier calls ended...
    assert!(at("ToolCallStart", "c") >= at("ToolCallEnd", "a"));
    assert!(at("ToolCallStart", "c") >= at("ToolCallEnd", "b"));
    // ...and the later call starts only after it ended.
    assert!(at("ToolCallStart", "d") >= at("ToolCallEnd", "c"));
    // The same holds in emission order.
    let seq = event_seq(&out.events);
    let pos = |kind: &str, id: &str| seq.iter().position(|(k, i)| k == kind && i == id).unwrap();
    assert!(pos("ToolCallStart", "c") > pos("ToolCallEnd", "a"));
    assert!(pos("ToolCallStart", "c") > pos("ToolCallEnd", "b"));
    assert!(pos("ToolCall", "d") > pos("ToolCallEnd", "c"));
    assert_eq!(
        out.results.iter().map(|r| r.status).collect::<Vec<_>>(),
        vec![Status::Ok; 4]
    );
}

#[tokio::test(start_paused = true)]
async fn non_concurrent_calls_run_one_at_a_time_in_call_order() {
    let fx = fixture()
        .tool(TestTool::new(serial_spec("step"), Behaviour::Echo))
        .tool(TestTool::new(
            serial_spec("slow_step"),
            Behaviour::Sleep(ms(30)),
        ))
        .build();
    fx.mark_all("s").await;
    let out = fx
        .run(
            "s",
            "r",
            vec![
                wrapped("a", "slow_step", json!({"x": 1})),
                wrapped("b", "step", json!({"x": 2})),
                wrapped("c", "slow_step", json!({"x": 3})),
            ],
        )
        .await;
    let mut expected = Vec::new();
    for id in ["a", "b", "c"] {
        for kind in ["ToolCall", "ToolCallStart", "ToolCallText", "ToolCallEnd"] {
            expected.push((kind.to_string(), id.to_string()));
        }
    }
    for id in ["a", "b", "c"] {
        expected.push(("ToolResult".to_string(), id.to_string()));
    }
    assert_eq!(event_seq(&out.events), expected);
    assert_eq!(max_in_flight(&out.events), 1);
}

#[tokio::test(start_paused = true)]
async fn an_untagged_tool_is_serial() {
    let plain = ToolSpec::new("plain", "untagged", loose_schema());
    assert_eq!(plain.concurrency, Concurrency::Serial);
    assert!(!plain.is_concurrent());
    let fx = fixture()
        .tool(TestTool::new(
            plain.read_only().effect(dispatch_engine::Effect::Pure),
            Behaviour::Sleep(ms(5)),
        ))
        .build();
    fx.mark_all("s").await;
    let out = fx
        .run(
            "s",
            "r",
            vec![
                wrapped("a", "plain", json!({"x": 1})),
                wrapped("b", "plain", json!({"x": 2})),
                wrapped("c", "plain", json!({"x": 3})),
            ],
        )
        .await;
    assert_eq!(max_in_flight(&out.events), 1);
}

#[tokio::test(start_paused = true)]
async fn results_are_committed_in_call_order_whatever_the_completion_order() {
    let fx = fixture()
        .tool(TestTool::new(spec("t30"), Behaviour::Sleep(ms(30))))
        .tool(TestTool::new(spec("t20"), Behaviour::Sleep(ms(20))))
        .tool(TestTool::new(spec("t10"), Behaviour::Sleep(ms(10))))
        .build();
    fx.mark_all("s").await;
    let out = fx
        .run(
            "s",
            "r",
            vec![
                wrapped("a", "t30", json!({})),
                wrapped("b", "t20", json!({})),
                wrapped("c", "t10", json!({})),
            ],
        )
        .await;
    let ids_of = |kind: &str| -> Vec<String> {
        event_seq(&out.events)
            .into_iter()
            .filter(|(k, _)| k == kind)
            .map(|(_, id)| id)
            .collect()
    };
    assert_eq!(ids_of("ToolCallEnd"), vec!["c", "b", "a"]);
    assert_eq!(ids_of("ToolResult"), vec!["a", "b", "c"]);
    assert_eq!(
        result_rows(&out),
        vec![
            ("a".into(), Status::Ok, "[t30] echo:{}".into()),
            ("b".into(), Status::Ok, "[t20] echo:{}".into()),
            ("c".into(), Status::Ok, "[t10] echo:{}".into()),
        ]
    );
    let rendered: Vec<Value> = out.render(Provider::OpenAi);
    assert_eq!(
        rendered,
        vec![
            json!({"role": "tool", "tool_call_id": "a", "content": "[t30] echo:{}"}),
            json!({"role": "tool", "tool_call_id": "b", "content": "[t20] echo:{}"}),
            json!({"role": "tool", "tool_call_id": "c", "content": "[t10] echo:{}"}),
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn mcp_tools_run_serially_even_when_declared_concurrent() {
    let fx = fixture()
        .tool(TestTool::new(
            spec("mcp__srv__nap").origin(Origin::Mcp {
                server: "srv".into(),
            }),
            Behaviour::Sleep(ms(10)),
        ))
        .tool(TestTool::new(spec("nap"), Behaviour::Sleep(ms(10))))
        .build();
    fx.mark_all("s").await;
    let three = |name: &str| -> Vec<_> {
        (0..3)
            .map(|i| wrapped(&format!("c{i}"), name, json!({"x": i})))
            .collect()
    };
    let mcp = fx.run("s", "r1", three("mcp__srv__nap")).await;
    assert_eq!(max_in_flight(&mcp.events), 1);
    // The same declaration as a built-in does overlap, so the measurement can tell.
    let builtin = fx.run("s", "r2", three("nap")).await;
    assert_eq!(max_in_flight(&builtin.events), 3);
}

#[tokio::test(start_paused = true)]
async fn script_and_ext_tools_run_concurrently_only_when_declared_concurrent() {
    let fx = fixture()
        .tool(TestTool::new(
            spec("script_par").origin(Origin::Script),
            Behaviour::Sleep(ms(10)),
        ))
        .tool(TestTool::new(
            serial_spec("script_ser").origin(Origin::Script),
            Behaviour::Sleep(ms(10)),
        ))
        .tool(TestTool::new(
            spec("ext_par").origin(Origin::Ext),
            Behaviour::Sleep(ms(10)),
        ))
        .tool(TestTool::new(
            serial_spec("ext_ser").origin(Origin::Ext),
            Behaviour::Sleep(ms(10)),
        ))
        .build();
    fx.mark_all("s").await;
    let mut seen = Vec::new();
    for name in ["script_par", "script_ser", "ext_par", "ext_ser"] {
        let round: Vec<_> = (0..2)
            .map(|i| wrapped(&format!("c{i}"), name, json!({"x": i})))
            .collect();
        let out = fx.run("s", name, round).await;
        seen.push((name, max_in_flight(&out.events)));
    }
    assert_eq!(
        seen,
        vec![
            ("script_par", 2),
            ("script_ser", 1),
            ("ext_par", 2),
            ("ext_ser", 1)
        ]
    );
}

#[tokio::test]
async fn each_executed_call_emits_call_start_text_end_in_that_order() {
    let fx = fixture()
        .tool(TestTool::new(spec("echo"), Behaviour::Echo))
        .tool(TestTool::new(spec("quiet"), Behaviour::Text(String::new())))
        .tool(TestTool::new(spec("bad"), Behaviour::Fail("nope".into())))
        .build();
    fx.mark_all("s").await;
    let out = fx
        .run(
            "s",
            "r",
            vec![
                wrapped("a", "echo", json!({"x": 1})),
                wrapped("b", "quiet", json!({})),
                wrapped("c", "bad", json!({})),
            ],
        )
        .await;
    let types = |id: &str| event_types(&out.events, Some(id));
    assert_eq!(
        types("a"),
        vec![
            "ToolCall",
            "ToolCallStart",
            "ToolCallText",
            "ToolCallEnd",
            "ToolResult"
        ]
    );
    assert_eq!(
        types("b"),
        vec!["ToolCall", "ToolCallStart", "ToolCallEnd", "ToolResult"]
    );
    assert_eq!(
        types("c"),
        vec!["ToolCall", "ToolCallStart", "ToolCallEnd", "ToolResult"]
    );
    let events = events_json(&out.events);
    let call = events
        .iter()
        .find(|v| v["type"] == "ToolCall" && v["tool_id"] == "a")
        .unwrap();
    assert_eq!(
        call,
        &json!({"type": "ToolCall", "tool_id": "a", "tool_name": "echo", "tool_args": "{\"x\":1}", "at_ms": call["at_ms"]})
    );
    let text = events.iter().find(|v| v["type"] == "ToolCallText").unwrap();
    assert_eq!(text["text"], r#"echo:{"x":1}"#);
}

#[tokio::test(start_paused = true)]
async fn a_fire_and_forget_call_is_ok_at_once_and_not_awaited() {
    let bg = TestTool::new(spec("bg").fire_and_forget(), Behaviour::Sleep(secs(30)));
    let bg_calls = bg.calls.clone();
    let fx = fixture()
        .tool(bg)
        .tool(TestTool::new(spec("echo"), Behaviour::Echo))
        .build();
    fx.mark_all("s").await;
    let (tx, mut rx) = tokio::sync::broadcast::channel(64);
    let mut req = RoundRequest::new(
        "s",
        "r",
        Provider::OpenAi,
        vec![
            wrapped("a", "bg", json!({})),
            wrapped("b", "echo", json!({})),
        ],
    );
    req.live = Some(std::sync::Arc::new(tx));
    let started = tokio::time::Instant::now();
    let out = fx.request(req).await;
    // Virtual time: the round did not wait out the 30 s sleep.
    assert!(started.elapsed() < secs(30));
    assert_eq!(
        result_rows(&out),
        vec![
            ("a".into(), Status::Ok, "[bg] ok".into()),
            ("b".into(), Status::Ok, "[echo] echo:{}".into()),
        ]
    );
    // Its own events arrive later, after the round returned.
    let end = tokio::time::timeout(secs(60), async {
        loop {
            let event = rx.recv().await.unwrap();
            let v = serde_json::to_value(&event).unwrap();
            if v["type"] == "ToolCallEnd" && v["tool_id"] == "a" {
                return v;
            }
        }
    })
    .await
    .expect("the fire-and-forget call never ended");
    assert!(end["at_ms"].as_f64().unwrap() >= 30_000.0);
    assert_eq!(bg_calls.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn a_hard_timeout_stops_the_call_as_timed_out() {
    let fx = fixture()
        .tool(TestTool::new(
            spec("slow").timeout(secs(2)),
            Behaviour::Sleep(secs(10)),
        ))
        .tool(TestTool::new(spec("echo"), Behaviour::Echo))
        .build();
    fx.mark_all("s").await;
    let out = fx
        .run(
            "s",
            "r",
            vec![
                wrapped("a", "slow", json!({})),
                wrapped("b", "echo", json!({})),
            ],
        )
        .await;
    assert_eq!(
        result_rows(&out),
        vec![
            (
                "a".into(),
                Status::TimedOut,
                format!(
                    "[slow] tool=slow failed: tool \"slow\" timed out after 2s\n{}",
                    write_error_hint("slow")
                )
            ),
            ("b".into(), Status::Ok, "[echo] echo:{}".into()),
        ]
    );
    assert_eq!(
        event_types(&out.events, Some("a")),
        vec!["ToolCall", "ToolCallStart", "ToolCallEnd", "ToolResult"]
    );
}

#[tokio::test(start_paused = true)]
async fn the_default_timeout_is_sixty_seconds() {
    let fx = fixture()
        .tool(TestTool::new(spec("slow"), Behaviour::Sleep(secs(61))))
        .build();
    fx.mark_all("s").await;
    let out = fx
        .run("s", "r", vec![wrapped("a", "slow", json!({}))])
        .await;
    assert_eq!(out.results[0].status, Status::TimedOut);
    assert_eq!(
        out.results[0].content,
        format!(
            "[slow] tool=slow failed: tool \"slow\" timed out after 1m0s\n{}",
            write_error_hint("slow")
        )
    );
}

#[tokio::test(start_paused = true)]
async fn progress_resets_the_idle_timeout() {
    let fx = fixture()
        .tool(TestTool::new(
            spec("ticker").idle_timeout(secs(2)).timeout(secs(60)),
            Behaviour::Progress {
                ticks: 10,
                every: secs(1),
            },
        ))
        .build();
    fx.mark_all("s").await;
    let out = fx
        .run("s", "r", vec![wrapped("a", "ticker", json!({}))])
        .await;
    assert_eq!(
        result_rows(&out),
        vec![("a".into(), Status::Ok, "[ticker] done".into())]
    );
    let progress: Vec<String> = events_json(&out.events)
        .iter()
        .filter(|v| v["type"] == "ToolProgress")
        .map(|v| v["text"].as_str().unwrap().to_string())
        .collect();
    let expected: Vec<String> = (0..10).map(|i| format!("tick {i}\n")).collect();
    assert_eq!(progress, expected);
}

#[tokio::test(start_paused = true)]
async fn a_silent_call_is_stopped_by_the_idle_timeout_with_its_partial_output() {
    let fx = fixture()
        .tool(Chatty {
            spec: spec("quiet").idle_timeout(secs(2)).timeout(secs(60)),
            lines: 2,
            every: secs(1),
            silence: secs(30),
        })
        .build();
    fx.mark_all("s").await;
    let out = fx
        .run("s", "r", vec![wrapped("a", "quiet", json!({}))])
        .await;
    assert_eq!(
        result_rows(&out),
        vec![(
            "a".into(),
            Status::TimedOut,
            format!(
                "[quiet] tool=quiet failed: tool \"quiet\" timed out after 2s without progress\npartial output before the timeout:\nline 1\nline 2\n{}",
                write_error_hint("quiet")
            )
        )]
    );
    assert_eq!(
        event_types(&out.events, Some("a")),
        vec![
            "ToolCall",
            "ToolCallStart",
            "ToolProgress",
            "ToolProgress",
            "ToolCallEnd",
            "ToolResult"
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn the_hard_timeout_applies_even_while_progress_keeps_coming() {
    let fx = fixture()
        .tool(Chatty {
            spec: spec("busy").idle_timeout(secs(2)).timeout(secs(5)),
            lines: 20,
            every: secs(1),
            silence: Duration::ZERO,
        })
        .build();
    fx.mark_all("s").await;
    let out = fx
        .run("s", "r", vec![wrapped("a", "busy", json!({}))])
        .await;
    assert_eq!(out.results[0].status, Status::TimedOut);
    let content = &out.results[0].content;
    assert!(
        content.starts_with(
            "[busy] tool=busy failed: tool \"busy\" timed out after 5s\npartial output before the timeout:\nline 1\nline 2\nline 3\nline 4\n"
        ),
        "{content}"
    );
    assert!(!content.contains("without progress"), "{content}");
    assert!(content.ends_with(&write_error_hint("busy")), "{content}");
}

#[tokio::test(start_paused = true)]
async fn a_failing_or_panicking_call_never_cancels_its_siblings() {
    let ok_first = TestTool::new(spec("first"), Behaviour::Sleep(ms(20)));
    let ok_last = TestTool::new(serial_spec("last"), Behaviour::Echo);
    let (first_calls, last_calls) = (ok_first.calls.clone(), ok_last.calls.clone());
    let fx = fixture()
        .tool(ok_first)
        .tool(TestTool::new(
            spec("bad"),
            Behaviour::Fail("disk full".into()),
        ))
        .tool(TestTool::new(
            spec("boom"),
            Behaviour::Panic("kaboom".into()),
        ))
        .tool(ok_last)
        .build();
    fx.mark_all("s").await;
    let out = fx
        .run(
            "s",
            "r",
            vec![
                wrapped("a", "first", json!({})),
                wrapped("b", "bad", json!({})),
                wrapped("c", "boom", json!({})),
                wrapped("d", "last", json!({})),
            ],
        )
        .await;
    assert_eq!(
        result_rows(&out),
        vec![
            ("a".into(), Status::Ok, "[first] echo:{}".into()),
            (
                "b".into(),
                Status::Failed,
                format!(
                    "[bad] tool=bad failed: disk full\n{}",
                    write_error_hint("bad")
                )
            ),
            (
                "c".into(),
                Status::Failed,
                format!(
                    "[boom] tool=boom failed: tool boom panicked: kaboom\n{}",
                    write_error_hint("boom")
                )
            ),
            ("d".into(), Status::Ok, "[last] echo:{}".into()),
        ]
    );
    assert_eq!(first_calls.load(Ordering::SeqCst), 1);
    assert_eq!(last_calls.load(Ordering::SeqCst), 1);
    assert_eq!(out.fatal, None);
}

#[tokio::test(start_paused = true)]
async fn cancelling_the_round_skips_pass_3() {
    let fx = fixture()
        .tool(TestTool::new(spec("slow"), Behaviour::Sleep(secs(10))))
        .build();
    fx.mark_all("s").await;
    let calls = vec![wrapped("a", "slow", json!({}))];
    let req = RoundRequest::new("s", "r", Provider::OpenAi, calls.clone());
    let cancel = req.cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(secs(1)).await;
        cancel.cancel();
    });
    let err = fx.engine.round(req).await.unwrap_err();
    assert!(matches!(err, EngineError::Cancelled), "{err:?}");

    let transcript = fx.store.transcript("s", Some("r")).await.unwrap();
    let messages: Vec<Value> = transcript.iter().map(|e| e.message_json()).collect();
    assert_eq!(
        messages,
        vec![json!({"role": "assistant", "tool_calls": [
            {"id": "a", "name": "run_tool", "arguments": calls[0].arguments}
        ]})]
    );
    // The run's dedupe map got nothing: the same call runs again.
    let again = fx.run("s", "r", calls).await;
    assert_eq!(again.results[0].status, Status::Ok);
}

// Multi-threaded, so that a call the engine wrongly starts really gets to run; the cancel comes
// after 20 ms of real time and the slow call would sleep 10 s, so nothing waits long.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]

async fn cancelling_the_round_starts_no_later_call() {
    let later = TestTool::new(serial_spec("later"), Behaviour::Echo);
    let later_calls = later.calls.clone();
    let fx = fixture()
        .tool(TestTool::new(spec("slow"), Behaviour::Sleep(secs(10))))
        .tool(later)
        .build();
    fx.mark_all("s").await;
    let req = RoundRequest::new(
        "s",
        "r",
        Provider::OpenAi,
        vec![
            wrapped("a", "slow", json!({})),
            wrapped("b", "later", json!({})),
        ],
    );
    let cancel = req.cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(ms(20)).await;
        cancel.cancel();
    });
    let err = fx.engine.round(req).await.unwrap_err();
    assert!(matches!(err, EngineError::Cancelled), "{err:?}");
    assert_eq!(later_calls.load(Ordering::SeqCst), 0);
    let stored: Vec<(String, String)> = fx
        .store
        .events("s", 0)
        .await
        .unwrap()
        .into_iter()
        .map(|(_, text)| {
            let v: Value = serde_json::from_str(&text).unwrap();
            (
                v["type"].as_str().unwrap().to_string(),
                v["tool_id"].as_str().unwrap_or("").to_string(),
            )
        })
        .filter(|(kind, id)| id != "mark" && kind != "RoundCommitted")
        .collect();
    let expect = |k: &str, id: &str| (k.to_string(), id.to_string());
    assert_eq!(
        stored,
        vec![
            expect("ToolCall", "a"),
            expect("ToolCallStart", "a"),
            expect("ToolCallEnd", "a"),
            expect("Canceled", ""),
        ]
    );
}
