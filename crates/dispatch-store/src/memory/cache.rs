//! The memory store's result cache: entries by scope, then by key, behind their own mutex so a
//! cache read never waits for a round commit.

use std::collections::HashMap;
use std::sync::MutexGuard;
use std::time::Duration;

use async_trait::async_trait;

use super::MemoryStore;
use crate::cache::{CacheHit, CacheScope, ResultCache, remaining};
use crate::{StoreError, StoreResult};

/// The cached entries: by scope first, so a lookup borrows the key instead of building a tuple.
#[derive(Default)]
pub(super) struct CacheState {
    scopes: HashMap<CacheScope, HashMap<String, Entry>>,
}

struct Entry {
    value: String,
    written_ms: u64,
    /// The first millisecond at which the entry is no longer served.
    expires_ms: u64,
}

impl CacheState {
    /// Entries still served at `now`, and expired ones not yet dropped (for `stats`).
    pub(super) fn counts(&self, now: u64) -> crate::maintenance::EntryCounts {
        let mut counts = crate::maintenance::EntryCounts::default();
        for entry in self.scopes.values().flat_map(HashMap::values) {
            if entry.expires_ms > now {
                counts.live += 1;
            } else {
                counts.expired += 1;
            }
        }
        counts
    }

    fn remove(&mut self, scope: &CacheScope, key: &str) {
        if let Some(entries) = self.scopes.get_mut(scope) {
            entries.remove(key);
            // Every session leaves a scope behind; drop it once empty so they do not pile up.
            if entries.is_empty() {
                self.scopes.remove(scope);
            }
        }
    }
}

/// A TTL in milliseconds; one too long for a u64 means "never expires" in practice.
fn ttl_ms(ttl: Duration) -> u64 {
    u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX)
}

impl MemoryStore {
    pub(super) fn cache(&self) -> StoreResult<MutexGuard<'_, CacheState>> {
        // Same policy as the session state: a panic mid-update may have left the map
        // inconsistent, so refuse rather than serve from it.
        self.cache.lock().map_err(|_| {
            StoreError::Backend(
                "memory store: a thread panicked while using the result cache".to_string(),
            )
        })
    }
}

#[async_trait]
impl ResultCache for MemoryStore {
    async fn cache_get(&self, scope: &CacheScope, key: &str) -> StoreResult<Option<CacheHit>> {
        let now = self.clock.now_ms();
        let mut cache = self.cache()?;
        let Some(entry) = cache.scopes.get(scope).and_then(|entries| entries.get(key)) else {
            self.cache_counters.miss();
            return Ok(None);
        };
        if entry.expires_ms <= now {
            // Expiry on read, as in the SQLite backend: the entry can never be served again.
            cache.remove(scope, key);
            self.cache_counters.miss();
            return Ok(None);
        }
        self.cache_counters.hit();
        Ok(Some(CacheHit {
            value: entry.value.clone(),
            // A clock that stepped back reads as a fresh entry, not as an error.
            age_ms: now.saturating_sub(entry.written_ms),
            expires_in_ms: remaining(entry.expires_ms, now),
            scope: scope.clone(),
        }))
    }

    async fn cache_put(
        &self,
        scope: &CacheScope,
        key: &str,
        value: &str,
        ttl: Duration,
    ) -> StoreResult<()> {
        let now = self.clock.now_ms();
        let entry = Entry {
            value: value.to_string(),
            written_ms: now,
            expires_ms: now.saturating_add(ttl_ms(ttl)),
        };
        let mut cache = self.cache()?;
        cache
            .scopes
            .entry(scope.clone())
            .or_default()
            .insert(key.to_string(), entry);
        Ok(())
    }

    async fn cache_remove(&self, scope: &CacheScope, key: &str) -> StoreResult<()> {
        self.cache()?.remove(scope, key);
        Ok(())
    }

    async fn cache_sweep(&self) -> StoreResult<u64> {
        let now = self.clock.now_ms();
        let mut cache = self.cache()?;
        let mut dropped: u64 = 0;
        cache.scopes.retain(|_, entries| {
            let before = entries.len();
            entries.retain(|_, entry| entry.expires_ms > now);
            dropped += u64::try_from(before - entries.len()).unwrap_or(u64::MAX);
            !entries.is_empty()
        });
        Ok(dropped)
    }
}
