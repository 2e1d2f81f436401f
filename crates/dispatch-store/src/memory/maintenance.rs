//! Housekeeping for the memory store: counts straight from the maps; `gc` prunes runs by the
//! commit time each run keeps in memory (nothing persistent to add: the store forgets all on
//! drop anyway).

use async_trait::async_trait;

use super::MemoryStore;
use crate::StoreResult;
use crate::cache::ResultCache;
use crate::maintenance::{GcPolicy, GcReport, Maintenance, StoreStats, duration_ms};

/// A count as u64 (a `usize` always fits on the platforms we build for).
fn count(n: usize) -> u64 {
    u64::try_from(n).unwrap_or(u64::MAX)
}

#[async_trait]
impl Maintenance for MemoryStore {
    async fn stats(&self) -> StoreResult<StoreStats> {
        let now = self.clock.now_ms();
        let mut stats = StoreStats {
            backend: "memory",
            ..StoreStats::default()
        };
        {
            let state = self.state()?;
            stats.sessions = count(state.sessions.len());
            for session in state.sessions.values() {
                stats.runs += count(session.runs.len());
                stats.transcript_entries += count(session.transcript.len());
                stats.events += count(session.events.len());
                stats.pending_tasks += count(session.pending.len());
                stats.open_journal_entries += count(session.journal.len());
                stats.dedupe_entries += session
                    .runs
                    .values()
                    .map(|run| count(run.dedupe.len()))
                    .sum::<u64>();
            }
        }
        stats.cache_entries = self.cache()?.counts(now);
        stats.error_records = self.error_state()?.counts(now);
        self.cache_counters.fill(&mut stats);
        Ok(stats)
    }

    async fn gc(&self, policy: &GcPolicy) -> StoreResult<GcReport> {
        let now = self.clock.now_ms();
        let cache_entries_swept = self.cache_sweep().await?;
        let error_records_dropped = self.error_state()?.drop_expired(now);
        let cutoff = now.saturating_sub(duration_ms(policy.finished_runs_older_than));
        let (mut runs_pruned, mut dedupe_dropped) = (0, 0);
        {
            let mut state = self.state()?;
            for session in state.sessions.values_mut() {
                for run in session.runs.values_mut() {
                    if run.last_commit_ms >= cutoff || run.dedupe.is_empty() {
                        continue;
                    }
                    runs_pruned += 1;
                    dedupe_dropped += count(run.dedupe.len());
                    // `next_slot` stays: a later round's entries still sort after older ones.
                    run.dedupe.clear();
                    run.slots.clear();
                    run.stored_at.clear();
                    run.touched_at.clear();
                }
            }
        }
        Ok(GcReport {
            backend: "memory",
            cache_entries_swept,
            error_records_dropped,
            runs_pruned: Some(runs_pruned),
            dedupe_entries_dropped: Some(dedupe_dropped),
            compacted: false,
            notes: Vec::new(),
        })
    }
}
