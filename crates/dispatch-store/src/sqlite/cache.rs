//! The SQLite store's result cache, in the `cache` table of migration 2.

use std::time::Duration;

use async_trait::async_trait;
use rusqlite::{OptionalExtension, params};

use super::{JobError, SqliteStore, clamp_ms};
use crate::StoreResult;
use crate::cache::{CacheHit, CacheScope, ResultCache};

/// The `scope` column's text: `shared` or `session:<id>`. The prefix keeps a session named
/// `shared` apart from the shared scope.
fn scope_text(scope: &CacheScope) -> String {
    match scope {
        CacheScope::Shared => "shared".to_string(),
        CacheScope::Session { session } => format!("session:{session}"),
    }
}

/// A TTL in milliseconds, clamped the same way: longer than SQLite can count means "never".
fn ttl_ms(ttl: Duration) -> i64 {
    i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX)
}

// Operation names carry the scope but never the key: http_request keys include the request's
// headers, which may hold credentials, and these names end up in error messages and logs.
#[async_trait]
impl ResultCache for SqliteStore {
    async fn cache_get(&self, scope: &CacheScope, key: &str) -> StoreResult<Option<CacheHit>> {
        let scope_column = scope_text(scope);
        let op = format!("read the result cache ({scope_column})");
        let (scope, key) = (scope.clone(), key.to_string());
        let now = clamp_ms(self.clock.now_ms());
        self.run(op, move |conn| {
            let stored: Option<(String, i64, i64)> = conn
                .prepare_cached(
                    "SELECT value, written_ms, expires_ms FROM cache WHERE scope = ?1 AND key = ?2",
                )?
                .query_row(params![scope_column, key], |row| {
                    Ok((row.get(0)?, row.get(1)?, row.get(2)?))
                })
                .optional()?;
            let Some((value, written_ms, expires_ms)) = stored else {
                return Ok(None);
            };
            if expires_ms <= now {
                // Expiry on read: the row can never be served again, so drop it now rather
                // than leave it for the sweep. The guard on expires_ms keeps a row that
                // another process refreshed meanwhile.
                conn.prepare_cached(
                    "DELETE FROM cache WHERE scope = ?1 AND key = ?2 AND expires_ms <= ?3",
                )?
                .execute(params![scope_column, key, now])?;
                return Ok(None);
            }
            // A clock that stepped back reads as a fresh entry, not as an error.
            let age_ms = u64::try_from(now.saturating_sub(written_ms)).unwrap_or(0);
            let expires_in_ms = if expires_ms == i64::MAX {
                u64::MAX
            } else {
                u64::try_from(expires_ms.saturating_sub(now)).unwrap_or(0)
            };
            Ok(Some(CacheHit {
                value,
                age_ms,
                expires_in_ms,
                scope,
            }))
        })
        .await
        .inspect(|hit| self.cache_counters.record(hit.is_some()))
    }

    async fn cache_put(
        &self,
        scope: &CacheScope,
        key: &str,
        value: &str,
        ttl: Duration,
    ) -> StoreResult<()> {
        let scope_column = scope_text(scope);
        let op = format!("write the result cache ({scope_column})");
        let (key, value) = (key.to_string(), value.to_string());
        let now = clamp_ms(self.clock.now_ms());
        let expires = now.saturating_add(ttl_ms(ttl));
        self.run(op, move |conn| -> Result<(), JobError> {
            conn.prepare_cached(
                "INSERT INTO cache (scope, key, value, written_ms, expires_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5)
                 ON CONFLICT (scope, key) DO UPDATE SET
                     value = excluded.value,
                     written_ms = excluded.written_ms,
                     expires_ms = excluded.expires_ms",
            )?
            .execute(params![scope_column, key, value, now, expires])?;
            Ok(())
        })
        .await
    }

    async fn cache_remove(&self, scope: &CacheScope, key: &str) -> StoreResult<()> {
        let scope_column = scope_text(scope);
        let op = format!("remove from the result cache ({scope_column})");
        let key = key.to_string();
        self.run(op, move |conn| -> Result<(), JobError> {
            conn.prepare_cached("DELETE FROM cache WHERE scope = ?1 AND key = ?2")?
                .execute(params![scope_column, key])?;
            Ok(())
        })
        .await
    }

    async fn cache_sweep(&self) -> StoreResult<u64> {
        let now = clamp_ms(self.clock.now_ms());
        self.run("sweep the result cache".to_string(), move |conn| {
            // Served by the cache_by_expiry index, so a sweep does not scan live entries.
            let dropped = conn
                .prepare_cached("DELETE FROM cache WHERE expires_ms <= ?1")?
                .execute(params![now])?;
            Ok(u64::try_from(dropped).unwrap_or(u64::MAX))
        })
        .await
    }
}
