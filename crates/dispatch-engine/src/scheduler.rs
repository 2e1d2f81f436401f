//! Pass 2 (DESIGN §3.12): a serial call is a barrier; consecutive concurrent calls run as a batch,
//! at most `MAX_CONCURRENT_TOOLS` at once, each on its own task. A panic, a timeout or a failure
//! ends that call alone; siblings are never cancelled.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use dispatch_store::{JournalEntry, StoreError};
use serde_json::Value;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::engine::Engine;
use crate::events::{EventKind, EventLog};
use crate::redact::ToolSecrets;
use crate::registry::Registry;
use crate::round::{RoundCx, go_duration, now_unix_ms};
use crate::slot::{Execution, Failure, Slot, SlotState};
use crate::spec::{Effect, ToolSpec};
use crate::status::Status;
use crate::tool::{Exclude, Progress, ProgressState, Tool, ToolContext, ToolError, ToolOutput};

/// Everything one call needs to run on its own task.
struct Job {
    index: usize,
    tool: Arc<dyn Tool>,
    args: Value,
    args_raw: Arc<str>,
    cx: ToolContext,
    log: Arc<EventLog>,
    round_cancel: CancellationToken,
    /// The user's answers to a parked call: the job finishes it (`Tool::answered`) instead
    /// of calling the tool.
    answers: Option<Vec<String>>,
}

impl RoundCx<'_> {
    /// Pass 2: run the ready slots.
    pub(crate) async fn execute(&mut self, slots: &mut [Slot]) {
        self.scheduler().execute(slots).await;
    }

    /// Finish the parked call in `slots[index]` with the user's answers.
    pub(crate) async fn execute_answered(
        &mut self,
        slots: &mut [Slot],
        index: usize,
        answers: Vec<String>,
    ) {
        self.scheduler()
            .execute_answered(slots, index, answers)
            .await;
    }

    fn scheduler(&mut self) -> Scheduler<'_> {
        Scheduler {
            engine: self.engine,
            registry: &self.registry,
            session: &self.req.session,
            run: &self.req.run,
            round: self.record.round,
            session_id: &self.session_id,
            run_id: &self.run_id,
            exclude: &self.exclude,
            log: &self.log,
            tool_secrets: self.tool_secrets.as_ref(),
            cancel: &self.req.cancel,
            journaled: &mut self.journaled,
        }
    }
}

/// What pass 2 needs from the round: who its calls run for and what they are handed, the
/// round's cancellation, and the journal that keeps a mutating call from running twice.
struct Scheduler<'a> {
    engine: &'a Engine,
    registry: &'a Arc<Registry>,
    session: &'a str,
    run: &'a str,
    round: u64,
    session_id: &'a Arc<str>,
    run_id: &'a Arc<str>,
    exclude: &'a Arc<Exclude>,
    log: &'a Arc<EventLog>,
    tool_secrets: Option<&'a ToolSecrets>,
    cancel: &'a CancellationToken,
    /// Journal entries opened for this round's mutating calls; its commit closes them.
    journaled: &'a mut Vec<String>,
}

