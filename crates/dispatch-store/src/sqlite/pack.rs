//! How a round's events and transcript messages are stored: one deflated body per round, with
//! every large text cut out into `blobs`, so a 20 KB result is written once (deflated) however
//! many of the round's documents carry it.
//!
//! A body is `HEADER "\n" TEXT`, deflated (a BLOB), or left as it is (TEXT: rows migrated from
//! before migration 10). `TEXT` is the documents (each one JSON text) joined without a
//! separator, minus their large texts as JSON writes them inside a string (escaped, without
//! the quotes). `HEADER` is `LEN,LEN,…;AT:HASH,AT:HASH,…`: each document's length once
//! restored, then where in `TEXT` each cut stood and the hex BLAKE3 hash of the blob holding
//! its text. Restoring puts back what `serde_json` writes for that text, the very bytes that
//! were cut, so the documents come back byte for byte. JSON escapes each character on its own,
//! so a result's escaped text is also inside the escaped `[tool] result` a message carries:
//! the dedupe entry, the transcript and the event share one blob.
//!
//! Cutting by position, never by a marker inside the text, means no text (a tool result is
//! hostile input) can pose as a reference.

use std::io::Read;

use flate2::read::DeflateDecoder;
use flate2::{Compress, Compression, FlushCompress, Status};
use rusqlite::types::ValueRef;

use super::JobError;

/// Texts at least this long are stored once, in `blobs`.
pub(super) const BLOB_MIN: usize = 1024;

/// The most a body or a blob may inflate to: far above anything a round writes, low enough
/// that a corrupt row cannot exhaust memory.
const INFLATED_MAX: u64 = 1 << 30;

/// A BLAKE3 hash, the key of a blob.
pub(super) type Hash = [u8; 32];

/// The blobs a round's documents referred to, to write with them (deflated).
#[derive(Default)]
pub(super) struct Blobs {
    pub(super) new: Vec<(Hash, Vec<u8>)>,
}

impl Blobs {
    /// Keep `text` as a blob; its hash.
    pub(super) fn add(&mut self, text: &str) -> Result<Hash, JobError> {
        let hash = *blake3::hash(text.as_bytes()).as_bytes();
        if !self.new.iter().any(|(known, _)| *known == hash) {
            self.new.push((hash, deflate(text.as_bytes())?));
        }
        Ok(hash)
    }

    /// Pack `docs` (JSON texts, each with the texts inside it that may be cut out) into one
    /// deflated body. The documents are taken one at a time: a caller that makes each one's
    /// text as it goes never holds all of them at once.
    pub(super) fn pack<'t, D: AsRef<str>>(
        &mut self,
        docs: impl IntoIterator<Item = (D, Vec<&'t str>)>,
    ) -> Result<Vec<u8>, JobError> {
        let mut lens = String::new();
        let mut cuts = String::new();
        let mut text = String::new();
        for (doc, large) in docs {
            let doc = doc.as_ref();
            push_number(&mut lens, doc.len());
            let mut found: Vec<(usize, usize, &str)> = Vec::new();
            // The texts mostly come in document order: looking from the end of the last cut
            // first keeps a row of many large results linear rather than quadratic.
            let mut from = 0;
            for inner in large.into_iter().filter(|t| t.len() >= BLOB_MIN) {
                let escaped = json_escaped(inner)?;
                // Any occurrence will do: putting the same bytes back where they were cut
                // restores the document whichever one it is.
                let Some(at) = doc
                    .get(from..)
                    .and_then(|rest| rest.find(escaped.as_str()))
                    .map(|at| at + from)
                    .or_else(|| doc.find(escaped.as_str()))
                else {
                    continue;
                };
                let end = at + escaped.len();
                if found.iter().all(|&(a, e, _)| end <= a || at >= e) {
                    found.push((at, end, inner));
                    from = end;
                }
            }
            found.sort_unstable_by_key(|&(at, _, _)| at);
            let mut kept = 0;
            for (at, end, inner) in found {
                text.push_str(&doc[kept..at]);
                let hash = self.add(inner)?;
                if !cuts.is_empty() {
                    cuts.push(',');
                }
                cuts.push_str(&format!("{}:{}", text.len(), hex(&hash)));
                kept = end;
            }
            text.push_str(&doc[kept..]);
        }
        let mut plain = Vec::with_capacity(lens.len() + cuts.len() + text.len() + 2);
        plain.extend_from_slice(lens.as_bytes());
        plain.push(b';');
        plain.extend_from_slice(cuts.as_bytes());
        plain.push(b'\n');
        plain.extend_from_slice(text.as_bytes());
        deflate(&plain)
    }
}

