//! Changing a file so that it can always be undone and is never seen half-written.
//!
//! Every tool that changes a file (edit_file, remove_file, restore_file) goes through here:
//! the file's state is recorded in the file history *before* the change (so an interrupted
//! change still has its way back), a new content replaces the old one by a rename from a
//! temporary file in the same directory (so a reader sees the old file or the new one, never a
//! mix, and a crash leaves the old file), and a removed file is moved into the trash under the
//! data directory rather than unlinked. The file itself is reached through a
//! [`Target`](super::beneath::Target): its directory held open beneath the work directory, so
//! a directory swapped for a symlink after the path was checked cannot redirect the change. Without a file history there is no undo, so nothing is
//! changed at all.

use std::fs::{self, File, Metadata, OpenOptions, Permissions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use dispatch_engine::{ToolContext, ToolError};
use dispatch_store::file_history::SNAPSHOT_CAP;
use dispatch_store::{FileAction, FileHistory, FileVersion, NewFileVersion};

use super::beneath::{Target, write_atomic_at};

/// Largest file a tool reads whole to snapshot it before a change (remove, restore, write).
pub const MAX_SNAPSHOT_FILE_BYTES: u64 = 64 * 1024 * 1024;

/// Name of the directory under the data directory that holds removed files and the copies of
/// versions too large for the file history itself.
pub const TRASH_DIR: &str = "trash";

/// Longest original file name kept in a trash name (the rest of the name is the unique part).
const TRASH_NAME_BYTES: usize = 120;

/// Run blocking file-system work off the async workers.
pub async fn blocking<T, F>(work: F) -> Result<T, ToolError>
where
    T: Send + 'static,
    F: FnOnce() -> Result<T, ToolError> + Send + 'static,
{
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| ToolError::failed(format!("the file operation stopped unexpectedly: {e}")))?
}

/// An I/O failure on `shown` (a workdir-relative path), told so the model can act on it.
pub fn io_error(doing: &str, shown: &str, e: &io::Error) -> ToolError {
    let hint = match e.kind() {
        io::ErrorKind::PermissionDenied => {
            " (the file system refused: the file or its directory is not writable by \
             tooldispatch; this is not a credential problem — ask the user to fix the \
             permissions or leave the file alone)"
        }
        io::ErrorKind::StorageFull => " (the disk is full)",
        io::ErrorKind::ReadOnlyFilesystem => " (the file system is read-only)",
        _ => "",
    };
    ToolError::failed(format!("cannot {doing} {shown}: {e}{hint}"))
}

/// What a path holds before a change.
pub struct Existing {
    pub bytes: Vec<u8>,
    pub meta: Metadata,
}

/// Read the regular file at `path` (already confined, so no symlink is left in it), or `None`
/// when nothing is there. Directories, devices, FIFOs and sockets are refused: reading a FIFO
/// would block and writing a device is never an edit.
pub fn read_existing(path: &Path, shown: &str, cap: u64) -> Result<Option<Existing>, ToolError> {
    let meta = match fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) if e.kind() == io::ErrorKind::NotADirectory => {
            return Err(ToolError::failed(format!(
                "cannot use {shown}: part of its directory path is a file, not a directory"
            )));
        }
        Err(e) => return Err(io_error("inspect", shown, &e)),
    };
    check_regular(&meta, shown)?;
    let file = File::open(path).map_err(|e| io_error("open", shown, &e))?;
    read_capped(file, meta, shown, cap).map(Some)
}

/// Read `file` (a regular file, `meta` its metadata) whole, refusing more than `cap` bytes.
pub fn read_capped(
    file: File,
    meta: Metadata,
    shown: &str,
    cap: u64,
) -> Result<Existing, ToolError> {
    check_regular(&meta, shown)?;
    if meta.len() > cap {
        return Err(ToolError::failed(format!(
            "{shown} is {} bytes, over the {} limit for files this tool changes; change it with \
             a command instead",
            meta.len(),
            human_bytes(cap)
        )));
    }
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    // The size can change between stat and read: never read past the cap.
    file.take(cap + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| io_error("read", shown, &e))?;
    if bytes.len() as u64 > cap {
        return Err(ToolError::failed(format!(
            "{shown} grew past the {} limit while it was read; try again once it stops changing",
            human_bytes(cap)
        )));
    }
    Ok(Existing { bytes, meta })
}

