//! `tooldispatch bench agent`: the agent loop's own cost per model turn. A scripted OpenAI Chat
//! Completions server on 127.0.0.1 (in this process, or the one `--model-url` names) answers
//! `--turns` requests with `--calls` calculate calls each, then a final answer; the loop
//! (dispatch_model::Agent on a `memory:` store, every call allowed) runs that conversation
//! `--reps` times. The model's own time is a bare HTTP round trip to the same server with the
//! same HTTP library and the same reply, measured beside each run; what is left per model turn
//! is the loop's overhead. `--serve-model` only runs the scripted server, so another agent loop
//! (bench/peers/agents_sdk.py: the OpenAI Agents SDK) can be measured against the same one.
//!
//! The server is stateless: the turn it answers is the number of assistant messages after the
//! last user message, so any loop that keeps a normal chat history gets the same script. It
//! checks every tool result it is sent against the expression it asked for, and the final
//! answer says how many were right (`answered R/E`), so a loop that skipped or garbled a
//! call cannot pass for a fast one.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use clap::Args;
use dispatch_engine::{ApproveAll, Provider, RawCall, RoundRequest};
use dispatch_model::{
    Agent, AgentEnd, AgentRequest, ApiKey, KeySource, ModelClient, ModelConfig, ProviderKind,
};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::bench_http::TempDir;
use crate::config::Config;
use crate::{Approve, CliError, Common, setup};

#[derive(Args)]
pub struct AgentArgs {
    /// agent: model turns with tool calls before the final answer (each run makes --turns + 1
    /// model requests).
    #[arg(long, default_value_t = 10)]
    turns: usize,
    /// agent: use the scripted model server at this base URL (as printed by --serve-model)
    /// instead of starting one in this process.
    #[arg(long)]
    model_url: Option<String>,
    /// agent: only run the scripted model server: print its base URL as one JSON line and serve
    /// until stdin closes.
    #[arg(long)]
    serve_model: bool,
}

/// The model name the scripted server answers as.
const MODEL: &str = "bench-scripted";

/// What the scripted server sends, built before the first request.
struct Script {
    turns: usize,
    calls: usize,
    /// Per tool-call turn: (run_tool form, direct form), each as (SSE body, JSON body).
    tool_turns: Vec<[(Bytes, Bytes); 2]>,
}

/// The expression of call `i` of turn `t` and its value.
fn expression(turn: usize, call: usize) -> (String, String) {
    (format!("{turn}+{call}"), (turn + call).to_string())
}

fn call_id(turn: usize, call: usize) -> String {
    format!("call_{turn}_{call}")
}

impl Script {
    fn new(turns: usize, calls: usize) -> Script {
        let tool_turns = (0..turns)
            .map(|t| {
                let form = |via_run_tool: bool| {
                    let calls: Vec<Value> = (0..calls)
                        .map(|i| {
                            let args = json!({"expressions": [expression(t, i).0]});
                            let (name, arguments) = if via_run_tool {
                                ("run_tool", json!({"name": "calculate", "args": args}))
                            } else {
                                ("calculate", args)
                            };
                            json!({"id": call_id(t, i), "type": "function",
                                   "function": {"name": name, "arguments": arguments.to_string()}})
                        })
                        .collect();
                    bodies(json!({"role": "assistant", "content": null, "tool_calls": calls}))
                };
                [form(true), form(false)]
            })
            .collect();
        Script {
            turns,
            calls,
            tool_turns,
        }
    }
}

