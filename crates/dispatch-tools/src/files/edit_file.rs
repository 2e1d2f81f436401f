//! `edit_file`: write a whole file or patch exact pieces of it.
//!
//! A patch names the text it changes (`old_string`) instead of line numbers, so an edit never
//! lands on the wrong lines after the file moved under the model; the price is that the text
//! must match exactly once. When it does not, the failure is where the model learns what to
//! send instead, so it shows the nearest candidates (same text but for whitespace, the same
//! first line, the most similar line) with their line numbers. Targets apply all or none, the
//! file's CRLF line endings and final-newline state are kept, and the patch works on bytes so a
//! file in a legacy encoding can still be patched where its text is ASCII.

use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use dispatch_engine::{
    Access, Effect, Gate, Subject, ToolContext, ToolError, ToolOutput, ToolSpec,
};
use dispatch_store::{FileAction, FileHistory};
use memchr::memmem;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use super::beneath::Target;
use super::confine::Confinement;
use super::write::{
    Existing, MAX_SNAPSHOT_FILE_BYTES, Recorder, blocking, human_bytes, io_error, line_delta,
};
use crate::{BuiltinTool, Stores};

/// Largest `content` accepted for mode=write.
pub const MAX_CONTENT_BYTES: usize = 4 * 1024 * 1024;
/// Largest file mode=patch works on, before and after the patch.
pub const MAX_PATCH_FILE_BYTES: usize = 16 * 1024 * 1024;
/// Most targets in one call.
pub const MAX_TARGETS: usize = 100;
/// Largest `old_string`, `new_string` or `insert_string`.
pub const MAX_TARGET_STRING_BYTES: usize = 1024 * 1024;
/// Most line numbers listed for an ambiguous `old_string`.
const MAX_LISTED_MATCHES: usize = 20;
/// Lines scored for "most similar line" (a bound on the work; a patchable file has fewer).
const MAX_SCORED_LINES: usize = 1_000_000;
/// Characters of a file line shown in a candidate.
const SNIPPET_CHARS: usize = 120;

/// Write a whole file or patch parts of it.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EditFileArgs {
    /// The file, relative to the work directory.
    path: String,
    /// write: replace the whole file with `content` (created with its parent directories if missing). patch: apply `targets` to an existing file. Omitted: targets → patch, content → write.
    #[serde(default)]
    mode: Option<EditMode>,
    /// The whole new file (mode=write), at most 4 MiB. In a CRLF file, line breaks become CRLF.
    #[serde(default)]
    content: Option<String>,
    /// The edits (mode=patch), at most 100, applied in order, each to the result of the ones before; if any fails none is applied.
    #[serde(default)]
    targets: Option<Vec<TargetArg>>,
}

#[derive(Deserialize, JsonSchema, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
enum EditMode {
    Write,
    Patch,
}

/// One edit: replace `old_string` with `new_string`, or insert `insert_string` before `row`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct TargetArg {
    /// The exact text to replace, indentation and line breaks included; it must occur exactly once unless replace_all is set.
    #[serde(default)]
    old_string: Option<String>,
    /// The text that replaces old_string ("" deletes it).
    #[serde(default)]
    new_string: Option<String>,
    /// Replace every occurrence of old_string.
    #[serde(default)]
    replace_all: Option<bool>,
    /// Lines to insert before line `row` (instead of old_string/new_string).
    #[serde(default)]
    insert_string: Option<String>,
    /// 1-based line to insert before; the number of lines + 1 appends at the end.
    #[serde(default)]
    row: Option<u64>,
}

pub struct EditFile {
    /// Where each change is recorded first, so restore_file can undo it.
    history: Option<Arc<dyn FileHistory>>,
}

impl EditFile {
    pub fn new(stores: &Stores) -> Self {
        EditFile {
            history: stores.file_history.clone(),
        }
    }
}

/// What the call will do, once the arguments are checked.
enum Plan {
    Write(String),
    Patch(Vec<TargetArg>),
}

