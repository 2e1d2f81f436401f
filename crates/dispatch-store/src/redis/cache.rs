//! The result cache in Redis: one string per entry, plus the `cache:expiry` sorted set that
//! lets a sweep find the entries due by the injected clock.
//!
//! The sorted set is the truth about expiry for deletes: every put writes the entry and its
//! score in one MULTI/EXEC, so the score always equals the `expires_ms` stored in the entry,
//! and a delete only happens when the score says the entry is due. That guard keeps an entry
//! that another process refreshed between our read and our delete.

use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use super::{RedisStore, backend, from_json, to_json};
use crate::StoreResult;
use crate::cache::{CacheHit, CacheScope, ResultCache, remaining};

/// The longest native TTL given to Redis (100 years); a longer one is left to our own expiry,
/// since Redis refuses expiry times past its range.
const NATIVE_TTL_MAX_MS: u64 = 100 * 365 * 24 * 3600 * 1000;

/// How many due entries one sweep script drops, so that no script blocks Redis for long.
const SWEEP_BATCH: usize = 500;

/// Drop one entry if the expiry set says it is due. KEYS: entry, cache:expiry. ARGV: now.
const DROP_IF_DUE: &str = r#"
local score = redis.call('ZSCORE', KEYS[2], KEYS[1])
if score and tonumber(score) <= tonumber(ARGV[1]) then
  redis.call('DEL', KEYS[1])
  redis.call('ZREM', KEYS[2], KEYS[1])
  return 1
end
return 0
"#;

/// Drop up to ARGV[2] entries due at ARGV[1]. KEYS: cache:expiry. Returns how many entries
/// were deleted (those Redis already expired natively are only unlisted) and how many were
/// due. The entry names come from the sorted set, not KEYS: fine on a single Redis, and the
/// reason the store does not support Redis Cluster.
const SWEEP: &str = r#"
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
local dropped = 0
for _, key in ipairs(due) do
  dropped = dropped + redis.call('DEL', key)
  redis.call('ZREM', KEYS[1], key)
end
return {dropped, #due}
"#;

/// What a cache entry's string holds.
#[derive(Serialize, Deserialize)]
struct Entry {
    value: String,
    written_ms: u64,
    /// The first millisecond at which the entry is no longer served; `u64::MAX` is never.
    expires_ms: u64,
}

/// A TTL in milliseconds; one too long for a u64 means "never expires" in practice.
fn ttl_ms(ttl: Duration) -> u64 {
    u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX)
}

/// Operation names carry the scope but never the key: http_request keys include the request's
/// headers, which may hold credentials, and these names end up in error messages and logs.
fn scope_name(scope: &CacheScope) -> String {
    match scope {
        CacheScope::Shared => "shared".to_string(),
        CacheScope::Session { session } => format!("session {session}"),
    }
}

impl RedisStore {
    pub(super) fn cache_key(&self, scope: &CacheScope, key: &str) -> String {
        let hash = blake3::hash(key.as_bytes()).to_hex();
        match scope {
            CacheScope::Shared => self.keys.cache_shared(&hash),
            CacheScope::Session { session } => self.keys.cache_session(session, &hash),
        }
    }
}

#[async_trait]
impl ResultCache for RedisStore {
    async fn cache_get(&self, scope: &CacheScope, key: &str) -> StoreResult<Option<CacheHit>> {
        let now = self.clock.now_ms();
        let name = self.cache_key(scope, key);
        let op = || format!("read the result cache ({})", scope_name(scope));
        let mut conn = self.connection().await?;
        let text: Option<String> = ::redis::cmd("GET")
            .arg(&name)
            .query_async(&mut conn)
            .await
            .map_err(backend(op()))?;
        let Some(text) = text else {
            self.cache_counters.miss();
            return Ok(None);
        };
        let entry: Entry = from_json(&text, "cache entry")?;
        if entry.expires_ms <= now {
            // Expiry on read, as in the other backends: the entry can never be served again.
            let _: i64 = ::redis::cmd("EVAL")
                .arg(DROP_IF_DUE)
                .arg(2)
                .arg(&name)
                .arg(self.keys.cache_expiry())
                .arg(now)
                .query_async(&mut conn)
                .await
                .map_err(backend(op()))?;
            self.cache_counters.miss();
            return Ok(None);
        }
        self.cache_counters.hit();
        Ok(Some(CacheHit {
            value: entry.value,
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
        let ttl = ttl_ms(ttl);
        let entry = Entry {
            value: value.to_string(),
            written_ms: now,
            expires_ms: now.saturating_add(ttl),
        };
        let name = self.cache_key(scope, key);
        let mut pipe = ::redis::pipe();
        pipe.atomic();
        let set = pipe.cmd("SET").arg(&name).arg(to_json(&entry)?);
        if ttl <= NATIVE_TTL_MAX_MS {
            // Redis cannot express a zero TTL; 1 ms is as good, our own check already refuses it.
            set.arg("PX").arg(ttl.max(1));
        }
        set.ignore();
        if entry.expires_ms == u64::MAX {
            // Never due: a sweep has nothing to find (this also unlists an earlier finite entry).
            pipe.cmd("ZREM").arg(self.keys.cache_expiry()).arg(&name);
        } else {
            pipe.cmd("ZADD")
                .arg(self.keys.cache_expiry())
                .arg(entry.expires_ms)
                .arg(&name);
        }
        pipe.ignore();
        let mut conn = self.connection().await?;
        pipe.query_async::<()>(&mut conn)
            .await
            .map_err(backend(format!(
                "write the result cache ({})",
                scope_name(scope)
            )))
    }

    async fn cache_remove(&self, scope: &CacheScope, key: &str) -> StoreResult<()> {
        let name = self.cache_key(scope, key);
        let mut conn = self.connection().await?;
        ::redis::pipe()
            .atomic()
            .cmd("DEL")
            .arg(&name)
            .ignore()
            .cmd("ZREM")
            .arg(self.keys.cache_expiry())
            .arg(&name)
            .ignore()
            .query_async::<()>(&mut conn)
            .await
            .map_err(backend(format!(
                "remove from the result cache ({})",
                scope_name(scope)
            )))
    }

    async fn cache_sweep(&self) -> StoreResult<u64> {
        let now = self.clock.now_ms();
        let mut conn = self.connection().await?;
        let mut dropped: u64 = 0;
        loop {
            let (deleted, due): (u64, usize) = ::redis::cmd("EVAL")
                .arg(SWEEP)
                .arg(1)
                .arg(self.keys.cache_expiry())
                .arg(now)
                .arg(SWEEP_BATCH)
                .query_async(&mut conn)
                .await
                .map_err(backend("sweep the result cache"))?;
            dropped += deleted;
            if due < SWEEP_BATCH {
                return Ok(dropped);
            }
        }
    }
}