/// The same assistant message as a Chat Completions stream and as a plain completion.
fn bodies(message: Value) -> (Bytes, Bytes) {
    let finish = if message.get("tool_calls").is_some_and(|c| !c.is_null()) {
        "tool_calls"
    } else {
        "stop"
    };
    let usage = json!({"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110});
    let chunk = |delta: Value, finish: Value, usage: Value| {
        json!({"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 0,
               "model": MODEL,
               "choices": if usage.is_null() { json!([{"index": 0, "delta": delta, "finish_reason": finish}]) } else { json!([]) },
               "usage": usage})
    };
    let mut delta = message.clone();
    if let Some(calls) = delta.get_mut("tool_calls").and_then(Value::as_array_mut) {
        for (index, call) in calls.iter_mut().enumerate() {
            call["index"] = json!(index);
        }
    }
    let mut sse = String::new();
    for event in [
        chunk(delta, Value::Null, Value::Null),
        chunk(json!({}), json!(finish), Value::Null),
        chunk(Value::Null, Value::Null, usage.clone()),
    ] {
        sse.push_str(&format!("data: {event}\n\n"));
    }
    sse.push_str("data: [DONE]\n\n");
    let plain = json!({"id": "chatcmpl-bench", "object": "chat.completion", "created": 0,
        "model": MODEL,
        "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": null}],
        "usage": usage});
    (Bytes::from(sse), Bytes::from(plain.to_string()))
}

/// The parts of a request the script reads; serde skips the rest.
#[derive(Deserialize)]
struct ChatRequest {
    #[serde(default)]
    stream: bool,
    #[serde(default)]
    messages: Vec<Message>,
    #[serde(default)]
    tools: Vec<ToolEntry>,
}

#[derive(Deserialize)]
struct Message {
    role: String,
    #[serde(default)]
    tool_call_id: Option<String>,
    #[serde(default)]
    content: Option<Value>,
}

#[derive(Deserialize)]
struct ToolEntry {
    #[serde(default)]
    function: Option<FunctionName>,
}

#[derive(Deserialize)]
struct FunctionName {
    name: String,
}

async fn chat(State(script): State<Arc<Script>>, body: Bytes) -> Response {
    let request: ChatRequest = match serde_json::from_slice(&body) {
        Ok(request) => request,
        Err(e) => {
            let message = format!("the request is not a Chat Completions request: {e}");
            return (
                StatusCode::BAD_REQUEST,
                [(header::CONTENT_TYPE, "application/json")],
                json!({"error": {"message": message}}).to_string(),
            )
                .into_response();
        }
    };
    let start = request
        .messages
        .iter()
        .rposition(|m| m.role == "user")
        .map_or(0, |i| i + 1);
    let this_turn = &request.messages[start..];
    let turn = this_turn.iter().filter(|m| m.role == "assistant").count();
    let (sse, plain) = if turn < script.turns {
        let via_run_tool = request
            .tools
            .iter()
            .any(|t| t.function.as_ref().is_some_and(|f| f.name == "run_tool"));
        script.tool_turns[turn][usize::from(!via_run_tool)].clone()
    } else {
        let right = this_turn
            .iter()
            .filter(|m| m.role == "tool" && result_is_right(m))
            .count();
        let expected = script.turns * script.calls;
        bodies(json!({"role": "assistant", "content": format!("answered {right}/{expected}")}))
    };
    let (content_type, body) = if request.stream {
        ("text/event-stream", sse)
    } else {
        ("application/json", plain)
    };
    ([(header::CONTENT_TYPE, content_type)], body).into_response()
}

/// A tool message whose call id names a scripted call and whose text holds that call's
/// expression with its value, as JSON (`"2+1":"3"`, tooldispatch's calculate and the SDK
/// peer's tool both answer so).
fn result_is_right(message: &Message) -> bool {
    let Some((turn, call)) = message
        .tool_call_id
        .as_deref()
        .and_then(|id| id.strip_prefix("call_"))
        .and_then(|rest| rest.split_once('_'))
        .and_then(|(t, c)| Some((t.parse().ok()?, c.parse().ok()?)))
    else {
        return false;
    };
    let text = match &message.content {
        Some(Value::String(text)) => text.clone(),
        // Content parts: the text parts joined.
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect(),
        _ => return false,
    };
    let (expr, value) = expression(turn, call);
    text.contains(&format!("\"{expr}\":\"{value}\""))
}

/// The scripted server on 127.0.0.1:0: its base URL (ending in `/v1`) and its task.
async fn start_server(
    turns: usize,
    calls: usize,
    stop: CancellationToken,
) -> Result<(String, tokio::task::JoinHandle<()>), CliError> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| CliError::failed(format!("cannot listen on 127.0.0.1:0: {e}")))?;
    let addr = listener
        .local_addr()
        .map_err(|e| CliError::failed(format!("cannot read the listening address: {e}")))?;
    let app = axum::Router::new()
        .route("/v1/chat/completions", axum::routing::post(chat))
        .with_state(Arc::new(Script::new(turns, calls)));
    let server = tokio::spawn(async move {
        let _ = axum::serve(listener, app)
            .with_graceful_shutdown(stop.cancelled_owned())
            .await;
    });
    Ok((format!("http://{addr}/v1"), server))
}