#[async_trait]
impl BuiltinTool for EditFile {
    const NAME: &'static str = "edit_file";
    const DESCRIPTION: &'static str = "Write a whole file (mode=write, `content`, creates missing directories) or patch it \
        (mode=patch, `targets`: exact `old_string` → `new_string`, optionally `replace_all`, \
        or `insert_string` before 1-based `row`). Each old_string must match exactly once \
        (copy it from read_files, indentation included); targets apply in order and all or \
        none. CRLF endings are kept. Content ≤ 4 MiB, patched files ≤ 16 MiB. Every change \
        is recorded first: the result names the version to undo it with restore_file.";
    type Args = EditFileArgs;

    fn declare(&self, spec: ToolSpec) -> ToolSpec {
        spec.gate(Gate::Ask)
            .effect(Effect::Mutates)
            .elide_args(&["content", "targets"])
    }

    fn subject(&self, args: &Value, workdir: &Path) -> Option<Subject> {
        use crate::subjects::{resolved, text};
        Some(Subject::new(Access::Changes).paths(resolved(workdir, text(args, "path"))))
    }

    async fn run(&self, cx: ToolContext, args: EditFileArgs) -> Result<ToolOutput, ToolError> {
        let recorder = Recorder::for_call(self.history.as_ref(), &cx, Self::NAME)?;
        let plan = plan(args.mode, args.content, args.targets)?;
        let confine = Confinement::for_call(&cx)?;
        if args.path.ends_with('/') {
            return Err(ToolError::failed(format!(
                "path {:?} ends with `/`, so it names a directory; give the file's path",
                args.path
            )));
        }
        let path = confine.resolve(&args.path)?;
        let shown = confine.display(&path).into_owned();

        // Reading, patching and counting lines are CPU and disk work: off the async workers.
        let (file, shown_owned, confined) = (path.clone(), shown.clone(), confine.clone());
        let change = blocking(move || prepare(&confined, &file, &shown_owned, plan)).await?;
        let Some(change) = change else {
            return Ok(ToolOutput::text(format!(
                "{shown} already has this content; nothing was written"
            ))
            .with_paths(vec![path]));
        };
        commit(&recorder, &confine, &path, &shown, change).await
    }
}

/// A change worked out but not yet written.
struct Change {
    existing: Option<Existing>,
    new_bytes: Vec<u8>,
    /// "wrote a.txt" / "patched a.txt (2 replacement(s))".
    head: String,
    added: usize,
    removed: usize,
}

/// Read the file and compute its new content; `None` when nothing would change.
fn prepare(
    confine: &Confinement,
    path: &Path,
    shown: &str,
    plan: Plan,
) -> Result<Option<Change>, ToolError> {
    let cap = match plan {
        Plan::Write(_) => MAX_SNAPSHOT_FILE_BYTES,
        Plan::Patch(_) => MAX_PATCH_FILE_BYTES as u64,
    };
    let existing = match Target::open_existing(confine, path, shown)? {
        Some(target) => target.read_existing(shown, cap)?,
        None => None,
    };
    let (new_bytes, head) = match plan {
        Plan::Write(content) => {
            let crlf = existing.as_ref().is_some_and(|e| uses_crlf(&e.bytes));
            let bytes = if crlf {
                to_eol(&content, true)
            } else {
                content.into_bytes()
            };
            let note = if crlf {
                " (CRLF line endings kept)"
            } else {
                ""
            };
            (bytes, format!("wrote {shown}{note}"))
        }
        Plan::Patch(targets) => {
            let Some(existing) = existing.as_ref() else {
                return Err(ToolError::failed(format!(
                    "{shown} does not exist, so there is nothing to patch; create it with \
                     mode=write and content"
                )));
            };
            let outcome = apply_targets(&existing.bytes, &targets, shown)?;
            (
                outcome.bytes,
                format!("patched {shown} ({})", outcome.summary),
            )
        }
    };
    let old = existing.as_ref().map(|e| e.bytes.as_slice());
    if old == Some(new_bytes.as_slice()) {
        return Ok(None);
    }
    let (added, removed) = line_delta(old.unwrap_or_default(), &new_bytes);
    Ok(Some(Change {
        existing,
        new_bytes,
        head,
        added,
        removed,
    }))
}

