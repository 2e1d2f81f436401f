//! What run_command keeps of one output stream, in bounded memory.
//!
//! A command may print gigabytes; the engine shapes long results anyway (pass 3 keeps a head,
//! a tail and the error-looking lines). So the tool keeps only the first [`HEAD_CAP`] and the
//! last [`TAIL_CAP`] bytes in memory, remembers the error-looking lines of the part in between
//! as it passes, and writes the whole stream to a spill file (0600, under the data directory)
//! once it outgrows memory, so nothing is lost and the model can page through it. Spill files
//! count against the session's spill quota ([`dispatch_engine::spill`]): older ones are removed
//! to make room, and a stream larger than the quota keeps only its head and tail in the file.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{Seek, SeekFrom, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};

use dispatch_engine::Progress;
use dispatch_engine::spill;

use super::process::private_dir;

/// Bytes kept from the start of a stream.
pub const HEAD_CAP: usize = 1024 * 1024;
/// Bytes kept from the end of a stream.
pub const TAIL_CAP: usize = 1024 * 1024;
/// Most bytes of room asked of the spill quota at a time (a directory scan each).
const RESERVE_STEP: u64 = 8 * 1024 * 1024;
/// Error-looking lines kept from the omitted middle, and the bytes kept of each.
const MAX_ERROR_LINES: usize = 50;
const MAX_LINE_BYTES: usize = 300;

/// One stream's capture.
pub struct Capture {
    name: &'static str,
    head: Vec<u8>,
    head_newlines: u64,
    tail: VecDeque<u8>,
    total: u64,
    newlines: u64,
    last_byte: Option<u8>,
    /// Bytes that left memory between head and tail.
    evicted: u64,
    evicted_newlines: u64,
    /// The current line of the evicted part (its first `MAX_LINE_BYTES`).
    middle_line: Vec<u8>,
    errors: Vec<(u64, String)>,
    errors_dropped: u64,
    spill: Spill,
    /// The session's spill quota, in bytes.
    quota: u64,
    /// Whether older spill files were removed to make room for this one.
    older_removed: bool,
    /// Whether the tail of a cut spill has been written (once, by `render`).
    tail_written: AtomicBool,
}

enum Spill {
    /// Not needed yet; where it would go (`None`: no data directory).
    Unused(Option<PathBuf>),
    Open {
        file: File,
        path: PathBuf,
        written: u64,
        /// Bytes of the quota this file may fill without asking again.
        reserved: u64,
        /// Over the quota: the file holds the first `written` bytes; `render` adds the tail.
        cut: bool,
    },
    Failed(String),
}

impl Capture {
    /// A capture of stream `name` that spills to `spill_to` when it outgrows memory, within
    /// the default spill quota.
    #[cfg(test)]
    pub fn new(name: &'static str, spill_to: Option<PathBuf>) -> Capture {
        Capture::with_quota(name, spill_to, spill::DEFAULT_SPILL_QUOTA)
    }

    /// A capture whose spill counts against a session spill quota of `quota` bytes.
    pub fn with_quota(name: &'static str, spill_to: Option<PathBuf>, quota: u64) -> Capture {
        Capture {
            name,
            head: Vec::new(),
            head_newlines: 0,
            tail: VecDeque::new(),
            total: 0,
            newlines: 0,
            last_byte: None,
            evicted: 0,
            evicted_newlines: 0,
            middle_line: Vec::new(),
            errors: Vec::new(),
            errors_dropped: 0,
            spill: Spill::Unused(spill_to),
            quota,
            older_removed: false,
            tail_written: AtomicBool::new(false),
        }
    }

    pub fn total(&self) -> u64 {
        self.total
    }

    /// Bytes held in memory (head, tail and the line being judged); bounded by the caps.
    #[cfg(test)]
    pub fn memory_bytes(&self) -> usize {
        self.head.capacity() + self.tail.capacity() + self.middle_line.capacity()
    }

    /// The spill file, once the stream outgrew memory and it could be written.
    #[cfg(test)]
    pub fn spill_path(&self) -> Option<&PathBuf> {
        match &self.spill {
            Spill::Open { path, .. } => Some(path),
            _ => None,
        }
    }

