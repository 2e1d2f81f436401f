//! The REST endpoints (DESIGN §5): sessions, tools, rounds, answers, confirmations, health.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, JsonRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use dispatch_engine::{
    AnswerRequest, ClientTool, ClientToolProblem, ClientTools, ConfirmReply, EngineError, Provider,
    RoundOutcome, RoundRequest,
};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::error::{ApiError, too_large};
use crate::hub::{CreateError, ReleaseError};
use crate::{Daemon, Limits};

/// Session ids name rows, keys and directories: a short, plain alphabet keeps them safe in all.
pub fn session_id(id: String) -> Result<String, ApiError> {
    match dispatch_engine::ids::session_id_problem(&id) {
        None => Ok(id),
        Some(problem) => Err(ApiError::bad_request("bad_session_id", problem)),
    }
}

fn provider(name: Option<&str>) -> Result<Provider, ApiError> {
    name.unwrap_or("openai")
        .parse::<Provider>()
        .map_err(|e| ApiError::bad_request("unknown_provider", e.to_string()))
}

/// The body as JSON text: `Content-Type: application/json` is required, which also keeps
/// browser pages of other origins from posting "simple" cross-site requests.
pub(crate) fn json_text(
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<String, ApiError> {
    let is_json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("application/json"));
    if !is_json {
        return Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            "send the body as JSON with the header `Content-Type: application/json`",
        ));
    }
    let body = body.map_err(|e| {
        if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
            too_large()
        } else {
            ApiError::bad_request(
                "bad_request",
                format!("cannot read the request body: {}", e.body_text()),
            )
        }
    })?;
    String::from_utf8(body.to_vec())
        .map_err(|_| ApiError::bad_request("bad_json", "the request body is not UTF-8 text"))
}

fn engine_error(e: EngineError) -> ApiError {
    match e {
        EngineError::Cancelled => ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "interrupted",
            "the daemon shut down before the round committed: nothing of it was recorded, and its mutating calls that had started are reported as interrupted by the session's next round",
        ),
        EngineError::NoSuchTask { .. } => ApiError::not_found("no_such_task", e.to_string()),
        EngineError::BadAnswer(_) => ApiError::bad_request("bad_answer", e.to_string()),
        EngineError::TooManyCalls { .. } => ApiError::bad_request("too_many_calls", e.to_string()),
        other => ApiError::internal(other.to_string()),
    }
}

pub async fn health() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

/// `GET /v1/version`: also the models an agent turn may name (none: no agent turns).
pub async fn version(State(daemon): State<Arc<Daemon>>) -> Json<Value> {
    let providers: Vec<&str> = Provider::ALL.iter().map(|p| p.as_str()).collect();
    let models = daemon.agent.get().map(|a| a.models()).unwrap_or_default();
    Json(json!({
        "name": "tooldispatch",
        "version": env!("CARGO_PKG_VERSION"),
        "providers": providers,
        "agent_models": models,
    }))
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct NewSession {
    id: Option<String>,
    #[serde(default)]
    client_tools: Vec<ClientTool>,
    #[serde(default)]
    exclude: Vec<String>,
}

fn generated_id() -> String {
    use std::io::Read;
    let mut bytes = [0u8; 8];
    let random = std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut bytes));
    if random.is_err() {
        // Unique within this process is all an id needs; the clock and a counter give that.
        static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        bytes = (crate::hub::now_ms() ^ n.rotate_left(40)).to_be_bytes();
    }
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("s-{hex}")
}

/// `POST /v1/sessions`
pub async fn create_session(
    State(daemon): State<Arc<Daemon>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let text = json_text(&headers, body)?;
    let spec: NewSession = if text.trim().is_empty() {
        NewSession::default()
    } else {
        serde_json::from_str(&text).map_err(|e| {
            ApiError::bad_request(
                "bad_json",
                format!("a new session is {{\"id\"?, \"client_tools\"?, \"exclude\"?}}: {e}"),
            )
        })?
    };
    let id = session_id(spec.id.unwrap_or_else(generated_id))?;
    // The caps first: compiling a large declaration is itself the cost they bound.
    let bytes = check_client_tool_caps(&daemon.limits, &spec.client_tools)?;
    // Checked and compiled once, here: every round of the session shares them.
    let client_tools = ClientTools::compile(spec.client_tools, &daemon.engine.registry())
        .map_err(|problems| bad_client_tools(&problems))?;
    let budget = daemon.limits.client_tools_budget;
    match daemon
        .hub
        .create(&id, client_tools, spec.exclude, bytes, budget)
    {
        Ok(info) => Ok((
            StatusCode::CREATED,
            Json(json!({"id": &*info.id, "created_ms": info.created_ms})),
        )
            .into_response()),
        Err(CreateError::Exists) => Err(ApiError::new(
            StatusCode::CONFLICT,
            "conflict",
            format!(
                "session {id} exists already; use it, or create one with another id (or none, to have one generated)"
            ),
        )),
        Err(CreateError::OverBudget { held, sessions }) => Err(ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "client_tools_budget_full",
            format!(
                "the daemon holds {} of client-tool declarations for {sessions} sessions, and this session's {} would pass its budget of {} ([server] client_tools_budget_mib in the config file); release sessions you are done with (DELETE /v1/sessions/{{id}}) and retry, or raise the budget and restart the daemon",
                size(held),
                size(bytes),
                size(budget)
            ),
        )),
    }
}

