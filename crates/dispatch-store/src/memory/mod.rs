//! The in-memory store: plain maps behind one mutex, for tests and benchmarks.
//!
//! One mutex over everything makes `commit_round` atomic for free; a commit only moves the
//! record's vectors into place, so benchmarks measure the engine, not the store.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;

use crate::clock::{Clock, SystemClock};
use crate::{
    Committed, DedupeEntry, EventJson, JournalEntry, PendingTask, RoundRecord, RunSnapshot,
    SessionSnapshot, SessionStore, StoreError, StoreResult, TranscriptEntry,
};

/// A [`SessionStore`] that keeps everything in process memory and forgets it on drop.
pub struct MemoryStore {
    state: Mutex<State>,
    cache: Mutex<cache::CacheState>,
    errors: Mutex<errors::ErrorState>,
    secrets: Mutex<secrets::SecretState>,
    files: Mutex<Vec<crate::file_history::FileVersion>>,
    agents: Mutex<agents::AgentState>,
    chats: Mutex<Vec<crate::chatbots::ApprovedChat>>,
    /// What "now" is for TTLs (replaced in tests).
    clock: Arc<dyn Clock>,
    /// Cache hits and misses since this store was made (for `stats`).
    cache_counters: crate::maintenance::CacheCounters,
}

impl Default for MemoryStore {
    fn default() -> Self {
        MemoryStore::with_clock(Arc::new(SystemClock))
    }
}

impl MemoryStore {
    /// An empty store whose TTLs follow `clock`.
    pub fn with_clock(clock: Arc<dyn Clock>) -> Self {
        MemoryStore {
            state: Mutex::default(),
            cache: Mutex::default(),
            errors: Mutex::default(),
            secrets: Mutex::default(),
            files: Mutex::default(),
            agents: Mutex::default(),
            chats: Mutex::default(),
            clock,
            cache_counters: Default::default(),
        }
    }
}

#[async_trait]
impl crate::chat::ChatHistory for MemoryStore {
    async fn chat_search(
        &self,
        session: &str,
        query: &str,
        since_ms: Option<u64>,
        limit: usize,
    ) -> StoreResult<Vec<crate::chat::ChatHit>> {
        let state = self.state()?;
        Ok(state.sessions.get(session).map_or_else(Vec::new, |s| {
            crate::chat::search_scan(s.stamped(), query, since_ms, limit)
        }))
    }

    async fn chat_runs(
        &self,
        session: &str,
        since_ms: Option<u64>,
        limit: usize,
    ) -> StoreResult<Vec<crate::chat::RunSummary>> {
        let state = self.state()?;
        Ok(state.sessions.get(session).map_or_else(Vec::new, |s| {
            crate::chat::runs_scan(s.stamped(), since_ms, limit)
        }))
    }

    async fn chat_read(
        &self,
        session: &str,
        run: &str,
        limit: usize,
    ) -> StoreResult<Vec<crate::chat::ChatHit>> {
        let state = self.state()?;
        Ok(state.sessions.get(session).map_or_else(Vec::new, |s| {
            crate::chat::read_scan(s.stamped(), run, limit)
        }))
    }
}

impl SessionState {
    /// The transcript as `(seq, committed at, entry)`, seq counting from 1 as in the other
    /// backends.
    fn stamped(&self) -> impl DoubleEndedIterator<Item = (u64, u64, &TranscriptEntry)> + '_ {
        self.transcript
            .iter()
            .zip(&self.transcript_at)
            .enumerate()
            .map(|(i, (entry, at))| (i as u64 + 1, *at, entry))
    }
}

mod agents;
mod cache;
mod chatbots;
mod errors;
mod files;
mod maintenance;
mod secrets;

#[derive(Default)]
struct State {
    sessions: HashMap<String, SessionState>,
}

#[derive(Default)]
struct SessionState {
    snapshot: SessionSnapshot,
    runs: HashMap<String, RunState>,
    transcript: Vec<TranscriptEntry>,
    /// When each transcript entry was committed (same length as `transcript`).
    transcript_at: Vec<u64>,
    /// Sorted by sequence number, so `events(after)` can binary-search.
    events: Vec<(u64, Arc<dyn EventJson>)>,
    pending: Vec<PendingTask>,
    journal: Vec<JournalEntry>,
}