/// Refuse anything but a regular file, naming what it is.
pub fn check_regular(meta: &Metadata, shown: &str) -> Result<(), ToolError> {
    let kind = meta.file_type();
    if kind.is_file() {
        return Ok(());
    }
    Err(refuse_kind(kind.is_dir(), kind.is_symlink(), shown))
}

/// The refusal of something that is not a regular file: a directory, a symlink, or else.
pub fn refuse_kind(is_dir: bool, is_symlink: bool, shown: &str) -> ToolError {
    let what = if is_dir {
        "a directory"
    } else if is_symlink {
        "a symlink"
    } else {
        "not a regular file (a device, FIFO or socket)"
    };
    ToolError::failed(format!(
        "{shown} is {what}; file tools change regular files only"
    ))
}

/// Replace (or create) `path` with `bytes` atomically, as [`write_atomic_at`] does. For paths
/// the dispatcher owns (the data directory); a file in the work directory is changed through a
/// [`Target`] instead.
pub fn write_atomic(path: &Path, bytes: &[u8], keep: Option<&Metadata>) -> io::Result<()> {
    let dir = path
        .parent()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "the path has no directory"))?;
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "the path has no file name"))?;
    write_atomic_at(File::open(dir)?, name, bytes, keep)
}

/// A name no other call of this process (or another process) will pick: time, pid, counter.
pub(super) fn unique_token() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("{}-{}-{n}", now_ms(), std::process::id())
}

fn now_ms() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0)
}

/// At most `max` bytes of `name`, cut on a character boundary.
pub(super) fn truncate_name(name: &str, max: usize) -> &str {
    if name.len() <= max {
        return name;
    }
    let mut end = max;
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    &name[..end]
}

/// Sizes for messages: bytes below 10 KiB, else KiB/MiB with one decimal.
pub fn human_bytes(n: u64) -> String {
    const KIB: f64 = 1024.0;
    let f = n as f64;
    if n < 10 * 1024 {
        format!("{n} bytes")
    } else if f < KIB * KIB {
        format!("{:.1} KiB", f / KIB)
    } else {
        format!("{:.1} MiB", f / (KIB * KIB))
    }
}

/// The trash under `data_dir`, created private to the user if missing.
pub fn trash_dir(data_dir: &Path) -> io::Result<PathBuf> {
    let dir = data_dir.join(TRASH_DIR);
    if !dir.is_dir() {
        fs::create_dir_all(&dir)?;
        fs::set_permissions(&dir, Permissions::from_mode(0o700))?;
    }
    Ok(dir)
}

/// Whether `path` names a file directly inside `data_dir`'s trash: one plain name under the
/// trash directory, so a stored `trash/../../etc/passwd` is not trusted.
pub fn is_trash_file(data_dir: &Path, path: &Path) -> bool {
    path.parent() == Some(data_dir.join(TRASH_DIR).as_path())
        && matches!(
            path.components().next_back(),
            Some(std::path::Component::Normal(_))
        )
}

/// What [`sweep_trash`] dropped.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TrashSweep {
    pub files: u64,
    pub bytes: u64,
}

/// Delete trash files moved there more than `older_than` ago (by the time in their name, not
/// their modification time, which a move keeps). The versions that point at them stay in the
/// file history; restoring one then says its trash copy is gone. Entries that are not ours
/// (no time prefix) are left alone.
pub fn sweep_trash(data_dir: &Path, older_than: std::time::Duration) -> io::Result<TrashSweep> {
    let dir = data_dir.join(TRASH_DIR);
    let mut swept = TrashSweep::default();
    let entries = match fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(swept),
        Err(e) => return Err(e),
    };
    let cutoff = now_ms().saturating_sub(older_than.as_millis());
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name();
        let moved_ms = name
            .to_str()
            .and_then(|n| n.split('-').next())
            .and_then(|ms| ms.parse::<u128>().ok());
        let meta = entry.metadata()?;
        if moved_ms.is_some_and(|ms| ms < cutoff) && meta.is_file() {
            fs::remove_file(entry.path())?;
            swept.files += 1;
            swept.bytes += meta.len();
        }
    }
    Ok(swept)
}

