//! The shared store (DESIGN §7): sessions, the result cache and the error memory in Redis, so
//! that workers on many machines see the same state.
//!
//! # Key layout
//!
//! This table is the one place that names the keys; [`Keys`] builds every one of them. Every
//! key starts with the store's prefix, `td:v1:` unless [`RedisStore::connect_with_prefix`] says
//! otherwise (tests use a random one per fixture).
//!
//! | key (after the prefix)          | type    | holds |
//! |---------------------------------|---------|-------|
//! | `session:{sid}`                 | hash    | `todos` (JSON list, absent until a round sets one); `pending_next`, `journal_next` (insertion counters) |
//! | `marked:{sid}`                  | set     | names of the tools whose schema the model has seen |
//! | `run:{sid}:{run}`               | hash    | `rounds`, `write_epoch`, `turn_allow_all` (`0`/`1`), `dedupe_next` (insertion counter), `wiped_at` and `touched:<path>` (write epochs of the last round that touched anything / that path) |
//! | `dedupe:{sid}:{run}`            | hash    | dedupe key → `DedupeEntry` JSON plus `stored_at` (the write epoch it was stored at) |
//! | `dedupe-order:{sid}:{run}`      | zset    | dedupe key scored by its insertion number (a replaced key keeps its number) |
//! | `transcript:{sid}`              | list    | `TranscriptEntry` JSON, in commit order |
//! | `events:{sid}`                  | list    | event JSON; the element at index `i` has sequence number `i + 1` |
//! | `events:{sid}` (pub/sub channel)| channel | `{"first_seq": n, "events": […]}` once per committed round, its events numbered from `n`, published by the commit |
//! | `pending:{sid}`                 | hash    | task hash → `PendingTask` JSON |
//! | `pending-order:{sid}`           | zset    | task hash scored by its first insertion (a replaced task keeps its place) |
//! | `journal:{sid}`                 | hash    | journal entry id → `JournalEntry` JSON |
//! | `journal-order:{sid}`           | zset    | entry id scored by its insertion (a replaced entry moves last) |
//! | `cache:shared:{h}`              | string  | `{"value", "written_ms", "expires_ms"}`; `h` is the blake3 hex of the cache key |
//! | `cache:session:{sid}:{h}`       | string  | the same, readable by that session only |
//! | `cache:expiry`                  | zset    | names of the cache keys above, scored by `expires_ms` |
//! | `errors:id:{id}`                | string  | `ErrorRecord` JSON |
//! | `errors:expiry`                 | zset    | record id scored by the time it is forgotten |
//! | `errors:ids`                    | zset    | record ids, all scored 0, for prefix lookup with `ZRANGEBYLEX` |
//! | `errors:tool:{tool}`            | set     | ids of the records of that tool |
//! | `errors:gram:{abc}`             | set     | ids of the records whose lower-cased text contains those three characters |
//! | `conversation:{sid}`            | list    | `ConversationEntry` JSON (the agent loop's messages), in order |
//! | `legs:{sid}`                    | hash    | leg id → `LegRecord` JSON (background legs the session started) |
//! | `secrets`                       | hash    | secret name → hex of the 24-byte nonce followed by the ciphertext |
//! | `secrets:generation`            | string  | a random number replaced in the same MULTI/EXEC as every change to `secrets` |
//! | `approved-chats`                | hash    | `{platform}:{id}` (both escaped) → `ApprovedChat` JSON (chats a person approved for the chatbot tools) |
//!
//! Every `{…}` part is escaped by [`escape`]: `%` becomes `%25` and `:` becomes `%3A`, so no
//! part contains the `:` separator and `("a:b", "c")` and `("a", "b:c")` name different keys.
//! Cache keys are hashed instead: they can be long and may carry request headers with
//! credentials, which have no place in key names (they show up in `SCAN`, `MONITOR`, slow logs).
//!
//! # Secrets
//!
//! Secret values are sealed with a key kept in a local key file, never in Redis: by default
//! `$XDG_DATA_HOME/tooldispatch/redis.key` (or `~/.local/share/tooldispatch/redis.key`), or the
//! file given to [`RedisStore::with_secret_key_file`]. It is created on first use, so every
//! machine that shares the Redis needs a copy of the same key file (mode 0600), made before
//! it first stores a secret; a machine with another key cannot read the secrets and
//! overwrites them with values others cannot read.
//!
//! # Time
//!
//! TTLs follow the injected [`Clock`], which Redis does not know: every entry stores its own
//! expiry time and reads check it against the clock, and the `*:expiry` sorted sets let a sweep
//! find what is due. Cache entries also get a native `PX` equal to their TTL so that Redis frees
//! them even if nobody sweeps; an entry Redis dropped that way is not counted by `cache_sweep`.
//!
//! # Deployment
//!
//! Needs Redis 6.2 or later (`ZMSCORE`) on a single primary. Redis Cluster is not supported:
//! a round commit writes several keys of a session in one script, and the cache and error
//! sweeps touch keys they find in a sorted set.