/// Check the mode against the arguments given for it.
fn plan(
    mode: Option<EditMode>,
    content: Option<String>,
    targets: Option<Vec<TargetArg>>,
) -> Result<Plan, ToolError> {
    let mode = match (mode, &content, &targets) {
        (Some(mode), _, _) => mode,
        (None, Some(_), Some(_)) => {
            return Err(ToolError::failed(
                "both content and targets were given; send content with mode=write to replace \
                 the whole file, or targets with mode=patch to change parts of it",
            ));
        }
        (None, None, Some(_)) => EditMode::Patch,
        (None, Some(_), None) => EditMode::Write,
        (None, None, None) => {
            return Err(ToolError::failed(
                "nothing to do: give content (mode=write, the whole new file) or targets \
                 (mode=patch, the pieces to change)",
            ));
        }
    };
    match mode {
        EditMode::Write => {
            if targets.is_some() {
                return Err(ToolError::failed(
                    "mode=write takes content, not targets; drop targets or use mode=patch",
                ));
            }
            let content = content.ok_or_else(|| {
                ToolError::failed("mode=write needs content: the whole new file (\"\" empties it)")
            })?;
            if content.len() > MAX_CONTENT_BYTES {
                return Err(ToolError::failed(format!(
                    "content is {} bytes, over the {} limit; write a large file in parts (write \
                     the first part, then append with a patch target inserting at the last row)",
                    content.len(),
                    human_bytes(MAX_CONTENT_BYTES as u64)
                )));
            }
            Ok(Plan::Write(content))
        }
        EditMode::Patch => {
            if content.is_some() {
                return Err(ToolError::failed(
                    "mode=patch takes targets, not content; drop content or use mode=write",
                ));
            }
            let targets = targets.ok_or_else(|| {
                ToolError::failed(
                    "mode=patch needs targets: [{old_string, new_string}] or [{insert_string, row}]",
                )
            })?;
            if targets.is_empty() {
                return Err(ToolError::failed(
                    "targets is empty; give at least one {old_string, new_string} or \
                     {insert_string, row}",
                ));
            }
            if targets.len() > MAX_TARGETS {
                return Err(ToolError::failed(format!(
                    "{} targets, over the limit of {MAX_TARGETS}; split the patch over several \
                     calls, or use mode=write",
                    targets.len()
                )));
            }
            Ok(Plan::Patch(targets))
        }
    }
}

/// Record the old state, write the new bytes, and describe what changed.
async fn commit(
    recorder: &Recorder,
    confine: &Confinement,
    path: &Path,
    shown: &str,
    change: Change,
) -> Result<ToolOutput, ToolError> {
    let Change {
        existing,
        new_bytes,
        head,
        added,
        removed,
    } = change;
    let (meta, old) = match existing {
        Some(e) => (Some(e.meta), Some(e.bytes)),
        None => (None, None),
    };
    // The directory is opened (and, for a new file, made: directories are not versioned)
    // before the version is recorded, so a failure here leaves no version behind; the write
    // then goes through this handle, whatever happens to the path meanwhile.
    let (file, shown_owned, confined) = (path.to_path_buf(), shown.to_string(), confine.clone());
    let create_dirs = old.is_none();
    let target =
        blocking(move || Target::open(&confined, &file, &shown_owned, create_dirs)).await?;
    let old_len = old.as_ref().map(|b| b.len() as u64);
    let action = if old.is_some() {
        FileAction::Modify
    } else {
        FileAction::Create
    };
    let version = recorder.record(path, shown, action, old, None).await?;
    let new_len = new_bytes.len() as u64;
    let shown_owned = shown.to_string();
    blocking(move || {
        target.write_atomic(&new_bytes, meta.as_ref()).map_err(|e| {
            ToolError::failed(format!(
                "{} (nothing was changed; version {version} was recorded anyway and restoring it \
                 is harmless)",
                io_error("write", &shown_owned, &e)
            ))
        })
    })
    .await?;
    let text = match old_len {
        None => format!(
            "{head}: created, {added} line(s), {}. Version {version} records that it did not \
             exist; undo with restore_file(version={version})",
            human_bytes(new_len)
        ),
        Some(old_len) => format!(
            "{head}: +{added} −{removed} line(s), {} → {}. Version {version} holds the previous \
             content; undo with restore_file(version={version})",
            human_bytes(old_len),
            human_bytes(new_len)
        ),
    };
    Ok(ToolOutput::text(text).with_paths(vec![path.to_path_buf()]))
}

