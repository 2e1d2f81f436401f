//! File history in process memory: versions in recording order.

use async_trait::async_trait;

use super::MemoryStore;
use crate::file_history::{FileHistory, FileVersion, NewFileVersion, VersionQuery};
use crate::{StoreError, StoreResult};

impl MemoryStore {
    fn files_state(&self) -> StoreResult<std::sync::MutexGuard<'_, Vec<FileVersion>>> {
        self.files.lock().map_err(|_| {
            StoreError::Backend("memory store: a thread panicked while writing file history".into())
        })
    }
}

#[async_trait]
impl FileHistory for MemoryStore {
    async fn record_version(&self, version: NewFileVersion) -> StoreResult<u64> {
        let now = self.clock.now_ms();
        let mut files = self.files_state()?;
        let id = files.last().map_or(1, |v| v.id + 1);
        files.push(FileVersion::from_new(id, version, now));
        Ok(id)
    }

    async fn version(&self, id: u64) -> StoreResult<Option<FileVersion>> {
        Ok(self.files_state()?.iter().find(|v| v.id == id).cloned())
    }

    async fn versions(&self, query: &VersionQuery) -> StoreResult<Vec<FileVersion>> {
        let files = self.files_state()?;
        let limit = if query.limit == 0 {
            usize::MAX
        } else {
            query.limit
        };
        Ok(files
            .iter()
            .rev()
            .filter(|v| query.matches(v))
            .take(limit)
            .cloned()
            .collect())
    }
}