/// `1.5 MiB`, `12 KiB`, `300 bytes`.
fn size(bytes: usize) -> String {
    const KIB: usize = 1024;
    const MIB: usize = 1024 * 1024;
    if bytes >= MIB {
        format!("{}.{} MiB", bytes / MIB, bytes % MIB * 10 / MIB)
    } else if bytes >= KIB {
        format!("{} KiB", bytes.div_ceil(KIB))
    } else {
        format!("{bytes} bytes")
    }
}

/// Bytes `tools` take as declared: names, descriptions and schemas (as compact JSON).
pub fn client_tool_bytes(tools: &[ClientTool]) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    tools
        .iter()
        .map(|tool| {
            let mut schema = Count(0);
            // Writing a `Value` into a counter cannot fail.
            let _ = serde_json::to_writer(&mut schema, &tool.parameters);
            tool.name.len() + tool.description.len() + schema.0
        })
        .sum()
}

/// `400 client_tools_over_limit` when `tools` are more, or larger, than one session may
/// declare; else their size in bytes.
fn check_client_tool_caps(limits: &Limits, tools: &[ClientTool]) -> Result<usize, ApiError> {
    if tools.len() > limits.max_client_tools {
        return Err(ApiError::bad_request(
            "client_tools_over_limit",
            format!(
                "the session declares {} client tools; this daemon takes at most {} per session ([server] max_client_tools in the config file, up to {}); declare fewer (only those the task needs), or raise the limit and restart the daemon",
                tools.len(),
                limits.max_client_tools,
                dispatch_engine::client::MAX_CLIENT_TOOLS
            ),
        ));
    }
    let bytes = client_tool_bytes(tools);
    if bytes > limits.client_tool_bytes {
        return Err(ApiError::bad_request(
            "client_tools_over_limit",
            format!(
                "the session's client tools take {} (names, descriptions and schemas as JSON); this daemon takes at most {} per session ([server] client_tools_kib_per_session in the config file); shorten descriptions and schemas or declare fewer tools, or raise the limit and restart the daemon",
                size(bytes),
                size(limits.client_tool_bytes)
            ),
        ));
    }
    Ok(bytes)
}

/// `DELETE /v1/sessions/{id}`: the daemon forgets the session's declarations (client tools,
/// exclusions) and gives their bytes back to the budget; the session's state in the store
/// (its rounds, events, pending tasks) stays, and a later round or create starts it afresh.
pub async fn release_session(
    State(daemon): State<Arc<Daemon>>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let id = session_id(id)?;
    match daemon.hub.release(&id) {
        Ok(bytes) => Ok(Json(
            json!({"id": id, "released": true, "client_tool_bytes": bytes}),
        )),
        Err(ReleaseError::Unknown) => Err(ApiError::not_found(
            "no_such_session",
            format!(
                "the daemon holds no session {id} (not used since it started, or released already); nothing to release"
            ),
        )),
        Err(ReleaseError::InUse) => Err(ApiError::new(
            StatusCode::CONFLICT,
            "session_busy",
            format!(
                "a round of session {id} is queued or running; release the session after it ends"
            ),
        )),
    }
}

/// Most declaration problems spelled out in one refusal; the rest are counted.
const PROBLEMS_SHOWN: usize = 10;

/// `400 bad_client_tools`: every problem (up to [`PROBLEMS_SHOWN`]), each naming the tool,
/// its position in `client_tools` and the field.
fn bad_client_tools(problems: &[ClientToolProblem]) -> ApiError {
    let mut text = problems
        .iter()
        .take(PROBLEMS_SHOWN)
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ");
    if problems.len() > PROBLEMS_SHOWN {
        text.push_str(&format!("; and {} more", problems.len() - PROBLEMS_SHOWN));
    }
    ApiError::bad_request(
        "bad_client_tools",
        format!("the session's client_tools are refused: {text}"),
    )
}

