//! Approved chats in process memory.

use async_trait::async_trait;

use super::MemoryStore;
use crate::chatbots::{ApprovedChat, ApprovedChats, sort_chats};
use crate::{StoreError, StoreResult};

impl MemoryStore {
    fn chats(&self) -> StoreResult<std::sync::MutexGuard<'_, Vec<ApprovedChat>>> {
        self.chats.lock().map_err(|_| {
            StoreError::Backend("memory store: a thread panicked while writing to it".to_string())
        })
    }
}

#[async_trait]
impl ApprovedChats for MemoryStore {
    async fn approve_chat(&self, chat: &ApprovedChat) -> StoreResult<()> {
        let mut chats = self.chats()?;
        chats.retain(|c| !(c.platform == chat.platform && c.id == chat.id));
        chats.push(chat.clone());
        Ok(())
    }

    async fn approved_chats(&self, platform: Option<&str>) -> StoreResult<Vec<ApprovedChat>> {
        let mut chats: Vec<ApprovedChat> = self
            .chats()?
            .iter()
            .filter(|c| platform.is_none_or(|p| c.platform == p))
            .cloned()
            .collect();
        sort_chats(&mut chats);
        Ok(chats)
    }

    async fn revoke_chat(&self, platform: &str, id: &str) -> StoreResult<bool> {
        let mut chats = self.chats()?;
        let before = chats.len();
        chats.retain(|c| !(c.platform == platform && c.id == id));
        Ok(chats.len() != before)
    }
}
