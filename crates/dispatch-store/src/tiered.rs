//! Redis with a local fallback (DESIGN §7: "a Redis outage degrades to the local SQLite cache
//! with a warning event; it never fails a round").
//!
//! Every call goes to Redis unless an outage is known and its back-off window is still open.
//! A call that finds Redis unreachable ([`StoreError::Unavailable`]) is served by the local
//! SQLite store instead, and so is every call until the back-off ends (1 s, doubling up to
//! 60 s while Redis stays down). The first call after the window tries Redis again; if Redis
//! answers, the outage is over. Any answer from Redis counts, errors included: a `Conflict`
//! or a `Corrupt` is Redis speaking, and the local store would not make it right.
//!
//! What is written locally during an outage stays local: nothing is copied back to Redis
//! when it returns. A run whose round was loaded from one tier is committed to the same tier,
//! so that the round numbers the commit checks come from the same place.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use async_trait::async_trait;

use crate::agents::{AgentStore, ConversationEntry, LegRecord};
use crate::chatbots::{ApprovedChat, ApprovedChats};
use crate::near_cache::NearCache;
use crate::redis::RedisStore;
use crate::sqlite::SqliteStore;
use crate::{
    CacheHit, CacheScope, ChatHistory, ChatHit, Committed, ErrorClass, ErrorMemory, ErrorRecord,
    FileHistory, FileVersion, GcPolicy, GcReport, JournalEntry, Maintenance, NewFileVersion,
    PendingTask, ResultCache, RoundRecord, RunSnapshot, RunSummary, Secrets, SessionSnapshot,
    SessionStore, StoreError, StoreResult, StoreStats, TranscriptEntry, VersionQuery,
};
use crate::{Clock, SystemClock};

/// The first back-off after Redis was found unreachable.
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
/// The longest back-off: an outage that ends is noticed within a minute.
const MAX_BACKOFF: Duration = Duration::from_secs(60);
/// Loads whose commit is still to come are remembered per run; a round that fails between
/// the two never commits, so the map is emptied when it grows past this (a forgotten pin
/// only means that commit goes by the back-off rule instead).
const MAX_PINS: usize = 1024;

/// The bit set in the secrets generation the local tier answers with.
const LOCAL_GENERATION: u64 = 1 << 63;

/// A Redis store in front of a local SQLite store.
pub struct TieredStore {
    shared: Arc<RedisStore>,
    local: Arc<SqliteStore>,
    /// The Redis URL without credentials, for the notice.
    shared_name: String,
    state: Mutex<Health>,
    /// Recent cache entries in process memory, in front of both tiers.
    near: NearCache,
}

#[derive(Debug, Default)]
struct Health {
    /// `Some` while Redis is known to be unreachable.
    outage: Option<Outage>,
    /// The notice of the current outage, until someone takes it.
    notice: Option<String>,
    /// Which tier served the last `load` of a (session, run) not yet committed.
    pins: HashMap<(String, String), Tier>,
}

#[derive(Debug)]
struct Outage {
    /// Redis is not tried before this.
    retry_at: Instant,
    backoff: Duration,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tier {
    Shared,
    Local,
}

impl std::fmt::Debug for TieredStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TieredStore")
            .field("shared", &self.shared_name)
            .field("local", &self.local.path())
            .finish_non_exhaustive()
    }
}

impl TieredStore {
    /// Redis at `shared` (named `shared_url` in notices) with `local` as the fallback.
    pub fn new(shared: Arc<RedisStore>, local: Arc<SqliteStore>, shared_url: &str) -> Self {
        Self::with_clock(shared, local, shared_url, Arc::new(SystemClock))
    }

    /// `new`, with the clock the in-process tier measures its copies by (tests).
    pub fn with_clock(
        shared: Arc<RedisStore>,
        local: Arc<SqliteStore>,
        shared_url: &str,
        clock: Arc<dyn Clock>,
    ) -> Self {
        TieredStore {
            shared,
            local,
            shared_name: without_credentials(shared_url),
            state: Mutex::new(Health::default()),
            near: NearCache::new(clock),
        }
    }

    /// Open `redis://…[?local=PATH]`: Redis (connected on first use) and the SQLite store at
    /// `PATH`, else at the default local path.
    pub fn open(url: &str) -> StoreResult<Self> {
        let (redis_url, local) = split_local(url);
        let local = local.unwrap_or_else(default_local_path);
        let shared = RedisStore::open(&redis_url)?;
        let local = SqliteStore::open(&local)?;
        Ok(TieredStore::new(
            Arc::new(shared),
            Arc::new(local),
            &redis_url,
        ))
    }

