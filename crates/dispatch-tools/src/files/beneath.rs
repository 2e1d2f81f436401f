//! Changing a file beneath the work directory without following a swapped link (DESIGN §6).
//!
//! [`Confinement::resolve`] checks a path, but a directory on the way can be swapped for a
//! symlink (`renameat2(RENAME_EXCHANGE)`) between that check and the write, and a write by
//! path would then follow the link out of the work directory. So every tool that changes a
//! file opens the file's directory once, beneath the work directory and without following any
//! symlink — `openat2` with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS`, or,
//! where the kernel has no openat2, a walk that opens one component at a time with
//! `O_NOFOLLOW` — and then reads, creates, renames and removes the file relative to that
//! handle. A swap before the open makes the open fail with a message that says so; a swap
//! after it moves a name, not the directory the handle holds, so the write still lands inside.

use std::ffi::{OsStr, OsString};
use std::fs::{File, Metadata, OpenOptions, Permissions};
use std::io::{self, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use dispatch_engine::ToolError;
use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;

use super::confine::Confinement;
use super::write::{Existing, io_error, read_capped, refuse_kind, truncate_name, unique_token};

/// Flags of every directory handle: readable (so it can be synced), never inherited.
const DIR_FLAGS: OFlags = OFlags::RDONLY
    .union(OFlags::DIRECTORY)
    .union(OFlags::CLOEXEC);

/// How often openat2 is retried when the kernel saw a rename during the lookup (EAGAIN).
const OPENAT2_TRIES: usize = 8;

/// A file to change: its directory, held open beneath the work directory, and its name there.
#[derive(Clone, Debug)]
pub struct Target {
    dir: Arc<OwnedFd>,
    name: OsString,
    path: PathBuf,
}

impl Target {
    /// The directory of `path` (as [`Confinement::resolve`] returned it) opened beneath the
    /// work directory; missing directories on the way are made when `create_dirs` is set.
    pub fn open(
        confine: &Confinement,
        path: &Path,
        shown: &str,
        create_dirs: bool,
    ) -> Result<Target, ToolError> {
        open_target(confine.root(), path, create_dirs).map_err(|e| refusal(shown, &e))
    }

    /// Like [`Target::open`] without making directories: `None` when a directory on the way
    /// does not exist (so neither does the file).
    pub fn open_existing(
        confine: &Confinement,
        path: &Path,
        shown: &str,
    ) -> Result<Option<Target>, ToolError> {
        match open_target(confine.root(), path, false) {
            Ok(target) => Ok(Some(target)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(refusal(shown, &e)),
        }
    }

    /// The file's absolute path, for the file history and messages.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The regular file there, read whole up to `cap` bytes, or `None` when nothing is there.
    /// Directories, symlinks, devices, FIFOs and sockets are refused (and never opened).
    pub fn read_existing(&self, shown: &str, cap: u64) -> Result<Option<Existing>, ToolError> {
        let stat = match rustix::fs::statat(&*self.dir, &self.name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(stat) => stat,
            Err(Errno::NOENT) => return Ok(None),
            Err(e) => return Err(io_error("inspect", shown, &e.into())),
        };
        let kind = FileType::from_raw_mode(stat.st_mode);
        if kind != FileType::RegularFile {
            return Err(refuse_kind(
                kind == FileType::Directory,
                kind == FileType::Symlink,
                shown,
            ));
        }
        // O_NONBLOCK: a FIFO swapped in since the stat fails the check below instead of hanging.
        let fd = rustix::fs::openat(
            &*self.dir,
            &self.name,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| refusal(shown, &e.into()))?;
        let file = File::from(fd);
        let meta = file
            .metadata()
            .map_err(|e| io_error("inspect", shown, &e))?;
        read_capped(file, meta, shown, cap).map(Some)
    }

    /// Replace (or create) the file with `bytes` atomically, as [`write_atomic_at`] does.
    pub fn write_atomic(&self, bytes: &[u8], keep: Option<&Metadata>) -> io::Result<()> {
        write_atomic_at(&*self.dir, &self.name, bytes, keep)
    }

    /// Create the file, which must not exist (nor be a symlink), with `bytes`, flushed; a
    /// failed write removes the half-written file.
    pub fn create_new(&self, bytes: &[u8]) -> io::Result<()> {
        let fd = rustix::fs::openat(
            &*self.dir,
            &self.name,
            CREATE_NEW,
            Mode::from_raw_mode(0o666),
        )?;
        let mut file = File::from(fd);
        let written = file.write_all(bytes).and_then(|()| file.sync_all());
        if written.is_err() {
            let _ = rustix::fs::unlinkat(&*self.dir, &self.name, AtFlags::empty());
        }
        written
    }

    /// A new empty file beside the target named `.<name>.<tag>`, for content that is renamed
    /// into place with [`Target::replace_with`] once complete.
    pub fn create_temp(&self, tag: &str) -> io::Result<(File, OsString)> {
        let temp = OsString::from(format!(
            ".{}.{tag}",
            truncate_name(&self.name.to_string_lossy(), 100)
        ));
        let fd = rustix::fs::openat(&*self.dir, &temp, CREATE_NEW, Mode::from_raw_mode(0o666))?;
        Ok((File::from(fd), temp))
    }

    /// Rename `temp` (a name in the same directory) over the file, durably.
    pub fn replace_with(&self, temp: &OsStr) -> io::Result<()> {
        rustix::fs::renameat(&*self.dir, temp, &*self.dir, &self.name)?;
        let _ = rustix::fs::fsync(&*self.dir);
        Ok(())
    }

    /// Remove `temp` (a name in the same directory); a name already gone is not an error.
    pub fn remove_temp(&self, temp: &OsStr) {
        let _ = rustix::fs::unlinkat(&*self.dir, temp, AtFlags::empty());
    }

    /// Move the file to `to` (a trash slot outside the work directory); across file systems,
    /// copy, flush, then remove.
    pub fn move_out(&self, to: &Path) -> io::Result<()> {
        match rustix::fs::renameat(&*self.dir, &self.name, rustix::fs::CWD, to) {
            Ok(()) => Ok(()),
            Err(Errno::XDEV) => {
                let fd = rustix::fs::openat(
                    &*self.dir,
                    &self.name,
                    OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
                    Mode::empty(),
                )?;
                let mut from = File::from(fd);
                let mut copy = OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .open(to)?;
                io::copy(&mut from, &mut copy)?;
                copy.sync_all()?;
                rustix::fs::unlinkat(&*self.dir, &self.name, AtFlags::empty())?;
                Ok(())
            }
            Err(e) => Err(e.into()),
        }
    }
}

/// Flags of a file that must be created here: never through a link, never over a file.
const CREATE_NEW: OFlags = OFlags::WRONLY
    .union(OFlags::CREATE)
    .union(OFlags::EXCL)
    .union(OFlags::NOFOLLOW)
    .union(OFlags::CLOEXEC);

/// Replace (or create) `name` in `dir` with `bytes` atomically: a temporary file in the same
/// directory is written, flushed to disk and renamed over the name. An existing file's
/// permission bits (and, where allowed, its owner) are kept; a new file gets `0666 & !umask`.
pub fn write_atomic_at(
    dir: impl AsFd,
    name: &OsStr,
    bytes: &[u8],
    keep: Option<&Metadata>,
) -> io::Result<()> {
    let dir = dir.as_fd();
    let temp = OsString::from(format!(
        ".{}.{}.tooldispatch.tmp",
        truncate_name(&name.to_string_lossy(), 100),
        unique_token()
    ));
    let fd = rustix::fs::openat(dir, &temp, CREATE_NEW, Mode::from_raw_mode(0o666))?;
    let result = (|| {
        let mut file = File::from(fd);
        file.write_all(bytes)?;
        if let Some(meta) = keep {
            // The umask applied at creation; the old file's bits are what the user chose.
            file.set_permissions(Permissions::from_mode(meta.mode() & 0o777))?;
            let mine = file.metadata()?;
            if mine.uid() != meta.uid() || mine.gid() != meta.gid() {
                // Only root may give a file away; otherwise the new owner is us.
                let _ = std::os::unix::fs::fchown(&file, Some(meta.uid()), Some(meta.gid()));
            }
        }
        file.sync_all()?;
        drop(file);
        rustix::fs::renameat(dir, &temp, dir, name)?;
        // Make the rename itself durable; a directory that cannot be synced is not an error.
        let _ = rustix::fs::fsync(dir);
        Ok(())
    })();
    if result.is_err() {
        let _ = rustix::fs::unlinkat(dir, &temp, AtFlags::empty());
    }
    result
}

/// Open the directory of `path` beneath `root` and keep the file name.
fn open_target(root: &Path, path: &Path, create_dirs: bool) -> io::Result<Target> {
    let rel = path.strip_prefix(root).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "it is not inside the work directory",
        )
    })?;
    let mut parts = Vec::new();
    for component in rel.components() {
        match component {
            Component::Normal(part) => parts.push(part),
            _ => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "it is not a resolved path",
                ));
            }
        }
    }
    let name = parts.pop().ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "it names the work directory itself",
        )
    })?;
    Ok(Target {
        dir: Arc::new(open_dir_beneath(root, &parts, create_dirs)?),
        name: name.to_os_string(),
        path: path.to_path_buf(),
    })
}