/// Whether most line breaks of `bytes` are CRLF.
fn uses_crlf(bytes: &[u8]) -> bool {
    let lf = memchr::memchr_iter(b'\n', bytes).count();
    let crlf = memmem::find_iter(bytes, b"\r\n").count();
    crlf > 0 && crlf * 2 >= lf
}

/// `text` with every line break as `\r\n` (crlf) or `\n`.
fn to_eol(text: &str, crlf: bool) -> Vec<u8> {
    let lf = text.replace("\r\n", "\n");
    if crlf {
        lf.replace('\n', "\r\n").into_bytes()
    } else {
        lf.into_bytes()
    }
}

/// The patched bytes and what the patch did ("2 replacement(s), 1 insertion(s)").
struct PatchOutcome {
    bytes: Vec<u8>,
    summary: String,
}

/// Apply every target in order to a copy of `original`; the first failure fails them all.
fn apply_targets(
    original: &[u8],
    targets: &[TargetArg],
    shown: &str,
) -> Result<PatchOutcome, ToolError> {
    let crlf = uses_crlf(original);
    let mut buf = original.to_vec();
    let (mut replaced, mut inserted) = (0usize, 0usize);
    for (i, target) in targets.iter().enumerate() {
        let fail = |why: String| {
            let after = if i > 0 {
                " (line numbers count after the earlier targets)"
            } else {
                ""
            };
            ToolError::failed(format!(
                "targets[{i}]: {why}{after}. No target was applied; {shown} is unchanged"
            ))
        };
        for (name, value) in [
            ("old_string", &target.old_string),
            ("new_string", &target.new_string),
            ("insert_string", &target.insert_string),
        ] {
            if let Some(v) = value
                && v.len() > MAX_TARGET_STRING_BYTES
            {
                return Err(fail(format!(
                    "{name} is {} bytes, over the {} limit; use mode=write for changes this large",
                    v.len(),
                    human_bytes(MAX_TARGET_STRING_BYTES as u64)
                )));
            }
        }
        let inserting = target.insert_string.is_some() || target.row.is_some();
        let replacing = target.old_string.is_some() || target.new_string.is_some();
        match (replacing, inserting) {
            (true, true) => {
                return Err(fail(
                    "it mixes old_string/new_string with insert_string/row; put the replacement \
                     and the insertion in separate targets"
                        .into(),
                ));
            }
            (false, false) => {
                return Err(fail(
                    "it has neither old_string/new_string (replace) nor insert_string/row (insert)"
                        .into(),
                ));
            }
            (true, false) => {
                let (Some(old), Some(new)) = (&target.old_string, &target.new_string) else {
                    return Err(fail(if target.old_string.is_none() {
                        "new_string needs old_string: the exact text it replaces (to add text \
                         without replacing any, use insert_string with row)"
                            .into()
                    } else {
                        "new_string is missing; give the replacement (\"\" deletes old_string)"
                            .into()
                    }));
                };
                if old.is_empty() {
                    return Err(fail(
                        "old_string is empty; give the exact text to replace, or insert with \
                         insert_string and row"
                            .into(),
                    ));
                }
                if old == new {
                    return Err(fail(
                        "old_string and new_string are identical, so nothing would change".into(),
                    ));
                }
                let all = target.replace_all.unwrap_or(false);
                let (next, n) = replace(&buf, old, new, all, crlf).map_err(&fail)?;
                buf = next;
                replaced += n;
            }
            (false, true) => {
                if target.replace_all.is_some() {
                    return Err(fail(
                        "replace_all applies to old_string, not to an insertion; drop it".into(),
                    ));
                }
                let Some(text) = target.insert_string.as_deref().filter(|t| !t.is_empty()) else {
                    return Err(fail(
                        "insert_string is missing or empty; give the lines to insert (\"\\n\" \
                         inserts one blank line)"
                            .into(),
                    ));
                };
                let Some(row) = target.row else {
                    return Err(fail(
                        "row is missing; give the 1-based line to insert before (the number of \
                         lines + 1 appends)"
                            .into(),
                    ));
                };
                buf = insert_at_row(&buf, text, row, crlf).map_err(&fail)?;
                inserted += 1;
            }
        }
        if buf.len() > MAX_PATCH_FILE_BYTES {
            return Err(fail(format!(
                "the patched file would be {} bytes, over the {} limit",
                buf.len(),
                human_bytes(MAX_PATCH_FILE_BYTES as u64)
            )));
        }
    }
    let mut parts = Vec::new();
    if replaced > 0 {
        parts.push(format!("{replaced} replacement(s)"));
    }
    if inserted > 0 {
        parts.push(format!("{inserted} insertion(s)"));
    }
    if crlf {
        parts.push("CRLF line endings kept".into());
    }
    Ok(PatchOutcome {
        bytes: buf,
        summary: parts.join(", "),
    })
}

