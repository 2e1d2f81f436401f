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
    /// SQLite: the bytes of each table with its indexes (the file's pages, from `dbstat`);
    /// left out for the other backends.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes_by_table: Option<std::collections::BTreeMap<String, u64>>,
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

/// How often a long-running process (the daemon) drops expired cache entries; reads never
/// serve them anyway, so this only bounds how much dead data the store keeps.
pub const SWEEP_EVERY: Duration = Duration::from_secs(10 * 60);

/// Drop expired cache entries every `every`, starting one period from now, until the returned
/// task is aborted. A failed sweep is reported through `on_error` and retried next period: a
/// store that is down now may be back then.
pub fn spawn_sweeper(
    cache: std::sync::Arc<dyn crate::ResultCache>,
    every: Duration,
    on_error: impl Fn(crate::StoreError) + Send + 'static,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            if let Err(e) = cache.cache_sweep().await {
                on_error(e);
            }
        }
    })
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
mod sweeper_tests {
    use std::sync::Arc;
    use std::time::Duration;

    use crate::memory::MemoryStore;
    use crate::{CacheScope, Maintenance, ManualClock, ResultCache};

    #[tokio::test(start_paused = true)]
    async fn the_sweeper_drops_expired_entries_each_period() {
        let clock = Arc::new(ManualClock::at(1_000));
        let store = Arc::new(MemoryStore::with_clock(clock.clone()));
        let scope = CacheScope::Shared;
        store
            .cache_put(&scope, "old", "v", Duration::from_secs(1))
            .await
            .unwrap();
        store
            .cache_put(&scope, "new", "v", Duration::from_secs(3600))
            .await
            .unwrap();
        clock.advance(2_000);
        let sweeper = super::spawn_sweeper(store.clone(), Duration::from_secs(60), |e| {
            panic!("sweep failed: {e}")
        });
        let counts = || async {
            let c = store.stats().await.unwrap().cache_entries;
            (c.live, c.expired)
        };
        tokio::time::sleep(Duration::from_secs(59)).await;
        assert_eq!(
            counts().await,
            (1, 1),
            "nothing swept before the first period"
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(
            counts().await,
            (1, 0),
            "the expired entry is gone, the live one stays"
        );
        sweeper.abort();
    }
}
