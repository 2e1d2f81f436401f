//! The readers behind `read_files`, one per format. A file is sniffed (first bytes, then the
//! extension) so a model gets text it can use whatever the file is: numbered lines for text,
//! rows for CSV/TSV, pages for PDF, paragraphs for DOCX, slides for PPTX, an image part for
//! pictures, and a one-line summary (never garbage) for any other binary file.
//!
//! Every reader is bounded by the [`Budget`] it is given (its file's share of the call's result
//! budget, never over [`MAX_READ_BYTES`]): it stops at a line, row, page or slide boundary,
//! cuts a single unit that is larger than the whole budget with a note saying so, and ends with
//! the offset to continue from, so any file can be read completely in pages that each fit the
//! result the engine keeps unshaped. Text and tables are streamed so a huge file is never loaded
//! whole, and the containers that must be parsed whole (PDF, DOCX, PPTX, images) have their own
//! size limits.

use std::fs::File;
use std::io::{self, Read};
use std::path::Path;

pub(crate) mod binary;
pub(crate) mod image;
pub(crate) mod office;
pub(crate) mod pdf;
pub(crate) mod table;
pub(crate) mod text;

/// Most text one read returns for one file (the seed's 1 MiB cap per read), whatever the
/// result budget.
pub const MAX_READ_BYTES: usize = 1 << 20;
/// Room kept at the end of every budget for the `[truncated …; continue with offset=N]` line.
pub const MARKER_RESERVE: usize = 220;
/// Room kept on a cut line, row or page for the note that says it is cut.
pub const CUT_NOTE_RESERVE: usize = 140;
/// Lines (or rows, or DOCX paragraphs) returned when the call gives no limit.
pub const DEFAULT_LINE_LIMIT: u64 = 2000;
/// Pages or slides returned when the call gives no limit.
pub const DEFAULT_PAGE_LIMIT: u64 = 50;
/// A line longer than this is cut in the gutter view (its length is stated).
pub const MAX_LINE_BYTES: usize = 8 * 1024;
/// How much more of a file is scanned after the window to give an exact line count.
pub const COUNT_AHEAD_BYTES: u64 = 16 << 20;
/// Bytes sniffed to decide a file's kind.
const SNIFF_BYTES: usize = 8 * 1024;

/// Which part of a file to read: 1-based first unit and how many.
#[derive(Clone, Copy, Debug)]
pub struct Window {
    pub offset: u64,
    pub limit: Option<u64>,
}

/// How many bytes of text one file's section may hold (the truncation marker included), and
/// what set that bound, so the marker can say why the file stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Budget {
    pub bytes: usize,
    pub bound: Bound,
}

/// What bounds a file's section.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bound {
    /// [`MAX_READ_BYTES`], for callers whose result budget is larger.
    Cap,
    /// The call's whole result budget (one file read).
    Result,
    /// This file's share of the result budget (several files read).
    Share,
}

impl Budget {
    /// The per-read cap: what a reader may return at most.
    pub const CAP: Budget = Budget {
        bytes: MAX_READ_BYTES,
        bound: Bound::Cap,
    };

    /// Bytes for the units themselves: the budget less the room for the closing marker.
    pub fn content(&self) -> usize {
        self.bytes.saturating_sub(MARKER_RESERVE)
    }

    /// The bound, as the marker names it: `[truncated by {why}: …]`.
    pub fn why(&self) -> String {
        match self.bound {
            Bound::Cap => format!("the {} per-read cap", human_size(MAX_READ_BYTES as u64)),
            Bound::Result => format!(
                "the result budget ({} bytes per call)",
                thousands(self.bytes as u64)
            ),
            Bound::Share => format!(
                "this file's share of the result budget ({} bytes; read fewer files per call for more)",
                thousands(self.bytes as u64)
            ),
        }
    }
}

/// What one file read produced.
#[derive(Debug, Default)]
pub struct Section {
    /// What was read, for the section header: `lines 1-20 of 20; CRLF line endings`.
    pub summary: String,
    /// The text shown under the header (may be empty for an image).
    pub body: String,
    /// An image as a `data:` URL.
    pub image: Option<String>,
}

/// Bytes of images still allowed in this call; each image takes its size from it.
pub struct ImageBudget(pub usize);

