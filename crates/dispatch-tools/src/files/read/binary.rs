//! Binary files: bytes a model cannot use are never returned; a one-line summary says what the
//! file is (from its magic bytes) so the model can pick a tool that can handle it.

use std::fs::Metadata;

use super::{Section, human_size};

/// What a binary file is, or `None` when its first bytes look like text.
pub fn sniff(head: &[u8]) -> Option<&'static str> {
    const MAGIC: &[(&[u8], &str)] = &[
        (b"\x7fELF", "ELF executable"),
        (b"\xfe\xed\xfa\xce", "Mach-O executable"),
        (b"\xfe\xed\xfa\xcf", "Mach-O executable"),
        (b"\xce\xfa\xed\xfe", "Mach-O executable"),
        (b"\xcf\xfa\xed\xfe", "Mach-O executable"),
        (b"\0asm", "WebAssembly module"),
        (b"PK\x03\x04", "zip archive"),
        (b"\x1f\x8b", "gzip archive"),
        (b"\xfd7zXZ\0", "xz archive"),
        (b"\x28\xb5\x2f\xfd", "zstd archive"),
        (b"7z\xbc\xaf\x27\x1c", "7-Zip archive"),
        (b"SQLite format 3\0", "SQLite database"),
        (
            b"\xff\xfe",
            "UTF-16 text (convert it to UTF-8 first, e.g. iconv -f UTF-16)",
        ),
        (
            b"\xfe\xff",
            "UTF-16 text (convert it to UTF-8 first, e.g. iconv -f UTF-16)",
        ),
        (
            b"II*\0",
            "TIFF image (only PNG, JPEG, GIF and WebP are returned as images)",
        ),
        (
            b"MM\0*",
            "TIFF image (only PNG, JPEG, GIF and WebP are returned as images)",
        ),
    ];
    if let Some((_, what)) = MAGIC.iter().find(|(magic, _)| head.starts_with(magic)) {
        return Some(what);
    }
    if head.len() > 262 && &head[257..262] == b"ustar" {
        return Some("tar archive");
    }
    if head.contains(&0) {
        return Some(if head.starts_with(b"MZ") {
            "Windows executable"
        } else if head.starts_with(b"BM") {
            "BMP image (only PNG, JPEG, GIF and WebP are returned as images)"
        } else {
            "binary data"
        });
    }
    None
}

/// The section shown for a binary file.
pub fn summary(what: &str, size: u64) -> Section {
    Section {
        summary: format!("binary: {what}, {}", human_size(size)),
        body:
            "(not shown: read_files returns text, CSV/TSV, PDF, DOCX, PPTX and PNG/JPEG/GIF/WebP \
               images; inspect other binaries with run_command, e.g. `file` or `xxd | head`)\n"
                .to_string(),
        image: None,
    }
}

/// A name for a file that is neither a regular file nor a directory.
pub fn special_kind(meta: &Metadata) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        let t = meta.file_type();
        if t.is_fifo() {
            return "a named pipe";
        }
        if t.is_socket() {
            return "a socket";
        }
        if t.is_char_device() || t.is_block_device() {
            return "a device";
        }
    }
    let _ = meta;
    "a special file"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn magic_bytes_name_the_format_and_text_is_not_binary() {
        assert_eq!(sniff(b"\x7fELF\x02"), Some("ELF executable"));
        assert_eq!(sniff(b"\x1f\x8b\x08\0"), Some("gzip archive"));
        assert_eq!(sniff(b"SQLite format 3\0...."), Some("SQLite database"));
        assert_eq!(sniff(b"MZ\x90\0\x03"), Some("Windows executable"));
        assert_eq!(sniff(b"MZ is a plain word"), None);
        assert_eq!(sniff("héllo wörld\n".as_bytes()), None);
        assert_eq!(sniff(b""), None);
        assert_eq!(sniff(b"x\0y"), Some("binary data"));
        let mut tar = vec![b'a'; 600];
        tar[257..262].copy_from_slice(b"ustar");
        assert_eq!(sniff(&tar), Some("tar archive"));
    }
}