/// Replace `old` in `buf`: once (it must occur once) or everywhere. In a CRLF file the model's
/// `\n` means the file's `\r\n`; the text as sent is tried too, for a file with mixed endings.
fn replace(
    buf: &[u8],
    old: &str,
    new: &str,
    all: bool,
    crlf: bool,
) -> Result<(Vec<u8>, usize), String> {
    let converted = (to_eol(old, crlf), to_eol(new, crlf));
    let literal = (old.as_bytes().to_vec(), new.as_bytes().to_vec());
    let mut chosen = None;
    for (needle, replacement) in [converted, literal] {
        let hits: Vec<usize> = memmem::find_iter(buf, &needle).collect();
        if !hits.is_empty() {
            chosen = Some((needle, replacement, hits));
            break;
        }
    }
    let Some((needle, replacement, hits)) = chosen else {
        return Err(missing_message(buf, old));
    };
    if hits.len() > 1 && !all {
        let lines = line_numbers(buf, &hits);
        let mut listed: Vec<String> = lines
            .iter()
            .take(MAX_LISTED_MATCHES)
            .map(usize::to_string)
            .collect();
        if lines.len() > MAX_LISTED_MATCHES {
            listed.push(format!("and {} more", lines.len() - MAX_LISTED_MATCHES));
        }
        return Err(format!(
            "old_string matches {} places, starting at lines {}; add neighbouring lines to \
             old_string so it matches exactly one, or set replace_all=true to change every one",
            hits.len(),
            listed.join(", ")
        ));
    }
    // The size after replacing, computed before allocating: a hostile replace_all (a 1 MiB
    // new_string for every byte of a 2 MB file) must be refused, not abort the process.
    let grown = hits
        .len()
        .checked_mul(replacement.len().saturating_sub(needle.len()))
        .and_then(|growth| growth.checked_add(buf.len()));
    if grown.is_none_or(|size| size > MAX_PATCH_FILE_BYTES) {
        return Err(format!(
            "replacing every match would make the file larger than {}",
            human_bytes(MAX_PATCH_FILE_BYTES as u64)
        ));
    }
    let mut out = Vec::with_capacity(grown.unwrap_or(buf.len()));
    let mut at = 0;
    for &hit in &hits {
        out.extend_from_slice(&buf[at..hit]);
        out.extend_from_slice(&replacement);
        at = hit + needle.len();
        if out.len() > MAX_PATCH_FILE_BYTES {
            return Err(format!(
                "replacing every match would make the file larger than {}",
                human_bytes(MAX_PATCH_FILE_BYTES as u64)
            ));
        }
    }
    out.extend_from_slice(&buf[at..]);
    Ok((out, hits.len()))
}

/// Insert `text` as whole lines before 1-based `row`; `row` = lines + 1 appends. The file's
/// final-newline state is kept: appending to a file without one adds the break before the new
/// lines, not after them.
fn insert_at_row(buf: &[u8], text: &str, row: u64, crlf: bool) -> Result<Vec<u8>, String> {
    let eol: &[u8] = if crlf { b"\r\n" } else { b"\n" };
    let text = text
        .strip_suffix("\r\n")
        .or_else(|| text.strip_suffix('\n'))
        .unwrap_or(text);
    let text = to_eol(text, crlf);
    let breaks: Vec<usize> = memchr::memchr_iter(b'\n', buf).collect();
    let ends_open = !buf.is_empty() && buf.last() != Some(&b'\n');
    let lines = breaks.len() + usize::from(ends_open);
    let last = lines as u64 + 1;
    if row == 0 || row > last {
        return Err(format!(
            "row {row} is outside the file, which has {lines} line(s); use 1 to {last} ({last} \
             appends at the end)"
        ));
    }
    let row = row as usize;
    let mut out = Vec::with_capacity(buf.len() + text.len() + 2 * eol.len());
    if row == lines + 1 && ends_open {
        out.extend_from_slice(buf);
        out.extend_from_slice(eol);
        out.extend_from_slice(&text);
        return Ok(out);
    }
    let at = if row == 1 { 0 } else { breaks[row - 2] + 1 };
    out.extend_from_slice(&buf[..at]);
    out.extend_from_slice(&text);
    out.extend_from_slice(eol);
    out.extend_from_slice(&buf[at..]);
    Ok(out)
}

