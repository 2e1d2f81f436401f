//! The background jobs of every session, owned by the background_command tool.
//!
//! A job outlives the call that started it, so it runs on its own task, which owns the child
//! and reads its output into a capped ring that `read` pages through by byte offset. The table
//! is what keeps a session from starting unbounded work (at most [`MAX_RUNNING`] running jobs)
//! and what stops every job when the tool is dropped (the daemon stopping, or the one-shot CLI
//! exiting after its round): no job survives the dispatcher.

use std::collections::{HashMap, VecDeque};
use std::process::ExitStatus;
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::process::Child;
use tokio::sync::Notify;

use super::process::{self, GRACE, Group, Pipes, StderrTail, Stopped, Stream};

/// Most running jobs per session.
pub const MAX_RUNNING: usize = 16;
/// Most jobs remembered per session; the oldest finished ones are forgotten first.
pub const MAX_KEPT: usize = 32;
/// Output kept per job: the last this many bytes.
pub const RING_CAP: usize = 4 * 1024 * 1024;
/// How long a finished job (and its output) is remembered.
pub const FINISHED_TTL: Duration = Duration::from_secs(60 * 60);

/// Every session's jobs.
#[derive(Default)]
pub struct JobTable {
    sessions: Mutex<HashMap<String, Vec<Arc<Job>>>>,
    next_id: AtomicU64,
}

/// One background job.
pub struct Job {
    pub id: String,
    pub command: String,
    pub cwd: String,
    pub pid: u32,
    pub started: Instant,
    state: Mutex<JobState>,
    /// Woken when output arrives or the job ends.
    changed: Notify,
    /// Woken to ask the job's task to stop the job.
    stop: Notify,
    /// The process group while the job's task has not stopped it (0 after).
    pgid: AtomicI32,
}

struct JobState {
    output: Ring,
    end: Option<JobEnd>,
}

/// How a job ended.
#[derive(Clone, Debug)]
pub struct JobEnd {
    pub status: Option<ExitStatus>,
    pub stopped_by_request: bool,
    pub leftovers: bool,
    pub after: Duration,
    /// A `sandbox: …` line when the way it ended points at the sandbox.
    pub sandbox_note: Option<String>,
}

/// A job's state at one moment.
pub struct Snapshot {
    pub end: Option<JobEnd>,
    pub total: u64,
    pub running_for: Duration,
}

/// Output read from a job.
pub struct Read {
    /// Where the returned bytes start (later than asked when older output was dropped).
    pub from: u64,
    pub bytes: Vec<u8>,
    pub total: u64,
    /// Bytes before `from` that are no longer kept.
    pub dropped_before: u64,
}

impl JobTable {
    /// Refuse early when `session` already runs [`MAX_RUNNING`] jobs.
    pub fn ensure_room(&self, session: &str) -> Result<(), String> {
        let sessions = lock(&self.sessions);
        let running: Vec<&str> = sessions
            .get(session)
            .into_iter()
            .flatten()
            .filter(|j| j.is_running())
            .map(|j| j.id.as_str())
            .collect();
        if running.len() >= MAX_RUNNING {
            return Err(limit_message(&running));
        }
        Ok(())
    }

    /// Register a spawned child as a job of `session`, starting its task. Fails when the
    /// session already runs [`MAX_RUNNING`] jobs (the child is stopped then).
    pub fn start(
        &self,
        session: &str,
        mut child: Child,
        group: Group,
        command: String,
        cwd: String,
    ) -> Result<Arc<Job>, String> {
        self.prune();
        let mut sessions = lock(&self.sessions);
        let jobs = sessions.entry(session.to_string()).or_default();
        let running: Vec<&str> = jobs
            .iter()
            .filter(|j| j.is_running())
            .map(|j| j.id.as_str())
            .collect();
        if running.len() >= MAX_RUNNING {
            let message = limit_message(&running);
            drop(sessions);
            // `group` stops the child when it drops.
            drop(group);
            let _ = child.start_kill();
            return Err(message);
        }
        let id = format!("job-{}", self.next_id.fetch_add(1, Ordering::Relaxed) + 1);
        let job = Arc::new(Job {
            id,
            command,
            cwd,
            pid: child.id().unwrap_or(0),
            started: Instant::now(),
            state: Mutex::new(JobState {
                output: Ring::default(),
                end: None,
            }),
            changed: Notify::new(),
            stop: Notify::new(),
            pgid: AtomicI32::new(group.id().unwrap_or(0)),
        });
        jobs.push(job.clone());
        // Forget the oldest finished jobs beyond the cap.
        while jobs.len() > MAX_KEPT {
            match jobs.iter().position(|j| !j.is_running()) {
                Some(i) => {
                    jobs.remove(i);
                }
                None => break,
            }
        }
        drop(sessions);
        let pipes = Pipes::take(&mut child);
        tokio::spawn(run(job.clone(), child, group, pipes));
        Ok(job)
    }