    pub fn push(&mut self, chunk: &[u8]) {
        if chunk.is_empty() {
            return;
        }
        self.total += chunk.len() as u64;
        self.newlines += count_newlines(chunk);
        self.last_byte = chunk.last().copied();
        let spilling = matches!(self.spill, Spill::Open { .. });
        if spilling {
            self.write_spill(chunk);
        }
        let room = HEAD_CAP.saturating_sub(self.head.len()).min(chunk.len());
        let (to_head, rest) = chunk.split_at(room);
        if !to_head.is_empty() {
            if self.head.capacity() == 0 {
                self.head.reserve_exact(HEAD_CAP.min(64 * 1024));
            }
            self.head.extend_from_slice(to_head);
            self.head_newlines += count_newlines(to_head);
        }
        if rest.is_empty() {
            return;
        }
        if !spilling && self.tail.len() + rest.len() > TAIL_CAP {
            // Everything so far is still in memory: write it, then everything that follows.
            self.start_spill();
            if matches!(self.spill, Spill::Open { .. }) {
                let (a, b) = self.tail.as_slices();
                let (a, b) = (a.to_vec(), b.to_vec());
                let head = std::mem::take(&mut self.head);
                self.write_spill(&head);
                self.head = head;
                self.write_spill(&a);
                self.write_spill(&b);
                self.write_spill(rest);
            }
        }
        // Make room first, so the ring never grows past its cap.
        let overflow = (self.tail.len() + rest.len()).saturating_sub(TAIL_CAP);
        let from_tail = overflow.min(self.tail.len());
        if from_tail > 0 {
            self.evict(from_tail);
        }
        if self.tail.capacity() == 0 {
            self.tail.reserve_exact(TAIL_CAP);
        }
        self.tail.extend(rest);
        if self.tail.len() > TAIL_CAP {
            let excess = self.tail.len() - TAIL_CAP;
            self.evict(excess);
        }
    }

