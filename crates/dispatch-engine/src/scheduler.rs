//! Pass 2 (DESIGN §3.12): a serial call is a barrier; consecutive concurrent calls run as a batch
//! under the `MAX_CONCURRENT_TOOLS` bound. Every call runs in its own task, so a panic, a
//! timeout or a failure ends that call alone; siblings are never cancelled.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::events::{EventKind, EventLog};
use crate::round::{Execution, Failure, RoundCx, Slot, SlotState, go_duration};
use crate::status::Status;
use crate::tool::{Exclude, Progress, Tool, ToolContext, ToolError, ToolOutput};

/// Everything one call needs to run on its own task.
struct Job {
    index: usize,
    tool: Arc<dyn Tool>,
    args: Value,
    args_raw: Arc<str>,
    cx: ToolContext,
    log: Arc<EventLog>,
    round_cancel: CancellationToken,
    bound: Option<Arc<Semaphore>>,
}

impl RoundCx<'_> {
    pub(crate) async fn execute(&mut self, slots: &mut [Slot]) {
        let bound = Arc::new(Semaphore::new(self.engine.config.max_concurrent.max(1)));
        let mut batch: Vec<Job> = Vec::new();
        for index in 0..slots.len() {
            let SlotState::Ready { .. } = slots[index].state else {
                continue;
            };
            let SlotState::Ready { tool, args } =
                std::mem::replace(&mut slots[index].state, SlotState::Parked)
            else {
                continue;
            };
            let spec = tool.spec();
            let (fire_and_forget, concurrent) = (spec.fire_and_forget, spec.is_concurrent());
            let job = self.job(
                index,
                &slots[index],
                tool,
                args,
                concurrent.then(|| bound.clone()),
            );
            if fire_and_forget {
                // Started, not awaited: its events arrive whenever it runs.
                tokio::spawn(run_job(job));
                let now = self.log.now_ms();
                slots[index].state = SlotState::Executed(Execution {
                    outcome: Ok(ToolOutput::text("ok")),
                    started_ms: now,
                    ended_ms: now,
                });
            } else if concurrent {
                batch.push(job);
            } else {
                run_batch(std::mem::take(&mut batch), slots).await;
                let (i, execution) = run_job(job).await;
                slots[i].state = SlotState::Executed(execution);
            }
            if self.req.cancel.is_cancelled() {
                return;
            }
        }
        run_batch(batch, slots).await;
    }

    fn job(
        &self,
        index: usize,
        slot: &Slot,
        tool: Arc<dyn Tool>,
        args: Value,
        bound: Option<Arc<Semaphore>>,
    ) -> Job {
        let engine = self.engine;
        let cx = ToolContext {
            session_id: Arc::from(self.req.session.as_str()),
            run_id: Arc::from(self.req.run.as_str()),
            call_id: slot.id.clone(),
            workdir: Arc::from(engine.config.workdir.as_path()),
            data_dir: engine.config.data_dir.as_deref().map(Arc::from),
            registry: engine.registry.clone(),
            exclude: Arc::<Exclude>::clone(&self.exclude),
            progress: Progress {
                log: self.log.clone(),
                tool_id: slot.id.clone(),
                tool_name: slot.name.clone(),
                last_activity: Arc::new(AtomicU64::new(0)),
                partial: Arc::default(),
            },
            cancel: self.req.cancel.child_token(),
        };
        Job {
            index,
            tool,
            args,
            args_raw: slot.args_raw.clone(),
            cx,
            log: self.log.clone(),
            round_cancel: self.req.cancel.clone(),
            bound,
        }
    }
}

async fn run_batch(batch: Vec<Job>, slots: &mut [Slot]) {
    if batch.is_empty() {
        return;
    }
    let mut set = JoinSet::new();
    for job in batch {
        set.spawn(run_job(job));
    }
    while let Some(joined) = set.join_next().await {
        // run_job itself never panics: tool panics are caught one level down.
        if let Ok((i, execution)) = joined {
            slots[i].state = SlotState::Executed(execution);
        }
    }
}

/// Run one call under its bound, timeouts and the round's cancellation, with its events.
async fn run_job(job: Job) -> (usize, Execution) {
    let Job {
        index,
        tool,
        args,
        args_raw,
        cx,
        log,
        round_cancel,
        bound,
    } = job;
    let _permit = match &bound {
        Some(sem) => sem.clone().acquire_owned().await.ok(),
        None => None,
    };
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
    let last_activity = cx.progress.last_activity.clone();
    last_activity.store(log.elapsed_nanos(), Ordering::Relaxed);
    let partial = cx.progress.partial.clone();
    let call_cancel = cx.cancel.clone();

    let task_tool = tool.clone();
    let mut handle = tokio::spawn(async move { task_tool.call(cx, args).await });
    let hard_deadline = Instant::now() + spec.timeout;
    let outcome = loop {
        let idle_deadline = spec.idle_timeout.map(|idle| {
            log.start() + Duration::from_nanos(last_activity.load(Ordering::Relaxed)) + idle
        });
        let deadline = idle_deadline.map_or(hard_deadline, |d| d.min(hard_deadline));
        tokio::select! {
            joined = &mut handle => break match joined {
                Ok(Ok(output)) => Ok(output),
                Ok(Err(error)) => Err(failure_of(error)),
                Err(e) if e.is_panic() => Err(Failure {
                    status: Status::Failed,
                    message: format!("tool {} panicked: {}", spec.name, panic_text(e.into_panic())),
                    credential: None,
                    fatal: false,
                }),
                Err(_) => Err(stopped(&spec.name, "was aborted")),
            },
            _ = round_cancel.cancelled() => {
                call_cancel.cancel();
                handle.abort();
                break Err(stopped(&spec.name, "was cancelled with its round"));
            }
            _ = tokio::time::sleep_until(deadline) => {
                let now = Instant::now();
                let idle_expired = idle_deadline.is_some_and(|d| now >= d)
                    && idle_deadline.is_some_and(|_| {
                        // Progress may have arrived while we slept.
                        let last = log.start() + Duration::from_nanos(last_activity.load(Ordering::Relaxed));
                        spec.idle_timeout.is_some_and(|idle| now >= last + idle)
                    });
                if now >= hard_deadline || idle_expired {
                    call_cancel.cancel();
                    handle.abort();
                    let mut message = if now >= hard_deadline {
                        format!("tool \"{}\" timed out after {}", spec.name, go_duration(spec.timeout))
                    } else {
                        format!(
                            "tool \"{}\" timed out after {} without progress",
                            spec.name,
                            go_duration(spec.idle_timeout.unwrap_or_default())
                        )
                    };
                    let partial = partial.lock().map(|p| p.clone()).unwrap_or_default();
                    if !partial.is_empty() {
                        message.push_str("\npartial output before the timeout:\n");
                        message.push_str(&partial);
                    }
                    break Err(Failure { status: Status::TimedOut, message, credential: None, fatal: false });
                }
            }
        }
    };
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
        },
    )
}

fn failure_of(error: ToolError) -> Failure {
    match error {
        ToolError::Failed(message) => Failure {
            status: Status::Failed,
            message,
            credential: None,
            fatal: false,
        },
        ToolError::Credential { key, message } => Failure {
            status: Status::Failed,
            message,
            credential: Some(key),
            fatal: false,
        },
        ToolError::Fatal(message) => Failure {
            status: Status::Failed,
            message,
            credential: None,
            fatal: true,
        },
    }
}

fn stopped(name: &str, how: &str) -> Failure {
    Failure {
        status: Status::Failed,
        message: format!("tool {name} {how}"),
        credential: None,
        fatal: false,
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
