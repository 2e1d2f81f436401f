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

use std::path::{Path, PathBuf};

use async_trait::async_trait;
use dispatch_engine::{Effect, Tool, ToolContext, ToolError, ToolOutput, ToolSpec};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use super::confine::{Confinement, MAX_PATH_BYTES};
use super::read::{self, ImageBudget, Window, human_size};
use crate::{parse_args, schema_of};

/// Most files in one call.
pub const MAX_FILES: usize = 64;
/// Most text one call returns, all files together.
pub const MAX_CALL_TEXT_BYTES: usize = 8 << 20;

/// Read files (text, CSV/TSV, PDF, DOCX, PPTX, images).
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ReadFilesArgs {
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
    /// How many lines or rows (default 2000) or pages or slides (default 50) to return.
    #[schemars(range(min = 1, max = 100_000))]
    limit: Option<u64>,
}

pub struct ReadFiles {
    spec: ToolSpec,
}

impl ReadFiles {
    pub fn new() -> Self {
        ReadFiles {
            spec: ToolSpec::new(
                "read_files",
                "Read 1-64 files in one call. Text comes back with line numbers, 2000 lines by \
                 default and at most 1 MiB per file; a cut-off file ends with the offset to \
                 continue from. CSV/TSV are read by rows (header kept), PDF by page, PPTX by \
                 slide, DOCX by line; PNG/JPEG/GIF/WebP images (up to 5 MiB) are returned as \
                 images. Paths are relative to the work directory. A file that cannot be read \
                 gets its own `error:` line and the others are still read. To list a directory \
                 or search file contents use find_files.",
                schema_of::<ReadFilesArgs>(),
            )
            .concurrent()
            .read_only()
            .effect(Effect::ReadsPaths),
        }
    }
}

impl Default for ReadFiles {
    fn default() -> Self {
        Self::new()
    }
}

#[async_trait]
impl Tool for ReadFiles {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, cx: ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        let args: ReadFilesArgs = parse_args("read_files", args)?;
        if args.files.is_empty() || args.files.len() > MAX_FILES {
            return Err(ToolError::failed(format!(
                "files must hold 1 to {MAX_FILES} entries, got {}; split the batch",
                args.files.len()
            )));
        }
        let confinement = Confinement::for_call(&cx)?;
        let spill = spill_dir(&cx);
        let cancel = cx.cancel.clone();
        let batch = tokio::task::spawn_blocking(move || {
            let cancelled = move || cancel.is_cancelled();
            read_batch(&confinement, spill.as_deref(), &args.files, &cancelled)
        })
        .await
        .map_err(|e| ToolError::failed(format!("read_files stopped unexpectedly: {e}")))?;
        batch.into_output()
    }
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

fn read_batch(
    confinement: &Confinement,
    spill: Option<&Path>,
    files: &[FileArg],
    cancelled: &dyn Fn() -> bool,
) -> Batch {
    let mut entries = Vec::with_capacity(files.len());
    let mut paths: Vec<PathBuf> = Vec::new();
    let mut images = ImageBudget(read::image::MAX_CALL_IMAGE_BYTES);
    let mut text_used = 0usize;
    for file in files {
        if cancelled() {
            entries.push(Entry::Failed {
                label: file.path.clone(),
                message: "not read: the call was cancelled".into(),
                names_path: false,
            });
            continue;
        }
        let resolved = match resolve(confinement, spill, &file.path) {
            Ok(p) => p,
            Err(e) => {
                entries.push(Entry::Failed {
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
        if text_used >= MAX_CALL_TEXT_BYTES {
            entries.push(Entry::Failed {
                label,
                message: format!(
                    "not read: this call already returns {} of text; read this file in another call",
                    human_size(MAX_CALL_TEXT_BYTES as u64)
                ),
                names_path: false,
            });
            continue;
        }
        let window = Window {
            offset: file.offset.unwrap_or(1).max(1),
            limit: file.limit,
        };
        match read::read_path(&resolved, window, &mut images) {
            Ok(section) => {
                text_used += section.body.len();
                entries.push(Entry::Read { label, section });
            }
            Err(message) => entries.push(Entry::Failed {
                label,
                message,
                names_path: false,
            }),
        }
    }
    Batch { entries, paths }
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

/// This session's spill directory, resolved, if it exists.
fn spill_dir(cx: &ToolContext) -> Option<PathBuf> {
    let data = cx.data_dir.as_ref()?;
    data.join("sessions")
        .join(session_dir_name(&cx.session_id))
        .join("results")
        .canonicalize()
        .ok()
}

/// The engine's name for a session's directory (`commit.rs`, `spill_path`): a safe prefix of
/// the id plus a hash of all of it. Kept in step by the end-to-end spill test below.
fn session_dir_name(session: &str) -> String {
    let prefix: String = session
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
        .take(32)
        .collect();
    let hash = blake3::hash(session.as_bytes()).to_hex();
    format!("{prefix}-{}", &hash[..12])
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
        let h = harness().await;
        let text: String = (1..=1500)
            .map(|i| format!("row {i} of the long listing\n"))
            .collect();
        write(&h, "long.txt", text);
        let r = read(&h, "r1", json!({"files": [{"path": "long.txt"}]})).await;
        assert_eq!(r.status, Status::Ok);
        let spill = r
            .content
            .split("full text: ")
            .nth(1)
            .and_then(|rest| rest.split(" (read it with read_files").next())
            .unwrap_or_else(|| panic!("no spill notice in {}", &r.content[..400]))
            .to_string();
        let r = read(&h, "r2", json!({"files": [{"path": spill, "limit": 3}]})).await;
        assert_eq!(r.status, Status::Ok, "{}", r.content);
        assert!(
            r.content
                .contains("     1\t==> long.txt (lines 1-1500 of 1500) <=="),
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
}
