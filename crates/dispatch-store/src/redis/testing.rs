//! Redis for tests: the machine's Redis may be shared, so every fixture works under a prefix of
//! its own and deletes exactly its own keys afterwards (never FLUSHDB).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::RedisStore;
use crate::Clock;

/// Where the tests expect Redis.
pub(crate) const ADDRESS: &str = "127.0.0.1:6379";

/// The URL of [`ADDRESS`].
pub(crate) const URL: &str = "redis://127.0.0.1:6379/";

/// Whether a Redis test must skip: says why where the person running the tests sees it, or
/// panics when `TOOLDISPATCH_REQUIRE_REDIS=1` (CI sets it, so a Redis that failed to start
/// cannot pass as skipped tests).
pub(crate) fn unavailable() -> bool {
    let Err(e) = ping() else {
        return false;
    };
    dispatch_testkit::skip(
        dispatch_testkit::Need::Redis,
        &format!("Redis is not reachable at {ADDRESS} ({e})"),
    );
    true
}

fn sync_connection() -> ::redis::RedisResult<::redis::Connection> {
    ::redis::Client::open(URL)?.get_connection_with_timeout(Duration::from_secs(1))
}

fn ping() -> ::redis::RedisResult<()> {
    let mut conn = sync_connection()?;
    ::redis::cmd("PING").query::<String>(&mut conn)?;
    Ok(())
}

/// A prefix no other fixture uses, in this process or another one running at the same time.
pub(crate) fn unique_prefix() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!(
        "td:test:{}-{nanos:x}-{}:",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// Deletes every key under its prefix when dropped.
pub(crate) struct KeySweeper {
    prefix: String,
}

impl KeySweeper {
    /// A sweeper for keys a store under `prefix` wrote.
    pub(crate) fn for_prefix(prefix: String) -> KeySweeper {
        KeySweeper { prefix }
    }

    /// The keys under the prefix (SCAN, so a big shared database is not blocked).
    pub(crate) fn keys(&self) -> ::redis::RedisResult<Vec<String>> {
        let mut conn = sync_connection()?;
        let mut cursor: u64 = 0;
        let mut keys = Vec::new();
        loop {
            let (next, batch): (u64, Vec<String>) = ::redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(format!("{}*", self.prefix))
                .arg("COUNT")
                .arg(1000)
                .query(&mut conn)?;
            keys.extend(batch);
            if next == 0 {
                return Ok(keys);
            }
            cursor = next;
        }
    }

    fn sweep(&self) -> ::redis::RedisResult<()> {
        let keys = self.keys()?;
        let mut conn = sync_connection()?;
        for chunk in keys.chunks(500) {
            ::redis::cmd("DEL").arg(chunk).query::<i64>(&mut conn)?;
        }
        Ok(())
    }
}

impl Drop for KeySweeper {
    fn drop(&mut self) {
        if let Err(e) = self.sweep() {
            eprintln!("could not delete the test keys under {}: {e}", self.prefix);
        }
    }
}

/// A store under a fresh prefix, and the sweeper that deletes its keys (drop it after the
/// store).
pub(crate) fn store(clock: Arc<dyn Clock>) -> (RedisStore, KeySweeper) {
    let prefix = unique_prefix();
    let store = RedisStore::lazy(URL, &prefix, clock).unwrap();
    (store, KeySweeper::for_prefix(prefix))
}