impl Scheduler<'_> {
    async fn execute(&mut self, slots: &mut [Slot]) {
        let max = self.engine.config.max_concurrent.max(1);
        let mut batch: Vec<Job> = Vec::new();
        let cancel = self.cancel.clone();
        for index in 0..slots.len() {
            if cancel.is_cancelled() {
                return;
            }
            if !matches!(slots[index].state, SlotState::Ready { .. }) {
                continue;
            }
            let SlotState::Ready { tool, args } =
                std::mem::replace(&mut slots[index].state, SlotState::Running)
            else {
                continue;
            };
            let spec = tool.spec();
            let (fire_and_forget, concurrent) = (spec.fire_and_forget, spec.is_concurrent());
            // Exactly-once (DESIGN §4.7): a call that changes the world is journalled before it
            // runs; if that cannot be written, it does not run.
            if slots[index].effect == Effect::Mutates
                && let Err(e) = self.journal(&slots[index]).await
            {
                slots[index].state = SlotState::Settled {
                    status: Status::Failed,
                    text: format!(
                        "tool={} failed: not run: it changes things, and the call journal that keeps it from running twice could not be written ({e}); try again later",
                        slots[index].name
                    ),
                    images: Vec::new(),
                };
                continue;
            }
            let job = self.job(index, &slots[index], tool, args);
            if fire_and_forget {
                // Started, not awaited: its events arrive whenever it runs.
                tokio::spawn(run_job(job));
                let now = self.log.now_ms();
                slots[index].state = SlotState::Executed(Execution {
                    outcome: Ok(ToolOutput::text("ok")),
                    started_ms: now,
                    ended_ms: now,
                    batch: None,
                });
            } else if concurrent {
                batch.push(job);
            } else {
                // A barrier: everything before it has ended, nothing after it has started.
                run_batch(std::mem::take(&mut batch), max, &cancel, slots).await;
                if cancel.is_cancelled() {
                    return;
                }
                let (i, execution) = run_job(job).await;
                slots[i].state = SlotState::Executed(execution);
            }
        }
        run_batch(batch, max, &cancel, slots).await;
    }

    fn job(&self, index: usize, slot: &Slot, tool: Arc<dyn Tool>, args: Value) -> Job {
        let engine = self.engine;
        let cx = ToolContext {
            session_id: self.session_id.clone(),
            run_id: self.run_id.clone(),
            call_id: slot.id.clone(),
            workdir: engine.workdir.clone(),
            data_dir: engine.data_dir.clone(),
            registry: self.registry.clone(),
            exclude: Arc::<Exclude>::clone(self.exclude),
            progress: Progress {
                log: self.log.clone(),
                tool_id: slot.id.clone(),
                tool_name: slot.name.clone(),
                state: Arc::default(),
            },
            // Not a child of the round's token: registering 64 children under one lock costs
            // more than the scheduler watching the round's token on the call's behalf.
            cancel: CancellationToken::new(),
            result_budget: engine.config.result_budget,
            spill_quota: engine.config.spill_quota,
            secrets: self.tool_secrets.cloned(),
            user: engine.confirmer.clone(),
        };
        Job {
            index,
            tool,
            args,
            args_raw: slot.args_raw.clone(),
            cx,
            log: self.log.clone(),
            round_cancel: self.cancel.clone(),
            answers: None,
        }
    }

    /// Finish the parked call in `slots[index]` with the user's answers, run like any
    /// serial call: its events, timeouts and panic isolation.
    async fn execute_answered(&mut self, slots: &mut [Slot], index: usize, answers: Vec<String>) {
        let SlotState::Ready { tool, args } =
            std::mem::replace(&mut slots[index].state, SlotState::Running)
        else {
            return;
        };
        let mut job = self.job(index, &slots[index], tool, args);
        job.answers = Some(answers);
        let (i, execution) = run_job(job).await;
        slots[i].state = SlotState::Executed(execution);
    }

    /// Journal a mutating call before it runs; an error means it must not run.
    async fn journal(&mut self, slot: &Slot) -> Result<(), StoreError> {
        let entry = JournalEntry {
            id: format!("{}|{}|{}", self.run, self.round, slot.id),
            session: self.session.to_string(),
            run: self.run.to_string(),
            round: self.round,
            tool_call_id: slot.id.to_string(),
            tool_name: slot.name.to_string(),
            arguments: slot.args_raw.to_string(),
            started_ms: now_unix_ms(),
        };
        let id = entry.id.clone();
        self.engine.store.journal_begin(entry).await?;
        self.journaled.push(id);
        Ok(())
    }
}