/// The documents of a stored body; `blob` reads a blob's deflated text by hash.
pub(super) fn unpack(
    body: ValueRef<'_>,
    mut blob: impl FnMut(&Hash) -> Result<Vec<u8>, JobError>,
) -> Result<Vec<String>, JobError> {
    let plain = match body {
        ValueRef::Blob(deflated) => inflate(deflated)?,
        ValueRef::Text(text) => text.to_vec(),
        _ => return Err(corrupt("a body is neither text nor a blob")),
    };
    let plain = String::from_utf8(plain).map_err(|_| corrupt("a body is not UTF-8"))?;
    let (header, text) = plain
        .split_once('\n')
        .ok_or_else(|| corrupt("a body has no header"))?;
    let (lens, cuts) = header
        .split_once(';')
        .ok_or_else(|| corrupt("a body header has no `;`"))?;

    let mut restored = String::with_capacity(text.len());
    let mut kept = 0;
    for cut in cuts.split(',').filter(|c| !c.is_empty()) {
        let (at, hash) = cut
            .split_once(':')
            .ok_or_else(|| corrupt("a cut has no `:`"))?;
        let at: usize = at.parse().map_err(|_| corrupt("a cut position"))?;
        let hash = unhex(hash).ok_or_else(|| corrupt("a cut's blob hash"))?;
        let before = text
            .get(kept..at)
            .ok_or_else(|| corrupt("a cut outside its body"))?;
        restored.push_str(before);
        let inner = String::from_utf8(inflate(&blob(&hash)?)?)
            .map_err(|_| corrupt("a blob is not UTF-8"))?;
        restored.push_str(&json_escaped(&inner)?);
        kept = at;
    }
    restored.push_str(
        text.get(kept..)
            .ok_or_else(|| corrupt("a cut outside its body"))?,
    );

    let mut docs = Vec::new();
    let mut from = 0;
    for len in lens.split(',').filter(|l| !l.is_empty()) {
        let len: usize = len.parse().map_err(|_| corrupt("a document length"))?;
        let doc = restored
            .get(from..from + len)
            .ok_or_else(|| corrupt("a document past the end of its body"))?;
        docs.push(doc.to_string());
        from += len;
    }
    if from != restored.len() {
        return Err(corrupt("a body longer than its documents"));
    }
    Ok(docs)
}

/// Inflate a deflated text or blob.
pub(super) fn inflate(deflated: &[u8]) -> Result<Vec<u8>, JobError> {
    let mut plain = Vec::new();
    DeflateDecoder::new(deflated)
        .take(INFLATED_MAX + 1)
        .read_to_end(&mut plain)
        .map_err(|e| corrupt(&format!("cannot inflate a stored body: {e}")))?;
    if u64::try_from(plain.len()).unwrap_or(u64::MAX) > INFLATED_MAX {
        return Err(corrupt("a stored body inflates past 1 GiB"));
    }
    Ok(plain)
}