    fn start_spill(&mut self) {
        let Spill::Unused(target) = &self.spill else {
            return;
        };
        let Some(path) = target.clone() else {
            return;
        };
        let opened = path.parent().map_or(Ok(()), private_dir).and_then(|()| {
            use std::os::unix::fs::OpenOptionsExt;
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&path)
        });
        self.spill = match opened {
            Ok(file) => Spill::Open {
                file,
                path,
                written: 0,
                reserved: 0,
                cut: false,
            },
            Err(e) => Spill::Failed(format!("{}: {e}", path.display())),
        };
    }

    fn write_spill(&mut self, bytes: &[u8]) {
        let quota = self.quota;
        let Spill::Open {
            file,
            path,
            written,
            reserved,
            cut,
        } = &mut self.spill
        else {
            return;
        };
        if *cut || bytes.is_empty() {
            return;
        }
        let mut bytes = bytes;
        let wanted = *written + bytes.len() as u64;
        if wanted > *reserved {
            let ask = if wanted > quota {
                // Larger than the whole quota: keep the head written so far (cut back to its
                // share) and leave room for the note and the tail `render` adds.
                let (head, tail) = spill::cut_sizes(quota, TAIL_CAP as u64);
                *cut = true;
                if *written > head {
                    let cut_back = file
                        .set_len(head)
                        .and_then(|()| file.seek(SeekFrom::End(0)).map(drop));
                    if let Err(e) = cut_back {
                        self.spill = Spill::Failed(format!("{}: {e}", path.display()));
                        return;
                    }
                    *written = head;
                }
                bytes = &bytes[..usize::try_from(head - *written)
                    .unwrap_or(0)
                    .min(bytes.len())];
                head + spill::NOTE_ROOM + tail
            } else {
                // Ahead by a step, so the directory is not scanned per chunk; a small step of
                // a small quota, so asking ahead does not evict what the output never needs.
                let step = RESERVE_STEP.min(quota / 16);
                wanted.max(*written + step).min(quota)
            };
            match spill::make_room(path, ask, quota) {
                Ok(room) => {
                    self.older_removed |= room.evicted_files > 0;
                    *reserved = ask;
                }
                Err(e) => {
                    self.spill = Spill::Failed(format!(
                        "{}: making room under the spill quota: {e}",
                        path.display()
                    ));
                    return;
                }
            }
        }
        // A small write to the page cache; not worth a trip to the blocking pool per chunk.
        if let Err(e) = file.write_all(bytes) {
            self.spill = Spill::Failed(format!("{}: {e}", path.display()));
            return;
        }
        *written += bytes.len() as u64;
    }

    /// Finish a cut spill file: the note and the tail after the head (once; `render` calls it).
    fn write_cut_tail(&self) -> Option<String> {
        let Spill::Open {
            file,
            path,
            written,
            cut: true,
            ..
        } = &self.spill
        else {
            return None;
        };
        if self.tail_written.swap(true, Ordering::SeqCst) {
            return None;
        }
        let (_, tail_max) = spill::cut_sizes(self.quota, TAIL_CAP as u64);
        let tail_len = (self.tail.len() as u64).min(tail_max) as usize;
        let tail: Vec<u8> = self
            .tail
            .iter()
            .skip(self.tail.len() - tail_len)
            .copied()
            .collect();
        let omitted = self.total.saturating_sub(written + tail_len as u64);
        let note = spill::cut_note(omitted, self.total, self.quota);
        let mut out = file;
        out.write_all(note.as_bytes())
            .and_then(|()| out.write_all(&tail))
            .err()
            .map(|e| format!("{}: {e}", path.display()))
    }

    /// Drop the first `n` bytes of the tail from memory, judging the lines they hold.
    fn evict(&mut self, n: usize) {
        let (a, b) = self.tail.as_slices();
        let first = &a[..n.min(a.len())];
        let second = &b[..n.saturating_sub(a.len()).min(b.len())];
        let mut scanner = MiddleScanner {
            line: std::mem::take(&mut self.middle_line),
            newlines_before: self.head_newlines + self.evicted_newlines,
            errors: std::mem::take(&mut self.errors),
            dropped: self.errors_dropped,
        };
        scanner.scan(first);
        scanner.scan(second);
        self.middle_line = scanner.line;
        self.evicted_newlines = scanner.newlines_before - self.head_newlines;
        self.errors = scanner.errors;
        self.errors_dropped = scanner.dropped;
        self.tail.drain(..n);
        self.evicted += n as u64;
    }

    /// Every byte of the stream, when all of it is still in memory.
    pub fn whole(&self) -> Option<Vec<u8>> {
        if self.evicted > 0 {
            return None;
        }
        let mut all = self.head.clone();
        all.extend(self.tail.iter().copied());
        Some(all)
    }

    /// The stream as the model sees it: all of it, or its head, the error-looking lines of the
    /// omitted middle and its tail with a note saying where the full text is.
    pub fn render(&self) -> String {
        let tail: Vec<u8> = self.tail.iter().copied().collect();
        if self.evicted == 0 {
            let mut all = self.head.clone();
            all.extend_from_slice(&tail);
            let text = String::from_utf8_lossy(&all);
            return format!("--- {} ---\n{}", self.name, text.trim_end_matches('\n'));
        }
        // Whole lines where possible.
        let head = match self.head.iter().rposition(|b| *b == b'\n') {
            Some(i) => &self.head[..=i],
            None => &self.head[..],
        };
        let tail_shown = match tail.iter().position(|b| *b == b'\n') {
            Some(i) if i + 1 < tail.len() => &tail[i + 1..],
            _ => &tail[..],
        };
        let omitted = self.total - head.len() as u64 - tail_shown.len() as u64;
        let ends_open = u64::from(self.last_byte != Some(b'\n'));
        let total_lines = self.newlines + ends_open;
        let first_omitted = count_newlines(head) + 1;
        let tail_lines = count_newlines(tail_shown) + ends_open;
        let last_omitted = total_lines.saturating_sub(tail_lines);
        let lines = if last_omitted >= first_omitted {
            format!(" (lines {first_omitted}-{last_omitted})")
        } else {
            String::new()
        };
        let tail_failed = self.write_cut_tail();
        let where_full = match &self.spill {
            Spill::Open {
                path, cut: false, ..
            } => format!(
                "the full {} is in {} (read it with read_files offset/limit)",
                self.name,
                path.display()
            ),
            Spill::Open { path, written, .. } => {
                let tail = match tail_failed {
                    Some(e) => format!("its tail could not be added ({e})"),
                    None => "then its tail".to_string(),
                };
                format!(
                    "{} is over the session's {} spill quota, so {} keeps its first {written} \
                     bytes, {tail}",
                    self.name,
                    spill::human_quota(self.quota),
                    path.display()
                )
            }
            Spill::Failed(e) => format!("the full {} could not be saved ({e})", self.name),
            Spill::Unused(_) => format!(
                "only the first {} and last {} bytes of {} are kept (no data directory to save the rest)",
                HEAD_CAP, TAIL_CAP, self.name
            ),
        };
        let mut out = format!(
            "--- {}: {} bytes in {total_lines} lines, middle omitted; {where_full} ---\n",
            self.name, self.total
        );
        if self.older_removed {
            out.push_str(&format!("({})\n", spill::eviction_note(self.quota)));
        }
        out.push_str(&String::from_utf8_lossy(head));
        if !out.ends_with('\n') {
            out.push('\n');
        }
        out.push_str(&format!("… {omitted} bytes omitted{lines} …\n"));
        if !self.errors.is_empty() {
            let more = if self.errors_dropped > 0 {
                format!(" ({} more not shown)", self.errors_dropped)
            } else {
                String::new()
            };
            out.push_str(&format!("error-looking lines of the omitted part{more}:\n"));
            for (line, text) in &self.errors {
                out.push_str(&format!("{line}: {text}\n"));
            }
            out.push_str("…\n");
        }
        out.push_str(String::from_utf8_lossy(tail_shown).trim_end_matches('\n'));
        out
    }
}