/// A fresh, unused place in the trash for `original`: `<unique>-<file name>`.
pub fn trash_slot(data_dir: &Path, original: &Path) -> io::Result<PathBuf> {
    let dir = trash_dir(data_dir)?;
    let name = original
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "file".into());
    let name: String = truncate_name(&name, TRASH_NAME_BYTES)
        .chars()
        .map(|c| if c.is_control() { '_' } else { c })
        .collect();
    for _ in 0..16 {
        let slot = dir.join(format!("{}-{name}", unique_token()));
        if fs::symlink_metadata(&slot).is_err() {
            return Ok(slot);
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AlreadyExists,
        "no free name in the trash",
    ))
}

/// Records versions into the file history for one call; exists only when there is a history.
pub struct Recorder {
    history: Arc<dyn FileHistory>,
    data_dir: Option<PathBuf>,
    session: String,
    run: String,
    tool: &'static str,
}

impl Recorder {
    /// The recorder of a call into `history` (the tool's), or a refusal when there is none.
    pub fn for_call(
        history: Option<&Arc<dyn FileHistory>>,
        cx: &ToolContext,
        tool: &'static str,
    ) -> Result<Recorder, ToolError> {
        let history = history.cloned().ok_or_else(|| {
            ToolError::failed(format!(
                "{tool} refuses to change files: this dispatcher keeps no file history, so the \
                 change could not be undone. Start tooldispatch with a store (--store) to enable \
                 file changes, or make the change with another tool the user approves"
            ))
        })?;
        Ok(Recorder {
            history,
            data_dir: cx.data_dir.as_deref().map(Path::to_path_buf),
            session: cx.session_id.to_string(),
            run: cx.run_id.to_string(),
            tool,
        })
    }

    pub fn history(&self) -> &Arc<dyn FileHistory> {
        &self.history
    }

    pub fn data_dir(&self) -> Option<&Path> {
        self.data_dir.as_deref()
    }

    /// The data directory, or a refusal for `doing` (which needs the trash).
    pub fn require_data_dir(&self, doing: &str) -> Result<&Path, ToolError> {
        self.data_dir.as_deref().ok_or_else(|| {
            ToolError::failed(format!(
                "cannot {doing}: this dispatcher has no data directory, so there is no trash to \
                 keep the file in for undo. Start tooldispatch with a data directory, or leave \
                 the file as it is"
            ))
        })
    }

    /// Record `path`'s state before a change. Content over the file history's snapshot cap is
    /// copied into the trash first (unless `trash_path` already holds it), so every version
    /// stays restorable.
    pub async fn record(
        &self,
        path: &Path,
        shown: &str,
        action: FileAction,
        before: Option<Vec<u8>>,
        mut trash_path: Option<PathBuf>,
    ) -> Result<u64, ToolError> {
        if let Some(bytes) = before.as_ref().filter(|b| b.len() > SNAPSHOT_CAP)
            && trash_path.is_none()
        {
            let data_dir = self
                .require_data_dir(&format!(
                    "keep the {} of {shown} for undo (over the {} the history keeps itself)",
                    human_bytes(bytes.len() as u64),
                    human_bytes(SNAPSHOT_CAP as u64)
                ))?
                .to_path_buf();
            let copy = bytes.clone();
            let original = path.to_path_buf();
            let shown_owned = shown.to_string();
            let slot = blocking(move || {
                let slot = trash_slot(&data_dir, &original)
                    .map_err(|e| io_error("make a trash copy of", &shown_owned, &e))?;
                write_new(&slot, &copy)
                    .map_err(|e| io_error("make a trash copy of", &shown_owned, &e))?;
                Ok(slot)
            })
            .await?;
            trash_path = Some(slot);
        }
        self.history
            .record_version(NewFileVersion {
                path: path.to_string_lossy().into_owned(),
                action,
                content: before,
                trash_path: trash_path.map(|p| p.to_string_lossy().into_owned()),
                session: self.session.clone(),
                run: self.run.clone(),
                tool: self.tool.to_string(),
            })
            .await
            .map_err(|e| {
                ToolError::failed(format!(
                    "nothing was changed: the file history could not record {shown} ({e})"
                ))
            })
    }