/// Run consecutive concurrent calls, at most `max` at once, starting them in call order: `max`
/// workers take the calls from one queue, so a batch costs `max` task spawns, not one per call.
async fn run_batch(batch: Vec<Job>, max: usize, cancel: &CancellationToken, slots: &mut [Slot]) {
    let Some(first) = batch.first().map(|job| job.index) else {
        return;
    };
    // A batch of one overlapped nothing.
    let batch_id = (batch.len() > 1).then_some(first);
    let workers = max.min(batch.len());
    let queue = Arc::new(Mutex::new(batch.into_iter()));
    let mut running = JoinSet::new();
    for _ in 0..workers {
        let (queue, cancel) = (queue.clone(), cancel.clone());
        running.spawn(async move {
            let mut done = Vec::new();
            while !cancel.is_cancelled() {
                let next = queue.lock().ok().and_then(|mut calls| calls.next());
                let Some(job) = next else { break };
                done.push(run_job(job).await);
            }
            done
        });
    }
    while let Some(joined) = running.join_next().await {
        // A worker never panics: a tool's panic is caught around each poll.
        for (i, mut execution) in joined.unwrap_or_default() {
            execution.batch = batch_id;
            slots[i].state = SlotState::Executed(execution);
        }
    }
}

/// Run one call under its timeouts and the round's cancellation, with its events.
async fn run_job(job: Job) -> (usize, Execution) {
    let Job {
        index,
        tool,
        args,
        args_raw,
        cx,
        log,
        round_cancel,
        answers,
    } = job;
    let spec = tool.spec();
    let (id, name) = (cx.call_id.clone(), cx.progress.tool_name.clone());
    log.emit(EventKind::ToolCall {
        tool_id: id.clone(),
        tool_name: name.clone(),
        tool_args: args_raw,
    });
    log.emit(EventKind::ToolCallStart {
        tool_id: id.clone(),
        tool_name: name.clone(),
    });
    let started_ms = log.now_ms();
    let progress = cx.progress.state.clone();
    progress
        .last_activity
        .store(log.elapsed_nanos(), Ordering::Relaxed);
    let call_cancel = cx.cancel.clone();

    // The call runs inside this task: dropping its future is how a timeout or a cancelled round
    // stops it, and a panic is caught at each poll. A tool must therefore not block its thread.
    let start = AssertUnwindSafe(|| match answers {
        Some(answers) => tool.answered(cx, args, answers),
        None => tool.call(cx, args),
    });
    let outcome = match std::panic::catch_unwind(start) {
        Err(payload) => Err(panicked(&spec.name, payload)),
        Ok(future) => {
            let guard = Guard {
                spec,
                log: &log,
                progress: &progress,
                round_cancel: &round_cancel,
                call_cancel: &call_cancel,
            };
            guard.run(CatchUnwind(future)).await
        }
    };
    // Progress that arrives after the result is not part of the call (seed §1.5).
    progress.done.store(true, Ordering::Relaxed);
    let ended_ms = log.now_ms();
    if let Ok(output) = &outcome {
        if !output.text.is_empty() {
            log.emit(EventKind::ToolCallText {
                tool_id: id.clone(),
                tool_name: name.clone(),
                text: output.text.clone(),
            });
        }
        if let Some(todos) = output.todos.as_ref().filter(|t| !t.is_empty()) {
            log.emit(EventKind::TodoUpdate {
                todos: todos.clone(),
            });
        }
    }
    log.emit(EventKind::ToolCallEnd {
        tool_id: id,
        tool_name: name,
    });
    (
        index,
        Execution {
            outcome,
            started_ms,
            ended_ms,
            batch: None,
        },
    )
}

/// What watches one running call: its deadlines, its progress and the round's cancellation.
struct Guard<'a> {
    spec: &'a ToolSpec,
    log: &'a EventLog,
    progress: &'a ProgressState,
    round_cancel: &'a CancellationToken,
    call_cancel: &'a CancellationToken,
}