    /// The local store's file.
    pub fn local_path(&self) -> &Path {
        self.local.path()
    }

    /// The outage message, once per outage; `None` while none is new.
    pub fn take_degraded_notice(&self) -> Option<String> {
        self.health().notice.take()
    }

    /// A poisoned lock only means a panic elsewhere; the health record is still usable.
    fn health(&self) -> MutexGuard<'_, Health> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Which tier the next call should try.
    fn route(&self) -> Tier {
        match &self.health().outage {
            Some(outage) if Instant::now() < outage.retry_at => Tier::Local,
            _ => Tier::Shared,
        }
    }

    /// Redis answered: any outage is over.
    fn answered(&self) {
        self.health().outage = None;
    }

    /// Redis was unreachable: start the outage (and its one notice) or extend its back-off.
    fn unreachable(&self, reason: &str) {
        let now = Instant::now();
        let mut health = self.health();
        let backoff = match &health.outage {
            None => FIRST_BACKOFF,
            // This call was the retry after the window: Redis is still down, wait longer.
            Some(outage) if now >= outage.retry_at => (outage.backoff * 2).min(MAX_BACKOFF),
            // A call that started before the outage was known: the window already stands.
            Some(_) => return,
        };
        if health.outage.is_none() {
            health.notice = Some(format!(
                "the shared store ({}) is unreachable ({reason}); working on the local store {} until it is back; retrying in {} s",
                self.shared_name,
                self.local.path().display(),
                backoff.as_secs()
            ));
        }
        health.outage = Some(Outage {
            retry_at: now + backoff,
            backoff,
        });
    }

    fn pin(&self, session: &str, run: &str, tier: Tier) {
        let mut health = self.health();
        if health.pins.len() >= MAX_PINS {
            health.pins.clear();
        }
        health
            .pins
            .insert((session.to_string(), run.to_string()), tier);
    }

    fn unpin(&self, session: &str, run: &str) -> Option<Tier> {
        self.health()
            .pins
            .remove(&(session.to_string(), run.to_string()))
    }
}

/// Call Redis unless it is in back-off, and the local store when Redis is (or turns out to
/// be) unreachable. A macro, not a function: the two stores are different types, so the
/// call is written once and expanded for each.
macro_rules! tiered {
    ($self:ident, |$store:ident| $call:expr) => {{
        if $self.route() == Tier::Shared {
            let $store = &*$self.shared;
            match $call {
                Err(StoreError::Unavailable(reason)) => $self.unreachable(&reason),
                answer => {
                    $self.answered();
                    return answer;
                }
            }
        }
        let $store = &*$self.local;
        $call
    }};
}

#[async_trait]
impl SessionStore for TieredStore {
    async fn load(&self, session: &str, run: &str) -> StoreResult<(SessionSnapshot, RunSnapshot)> {
        if self.route() == Tier::Shared {
            match self.shared.load(session, run).await {
                Err(StoreError::Unavailable(reason)) => self.unreachable(&reason),
                answer => {
                    self.answered();
                    self.pin(session, run, Tier::Shared);
                    return answer;
                }
            }
        }
        self.pin(session, run, Tier::Local);
        self.local.load(session, run).await
    }

    async fn load_keys(
        &self,
        session: &str,
        run: &str,
        keys: &[String],
    ) -> StoreResult<(SessionSnapshot, RunSnapshot)> {
        if self.route() == Tier::Shared {
            match self.shared.load_keys(session, run, keys).await {
                Err(StoreError::Unavailable(reason)) => self.unreachable(&reason),
                answer => {
                    self.answered();
                    self.pin(session, run, Tier::Shared);
                    return answer;
                }
            }
        }
        self.pin(session, run, Tier::Local);
        self.local.load_keys(session, run, keys).await
    }

    async fn commit_round(&self, record: RoundRecord) -> StoreResult<Committed> {
        // A round loaded locally commits locally, even if the back-off ended meanwhile: its
        // round number follows the local run, which Redis would refuse as a conflict.
        if self.unpin(&record.session, &record.run) != Some(Tier::Local)
            && self.route() == Tier::Shared
        {
            // A copy, because a commit Redis could not take must still be written locally.
            match self.shared.commit_round(record.clone()).await {
                Err(StoreError::Unavailable(reason)) => self.unreachable(&reason),
                answer => {
                    self.answered();
                    return answer;
                }
            }
        }
        self.local.commit_round(record).await
    }

    async fn transcript(
        &self,
        session: &str,
        run: Option<&str>,
    ) -> StoreResult<Vec<TranscriptEntry>> {
        tiered!(self, |s| s.transcript(session, run).await)
    }

