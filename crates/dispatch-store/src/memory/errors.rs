//! Error memory in process memory: a list scanned on every read (error memory is small).

use std::sync::MutexGuard;

use async_trait::async_trait;

use super::MemoryStore;

use crate::errors::ERROR_TTL_MS;
use crate::{ErrorClass, ErrorMemory, ErrorRecord, StoreError, StoreResult};

/// Records with the time each one expires.
#[derive(Default)]
pub(super) struct ErrorState {
    records: Vec<(ErrorRecord, u64)>,
}

impl ErrorState {
    /// Records still remembered at `now`, and expired ones not yet dropped (for `stats`).
    pub(super) fn counts(&self, now: u64) -> crate::maintenance::EntryCounts {
        let live = self.records.iter().filter(|(_, e)| *e > now).count();
        let live = u64::try_from(live).unwrap_or(u64::MAX);
        let all = u64::try_from(self.records.len()).unwrap_or(u64::MAX);
        crate::maintenance::EntryCounts {
            live,
            expired: all - live,
        }
    }

    /// Drop the records expired at `now`; returns how many (for `gc`).
    pub(super) fn drop_expired(&mut self, now: u64) -> u64 {
        let before = self.records.len();
        self.records.retain(|(_, expires)| *expires > now);
        u64::try_from(before - self.records.len()).unwrap_or(u64::MAX)
    }
}

impl MemoryStore {
    pub(super) fn error_state(&self) -> StoreResult<MutexGuard<'_, ErrorState>> {
        self.errors.lock().map_err(|_| {
            StoreError::Backend("memory store: a thread panicked while writing errors".into())
        })
    }

    /// The unexpired records that pass `keep`, newest first, at most `limit`, each hit's
    /// lifetime started again.
    fn error_hits(
        &self,
        limit: usize,
        keep: impl Fn(&ErrorRecord) -> bool,
    ) -> StoreResult<Vec<ErrorRecord>> {
        let now = self.clock.now_ms();
        let mut state = self.error_state()?;
        state.records.retain(|(_, expires)| *expires > now);
        let mut hits: Vec<&mut (ErrorRecord, u64)> =
            state.records.iter_mut().filter(|(r, _)| keep(r)).collect();
        hits.sort_by_key(|h| std::cmp::Reverse(h.0.timestamp_ms));
        hits.truncate(limit);
        Ok(hits
            .into_iter()
            .map(|(record, expires)| {
                *expires = now.saturating_add(ERROR_TTL_MS);
                record.clone()
            })
            .collect())
    }
}

#[async_trait]
impl ErrorMemory for MemoryStore {
    async fn error_write(&self, record: ErrorRecord) -> StoreResult<()> {
        let now = self.clock.now_ms();
        let mut state = self.error_state()?;
        state
            .records
            .retain(|(r, expires)| *expires > now && r.id != record.id);
        state
            .records
            .push((record, now.saturating_add(ERROR_TTL_MS)));
        Ok(())
    }

    async fn error_search(
        &self,
        tool: Option<&str>,
        query: &str,
        limit: usize,
    ) -> StoreResult<Vec<ErrorRecord>> {
        self.error_hits(limit, |r| {
            tool.is_none_or(|t| r.tool_name == t) && r.matches(query)
        })
    }

    async fn error_related(
        &self,
        tool: &str,
        class: ErrorClass,
        limit: usize,
    ) -> StoreResult<Vec<ErrorRecord>> {
        let keyword = class.keyword();
        self.error_hits(limit, |r| {
            r.tool_name == tool && r.keywords.contains(&keyword)
        })
    }

    async fn error_read(&self, id: &str) -> StoreResult<Option<ErrorRecord>> {
        let id = id.trim().to_lowercase();
        if id.len() < 8 {
            return Ok(None);
        }
        let now = self.clock.now_ms();
        let state = self.error_state()?;
        let mut found = state
            .records
            .iter()
            .filter(|(r, expires)| *expires > now && r.id.starts_with(&id));
        // A prefix that two records share names neither.
        Ok(match (found.next(), found.next()) {
            (Some((record, _)), None) => Some(record.clone()),
            _ => None,
        })
    }
}
