//! `read_files`: read a batch of files, each through its own window.
//!
//! The result is one section per file in call order, headed the way `head`/`tail` head
//! several files, with what was read in the header:
//!
//! ```text
//! ==> src/main.rs (lines 1-3 of 3) <==
//!      1  fn main() {
//!      2      println!("hi");
//!      3  }
//!
//! ==> notes.txt <==
//! error: no such file; check the name with find_files (mode="glob")
//! ```
//!
//! The gutter is the line number right-aligned in six columns and a tab, as `cat -n` prints it.
//! Plain text with headers rather than the seed's JSON object: a model reads the gutter and the
//! "continue with offset=N" marker as they are, with no escaped newlines to undo. A file that
//! cannot be read gets its own `error:` line and never fails the others; only when every file
//! failed is the call itself a failure. Every path goes through [`Confinement`]; the one
//! exception is the call's own session's spilled results (`<data>/sessions/<id>/results/`),
//! which the engine's shaping notice tells the model to read with this tool.
//!
//! The whole answer is fitted to the engine's result budget (`ToolContext::result_budget`):
//! over it, the engine would shape the text to a head and a tail and spill it, and a page that
//! is shaped cannot be read on from. So each file gets a share of the budget and stops at a
//! line (row, page, slide) boundary with the offset to continue from; a file of any size is
//! read completely by successive calls, each under budget. The shares are dealt out from the
//! smallest file up, each an equal part of what is left, so what a small file does not use goes
//! to the larger ones; every file is guaranteed its header, and a few lines while the budget
//! lasts.

use std::path::{Path, PathBuf};

use async_trait::async_trait;
use dispatch_engine::{Access, Effect, Subject, ToolContext, ToolError, ToolOutput, ToolSpec};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use super::confine::{Confinement, MAX_PATH_BYTES};
use super::read::{self, Bound, Budget, ImageBudget, MAX_READ_BYTES, Window};
use crate::BuiltinTool;

/// Most files in one call.
pub const MAX_FILES: usize = 64;
/// Most text one call returns, all files together, whatever the result budget.
pub const MAX_CALL_TEXT_BYTES: usize = 8 << 20;
/// Part of the result budget (in percent) kept back for the engine's `[read_files] ` prefix and
/// for a header that comes out longer than its reserve.
const MARGIN_PERCENT: usize = 5;
/// Room kept in a file's share for its header's summary (`lines 1-20 of 20; CRLF …`).
const SUMMARY_RESERVE: usize = 100;
/// The least body a file is given while the budget lasts: the marker and a few lines.
const MIN_BODY: usize = 450;