    /// Move the regular file `target` into the trash, recording a version of `action` (with
    /// the content and the trash path) first. Returns the version id and the bytes removed.
    pub async fn remove_to_trash(
        &self,
        target: &Target,
        shown: &str,
        action: FileAction,
    ) -> Result<(u64, u64), ToolError> {
        let data_dir = self
            .require_data_dir(&format!("remove {shown}"))?
            .to_path_buf();
        let path = target.path().to_path_buf();
        let (file, original, shown_owned) = (target.clone(), path.clone(), shown.to_string());
        let (existing, slot) = blocking(move || {
            let existing = file
                .read_existing(&shown_owned, MAX_SNAPSHOT_FILE_BYTES)?
                .ok_or_else(|| {
                    ToolError::failed(format!("{shown_owned} does not exist; nothing to remove"))
                })?;
            let slot = trash_slot(&data_dir, &original)
                .map_err(|e| io_error("prepare the trash for", &shown_owned, &e))?;
            Ok((existing, slot))
        })
        .await?;
        let size = existing.bytes.len() as u64;
        let id = self
            .record(
                &path,
                shown,
                action,
                Some(existing.bytes),
                Some(slot.clone()),
            )
            .await?;
        let (from, shown_owned) = (target.clone(), shown.to_string());
        blocking(move || {
            from.move_out(&slot).map_err(|e| {
                ToolError::failed(format!(
                    "{} (version {id} was recorded but the file is still in place)",
                    io_error("move to the trash", &shown_owned, &e)
                ))
            })
        })
        .await?;
        Ok((id, size))
    }
}

/// Create `path` (which must not exist) with `bytes`, flushed, private to the user.
fn write_new(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    file.write_all(bytes)?;
    file.sync_all()
}

/// The bytes a version holds: its snapshot, or its trash copy (checked against the recorded
/// hash). `Ok(None)` means the file did not exist in that version.
pub fn version_bytes(v: &FileVersion, data_dir: Option<&Path>) -> Result<Option<Vec<u8>>, String> {
    if !v.existed() {
        return Ok(None);
    }
    if let Some(bytes) = &v.content {
        return Ok(Some(bytes.clone()));
    }
    let Some(trash) = v.trash_path.as_deref() else {
        return Err(format!(
            "version {} kept no content (it was over the snapshot limit and had no trash copy)",
            v.id
        ));
    };
    let trash = Path::new(trash);
    // The history names the file; only a file in our own trash is trusted to read back.
    if !data_dir.is_some_and(|d| is_trash_file(d, trash)) {
        return Err(format!(
            "version {}'s copy {} is not in this dispatcher's trash",
            v.id,
            trash.display()
        ));
    }
    let meta = fs::symlink_metadata(trash)
        .map_err(|e| format!("version {}'s trash copy is gone ({e})", v.id))?;
    if !meta.is_file() || meta.len() > MAX_SNAPSHOT_FILE_BYTES {
        return Err(format!("version {}'s trash copy is not readable", v.id));
    }
    let bytes = fs::read(trash).map_err(|e| format!("version {}'s trash copy: {e}", v.id))?;
    if !v.hash.is_empty() && blake3::hash(&bytes).to_hex().as_str() != v.hash {
        return Err(format!(
            "version {}'s trash copy was changed since it was recorded",
            v.id
        ));
    }
    Ok(Some(bytes))
}