/// Walks the evicted bytes line by line, keeping the lines that look like errors.
struct MiddleScanner {
    line: Vec<u8>,
    newlines_before: u64,
    errors: Vec<(u64, String)>,
    dropped: u64,
}

impl MiddleScanner {
    fn scan(&mut self, mut bytes: &[u8]) {
        while let Some(at) = memchr::memchr(b'\n', bytes) {
            self.keep(&bytes[..at]);
            self.end_line();
            bytes = &bytes[at + 1..];
        }
        self.keep(bytes);
    }

    fn keep(&mut self, part: &[u8]) {
        let room = MAX_LINE_BYTES.saturating_sub(self.line.len());
        self.line.extend_from_slice(&part[..room.min(part.len())]);
    }

    fn end_line(&mut self) {
        self.newlines_before += 1;
        if looks_like_error(&self.line) {
            if self.errors.len() < MAX_ERROR_LINES {
                let text = String::from_utf8_lossy(&self.line).trim_end().to_string();
                self.errors.push((self.newlines_before, text));
            } else {
                self.dropped += 1;
            }
        }
        self.line.clear();
    }
}

/// The engine's shaping words (dispatch_engine::shaping), matched case-insensitively.
fn looks_like_error(line: &[u8]) -> bool {
    static WORDS: std::sync::LazyLock<Option<aho_corasick::AhoCorasick>> =
        std::sync::LazyLock::new(|| {
            aho_corasick::AhoCorasick::builder()
                .ascii_case_insensitive(true)
                .build([
                    "error",
                    "failed",
                    "failure",
                    "panic",
                    "exception",
                    "fatal",
                    "traceback",
                    "denied",
                ])
                .ok()
        });
    WORDS.as_ref().is_some_and(|words| words.is_match(line))
}

fn count_newlines(bytes: &[u8]) -> u64 {
    memchr::memchr_iter(b'\n', bytes).count() as u64
}

/// Most bytes of output in one progress event.
const MAX_EVENT_BYTES: usize = 4096;

/// Output on its way to the progress stream, sent at most once per tick and at most
/// [`MAX_EVENT_BYTES`] at a time (the latest output wins), so a flood of output is a trickle of
/// events.
pub struct ProgressFeed {
    progress: Progress,
    pending: Vec<u8>,
    skipped: u64,
}

impl ProgressFeed {
    pub fn new(progress: Progress) -> ProgressFeed {
        ProgressFeed {
            progress,
            pending: Vec::new(),
            skipped: 0,
        }
    }

    pub fn push(&mut self, bytes: &[u8]) {
        self.pending.extend_from_slice(bytes);
        self.skipped += keep_latest(&mut self.pending, MAX_EVENT_BYTES);
    }

    pub fn flush(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        let mut text = String::new();
        if self.skipped > 0 {
            text.push_str(&format!("[… {} bytes not shown …]\n", self.skipped));
        }
        text.push_str(&String::from_utf8_lossy(&self.pending));
        self.pending.clear();
        self.skipped = 0;
        self.progress.emit(text);
    }
}