/// What a file is, decided from its first bytes and its name.
#[derive(Debug, PartialEq, Eq)]
enum Kind {
    Text,
    Table(u8),
    Pdf,
    Docx,
    Pptx,
    Image(&'static str),
    Binary(&'static str),
}

/// Roughly how much text `path` gives, to share a call's budget out from the smallest file up;
/// only the order depends on it, never what is returned.
pub fn text_estimate(path: &Path) -> u64 {
    let size = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    let ext = path
        .extension()
        .map(|e| e.to_string_lossy().to_ascii_lowercase())
        .unwrap_or_default();
    match ext.as_str() {
        // Returned as an image part: a one-line header of text.
        "png" | "jpg" | "jpeg" | "gif" | "webp" => 0,
        // Compressed containers: their text is a fraction of their size.
        "pdf" | "docx" | "pptx" => size / 8,
        _ => size,
    }
}

/// Read the window of `path` (already resolved and confined) within `budget`. The error is the
/// message for this file's `error: …` line.
pub fn read_path(
    path: &Path,
    window: Window,
    budget: Budget,
    images: &mut ImageBudget,
) -> Result<Section, String> {
    let meta = std::fs::metadata(path).map_err(|e| io_message(path, &e))?;
    if meta.is_dir() {
        return Err(
            "this is a directory; list it with find_files (mode=\"list\" with this path as dir)"
                .into(),
        );
    }
    if !meta.is_file() {
        // Opening a FIFO blocks and a device never ends: neither is a file to read.
        return Err(format!(
            "this is not a regular file ({}); read_files only reads files",
            binary::special_kind(&meta)
        ));
    }
    let mut file = File::open(path).map_err(|e| io_message(path, &e))?;
    let size = meta.len();
    let mut head = Vec::with_capacity(SNIFF_BYTES);
    (&mut file)
        .take(SNIFF_BYTES as u64)
        .read_to_end(&mut head)
        .map_err(|e| io_message(path, &e))?;
    let ext = path
        .extension()
        .map(|e| e.to_string_lossy().to_ascii_lowercase())
        .unwrap_or_default();
    match detect(&ext, &head) {
        Kind::Text => {
            let reader = io::BufReader::with_capacity(64 * 1024, io::Cursor::new(head).chain(file));
            let limit = window.limit.unwrap_or(DEFAULT_LINE_LIMIT);
            text::read_text(reader, window.offset, limit, size, budget)
                .map_err(|e| io_message(path, &e))?
        }
        Kind::Table(delimiter) => {
            let reader = io::Cursor::new(head).chain(file);
            let limit = window.limit.unwrap_or(DEFAULT_LINE_LIMIT);
            table::read_table(reader, delimiter, window.offset, limit, size, budget)
        }
        Kind::Pdf => guarded("PDF", || pdf::read_pdf(path, size, window, budget)),
        Kind::Docx => guarded("DOCX", || office::read_docx(file, window, budget)),
        Kind::Pptx => guarded("PPTX", || office::read_pptx(file, window, budget)),
        Kind::Image(mime) => image::read_image(head, file, size, mime, images),
        Kind::Binary(what) => Ok(binary::summary(what, size)),
    }
}

/// Run a parser of a hostile container format; a panic inside it fails this file only.
fn guarded(
    format: &str,
    parse: impl FnOnce() -> Result<Section, String>,
) -> Result<Section, String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(parse)).unwrap_or_else(|_| {
        Err(format!(
            "this {format} could not be parsed (the parser gave up on malformed data); \
             convert it to text with another tool"
        ))
    })
}

fn detect(ext: &str, head: &[u8]) -> Kind {
    if head.starts_with(b"%PDF-") {
        return Kind::Pdf;
    }
    if let Some(mime) = image::mime_of(head) {
        return Kind::Image(mime);
    }
    let zip = head.starts_with(b"PK\x03\x04");
    match ext {
        "docx" if zip => return Kind::Docx,
        "pptx" if zip => return Kind::Pptx,
        _ => {}
    }
    if let Some(what) = binary::sniff(head) {
        return Kind::Binary(what);
    }
    match ext {
        "csv" => Kind::Table(b','),
        "tsv" | "tab" => Kind::Table(b'\t'),
        _ => Kind::Text,
    }
}

/// An I/O error as the model should read it.
pub fn io_message(path: &Path, e: &io::Error) -> String {
    match e.kind() {
        io::ErrorKind::NotFound => {
            "no such file; check the name with find_files (mode=\"glob\")".to_string()
        }
        io::ErrorKind::PermissionDenied => format!(
            "permission denied by the file system ({}); this file cannot be read here",
            path.display()
        ),
        _ => format!("cannot read it: {e}"),
    }
}

/// `12,345` — big numbers in messages, readable.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A size as the model should read it: `512 bytes`, `3.2 KiB`, `50.0 MiB`.
pub fn human_size(bytes: u64) -> String {
    const KIB: f64 = 1024.0;
    let b = bytes as f64;
    if bytes < 1024 {
        format!("{bytes} bytes")
    } else if b < KIB * KIB {
        format!("{:.1} KiB", b / KIB)
    } else if b < KIB * KIB * KIB {
        format!("{:.1} MiB", b / (KIB * KIB))
    } else {
        format!("{:.1} GiB", b / (KIB * KIB * KIB))
    }
}

