//! Error memory in Redis: one JSON string per record, with an inverted index in plain Redis
//! sets (no search module needed).
//!
//! The search rule is the memory store's [`ErrorRecord::matches`]: every query word must be a
//! *substring* of the record's lower-cased text, so "ound" finds "found". An index of whole
//! words would miss those, so the index is of trigrams instead: `errors:gram:{abc}` holds the
//! ids of the records whose text contains `abc`. A word found in a text has all its trigrams
//! in that text, so the intersection of the query's trigram sets holds every match (and maybe
//! more); each candidate is then checked against its record with `matches` itself. Words
//! shorter than three characters do not narrow the candidates; they are still checked.
//!
//! The index may hold more ids than it should (a record replaced by another process between
//! our read and our write can leave a stale member), never fewer: every write adds all of its
//! record's memberships in the same MULTI/EXEC as the record itself.
//!
//! Expiry follows the injected clock: `errors:expiry` scores each id by the time it is
//! forgotten; reads skip what is due and every write forgets it, as the SQLite backend does.
//! No native TTL here: Redis would drop a record but not its index memberships.

use std::collections::BTreeSet;

use async_trait::async_trait;

use super::{RedisStore, backend, from_json, to_json};
use crate::errors::ERROR_TTL_MS;
use crate::{ErrorClass, ErrorMemory, ErrorRecord, StoreResult};

/// How many due records one pass of the write's clean-up forgets.
const FORGET_BATCH: usize = 100;

/// Forget one record unless another process found or rewrote it meanwhile (its score moved
/// past now). KEYS: record, errors:expiry, errors:ids, then the index sets it belongs to.
/// ARGV: id, now.
const FORGET_IF_DUE: &str = r#"
local score = redis.call('ZSCORE', KEYS[2], ARGV[1])
if score and tonumber(score) > tonumber(ARGV[2]) then
  return 0
end
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
for i = 4, #KEYS do
  redis.call('SREM', KEYS[i], ARGV[1])
end
return 1
"#;

/// Every run of three characters in `text` (already lower-cased).
fn trigrams(text: &str) -> BTreeSet<String> {
    let chars: Vec<char> = text.chars().collect();
    chars.windows(3).map(|w| w.iter().collect()).collect()
}

impl RedisStore {
    /// The index sets a record belongs to.
    fn index_keys(&self, record: &ErrorRecord) -> Vec<String> {
        let mut keys = vec![self.keys.error_tool(&record.tool_name)];
        keys.extend(
            trigrams(&record.searched_text().to_lowercase())
                .iter()
                .map(|gram| self.keys.error_gram(gram)),
        );
        keys
    }

    /// Forget the records that are due at `now`, with their index memberships; returns how
    /// many were forgotten (for `gc`).
    pub(super) async fn forget_due(&self, now: u64) -> StoreResult<u64> {
        let mut conn = self.connection().await?;
        let op = || backend("forget expired error records");
        let mut forgotten: u64 = 0;
        loop {
            let due: Vec<String> = ::redis::cmd("ZRANGEBYSCORE")
                .arg(self.keys.error_expiry())
                .arg("-inf")
                .arg(now)
                .arg("LIMIT")
                .arg(0)
                .arg(FORGET_BATCH)
                .query_async(&mut conn)
                .await
                .map_err(op())?;
            for id in &due {
                let text: Option<String> = ::redis::cmd("GET")
                    .arg(self.keys.error(id))
                    .query_async(&mut conn)
                    .await
                    .map_err(op())?;
                // A record that cannot be read leaves its memberships behind, which only
                // costs a little memory: every candidate is checked against its record.
                let memberships = text
                    .and_then(|text| serde_json::from_str::<ErrorRecord>(&text).ok())
                    .map(|record| self.index_keys(&record))
                    .unwrap_or_default();
                let dropped: u64 = ::redis::cmd("EVAL")
                    .arg(FORGET_IF_DUE)
                    .arg(3 + memberships.len())
                    .arg(self.keys.error(id))
                    .arg(self.keys.error_expiry())
                    .arg(self.keys.error_ids())
                    .arg(&memberships)
                    .arg(id)
                    .arg(now)
                    .query_async(&mut conn)
                    .await
                    .map_err(op())?;
                forgotten += dropped;
            }
            if due.len() < FORGET_BATCH {
                return Ok(forgotten);
            }
        }
    }