/// Open `root/parts…` as a directory without following any symlink on the way.
fn open_dir_beneath(root: &Path, parts: &[&OsStr], create: bool) -> io::Result<OwnedFd> {
    let root_fd = rustix::fs::open(root, DIR_FLAGS | OFlags::NOFOLLOW, Mode::empty())?;
    if parts.is_empty() {
        return Ok(root_fd);
    }
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        let rel: PathBuf = parts.iter().collect();
        match openat2_beneath(&root_fd, &rel) {
            Ok(fd) => return Ok(fd),
            // openat2 makes no directories: the walk below does.
            Err(Errno::NOENT) if create => {}
            // Kernels before 5.6, or a seccomp filter that hides the call: walk instead.
            Err(Errno::NOSYS | Errno::PERM) => {}
            Err(e) => return Err(e.into()),
        }
    }
    walk_nofollow(root_fd, parts, create)
}

#[cfg(any(target_os = "linux", target_os = "android"))]
fn openat2_beneath(root: &OwnedFd, rel: &Path) -> Result<OwnedFd, Errno> {
    use rustix::fs::ResolveFlags;
    let resolve = ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS;
    let mut tries = 0;
    loop {
        match rustix::fs::openat2(root, rel, DIR_FLAGS, Mode::empty(), resolve) {
            // The kernel saw a rename during the lookup and will not vouch for the result.
            Err(Errno::AGAIN) if tries < OPENAT2_TRIES => tries += 1,
            other => return other,
        }
    }
}

