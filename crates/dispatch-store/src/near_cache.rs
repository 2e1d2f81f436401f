//! The in-process tier in front of the shared (Redis) result cache (issue 3 §4).
//!
//! A repeated fetch in one process should not cost a network round trip, so recent entries
//! are kept in memory for a short while. The near copy is trusted for at most [`NEAR_TTL`]
//! (and never past the entry's own expiry): another process may refresh or drop the shared
//! entry, and this bounds how long this process can miss that. Within the 30-minute freshness
//! contract a copy up to 30 s behind is still the same answer; the age a hit reports is the
//! entry's real age, counted from when it was written to the shared tier.
//!
//! Bounded by entry count and bytes; the oldest insertion is evicted first.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use crate::{CacheHit, CacheScope, Clock};

/// How long a near copy is served without asking the shared tier.
pub const NEAR_TTL: Duration = Duration::from_secs(30);
/// At most this many entries …
pub const NEAR_MAX_ENTRIES: usize = 1024;
/// … and this many bytes of values.
pub const NEAR_MAX_BYTES: usize = 64 * 1024 * 1024;

type Key = (CacheScope, String);

#[derive(Debug)]
struct Entry {
    value: Arc<str>,
    /// When the shared entry was written (its age counts from here).
    written_ms: u64,
    /// When this near copy stops being served.
    until_ms: u64,
    /// Insertion number, to tell a stale queue slot from the live one.
    seq: u64,
}

#[derive(Debug, Default)]
struct State {
    entries: HashMap<Key, Entry>,
    /// Insertion order for eviction: (key, seq); slots whose seq no longer matches are stale.
    order: VecDeque<(Key, u64)>,
    bytes: usize,
    next_seq: u64,
}

/// A small, bounded, time-limited map of recent cache entries.
#[derive(Debug)]
pub struct NearCache {
    clock: Arc<dyn Clock>,
    state: Mutex<State>,
    max_entries: usize,
    max_bytes: usize,
}

impl NearCache {
    pub fn new(clock: Arc<dyn Clock>) -> NearCache {
        NearCache::with_limits(clock, NEAR_MAX_ENTRIES, NEAR_MAX_BYTES)
    }

    pub fn with_limits(clock: Arc<dyn Clock>, max_entries: usize, max_bytes: usize) -> NearCache {
        NearCache {
            clock,
            state: Mutex::default(),
            max_entries,
            max_bytes,
        }
    }

    /// A copy still within its near lifetime.
    pub fn get(&self, scope: &CacheScope, key: &str) -> Option<CacheHit> {
        let now = self.clock.now_ms();
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let k = (scope.clone(), key.to_string());
        match state.entries.get(&k) {
            Some(e) if now < e.until_ms => Some(CacheHit {
                value: e.value.to_string(),
                age_ms: now.saturating_sub(e.written_ms),
                expires_in_ms: e.until_ms - now,
                scope: scope.clone(),
            }),
            Some(_) => {
                if let Some(e) = state.entries.remove(&k) {
                    state.bytes -= e.value.len();
                }
                None
            }
            None => None,
        }
    }