#[derive(Default)]
struct RunState {
    rounds: u64,
    write_epoch: u64,
    turn_allow_all: bool,
    /// Entries by insertion number, so a load lists them in insertion order.
    dedupe: BTreeMap<u64, DedupeEntry>,
    /// Where each key sits in `dedupe`: a replaced entry keeps its place, like an SQL upsert.
    slots: HashMap<String, u64>,
    next_slot: u64,
    /// The write epoch each entry (by slot) was stored at.
    stored_at: HashMap<u64, u64>,
    /// The write epoch of the last round that touched each path, and of the last round that
    /// may have touched anything (see [`crate::path_entry_valid`]).
    touched_at: HashMap<String, u64>,
    wiped_at: u64,
    /// When the last round was committed (store clock), so `gc` can tell a finished run.
    last_commit_ms: u64,
}

impl RunState {
    fn put(&mut self, entry: DedupeEntry, epoch: u64) {
        let slot = match self.slots.get(&entry.key) {
            Some(&slot) => slot,
            None => {
                let slot = self.next_slot;
                self.next_slot += 1;
                self.slots.insert(entry.key.clone(), slot);
                slot
            }
        };
        self.dedupe.insert(slot, entry);
        self.stored_at.insert(slot, epoch);
    }

    fn drop_key(&mut self, key: &str) {
        if let Some(slot) = self.slots.remove(key) {
            self.dedupe.remove(&slot);
            self.stored_at.remove(&slot);
        }
    }

    /// The entry in `slot`, if it is still valid.
    fn valid(&self, slot: u64) -> Option<&DedupeEntry> {
        let entry = self.dedupe.get(&slot)?;
        let stored_at = self.stored_at.get(&slot).copied().unwrap_or(0);
        crate::path_entry_valid(&entry.validity, stored_at, self.wiped_at, |p| {
            self.touched_at.get(p).copied().unwrap_or(0)
        })
        .then_some(entry)
    }

    fn header(&self) -> RunSnapshot {
        RunSnapshot {
            rounds: self.rounds,
            write_epoch: self.write_epoch,
            turn_allow_all: self.turn_allow_all,
            dedupe: Vec::new(),
        }
    }

    fn snapshot(&self) -> RunSnapshot {
        RunSnapshot {
            dedupe: self
                .dedupe
                .keys()
                .filter_map(|slot| self.valid(*slot).cloned())
                .collect(),
            ..self.header()
        }
    }

    fn snapshot_of(&self, keys: &[String]) -> RunSnapshot {
        RunSnapshot {
            dedupe: keys
                .iter()
                .filter_map(|key| self.valid(*self.slots.get(key)?).cloned())
                .collect(),
            ..self.header()
        }
    }
}

impl MemoryStore {
    fn state(&self) -> StoreResult<MutexGuard<'_, State>> {
        // A panic while the lock was held may have left a commit half applied; refuse to go on
        // rather than serve that state.
        self.state.lock().map_err(|_| {
            StoreError::Backend("memory store: a thread panicked while writing to it".to_string())
        })
    }
}

#[async_trait]
impl SessionStore for MemoryStore {
    async fn load(&self, session: &str, run: &str) -> StoreResult<(SessionSnapshot, RunSnapshot)> {
        let state = self.state()?;
        let Some(stored) = state.sessions.get(session) else {
            return Ok(Default::default());
        };
        let run = stored
            .runs
            .get(run)
            .map(RunState::snapshot)
            .unwrap_or_default();
        Ok((stored.snapshot.clone(), run))
    }

    async fn load_keys(
        &self,
        session: &str,
        run: &str,
        keys: &[String],
    ) -> StoreResult<(SessionSnapshot, RunSnapshot)> {
        let state = self.state()?;
        let Some(stored) = state.sessions.get(session) else {
            return Ok(Default::default());
        };
        let run = stored
            .runs
            .get(run)
            .map(|r| r.snapshot_of(keys))
            .unwrap_or_default();
        Ok((stored.snapshot.clone(), run))
    }