    async fn events(&self, session: &str, after: u64) -> StoreResult<Vec<(u64, String)>> {
        tiered!(self, |s| s.events(session, after).await)
    }

    async fn pending(&self, session: &str) -> StoreResult<Vec<PendingTask>> {
        tiered!(self, |s| s.pending(session).await)
    }

    async fn journal_begin(&self, entry: JournalEntry) -> StoreResult<()> {
        tiered!(self, |s| s.journal_begin(entry.clone()).await)
    }

    async fn journal_open(&self, session: &str) -> StoreResult<Vec<JournalEntry>> {
        tiered!(self, |s| s.journal_open(session).await)
    }

    fn health_notice(&self) -> Option<String> {
        self.take_degraded_notice()
    }
}

#[async_trait]
impl ResultCache for TieredStore {
    async fn cache_get(&self, scope: &CacheScope, key: &str) -> StoreResult<Option<CacheHit>> {
        if let Some(hit) = self.near.get(scope, key) {
            return Ok(Some(hit));
        }
        // An async block: `tiered!` returns Redis's answer early, and the block keeps that
        // return from skipping the near copy.
        let hit = async { tiered!(self, |s| s.cache_get(scope, key).await) }.await?;
        if let Some(hit) = &hit {
            let left = Duration::from_millis(hit.expires_in_ms);
            self.near
                .put(scope, key, &hit.value, hit.age_ms, Some(left));
        }
        Ok(hit)
    }

    async fn cache_put(
        &self,
        scope: &CacheScope,
        key: &str,
        value: &str,
        ttl: Duration,
    ) -> StoreResult<()> {
        // The near copy goes first so a failed put leaves no copy behind the written one.
        self.near.remove(scope, key);
        async { tiered!(self, |s| s.cache_put(scope, key, value, ttl).await) }.await?;
        self.near.put(scope, key, value, 0, Some(ttl));
        Ok(())
    }

    async fn cache_remove(&self, scope: &CacheScope, key: &str) -> StoreResult<()> {
        self.near.remove(scope, key);
        tiered!(self, |s| s.cache_remove(scope, key).await)
    }

    async fn cache_sweep(&self) -> StoreResult<u64> {
        tiered!(self, |s| s.cache_sweep().await)
    }
}

#[async_trait]
impl ErrorMemory for TieredStore {
    async fn error_write(&self, record: ErrorRecord) -> StoreResult<()> {
        tiered!(self, |s| s.error_write(record.clone()).await)
    }

    async fn error_search(
        &self,
        tool: Option<&str>,
        query: &str,
        limit: usize,
    ) -> StoreResult<Vec<ErrorRecord>> {
        tiered!(self, |s| s.error_search(tool, query, limit).await)
    }

    async fn error_related(
        &self,
        tool: &str,
        class: ErrorClass,
        limit: usize,
    ) -> StoreResult<Vec<ErrorRecord>> {
        tiered!(self, |s| s.error_related(tool, class, limit).await)
    }

    async fn error_read(&self, id: &str) -> StoreResult<Option<ErrorRecord>> {
        tiered!(self, |s| s.error_read(id).await)
    }
}

#[async_trait]
impl Secrets for TieredStore {
    async fn secret_set(&self, name: &str, value: &str) -> StoreResult<()> {
        tiered!(self, |s| s.secret_set(name, value).await)
    }

    async fn secret_get(&self, name: &str) -> StoreResult<Option<String>> {
        tiered!(self, |s| s.secret_get(name).await)
    }

    async fn secret_names(&self) -> StoreResult<Vec<String>> {
        tiered!(self, |s| s.secret_names().await)
    }

    async fn secret_delete(&self, name: &str) -> StoreResult<bool> {
        tiered!(self, |s| s.secret_delete(name).await)
    }

    async fn secret_generation(&self) -> StoreResult<u64> {
        // The tiers keep their own tokens; the top bit says which tier answered, so a switch
        // of tier (an outage starting or ending) never reads as "nothing changed".
        if self.route() == Tier::Shared {
            match self.shared.secret_generation().await {
                Err(StoreError::Unavailable(reason)) => self.unreachable(&reason),
                answer => {
                    self.answered();
                    return answer.map(|g| g & !LOCAL_GENERATION);
                }
            }
        }
        self.local
            .secret_generation()
            .await
            .map(|g| g | LOCAL_GENERATION)
    }
}