    /// Keep a copy of an entry that is `age_ms` old and expires `ttl_left` from now.
    pub fn put(
        &self,
        scope: &CacheScope,
        key: &str,
        value: &str,
        age_ms: u64,
        ttl_left: Option<Duration>,
    ) {
        if value.len() > self.max_bytes / 4 || self.max_entries == 0 {
            return; // one huge entry would flush everything else
        }
        let now = self.clock.now_ms();
        let near = u64::try_from(NEAR_TTL.as_millis()).unwrap_or(u64::MAX);
        let left = ttl_left.map_or(near, |t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX));
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let seq = state.next_seq;
        state.next_seq += 1;
        let k = (scope.clone(), key.to_string());
        let entry = Entry {
            value: Arc::from(value),
            written_ms: now.saturating_sub(age_ms),
            until_ms: now.saturating_add(near.min(left)),
            seq,
        };
        state.bytes += value.len();
        if let Some(old) = state.entries.insert(k.clone(), entry) {
            state.bytes -= old.value.len();
        }
        state.order.push_back((k, seq));
        while state.entries.len() > self.max_entries || state.bytes > self.max_bytes {
            let Some((key, seq)) = state.order.pop_front() else {
                break;
            };
            if state.entries.get(&key).is_some_and(|e| e.seq == seq)
                && let Some(e) = state.entries.remove(&key)
            {
                state.bytes -= e.value.len();
            }
        }
        // Stale slots (replaced keys) would otherwise pile up under a hot key.
        if state.order.len() > 4 * self.max_entries.max(16) {
            let State { entries, order, .. } = &mut *state;
            order.retain(|(k, s)| entries.get(k).is_some_and(|e| e.seq == *s));
        }
    }

    pub fn remove(&self, scope: &CacheScope, key: &str) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(e) = state.entries.remove(&(scope.clone(), key.to_string())) {
            state.bytes -= e.value.len();
        }
    }

    pub fn len(&self) -> usize {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entries
            .len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ManualClock;

    fn clock() -> Arc<ManualClock> {
        Arc::new(ManualClock::at(1_000_000))
    }

    #[test]
    fn a_copy_is_served_for_the_near_ttl_with_its_real_age() {
        let c = clock();
        let near = NearCache::new(c.clone());
        near.put(&CacheScope::Shared, "k", "v", 5_000, None);
        let hit = near.get(&CacheScope::Shared, "k").unwrap();
        assert_eq!((hit.value.as_str(), hit.age_ms), ("v", 5_000));
        c.advance(29_000);
        assert_eq!(near.get(&CacheScope::Shared, "k").unwrap().age_ms, 34_000);
        c.advance(1_000);
        assert_eq!(near.get(&CacheScope::Shared, "k"), None);
        assert!(near.is_empty(), "an expired copy is dropped on read");
    }

    #[test]
    fn never_past_the_entrys_own_expiry() {
        let c = clock();
        let near = NearCache::new(c.clone());
        near.put(
            &CacheScope::Shared,
            "k",
            "v",
            0,
            Some(Duration::from_secs(2)),
        );
        c.advance(1_999);
        assert!(near.get(&CacheScope::Shared, "k").is_some());
        c.advance(1);
        assert_eq!(near.get(&CacheScope::Shared, "k"), None);
    }

    #[test]
    fn scopes_do_not_see_each_other() {
        let near = NearCache::new(clock());
        let s1 = CacheScope::Session {
            session: "s1".into(),
        };
        let s2 = CacheScope::Session {
            session: "s2".into(),
        };
        near.put(&s1, "k", "mine", 0, None);
        assert!(near.get(&s2, "k").is_none());
        assert!(near.get(&CacheScope::Shared, "k").is_none());
        assert_eq!(near.get(&s1, "k").unwrap().value, "mine");
        near.remove(&s1, "k");
        assert!(near.get(&s1, "k").is_none());
    }

    #[test]
    fn bounded_by_entries_and_bytes_oldest_first() {
        let near = NearCache::with_limits(clock(), 3, 100);
        for k in ["a", "b", "c", "d"] {
            near.put(&CacheScope::Shared, k, "x", 0, None);
        }
        assert_eq!(near.len(), 3);
        assert!(near.get(&CacheScope::Shared, "a").is_none());
        assert!(near.get(&CacheScope::Shared, "d").is_some());
        // A replaced key keeps one entry and its latest value; bytes stay counted right.
        for _ in 0..100 {
            near.put(&CacheScope::Shared, "d", "yy", 0, None);
        }
        assert_eq!(near.len(), 3);
        assert_eq!(near.get(&CacheScope::Shared, "d").unwrap().value, "yy");
        let big = "z".repeat(24);
        for k in ["e", "f", "g", "h"] {
            near.put(&CacheScope::Shared, k, &big, 0, None);
        }
        // 100 bytes hold at most four 24-byte values.
        assert!(near.len() <= 4);
        assert!(near.get(&CacheScope::Shared, "h").is_some());
        // One value over a quarter of the budget is not kept at all.
        near.put(&CacheScope::Shared, "huge", &"q".repeat(26), 0, None);
        assert!(near.get(&CacheScope::Shared, "huge").is_none());
    }
}