    /// The ids that may match: those in every one of `sets`, or every live id when there is
    /// no set to narrow by.
    async fn candidates(&self, sets: Vec<String>, now: u64) -> StoreResult<Vec<String>> {
        let mut conn = self.connection().await?;
        let op = backend("search error memory");
        if sets.is_empty() {
            return ::redis::cmd("ZRANGEBYSCORE")
                .arg(self.keys.error_expiry())
                .arg(format!("({now}"))
                .arg("+inf")
                .query_async(&mut conn)
                .await
                .map_err(op);
        }
        ::redis::cmd("SINTER")
            .arg(sets)
            .query_async(&mut conn)
            .await
            .map_err(op)
    }

    /// The records of `ids` that are not due at `now` (in no particular order).
    async fn live_records(&self, ids: &[String], now: u64) -> StoreResult<Vec<ErrorRecord>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let names: Vec<String> = ids.iter().map(|id| self.keys.error(id)).collect();
        let mut conn = self.connection().await?;
        let (scores, texts): (Vec<Option<f64>>, Vec<Option<String>>) = ::redis::pipe()
            .atomic()
            .cmd("ZMSCORE")
            .arg(self.keys.error_expiry())
            .arg(ids)
            .cmd("MGET")
            .arg(&names)
            .query_async(&mut conn)
            .await
            .map_err(backend("read error records"))?;
        let mut records = Vec::new();
        for (score, text) in scores.into_iter().zip(texts) {
            // Scores are whole milliseconds well inside f64's exact range.
            if let (Some(expires), Some(text)) = (score, text)
                && expires > now as f64
            {
                records.push(from_json::<ErrorRecord>(&text, "error record")?);
            }
        }
        Ok(records)
    }

    /// The live records among those in every one of `sets` that pass `keep`, newest first, at
    /// most `limit`, each hit's lifetime started again.
    async fn error_hits(
        &self,
        sets: Vec<String>,
        limit: usize,
        keep: impl Fn(&ErrorRecord) -> bool + Send,
    ) -> StoreResult<Vec<ErrorRecord>> {
        let now = self.clock.now_ms();
        let ids = self.candidates(sets, now).await?;
        let mut hits = self.live_records(&ids, now).await?;
        hits.retain(|record| keep(record));
        // By id within one millisecond, so the order does not depend on set iteration.
        hits.sort_by(|a, b| {
            b.timestamp_ms
                .cmp(&a.timestamp_ms)
                .then_with(|| a.id.cmp(&b.id))
        });
        hits.truncate(limit);
        if !hits.is_empty() {
            let expires = now.saturating_add(ERROR_TTL_MS);
            let mut refresh = ::redis::cmd("ZADD");
            // XX: only ids still listed, so a record forgotten meanwhile is not half revived.
            refresh.arg(self.keys.error_expiry()).arg("XX");
            for record in &hits {
                refresh.arg(expires).arg(&record.id);
            }
            let mut conn = self.connection().await?;
            let _: i64 = refresh
                .query_async(&mut conn)
                .await
                .map_err(backend("refresh error records"))?;
        }
        Ok(hits)
    }

    /// The trigram sets of the query words that are long enough to have any.
    fn query_sets(&self, query: &str) -> BTreeSet<String> {
        query
            .split_whitespace()
            .flat_map(|word| trigrams(&word.to_lowercase()))
            .map(|gram| self.keys.error_gram(&gram))
            .collect()
    }
}