pub async fn run(
    args: AgentArgs,
    calls: Option<usize>,
    reps: Option<usize>,
    max_concurrent: Option<usize>,
) -> Result<(), CliError> {
    let turns = args.turns.max(1);
    let calls = calls.unwrap_or(1).max(1);
    let reps = reps.unwrap_or(30).max(1);
    let stop = CancellationToken::new();
    if args.serve_model {
        let (url, server) = start_server(turns, calls, stop.clone()).await?;
        crate::print_line(
            &json!({"bench": "agent", "model_url": url, "turns": turns, "calls": calls})
                .to_string(),
        );
        // Serve until whoever started this closes our stdin (or is gone).
        let mut stdin = tokio::io::stdin();
        let mut sink = tokio::io::sink();
        let _ = tokio::io::copy(&mut stdin, &mut sink).await;
        stop.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(5), server).await;
        return Ok(());
    }
    let (url, server) = match args.model_url {
        Some(url) => (url.trim_end_matches('/').to_string(), None),
        None => {
            let (url, server) = start_server(turns, calls, stop.clone()).await?;
            (url, Some(server))
        }
    };
    let result = measure(&url, turns, calls, reps, max_concurrent).await;
    stop.cancel();
    if let Some(server) = server {
        let _ = tokio::time::timeout(Duration::from_secs(5), server).await;
    }
    let line = result?;
    crate::print_line(&line.to_string());
    if line["answered"] != json!(true) {
        return Err(CliError::failed(format!(
            "not every tool call of every run was answered right: {}",
            line["problem"]
        )));
    }
    Ok(())
}