/// 1-based line numbers of sorted byte offsets.
fn line_numbers(buf: &[u8], offsets: &[usize]) -> Vec<usize> {
    let mut line = 1;
    let mut at = 0;
    offsets
        .iter()
        .map(|&off| {
            line += memchr::memchr_iter(b'\n', &buf[at..off]).count();
            at = off;
            line
        })
        .collect()
}

/// Why `old` is not in `buf` and where the model may have meant: the same text apart from
/// whitespace, a line equal to old_string's first line (and where the two part), and the
/// lines most similar to that first line.
fn missing_message(buf: &[u8], old: &str) -> String {
    let text = String::from_utf8_lossy(buf);
    // A final line break ends the last line; it does not start another.
    let body = text.strip_suffix('\n').unwrap_or(&text);
    let lines: Vec<&str> = if text.is_empty() {
        Vec::new()
    } else {
        body.split('\n')
            .map(|l| l.strip_suffix('\r').unwrap_or(l))
            .collect()
    };
    let needle = old.replace("\r\n", "\n");
    let needle_lines: Vec<&str> = needle.split('\n').collect();
    let mut found: Vec<String> = Vec::new();
    let mut seen: Vec<usize> = Vec::new();

    for (first, last) in whitespace_insensitive(&lines, &needle) {
        seen.push(first);
        let span = if first == last {
            format!("line {first}")
        } else {
            format!("lines {first}-{last}")
        };
        found.push(format!(
            "{span} match if whitespace is ignored (indentation or line breaks differ):\n{}",
            snippet(&lines, first, (last + 1 - first).min(4))
        ));
    }

    if let Some(k0) = needle_lines.iter().position(|l| !l.trim().is_empty()) {
        let first_line = needle_lines[k0].trim();
        let same_first = lines
            .iter()
            .enumerate()
            .filter(|(_, l)| l.trim() == first_line)
            .map(|(i, _)| i)
            .filter(|i| !seen.contains(&(i + 1)))
            .take(3)
            .collect::<Vec<_>>();
        for i in same_first {
            seen.push(i + 1);
            let mut k = 1;
            while k0 + k < needle_lines.len()
                && i + k < lines.len()
                && lines[i + k] == needle_lines[k0 + k]
            {
                k += 1;
            }
            let detail = if k0 + k < needle_lines.len() {
                let file_line = lines.get(i + k).copied().unwrap_or("(end of file)");
                format!(
                    "old_string's line {} differs from the file's line {}: the file has {:?}, \
                     old_string has {:?}",
                    k0 + k + 1,
                    i + k + 1,
                    clip(file_line),
                    clip(needle_lines[k0 + k])
                )
            } else {
                "the following lines agree, so the difference is in indentation or trailing \
                 spaces, or at the start or end of old_string"
                    .to_string()
            };
            found.push(format!(
                "line {} holds old_string's first line; {detail}:\n{}",
                i + 1,
                snippet(&lines, i + 1, (k + 1).min(4))
            ));
        }
        if found.len() < 3 {
            for (score, i) in most_similar(&lines, first_line, &seen, 3 - found.len()) {
                found.push(format!(
                    "line {} is the most similar to old_string's first line ({}% alike):\n{}",
                    i + 1,
                    (score * 100.0).round(),
                    snippet(&lines, i + 1, 1)
                ));
            }
        }
    }

    let mut message = format!(
        "old_string was not found ({} line(s) searched, exact match including whitespace)",
        lines.len()
    );
    if std::str::from_utf8(buf).is_err() && old.contains('\u{FFFD}') {
        message.push_str(
            "; the file is not UTF-8 and old_string contains U+FFFD, which stands for bytes that \
             could not be decoded and never matches: use an old_string made of the readable parts",
        );
    }
    if found.is_empty() {
        message.push_str(
            "; no line resembles it. Read the file again (read_files) and copy the text exactly",
        );
    } else {
        message.push_str(". Nearest candidates:\n- ");
        message.push_str(&found.join("\n- "));
        message.push_str(
            "\nCopy old_string exactly from the file (read_files with offset at those lines)",
        );
    }
    message
}