use std::borrow::Cow;
use std::fmt::Display;
use std::sync::Arc;
use std::time::Duration;

use ::redis::aio::{ConnectionManager, ConnectionManagerConfig};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::OnceCell;

use crate::clock::{Clock, SystemClock};
use crate::{StoreError, StoreResult};

mod agents;
mod cache;
mod chat;
mod chatbots;
mod errors;
mod maintenance;
mod secrets;
mod session;

#[cfg(test)]
pub(crate) mod testing;

#[cfg(test)]
mod tests;

/// The key prefix of a store opened by URL.
pub const DEFAULT_PREFIX: &str = "td:v1:";

/// How long one command may take. Longer than the client's 500 ms default: a round commit
/// carries the round's results, images included, and may be megabytes over a slow link.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(5);

/// Connection attempts after the first fails (100 ms, then 200 ms apart). The client's default
/// of six takes about ten seconds to give up, and an outage must surface quickly: the caller
/// falls back to the local store (DESIGN §7), and the next call tries Redis again.
const CONNECT_RETRIES: usize = 2;

/// A [`crate::Store`] kept in Redis and shared by every process that uses the same prefix.
pub struct RedisStore {
    client: ::redis::Client,
    /// Made on first use, so that a store can be opened outside a runtime (`open` is sync);
    /// a failed attempt is not remembered and the next call tries again.
    connection: OnceCell<ConnectionManager>,
    keys: Keys,
    /// What "now" is for TTLs (replaced in tests).
    clock: Arc<dyn Clock>,
    /// Cache hits and misses since this store was opened (for `stats`).
    cache_counters: crate::maintenance::CacheCounters,
    /// The local key file that seals the shared secrets (see "Secrets" above).
    secrets: crate::secrets::KeyFile,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("prefix", &self.keys.prefix)
            .finish_non_exhaustive()
    }
}

impl RedisStore {
    /// Connect to `url` (`redis://host:port/db`) with the default key prefix.
    pub async fn connect(url: &str, clock: Arc<dyn Clock>) -> StoreResult<RedisStore> {
        RedisStore::connect_with_prefix(url, DEFAULT_PREFIX, clock).await
    }

    /// Connect to `url` with every key under `prefix` (separate stores on one Redis).
    pub async fn connect_with_prefix(
        url: &str,
        prefix: &str,
        clock: Arc<dyn Clock>,
    ) -> StoreResult<RedisStore> {
        let store = RedisStore::lazy(url, prefix, clock)?;
        store.connection().await?;
        Ok(store)
    }

    /// A store for `url` that connects on first use; only the URL is checked now.
    pub fn lazy(url: &str, prefix: &str, clock: Arc<dyn Clock>) -> StoreResult<RedisStore> {
        let client = ::redis::Client::open(url).map_err(|e| StoreError::BadUrl {
            url: url.to_string(),
            reason: e.to_string(),
        })?;
        Ok(RedisStore {
            client,
            connection: OnceCell::new(),
            keys: Keys {
                prefix: prefix.to_string(),
            },
            clock,
            cache_counters: Default::default(),
            secrets: crate::secrets::KeyFile::new(secrets::default_key_path()),
        })
    }

    /// Seal secrets with the key in `path` instead of the default key file.
    pub fn with_secret_key_file(mut self, path: impl Into<std::path::PathBuf>) -> RedisStore {
        self.secrets = crate::secrets::KeyFile::new(path.into());
        self
    }

    /// [`RedisStore::lazy`] with the default prefix and the system clock (for `open`).
    pub fn open(url: &str) -> StoreResult<RedisStore> {
        RedisStore::lazy(url, DEFAULT_PREFIX, Arc::new(SystemClock))
    }

    /// A handle on the shared connection (cheap: the manager is reference-counted and
    /// multiplexes every caller over one socket, reconnecting when it drops).
    async fn connection(&self) -> StoreResult<ConnectionManager> {
        let manager = self
            .connection
            .get_or_try_init(|| {
                let config = ConnectionManagerConfig::new()
                    .set_response_timeout(Some(RESPONSE_TIMEOUT))
                    .set_number_of_retries(CONNECT_RETRIES);
                ConnectionManager::new_with_config(self.client.clone(), config)
            })
            .await
            .map_err(|e| classify_error(e, "cannot connect to Redis".to_string()))?;
        Ok(manager.clone())
    }
}

/// The name of every key and channel the store uses (see the table at the top of this file).
#[derive(Clone, Debug)]
struct Keys {
    prefix: String,
}

