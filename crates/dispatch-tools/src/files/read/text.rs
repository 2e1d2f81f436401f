//! Text by lines, streamed: the lines before the window are skipped with memchr, the window is
//! kept (each line at most [`MAX_LINE_BYTES`], the whole within its [`Budget`], stopping at a
//! line boundary), and a bounded stretch after it is counted so the model learns the file's
//! length without a 50 MB file ever being held in memory.

use std::io::{self, BufRead};

use super::{
    Budget, COUNT_AHEAD_BYTES, CUT_NOTE_RESERVE, MAX_LINE_BYTES, Section, human_size, past_end,
    thousands,
};

/// What a cut text line tells the model about seeing the rest of it.
const LINE_CUT_HINT: &str = "; see it whole with run_command, e.g. `cut -c` or `fold`";

/// One numbered line in the `cat -n` layout; invalid UTF-8 is replaced and `lossy` set.
pub fn gutter_line(n: u64, bytes: &[u8], lossy: &mut bool) -> String {
    let text = match std::str::from_utf8(bytes) {
        Ok(s) => std::borrow::Cow::Borrowed(s),
        Err(_) => {
            *lossy = true;
            String::from_utf8_lossy(bytes)
        }
    };
    format!("{n:>6}\t{text}\n")
}

/// Bytes of the gutter before line `n`'s text.
pub fn gutter_width(n: u64) -> usize {
    let digits = n.checked_ilog10().map_or(1, |d| d as usize + 1);
    digits.max(6) + 1
}

/// Line `n` in the gutter layout, its text cut at `cap` bytes (never inside a character) with a
/// note giving the bytes not shown of its `full_len`; true when it was cut.
pub fn numbered_line(
    n: u64,
    bytes: &[u8],
    full_len: u64,
    cap: usize,
    hint: &str,
    lossy: &mut bool,
) -> (String, bool) {
    if bytes.len() as u64 >= full_len && bytes.len() <= cap {
        return (gutter_line(n, bytes, lossy), false);
    }
    let mut kept = &bytes[..bytes.len().min(cap)];
    // Do not split a character at the cut.
    if let Err(e) = std::str::from_utf8(kept)
        && e.error_len().is_none()
    {
        kept = &kept[..e.valid_up_to()];
    }
    let mut line = gutter_line(n, kept, lossy);
    line.pop();
    line.push_str(&format!(
        " [… line cut: {} more bytes{hint}]\n",
        thousands(full_len.saturating_sub(kept.len() as u64))
    ));
    (line, true)
}

/// The line being read and what is known about the file so far.
struct Scan {
    /// Lines whose terminator has been consumed.
    done: u64,
    /// Bytes consumed since the last terminator.
    pending: u64,
    /// The kept head of the current line (window lines only).
    line: Vec<u8>,
    body: String,
    /// Bytes the shown lines may take (the budget less the marker's room).
    content: usize,
    shown_first: Option<u64>,
    shown_last: u64,
    crlf: bool,
    lossy: bool,
    cut_lines: u64,
    /// The window stopped at the budget, before this line.
    stopped_by_bytes: Option<u64>,
}

impl Scan {
    fn current(&self) -> u64 {
        self.done + 1
    }

    fn take(&mut self, bytes: &[u8]) {
        self.pending += bytes.len() as u64;
        let room = (MAX_LINE_BYTES + 1).saturating_sub(self.line.len());
        self.line.extend_from_slice(&bytes[..bytes.len().min(room)]);
    }

    /// The current line is complete (terminator consumed, or end of file): show it if it fits.
    /// A line that does not fit ends the window, unless it is the window's first: that one is
    /// cut to fit, so every read moves on.
    fn finish_line(&mut self) {
        let n = self.current();
        let mut full_len = self.pending;
        let mut bytes = std::mem::take(&mut self.line);
        if bytes.last() == Some(&b'\r') && full_len as usize == bytes.len() {
            bytes.pop();
            full_len -= 1;
            self.crlf = true;
        }
        // Only a line that is shown may mark the read as lossy.
        let mut lossy = false;
        let (mut line, mut cut) = numbered_line(
            n,
            &bytes,
            full_len,
            MAX_LINE_BYTES,
            LINE_CUT_HINT,
            &mut lossy,
        );
        if self.body.len() + line.len() > self.content {
            if self.shown_first.is_some() {
                self.stopped_by_bytes = Some(n);
                self.done += 1;
                self.pending = 0;
                return;
            }
            let room = self
                .content
                .saturating_sub(gutter_width(n) + CUT_NOTE_RESERVE);
            (line, cut) = numbered_line(n, &bytes, full_len, room, LINE_CUT_HINT, &mut lossy);
            // Cut to fit: this read ends with it.
            self.content = self.body.len() + line.len();
        }
        self.cut_lines += u64::from(cut);
        self.lossy |= lossy;
        self.body.push_str(&line);
        self.shown_first.get_or_insert(n);
        self.shown_last = n;
        self.done += 1;
        self.pending = 0;
    }
}

