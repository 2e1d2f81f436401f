//! `background_subagents`: start a subtask that runs on after the call, then list, read or
//! stop it. A leg is the same as a `subagents` leg (its own session, no agent tools, the
//! parent's exclusions); only its lifetime differs. Its state and result live in the store
//! ([`AgentStore`]), written when it starts, at most once a second while its progress changes,
//! and when it ends, so a restarted daemon still answers for it: a leg that was running under
//! a process that is gone reads `interrupted` (the store's [`LegRecord::seen_by`]).
//!
//! At most [`MAX_BACKGROUND_LEGS`] legs of one parent session run at once, counted apart from
//! subagents' three places: a background leg waits on nobody and nobody waits on it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use dispatch_engine::{Effect, ToolContext, ToolError, ToolOutput, ToolSpec};
use dispatch_store::{AgentStore, LegRecord, LegStatus};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::{
    LegChoice, LegOutcome, LegRunner, Legs, Reasoning, leg_header, leg_request, short_hash,
    stopped_text,
};
use crate::files::file_history::format_ms;
use crate::{BuiltinTool, Stores};

/// Background legs of one parent session that run at once.
pub const MAX_BACKGROUND_LEGS: usize = 16;

/// How often a running leg's changed progress line is written to the store.
const PROGRESS_EVERY: Duration = Duration::from_secs(1);

/// How long mode=stop waits for the leg to wind down and record that it stopped.
const STOP_WAIT: Duration = Duration::from_secs(10);

/// The task as list shows it.
const TASK_HEAD_CHARS: usize = 80;

#[derive(Deserialize, JsonSchema, Clone, Copy, PartialEq, Eq, Debug)]
#[serde(rename_all = "snake_case")]
enum Mode {
    Start,
    List,
    Read,
    Stop,
}

/// Start a subtask in the background; list, read or stop the ones this session started.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BackgroundSubagentsArgs {
    /// start: run `task` in the background and return its id at once; list: this session's
    /// background subagents; read: one's progress, and its result once done; stop: cancel one.
    /// Default: start with a task, read with an id, else list.
    mode: Option<Mode>,
    /// (start) The subtask, written to stand on its own: the subagent sees nothing of this
    /// conversation.
    #[schemars(length(min = 1, max = 100000))]
    task: Option<String>,
    /// (read, stop) The id start returned.
    #[schemars(length(min = 1, max = 64))]
    id: Option<String>,
    /// (start) A name for the subagent's session; a later subagent with the same name
    /// continues that conversation. Without it (and without session_id) the session is new.
    #[schemars(length(min = 1, max = 64), regex(pattern = r"^[A-Za-z0-9._-]+$"))]
    name: Option<String>,
    /// (start) Continue this exact session (as shown in a result's header).
    session_id: Option<String>,
    /// (start) A model from subagents mode=list (default: the first configured).
    model: Option<String>,
    /// (start) How hard a reasoning model thinks (default: the model's setting).
    reasoning: Option<Reasoning>,
    /// (start) Replaces the subagent's default system prompt.
    system_prompt: Option<String>,
    /// (start) Tools the subagent may not use, on top of this session's own exclusions.
    exclude_tools: Option<Vec<String>>,
}

/// A leg running in this process.
struct Live {
    cancel: CancellationToken,
    /// The newest progress line, fresher than the store's copy.
    progress: Arc<Mutex<Option<String>>>,
    /// Turns true once the leg's final record is written.
    finished: watch::Receiver<bool>,
}

/// Running legs of this process by (parent session, leg id).
type LiveLegs = Arc<Mutex<HashMap<(String, String), Live>>>;

pub struct BackgroundSubagents {
    legs: Legs,
    store: Option<Arc<dyn AgentStore>>,
    /// This process, as the owner of the legs it starts.
    owner: String,
    live: LiveLegs,
    /// Makes ids started in the same instant differ.
    counter: AtomicU64,
}

/// An id for this process, new at every start: legs recorded `Running` under another id were
/// started by a process that is gone (or another daemon sharing the store).
pub fn process_owner() -> &'static str {
    static OWNER: OnceLock<String> = OnceLock::new();
    OWNER.get_or_init(|| {
        let seed = format!(
            "{}|{:?}|{:p}",
            std::process::id(),
            SystemTime::now(),
            &OWNER
        );
        format!("p{}-{}", std::process::id(), short_hash(&seed))
    })
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

impl BackgroundSubagents {
    pub fn new(legs: Legs, stores: &Stores) -> Self {
        BackgroundSubagents {
            legs,
            store: stores.agents.clone(),
            owner: process_owner().to_string(),
            live: Arc::default(),
            counter: AtomicU64::new(0),
        }
    }