/// Cut `pending` to its last `max` bytes, starting at a line when one begins in them;
/// returns how many bytes were cut.
fn keep_latest(pending: &mut Vec<u8>, max: usize) -> u64 {
    if pending.len() <= max {
        return 0;
    }
    let mut cut = pending.len() - max;
    if let Some(nl) = pending[cut..].iter().position(|b| *b == b'\n')
        && cut + nl + 1 < pending.len()
    {
        cut += nl + 1;
    }
    pending.drain(..cut);
    cut as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn short_output_is_kept_whole() {
        let mut c = Capture::new("stdout", None);
        c.push(b"one\ntwo\n");
        c.push(b"three");
        assert_eq!(c.render(), "--- stdout ---\none\ntwo\nthree");
        assert_eq!(c.total(), 13);
    }

    #[test]
    fn a_flood_keeps_head_tail_and_middle_errors_in_bounded_memory() {
        let dir = tempfile::tempdir().unwrap();
        let spill = dir.path().join("s/results/c.out");
        let mut c = Capture::new("stdout", Some(spill.clone()));
        let mut expected_len = 0u64;
        let mut peak = 0;
        // 40 MB in lines of 40 bytes, one error line in the middle.
        let line = |i: u64| format!("line {i:>10} of ordinary output.....\n");
        let mut chunk = String::new();
        for i in 1..=1_000_000u64 {
            if i == 500_000 {
                chunk.push_str("error[E0308]: mismatched types here....\n");
            } else {
                chunk.push_str(&line(i));
            }
            if chunk.len() > 60_000 {
                c.push(chunk.as_bytes());
                expected_len += chunk.len() as u64;
                chunk.clear();
                peak = peak.max(c.memory_bytes());
            }
        }
        c.push(chunk.as_bytes());
        expected_len += chunk.len() as u64;
        assert!(
            peak <= HEAD_CAP + TAIL_CAP + 2 * MAX_LINE_BYTES + 4096,
            "{peak}"
        );
        assert_eq!(c.total(), expected_len);
        let text = c.render();
        assert!(
            text.starts_with(&format!(
                "--- stdout: {expected_len} bytes in 1000000 lines, middle omitted; the full stdout is in {}",
                spill.display()
            )),
            "{}",
            &text[..300]
        );
        assert!(text.contains(&line(1)));
        assert!(text.ends_with(line(1_000_000).trim_end()));
        assert!(text.contains("\n500000: error[E0308]: mismatched types here....\n"));
        assert!(text.len() < HEAD_CAP + TAIL_CAP + 2000);
        let omitted = text.lines().find(|l| l.starts_with("… ")).unwrap();
        let first_omitted = HEAD_CAP as u64 / 40 + 1;
        assert!(
            omitted.contains(&format!("(lines {first_omitted}-")),
            "{omitted}"
        );
        // The spill is the whole stream, byte for byte, and private.
        use std::os::unix::fs::PermissionsExt;
        let meta = std::fs::metadata(&spill).unwrap();
        assert_eq!(meta.len(), expected_len);
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        let at = |offset: u64| {
            use std::io::{Read, Seek, SeekFrom};
            let mut file = std::fs::File::open(&spill).unwrap();
            file.seek(SeekFrom::Start(offset)).unwrap();
            let mut buf = vec![0; 40];
            file.read_exact(&mut buf).unwrap();
            String::from_utf8(buf).unwrap()
        };
        assert_eq!(at(0), line(1));
        assert_eq!(
            at(499_999 * 40),
            "error[E0308]: mismatched types here....\n"
        );
        assert_eq!(at(777_776 * 40), line(777_777));
    }

    /// `len` bytes of numbered lines, pushed in 64 KB chunks; returns the stream.
    fn flood(c: &mut Capture, tag: &str, len: usize) -> Vec<u8> {
        let mut all = Vec::with_capacity(len + 64);
        let mut i = 0u64;
        while all.len() < len {
            all.extend_from_slice(format!("{tag} line {i:>8} of output\n").as_bytes());
            i += 1;
        }
        for chunk in all.chunks(64 * 1024) {
            c.push(chunk);
        }
        all
    }

    fn dir_bytes(dir: &std::path::Path) -> u64 {
        std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().metadata().unwrap().len())
            .sum()
    }

    #[test]
    fn a_capture_larger_than_the_spill_quota_keeps_head_and_tail_and_evicts_older_spills() {
        let data = tempfile::tempdir().unwrap();
        let results = data.path().join("sessions/s/results");
        std::fs::create_dir_all(&results).unwrap();
        let older = results.join("older.out");
        std::fs::write(&older, vec![b'o'; 10_000]).unwrap();
        let quota = 64 * 1024;
        let path = results.join("c.stdout.out");
        let mut c = Capture::with_quota("stdout", Some(path.clone()), quota);
        // `cat zero`: far more than memory and quota hold.
        let all = flood(&mut c, "z", 3 * 1024 * 1024);
        let text = c.render();
        let header = text.lines().next().unwrap();
        assert!(
            header.contains("stdout is over the session's 64 KiB spill quota")
                && header.contains("keeps its first"),
            "{header}"
        );
        assert_eq!(
            text.lines().nth(1),
            Some(
                "(older spilled output was removed to stay under the session's 64 KiB spill quota)"
            )
        );
        assert!(!older.exists());
        let kept = std::fs::read(&path).unwrap();
        assert!(kept.len() as u64 <= quota, "{}", kept.len());
        let (head, tail) = spill::cut_sizes(quota, TAIL_CAP as u64);
        assert_eq!(&kept[..head as usize], &all[..head as usize]);
        assert_eq!(
            &kept[kept.len() - tail as usize..],
            &all[all.len() - tail as usize..]
        );
        let note = String::from_utf8_lossy(&kept[head as usize..kept.len() - tail as usize]);
        assert!(note.contains("bytes omitted: the whole output"), "{note}");
        // Rendering again does not append the tail twice.
        c.render();
        assert_eq!(std::fs::read(&path).unwrap().len(), kept.len());
        assert!(dir_bytes(&results) <= quota);
    }

    #[test]
    fn captures_within_the_quota_evict_the_oldest_spill_of_the_session() {
        let data = tempfile::tempdir().unwrap();
        let results = data.path().join("sessions/s/results");
        let quota = 6 * 1024 * 1024;
        let size = 5 * 1024 * 1024 / 2;
        let mut texts = Vec::new();
        for name in ["a", "b", "c"] {
            let mut c = Capture::with_quota("stdout", Some(results.join(name)), quota);
            flood(&mut c, name, size);
            texts.push(c.render());
            // Distinct modification times, so "oldest" is well defined.
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let note =
            "(older spilled output was removed to stay under the session's 6 MiB spill quota)";
        assert!(!texts[0].contains(note) && !texts[1].contains(note));
        assert_eq!(texts[2].lines().nth(1), Some(note), "{}", &texts[2][..300]);
        assert!(
            texts[2]
                .lines()
                .next()
                .unwrap()
                .contains("the full stdout is in")
        );
        assert!(!results.join("a").exists());
        assert!(results.join("b").exists() && results.join("c").exists());
        assert!(dir_bytes(&results) <= quota);
    }

    #[test]
    fn without_a_data_directory_the_notice_says_the_middle_is_gone() {
        let mut c = Capture::new("stderr", None);
        let block = vec![b'x'; 100_000];
        for _ in 0..30 {
            c.push(&block);
        }
        let text = c.render();
        assert!(
            text.contains("no data directory to save the rest"),
            "{}",
            &text[..200]
        );
        assert!(c.spill_path().is_none());
    }

    #[test]
    fn progress_keeps_the_latest_whole_lines() {
        let mut pending = Vec::new();
        for i in 0..1000 {
            pending.extend_from_slice(format!("row {i}\n").as_bytes());
        }
        let before = pending.len();
        let cut = keep_latest(&mut pending, 100);
        let text = String::from_utf8(pending).unwrap();
        assert_eq!(cut as usize + text.len(), before);
        assert!(text.len() <= 100);
        assert!(text.starts_with("row "), "{text}");
        assert!(text.ends_with("row 999\n"));
        // One long line is cut by bytes.
        let mut long = vec![b'x'; 500];
        assert_eq!(keep_latest(&mut long, 100), 400);
        assert_eq!(long.len(), 100);
        let mut short = b"ok\n".to_vec();
        assert_eq!(keep_latest(&mut short, 100), 0);
    }

    #[test]
    fn error_words_match_in_any_case() {
        assert!(looks_like_error(b"Build FAILED"));
        assert!(looks_like_error(b"thread 'main' panicked at"));
        assert!(!looks_like_error(b"all good"));
        assert!(!looks_like_error(b""));
    }
}