/// Render numbered units (DOCX paragraphs) the way text lines are: a gutter, the window, the
/// budget, and a "next offset" marker when more follows.
pub fn render_numbered(
    units: &[String],
    offset: u64,
    limit: u64,
    unit: &str,
    budget: Budget,
) -> Result<Section, String> {
    let total = units.len() as u64;
    if total == 0 {
        return Ok(Section {
            summary: format!("no {unit}s"),
            body: "(no text)".into(),
            image: None,
        });
    }
    if offset > total {
        return Err(past_end(offset, total, unit));
    }
    let mut content = budget.content();
    let mut body = String::new();
    let mut last = offset - 1;
    let end = offset.saturating_add(limit).min(total + 1);
    let mut cut_by_bytes = false;
    let mut cut_units = 0u64;
    for n in offset..end {
        let bytes = units[(n - 1) as usize].as_bytes();
        let full = bytes.len() as u64;
        let (mut line, mut cut) = text::numbered_line(n, bytes, full, usize::MAX, "", &mut false);
        if body.len() + line.len() > content {
            if n > offset {
                cut_by_bytes = true;
                break;
            }
            // The first unit alone is over the budget: show what fits of it.
            let room = content.saturating_sub(text::gutter_width(n) + CUT_NOTE_RESERVE);
            (line, cut) = text::numbered_line(n, bytes, full, room, "", &mut false);
            // Cut to fit: this read ends with it.
            content = body.len() + line.len();
        }
        cut_units += u64::from(cut);
        body.push_str(&line);
        last = n;
    }
    let mut summary = format!("{unit}s {offset}-{last} of {total}");
    if cut_units > 0 {
        summary.push_str(&format!("; {cut_units} long {unit}(s) cut"));
    }
    if last < total {
        summary.push_str("; more follows");
        let why = cut_by_bytes.then_some(budget);
        body.push_str(&more_marker(last, total, unit, why));
    }
    Ok(Section {
        summary,
        body,
        image: None,
    })
}

/// Render pages or slides: a `--- page N ---` line before each, the window, the budget.
pub fn render_pages(
    total: u64,
    offset: u64,
    limit: Option<u64>,
    unit: &str,
    budget: Budget,
    mut page_text: impl FnMut(u64) -> Result<String, String>,
) -> Result<Section, String> {
    if total == 0 {
        return Ok(Section {
            summary: format!("no {unit}s"),
            body: "(no text)".into(),
            image: None,
        });
    }
    if offset > total {
        return Err(past_end(offset, total, unit));
    }
    let limit = limit.unwrap_or(DEFAULT_PAGE_LIMIT);
    let end = offset.saturating_add(limit).min(total + 1);
    let mut content = budget.content();
    let mut body = String::new();
    let mut last = offset - 1;
    let mut cut_by_bytes = false;
    for n in offset..end {
        let text = match page_text(n) {
            Ok(t) if t.trim().is_empty() => {
                format!("(no text on this {unit}: it may hold only images)")
            }
            Ok(t) => t.trim_end().to_string(),
            Err(e) => format!("(the text of this {unit} could not be extracted: {e})"),
        };
        let mut chunk = format!("--- {unit} {n} ---\n{text}\n");
        if body.len() + chunk.len() > content {
            if n > offset {
                cut_by_bytes = true;
                break;
            }
            // One page over the budget on its own: show what fits of it.
            let keep = floor_char_boundary(&chunk, content.saturating_sub(CUT_NOTE_RESERVE));
            let more = chunk.len() - keep;
            chunk.truncate(keep);
            chunk.push_str(&format!(
                "\n[… {unit} {n} is cut here by {}: {} more bytes of its text not shown; \
                 to see all of it, extract the text with run_command]\n",
                budget.why(),
                thousands(more as u64)
            ));
            // Cut to fit: this read ends with it.
            content = chunk.len();
        }
        body.push_str(&chunk);
        last = n;
    }
    let mut summary = format!("{unit}s {offset}-{last} of {total}");
    if last < total {
        summary.push_str("; more follows");
        let why = cut_by_bytes.then_some(budget);
        body.push_str(&more_marker(last, total, unit, why));
    }
    Ok(Section {
        summary,
        body,
        image: None,
    })
}

/// The line that ends a window with more after it; `by_budget` when the budget stopped it
/// rather than the limit.
pub fn more_marker(last: u64, total: u64, unit: &str, by_budget: Option<Budget>) -> String {
    let why = match by_budget {
        Some(budget) => budget.why(),
        None => "the limit".to_string(),
    };
    format!(
        "[truncated by {why}: {unit}s {}-{} not shown; continue with offset={}]\n",
        last + 1,
        total,
        last + 1
    )
}

