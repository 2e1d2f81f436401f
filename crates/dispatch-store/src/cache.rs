//! The 30-minute result cache (seed §5, DESIGN §4.3): entries with a TTL, per session or
//! shared across sessions, and an age on every hit so a result can say how old it is.

use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::StoreResult;

/// The seed's TTL for cached web results.
pub const CACHE_TTL: Duration = Duration::from_secs(30 * 60);

/// Who may read an entry.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum CacheScope {
    /// Only this session (search_web, http_request GET, anything sent with credentials).
    Session { session: String },
    /// Every session (fetch_page of a public page).
    Shared,
}

/// A cache hit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CacheHit {
    pub value: String,
    /// Milliseconds since the entry was written.
    pub age_ms: u64,
    /// Milliseconds until the entry expires (`u64::MAX`: never), so a copy kept nearer to
    /// the caller (the tiered store's in-process tier) never outlives it.
    pub expires_in_ms: u64,
    pub scope: CacheScope,
}

impl CacheHit {
    /// How the result says where it came from: `(cached 7 min ago, shared across sessions)`.
    pub fn note(&self) -> String {
        let secs = self.age_ms / 1000;
        let age = if secs < 60 {
            format!("{secs} s")
        } else if secs < 3600 {
            format!("{} min", secs / 60)
        } else {
            format!("{} h", secs / 3600)
        };
        let scope = match self.scope {
            CacheScope::Shared => "shared across sessions",
            CacheScope::Session { .. } => "this session",
        };
        format!("(cached {age} ago, {scope}; pass force=true for a fresh copy)")
    }
}

/// Milliseconds from `now_ms` to `expires_ms`; an entry that never expires stays `u64::MAX`.
pub(crate) fn remaining(expires_ms: u64, now_ms: u64) -> u64 {
    if expires_ms == u64::MAX {
        u64::MAX
    } else {
        expires_ms.saturating_sub(now_ms)
    }
}

/// The result cache. Keys are the canonical request (the caller builds them); an expired entry
/// is never returned.
#[async_trait]
pub trait ResultCache: Send + Sync {
    async fn cache_get(&self, scope: &CacheScope, key: &str) -> StoreResult<Option<CacheHit>>;
    /// Write or replace an entry; it expires `ttl` after now.
    async fn cache_put(
        &self,
        scope: &CacheScope,
        key: &str,
        value: &str,
        ttl: Duration,
    ) -> StoreResult<()>;
    async fn cache_remove(&self, scope: &CacheScope, key: &str) -> StoreResult<()>;
    /// Drop expired entries; returns how many were dropped.
    async fn cache_sweep(&self) -> StoreResult<u64>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hit_says_how_old_it_is_and_where_it_is_shared() {
        let hit = |age_ms, scope| CacheHit {
            value: String::new(),
            age_ms,
            expires_in_ms: 0,
            scope,
        };
        assert_eq!(
            hit(7 * 60_000 + 5, CacheScope::Shared).note(),
            "(cached 7 min ago, shared across sessions; pass force=true for a fresh copy)"
        );
        let own = CacheScope::Session {
            session: "s".into(),
        };
        assert_eq!(
            hit(42_000, own).note(),
            "(cached 42 s ago, this session; pass force=true for a fresh copy)"
        );
    }
}