/// Lines added and removed going from `old` to `new` (a line diff, given at most half a
/// second; past that the counts are approximate).
pub fn line_delta(old: &[u8], new: &[u8]) -> (usize, usize) {
    let (old, new) = (String::from_utf8_lossy(old), String::from_utf8_lossy(new));
    let diff = similar::TextDiff::configure()
        .timeout(std::time::Duration::from_millis(500))
        .diff_lines(old.as_ref(), new.as_ref());
    let (mut added, mut removed) = (0, 0);
    for op in diff
        .ops()
        .iter()
        .filter(|op| op.tag() != similar::DiffTag::Equal)
    {
        removed += op.old_range().len();
        added += op.new_range().len();
    }
    (added, removed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn atomic_write_keeps_mode_and_leaves_no_temp() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run.sh");
        fs::write(&path, "old").unwrap();
        fs::set_permissions(&path, Permissions::from_mode(0o751)).unwrap();
        let meta = fs::metadata(&path).unwrap();
        write_atomic(&path, b"new", Some(&meta)).unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"new");
        assert_eq!(fs::metadata(&path).unwrap().mode() & 0o7777, 0o751);
        let names: Vec<_> = fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(names.len(), 1, "a temporary file was left behind");
    }

    #[test]
    fn a_failed_write_leaves_the_old_file_and_no_temp() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub");
        fs::create_dir(&path).unwrap();
        fs::write(path.join("keep"), "k").unwrap();
        // Renaming a file over a non-empty directory fails.
        assert!(write_atomic(&path, b"x", None).is_err());
        assert_eq!(fs::read(path.join("keep")).unwrap(), b"k");
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn trash_slots_are_unique_and_keep_the_name() {
        let dir = tempfile::tempdir().unwrap();
        let a = trash_slot(dir.path(), Path::new("/w/a.txt")).unwrap();
        let b = trash_slot(dir.path(), Path::new("/w/a.txt")).unwrap();
        assert_ne!(a, b);
        assert!(a.to_string_lossy().ends_with("-a.txt"));
        assert!(a.starts_with(dir.path().join(TRASH_DIR)));
        let mode = fs::metadata(dir.path().join(TRASH_DIR)).unwrap().mode();
        assert_eq!(mode & 0o777, 0o700);
    }

    #[test]
    fn reading_refuses_what_is_not_a_regular_file() {
        let dir = tempfile::tempdir().unwrap();
        let err = read_existing(dir.path(), "d", 10)
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("is a directory"), "{err}");
        fs::write(dir.path().join("big"), vec![0u8; 11]).unwrap();
        let err = read_existing(&dir.path().join("big"), "big", 10)
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("limit"), "{err}");
        assert!(
            read_existing(&dir.path().join("none"), "none", 10)
                .unwrap()
                .is_none()
        );
    }
}

#[cfg(test)]
mod sweep_tests {
    use super::*;

    #[test]
    fn only_plain_names_inside_the_trash_are_trusted() {
        let data = Path::new("/data");
        assert!(is_trash_file(data, Path::new("/data/trash/1-2-3-a.txt")));
        assert!(!is_trash_file(
            data,
            Path::new("/data/trash/../../etc/passwd")
        ));
        assert!(!is_trash_file(data, Path::new("/data/trash/sub/a.txt")));
        assert!(!is_trash_file(data, Path::new("/data/trash")));
        assert!(!is_trash_file(data, Path::new("/elsewhere/trash/a.txt")));
        assert!(!is_trash_file(data, Path::new("/data/trash/..")));
    }

    #[test]
    fn the_sweep_drops_old_trash_by_the_time_in_its_name_only() {
        let data = tempfile::tempdir().unwrap();
        let trash = trash_dir(data.path()).unwrap();
        let old = trash.join(format!("{}-1-0-old.txt", now_ms() - 40 * 24 * 3600 * 1000));
        std::fs::write(&old, "12345").unwrap();
        let fresh = trash_slot(data.path(), Path::new("/w/new.txt")).unwrap();
        std::fs::write(&fresh, "x").unwrap();
        let foreign = trash.join("notes.txt");
        std::fs::write(&foreign, "y").unwrap();

        let swept =
            sweep_trash(data.path(), std::time::Duration::from_secs(30 * 24 * 3600)).unwrap();
        assert_eq!(swept, TrashSweep { files: 1, bytes: 5 });
        assert!(!old.exists() && fresh.exists() && foreign.exists());
        let none = tempfile::tempdir().unwrap();
        assert_eq!(
            sweep_trash(none.path(), std::time::Duration::ZERO).unwrap(),
            TrashSweep::default()
        );
    }
}