pub fn past_end(offset: u64, total: u64, unit: &str) -> String {
    let plural = if total == 1 { "" } else { "s" };
    format!(
        "offset {offset} is past the end: there {} {total} {unit}{plural}; use an offset from 1 to {total}",
        if total == 1 { "is" } else { "are" }
    )
}

/// The largest index ≤ `at` that is a char boundary of `s`.
pub fn floor_char_boundary(s: &str, at: usize) -> usize {
    if at >= s.len() {
        return s.len();
    }
    (0..=at).rev().find(|i| s.is_char_boundary(*i)).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_come_from_magic_bytes_before_names() {
        assert_eq!(detect("txt", b"%PDF-1.4\n"), Kind::Pdf);
        assert_eq!(
            detect("txt", b"\x89PNG\r\n\x1a\n...."),
            Kind::Image("image/png")
        );
        assert_eq!(detect("docx", b"PK\x03\x04...."), Kind::Docx);
        assert_eq!(detect("pptx", b"PK\x03\x04...."), Kind::Pptx);
        assert_eq!(
            detect("zip", b"PK\x03\x04...."),
            Kind::Binary("zip archive")
        );
        assert_eq!(detect("csv", b"a,b\n1,2\n"), Kind::Table(b','));
        assert_eq!(
            detect("TSV".to_ascii_lowercase().as_str(), b"a\tb\n"),
            Kind::Table(b'\t')
        );
        assert_eq!(detect("rs", b"fn main() {}\n"), Kind::Text);
        assert_eq!(
            detect("", b"\x7fELF\x02\x01\x01\0\0"),
            Kind::Binary("ELF executable")
        );
        assert_eq!(detect("dat", b"abc\0def"), Kind::Binary("binary data"));
    }

    #[test]
    fn numbers_and_sizes_read_well() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(52_428_800), "52,428,800");
        assert_eq!(human_size(512), "512 bytes");
        assert_eq!(human_size(50 << 20), "50.0 MiB");
    }

    fn share(bytes: usize) -> Budget {
        Budget {
            bytes,
            bound: Bound::Share,
        }
    }

    #[test]
    fn pages_stop_at_a_page_boundary_and_a_page_over_the_budget_is_cut() {
        let pages = [
            "a".repeat(300),
            "b".repeat(300),
            "c".repeat(5000),
            "d".repeat(10),
        ];
        let text = |n: u64| Ok(pages[(n - 1) as usize].clone());
        let s = render_pages(4, 1, None, "page", share(1000), text).unwrap();
        assert!(s.body.len() <= 1000, "{}", s.body.len());
        assert_eq!(s.summary, "pages 1-2 of 4; more follows");
        assert!(
            s.body.ends_with("[truncated by this file's share of the result budget (1,000 bytes; read fewer files per call for more): pages 3-4 not shown; continue with offset=3]\n"),
            "{}",
            s.body
        );
        let s = render_pages(4, 3, None, "page", share(1000), text).unwrap();
        assert!(s.body.len() <= 1000, "{}", s.body.len());
        assert!(s.body.starts_with("--- page 3 ---\nccc"), "{}", s.body);
        assert!(
            s.body
                .contains("[… page 3 is cut here by this file's share"),
            "{}",
            s.body
        );
        assert!(s.body.ends_with("continue with offset=4]\n"), "{}", s.body);
        let s = render_pages(4, 4, None, "page", share(1000), text).unwrap();
        assert_eq!(s.body, format!("--- page 4 ---\n{}\n", "d".repeat(10)));
    }

    #[test]
    fn numbered_units_page_to_the_budget_and_a_long_first_one_is_cut() {
        let units: Vec<String> = (1..=100)
            .map(|i| format!("paragraph {i} {}", "x".repeat(i)))
            .collect();
        let mut offset = 1;
        let mut seen = 0;
        loop {
            let s = render_numbered(&units, offset, 2000, "line", share(800)).unwrap();
            assert!(s.body.len() <= 800, "{}", s.body.len());
            seen += s
                .body
                .lines()
                .filter(|l| l.contains("\tparagraph "))
                .count();
            match s.body.rsplit_once("continue with offset=") {
                Some((_, next)) => offset = next.trim_end_matches("]\n").parse().unwrap(),
                None => break,
            }
        }
        assert_eq!(seen, 100);
        let long = vec!["é".repeat(2000), "short".to_string()];
        let s = render_numbered(&long, 1, 10, "line", share(800)).unwrap();
        assert!(s.body.len() <= 800, "{}", s.body.len());
        assert!(s.body.contains(" more bytes]\n"), "{}", s.body);
        assert!(s.body.ends_with("continue with offset=2]\n"), "{}", s.body);
        assert_eq!(
            s.summary,
            "lines 1-1 of 2; 1 long line(s) cut; more follows"
        );
    }
}