    async fn commit_round(&self, record: RoundRecord) -> StoreResult<Committed> {
        let RoundRecord {
            session,
            run,
            round,
            write_epoch,
            turn_allow_all,
            marked,
            todos,
            dedupe_put,
            dedupe_drop,
            touched_paths,
            touched_all,
            transcript,
            events,
            pending,
            answered,
            journal_done,
        } = record;
        let mut state = self.state()?;
        let last = state
            .sessions
            .get(&session)
            .and_then(|s| s.runs.get(&run))
            .map_or(0, |r| r.rounds);
        if round != last + 1 {
            return Err(StoreError::Conflict {
                session,
                run,
                round,
            });
        }
        let now = self.clock.now_ms();
        let stored = state.sessions.entry(session).or_default();

        stored.snapshot.marked.extend(marked);
        if let Some(todos) = todos {
            stored.snapshot.todos = todos;
        }

        let run_state = stored.runs.entry(run).or_default();
        run_state.rounds = round;
        run_state.write_epoch = write_epoch;
        run_state.turn_allow_all = turn_allow_all;
        run_state.last_commit_ms = now;
        // Drops after puts, as in the SQLite backend: when a round both stores and invalidates
        // a key, serving a stale result is worse than running the call again.
        if touched_all {
            run_state.wiped_at = write_epoch;
        }
        for path in touched_paths {
            run_state.touched_at.insert(path, write_epoch);
        }
        for entry in dedupe_put {
            run_state.put(entry, write_epoch);
        }
        for key in &dedupe_drop {
            run_state.drop_key(key);
        }

        stored
            .transcript_at
            .extend(std::iter::repeat_n(now, transcript.len()));
        stored.transcript.extend(transcript);

        let mut seq = stored.events.last().map_or(0, |(seq, _)| *seq);
        let first_seq = seq + 1;
        stored.events.extend(events.into_iter().map(|event| {
            seq += 1;
            (seq, event)
        }));
        let committed = Committed {
            events: first_seq..seq + 1,
        };

        if let Some(task) = pending {
            match stored
                .pending
                .iter_mut()
                .find(|known| known.task_hash == task.task_hash)
            {
                Some(known) => *known = task,
                None => stored.pending.push(task),
            }
        }
        stored
            .pending
            .retain(|task| !answered.contains(&task.task_hash));
        stored
            .journal
            .retain(|entry| !journal_done.contains(&entry.id));
        Ok(committed)
    }

    async fn transcript(
        &self,
        session: &str,
        run: Option<&str>,
    ) -> StoreResult<Vec<TranscriptEntry>> {
        let state = self.state()?;
        let Some(stored) = state.sessions.get(session) else {
            return Ok(Vec::new());
        };
        Ok(stored
            .transcript
            .iter()
            .filter(|entry| run.is_none_or(|run| entry.run == run))
            .cloned()
            .collect())
    }

    async fn events(&self, session: &str, after: u64) -> StoreResult<Vec<(u64, String)>> {
        let state = self.state()?;
        let Some(stored) = state.sessions.get(session) else {
            return Ok(Vec::new());
        };
        let start = stored.events.partition_point(|(seq, _)| *seq <= after);
        Ok(stored.events[start..]
            .iter()
            .map(|(seq, event)| (*seq, event.to_json()))
            .collect())
    }

    async fn pending(&self, session: &str) -> StoreResult<Vec<PendingTask>> {
        let state = self.state()?;
        let Some(stored) = state.sessions.get(session) else {
            return Ok(Vec::new());
        };
        let mut tasks = stored.pending.clone();
        // Stable, so tasks created in the same millisecond keep their commit order.
        tasks.sort_by_key(|task| task.created_at_ms);
        Ok(tasks)
    }

    async fn journal_begin(&self, entry: JournalEntry) -> StoreResult<()> {
        let mut state = self.state()?;
        let stored = state.sessions.entry(entry.session.clone()).or_default();
        stored.journal.retain(|known| known.id != entry.id);
        stored.journal.push(entry);
        Ok(())
    }

    async fn journal_open(&self, session: &str) -> StoreResult<Vec<JournalEntry>> {
        let state = self.state()?;
        let mut entries = state
            .sessions
            .get(session)
            .map(|s| s.journal.clone())
            .unwrap_or_default();
        // Stable: entries begun in the same millisecond keep their order.
        entries.sort_by_key(|entry| entry.started_ms);
        Ok(entries)
    }
}