/// `GET /v1/sessions`
pub async fn list_sessions(State(daemon): State<Arc<Daemon>>) -> Json<Value> {
    Json(json!({"sessions": daemon.hub.sessions()}))
}

#[derive(Deserialize)]
pub struct ProviderQuery {
    provider: Option<String>,
}

/// `GET /v1/sessions/{id}/tools?provider=`
pub async fn tools(
    State(daemon): State<Arc<Daemon>>,
    Path(id): Path<String>,
    query: Result<Query<ProviderQuery>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let id = session_id(id)?;
    let Query(query) = query?;
    let provider = provider(query.provider.as_deref())?;
    // Looking does not register the session: only a round, a watcher or a create does.
    let (clients, exclude) = daemon
        .hub
        .lookup(&id)
        .map(|info| (info.client_tools, info.exclude))
        .unwrap_or_default();
    let (tools, turn_context) = daemon
        .engine
        .tools(&id, provider, clients.declarations(), &exclude)
        .await
        .map_err(engine_error)?;
    Ok(Json(json!({"tools": tools, "turn_context": turn_context})))
}

#[derive(Deserialize)]
pub struct RoundQuery {
    provider: Option<String>,
    run: Option<String>,
    report: Option<String>,
}

fn wants_report(flag: Option<&str>) -> bool {
    matches!(flag, Some("1" | "true" | "yes"))
}

/// What a dispatch runs: a round, or the answer to a parked run.
enum Work {
    Round(RoundRequest),
    Answer(AnswerRequest),
}

/// Run one round (or answer) to its end in a task of its own — a client that hangs up does
/// not stop it half-way — and report it on the session's feed.
async fn dispatch(
    daemon: &Arc<Daemon>,
    session: String,
    run: String,
    work: Work,
) -> Result<RoundOutcome, ApiError> {
    run_work(daemon, session, run, work)
        .await?
        .map_err(engine_error)
}

/// A round of another front end (the MCP endpoint), run as the API runs one: in a task of
/// its own, on the session's feed (watchers and the console see it live), and stopped when
/// the daemon's shutdown grace ends. `req.live` still gets every event. The outer error is
/// the daemon's (shutting down, the task died); the inner one the engine's.
pub async fn run_round(
    daemon: &Arc<Daemon>,
    req: RoundRequest,
) -> Result<Result<RoundOutcome, EngineError>, ApiError> {
    let (session, run) = (req.session.clone(), req.run.clone());
    let cancel = req.cancel.clone();
    run_linked(daemon, session, run, cancel, Work::Round(req)).await
}

/// [`run_round`] for answers to a parked run.
pub async fn run_answer(
    daemon: &Arc<Daemon>,
    req: AnswerRequest,
) -> Result<Result<RoundOutcome, EngineError>, ApiError> {
    let session = req.request.session.clone();
    // The run the answer resumes, for the watchers' RoundStarted (as `answer` finds it).
    let run = daemon
        .engine
        .pending(&session)
        .await
        .ok()
        .and_then(|tasks| tasks.into_iter().find(|t| t.task_hash == req.task))
        .map(|t| t.run)
        .unwrap_or_default();
    let cancel = req.request.cancel.clone();
    run_linked(daemon, session, run, cancel, Work::Answer(req)).await
}

/// Run `work`, cancelled by `cancel` or by the end of the daemon's shutdown grace.
async fn run_linked(
    daemon: &Arc<Daemon>,
    session: String,
    run: String,
    cancel: tokio_util::sync::CancellationToken,
    work: Work,
) -> Result<Result<RoundOutcome, EngineError>, ApiError> {
    let stop = daemon.stop_rounds.clone();
    let link = tokio::spawn(async move {
        tokio::select! {
            () = stop.cancelled() => cancel.cancel(),
            () = cancel.cancelled() => {}
        }
    });
    let outcome = run_work(daemon, session, run, work).await;
    link.abort();
    outcome
}

/// Sends each event to both sinks: the session's feed and the caller's own.
struct Tee(
    Arc<dyn dispatch_engine::EventSink>,
    Arc<dyn dispatch_engine::EventSink>,
);

