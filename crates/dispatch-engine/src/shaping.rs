//! Output shaping (DESIGN §4.6): a result over budget keeps its head, its tail and every line
//! that looks like an error; the notice goes on top and the full text is spilled to a file.

use std::path::{Path, PathBuf};

/// Default per-result budget in bytes.
pub const DEFAULT_RESULT_BUDGET: usize = 20_000;

/// An id from the model or the caller as a file-name part: a safe prefix plus a hash of the
/// whole id, so no id can play path tricks and no two ids share a file.
pub fn safe_component(id: &str) -> String {
    let prefix: String = id
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
        .take(32)
        .collect();
    let hash = blake3::hash(id.as_bytes()).to_hex();
    format!("{prefix}-{}", &hash[..12])
}

/// `<data>/sessions/<session>`: a session's own files (spilled results, command output).
pub fn session_dir(data_dir: &Path, session: &str) -> PathBuf {
    data_dir.join("sessions").join(safe_component(session))
}

/// `<data>/sessions/<session>/results`: where over-budget results are spilled. read_files may
/// read the calling session's own directory even though it lies outside the work directory.
pub fn spill_dir(data_dir: &Path, session: &str) -> PathBuf {
    session_dir(data_dir, session).join("results")
}

/// Shape `text` to `budget` bytes. `spill` is where the full text may be written, within the
/// session's spill quota of `quota` bytes (see [`crate::spill`]).
pub fn shape(text: &str, budget: usize, spill: Option<&Path>, quota: u64) -> String {
    if text.len() <= budget {
        return text.to_string();
    }
    let lines: Vec<&str> = text.lines().collect();
    let head_budget = budget * 2 / 5;
    let tail_budget = budget * 2 / 5;
    let error_budget = budget - head_budget - tail_budget;

    let mut head_end = 0;
    let mut used = 0;
    while head_end < lines.len() && used + lines[head_end].len() < head_budget {
        used += lines[head_end].len() + 1;
        head_end += 1;
    }
    let mut tail_start = lines.len();
    used = 0;
    while tail_start > head_end && used + lines[tail_start - 1].len() < tail_budget {
        used += lines[tail_start - 1].len() + 1;
        tail_start -= 1;
    }
    let mut errors = Vec::new();
    used = 0;
    let mut errors_dropped = 0;
    for (i, line) in lines.iter().enumerate().take(tail_start).skip(head_end) {
        if looks_like_error(line) {
            let line = clip(line, 400);
            if used + line.len() < error_budget {
                used += line.len() + 1;
                errors.push(format!("{}: {line}", i + 1));
            } else {
                errors_dropped += 1;
            }
        }
    }

    let mut evicted = false;
    let where_full = match spill.map(|p| write_spill(p, text, quota)) {
        Some(Ok(written)) if written.cut => {
            evicted = written.room.evicted_files > 0;
            format!(
                "its head and tail: {} (the whole text is over the session's {} spill quota)",
                written.path.display(),
                crate::spill::human_quota(quota)
            )
        }
        Some(Ok(written)) => {
            evicted = written.room.evicted_files > 0;
            format!(
                "full text: {} (read it with read_files and offset/limit)",
                written.path.display()
            )
        }
        Some(Err(e)) => format!("the full text could not be saved ({e})"),
        None => "the full text is not kept".to_string(),
    };
    let omitted = tail_start - head_end;
    // A single huge line has no line structure to keep: it is cut by bytes below.
    let by_bytes = head_end == 0 && tail_start == lines.len();
    let shown = if by_bytes {
        format!("the first and last ~{} bytes of one long line", head_budget)
    } else {
        let mut parts = Vec::new();
        if head_end > 0 {
            parts.push(format!("lines 1-{head_end}"));
        }
        if !errors.is_empty() {
            let more = if errors_dropped > 0 {
                format!(" ({errors_dropped} more not shown)")
            } else {
                String::new()
            };
            parts.push(format!(
                "{} error-looking line(s) from the middle{more}",
                errors.len()
            ));
        }
        if tail_start < lines.len() {
            parts.push(format!("lines {}-{}", tail_start + 1, lines.len()));
        }
        parts.join(", ")
    };
    let mut out = format!(
        "[output shaped: {} bytes in {} lines, over the {budget}-byte budget; showing {shown}; {where_full}]\n",
        text.len(),
        lines.len(),
    );
    if evicted {
        out.push_str(&format!("[{}]\n", crate::spill::eviction_note(quota)));
    }
    if by_bytes {
        out.push_str(clip(text, head_budget));
        out.push_str("\n…\n");
        let start = ceil_boundary(text, text.len().saturating_sub(tail_budget));
        out.push_str(&text[start..]);
        return out;
    }
    for line in &lines[..head_end] {
        out.push_str(line);
        out.push('\n');
    }
    out.push_str(&format!("… {omitted} line(s) omitted …\n"));
    for e in &errors {
        out.push_str(e);
        out.push('\n');
    }
    if !errors.is_empty() {
        out.push_str("…\n");
    }
    out.push_str(&lines[tail_start..].join("\n"));
    out
}

fn looks_like_error(line: &str) -> bool {
    let l = line.to_lowercase();
    [
        "error",
        "failed",
        "failure",
        "panic",
        "exception",
        "fatal",
        "traceback",
        "denied",
    ]
    .iter()
    .any(|w| l.contains(w))
}