/// Where `needle` occurs if every (ASCII) whitespace byte is ignored: (first, last) 1-based
/// lines.
fn whitespace_insensitive(lines: &[&str], needle: &str) -> Vec<(usize, usize)> {
    let squashed_needle: Vec<u8> = needle
        .bytes()
        .filter(|b| !b.is_ascii_whitespace())
        .collect();
    if squashed_needle.len() < 3 {
        return Vec::new();
    }
    let mut squashed: Vec<u8> = Vec::new();
    let mut starts = Vec::with_capacity(lines.len());
    for line in lines {
        starts.push(squashed.len());
        squashed.extend(line.bytes().filter(|b| !b.is_ascii_whitespace()));
    }
    // Empty lines share a start with the next line; the later line is the one holding the text.
    let line_of = |offset: usize| starts.partition_point(|&s| s <= offset);
    memmem::find_iter(&squashed, &squashed_needle)
        .take(3)
        .map(|at| (line_of(at), line_of(at + squashed_needle.len() - 1)))
        .collect()
}

/// The `n` lines most like `target` (Dice coefficient over byte pairs, case-insensitive), at
/// least half alike, not already reported: (score, 0-based index).
fn most_similar(lines: &[&str], target: &str, seen: &[usize], n: usize) -> Vec<(f64, usize)> {
    let want: Vec<u16> = bigrams(target).collect();
    if want.is_empty() {
        return Vec::new();
    }
    // Pairs of the target still unmatched; each line borrows from it and gives back.
    let mut left = vec![0u16; 1 << 16];
    for &pair in &want {
        left[usize::from(pair)] = left[usize::from(pair)].saturating_add(1);
    }
    let len = target.len();
    let mut taken: Vec<u16> = Vec::new();
    let mut scored: Vec<(f64, usize)> = Vec::new();
    for (i, line) in lines.iter().take(MAX_SCORED_LINES).enumerate() {
        let line = line.trim();
        // Lines of very different length cannot be half alike.
        if line.len() * 3 < len || line.len() > len * 3 || seen.contains(&(i + 1)) {
            continue;
        }
        taken.clear();
        let mut total = 0usize;
        for pair in bigrams(line) {
            total += 1;
            let slot = &mut left[usize::from(pair)];
            if *slot > 0 {
                *slot -= 1;
                taken.push(pair);
            }
        }
        for &pair in &taken {
            left[usize::from(pair)] += 1;
        }
        let score = 2.0 * taken.len() as f64 / (want.len() + total) as f64;
        if score >= 0.5 {
            scored.push((score, i));
        }
    }
    scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    scored.truncate(n);
    scored
}

/// Adjacent byte pairs of `s`, ASCII letters lower-cased.
fn bigrams(s: &str) -> impl Iterator<Item = u16> + '_ {
    s.as_bytes()
        .windows(2)
        .map(|w| u16::from_le_bytes([w[0].to_ascii_lowercase(), w[1].to_ascii_lowercase()]))
}

/// Up to `count` file lines from 1-based `first`, numbered like read_files.
fn snippet(lines: &[&str], first: usize, count: usize) -> String {
    lines
        .iter()
        .enumerate()
        .skip(first.saturating_sub(1))
        .take(count)
        .map(|(i, l)| format!("    {:>5}| {}", i + 1, clip(l)))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A line cut to SNIPPET_CHARS characters.
fn clip(line: &str) -> String {
    match line.char_indices().nth(SNIPPET_CHARS) {
        Some((at, _)) => format!("{}…", &line[..at]),
        None => line.to_string(),
    }
}

#[cfg(test)]
#[path = "edit_file_tests.rs"]
mod edit_file_tests;