    fn store(&self) -> Result<Arc<dyn AgentStore>, ToolError> {
        self.store.clone().ok_or_else(|| {
            ToolError::failed(
                "background subagents need a store to keep their state in, and this dispatcher has none; use subagents instead (it waits for the answer)",
            )
        })
    }

    /// The session's legs as this process sees them (a leg of a gone process: interrupted).
    async fn legs_of(&self, parent: &str) -> Result<Vec<LegRecord>, ToolError> {
        let legs = self.store()?.legs(parent).await.map_err(|e| {
            ToolError::failed(format!("could not read the background subagents: {e}"))
        })?;
        let live = self.live.lock().unwrap_or_else(|e| e.into_inner());
        Ok(legs
            .into_iter()
            .map(|leg| {
                let mut leg = leg.seen_by(&self.owner);
                if let Some(running) = live.get(&(leg.parent.clone(), leg.id.clone())) {
                    let fresh = running
                        .progress
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .clone();
                    if fresh.is_some() {
                        leg.progress = fresh;
                    }
                }
                leg
            })
            .collect())
    }

    async fn leg(
        &self,
        parent: &str,
        id: Option<&str>,
        mode: &str,
    ) -> Result<LegRecord, ToolError> {
        let Some(id) = id else {
            return Err(ToolError::failed(format!(
                "mode={mode} needs the id that start returned; mode=list shows this session's ids"
            )));
        };
        let legs = self.legs_of(parent).await?;
        let known: Vec<&str> = legs.iter().map(|l| l.id.as_str()).collect();
        match legs.iter().find(|l| l.id == id) {
            Some(leg) => Ok(leg.clone()),
            None if known.is_empty() => Err(ToolError::failed(format!(
                "no background subagent {id:?}: this session has started none"
            ))),
            None => Err(ToolError::failed(format!(
                "no background subagent {id:?} in this session; its ids are: {}",
                known.join(", ")
            ))),
        }
    }

    async fn start(
        &self,
        cx: &ToolContext,
        args: &BackgroundSubagentsArgs,
    ) -> Result<ToolOutput, ToolError> {
        let runner = self.legs.runner()?;
        let store = self.store()?;
        let Some(task) = args.task.clone().filter(|t| !t.trim().is_empty()) else {
            return Err(ToolError::failed(
                "mode=start needs a task: the whole subtask, written to stand on its own",
            ));
        };
        let models = runner.models();
        let model = match &args.model {
            None => models.first().cloned().unwrap_or_default(),
            Some(wanted) if models.contains(wanted) => wanted.clone(),
            Some(wanted) => {
                return Err(ToolError::failed(format!(
                    "no model named {wanted:?}; use one of: {}",
                    models.join(", ")
                )));
            }
        };
        let parent = cx.session_id.to_string();
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        let id = format!(
            "bg-{}",
            &short_hash(&format!("{}|{parent}|{}|{n}", self.owner, cx.call_id))[..8]
        );
        let choice = LegChoice {
            name: args.name.as_deref(),
            session_id: args.session_id.as_deref(),
            model: Some(&model),
            reasoning: args.reasoning,
            system_prompt: args.system_prompt.as_deref(),
            exclude_tools: args.exclude_tools.as_deref(),
        };
        // Not the call's token: the leg outlives the call that started it.
        let cancel = CancellationToken::new();
        let mut leg = leg_request(cx, task.clone(), &choice, &id, cancel.clone())?;
        let progress: Arc<Mutex<Option<String>>> = Arc::default();
        let (finished_tx, finished) = watch::channel(false);
        let key = (parent.clone(), id.clone());
        {
            // Counted and claimed under one lock, so parallel starts cannot pass the cap together.
            let mut live = self.live.lock().unwrap_or_else(|e| e.into_inner());
            let running: Vec<&str> = live
                .keys()
                .filter(|(p, _)| *p == parent)
                .map(|(_, id)| id.as_str())
                .collect();
            if running.len() >= MAX_BACKGROUND_LEGS {
                return Err(ToolError::failed(format!(
                    "this session already has {MAX_BACKGROUND_LEGS} background subagents running, the most it may; read them (mode=read) and wait for one to finish, or stop one you no longer need (mode=stop, id=...), then start this one again. Running: {}",
                    running.join(", ")
                )));
            }
            live.insert(
                key.clone(),
                Live {
                    cancel: cancel.clone(),
                    progress: progress.clone(),
                    finished,
                },
            );
        }
        let mut record = LegRecord {
            parent: parent.clone(),
            id: id.clone(),
            session: leg.session.clone(),
            task,
            model: model.clone(),
            status: LegStatus::Running,
            progress: Some("starting".to_string()),
            result: None,
            input_tokens: 0,
            output_tokens: 0,
            started_ms: now_ms(),
            ended_ms: None,
            owner: self.owner.clone(),
        };
        if let Err(e) = store.put_leg(&record).await {
            self.live
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&key);
            return Err(ToolError::failed(format!(
                "could not record the background subagent, so it was not started: {e}"
            )));
        }
        let seen = progress.clone();
        leg.progress = Some(Arc::new(move |line: String| {
            *seen.lock().unwrap_or_else(|e| e.into_inner()) = Some(line);
        }));
        let session = leg.session.clone();
        let live = self.live.clone();
        tokio::spawn(async move {
            let outcome = run_recorded(runner, leg, store.as_ref(), &mut record, &progress).await;
            finish(&mut record, outcome, cancel.is_cancelled());
            // A store that fails now leaves the leg `Running`, which the next process reads
            // as interrupted: reported, never lost.
            let _ = store.put_leg(&record).await;
            live.lock().unwrap_or_else(|e| e.into_inner()).remove(&key);
            let _ = finished_tx.send(true);
        });
        Ok(ToolOutput::text(format!(
            "started background subagent {id} (model {model}, session={session}); it runs on after this call. Read its progress and, once done, its answer with background_subagents(mode=\"read\", id=\"{id}\"); stop it with mode=\"stop\"; mode=\"list\" shows all of this session's."
        )))
    }

    async fn stop(&self, parent: &str, id: Option<&str>) -> Result<ToolOutput, ToolError> {
        let leg = self.leg(parent, id, "stop").await?;
        let running = {
            let live = self.live.lock().unwrap_or_else(|e| e.into_inner());
            live.get(&(leg.parent.clone(), leg.id.clone()))
                .map(|l| (l.cancel.clone(), l.finished.clone()))
        };
        let Some((cancel, mut finished)) = running else {
            return Ok(ToolOutput::text(format!(
                "background subagent {} is not running ({}); nothing to stop. mode=read shows what it left.",
                leg.id,
                status_word(leg.status)
            )));
        };
        cancel.cancel();
        let ended = tokio::time::timeout(STOP_WAIT, finished.wait_for(|done| *done))
            .await
            .is_ok_and(|r| r.is_ok());
        if !ended {
            return Ok(ToolOutput::text(format!(
                "asked background subagent {} to stop; it has not wound down yet. mode=read shows when it has.",
                leg.id
            )));
        }
        let leg = self.leg(parent, Some(&leg.id), "stop").await?;
        Ok(ToolOutput::text(read_text(&leg)))
    }
}