async fn measure(
    url: &str,
    turns: usize,
    calls: usize,
    reps: usize,
    max_concurrent: Option<usize>,
) -> Result<Value, CliError> {
    let temp = TempDir::new()?;
    let common = Common {
        provider: Provider::OpenAi,
        workdir: Some(temp.0.join("work")),
        store: Some("memory:".to_string()),
        config: None,
        approve: Approve::All,
        max_concurrent,
        client_tools: None,
        exclude: Vec::new(),
    };
    // As `agent` builds it, minus the machine's config file and its MCP servers.
    let (engine, store, _legs) =
        setup::build(&common, None, &Config::default(), Arc::new(ApproveAll))?;
    let engine = Arc::new(engine);
    let mut model = ModelConfig::new(ProviderKind::OpenAi, MODEL);
    model.base_url = Some(url.to_string());
    model.key = Some("none".to_string());
    // A failed request is a failed benchmark, not a retried one.
    model.max_attempts = Some(1);
    let client = ModelClient::new(model, ApiKey::new("", KeySource::None))
        .map_err(|e| CliError::failed(e.to_string()))?;
    let agent = Agent::new(engine.clone(), store, Arc::new(client), MODEL);

    // The model's own time: the HTTP library the model client uses (reqwest, one keep-alive
    // connection), a small request, and the first tool-call turn's reply read to its end.
    let http = dispatch_tools::web::client::builder()
        .no_proxy()
        .build()
        .map_err(|e| CliError::failed(format!("cannot build the HTTP client: {e}")))?;
    let bare = json!({"model": MODEL, "stream": true,
        "messages": [{"role": "user", "content": "ping"}],
        "tools": [{"type": "function", "function": {"name": "run_tool"}}]})
    .to_string();
    let completions = format!("{url}/chat/completions");

    let requests = turns + 1;
    let expected = format!("answered {0}/{0}", turns * calls);
    let warmup = (reps / 10).max(1);
    let mut turn_us = Vec::with_capacity(reps);
    let mut rtt_us = Vec::with_capacity(reps * requests);
    let mut problem: Option<String> = None;
    for rep in 0..warmup + reps {
        for _ in 0..requests {
            let started = Instant::now();
            let response = http
                .post(&completions)
                .header("content-type", "application/json")
                .body(bare.clone())
                .send()
                .await
                .map_err(|e| CliError::failed(format!("the model server at {url}: {e}")))?;
            let body = response
                .bytes()
                .await
                .map_err(|e| CliError::failed(format!("the model server at {url}: {e}")))?;
            let elapsed = started.elapsed();
            std::hint::black_box(body);
            if rep >= warmup {
                rtt_us.push(elapsed.as_secs_f64() * 1e6);
            }
        }
        // A session of its own per run, calculate's schema already shown (not measured).
        let session = format!("bench-agent-{rep}");
        let mark = RoundRequest::new(
            session.clone(),
            "mark",
            Provider::OpenAi,
            vec![RawCall::new(
                "m",
                "find_tools",
                json!({"query": "select:calculate"}).to_string(),
            )],
        );
        engine
            .round(mark)
            .await
            .map_err(|e| CliError::failed(e.to_string()))?;
        let mut request = AgentRequest::new(session, "Add the numbers the tools are asked for.");
        request.max_rounds = u32::try_from(requests).unwrap_or(u32::MAX);
        request.allow_all = true;
        let started = Instant::now();
        let outcome = agent.run(request).await;
        let elapsed = started.elapsed();
        let outcome = outcome.map_err(|e| CliError::failed(format!("run {rep}: {e}")))?;
        let answered = matches!(&outcome.end, AgentEnd::Answer { text } if *text == expected)
            && outcome.rounds as usize == turns;
        if !answered && problem.is_none() {
            problem = Some(format!(
                "run {rep} ended {:?} after {} rounds; expected {expected:?} after {turns}",
                outcome.end, outcome.rounds
            ));
        }
        if rep >= warmup {
            turn_us.push(elapsed.as_secs_f64() * 1e6 / requests as f64);
        }
    }
    let turn = median(&mut turn_us);
    let rtt = median(&mut rtt_us);
    Ok(json!({
        "bench": "agent",
        "peer": "tooldispatch",
        "turns": turns,
        "calls": calls,
        "reps": reps,
        "model_requests": requests,
        "turn_us_median": round2(turn),
        "model_rtt_us_median": round2(rtt),
        "overhead_us_median": round2(turn - rtt),
        "answered": problem.is_none(),
        "problem": problem,
    }))
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(0.0)
}

fn round2(v: f64) -> f64 {
    (v * 100.0).round() / 100.0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(id: &str, content: Value) -> Message {
        Message {
            role: "tool".into(),
            tool_call_id: Some(id.into()),
            content: Some(content),
        }
    }

    #[test]
    fn a_result_counts_only_with_its_own_expression_and_value() {
        assert!(result_is_right(&tool(
            "call_2_1",
            json!("[calculate] {\"2+1\":\"3\"}")
        )));
        assert!(result_is_right(&tool(
            "call_2_1",
            json!([{"type": "text", "text": "{\"2+1\":\"3\"}"}])
        )));
        assert!(!result_is_right(&tool(
            "call_2_1",
            json!("{\"2+1\":\"4\"}")
        )));
        assert!(!result_is_right(&tool(
            "call_1_2",
            json!("{\"2+1\":\"3\"}")
        )));
        assert!(!result_is_right(&tool("c1", json!("{\"2+1\":\"3\"}"))));
    }

    #[test]
    fn the_stream_and_the_completion_carry_the_same_calls() {
        let script = Script::new(2, 2);
        let [(sse, plain), _] = &script.tool_turns[1];
        let plain: Value = serde_json::from_slice(plain).unwrap();
        let calls = &plain["choices"][0]["message"]["tool_calls"];
        assert_eq!(calls[1]["id"], "call_1_1");
        assert_eq!(
            calls[1]["function"]["arguments"],
            json!({"name": "calculate", "args": {"expressions": ["1+1"]}}).to_string()
        );
        let sse = String::from_utf8(sse.to_vec()).unwrap();
        assert!(sse.contains("\"id\":\"call_1_1\""), "{sse}");
        assert!(sse.ends_with("data: [DONE]\n\n"), "{sse}");
    }
}
