//! The per-session spill quota (DESIGN §6). Spilled output — results over budget that shaping
//! saves and the output run_command saves — lives in `sessions/<session>/results/`, and that
//! directory holds at most the quota (default 1 GiB): room for a new spill is made by removing
//! the session's oldest spill files, and a single spill larger than the quota keeps only its
//! head and tail. Without it, a command printing zeros fills the disk in seconds.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::SystemTime;

/// Default bytes of spilled output one session may keep.
pub const DEFAULT_SPILL_QUOTA: u64 = 1024 * 1024 * 1024;

/// Bytes set aside for the note between a cut spill's head and tail.
pub const NOTE_ROOM: u64 = 512;

/// What making room did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Room {
    /// Older spill files removed to make the room.
    pub evicted_files: u64,
    pub evicted_bytes: u64,
}

/// One lock for every quota check of this process, so two spills of a session cannot both
/// count the same free room.
static QUOTA_LOCK: Mutex<()> = Mutex::new(());

/// Make room for `file` to hold `size` bytes: remove the oldest other files of its directory
/// (the session's spill directory) until their total plus `size` is within `quota`. A `size`
/// over the quota is the caller's to cut first (see [`head_and_tail`]); it empties the rest.
pub fn make_room(file: &Path, size: u64, quota: u64) -> io::Result<Room> {
    let _held = QUOTA_LOCK.lock().unwrap_or_else(PoisonError::into_inner);
    let Some(dir) = file.parent() else {
        return Ok(Room::default());
    };
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Room::default()),
        Err(e) => return Err(e),
    };
    let mut others: Vec<(SystemTime, PathBuf, u64)> = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        let Ok(meta) = entry.metadata() else { continue };
        if path == file || !meta.is_file() {
            continue;
        }
        let modified = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
        others.push((modified, path, meta.len()));
    }
    let mut total: u64 = others.iter().map(|(_, _, len)| len).sum::<u64>() + size;
    let mut room = Room::default();
    // Oldest first; the name breaks ties so the order is the same on every check.
    others.sort();
    for (_, path, len) in others {
        if total <= quota {
            break;
        }
        match std::fs::remove_file(&path) {
            Ok(()) => {}
            // Removed meanwhile (by another process sharing the data directory): as good.
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        total -= len;
        room.evicted_files += 1;
        room.evicted_bytes += len;
    }
    Ok(room)
}

/// The one line a result carries when its spill removed older ones.
pub fn eviction_note(quota: u64) -> String {
    format!(
        "older spilled output was removed to stay under the session's {} spill quota",
        human_quota(quota)
    )
}

/// The note between a cut spill's head and tail (at most [`NOTE_ROOM`] bytes).
pub fn cut_note(omitted: u64, total: u64, quota: u64) -> String {
    format!(
        "\n[… {omitted} bytes omitted: the whole output ({total} bytes) is over the session's {} \
         spill quota, so only its head and tail are kept …]\n",
        human_quota(quota)
    )
}

/// `bytes`, or when they are over `quota`, their head and tail around a [`cut_note`], in at
/// most `quota` bytes.
pub fn head_and_tail(bytes: &[u8], quota: u64) -> Vec<u8> {
    let total = bytes.len() as u64;
    if total <= quota {
        return bytes.to_vec();
    }
    let (head, tail) = cut_sizes(quota, u64::MAX);
    let (head, tail) = (head as usize, tail as usize);
    let note = cut_note(total - head as u64 - tail as u64, total, quota);
    let mut out = Vec::with_capacity(head + note.len() + tail);
    out.extend_from_slice(&bytes[..head]);
    out.extend_from_slice(note.as_bytes());
    out.extend_from_slice(&bytes[bytes.len() - tail..]);
    out
}

/// Bytes of head and of tail a cut spill keeps under `quota`, the tail at most `tail_max`.
pub fn cut_sizes(quota: u64, tail_max: u64) -> (u64, u64) {
    let head = quota.saturating_sub(NOTE_ROOM) / 2;
    let tail = quota
        .saturating_sub(NOTE_ROOM)
        .saturating_sub(head)
        .min(tail_max);
    (head, tail)
}

/// "1 GiB", "64 KiB", "1.5 MiB", "900 bytes".
pub fn human_quota(n: u64) -> String {
    const UNITS: [(u64, &str); 3] = [(1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")];
    for (size, unit) in UNITS {
        if n >= size {
            return if n.is_multiple_of(size) {
                format!("{} {unit}", n / size)
            } else {
                format!("{:.1} {unit}", n as f64 / size as f64)
            };
        }
    }
    format!("{n} bytes")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spill(dir: &Path, name: &str, len: usize, age_secs: u64) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, vec![b'x'; len]).unwrap();
        let when = SystemTime::now() - std::time::Duration::from_secs(age_secs);
        std::fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(when)
            .unwrap();
        path
    }

    #[test]
    fn room_is_made_by_removing_the_oldest_spills_first() {
        let dir = tempfile::tempdir().unwrap();
        let quota = 64 * 1024;
        let oldest = spill(dir.path(), "a", 20_000, 300);
        let older = spill(dir.path(), "b", 20_000, 200);
        let newer = spill(dir.path(), "c", 20_000, 100);
        let new = dir.path().join("new");
        // 60 000 + 10 000 is over 65 536: the oldest goes, and only it.
        let room = make_room(&new, 10_000, quota).unwrap();
        assert_eq!(
            room,
            Room {
                evicted_files: 1,
                evicted_bytes: 20_000
            }
        );
        assert!(!oldest.exists() && older.exists() && newer.exists());
        // Within the quota nothing goes; the file itself is never counted twice.
        std::fs::write(&new, vec![b'y'; 10_000]).unwrap();
        assert_eq!(make_room(&new, 20_000, quota).unwrap(), Room::default());
        // A file as large as the quota leaves no room for any other.
        let room = make_room(&new, quota, quota).unwrap();
        assert_eq!(room.evicted_files, 2);
        assert!(new.exists());
    }

    #[test]
    fn a_spill_over_the_quota_keeps_head_and_tail_within_it() {
        let text: Vec<u8> = (0..200_000u32).map(|i| b'a' + (i % 26) as u8).collect();
        let quota = 64 * 1024;
        let cut = head_and_tail(&text, quota);
        assert!(cut.len() as u64 <= quota, "{}", cut.len());
        let (head, tail) = cut_sizes(quota, u64::MAX);
        assert_eq!(&cut[..head as usize], &text[..head as usize]);
        assert_eq!(
            &cut[cut.len() - tail as usize..],
            &text[text.len() - tail as usize..]
        );
        let note = String::from_utf8_lossy(&cut[head as usize..cut.len() - tail as usize]);
        assert!(
            note.contains("over the session's 64 KiB spill quota"),
            "{note}"
        );
        assert_eq!(head_and_tail(b"short", quota), b"short");
    }

    #[test]
    fn quotas_read_as_people_write_them() {
        assert_eq!(human_quota(DEFAULT_SPILL_QUOTA), "1 GiB");
        assert_eq!(human_quota(64 * 1024), "64 KiB");
        assert_eq!(human_quota(3 << 19), "1.5 MiB");
        assert_eq!(human_quota(900), "900 bytes");
        assert_eq!(
            eviction_note(DEFAULT_SPILL_QUOTA),
            "older spilled output was removed to stay under the session's 1 GiB spill quota"
        );
    }
}