/// Run the leg, writing its changed progress line to the store at most once a
/// [`PROGRESS_EVERY`]. A panic in the leg is its failure, not a leg left `Running`.
async fn run_recorded(
    runner: Arc<dyn LegRunner>,
    leg: super::LegRequest,
    store: &dyn AgentStore,
    record: &mut LegRecord,
    progress: &Mutex<Option<String>>,
) -> Result<LegOutcome, String> {
    let run = tokio::spawn(async move { runner.run_leg(leg).await });
    tokio::pin!(run);
    let mut tick = tokio::time::interval(PROGRESS_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            joined = &mut run => {
                record.progress = progress.lock().unwrap_or_else(|e| e.into_inner()).clone().or(record.progress.take());
                return joined.unwrap_or_else(|e| Err(format!("the subagent crashed: {e}")));
            }
            _ = tick.tick() => {
                let now = progress.lock().unwrap_or_else(|e| e.into_inner()).clone();
                if now.is_some() && now != record.progress {
                    record.progress = now;
                    let _ = store.put_leg(record).await;
                }
            }
        }
    }
}

/// The leg's final record from how it ended.
fn finish(record: &mut LegRecord, outcome: Result<LegOutcome, String>, stopped: bool) {
    record.ended_ms = Some(now_ms());
    match outcome {
        Ok(out) => {
            record.model = out.model;
            record.input_tokens = out.input_tokens;
            record.output_tokens = out.output_tokens;
            (record.status, record.result) = match (stopped, out.stopped) {
                (true, _) => (LegStatus::Stopped, Some(out.answer)),
                (false, None) => (LegStatus::Done, Some(out.answer)),
                (false, Some(why)) => (LegStatus::Failed, Some(stopped_text(&why, &out.answer))),
            };
        }
        Err(_) if stopped => {
            record.status = LegStatus::Stopped;
            record.result = None;
        }
        Err(e) => {
            record.status = LegStatus::Failed;
            record.result = Some(format!("the subagent failed: {e}"));
        }
    }
}

fn status_word(status: LegStatus) -> &'static str {
    match status {
        LegStatus::Running => "running",
        LegStatus::Done => "done",
        LegStatus::Failed => "failed",
        LegStatus::Stopped => "stopped",
        LegStatus::Interrupted => "interrupted",
    }
}