/// Read files (text, CSV/TSV, PDF, DOCX, PPTX, images).
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadFilesArgs {
    /// The files to read, 1 to 64, each with an optional window.
    #[schemars(length(min = 1, max = 64))]
    files: Vec<FileArg>,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct FileArg {
    /// Path relative to the work directory (an absolute path must lie inside it).
    #[schemars(length(min = 1, max = 4096))]
    path: String,
    /// 1-based first line (text, DOCX), data row (CSV/TSV; the header is always shown), page
    /// (PDF) or slide (PPTX). Default 1.
    #[schemars(range(min = 1, max = 1_000_000_000))]
    offset: Option<u64>,
    /// Most lines or rows (default 2000) or pages or slides (default 50) to return; the
    /// result budget may stop the file sooner.
    #[schemars(range(min = 1, max = 100_000))]
    limit: Option<u64>,
}

pub struct ReadFiles;

#[async_trait]
impl BuiltinTool for ReadFiles {
    const NAME: &'static str = "read_files";
    const DESCRIPTION: &'static str = "Read 1-64 files in one call. Text comes back with line numbers. One call \
        returns at most the result budget of text (about 19 KB by default), shared by \
        its files, so a long file comes in pages: a cut-off file ends with the offset \
        to continue from; read fewer files per call to see more of each. CSV/TSV are \
        read by rows (header kept), PDF by page, PPTX by slide, DOCX by line; \
        PNG/JPEG/GIF/WebP images (up to 5 MiB) are returned as images. Paths are \
        relative to the work directory. A file that cannot be read gets its own \
        `error:` line and the others are still read. To list a directory or search \
        file contents use find_files.";
    type Args = ReadFilesArgs;

    fn declare(&self, spec: ToolSpec) -> ToolSpec {
        spec.concurrent().read_only().effect(Effect::ReadsPaths)
    }

    fn subject(&self, args: &Value, workdir: &std::path::Path) -> Option<Subject> {
        use crate::subjects::{nested, resolved};
        Some(Subject::new(Access::Reads).paths(resolved(workdir, nested(args, "files", "path"))))
    }

    async fn run(&self, cx: ToolContext, args: ReadFilesArgs) -> Result<ToolOutput, ToolError> {
        if args.files.is_empty() || args.files.len() > MAX_FILES {
            return Err(ToolError::failed(format!(
                "files must hold 1 to {MAX_FILES} entries, got {}; split the batch",
                args.files.len()
            )));
        }
        let confinement = Confinement::for_call(&cx)?;
        let spill = spill_dir(&cx);
        let budget = text_budget(cx.result_budget);
        let cancel = cx.cancel.clone();
        let batch = tokio::task::spawn_blocking(move || {
            let cancelled = move || cancel.is_cancelled();
            read_batch(
                &confinement,
                spill.as_deref(),
                &args.files,
                budget,
                &cancelled,
            )
        })
        .await
        .map_err(|e| ToolError::failed(format!("read_files stopped unexpectedly: {e}")))?;
        batch.into_output()
    }
}

/// The text one call may return for a result budget: the budget less the margin, and never
/// over [`MAX_CALL_TEXT_BYTES`].
fn text_budget(result_budget: usize) -> usize {
    let budget = result_budget.min(MAX_CALL_TEXT_BYTES);
    budget - budget * MARGIN_PERCENT / 100
}

/// The outcome of one entry of the batch.
enum Entry {
    Read {
        label: String,
        section: read::Section,
    },
    Failed {
        /// The path as shown in the header; `None` when the message already names it.
        label: String,
        message: String,
        names_path: bool,
    },
}

impl Entry {
    /// Bytes this entry adds to the call's text (its header, body and the blank line that
    /// separates it from the next).
    fn cost(&self) -> usize {
        match self {
            Entry::Read { label, section } => {
                header_overhead(label) + section.summary.len() + section.body.len()
            }
            Entry::Failed { label, message, .. } => header_overhead(label) + message.len() + 8,
        }
    }
}

/// `==> {label} () <==\n` and the separating newline, without the summary.
fn header_overhead(label: &str) -> usize {
    label.len() + 13
}

struct Batch {
    entries: Vec<Entry>,
    paths: Vec<PathBuf>,
}

impl Batch {
    fn into_output(self) -> Result<ToolOutput, ToolError> {
        let all_failed = self
            .entries
            .iter()
            .all(|e| matches!(e, Entry::Failed { .. }));
        if all_failed {
            let lines: Vec<String> = self
                .entries
                .into_iter()
                .filter_map(|e| match e {
                    Entry::Failed {
                        label,
                        message,
                        names_path,
                    } => Some(if names_path {
                        message
                    } else {
                        format!("{label}: {message}")
                    }),
                    Entry::Read { .. } => None,
                })
                .collect();
            return Err(ToolError::failed(lines.join("\n")));
        }
        let mut text = String::new();
        let mut images = Vec::new();
        for entry in self.entries {
            if !text.is_empty() {
                text.push('\n');
            }
            match entry {
                Entry::Read { label, section } => {
                    text.push_str(&format!("==> {label} ({}) <==\n", section.summary));
                    text.push_str(&section.body);
                    if let Some(url) = section.image {
                        images.push(url);
                    }
                }
                Entry::Failed { label, message, .. } => {
                    text.push_str(&format!("==> {label} <==\nerror: {message}\n"));
                }
            }
        }
        Ok(ToolOutput::text(text)
            .with_images(images)
            .with_paths(self.paths))
    }
}

/// A file of the batch that resolved, waiting for its share of the budget.
struct Pending {
    /// Its place in the call.
    index: usize,
    path: PathBuf,
    label: String,
    window: Window,
    estimate: u64,
}

impl Pending {
    /// The section shown when the budget ran out before this file.
    fn not_read(&self) -> Entry {
        Entry::Read {
            label: self.label.clone(),
            section: read::Section {
                summary: "not read: the result budget is used up".into(),
                body: format!(
                    "[not shown: the files before it used this call's result budget; read it in \
                     another call, continue with offset={}]\n",
                    self.window.offset
                ),
                image: None,
            },
        }
    }
}

/// Read every file of the call within `budget` bytes of text, in call order.
fn read_batch(
    confinement: &Confinement,
    spill: Option<&Path>,
    files: &[FileArg],
    budget: usize,
    cancelled: &dyn Fn() -> bool,
) -> Batch {
    let mut entries: Vec<Option<Entry>> = files.iter().map(|_| None).collect();
    let mut paths: Vec<PathBuf> = Vec::new();
    let mut pending = Vec::with_capacity(files.len());
    for (index, file) in files.iter().enumerate() {
        let resolved = match resolve(confinement, spill, &file.path) {
            Ok(p) => p,
            Err(e) => {
                entries[index] = Some(Entry::Failed {
                    label: file.path.clone(),
                    message: e.to_string(),
                    names_path: true,
                });
                continue;
            }
        };
        if !paths.contains(&resolved) {
            paths.push(resolved.clone());
        }
        let label = if resolved.starts_with(confinement.root()) {
            confinement.display(&resolved).into_owned()
        } else {
            resolved.display().to_string()
        };
        pending.push(Pending {
            index,
            estimate: read::text_estimate(&resolved),
            path: resolved,
            label,
            window: Window {
                offset: file.offset.unwrap_or(1).max(1),
                limit: file.limit,
            },
        });
    }
    let failed: usize = entries.iter().flatten().map(Entry::cost).sum();
    let mut remaining = budget.saturating_sub(failed);
    // Smallest first: what a small file leaves of its share goes to the larger ones after it.
    pending.sort_by_key(|p| p.estimate);
    let floor = |p: &Pending| header_overhead(&p.label) + SUMMARY_RESERVE + MIN_BODY;
    let mut floors: usize = pending.iter().map(floor).sum();
    let mut notes: usize = pending.iter().map(|p| p.not_read().cost()).sum();
    let shared = pending.len() > 1;
    let mut images = ImageBudget(read::image::MAX_CALL_IMAGE_BYTES);
    let mut read_any = false;
    for (k, file) in pending.iter().enumerate() {
        // While every file left can have its floor, equal parts of what is left keep it for
        // them; past that, room is kept for the "not read" section of each file still to come.
        let reserved = if remaining >= floors {
            0
        } else {
            notes.saturating_sub(file.not_read().cost())
        };
        floors -= floor(file);
        notes -= file.not_read().cost();
        let entry = if cancelled() {
            Entry::Failed {
                label: file.label.clone(),
                message: "not read: the call was cancelled".into(),
                names_path: false,
            }
        } else {
            let available = remaining.saturating_sub(reserved);
            let header = header_overhead(&file.label) + SUMMARY_RESERVE;
            let floor = floor(file);
            let share = (available / (pending.len() - k)).max(floor).min(available);
            if share < floor && read_any {
                file.not_read()
            } else {
                // The first file read always gets a body, however small the budget.
                let body = share.saturating_sub(header).max(MIN_BODY);
                let budget = if body >= MAX_READ_BYTES {
                    Budget::CAP
                } else {
                    let bound = if shared { Bound::Share } else { Bound::Result };
                    Budget { bytes: body, bound }
                };
                read_any = true;
                match read::read_path(&file.path, file.window, budget, &mut images) {
                    Ok(section) => Entry::Read {
                        label: file.label.clone(),
                        section,
                    },
                    Err(message) => Entry::Failed {
                        label: file.label.clone(),
                        message,
                        names_path: false,
                    },
                }
            }
        };
        remaining = remaining.saturating_sub(entry.cost());
        entries[file.index] = Some(entry);
    }
    Batch {
        entries: entries.into_iter().flatten().collect(),
        paths,
    }
}

/// Resolve a path from the model: confined to the work directory, except for a file in this
/// session's spilled results.
fn resolve(
    confinement: &Confinement,
    spill: Option<&Path>,
    raw: &str,
) -> Result<PathBuf, ToolError> {
    let refusal = match confinement.resolve(raw) {
        Ok(path) => return Ok(path),
        Err(e) => e,
    };
    if let Some(dir) = spill
        && raw.len() <= MAX_PATH_BYTES
        && !raw.contains('\0')
        && let Ok(path) = confinement.root().join(raw).canonicalize()
        && path.starts_with(dir)
        && path != dir
    {
        return Ok(path);
    }
    Err(refusal)
}

/// This session's spill directory (the engine's rule), resolved, if it exists.
fn spill_dir(cx: &ToolContext) -> Option<PathBuf> {
    let data = cx.data_dir.as_ref()?;
    dispatch_engine::shaping::spill_dir(data, &cx.session_id)
        .canonicalize()
        .ok()
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::sync::Arc;
    use std::time::Instant;

    use dispatch_engine::{
        Engine, EngineConfig, Headless, SlotResult, Status, Tool, ToolContext, ToolError,
        ToolOutput, ToolSpec,
    };
    use serde_json::{Value, json};

    use crate::test_support::*;

    /// One read_files call in its own run (so no earlier call dedupes it).
    async fn read(h: &Harness, run: &str, args: Value) -> SlotResult {
        let out = h
            .round("s", run, vec![run_tool("c1", "read_files", args)])
            .await;
        out.results[0].clone()
    }

    async fn harness() -> Harness {
        let h = Harness::new();
        h.select("s", "read_files").await;
        h
    }

    fn write(h: &Harness, rel: &str, bytes: impl AsRef<[u8]>) -> std::path::PathBuf {
        let path = h.root().join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).unwrap();
        }
        std::fs::write(&path, bytes).unwrap();
        path
    }

    #[tokio::test]
    async fn text_has_a_gutter_and_a_truncated_read_names_the_next_offset() {
        let h = harness().await;
        let text: String = (1..=2500).map(|i| format!("l{i}\n")).collect();
        write(&h, "src/long.txt", text);
        let r = read(
            &h,
            "r1",
            json!({"files": [{"path": "src/long.txt", "limit": 3}]}),
        )
        .await;
        assert_eq!(r.status, Status::Ok, "{}", r.content);
        assert_eq!(
            r.content,
            "[read_files] ==> src/long.txt (lines 1-3 of 2500; more follows) <==\n     1\tl1\n     2\tl2\n     3\tl3\n\
             [truncated by the limit: lines 4-2500 not shown; continue with offset=4]"
        );
        let r = read(
            &h,
            "r2",
            json!({"files": [{"path": "src/long.txt", "offset": 2499}]}),
        )
        .await;
        assert_eq!(
            r.content,
            "[read_files] ==> src/long.txt (lines 2499-2500 of 2500) <==\n  2499\tl2499\n  2500\tl2500"
        );
    }

    #[tokio::test]
    async fn crlf_and_non_utf8_files_are_readable_and_say_so() {
        let h = harness().await;
        write(&h, "win.txt", b"first\r\nsecond\r\n");
        write(&h, "latin1.txt", b"caf\xe9 cr\xe8me\n");
        let r = read(
            &h,
            "r1",
            json!({"files": [{"path": "win.txt"}, {"path": "latin1.txt"}]}),
        )
        .await;
        assert_eq!(r.status, Status::Ok);
        assert_eq!(
            r.content,
            "[read_files] ==> win.txt (lines 1-2 of 2; CRLF line endings (shown without the CR)) <==\n     1\tfirst\n     2\tsecond\n\n\
             ==> latin1.txt (lines 1-1 of 1; not valid UTF-8: undecodable bytes shown as U+FFFD) <==\n     1\tcaf\u{fffd} cr\u{fffd}me"
        );
    }

    #[tokio::test]
    async fn a_binary_file_gets_a_summary_not_its_bytes() {
        let h = harness().await;
        let mut elf = b"\x7fELF\x02\x01\x01\0\0\0\0\0\0\0\0\0".to_vec();
        elf.extend(std::iter::repeat_n(0xAAu8, 4000));
        write(&h, "bin/tool", &elf);
        let r = read(&h, "r1", json!({"files": [{"path": "bin/tool"}]})).await;
        assert_eq!(r.status, Status::Ok);
        assert!(
            r.content.starts_with(
                "[read_files] ==> bin/tool (binary: ELF executable, 3.9 KiB) <==\n(not shown"
            ),
            "{}",
            r.content
        );
        assert!(!r.content.contains('\u{fffd}') && r.content.len() < 400);
    }

    #[tokio::test]
    async fn a_50_mb_file_is_read_near_its_end_quickly_and_capped() {
        let h = harness().await;
        let path = h.root().join("big.log");
        let mut f = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
        let mut lines = 0u64;
        let mut written = 0usize;
        while written < 50 << 20 {
            lines += 1;
            let line = format!("{lines:08} the quick brown fox jumps over the lazy dog\n");
            written += line.len();
            f.write_all(line.as_bytes()).unwrap();
        }
        f.flush().unwrap();
        drop(f);
        let started = Instant::now();
        let r = read(
            &h,
            "r1",
            json!({"files": [{"path": "big.log", "offset": lines - 2}]}),
        )
        .await;
        let elapsed = started.elapsed();
        eprintln!("50 MB file, read of its last 3 lines: {elapsed:?}");
        assert_eq!(r.status, Status::Ok);
        let n = lines;
        assert!(
            r.content.starts_with(&format!(
                "[read_files] ==> big.log (lines {}-{n} of {n}) <==",
                n - 2
            )),
            "{}",
            r.content
        );
        assert!(r.content.ends_with(&format!(
            "{n:08} the quick brown fox jumps over the lazy dog"
        )));

        // A whole-file read stops at the cap and says where to go on; the total is "at least".
        std::fs::write(h.root().join("one-line.txt"), vec![b'z'; 3 << 20]).unwrap();
        let r = read(&h, "r2", json!({"files": [{"path": "one-line.txt"}]})).await;
        assert_eq!(r.status, Status::Ok);
        assert!(
            r.content.contains("lines 1-1 of 1; 1 long line(s) cut"),
            "{}",
            &r.content[..300]
        );
        assert!(r.content.len() < 20_000, "{}", r.content.len());
    }

    #[tokio::test]
    async fn an_image_comes_back_as_an_image_part() {
        use base64::Engine as _;
        const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==";
        let h = harness().await;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(PNG)
            .unwrap();
        write(&h, "img/dot.png", &bytes);
        let r = read(&h, "r1", json!({"files": [{"path": "img/dot.png"}]})).await;
        assert_eq!(r.status, Status::Ok, "{}", r.content);
        assert_eq!(r.images, vec![format!("data:image/png;base64,{PNG}")]);
        assert_eq!(
            r.content,
            "[read_files] 1 image(s) loaded ==> img/dot.png (image/png, 70 bytes) <==\n(returned as an image)"
        );
        // Too big: refused with the limit, nothing attached.
        let mut big = bytes.clone();
        big.resize(6 << 20, 0);
        write(&h, "img/big.png", &big);
        let r = read(&h, "r2", json!({"files": [{"path": "img/big.png"}]})).await;
        assert_eq!(r.status, Status::Failed);
        assert!(
            r.content.contains("over the 5.0 MiB limit"),
            "{}",
            r.content
        );
        assert!(r.images.is_empty());
    }

    #[tokio::test]
    async fn csv_is_read_by_rows_with_its_header() {
        let h = harness().await;
        let csv: String = std::iter::once("id,name\n".to_string())
            .chain((1..=10).map(|i| format!("{i},\"n, {i}\"\n")))
            .collect();
        write(&h, "data/people.csv", csv);
        let r = read(
            &h,
            "r1",
            json!({"files": [{"path": "data/people.csv", "offset": 9, "limit": 5}]}),
        )
        .await;
        assert_eq!(
            r.content,
            "[read_files] ==> data/people.csv (CSV, rows 9-10 of 10 (header kept)) <==\nheader\tid,name\n     9\t9,\"n, 9\"\n    10\t10,\"n, 10\""
        );
    }

    fn pdf(pages: &[&str]) -> Vec<u8> {
        use lopdf::content::{Content, Operation};
        use lopdf::{Document, Object, Stream, dictionary};
        let mut doc = Document::with_version("1.5");
        let pages_id = doc.new_object_id();
        let font = doc.add_object(dictionary! {
            "Type" => "Font", "Subtype" => "Type1", "BaseFont" => "Courier",
            "Encoding" => "WinAnsiEncoding",
        });
        let resources = doc.add_object(dictionary! { "Font" => dictionary! { "F1" => font } });
        let mut kids: Vec<Object> = Vec::new();
        for text in pages {
            let content = Content {
                operations: vec![
                    Operation::new("BT", vec![]),
                    Operation::new("Tf", vec!["F1".into(), 24.into()]),
                    Operation::new("Td", vec![100.into(), 600.into()]),
                    Operation::new("Tj", vec![Object::string_literal(*text)]),
                    Operation::new("ET", vec![]),
                ],
            };
            let stream = doc.add_object(Stream::new(dictionary! {}, content.encode().unwrap()));
            let page = doc.add_object(dictionary! {
                "Type" => "Page", "Parent" => pages_id, "Contents" => stream,
            });
            kids.push(page.into());
        }
        let count = kids.len() as i64;
        doc.objects.insert(
            pages_id,
            Object::Dictionary(dictionary! {
                "Type" => "Pages", "Kids" => kids, "Count" => count, "Resources" => resources,
                "MediaBox" => vec![0.into(), 0.into(), 595.into(), 842.into()],
            }),
        );
        let catalog = doc.add_object(dictionary! { "Type" => "Catalog", "Pages" => pages_id });
        doc.trailer.set("Root", catalog);
        let mut out = Vec::new();
        doc.save_to(&mut out).unwrap();
        out
    }

    fn zip_of(parts: &[(&str, &str)]) -> Vec<u8> {
        let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
        let options = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Deflated);
        for (name, content) in parts {
            zip.start_file(*name, options).unwrap();
            zip.write_all(content.as_bytes()).unwrap();
        }
        zip.finish().unwrap().into_inner()
    }

    #[tokio::test]
    async fn pdf_docx_and_pptx_give_their_text() {
        let h = harness().await;
        write(
            &h,
            "doc/report.pdf",
            pdf(&["Alpha page", "Beta page", "Gamma page"]),
        );
        write(
            &h,
            "doc/letter.docx",
            zip_of(&[(
                "word/document.xml",
                r#"<?xml version="1.0"?><w:document xmlns:w="w"><w:body><w:p><w:r><w:t>Dear reader,</w:t></w:r></w:p><w:p><w:r><w:t>Second &amp; last.</w:t></w:r></w:p></w:body></w:document>"#,
            )]),
        );
        let slide = |t: &str| {
            format!(
                r#"<p:sld xmlns:p="p" xmlns:a="a"><p:cSld><p:spTree><p:sp><p:txBody><a:p><a:r><a:t>{t}</a:t></a:r></a:p></p:txBody></p:sp></p:spTree></p:cSld></p:sld>"#
            )
        };
        let (s1, s2) = (slide("Shown second"), slide("Shown first"));
        write(
            &h,
            "doc/deck.pptx",
            zip_of(&[
                (
                    "ppt/presentation.xml",
                    r#"<p:presentation xmlns:p="p" xmlns:r="r"><p:sldIdLst><p:sldId id="256" r:id="rId9"/><p:sldId id="257" r:id="rId8"/></p:sldIdLst></p:presentation>"#,
                ),
                (
                    "ppt/_rels/presentation.xml.rels",
                    r#"<Relationships><Relationship Id="rId8" Type="slide" Target="slides/slide1.xml"/><Relationship Id="rId9" Type="slide" Target="slides/slide2.xml"/></Relationships>"#,
                ),
                ("ppt/slides/slide1.xml", &s1),
                ("ppt/slides/slide2.xml", &s2),
            ]),
        );
        let r = read(
            &h,
            "r1",
            json!({"files": [
                {"path": "doc/report.pdf", "offset": 2, "limit": 1},
                {"path": "doc/letter.docx"},
                {"path": "doc/deck.pptx"}
            ]}),
        )
        .await;
        assert_eq!(r.status, Status::Ok, "{}", r.content);
        let sections: Vec<&str> = r.content.split("\n\n").collect();
        assert_eq!(sections.len(), 3, "{}", r.content);
        assert!(
            sections[0].starts_with("[read_files] ==> doc/report.pdf (PDF, pages 2-2 of 3; more follows) <==\n--- page 2 ---\n"),
            "{}",
            sections[0]
        );
        assert!(sections[0].contains("Beta page") && !sections[0].contains("Alpha"));
        assert!(
            sections[0]
                .ends_with("[truncated by the limit: pages 3-3 not shown; continue with offset=3]")
        );
        assert_eq!(
            sections[1],
            "==> doc/letter.docx (DOCX, lines 1-2 of 2) <==\n     1\tDear reader,\n     2\tSecond & last."
        );
        assert_eq!(
            sections[2],
            "==> doc/deck.pptx (PPTX, slides 1-2 of 2) <==\n--- slide 1 ---\nShown first\n--- slide 2 ---\nShown second"
        );
    }

    #[tokio::test]
    async fn one_bad_file_never_fails_the_others() {
        let h = harness().await;
        write(&h, "ok.txt", "fine\n");
        std::fs::create_dir(h.root().join("adir")).unwrap();
        let r = read(
            &h,
            "r1",
            json!({"files": [
                {"path": "missing.txt"},
                {"path": "ok.txt"},
                {"path": "adir"},
                {"path": "../escape.txt"},
                {"path": "ok.txt", "offset": 9}
            ]}),
        )
        .await;
        assert_eq!(r.status, Status::Ok);
        assert_eq!(
            r.content,
            format!(
                "[read_files] ==> missing.txt <==\nerror: no such file; check the name with find_files (mode=\"glob\")\n\n\
                 ==> ok.txt (lines 1-1 of 1) <==\n     1\tfine\n\n\
                 ==> adir <==\nerror: this is a directory; list it with find_files (mode=\"list\" with this path as dir)\n\n\
                 ==> ../escape.txt <==\nerror: path \"../escape.txt\" refused: it resolves to {}, outside the work directory {} \
                 (rule: file tools are confined to the work directory). Use a path inside it; to work elsewhere, start \
                 tooldispatch with that directory as --workdir\n\n\
                 ==> ok.txt <==\nerror: offset 9 is past the end: there is 1 line; use an offset from 1 to 1",
                h.root().parent().unwrap().join("escape.txt").display(),
                h.root().display()
            )
        );
        // Every failure: the call itself failed, one line per file.
        let r = read(
            &h,
            "r2",
            json!({"files": [{"path": "missing.txt"}, {"path": "adir"}]}),
        )
        .await;
        assert_eq!(r.status, Status::Failed);
        assert!(
            r.content.starts_with("[read_files] tool=read_files failed: missing.txt: no such file; check the name with find_files (mode=\"glob\")\nadir: this is a directory"),
            "{}",
            r.content
        );
    }

    #[tokio::test]
    async fn links_out_and_link_loops_are_refused() {
        let h = harness().await;
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret.txt"), "OUTSIDE-SECRET").unwrap();
        std::os::unix::fs::symlink(outside.path().join("secret.txt"), h.root().join("link.txt"))
            .unwrap();
        std::os::unix::fs::symlink(outside.path(), h.root().join("linkdir")).unwrap();
        std::os::unix::fs::symlink("loop-b", h.root().join("loop-a")).unwrap();
        std::os::unix::fs::symlink("loop-a", h.root().join("loop-b")).unwrap();
        for (i, (path, fragment)) in [
            ("link.txt", "outside the work directory"),
            ("linkdir/secret.txt", "outside the work directory"),
            (
                outside.path().join("secret.txt").to_str().unwrap(),
                "outside the work directory",
            ),
            ("loop-a", "symlink loop"),
            (
                "../../../../../../etc/hostname",
                "outside the work directory",
            ),
        ]
        .into_iter()
        .enumerate()
        {
            let r = read(&h, &format!("r{i}"), json!({"files": [{"path": path}]})).await;
            assert_eq!(r.status, Status::Failed, "{path}: {}", r.content);
            assert!(r.content.contains(fragment), "{path}: {}", r.content);
            assert!(!r.content.contains("OUTSIDE-SECRET"));
        }
    }

    #[tokio::test]
    async fn spilled_results_of_this_session_are_readable_and_no_others() {
        // Headless, the command that makes the spill runs only inside the OS sandbox.
        if !crate::test_support::sandbox_present() {
            return;
        }
        let h = Harness::new();
        h.select("s", "read_files,run_command").await;
        let text: String = (1..=1500)
            .map(|i| format!("row {i} of the long listing\n"))
            .collect();
        write(&h, "long.txt", text);
        // A result over the budget (a command's output; read_files itself pages) is spilled.
        let out = h
            .round(
                "s",
                "r1",
                vec![run_tool(
                    "c1",
                    "run_command",
                    json!({"argv": ["cat", "long.txt"]}),
                )],
            )
            .await;
        let r = &out.results[0];
        assert_eq!(r.status, Status::Ok, "{}", r.content);
        let spill = r
            .content
            .split("full text: ")
            .nth(1)
            .and_then(|rest| rest.split(" (read it with read_files").next())
            .unwrap_or_else(|| panic!("no spill notice in {}", &r.content[..400]))
            .to_string();
        assert!(
            std::path::Path::new(&spill).starts_with(
                dispatch_engine::shaping::spill_dir(h.data_dir.path(), "s")
                    .canonicalize()
                    .unwrap()
            ),
            "{spill}"
        );
        let r = read(&h, "r2", json!({"files": [{"path": spill, "limit": 5}]})).await;
        assert_eq!(r.status, Status::Ok, "{}", r.content);
        assert!(
            r.content.contains("\trow 1 of the long listing\n"),
            "{}",
            r.content
        );

        // Another session's spill, and the rest of the data directory, stay refused.
        let other = h
            .data_dir
            .path()
            .join("sessions/other-0123456789ab/results");
        std::fs::create_dir_all(&other).unwrap();
        std::fs::write(other.join("r1-x.txt"), "OTHER SESSION").unwrap();
        std::fs::write(h.data_dir.path().join("store.db"), "STORE").unwrap();
        let spill_dir = std::path::Path::new(&spill).parent().unwrap().to_path_buf();
        std::os::unix::fs::symlink(
            h.data_dir.path().join("store.db"),
            spill_dir.join("sneaky.txt"),
        )
        .unwrap();
        for (i, path) in [
            other.join("r1-x.txt"),
            h.data_dir.path().join("store.db"),
            spill_dir.join("sneaky.txt"),
            spill_dir.clone(),
        ]
        .iter()
        .enumerate()
        {
            let r = read(&h, &format!("x{i}"), json!({"files": [{"path": path}]})).await;
            assert_eq!(r.status, Status::Failed, "{}", r.content);
            assert!(
                r.content.contains("outside the work directory"),
                "{}",
                r.content
            );
            assert!(!r.content.contains("OTHER SESSION") && !r.content.contains("STORE"));
        }
    }

    /// A stand-in for edit_file: writes a file and reports its resolved path, as Mutates tools do.
    struct WriteForTest {
        spec: ToolSpec,
    }

    #[async_trait::async_trait]
    impl Tool for WriteForTest {
        fn spec(&self) -> &ToolSpec {
            &self.spec
        }
        async fn call(&self, cx: ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
            let confinement = super::Confinement::for_call(&cx)?;
            let path = confinement.resolve(args["path"].as_str().unwrap_or_default())?;
            std::fs::write(&path, args["content"].as_str().unwrap_or_default())
                .map_err(|e| ToolError::failed(e.to_string()))?;
            Ok(ToolOutput::text("written").with_paths(vec![path]))
        }
    }

    #[tokio::test]
    async fn an_edit_between_two_reads_makes_the_second_read_run_again() {
        let workdir = tempfile::tempdir().unwrap();
        let store = dispatch_store::open("memory:").unwrap();
        let mut registry = crate::builtin_registry().unwrap();
        registry
            .register(Arc::new(WriteForTest {
                spec: ToolSpec::new(
                    "write_for_test",
                    "test writer",
                    json!({"type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"}}}),
                )
                .read_only()
                .effect(dispatch_engine::Effect::Mutates),
            }))
            .unwrap();
        let engine = Engine::new(
            registry,
            store,
            Arc::new(Headless),
            EngineConfig::new(workdir.path().canonicalize().unwrap()),
        )
        .unwrap();
        let round = |run: &'static str, calls| {
            let engine = &engine;
            async move {
                engine
                    .round(dispatch_engine::RoundRequest::new(
                        "s",
                        run,
                        dispatch_engine::Provider::OpenAi,
                        calls,
                    ))
                    .await
                    .unwrap()
            }
        };
        let out = round(
            "select",
            vec![call(
                "c0",
                "find_tools",
                json!({"query": "select:read_files,write_for_test"}),
            )],
        )
        .await;
        assert_eq!(out.results[0].status, Status::Ok);
        std::fs::write(workdir.path().join("a.txt"), "first\n").unwrap();
        std::fs::write(workdir.path().join("b.txt"), "other\n").unwrap();
        let read_a = || run_tool("c1", "read_files", json!({"files": [{"path": "a.txt"}]}));
        let out = round("r", vec![read_a()]).await;
        assert_eq!(out.results[0].status, Status::Ok);
        // Unchanged: a repeat is answered from the first read.
        let out = round("r", vec![read_a()]).await;
        assert_eq!(out.results[0].status, Status::Deduped);
        // A write to another file leaves the read alone.
        let write = |path: &str, content: &str| {
            run_tool(
                "w",
                "write_for_test",
                json!({"path": path, "content": content}),
            )
        };
        let out = round("r", vec![write("b.txt", "changed\n")]).await;
        assert_eq!(
            out.results[0].status,
            Status::Ok,
            "{}",
            out.results[0].content
        );
        let out = round("r", vec![read_a()]).await;
        assert_eq!(out.results[0].status, Status::Deduped);
        // A write to the file it read: the read runs again and sees the edit.
        let out = round("r", vec![write("a.txt", "second\n")]).await;
        assert_eq!(out.results[0].status, Status::Ok);
        let out = round("r", vec![read_a()]).await;
        assert_eq!(out.results[0].status, Status::Ok);
        assert!(
            out.results[0].content.ends_with("     1\tsecond"),
            "{}",
            out.results[0].content
        );
    }

    /// A harness whose engine keeps `budget` bytes of each result unshaped.
    fn harness_with_budget(budget: usize) -> Harness {
        let workdir = tempfile::tempdir().unwrap();
        let data_dir = tempfile::tempdir().unwrap();
        let store = dispatch_store::open("memory:").unwrap();
        let mut config = EngineConfig::new(workdir.path().canonicalize().unwrap());
        config.data_dir = Some(data_dir.path().canonicalize().unwrap());
        config.result_budget = budget;
        let engine = Engine::new(
            crate::builtin_registry_with(
                &crate::ToolsConfig::default(),
                &crate::Stores::all(&store),
            )
            .unwrap(),
            store.clone(),
            Arc::new(Headless),
            config,
        )
        .unwrap()
        .with_result_cache(store.clone());
        Harness {
            engine,
            store,
            workdir,
            data_dir,
        }
    }

    const BUDGET: usize = dispatch_engine::shaping::DEFAULT_RESULT_BUDGET;

    /// One page of one file: its numbered lines and the offset it says to continue from.
    fn page(content: &str) -> (Vec<(u64, String)>, Option<u64>) {
        assert!(
            !content.contains("[output shaped"),
            "shaped: {}",
            &content[..300]
        );
        assert!(content.len() <= BUDGET, "{} bytes", content.len());
        let mut lines = Vec::new();
        let mut next = None;
        for line in content.lines().skip(1) {
            if let Some(rest) = line.strip_prefix("[truncated by ") {
                let offset = rest.rsplit_once("continue with offset=").unwrap().1;
                next = Some(offset.trim_end_matches(']').parse().unwrap());
            } else {
                // The engine trims the result: a last empty line loses its tab.
                let line = line.trim_start();
                let (n, text) = line.split_once('\t').unwrap_or((line, ""));
                lines.push((n.parse().unwrap(), text.to_string()));
            }
        }
        (lines, next)
    }

    #[tokio::test]
    async fn a_300_kb_file_is_read_whole_in_pages_each_under_the_budget() {
        let h = harness().await;
        let expected: Vec<String> = (1..=7000)
            .map(|i| match i % 7 {
                0 => String::new(),
                1 => format!("fn item_{i}() -> Résumé {{ \"ünïcode\" }}"),
                _ => format!("{i:05} {}", "the quick brown fox ".repeat(i % 4 + 1)),
            })
            .collect();
        let text = expected.join("\n") + "\n";
        assert!(text.len() > 300_000, "{}", text.len());
        write(&h, "src/big.rs", &text);

        let r = read(&h, "p1", json!({"files": [{"path": "src/big.rs"}]})).await;
        assert_eq!(r.status, Status::Ok);
        assert!(
            r.content
                .starts_with("[read_files] ==> src/big.rs (lines 1-"),
            "{}",
            &r.content[..200]
        );
        let tail = &r.content[r.content.len() - 200..];
        assert!(
            tail.contains("[truncated by the result budget (")
                && tail.contains(" not shown; continue with offset="),
            "{tail}"
        );

        let mut seen: Vec<(u64, String)> = Vec::new();
        let mut offset = 1;
        let mut calls = 0;
        let mut largest = 0;
        loop {
            calls += 1;
            let r = read(
                &h,
                &format!("p{calls}"),
                json!({"files": [{"path": "src/big.rs", "offset": offset}]}),
            )
            .await;
            assert_eq!(r.status, Status::Ok, "{}", r.content);
            largest = largest.max(r.content.len());
            let (lines, next) = page(&r.content);
            assert_eq!(lines.first().map(|l| l.0), Some(offset));
            seen.extend(lines);
            match next {
                Some(n) => offset = n,
                None => break,
            }
        }
        eprintln!(
            "{} bytes in {calls} calls, largest result {largest} bytes",
            text.len()
        );
        let numbers: Vec<u64> = seen.iter().map(|l| l.0).collect();
        assert_eq!(numbers, (1..=7000).collect::<Vec<u64>>());
        let texts: Vec<String> = seen.into_iter().map(|l| l.1).collect();
        assert_eq!(texts, expected);
        // Pages are full: no more calls than the text needs at 90% of the budget.
        assert!(
            calls <= text.len() * 13 / 10 / (BUDGET * 9 / 10) + 1,
            "{calls}"
        );
    }

    #[tokio::test]
    async fn a_batch_of_large_files_shares_the_budget_and_small_files_pass_theirs_on() {
        let h = harness().await;
        let names: Vec<String> = (1..=5).map(|i| format!("big{i}.txt")).collect();
        for (i, name) in names.iter().enumerate() {
            let text: String = (1..=3000)
                .map(|n| format!("file {i} line {n} lorem ipsum dolor sit amet\n"))
                .collect();
            write(&h, name, text);
        }
        let files: Vec<Value> = names.iter().map(|n| json!({"path": n})).collect();
        let r = read(&h, "b1", json!({ "files": files })).await;
        assert_eq!(r.status, Status::Ok);
        assert!(!r.content.contains("[output shaped") && r.content.len() <= BUDGET);
        let sections: Vec<&str> = r
            .content
            .trim_start_matches("[read_files] ")
            .split("\n\n")
            .collect();
        assert_eq!(sections.len(), 5, "{}", r.content);
        let mut sizes = Vec::new();
        for (section, name) in sections.iter().zip(&names) {
            assert!(
                section.starts_with(&format!("==> {name} (lines 1-")),
                "{section}"
            );
            assert!(
                section.contains("[truncated by this file's share of the result budget (")
                    && section.contains("; continue with offset="),
                "{section}"
            );
            sizes.push(section.len());
        }
        eprintln!(
            "5 files, {} bytes: sections of {sizes:?} bytes",
            r.content.len()
        );
        let (min, max) = (sizes.iter().min().unwrap(), sizes.iter().max().unwrap());
        assert!(*min >= BUDGET / 6, "{sizes:?}");
        assert!(max - min <= BUDGET / 20, "{sizes:?}");

        // Two small files first: the large ones get what they leave.
        write(&h, "small1.txt", "tiny\n");
        write(&h, "small2.txt", "also tiny\n");
        let r = read(
            &h,
            "b2",
            json!({"files": [
                {"path": "small1.txt"}, {"path": "big1.txt"}, {"path": "small2.txt"},
                {"path": "big2.txt"}, {"path": "big3.txt"}
            ]}),
        )
        .await;
        assert!(!r.content.contains("[output shaped") && r.content.len() <= BUDGET);
        let sections: Vec<&str> = r.content.split("\n\n").collect();
        assert_eq!(sections.len(), 5);
        assert!(sections[0].ends_with("     1\ttiny"), "{}", sections[0]);
        assert!(
            sections[2].ends_with("     1\talso tiny"),
            "{}",
            sections[2]
        );
        for big in [sections[1], sections[3], sections[4]] {
            assert!(big.len() >= BUDGET * 3 / 10, "{}", big.len());
        }
    }

    #[tokio::test]
    async fn sixty_four_files_each_show_their_header_and_the_rest_is_named() {
        let h = harness().await;
        let mut files = Vec::new();
        for i in 0..64 {
            let text: String = (1..=400)
                .map(|n| format!("f{i} l{n} some text here\n"))
                .collect();
            write(&h, &format!("many/f{i:02}.txt"), text);
            files.push(json!({"path": format!("many/f{i:02}.txt")}));
        }
        let r = read(&h, "m1", json!({ "files": files })).await;
        assert_eq!(r.status, Status::Ok);
        assert!(
            !r.content.contains("[output shaped") && r.content.len() <= BUDGET,
            "{}",
            r.content.len()
        );
        for i in 0..64 {
            assert!(
                r.content.contains(&format!("==> many/f{i:02}.txt (")),
                "f{i:02}"
            );
        }
        let shown = r.content.matches("continue with offset=").count();
        let not_read = r
            .content
            .matches("(not read: the result budget is used up)")
            .count();
        eprintln!("64 files: {shown} with lines, {not_read} not read");
        assert_eq!(shown, 64);
        assert!(not_read > 0 && not_read < 64, "{not_read}");
        assert!(
            r.content
                .contains("read it in another call, continue with offset=1]")
        );
    }

    #[tokio::test]
    async fn a_50k_row_csv_pages_with_its_header_on_every_page() {
        let h = harness().await;
        let mut csv = String::from("id,name,score\n");
        for i in 1..=50_000 {
            csv.push_str(&format!("{i},\"name, {i}\",{}\n", i * 7 % 1000));
        }
        write(&h, "data/scores.csv", &csv);
        let mut offset = 1u64;
        let mut rows = Vec::new();
        let mut calls = 0;
        loop {
            calls += 1;
            let r = read(
                &h,
                &format!("c{calls}"),
                json!({"files": [{"path": "data/scores.csv", "offset": offset}]}),
            )
            .await;
            assert_eq!(r.status, Status::Ok, "{}", r.content);
            assert!(
                r.content.starts_with(&format!(
                    "[read_files] ==> data/scores.csv (CSV, rows {offset}-"
                )) && r.content.contains(" of 50000 (header kept)"),
                "{}",
                &r.content[..200]
            );
            let body = r.content.split_once(" <==\n").unwrap().1;
            let body = body.strip_prefix("header\tid,name,score\n").unwrap();
            let (lines, next) = page(&format!("x\n{body}"));
            for (n, row) in lines {
                assert_eq!(row, format!("{n},\"name, {n}\",{}", n * 7 % 1000));
                rows.push(n);
            }
            match next {
                Some(n) => offset = n,
                None => break,
            }
        }
        eprintln!("50,000 rows ({} bytes) in {calls} calls", csv.len());
        assert_eq!(rows, (1..=50_000).collect::<Vec<u64>>());
    }

    #[tokio::test]
    async fn a_line_longer_than_the_budget_is_cut_with_a_marker() {
        let h = harness().await;
        let text = format!("{}\nsecond\n", "x".repeat(50_000));
        write(&h, "one-long.txt", &text);
        let r = read(&h, "l1", json!({"files": [{"path": "one-long.txt"}]})).await;
        assert_eq!(r.status, Status::Ok);
        assert!(!r.content.contains("[output shaped") && r.content.len() <= BUDGET);
        assert!(
            r.content
                .contains(" [… line cut: 41,808 more bytes; see it whole with run_command"),
            "{}",
            &r.content[r.content.len() - 300..]
        );
        assert!(r.content.ends_with("     2\tsecond"));

        // Five at once: each copy is cut to its share, and goes on at line 2.
        let files: Vec<Value> = (0..5).map(|_| json!({"path": "one-long.txt"})).collect();
        let r = read(&h, "l2", json!({ "files": files })).await;
        assert!(!r.content.contains("[output shaped") && r.content.len() <= BUDGET);
        assert_eq!(
            r.content.matches(" [… line cut: ").count(),
            5,
            "{}",
            r.content
        );
        assert_eq!(r.content.matches("continue with offset=2]").count(), 5);

        // Under a tiny budget the cut still leaves the result unshaped.
        let small = harness_with_budget(2_000);
        small.select("s", "read_files").await;
        write(&small, "one-long.txt", &text);
        let r = read(&small, "l3", json!({"files": [{"path": "one-long.txt"}]})).await;
        assert!(
            !r.content.contains("[output shaped") && r.content.len() <= 2_000,
            "{}",
            r.content
        );
        assert!(r.content.contains(" [… line cut: "), "{}", r.content);
        assert!(
            r.content.ends_with("continue with offset=2]"),
            "{}",
            r.content
        );
    }

    #[tokio::test]
    async fn a_large_budget_is_still_capped_at_one_mib_per_file() {
        let h = harness_with_budget(8 << 20);
        h.select("s", "read_files").await;
        let text: String = (1..=60_000)
            .map(|n| format!("{n:06} padding to make the line a little longer\n"))
            .collect();
        assert!(text.len() > 2 << 20);
        write(&h, "huge.txt", &text);
        write(&h, "huge2.txt", &text);
        let r = read(
            &h,
            "h1",
            json!({"files": [{"path": "huge.txt"}, {"path": "huge2.txt", "limit": 100_000}]}),
        )
        .await;
        assert_eq!(r.status, Status::Ok);
        assert!(!r.content.contains("[output shaped"));
        let sections: Vec<&str> = r.content.split("\n\n").collect();
        // The default limit still holds...
        assert!(
            sections[0].contains("(lines 1-2000 of 60000; more follows)")
                && sections[0].ends_with("[truncated by the limit: lines 2001-60000 not shown; continue with offset=2001]"),
            "{}",
            &sections[0][..200]
        );
        // ...and a larger one stops at the cap.
        let big = sections[1];
        assert!(
            big.len() <= 1 << 20 && big.len() > 1000 << 10,
            "{}",
            big.len()
        );
        assert!(
            big.contains("[truncated by the 1.0 MiB per-read cap: lines "),
            "{}",
            &big[big.len() - 300..]
        );
    }

    #[tokio::test]
    async fn a_long_pdf_pages_to_the_budget_by_whole_pages() {
        let h = harness().await;
        let texts: Vec<String> = (1..=40)
            .map(|i| format!("Page{i:02} {}", "lorem ipsum ".repeat(80)))
            .collect();
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        write(&h, "doc/long.pdf", pdf(&refs));
        let mut offset = 1;
        let mut seen = Vec::new();
        let mut calls = 0;
        loop {
            calls += 1;
            let r = read(
                &h,
                &format!("d{calls}"),
                json!({"files": [{"path": "doc/long.pdf", "offset": offset}]}),
            )
            .await;
            assert_eq!(r.status, Status::Ok, "{}", r.content);
            assert!(!r.content.contains("[output shaped") && r.content.len() <= BUDGET);
            for page in r.content.split("--- page ").skip(1) {
                let (n, text) = page.split_once(" ---\n").unwrap();
                let n: usize = n.parse().unwrap();
                assert!(text.starts_with(&format!("Page{n:02} lorem")), "{text}");
                assert!(!text.contains("is cut here"), "{text}");
                seen.push(n);
            }
            match r.content.rsplit_once("continue with offset=") {
                Some((_, next)) => offset = next.trim_end_matches(']').parse().unwrap(),
                None => break,
            }
        }
        eprintln!("40-page PDF in {calls} calls");
        assert!(calls > 1);
        assert_eq!(seen, (1..=40).collect::<Vec<_>>());
    }
}