impl dispatch_engine::EventSink for Tee {
    fn send(&self, event: &Arc<dispatch_engine::Event>) {
        self.0.send(event);
        self.1.send(event);
    }
}

async fn run_work(
    daemon: &Arc<Daemon>,
    session: String,
    run: String,
    work: Work,
) -> Result<Result<RoundOutcome, EngineError>, ApiError> {
    if daemon.hub.closing() {
        return Err(ApiError::shutting_down());
    }
    let daemon = daemon.clone();
    let task = tokio::spawn(async move {
        let _keep = daemon.hub.keep_session(&session);
        // One lock for the whole round: the engine's hold on the session also covers the
        // feed's start and `Finished` marker, so markers follow commit order and the rounds
        // of a session never interleave on its feed.
        let held = daemon.engine.hold_session(&session).await;
        let feed = Arc::new(daemon.hub.start_round(&session, &run));
        let live: Arc<dyn dispatch_engine::EventSink> = feed.clone();
        let with_own = |own: Option<Arc<dyn dispatch_engine::EventSink>>| match own {
            Some(own) => Arc::new(Tee(live.clone(), own)) as Arc<dyn dispatch_engine::EventSink>,
            None => live.clone(),
        };
        let outcome = match work {
            Work::Round(mut req) => {
                req.live = Some(with_own(req.live.take()));
                held.round(req).await
            }
            Work::Answer(mut req) => {
                req.request.live = Some(with_own(req.request.live.take()));
                held.answer(req).await
            }
        };
        let committed = outcome.as_ref().ok().map(|o| (o.run.as_str(), o.round));
        // Where the round's events end in the session's log, as the commit numbered them.
        let last_seq = outcome.as_ref().ok().map(|o| {
            o.event_seqs
                .clone()
                .last()
                .unwrap_or_else(|| daemon.hub.last_seq(&session))
        });
        daemon.hub.finish_round(&feed, committed, last_seq);
        outcome
    });
    task.await.map_err(|e| {
        ApiError::internal(format!(
            "the round stopped unexpectedly ({e}); its results were not committed — retry the round"
        ))
    })
}

fn respond(outcome: &RoundOutcome, provider: Provider, report: bool) -> Response {
    let mut response = if report {
        // Written straight into the body: no JSON tree of the whole report in between.
        let mut body = Vec::new();
        match outcome.write_report(&mut body) {
            Ok(()) => (
                [(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("application/json"),
                )],
                body,
            )
                .into_response(),
            Err(e) => {
                ApiError::internal(format!("cannot write the round report: {e}")).into_response()
            }
        }
    } else {
        Json(Value::Array(outcome.render(provider))).into_response()
    };
    let headers = response.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&outcome.round.to_string()) {
        headers.insert("x-tooldispatch-round", v);
    }
    if let Some(v) = outcome
        .pending
        .as_ref()
        .and_then(|p| HeaderValue::from_str(&p.task_hash).ok())
    {
        headers.insert("x-tooldispatch-pending", v);
    }
    response
}

/// `POST /v1/sessions/{id}/rounds?provider=&run=&report=`
pub async fn round(
    State(daemon): State<Arc<Daemon>>,
    Path(id): Path<String>,
    query: Result<Query<RoundQuery>, QueryRejection>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let id = session_id(id)?;
    let Query(query) = query?;
    let provider = provider(query.provider.as_deref())?;
    let run = query.run.unwrap_or_else(|| "default".to_string());
    if let Some(problem) = dispatch_engine::ids::run_id_problem(&run) {
        return Err(ApiError::bad_request("bad_request", problem));
    }
    let text = json_text(&headers, body)?;
    let calls = provider.format().parse_reply(&text).map_err(|e| {
        ApiError::bad_request(
            "bad_reply",
            format!("cannot read the body as the model's reply (provider {provider}): {e}"),
        )
    })?;
    // Refused before the session is registered or its feed opened: nothing of it is seen.
    daemon
        .engine
        .check_round_size(calls.len())
        .map_err(engine_error)?;
    // The model answered without tools: nothing to run, and the session is not registered.
    if calls.is_empty() {
        let outcome = RoundOutcome::no_calls(id, run);
        return Ok(respond(
            &outcome,
            provider,
            wants_report(query.report.as_deref()),
        ));
    }
    let info = daemon.hub.session(&id);
    let mut req = RoundRequest::new(id.clone(), run.clone(), provider, calls);
    req.client_tools = info.client_tools.clone();
    req.exclude = (*info.exclude).clone();
    req.cancel = daemon.stop_rounds.child_token();
    let outcome = dispatch(&daemon, id, run, Work::Round(req)).await?;
    Ok(respond(
        &outcome,
        provider,
        wants_report(query.report.as_deref()),
    ))
}