/// Read lines `offset..offset+limit` of a text stream of `size` bytes, within `budget`.
pub fn read_text<R: BufRead>(
    mut reader: R,
    offset: u64,
    limit: u64,
    size: u64,
    budget: Budget,
) -> io::Result<Result<Section, String>> {
    let offset = offset.max(1);
    let end = offset.saturating_add(limit.max(1)); // first line not in the window
    let mut s = Scan {
        done: 0,
        pending: 0,
        line: Vec::new(),
        body: String::new(),
        content: budget.content(),
        shown_first: None,
        shown_last: 0,
        crlf: false,
        lossy: false,
        cut_lines: 0,
        stopped_by_bytes: None,
    };
    let mut counted_ahead: u64 = 0;
    let mut exact = true;
    loop {
        let buf = match reader.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if buf.is_empty() {
            break;
        }
        let n = buf.len();
        let in_window = s.current() >= offset && s.current() < end && s.stopped_by_bytes.is_none();
        if s.current() < offset {
            // Skip whole lines up to the window.
            let wanted = offset - s.current();
            let mut used = n;
            let mut found = 0;
            for i in memchr::memchr_iter(b'\n', buf) {
                found += 1;
                if found == wanted {
                    used = i + 1;
                    break;
                }
            }
            s.done += found;
            s.pending = if found > 0 {
                (used - memchr::memrchr(b'\n', &buf[..used]).map_or(0, |p| p + 1)) as u64
            } else {
                s.pending + n as u64
            };
            reader.consume(used);
        } else if in_window {
            match memchr::memchr(b'\n', buf) {
                Some(i) => {
                    s.take(&buf[..i]);
                    reader.consume(i + 1);
                    s.finish_line();
                }
                None => {
                    s.take(buf);
                    reader.consume(n);
                }
            }
        } else {
            // After the window: count lines, within a budget.
            if counted_ahead >= COUNT_AHEAD_BYTES {
                exact = false;
                break;
            }
            let lines = memchr::memchr_iter(b'\n', buf).count() as u64;
            s.done += lines;
            s.pending = match memchr::memrchr(b'\n', buf) {
                Some(p) => (n - p - 1) as u64,
                None => s.pending + n as u64,
            };
            counted_ahead += n as u64;
            reader.consume(n);
        }
    }
    // An unterminated last line is a line.
    if s.pending > 0 {
        let current = s.current();
        if current >= offset && current < end && s.stopped_by_bytes.is_none() && exact {
            s.finish_line();
        } else {
            s.done += 1;
            s.pending = 0;
        }
    }
    let total = s.done;
    if total == 0 {
        return Ok(Ok(Section {
            summary: "empty file".into(),
            body: "(empty file)\n".into(),
            image: None,
        }));
    }
    let Some(first) = s.shown_first else {
        return Ok(Err(past_end(offset, total, "line")));
    };
    let last = s.shown_last;
    let of = if exact {
        total.to_string()
    } else {
        format!("at least {total}")
    };
    let mut summary = format!("lines {first}-{last} of {of}");
    let mut body = s.body;
    if s.crlf {
        summary.push_str("; CRLF line endings (shown without the CR)");
    }
    if s.lossy {
        summary.push_str("; not valid UTF-8: undecodable bytes shown as U+FFFD");
    }
    if s.cut_lines > 0 {
        summary.push_str(&format!("; {} long line(s) cut", s.cut_lines));
    }
    if last < total {
        let why = if s.stopped_by_bytes.is_some() {
            budget.why()
        } else {
            "the limit".to_string()
        };
        let rest = if exact {
            format!("lines {}-{total} not shown", last + 1)
        } else {
            format!("more lines follow (the file is {})", human_size(size))
        };
        summary.push_str("; more follows");
        body.push_str(&format!(
            "[truncated by {why}: {rest}; continue with offset={}]\n",
            last + 1
        ));
    }
    Ok(Ok(Section {
        summary,
        body,
        image: None,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn read(text: &[u8], offset: u64, limit: u64) -> Result<Section, String> {
        read_within(text, offset, limit, Budget::CAP)
    }

    fn read_within(
        text: &[u8],
        offset: u64,
        limit: u64,
        budget: Budget,
    ) -> Result<Section, String> {
        // A tiny buffer exercises lines that straddle buffer refills.
        let reader = io::BufReader::with_capacity(7, text);
        read_text(reader, offset, limit, text.len() as u64, budget).unwrap()
    }

    fn budget(bytes: usize) -> Budget {
        Budget {
            bytes,
            bound: super::super::Bound::Result,
        }
    }

    #[test]
    fn a_window_of_lines_gets_a_gutter_and_a_total() {
        let s = read(b"one\ntwo\nthree\nfour\n", 2, 2).unwrap();
        assert_eq!(s.summary, "lines 2-3 of 4; more follows");
        assert_eq!(
            s.body,
            "     2\ttwo\n     3\tthree\n[truncated by the limit: lines 4-4 not shown; continue with offset=4]\n"
        );
        let s = read(b"one\ntwo", 1, 10).unwrap();
        assert_eq!(s.summary, "lines 1-2 of 2");
        assert_eq!(s.body, "     1\tone\n     2\ttwo\n");
    }

    #[test]
    fn crlf_is_stripped_and_reported() {
        let s = read(b"a\r\nb\r\n", 1, 10).unwrap();
        assert_eq!(s.body, "     1\ta\n     2\tb\n");
        assert!(s.summary.contains("CRLF"), "{}", s.summary);
    }

    #[test]
    fn invalid_utf8_is_replaced_and_noted() {
        let s = read(b"caf\xe9\nok\n", 1, 10).unwrap();
        assert_eq!(s.body, "     1\tcaf\u{fffd}\n     2\tok\n");
        assert!(s.summary.contains("not valid UTF-8"), "{}", s.summary);
    }

    #[test]
    fn offsets_past_the_end_and_empty_files_say_so() {
        assert_eq!(
            read(b"a\nb\n", 3, 1).unwrap_err(),
            "offset 3 is past the end: there are 2 lines; use an offset from 1 to 2"
        );
        assert_eq!(read(b"", 1, 10).unwrap().summary, "empty file");
        // A file of empty lines has lines.
        assert_eq!(read(b"\n\n", 2, 1).unwrap().body, "     2\t\n");
    }

    #[test]
    fn a_long_line_is_cut_with_its_length() {
        let mut text = vec![b'x'; MAX_LINE_BYTES + 500];
        text.extend_from_slice(b"\nshort\n");
        let s = read(&text, 1, 10).unwrap();
        assert!(
            s.body.contains("[… line cut: 500 more bytes"),
            "{}",
            &s.body[s.body.len() - 200..]
        );
        assert!(s.body.ends_with("     2\tshort\n"));
        assert!(s.summary.contains("1 long line(s) cut"));
    }

    #[test]
    fn the_byte_cap_stops_the_window_and_names_the_next_offset() {
        let line = "y".repeat(1000);
        let text = format!("{line}\n").repeat(3000);
        let s = read(text.as_bytes(), 1, 3000).unwrap();
        assert!(s.body.len() <= super::super::MAX_READ_BYTES);
        let shown = s.body.lines().filter(|l| l.contains('\t')).count() as u64;
        assert!(
            s.body
                .contains(&format!("continue with offset={}", shown + 1))
        );
        assert!(s.body.contains("per-read cap"), "{}", s.summary);
    }

    #[test]
    fn pages_within_a_budget_stop_at_lines_and_cover_every_line_once() {
        let text: String = (1..=700)
            .map(|i| format!("line {i} {}\n", "ab".repeat(i % 37)))
            .collect();
        for bytes in [400, 1000, 4096] {
            let mut offset = 1;
            let mut seen = Vec::new();
            loop {
                let s = read_within(text.as_bytes(), offset, 2000, budget(bytes)).unwrap();
                assert!(s.body.len() <= bytes, "{bytes}: {} bytes", s.body.len());
                for l in s.body.lines().filter(|l| !l.starts_with('[')) {
                    let (n, rest) = l.trim_start().split_once('\t').unwrap();
                    seen.push(n.parse::<usize>().unwrap());
                    assert!(rest.starts_with(&format!("line {n} ")), "{l}");
                }
                match s.body.rsplit_once("continue with offset=") {
                    Some((_, next)) => {
                        assert!(s.body.contains("the result budget"), "{}", s.body);
                        offset = next.trim_end_matches("]\n").parse().unwrap();
                    }
                    None => break,
                }
            }
            assert_eq!(seen, (1..=700).collect::<Vec<_>>(), "budget {bytes}");
        }
    }

    #[test]
    fn a_first_line_over_the_budget_is_cut_to_it_and_the_next_read_moves_on() {
        let text = format!("{}\nafter\n", "é".repeat(3000));
        let s = read_within(text.as_bytes(), 1, 10, budget(1000)).unwrap();
        assert!(s.body.len() <= 1000, "{}", s.body.len());
        assert!(s.body.starts_with("     1\té"), "{}", s.body);
        assert!(
            s.body
                .contains(" more bytes; see it whole with run_command"),
            "{}",
            s.body
        );
        assert!(s.body.ends_with("continue with offset=2]\n"), "{}", s.body);
        assert!(s.summary.contains("1 long line(s) cut"), "{}", s.summary);
        assert!(
            !s.body.contains('\u{fffd}'),
            "a character was split: {}",
            s.body
        );
        let s = read_within(text.as_bytes(), 2, 10, budget(1000)).unwrap();
        assert_eq!(s.body, "     2\tafter\n");
    }
}
