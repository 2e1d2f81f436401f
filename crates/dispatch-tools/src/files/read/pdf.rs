//! PDF text by page, with lopdf (pure Rust, no rayon/chrono; its decompression bound keeps a
//! crafted stream from inflating without limit). A PDF must be parsed whole, so its size is
//! capped; only the pages in the window are decoded.

use std::io::Read;
use std::path::Path;

use lopdf::{Document, LoadOptions};

use super::{Budget, Section, Window, human_size, render_pages};

/// Largest PDF read_files opens.
pub const MAX_PDF_BYTES: u64 = 64 << 20;
/// Largest size one stream (or one page's content) may inflate to.
const MAX_INFLATE: usize = 64 << 20;

pub fn read_pdf(path: &Path, size: u64, window: Window, budget: Budget) -> Result<Section, String> {
    if size > MAX_PDF_BYTES {
        return Err(format!(
            "this PDF is {}, over the {} read_files opens; extract pages with run_command, \
             e.g. `pdftotext -f 1 -l 5 file.pdf -`",
            human_size(size),
            human_size(MAX_PDF_BYTES)
        ));
    }
    let mut bytes = Vec::with_capacity(size as usize);
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_PDF_BYTES + 1).read_to_end(&mut bytes))
        .map_err(|e| super::io_message(path, &e))?;
    let options = LoadOptions {
        max_decompressed_size: Some(MAX_INFLATE),
        ..LoadOptions::default()
    };
    let mut doc = Document::load_mem_with_options(&bytes, options)
        .map_err(|e| format!("cannot read this PDF: {e}"))?;
    drop(bytes);
    if doc.is_encrypted() && doc.decrypt("").is_err() {
        return Err("this PDF is encrypted with a password; read_files cannot open it".into());
    }
    let total = doc.get_pages().len() as u64;
    render_pages(total, window.offset, window.limit, "page", budget, |n| {
        let n = u32::try_from(n).map_err(|_| "no such page".to_string())?;
        doc.extract_text_with_limit(&[n], MAX_INFLATE)
            .map_err(|e| e.to_string())
    })
    .map(|mut s| {
        s.summary = format!("PDF, {}", s.summary);
        s
    })
}