/// What mode=read says about a leg.
fn read_text(leg: &LegRecord) -> String {
    let mut text = format!(
        "background subagent {} · status: {} · model {} · session={} · started {} UTC",
        leg.id,
        status_word(leg.status),
        leg.model,
        leg.session,
        format_ms(leg.started_ms)
    );
    if let Some(ended) = leg.ended_ms {
        text.push_str(&format!(" · ended {} UTC", format_ms(ended)));
    }
    let header = leg_header(
        &leg.model,
        &leg.session,
        leg.input_tokens,
        leg.output_tokens,
    );
    let result = leg.result.as_deref().unwrap_or_default();
    match leg.status {
        LegStatus::Running => {
            if let Some(progress) = &leg.progress {
                text.push_str(&format!("\nprogress: {progress}"));
            }
            text.push_str("\nIt is still working; read it again later, or go on with other work meanwhile.");
        }
        LegStatus::Done => text.push_str(&format!("\n{header}\n{result}")),
        LegStatus::Failed => text.push_str(&format!(
            "\n{header}\n{result}\nStart it again (perhaps with a clearer task or another model), or do the subtask yourself."
        )),
        LegStatus::Stopped => {
            text.push_str(&format!("\n{header}\nIt was stopped before it finished."));
            if !result.is_empty() {
                text.push_str(&format!("\nwhat it had: {result}"));
            }
        }
        LegStatus::Interrupted => {
            if let Some(progress) = &leg.progress {
                text.push_str(&format!("\nlast progress: {progress}"));
            }
            text.push_str("\nThe process running it ended (a crash or a restart) before it finished, and it will not resume. Start it again if you still need its answer.");
        }
    }
    text
}

#[async_trait]
impl BuiltinTool for BackgroundSubagents {
    const NAME: &'static str = "background_subagents";
    const DESCRIPTION: &'static str = "Start a subtask in the background: a subagent (another model run in a session of its own, with the tools but none of this conversation) that keeps working after this call returns. mode=start returns an id at once; mode=read shows its progress and, when done, its answer; mode=list shows this session's background subagents; mode=stop cancels one. At most 16 run at once per session. Write the task so it stands on its own. Use subagents instead when you need the answer before going on.";
    type Args = BackgroundSubagentsArgs;

    fn declare(&self, spec: ToolSpec) -> ToolSpec {
        // It runs without asking, as subagents does: each of the leg's own calls passes the
        // gate. Read and list must look again every time.
        spec.read_only()
            .concurrent()
            .no_dedupe()
            .effect(Effect::Mutates)
    }

    fn effect(&self, args: &Value) -> Option<Effect> {
        // Reading and listing change nothing; a start or a stop does (the leg acts).
        let mode = args.get("mode").and_then(Value::as_str);
        let reads = match mode {
            Some(mode) => mode == "read" || mode == "list",
            None => args.get("task").is_none(),
        };
        reads.then_some(Effect::Observes)
    }

    async fn run(
        &self,
        cx: ToolContext,
        args: BackgroundSubagentsArgs,
    ) -> Result<ToolOutput, ToolError> {
        let mode = args.mode.unwrap_or(match (&args.task, &args.id) {
            (Some(_), _) => Mode::Start,
            (None, Some(_)) => Mode::Read,
            (None, None) => Mode::List,
        });
        let parent = cx.session_id.to_string();
        match mode {
            Mode::Start => self.start(&cx, &args).await,
            Mode::Read => {
                let leg = self.leg(&parent, args.id.as_deref(), "read").await?;
                Ok(ToolOutput::text(read_text(&leg)))
            }
            Mode::Stop => self.stop(&parent, args.id.as_deref()).await,
            Mode::List => {
                let legs = self.legs_of(&parent).await?;
                let running = legs
                    .iter()
                    .filter(|l| l.status == LegStatus::Running)
                    .count();
                let rows: Vec<_> = legs
                    .iter()
                    .map(|l| {
                        let head: String = l.task.chars().take(TASK_HEAD_CHARS).collect();
                        let head = if head.len() < l.task.len() {
                            format!("{head}…")
                        } else {
                            head
                        };
                        json!({
                            "id": l.id,
                            "status": status_word(l.status),
                            "task": head,
                            "model": l.model,
                            "started": format!("{} UTC", format_ms(l.started_ms)),
                            "ended": l.ended_ms.map(|ms| format!("{} UTC", format_ms(ms))),
                        })
                    })
                    .collect();
                Ok(ToolOutput::text(
                    json!({
                        "background_subagents": rows,
                        "running": running,
                        "max_running": MAX_BACKGROUND_LEGS,
                    })
                    .to_string(),
                ))
            }
        }
    }
}

#[cfg(test)]
#[path = "background_tests.rs"]
mod tests;