/// `GET /v1/sessions/{id}/pending`
pub async fn pending(
    State(daemon): State<Arc<Daemon>>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let id = session_id(id)?;
    let tasks = daemon.engine.pending(&id).await.map_err(engine_error)?;
    let tasks: Vec<Value> = tasks
        .iter()
        .map(|t| {
            json!({"task": t.task_hash, "run": t.run, "tool": t.tool,
                   "tool_call_id": t.tool_call_id, "questions": t.questions})
        })
        .collect();
    Ok(Json(json!({"tasks": tasks})))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Answers {
    task: String,
    answers: Vec<String>,
}

/// `POST /v1/sessions/{id}/answers?provider=&report=`
pub async fn answer(
    State(daemon): State<Arc<Daemon>>,
    Path(id): Path<String>,
    query: Result<Query<RoundQuery>, QueryRejection>,
    body: Result<Json<Answers>, JsonRejection>,
) -> Result<Response, ApiError> {
    let id = session_id(id)?;
    let Query(query) = query?;
    let provider = provider(query.provider.as_deref())?;
    let Json(answers) = body?;
    // The run the answer resumes, for the watchers' RoundStarted (the engine finds it again,
    // and says what waits when the task does not).
    let run = daemon
        .engine
        .pending(&id)
        .await
        .ok()
        .and_then(|tasks| tasks.into_iter().find(|t| t.task_hash == answers.task))
        .map(|t| t.run)
        .unwrap_or_default();
    let mut req = AnswerRequest::new(id.clone(), answers.task, answers.answers);
    req.request.provider = provider;
    req.request.cancel = daemon.stop_rounds.child_token();
    let outcome = dispatch(&daemon, id, run, Work::Answer(req)).await?;
    Ok(respond(
        &outcome,
        provider,
        wants_report(query.report.as_deref()),
    ))
}

/// `DELETE /v1/sessions/{id}/pending/{task}?provider=&report=`: the user cancels the task
/// instead of answering it. Like an answer, it resumes the run: the response is the asking
/// call's result, which tells the model the user cancelled (status `declined`).
pub async fn cancel_pending(
    State(daemon): State<Arc<Daemon>>,
    Path((id, task)): Path<(String, String)>,
    query: Result<Query<RoundQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let id = session_id(id)?;
    let Query(query) = query?;
    let provider = provider(query.provider.as_deref())?;
    let run = daemon
        .engine
        .pending(&id)
        .await
        .ok()
        .and_then(|tasks| tasks.into_iter().find(|t| t.task_hash == task))
        .map(|t| t.run)
        .unwrap_or_default();
    let mut req = AnswerRequest::cancel(id.clone(), task);
    req.request.provider = provider;
    req.request.cancel = daemon.stop_rounds.child_token();
    let outcome = dispatch(&daemon, id, run, Work::Answer(req)).await?;
    Ok(respond(
        &outcome,
        provider,
        wants_report(query.report.as_deref()),
    ))
}

#[derive(Deserialize)]
pub struct ConfirmationsQuery {
    session: Option<String>,
}

/// `GET /v1/confirmations?session=`
pub async fn confirmations(
    State(daemon): State<Arc<Daemon>>,
    query: Result<Query<ConfirmationsQuery>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(query) = query?;
    Ok(Json(
        json!({"confirmations": daemon.hub.confirmations(query.session.as_deref())}),
    ))
}

/// `POST /v1/confirmations/{id}`
pub async fn resolve_confirmation(
    State(daemon): State<Arc<Daemon>>,
    Path(id): Path<String>,
    body: Result<Json<ConfirmReply>, JsonRejection>,
) -> Result<Json<Value>, ApiError> {
    let Json(reply) = body?;
    let approve = reply.approve;
    if daemon.hub.resolve(&id, reply) {
        Ok(Json(json!({"id": id, "approve": approve})))
    } else {
        Err(ApiError::not_found(
            "no_such_confirmation",
            format!(
                "no call waits for confirmation {id}: it was answered, it expired (5 minutes), or its round ended; GET /v1/confirmations lists the ones that wait"
            ),
        ))
    }
}

/// Any path no route takes.
pub async fn no_route() -> ApiError {
    ApiError::not_found(
        "not_found",
        "no such endpoint; the API is under /v1 (see the README's HTTP API section)",
    )
}