impl Keys {
    fn key(&self, kind: &str, parts: &[&str]) -> String {
        let mut key = format!("{}{kind}", self.prefix);
        for part in parts {
            key.push(':');
            key.push_str(&escape(part));
        }
        key
    }

    fn session(&self, sid: &str) -> String {
        self.key("session", &[sid])
    }
    fn marked(&self, sid: &str) -> String {
        self.key("marked", &[sid])
    }
    fn run(&self, sid: &str, run: &str) -> String {
        self.key("run", &[sid, run])
    }
    fn dedupe(&self, sid: &str, run: &str) -> String {
        self.key("dedupe", &[sid, run])
    }
    fn dedupe_order(&self, sid: &str, run: &str) -> String {
        self.key("dedupe-order", &[sid, run])
    }
    fn conversation(&self, sid: &str) -> String {
        self.key("conversation", &[sid])
    }
    fn legs(&self, sid: &str) -> String {
        self.key("legs", &[sid])
    }
    fn transcript(&self, sid: &str) -> String {
        self.key("transcript", &[sid])
    }
    /// Both the event list and the pub/sub channel its events are published on.
    fn events(&self, sid: &str) -> String {
        self.key("events", &[sid])
    }
    fn pending(&self, sid: &str) -> String {
        self.key("pending", &[sid])
    }
    fn pending_order(&self, sid: &str) -> String {
        self.key("pending-order", &[sid])
    }
    fn journal(&self, sid: &str) -> String {
        self.key("journal", &[sid])
    }
    fn journal_order(&self, sid: &str) -> String {
        self.key("journal-order", &[sid])
    }
    fn cache_shared(&self, hash: &str) -> String {
        self.key("cache:shared", &[hash])
    }
    fn cache_session(&self, sid: &str, hash: &str) -> String {
        self.key("cache:session", &[sid, hash])
    }
    fn cache_expiry(&self) -> String {
        self.key("cache:expiry", &[])
    }
    fn error(&self, id: &str) -> String {
        self.key("errors:id", &[id])
    }
    fn error_expiry(&self) -> String {
        self.key("errors:expiry", &[])
    }
    fn error_ids(&self) -> String {
        self.key("errors:ids", &[])
    }
    fn error_tool(&self, tool: &str) -> String {
        self.key("errors:tool", &[tool])
    }
    fn error_gram(&self, gram: &str) -> String {
        self.key("errors:gram", &[gram])
    }
    fn secrets(&self) -> String {
        self.key("secrets", &[])
    }
    fn secrets_generation(&self) -> String {
        self.key("secrets:generation", &[])
    }
    fn approved_chats(&self) -> String {
        self.key("approved-chats", &[])
    }
}

/// A key part without `:`: `%` and `:` are percent-encoded, which keeps the mapping one-to-one
/// while leaving ordinary ids readable in `redis-cli`.
fn escape(part: &str) -> Cow<'_, str> {
    if !part.contains([':', '%']) {
        return Cow::Borrowed(part);
    }
    Cow::Owned(part.replace('%', "%25").replace(':', "%3A"))
}

/// A Redis failure as a store error, naming what was being done.
fn backend(op: impl Display) -> impl FnOnce(::redis::RedisError) -> StoreError {
    move |e| classify_error(e, format!("redis: {op}"))
}

/// `Unavailable` when Redis could not be reached or stopped answering (refused, reset,
/// dropped, timed out, any IO failure), so that a caller can fall back to a local store
/// (DESIGN §7); `Backend` for an answer Redis gave, which another store would not fix.
fn classify_error(e: ::redis::RedisError, op: String) -> StoreError {
    let unreachable =
        e.is_io_error() || e.is_connection_refusal() || e.is_timeout() || e.is_connection_dropped();
    if unreachable {
        StoreError::Unavailable(format!("{op}: {e}"))
    } else {
        StoreError::Backend(format!("{op}: {e}"))
    }
}

fn to_json<T: Serialize + ?Sized>(value: &T) -> StoreResult<String> {
    serde_json::to_string(value)
        .map_err(|e| StoreError::Backend(format!("redis: cannot encode JSON: {e}")))
}

fn from_json<T: DeserializeOwned>(text: &str, what: &str) -> StoreResult<T> {
    serde_json::from_str(text).map_err(|e| StoreError::Corrupt(format!("redis: {what}: {e}")))
}

/// A u64 stored as decimal text (hash fields); absent means 0.
fn parse_u64(text: Option<&str>, what: &str) -> StoreResult<u64> {
    text.map_or(Ok(0), |text| {
        text.parse()
            .map_err(|e| StoreError::Corrupt(format!("redis: {what} {text:?}: {e}")))
    })
}
