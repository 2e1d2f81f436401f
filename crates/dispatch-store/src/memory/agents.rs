//! The agent loop's conversations and background legs, in process memory.

use std::collections::HashMap;

use async_trait::async_trait;

use super::MemoryStore;
use crate::agents::{AgentStore, ConversationEntry, LegRecord};
use crate::{StoreError, StoreResult};

#[derive(Default)]
pub(super) struct AgentState {
    conversations: HashMap<String, Vec<ConversationEntry>>,
    /// Per parent session.
    legs: HashMap<String, Vec<LegRecord>>,
}

impl MemoryStore {
    fn agents(&self) -> StoreResult<std::sync::MutexGuard<'_, AgentState>> {
        self.agents.lock().map_err(|_| {
            StoreError::Backend("memory store: a thread panicked while writing to it".to_string())
        })
    }
}

#[async_trait]
impl AgentStore for MemoryStore {
    async fn conversation(&self, session: &str) -> StoreResult<Vec<ConversationEntry>> {
        Ok(self
            .agents()?
            .conversations
            .get(session)
            .cloned()
            .unwrap_or_default())
    }

    async fn append_conversation(
        &self,
        session: &str,
        entries: Vec<ConversationEntry>,
    ) -> StoreResult<()> {
        self.agents()?
            .conversations
            .entry(session.to_string())
            .or_default()
            .extend(entries);
        Ok(())
    }

    async fn clear_conversation(&self, session: &str) -> StoreResult<()> {
        self.agents()?.conversations.remove(session);
        Ok(())
    }

    async fn put_leg(&self, leg: &LegRecord) -> StoreResult<()> {
        let mut state = self.agents()?;
        let legs = state.legs.entry(leg.parent.clone()).or_default();
        match legs.iter_mut().find(|l| l.id == leg.id) {
            Some(old) => *old = leg.clone(),
            None => legs.push(leg.clone()),
        }
        Ok(())
    }

    async fn legs(&self, parent: &str) -> StoreResult<Vec<LegRecord>> {
        let mut legs = self.agents()?.legs.get(parent).cloned().unwrap_or_default();
        legs.sort_by(|a, b| (a.started_ms, &a.id).cmp(&(b.started_ms, &b.id)));
        Ok(legs)
    }
}