impl Guard<'_> {
    async fn run<F>(&self, mut call: CatchUnwind<F>) -> Result<ToolOutput, Failure>
    where
        F: Future<Output = Result<ToolOutput, ToolError>> + Unpin,
    {
        let spec = self.spec;
        let hard_deadline = after(Instant::now(), spec.timeout);
        loop {
            let last = self.last_activity();
            let idle_deadline = spec.idle_timeout.map(|idle| after(last, idle));
            let deadline = idle_deadline.map_or(hard_deadline, |d| d.min(hard_deadline));
            tokio::select! {
                // The round's cancellation first: a call is never polled again once its round
                // is cancelled (a subagent waiting for a place another call just freed would
                // otherwise take it and start).
                biased;
                _ = self.round_cancel.cancelled() => {
                    self.call_cancel.cancel();
                    return Err(stopped(&spec.name, "was cancelled with its round"));
                }
                result = &mut call => return match result {
                    Ok(Ok(output)) => Ok(output),
                    Ok(Err(error)) => Err(failure_of(error)),
                    Err(payload) => Err(panicked(&spec.name, payload)),
                },
                _ = tokio::time::sleep_until(deadline) => {
                    let now = Instant::now();
                    // Progress may have arrived while we slept: look again before stopping.
                    let idle_expired = spec
                        .idle_timeout
                        .is_some_and(|idle| now >= after(self.last_activity(), idle));
                    if now >= hard_deadline || idle_expired {
                        self.call_cancel.cancel();
                        return Err(self.timed_out(now >= hard_deadline));
                    }
                }
            }
        }
    }

    fn last_activity(&self) -> Instant {
        let nanos = self.progress.last_activity.load(Ordering::Relaxed);
        after(self.log.start(), Duration::from_nanos(nanos))
    }

    fn timed_out(&self, hard: bool) -> Failure {
        let spec = self.spec;
        let mut message = if hard {
            format!(
                "tool \"{}\" timed out after {}",
                spec.name,
                go_duration(spec.timeout)
            )
        } else {
            format!(
                "tool \"{}\" timed out after {} without progress",
                spec.name,
                go_duration(spec.idle_timeout.unwrap_or_default())
            )
        };
        let partial = self
            .progress
            .partial
            .lock()
            .map(|p| p.clone())
            .unwrap_or_default();
        if !partial.is_empty() {
            message.push_str("\npartial output before the timeout:\n");
            message.push_str(&partial);
        }
        Failure {
            status: Status::TimedOut,
            message,
            credential: None,
            fatal: false,
            interrupted: true,
        }
    }
}

/// `start + d`, saturating far in the future instead of overflowing on absurd timeouts.
fn after(start: Instant, d: Duration) -> Instant {
    start
        .checked_add(d)
        .unwrap_or_else(|| start + Duration::from_secs(100 * 365 * 24 * 3600))
}

fn panicked(name: &str, payload: Box<dyn std::any::Any + Send>) -> Failure {
    Failure {
        status: Status::Failed,
        message: format!("tool {name} panicked: {}", panic_text(payload)),
        credential: None,
        fatal: false,
        interrupted: true,
    }
}

/// Polls a future and turns a panic during any poll into an `Err` with the panic payload.
struct CatchUnwind<F>(F);

impl<F: Future + Unpin> Future for CatchUnwind<F> {
    type Output = Result<F::Output, Box<dyn std::any::Any + Send>>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let inner = &mut self.0;
        match std::panic::catch_unwind(AssertUnwindSafe(|| Pin::new(&mut *inner).poll(cx))) {
            Ok(Poll::Ready(value)) => Poll::Ready(Ok(value)),
            Ok(Poll::Pending) => Poll::Pending,
            Err(payload) => Poll::Ready(Err(payload)),
        }
    }
}

fn failure_of(error: ToolError) -> Failure {
    match error {
        ToolError::Failed(message) => Failure {
            status: Status::Failed,
            message,
            credential: None,
            fatal: false,
            interrupted: false,
        },
        ToolError::Credential { key, message } => Failure {
            status: Status::Failed,
            message,
            credential: Some(key),
            fatal: false,
            interrupted: false,
        },
        ToolError::Fatal(message) => Failure {
            status: Status::Failed,
            message,
            credential: None,
            fatal: true,
            interrupted: false,
        },
    }
}

fn stopped(name: &str, how: &str) -> Failure {
    Failure {
        status: Status::Failed,
        message: format!("tool {name} {how}"),
        credential: None,
        fatal: false,
        interrupted: true,
    }
}

fn panic_text(payload: Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a non-text panic payload".to_string()
    }
}