#[async_trait]
impl ErrorMemory for RedisStore {
    async fn error_write(&self, record: ErrorRecord) -> StoreResult<()> {
        let now = self.clock.now_ms();
        self.forget_due(now).await?;
        let op = || backend(format!("write error record for {}", record.tool_name));
        let mut conn = self.connection().await?;
        let old: Option<String> = ::redis::cmd("GET")
            .arg(self.keys.error(&record.id))
            .query_async(&mut conn)
            .await
            .map_err(op())?;
        let new_sets = self.index_keys(&record);
        // Memberships of the replaced version that this one does not have (best effort: an
        // unreadable old version leaves its own behind, which searches tolerate).
        let stale: Vec<String> = old
            .and_then(|text| serde_json::from_str::<ErrorRecord>(&text).ok())
            .map(|old| {
                let new: BTreeSet<&String> = new_sets.iter().collect();
                self.index_keys(&old)
                    .into_iter()
                    .filter(|key| !new.contains(key))
                    .collect()
            })
            .unwrap_or_default();

        let mut pipe = ::redis::pipe();
        pipe.atomic()
            .cmd("SET")
            .arg(self.keys.error(&record.id))
            .arg(to_json(&record)?)
            .ignore()
            .cmd("ZADD")
            .arg(self.keys.error_expiry())
            .arg(now.saturating_add(ERROR_TTL_MS))
            .arg(&record.id)
            .ignore()
            .cmd("ZADD")
            .arg(self.keys.error_ids())
            .arg(0)
            .arg(&record.id)
            .ignore();
        for set in new_sets.iter() {
            pipe.cmd("SADD").arg(set).arg(&record.id).ignore();
        }
        for set in &stale {
            pipe.cmd("SREM").arg(set).arg(&record.id).ignore();
        }
        pipe.query_async::<()>(&mut conn).await.map_err(op())
    }

    async fn error_search(
        &self,
        tool: Option<&str>,
        query: &str,
        limit: usize,
    ) -> StoreResult<Vec<ErrorRecord>> {
        let mut sets: Vec<String> = self.query_sets(query).into_iter().collect();
        if let Some(tool) = tool {
            sets.push(self.keys.error_tool(tool));
        }
        self.error_hits(sets, limit, |r| {
            tool.is_none_or(|t| r.tool_name == t) && r.matches(query)
        })
        .await
    }

    async fn error_related(
        &self,
        tool: &str,
        class: ErrorClass,
        limit: usize,
    ) -> StoreResult<Vec<ErrorRecord>> {
        let keyword = class.keyword();
        let mut sets: Vec<String> = self.query_sets(&keyword).into_iter().collect();
        sets.push(self.keys.error_tool(tool));
        self.error_hits(sets, limit, |r| {
            r.tool_name == tool && r.keywords.contains(&keyword)
        })
        .await
    }

    async fn error_read(&self, id: &str) -> StoreResult<Option<ErrorRecord>> {
        let id = id.trim().to_lowercase();
        // Ids are hex, so anything else names nothing.
        if id.len() < 8 || !id.chars().all(|c| c.is_ascii_hexdigit()) {
            return Ok(None);
        }
        let now = self.clock.now_ms();
        // Every id starting with the prefix sorts between the prefix and the prefix followed
        // by 0xff (ids are ASCII).
        let mut upper = format!("({id}").into_bytes();
        upper.push(0xff);
        let mut conn = self.connection().await?;
        let ids: Vec<String> = ::redis::cmd("ZRANGEBYLEX")
            .arg(self.keys.error_ids())
            .arg(format!("[{id}"))
            .arg(upper)
            .query_async(&mut conn)
            .await
            .map_err(backend(format!("read error record {id}")))?;
        let mut found = self.live_records(&ids, now).await?;
        // A prefix that two records share names neither.
        Ok(match found.len() {
            1 => found.pop(),
            _ => None,
        })
    }
}