/// Open one component at a time with `O_NOFOLLOW`, making missing ones when `create` is set.
/// Every part is a plain name (the path was resolved), so no `..` can climb out.
fn walk_nofollow(mut dir: OwnedFd, parts: &[&OsStr], create: bool) -> io::Result<OwnedFd> {
    let open = |dir: &OwnedFd, part: &OsStr| {
        rustix::fs::openat(dir, part, DIR_FLAGS | OFlags::NOFOLLOW, Mode::empty())
    };
    for part in parts {
        let opened = match open(&dir, part) {
            Err(Errno::NOENT) if create => {
                match rustix::fs::mkdirat(&dir, *part, Mode::from_raw_mode(0o777)) {
                    Ok(()) | Err(Errno::EXIST) => {}
                    Err(e) => return Err(e.into()),
                }
                open(&dir, part)
            }
            other => other,
        };
        dir = match opened {
            Ok(fd) => fd,
            // O_NOFOLLOW | O_DIRECTORY on a symlink says ENOTDIR; name it as a link.
            Err(Errno::NOTDIR) if is_symlink_at(&dir, part) => return Err(Errno::LOOP.into()),
            Err(e) => return Err(e.into()),
        };
    }
    Ok(dir)
}

fn is_symlink_at(dir: &OwnedFd, part: &OsStr) -> bool {
    rustix::fs::statat(dir, part, AtFlags::SYMLINK_NOFOLLOW)
        .is_ok_and(|s| FileType::from_raw_mode(s.st_mode) == FileType::Symlink)
}

/// An open beneath the work directory that failed, told so the model can act on it.
fn refusal(shown: &str, e: &io::Error) -> ToolError {
    let code = e.raw_os_error();
    if code == Some(Errno::LOOP.raw_os_error()) || code == Some(Errno::XDEV.raw_os_error()) {
        ToolError::failed(format!(
            "cannot change {shown}: it or a directory on its path is a symlink now (swapped for \
             one after the path was checked); file tools never write through a link, so nothing \
             was changed. Check the path and call again"
        ))
    } else if code == Some(Errno::NOTDIR.raw_os_error()) {
        ToolError::failed(format!(
            "cannot use {shown}: part of its directory path is a file, not a directory"
        ))
    } else {
        io_error("open the directory of", shown, e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setup() -> (tempfile::TempDir, Confinement) {
        let dir = tempfile::tempdir().unwrap();
        let c = Confinement::new(dir.path(), &[]).unwrap();
        (dir, c)
    }

    #[test]
    fn a_symlinked_directory_on_the_way_is_refused_not_followed() {
        let (_dir, c) = setup();
        let outside = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(outside.path(), c.root().join("d")).unwrap();
        // As if `d` had been a directory when the path was checked.
        let path = c.root().join("d/f.txt");
        for create in [false, true] {
            let err = Target::open(&c, &path, "d/f.txt", create)
                .unwrap_err()
                .to_string();
            assert!(err.contains("swapped"), "{err}");
        }
        // The fallback walk refuses the same way.
        let root = rustix::fs::open(c.root(), DIR_FLAGS, Mode::empty()).unwrap();
        let err = walk_nofollow(root, &[OsStr::new("d")], true).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(Errno::LOOP.raw_os_error()));
        assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
    }

    #[test]
    fn the_walk_makes_missing_directories_and_writes_through_the_handle() {
        let (_dir, c) = setup();
        let root = rustix::fs::open(c.root(), DIR_FLAGS, Mode::empty()).unwrap();
        let parts = [OsStr::new("a"), OsStr::new("b")];
        let dir = walk_nofollow(root, &parts, true).unwrap();
        write_atomic_at(&dir, OsStr::new("f.txt"), b"hi", None).unwrap();
        assert_eq!(std::fs::read(c.root().join("a/b/f.txt")).unwrap(), b"hi");

        let target = Target::open(&c, &c.root().join("x/y/z.txt"), "x/y/z.txt", true).unwrap();
        target.create_new(b"new").unwrap();
        assert!(target.create_new(b"again").is_err());
        assert_eq!(std::fs::read(c.root().join("x/y/z.txt")).unwrap(), b"new");
        let existing = target.read_existing("z", 100).unwrap().unwrap();
        assert_eq!(existing.bytes, b"new");
        assert!(
            Target::open_existing(&c, &c.root().join("nope/z.txt"), "z")
                .unwrap()
                .is_none()
        );
    }
}