fn deflate(plain: &[u8]) -> Result<Vec<u8>, JobError> {
    thread_local! {
        // A compressor owns a few hundred KB of tables; making one per body would allocate
        // and zero them every round. Each thread keeps one and resets it.
        static COMPRESSOR: std::cell::RefCell<Compress> =
            // Level 1: most of what a higher level would save on JSON this repetitive, at a
            // fraction of the time (it runs on the caller's thread, before the writer).
            std::cell::RefCell::new(Compress::new(Compression::fast(), false));
    }
    COMPRESSOR.with(|cell| {
        let mut compressor = cell.borrow_mut();
        compressor.reset();
        let mut out = Vec::with_capacity(plain.len() / 2 + 64);
        loop {
            let read = usize::try_from(compressor.total_in()).unwrap_or(usize::MAX);
            let rest = plain.get(read..).unwrap_or_default();
            let status = compressor
                .compress_vec(rest, &mut out, FlushCompress::Finish)
                .map_err(|e| JobError::Rejected(format!("cannot deflate: {e}")))?;
            match status {
                Status::StreamEnd => return Ok(out),
                Status::Ok | Status::BufError => out.reserve(out.capacity().max(64)),
            }
        }
    })
}

/// `text` as JSON writes it inside a string: escaped, without the quotes.
fn json_escaped(text: &str) -> Result<String, JobError> {
    let mut literal = serde_json::to_string(text)
        .map_err(|e| JobError::Rejected(format!("cannot encode JSON: {e}")))?;
    literal.pop();
    literal.remove(0);
    Ok(literal)
}

fn push_number(out: &mut String, n: usize) {
    if !out.is_empty() {
        out.push(',');
    }
    out.push_str(&n.to_string());
}

pub(super) fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 15)]));
    }
    out
}

/// The 32 bytes of 64 lowercase hex digits; `None` for anything else.
pub(super) fn unhex(text: &str) -> Option<Hash> {
    let digits = text.as_bytes();
    if digits.len() != 64 {
        return None;
    }
    let value = |d: u8| match d {
        b'0'..=b'9' => Some(d - b'0'),
        b'a'..=b'f' => Some(d - b'a' + 10),
        _ => None,
    };
    let mut out = [0u8; 32];
    for (i, pair) in digits.chunks_exact(2).enumerate() {
        out[i] = (value(pair[0])? << 4) | value(pair[1])?;
    }
    Some(out)
}

