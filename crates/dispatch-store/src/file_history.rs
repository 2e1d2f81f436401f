//! File history: the state of a file before a tool changed it, so `file_history` can show it
//! and `restore_file` can put it back (spec §11 "File history", DESIGN §7).
//!
//! A version is recorded *before* every change (edit, write, remove, restore). Its content is
//! what the file held then — `None` when the file did not exist, so restoring such a version
//! removes the file again. File history always lives with the files: the SQLite store (and
//! the local tier of a Redis setup) keeps it, never Redis.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::StoreResult;

/// Snapshots larger than this keep their hash and size but not their content; a removed file
/// of any size stays restorable through its trash copy.
pub const SNAPSHOT_CAP: usize = 8 * 1024 * 1024;

/// What the change that followed the snapshot did to the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FileAction {
    /// The file did not exist and a tool created it.
    Create,
    /// A tool rewrote or patched it.
    Modify,
    /// A tool removed it (moved it to the trash).
    Delete,
    /// `restore_file` put an older version back.
    Restore,
}

impl FileAction {
    pub fn as_str(self) -> &'static str {
        match self {
            FileAction::Create => "create",
            FileAction::Modify => "modify",
            FileAction::Delete => "delete",
            FileAction::Restore => "restore",
        }
    }

    pub fn parse(text: &str) -> Option<FileAction> {
        Some(match text {
            "create" => FileAction::Create,
            "modify" => FileAction::Modify,
            "delete" => FileAction::Delete,
            "restore" => FileAction::Restore,
            _ => return None,
        })
    }
}

/// A version about to be recorded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewFileVersion {
    /// The resolved absolute path.
    pub path: String,
    pub action: FileAction,
    /// The bytes before the change; `None` when the file did not exist.
    pub content: Option<Vec<u8>>,
    /// Where a removed file was moved (under the data directory).
    pub trash_path: Option<String>,
    pub session: String,
    /// The run (task) whose call made the change.
    pub run: String,
    pub tool: String,
}

/// One recorded version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileVersion {
    /// Increasing in recording order; what `restore_file(version=…)` takes.
    pub id: u64,
    pub path: String,
    pub action: FileAction,
    /// The bytes before the change, unless the file did not exist or was over
    /// [`SNAPSHOT_CAP`] (then `truncated`).
    pub content: Option<Vec<u8>>,
    /// The content was over the cap and was not kept.
    pub truncated: bool,
    /// blake3 of the bytes before the change (hex), empty when the file did not exist.
    pub hash: String,
    pub size: u64,
    pub trash_path: Option<String>,
    pub session: String,
    pub run: String,
    pub tool: String,
    pub changed_ms: u64,
}

impl FileVersion {
    /// The file existed before the change: its content was kept, or was too large to keep.
    pub fn existed(&self) -> bool {
        self.content.is_some() || self.truncated
    }

    /// Build the stored form of `new`, applying the snapshot cap.
    pub fn from_new(id: u64, new: NewFileVersion, changed_ms: u64) -> FileVersion {
        let (hash, size) = match &new.content {
            Some(bytes) => (blake3::hash(bytes).to_hex().to_string(), bytes.len() as u64),
            None => (String::new(), 0),
        };
        let truncated = new.content.as_ref().is_some_and(|b| b.len() > SNAPSHOT_CAP);
        FileVersion {
            id,
            path: new.path,
            action: new.action,
            content: if truncated { None } else { new.content },
            truncated,
            hash,
            size,
            trash_path: new.trash_path,
            session: new.session,
            run: new.run,
            tool: new.tool,
            changed_ms,
        }
    }
}

/// Which versions to list; every field narrows, newest first.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VersionQuery {
    /// Only these resolved paths (any of them); empty = every path.
    pub paths: Vec<String>,
    /// Only changes made by this session …
    pub session: Option<String>,
    /// … and this run (task).
    pub run: Option<String>,
    /// Changed at or after (ms since the epoch).
    pub from_ms: Option<u64>,
    /// Changed at or before.
    pub to_ms: Option<u64>,
    /// At most this many (newest first); 0 = no limit.
    pub limit: usize,
}

impl VersionQuery {
    /// Whether `v` passes every filter but the limit.
    pub fn matches(&self, v: &FileVersion) -> bool {
        (self.paths.is_empty() || self.paths.contains(&v.path))
            && self.session.as_ref().is_none_or(|s| *s == v.session)
            && self.run.as_ref().is_none_or(|r| *r == v.run)
            && self.from_ms.is_none_or(|t| v.changed_ms >= t)
            && self.to_ms.is_none_or(|t| v.changed_ms <= t)
    }
}

/// Versions of files changed by tools.
#[async_trait]
pub trait FileHistory: Send + Sync {
    /// Record the state of a file before a change; returns the version id.
    async fn record_version(&self, version: NewFileVersion) -> StoreResult<u64>;
    /// One version by id.
    async fn version(&self, id: u64) -> StoreResult<Option<FileVersion>>;
    /// Versions matching `query`, newest first.
    async fn versions(&self, query: &VersionQuery) -> StoreResult<Vec<FileVersion>>;
}