#[async_trait]
impl ChatHistory for TieredStore {
    async fn chat_search(
        &self,
        session: &str,
        query: &str,
        since_ms: Option<u64>,
        limit: usize,
    ) -> StoreResult<Vec<ChatHit>> {
        tiered!(self, |s| s
            .chat_search(session, query, since_ms, limit)
            .await)
    }

    async fn chat_runs(
        &self,
        session: &str,
        since_ms: Option<u64>,
        limit: usize,
    ) -> StoreResult<Vec<RunSummary>> {
        tiered!(self, |s| s.chat_runs(session, since_ms, limit).await)
    }

    async fn chat_read(&self, session: &str, run: &str, limit: usize) -> StoreResult<Vec<ChatHit>> {
        tiered!(self, |s| s.chat_read(session, run, limit).await)
    }
}

#[async_trait]
impl AgentStore for TieredStore {
    async fn conversation(&self, session: &str) -> StoreResult<Vec<ConversationEntry>> {
        tiered!(self, |s| s.conversation(session).await)
    }

    async fn append_conversation(
        &self,
        session: &str,
        entries: Vec<ConversationEntry>,
    ) -> StoreResult<()> {
        tiered!(self, |s| s
            .append_conversation(session, entries.clone())
            .await)
    }

    async fn clear_conversation(&self, session: &str) -> StoreResult<()> {
        tiered!(self, |s| s.clear_conversation(session).await)
    }

    async fn put_leg(&self, leg: &LegRecord) -> StoreResult<()> {
        tiered!(self, |s| s.put_leg(leg).await)
    }

    async fn legs(&self, parent: &str) -> StoreResult<Vec<LegRecord>> {
        tiered!(self, |s| s.legs(parent).await)
    }
}

#[async_trait]
impl ApprovedChats for TieredStore {
    async fn approve_chat(&self, chat: &ApprovedChat) -> StoreResult<()> {
        tiered!(self, |s| s.approve_chat(chat).await)
    }

    async fn approved_chats(&self, platform: Option<&str>) -> StoreResult<Vec<ApprovedChat>> {
        tiered!(self, |s| s.approved_chats(platform).await)
    }

    async fn revoke_chat(&self, platform: &str, id: &str) -> StoreResult<bool> {
        tiered!(self, |s| s.revoke_chat(platform, id).await)
    }
}

/// File history stays with the files (DESIGN §7): always the local store, never Redis.
#[async_trait]
impl FileHistory for TieredStore {
    async fn record_version(&self, version: NewFileVersion) -> StoreResult<u64> {
        self.local.record_version(version).await
    }

    async fn version(&self, id: u64) -> StoreResult<Option<FileVersion>> {
        self.local.version(id).await
    }

    async fn versions(&self, query: &VersionQuery) -> StoreResult<Vec<FileVersion>> {
        self.local.versions(query).await
    }
}

#[async_trait]
impl Maintenance for TieredStore {
    async fn stats(&self) -> StoreResult<StoreStats> {
        tiered!(self, |s| s.stats().await)
    }

    async fn gc(&self, policy: &GcPolicy) -> StoreResult<GcReport> {
        tiered!(self, |s| s.gc(policy).await)
    }
}

/// `$XDG_DATA_HOME/tooldispatch/store.db`, else `~/.local/share/tooldispatch/store.db`.
fn default_local_path() -> PathBuf {
    // The XDG spec says to ignore a relative XDG_DATA_HOME.
    let data_home = std::env::var_os("XDG_DATA_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|h| !h.is_empty())
                .map(|home| PathBuf::from(home).join(".local").join("share"))
        })
        .unwrap_or_default();
    data_home.join("tooldispatch").join("store.db")
}

/// The URL without its `local=PATH` query parameter, and that path (percent-decoded).
fn split_local(url: &str) -> (String, Option<PathBuf>) {
    let Some((base, query)) = url.split_once('?') else {
        return (url.to_string(), None);
    };
    let mut local = None;
    let mut rest = Vec::new();
    for param in query.split('&') {
        match param.strip_prefix("local=") {
            Some(path) => local = Some(PathBuf::from(percent_decode(path))),
            None => rest.push(param),
        }
    }
    let url = if rest.is_empty() {
        base.to_string()
    } else {
        format!("{base}?{}", rest.join("&"))
    };
    (url, local)
}

/// `%XX` escapes decoded; a malformed escape is kept as written.
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The URL without `user:password@`: the notice is shown to users and written to logs.
fn without_credentials(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => format!("{scheme}://{}", &rest[at + 1..]),
        None => url.to_string(),
    }
}

#[cfg(test)]
#[path = "tiered_tests.rs"]
mod tiered_tests;