fn corrupt(what: &str) -> JobError {
    JobError::Corrupt(what.to_string())
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use pretty_assertions::assert_eq;

    use super::*;

    fn round_trip(docs: Vec<(&str, Vec<&str>)>) -> (Vec<String>, Blobs, Vec<u8>) {
        let mut blobs = Blobs::default();
        let body = blobs.pack(docs).unwrap();
        let stored: HashMap<Hash, Vec<u8>> = blobs.new.iter().cloned().collect();
        let docs = unpack(ValueRef::Blob(&body), |hash| {
            stored
                .get(hash)
                .cloned()
                .ok_or(JobError::Corrupt("missing".into()))
        })
        .unwrap();
        (docs, blobs, body)
    }

    #[test]
    fn documents_come_back_byte_for_byte_with_large_texts_stored_once() {
        let large = "line with \"quotes\", a tab\t and ünïcode\n".repeat(100);
        let event = serde_json::json!({"type": "ToolResult", "tool_args": "{}", "result": large})
            .to_string();
        let message = serde_json::json!([{"role": "tool", "content": large}]).to_string();
        let small = r#"{"type":"Done"}"#.to_string();
        let (docs, blobs, body) = round_trip(vec![
            (event.as_str(), vec!["{}", large.as_str()]),
            (small.as_str(), vec![]),
            (message.as_str(), vec![large.as_str()]),
        ]);
        assert_eq!(docs, vec![event, small, message]);
        assert_eq!(
            blobs.new.len(),
            1,
            "one blob for the text both documents carry"
        );
        assert!(
            body.len() < 200,
            "the body keeps references, not the text: {} bytes",
            body.len()
        );
    }

    #[test]
    fn a_message_that_carries_a_result_after_a_prefix_shares_its_blob() {
        let result = "\"quoted\" é\n".repeat(200);
        let message = serde_json::json!({"content": format!("[read_files] {result}")}).to_string();
        let event = serde_json::json!({"result": format!("[read_files] {result}")}).to_string();
        let (docs, blobs, _) = round_trip(vec![
            (message.as_str(), vec![result.as_str()]),
            (event.as_str(), vec![result.as_str()]),
        ]);
        assert_eq!(docs, vec![message, event]);
        assert_eq!(blobs.new.len(), 1);
    }

    #[test]
    fn a_text_that_mimics_a_reference_is_kept_as_text() {
        // Nothing inside a text is read as a reference: cuts are positions in the header.
        let sneaky = format!("0:{};\n{}", hex(&[7u8; 32]), "x".repeat(BLOB_MIN));
        let real = "y".repeat(BLOB_MIN);
        let doc = serde_json::json!({"result": sneaky, "other": real}).to_string();
        // With a real cut in the same body, and the text left in place (not a candidate).
        let (docs, blobs, _) = round_trip(vec![(doc.as_str(), vec![real.as_str()])]);
        assert_eq!(docs, vec![doc.clone()]);
        assert_eq!(blobs.new.len(), 1, "only the real text became a blob");
        // Cut out into a blob of its own, it comes back as the same text too.
        let (docs, blobs, _) =
            round_trip(vec![(doc.as_str(), vec![sneaky.as_str(), real.as_str()])]);
        assert_eq!(docs, vec![doc]);
        assert_eq!(blobs.new.len(), 2);
    }

    #[test]
    fn overlapping_and_missing_texts_are_left_in_place() {
        let a = "a".repeat(BLOB_MIN + 10);
        let doc = serde_json::json!({"x": a}).to_string();
        // The same text twice, and one that is not in the document at all.
        let absent = "b".repeat(BLOB_MIN);
        let (docs, blobs, _) = round_trip(vec![(
            doc.as_str(),
            vec![a.as_str(), a.as_str(), absent.as_str()],
        )]);
        assert_eq!(docs, vec![doc]);
        assert_eq!(blobs.new.len(), 1);
    }

    #[test]
    fn a_text_body_from_before_migration_10_is_read_as_it_is() {
        let doc = r#"{"type":"Done","at_ms":1.5}"#;
        let body = format!("{};\n{doc}", doc.len());
        let docs = unpack(ValueRef::Text(body.as_bytes()), |_| {
            Err(JobError::Corrupt("no blobs".into()))
        })
        .unwrap();
        assert_eq!(docs, vec![doc.to_string()]);
    }

    #[test]
    fn corrupt_bodies_are_errors_not_panics() {
        for body in [
            &b"no header"[..],
            b"5;\nabc",
            b"x;\nabc",
            b"3;999:00\nabc",
            b"3;1:zz\nabc",
        ] {
            let result = unpack(ValueRef::Text(body), |_| {
                Err(JobError::Corrupt("none".into()))
            });
            assert!(
                matches!(result, Err(JobError::Corrupt(_))),
                "{:?}: {result:?}",
                String::from_utf8_lossy(body)
            );
        }
        assert!(matches!(
            unpack(ValueRef::Blob(b"not deflate"), |_| Err(JobError::Corrupt(
                "none".into()
            ))),
            Err(JobError::Corrupt(_))
        ));
    }

    #[test]
    fn hex_round_trips_and_refuses_anything_else() {
        let hash = [0xab; 32];
        assert_eq!(unhex(&hex(&hash)), Some(hash));
        assert_eq!(unhex("AB"), None);
        assert_eq!(unhex(&"AB".repeat(32)), None, "upper case is another key");
        assert_eq!(unhex(&"zz".repeat(32)), None);
    }
}