    /// Forget jobs that ended more than [`FINISHED_TTL`] ago, and sessions left without jobs:
    /// a long-lived daemon sees many sessions, and nobody reads those any more.
    fn prune(&self) {
        lock(&self.sessions).retain(|_, jobs| {
            jobs.retain(|j| !j.finished_before(FINISHED_TTL));
            !jobs.is_empty()
        });
    }

    /// The jobs of `session`, oldest first.
    pub fn list(&self, session: &str) -> Vec<Arc<Job>> {
        lock(&self.sessions)
            .get(session)
            .cloned()
            .unwrap_or_default()
    }

    /// The job `id` of `session`.
    pub fn get(&self, session: &str, id: &str) -> Option<Arc<Job>> {
        lock(&self.sessions)
            .get(session)
            .and_then(|jobs| jobs.iter().find(|j| j.id == id).cloned())
    }
}

impl Drop for JobTable {
    fn drop(&mut self) {
        let sessions = match self.sessions.get_mut() {
            Ok(s) => s,
            Err(poisoned) => poisoned.into_inner(),
        };
        let pgids: Vec<i32> = sessions
            .values()
            .flatten()
            .map(|j| j.pgid.swap(0, Ordering::SeqCst))
            .filter(|p| *p > 0)
            .collect();
        // The process may be about to exit: stop the groups here rather than on a task.
        process::stop_all_blocking(&pgids, Duration::from_millis(500));
    }
}

impl Job {
    pub fn is_running(&self) -> bool {
        lock(&self.state).end.is_none()
    }

    /// Ended more than `ttl` ago.
    fn finished_before(&self, ttl: Duration) -> bool {
        lock(&self.state)
            .end
            .as_ref()
            .is_some_and(|end| self.started.elapsed().saturating_sub(end.after) > ttl)
    }

    pub fn snapshot(&self) -> Snapshot {
        let state = lock(&self.state);
        Snapshot {
            end: state.end.clone(),
            total: state.output.total(),
            running_for: self.started.elapsed(),
        }
    }

    /// Up to `max` bytes of output from `offset`.
    pub fn read(&self, offset: u64, max: usize) -> Read {
        lock(&self.state).output.read(offset, max)
    }

    /// Wait up to `wait` for output past `offset` or for the job to end.
    pub async fn wait_for(&self, offset: u64, wait: Duration) {
        let notified = self.changed.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        {
            let state = lock(&self.state);
            if state.end.is_some() || state.output.total() > offset {
                return;
            }
        }
        let _ = tokio::time::timeout(wait, notified).await;
    }

    /// Ask the job's task to stop the job and wait until it has (or `wait` passes).
    pub async fn stop(&self, wait: Duration) -> bool {
        let ended = self.changed.notified();
        tokio::pin!(ended);
        ended.as_mut().enable();
        if !self.is_running() {
            return true;
        }
        self.stop.notify_one();
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            if !self.is_running() {
                return true;
            }
            if tokio::time::timeout_at(deadline, ended.as_mut())
                .await
                .is_err()
            {
                return !self.is_running();
            }
            ended.set(self.changed.notified());
            ended.as_mut().enable();
        }
    }

    fn append(&self, bytes: &[u8]) {
        lock(&self.state).output.push(bytes);
        self.changed.notify_waiters();
    }

    fn finish(&self, end: JobEnd) {
        self.pgid.store(0, Ordering::SeqCst);
        lock(&self.state).end = Some(end);
        self.changed.notify_waiters();
    }
}

/// The job's task: read its output until it ends, stop it when asked, record how it ended.
async fn run(job: Arc<Job>, mut child: Child, mut group: Group, mut pipes: Pipes) {
    let mut status = None;
    let mut stopped_by_request = false;
    let mut pipes_deadline: Option<tokio::time::Instant> = None;
    let mut leftovers = None;
    let mut stderr = StderrTail::default();
    loop {
        if status.is_some() && pipes.done() {
            break;
        }
        tokio::select! {
            (stream, chunk) = pipes.next(), if !pipes.done() => {
                if stream == Stream::Stderr {
                    stderr.push(chunk);
                }
                job.append(chunk);
            }
            exit = child.wait(), if status.is_none() => {
                status = exit.ok();
                pipes_deadline = Some(tokio::time::Instant::now() + Duration::from_millis(200));
            }
            () = job.stop.notified(), if status.is_none() => {
                stopped_by_request = true;
                group.stop(&mut child).await;
                status = tokio::time::timeout(Duration::from_secs(1), child.wait()).await.ok().and_then(Result::ok);
                // Whatever is still in the pipes is read below; only a process outside the
                // group could keep them open past this.
                pipes_deadline = Some(tokio::time::Instant::now() + Duration::from_secs(1));
                leftovers = Some(Stopped::Empty);
            }
            () = sleep_until_opt(pipes_deadline), if pipes_deadline.is_some() => {
                if leftovers.is_none() {
                    leftovers = Some(group.stop(&mut child).await);
                    pipes_deadline = Some(tokio::time::Instant::now() + Duration::from_secs(1));
                } else {
                    pipes.abandon();
                }
            }
        }
    }
    if leftovers.is_none() {
        leftovers = Some(group.stop(&mut child).await);
    }
    let status = status.map(|s| group.reported_status(s));
    job.finish(JobEnd {
        status,
        stopped_by_request,
        leftovers: !stopped_by_request
            && matches!(leftovers, Some(Stopped::Terminated | Stopped::Killed)),
        after: job.started.elapsed(),
        sandbox_note: if stopped_by_request {
            None
        } else {
            group.sandbox_note(status, stderr.bytes())
        },
    });
}