fn clip(s: &str, max: usize) -> &str {
    &s[..floor_boundary(s, max.min(s.len()))]
}

fn floor_boundary(s: &str, mut i: usize) -> usize {
    while i > 0 && !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

fn ceil_boundary(s: &str, mut i: usize) -> usize {
    while i < s.len() && !s.is_char_boundary(i) {
        i += 1;
    }
    i
}

/// A spill written: where, whether it was cut to its head and tail, what room it made.
struct Written {
    path: PathBuf,
    cut: bool,
    room: crate::spill::Room,
}

/// Results can hold anything a tool saw, so only the user may read them (0700 / 0600).
fn write_spill(path: &Path, text: &str, quota: u64) -> std::io::Result<Written> {
    if let Some(dir) = path.parent() {
        let mut builder = std::fs::DirBuilder::new();
        builder.recursive(true);
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
        builder.create(dir)?;
    }
    let body = crate::spill::head_and_tail(text.as_bytes(), quota);
    let room = crate::spill::make_room(path, body.len() as u64, quota)?;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    std::io::Write::write_all(&mut options.open(path)?, &body)?;
    Ok(Written {
        path: path.to_path_buf(),
        cut: body.len() < text.len(),
        room,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spill::DEFAULT_SPILL_QUOTA;

    #[test]
    fn short_text_is_untouched() {
        assert_eq!(shape("hello", 100, None, DEFAULT_SPILL_QUOTA), "hello");
    }

    #[test]
    fn long_text_keeps_head_tail_and_error_lines_with_notice_on_top() {
        let mut text = String::new();
        for i in 1..=2000 {
            if i == 1000 {
                text.push_str("error[E0308]: mismatched types\n");
            } else {
                text.push_str(&format!("line {i} of ordinary output\n"));
            }
        }
        let dir = tempfile::tempdir().unwrap();
        let spill = dir.path().join("results/c1.txt");
        let shaped = shape(&text, 2000, Some(&spill), DEFAULT_SPILL_QUOTA);
        assert!(shaped.len() < 2600, "{}", shaped.len());
        assert!(shaped.starts_with("[output shaped: "), "{shaped}");
        assert!(shaped.contains(&format!("full text: {}", spill.display())));
        assert!(shaped.contains("line 1 of ordinary output"));
        assert!(shaped.contains("line 2000 of ordinary output"));
        assert!(shaped.contains("1000: error[E0308]: mismatched types"));
        assert_eq!(std::fs::read_to_string(&spill).unwrap(), text);
    }

    #[test]
    fn spills_past_the_session_quota_remove_the_oldest_and_say_so_in_one_line() {
        let data = tempfile::tempdir().unwrap();
        let dir = spill_dir(data.path(), "s");
        let quota = 64 * 1024;
        let text = |tag: &str| format!("{tag} line of output\n").repeat(1500); // ~30 KB
        let first = shape(&text("one"), 1000, Some(&dir.join("1.txt")), quota);
        let second = shape(&text("two"), 1000, Some(&dir.join("2.txt")), quota);
        let note =
            "[older spilled output was removed to stay under the session's 64 KiB spill quota]";
        assert!(!first.contains(note) && !second.contains(note), "{second}");
        // A third 30 KB spill does not fit beside two: the oldest goes, the result says so.
        let third = shape(&text("three"), 1000, Some(&dir.join("3.txt")), quota);
        assert_eq!(third.lines().nth(1), Some(note), "{third}");
        assert!(!dir.join("1.txt").exists());
        assert_eq!(
            std::fs::read_to_string(dir.join("3.txt")).unwrap(),
            text("three")
        );
        let total: u64 = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().metadata().unwrap().len())
            .sum();
        assert!(total <= quota, "{total}");
    }

    #[test]
    fn a_result_larger_than_the_quota_spills_its_head_and_tail_only() {
        let data = tempfile::tempdir().unwrap();
        let dir = spill_dir(data.path(), "s");
        let quota = 64 * 1024;
        let mut text = String::new();
        for i in 0..20_000 {
            text.push_str(&format!("line {i:>6} of a long result\n"));
        }
        let older = dir.join("older.txt");
        shape(&"old\n".repeat(1000), 100, Some(&older), quota);
        let shaped = shape(&text, 1000, Some(&dir.join("big.txt")), quota);
        assert!(
            shaped.contains("its head and tail: ")
                && shaped.contains("over the session's 64 KiB spill quota"),
            "{shaped}"
        );
        assert!(
            shaped.contains("[older spilled output was removed"),
            "{shaped}"
        );
        let kept = std::fs::read_to_string(dir.join("big.txt")).unwrap();
        assert!(kept.len() as u64 <= quota, "{}", kept.len());
        assert!(kept.starts_with("line      0 of a long result\n"));
        assert!(kept.ends_with("line  19999 of a long result\n"));
        assert!(
            kept.contains("bytes omitted: the whole output"),
            "{}",
            &kept[..200]
        );
        assert!(!older.exists());
    }

    #[test]
    fn one_huge_line_is_cut_on_char_boundaries() {
        let text = "é".repeat(50_000);
        let shaped = shape(&text, 1000, None, DEFAULT_SPILL_QUOTA);
        assert!(shaped.contains("the full text is not kept"));
        assert!(shaped.len() < 1500);
    }
}
