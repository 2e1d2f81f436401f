//! Store housekeeping (`tooldispatch store stats` / `store gc`): what a store holds, and
//! dropping what no round will read again.

use std::time::Duration;

use async_trait::async_trait;
use serde::Serialize;

use crate::StoreResult;

/// Counts and sizes of what a store holds.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct StoreStats {
    /// `memory`, `sqlite` or `redis`.
    pub backend: &'static str,
    pub sessions: u64,
    pub runs: u64,
    pub transcript_entries: u64,
    pub events: u64,
    pub pending_tasks: u64,
    pub open_journal_entries: u64,
    pub dedupe_entries: u64,
    pub cache_entries: EntryCounts,
    pub error_records: EntryCounts,
    /// SQLite: the database file plus its `-wal`; Redis: the server's `used_memory` (the whole
    /// database, not only this store's keys); memory: null.
    pub bytes: Option<u64>,
    /// Cache lookups answered by this process since it opened the store (the counters live in
    /// process memory: another process's lookups, or an earlier run's, are not counted).
    pub cache_hits: u64,
    pub cache_misses: u64,
    /// `hits / (hits + misses)`, or null before the first lookup.
    pub cache_hit_rate: Option<f64>,
}

/// Entries that are still served, and expired ones a sweep has not dropped yet.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct EntryCounts {
    pub live: u64,
    pub expired: u64,
}

/// What `gc` may drop.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GcPolicy {
    /// A run whose last commit is older than this loses its dedupe entries: a turn that old
    /// is over, and its remembered results only take space.
    pub finished_runs_older_than: Duration,
}

impl Default for GcPolicy {
    fn default() -> Self {
        GcPolicy {
            finished_runs_older_than: Duration::from_secs(7 * 24 * 3600),
        }
    }
}

/// What one `gc` dropped.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct GcReport {
    pub backend: &'static str,
    pub cache_entries_swept: u64,
    pub error_records_dropped: u64,
    /// Runs whose dedupe entries were dropped; null when the backend cannot tell a run's age.
    pub runs_pruned: Option<u64>,
    /// Dedupe entries dropped with those runs; null when runs were not pruned.
    pub dedupe_entries_dropped: Option<u64>,
    /// SQLite only: the WAL was checkpointed (and truncated) and `PRAGMA optimize` ran.
    pub compacted: bool,
    /// Why something was skipped.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// Housekeeping every backend offers.
#[async_trait]
pub trait Maintenance: Send + Sync {
    async fn stats(&self) -> StoreResult<StoreStats>;
    async fn gc(&self, policy: &GcPolicy) -> StoreResult<GcReport>;
}

/// The duration as milliseconds, saturating (a policy longer than u64 ms prunes nothing).
pub(crate) fn duration_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Counts of cache lookups, kept by each backend's `cache_get`.
#[derive(Debug, Default)]
pub(crate) struct CacheCounters {
    hits: std::sync::atomic::AtomicU64,
    misses: std::sync::atomic::AtomicU64,
}

impl CacheCounters {
    /// Count one answered lookup (a failed lookup answered nothing and is neither).
    pub(crate) fn record(&self, hit: bool) {
        if hit { self.hit() } else { self.miss() }
    }

    // Relaxed: the counters are statistics; nothing is ordered by them.
    pub(crate) fn hit(&self) {
        self.hits.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    pub(crate) fn miss(&self) {
        self.misses
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// Fill the hit and miss fields of `stats`.
    pub(crate) fn fill(&self, stats: &mut StoreStats) {
        use std::sync::atomic::Ordering;
        stats.cache_hits = self.hits.load(Ordering::Relaxed);
        stats.cache_misses = self.misses.load(Ordering::Relaxed);
        let total = stats.cache_hits + stats.cache_misses;
        stats.cache_hit_rate = (total > 0).then(|| stats.cache_hits as f64 / total as f64);
    }
}

#[cfg(test)]
#[path = "maintenance_suite_tests.rs"]
mod maintenance_suite_tests;