async fn sleep_until_opt(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// How long `stop` waits for a job: the grace plus time to reap and drain.
pub const STOP_WAIT: Duration = Duration::from_secs(GRACE.as_secs() + 3);

/// The last [`RING_CAP`] bytes of a job's output, addressed by offsets into the whole output.
#[derive(Default)]
struct Ring {
    bytes: VecDeque<u8>,
    /// Offset of `bytes[0]` in the whole output.
    start: u64,
}

impl Ring {
    fn total(&self) -> u64 {
        self.start + self.bytes.len() as u64
    }

    fn push(&mut self, chunk: &[u8]) {
        // Make room first, so the ring never grows past its cap.
        let overflow = (self.bytes.len() + chunk.len()).saturating_sub(RING_CAP);
        self.drop_front(overflow.min(self.bytes.len()));
        self.bytes.extend(chunk);
        self.drop_front(self.bytes.len().saturating_sub(RING_CAP));
    }

    fn drop_front(&mut self, n: usize) {
        if n > 0 {
            self.bytes.drain(..n);
            self.start += n as u64;
        }
    }

    fn read(&self, offset: u64, max: usize) -> Read {
        let from = offset.clamp(self.start, self.total());
        let skip = usize::try_from(from - self.start).unwrap_or(usize::MAX);
        let bytes: Vec<u8> = self.bytes.iter().skip(skip).take(max).copied().collect();
        Read {
            from,
            bytes,
            total: self.total(),
            dropped_before: self.start.saturating_sub(offset),
        }
    }
}

fn limit_message(running: &[&str]) -> String {
    format!(
        "{MAX_RUNNING} background jobs are already running in this session (the limit): {}. Stop one with mode=stop, or wait for one to finish",
        running.join(", ")
    )
}

/// A poisoned lock only means another call panicked while holding it; the data is still
/// the best there is.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    match mutex.lock() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn job(id: &str, age: Duration, ran_for: Option<Duration>) -> Arc<Job> {
        Arc::new(Job {
            id: id.to_string(),
            command: "x".into(),
            cwd: ".".into(),
            pid: 0,
            started: Instant::now().checked_sub(age).unwrap(),
            state: Mutex::new(JobState {
                output: Ring::default(),
                end: ran_for.map(|after| JobEnd {
                    status: None,
                    stopped_by_request: false,
                    leftovers: false,
                    after,
                    sandbox_note: None,
                }),
            }),
            changed: Notify::new(),
            stop: Notify::new(),
            pgid: AtomicI32::new(0),
        })
    }

    #[test]
    fn jobs_finished_over_an_hour_ago_and_empty_sessions_are_forgotten() {
        let table = JobTable::default();
        let hour = Duration::from_secs(3600);
        {
            let mut sessions = lock(&table.sessions);
            sessions.insert(
                "a".into(),
                vec![
                    job("old", 3 * hour, Some(Duration::from_secs(5))),
                    job(
                        "recent",
                        3 * hour,
                        Some(2 * hour + Duration::from_secs(600)),
                    ),
                    job("running", 3 * hour, None),
                ],
            );
            sessions.insert(
                "b".into(),
                vec![job("old-b", 2 * hour, Some(Duration::ZERO))],
            );
        }
        table.prune();
        let ids: Vec<String> = table.list("a").iter().map(|j| j.id.clone()).collect();
        assert_eq!(ids, ["recent", "running"]);
        assert!(table.list("b").is_empty());
        assert_eq!(lock(&table.sessions).len(), 1);
    }

    #[test]
    fn the_ring_keeps_the_last_bytes_and_addresses_them_by_offset() {
        let mut ring = Ring::default();
        ring.push(b"hello ");
        ring.push(b"world");
        let r = ring.read(0, 5);
        assert_eq!(
            (r.from, r.bytes.as_slice(), r.total),
            (0, &b"hello"[..], 11)
        );
        let r = ring.read(6, 100);
        assert_eq!(r.bytes, b"world");
        let r = ring.read(11, 100);
        assert_eq!((r.from, r.bytes.len()), (11, 0));

        let block = vec![b'a'; RING_CAP];
        ring.push(&block);
        ring.push(b"tail");
        assert_eq!(ring.total(), 11 + RING_CAP as u64 + 4);
        assert_eq!(ring.bytes.len(), RING_CAP);
        let r = ring.read(0, 10);
        assert_eq!(r.from, 15);
        assert_eq!(r.dropped_before, 15);
        let end = ring.total();
        let r = ring.read(end - 4, 10);
        assert_eq!(r.bytes, b"tail");
        assert_eq!(r.dropped_before, 0);
    }
}
