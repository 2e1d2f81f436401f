//! `file_history`: what the file tools changed, and how a recorded version differs from the
//! file on disk.
//!
//! It only looks, so it runs concurrently and never asks; but what it shows changes whenever
//! a file changes, so its results die at the next mutating call (Effect::Observes). Times are
//! shown and read as UTC: the local time zone would need a time-zone database dependency for a
//! convenience, and one frame for both directions is what keeps `from`/`to` unambiguous.
//! A version holds a file as it was *before* the recorded change, so `read` shows what changed
//! since then. Credential files are only diffed when named in path/paths, so the confirm gate
//! (which sees only those) has asked first.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use dispatch_engine::sensitive::is_sensitive_path;
use dispatch_engine::{Access, Effect, Subject, ToolContext, ToolError, ToolOutput, ToolSpec};
use dispatch_store::{FileHistory, FileVersion, VersionQuery};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use super::confine::Confinement;
use super::write::{blocking, human_bytes, read_existing, version_bytes};
use crate::{BuiltinTool, Stores};

/// Default number of versions listed (or files read).
pub const DEFAULT_LIMIT: usize = 3;
/// Most versions listed (or files read) in one call.
pub const MAX_LIMIT: usize = 24;
/// Versions scanned when listing by directory (or everything in the work directory).
const SCAN_VERSIONS: usize = 10_000;
/// Largest side of a diff; past it only sizes and hashes are compared.
const MAX_DIFF_INPUT: usize = 4 * 1024 * 1024;
/// Most diff text shown per file.
const MAX_DIFF_CHARS: usize = 32 * 1024;
/// Longest task id accepted.
const MAX_TASK_ID_CHARS: usize = 200;

/// List recorded versions, or diff one against the file on disk.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileHistoryArgs {
    /// list: versions, newest first. read: a version diffed against the file on disk now. Omitted: read when paths or version is given, else list.
    #[serde(default)]
    mode: Option<HistoryMode>,
    /// One file, or (list) a directory for every file under it.
    #[serde(default)]
    path: Option<String>,
    /// Several files (at most 24).
    #[serde(default)]
    paths: Option<Vec<String>>,
    /// Only changes of one task: "current" (this run) or a run id.
    #[serde(default)]
    task_id: Option<String>,
    /// Changed at or after this time, UTC: `YYYY-MM-DD[ HH:MM[:SS]]`.
    #[serde(default)]
    from: Option<String>,
    /// Changed at or before this time, UTC: `YYYY-MM-DD[ HH:MM[:SS]]` (a date alone is the whole day).
    #[serde(default)]
    to: Option<String>,
    /// Versions to list (default 3, at most 24).
    #[serde(default)]
    #[schemars(range(min = 1, max = 24))]
    limit: Option<u64>,
    /// read: this version instead of the newest of each file.
    #[serde(default)]
    version: Option<u64>,
}

#[derive(Deserialize, JsonSchema, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
enum HistoryMode {
    List,
    Read,
}

pub struct FileHistoryTool {
    /// The versions the file tools recorded.
    history: Option<Arc<dyn FileHistory>>,
}

impl FileHistoryTool {
    pub fn new(stores: &Stores) -> Self {
        FileHistoryTool {
            history: stores.file_history.clone(),
        }
    }
}

/// The filters every mode shares, checked.
struct Filters {
    run: Option<String>,
    session: Option<String>,
    from_ms: Option<u64>,
    to_ms: Option<u64>,
    limit: usize,
}

#[async_trait]
impl BuiltinTool for FileHistoryTool {
    const NAME: &'static str = "file_history";
    const DESCRIPTION: &'static str = "Versions the file tools recorded before each change. mode=list: id, time (UTC), \
        action, tool, size and file, newest first, filtered by path/paths, task_id \
        (\"current\" = this run), from/to (UTC `YYYY-MM-DD[ HH:MM[:SS]]`), limit (default \
        3, max 24). mode=read: a unified diff of a version (the newest of each file in \
        path/paths, or `version`) against the file on disk now. Undo with restore_file.";
    type Args = FileHistoryArgs;

    fn declare(&self, spec: ToolSpec) -> ToolSpec {
        spec.read_only().concurrent().effect(Effect::Observes)
    }

    fn subject(&self, args: &Value, workdir: &Path) -> Option<Subject> {
        use crate::subjects::{resolved, texts};
        let named = texts(args, "path").into_iter().chain(texts(args, "paths"));
        Some(Subject::new(Access::Reads).paths(resolved(workdir, named)))
    }

    async fn run(&self, cx: ToolContext, args: FileHistoryArgs) -> Result<ToolOutput, ToolError> {
        let history = self.history.clone().ok_or_else(|| {
            ToolError::failed(
                "this dispatcher keeps no file history, so there are no versions to show",
            )
        })?;
        let confine = Confinement::for_call(&cx)?;
        let mut raw_paths: Vec<&str> = Vec::new();
        if let Some(p) = &args.path {
            raw_paths.push(p);
        }
        if let Some(ps) = &args.paths {
            if ps.is_empty() {
                return Err(ToolError::failed(
                    "paths is empty; omit it, or name the files whose history you want",
                ));
            }
            raw_paths.extend(ps.iter().map(String::as_str));
        }
        if raw_paths.len() > MAX_LIMIT {
            return Err(ToolError::failed(format!(
                "{} paths given, over the limit of {MAX_LIMIT}; ask about fewer files at once",
                raw_paths.len()
            )));
        }
        let paths = raw_paths
            .iter()
            .map(|p| confine.resolve(p))
            .collect::<Result<Vec<_>, _>>()?;
        let filters = filters(&cx, &args)?;
        let mode = args
            .mode
            .unwrap_or(if args.paths.is_some() || args.version.is_some() {
                HistoryMode::Read
            } else {
                HistoryMode::List
            });
        match mode {
            HistoryMode::List => {
                if args.version.is_some() {
                    return Err(ToolError::failed(
                        "version is for mode=read (diff that version against the file); drop it \
                         to list",
                    ));
                }
                list(history.as_ref(), &confine, &paths, &filters).await
            }
            HistoryMode::Read => {
                read(
                    history.as_ref(),
                    &confine,
                    cx.data_dir.as_deref(),
                    &paths,
                    args.version,
                    &filters,
                )
                .await
            }
        }
    }
}

fn filters(cx: &ToolContext, args: &FileHistoryArgs) -> Result<Filters, ToolError> {
    let (run, session) = match args.task_id.as_deref().map(str::trim) {
        None => (None, None),
        Some("") => {
            return Err(ToolError::failed(
                "task_id is empty; use \"current\" for this run or a run id, or omit it",
            ));
        }
        Some(t) if t.chars().count() > MAX_TASK_ID_CHARS => {
            return Err(ToolError::failed(format!(
                "task_id is longer than {MAX_TASK_ID_CHARS} characters; run ids are short"
            )));
        }
        Some("current") => (Some(cx.run_id.to_string()), Some(cx.session_id.to_string())),
        Some(t) => (Some(t.to_string()), Some(cx.session_id.to_string())),
    };
    let from_ms = args
        .from
        .as_deref()
        .map(|t| parse_time("from", t, false))
        .transpose()?;
    let to_ms = args
        .to
        .as_deref()
        .map(|t| parse_time("to", t, true))
        .transpose()?;
    if let (Some(f), Some(t)) = (from_ms, to_ms)
        && f > t
    {
        return Err(ToolError::failed(format!(
            "from ({}) is after to ({}); swap them",
            args.from.as_deref().unwrap_or_default(),
            args.to.as_deref().unwrap_or_default()
        )));
    }
    let limit = match args.limit {
        None => DEFAULT_LIMIT,
        Some(n) if n >= 1 && n <= MAX_LIMIT as u64 => n as usize,
        Some(n) => {
            return Err(ToolError::failed(format!(
                "limit {n} is outside 1..={MAX_LIMIT}"
            )));
        }
    };
    Ok(Filters {
        run,
        session,
        from_ms,
        to_ms,
        limit,
    })
}

fn query_error(e: dispatch_store::StoreError) -> ToolError {
    ToolError::failed(format!("cannot read the file history: {e}"))
}

/// Versions matching the filters under `paths` (files exactly, directories by prefix; none =
/// the whole work directory), newest first, at most `limit + 1` (to tell whether there are
/// more).
async fn matching(
    history: &dyn FileHistory,
    confine: &Confinement,
    paths: &[PathBuf],
    f: &Filters,
) -> Result<Vec<FileVersion>, ToolError> {
    let dirs: Vec<&PathBuf> = paths.iter().filter(|p| p.is_dir()).collect();
    let mut query = VersionQuery {
        paths: Vec::new(),
        session: f.session.clone(),
        run: f.run.clone(),
        from_ms: f.from_ms,
        to_ms: f.to_ms,
        limit: f.limit + 1,
    };
    if !paths.is_empty() && dirs.is_empty() {
        query.paths = paths
            .iter()
            .map(|p| p.to_string_lossy().into_owned())
            .collect();
        return history.versions(&query).await.map_err(query_error);
    }
    // By prefix: scan the newest versions and keep those under a directory asked about (or
    // under the work directory, which also hides other work directories' history).
    query.limit = SCAN_VERSIONS;
    let roots: Vec<&Path> = if paths.is_empty() {
        vec![confine.root()]
    } else {
        paths.iter().map(PathBuf::as_path).collect()
    };
    let mut found = history.versions(&query).await.map_err(query_error)?;
    found.retain(|v| roots.iter().any(|r| Path::new(&v.path).starts_with(r)));
    found.truncate(f.limit + 1);
    Ok(found)
}

async fn list(
    history: &dyn FileHistory,
    confine: &Confinement,
    paths: &[PathBuf],
    f: &Filters,
) -> Result<ToolOutput, ToolError> {
    let mut found = matching(history, confine, paths, f).await?;
    let more = found.len() > f.limit;
    found.truncate(f.limit);
    let scope = if paths.is_empty() {
        "the work directory".to_string()
    } else {
        paths
            .iter()
            .map(|p| confine.display(p).into_owned())
            .collect::<Vec<_>>()
            .join(", ")
    };
    if found.is_empty() {
        return Ok(ToolOutput::text(format!(
            "no recorded versions of {scope}{} (versions are recorded when edit_file, \
             remove_file or restore_file change a file)",
            describe_filters(f)
        ))
        .with_paths(paths.to_vec()));
    }
    let mut text = format!(
        "{} version(s) of {scope}{}, newest first (time UTC; size = the file before the change):\n",
        found.len(),
        describe_filters(f)
    );
    for v in &found {
        let size = if v.existed() {
            human_bytes(v.size)
        } else {
            "absent".to_string()
        };
        text.push_str(&format!(
            "#{}  {}  {:<7}  {:<12}  {:>10}  {}  task {}\n",
            v.id,
            format_ms(v.changed_ms),
            v.action.as_str(),
            v.tool,
            size,
            confine.display(Path::new(&v.path)),
            v.run
        ));
    }
    if more {
        text.push_str(&format!(
            "(more versions exist: raise limit (max {MAX_LIMIT}) or narrow with from/to)\n"
        ));
    }
    text.push_str(
        "A version is the file before that change: file_history(mode=read, version=N) diffs it \
         against the file now; restore_file(version=N) puts it back.",
    );
    Ok(ToolOutput::text(text).with_paths(paths.to_vec()))
}

fn describe_filters(f: &Filters) -> String {
    let mut parts = Vec::new();
    if let Some(run) = &f.run {
        parts.push(format!("task {run}"));
    }
    if let Some(t) = f.from_ms {
        parts.push(format!("from {}", format_ms(t)));
    }
    if let Some(t) = f.to_ms {
        parts.push(format!("to {}", format_ms(t)));
    }
    if parts.is_empty() {
        String::new()
    } else {
        format!(" ({})", parts.join(", "))
    }
}

async fn read(
    history: &dyn FileHistory,
    confine: &Confinement,
    data_dir: Option<&Path>,
    paths: &[PathBuf],
    version: Option<u64>,
    f: &Filters,
) -> Result<ToolOutput, ToolError> {
    let mut picked: Vec<(PathBuf, Option<FileVersion>)> = Vec::new();
    if let Some(id) = version {
        let v = history
            .version(id)
            .await
            .map_err(query_error)?
            .ok_or_else(|| {
                ToolError::failed(format!(
                    "there is no version {id}; file_history(mode=list) shows the recorded versions"
                ))
            })?;
        // The stored path is resolved again, as restore_file does: a directory on it may
        // have become a symlink out of the work directory since the version was recorded.
        let path = PathBuf::from(&v.path);
        let resolved = confine.resolve(&v.path).map_err(|e| {
            ToolError::failed(format!(
                "version {id} is of {}, which cannot be read here: {e}",
                v.path
            ))
        })?;
        if resolved != path {
            return Err(ToolError::failed(format!(
                "version {id} is of {}, which now resolves to {} (a symlink or another work \
                 directory); file_history will not diff through it",
                v.path,
                resolved.display()
            )));
        }
        if !paths.is_empty() && !paths.contains(&path) {
            return Err(ToolError::failed(format!(
                "version {id} is of {}, which is not among the paths given; drop paths or name \
                 that file",
                confine.display(&path)
            )));
        }
        if is_sensitive_path(&v.path) && !paths.contains(&path) {
            return Err(ToolError::failed(format!(
                "version {id} is of {}, a credential file; name it in path so the user is asked \
                 before its content is shown",
                confine.display(&path)
            )));
        }
        picked.push((path, Some(v)));
    } else {
        if paths.is_empty() {
            return Err(ToolError::failed(
                "mode=read needs path/paths (the newest version of each is diffed) or version; \
                 file_history(mode=list) shows what there is",
            ));
        }
        for path in paths {
            if path.is_dir() {
                return Err(ToolError::failed(format!(
                    "{} is a directory; mode=read diffs files — list its versions with \
                     mode=list and read one by version",
                    confine.display(path)
                )));
            }
            let newest = history
                .versions(&VersionQuery {
                    paths: vec![path.to_string_lossy().into_owned()],
                    session: f.session.clone(),
                    run: f.run.clone(),
                    from_ms: f.from_ms,
                    to_ms: f.to_ms,
                    limit: 1,
                })
                .await
                .map_err(query_error)?;
            picked.push((path.clone(), newest.into_iter().next()));
        }
    }

    let mut sections = Vec::with_capacity(picked.len());
    for (path, v) in picked {
        let shown = confine.display(&path).into_owned();
        let Some(v) = v else {
            sections.push(format!(
                "{shown}: no recorded versions{}",
                describe_filters(f)
            ));
            continue;
        };
        let data_dir = data_dir.map(Path::to_path_buf);
        let section =
            blocking(move || Ok(diff_section(&path, &shown, &v, data_dir.as_deref()))).await?;
        sections.push(section);
    }
    Ok(ToolOutput::text(sections.join("\n\n")).with_paths(paths.to_vec()))
}

/// One file's part of a read: the version's header and its diff against the disk.
fn diff_section(path: &Path, shown: &str, v: &FileVersion, data_dir: Option<&Path>) -> String {
    let header = format!(
        "{shown} — version {} ({}, before a {} by {}, task {})",
        v.id,
        format_ms(v.changed_ms),
        v.action.as_str(),
        v.tool,
        v.run
    );
    let old = match version_bytes(v, data_dir) {
        Ok(old) => old,
        Err(why) => return format!("{header}\ncannot show it: {why}"),
    };
    let now = match read_existing(path, shown, (MAX_DIFF_INPUT * 16) as u64) {
        Ok(now) => now.map(|e| e.bytes),
        Err(e) => return format!("{header}\ncannot read the file on disk: {e}"),
    };
    let label_old = format!("{shown} @ version {}", v.id);
    let label_new = format!("{shown} on disk now");
    match (old, now) {
        (None, None) => format!(
            "{header}\nthe file did not exist in this version and does not exist now: no \
             difference"
        ),
        (None, Some(now)) => format!(
            "{header}\nthe file did not exist in this version; it now has {} ({} line(s)). \
             restore_file(version={}) would remove it.",
            human_bytes(now.len() as u64),
            count_lines(&now),
            v.id
        ),
        (Some(old), None) => format!(
            "{header}\nthe file does not exist on disk now; the version had {} ({} line(s)). \
             restore_file(version={}) would put it back.",
            human_bytes(old.len() as u64),
            count_lines(&old),
            v.id
        ),
        (Some(old), Some(now)) if old == now => {
            format!("{header}\nthe file on disk is identical to this version")
        }
        (Some(old), Some(now)) => {
            let binary = old.contains(&0) || now.contains(&0);
            if binary || old.len() > MAX_DIFF_INPUT || now.len() > MAX_DIFF_INPUT {
                let why = if binary {
                    "binary content"
                } else {
                    "too large to diff"
                };
                return format!(
                    "{header}\n{why}: the version has {}, the file on disk {} (they differ)",
                    human_bytes(old.len() as u64),
                    human_bytes(now.len() as u64)
                );
            }
            let (old, now) = (String::from_utf8_lossy(&old), String::from_utf8_lossy(&now));
            let diff = similar::TextDiff::configure()
                .timeout(std::time::Duration::from_secs(2))
                .diff_lines(old.as_ref(), now.as_ref());
            let mut text = diff
                .unified_diff()
                .context_radius(3)
                .header(&label_old, &label_new)
                .to_string();
            if text.len() > MAX_DIFF_CHARS {
                let mut cut = MAX_DIFF_CHARS;
                while !text.is_char_boundary(cut) {
                    cut -= 1;
                }
                let total = text.len();
                text.truncate(cut);
                text.push_str(&format!(
                    "\n… diff cut at {} of {}; read the file with read_files for the rest",
                    human_bytes(cut as u64),
                    human_bytes(total as u64)
                ));
            }
            format!("{header}\n{}", text.trim_end())
        }
    }
}

fn count_lines(bytes: &[u8]) -> usize {
    let breaks = bytes.iter().filter(|b| **b == b'\n').count();
    breaks + usize::from(!bytes.is_empty() && bytes.last() != Some(&b'\n'))
}

/// Milliseconds since the epoch as `YYYY-MM-DD HH:MM:SS` (UTC).
pub fn format_ms(ms: u64) -> String {
    let secs = ms / 1000;
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}

/// Parse `YYYY-MM-DD[ HH:MM[:SS]]` (UTC; `T` may separate date and time) to milliseconds since
/// the epoch. With `end`, the last millisecond of what was given (a date is the whole day).
pub fn parse_time(field: &str, raw: &str, end: bool) -> Result<u64, ToolError> {
    let bad = |why: &str| {
        let shown: String = raw.chars().take(40).collect();
        ToolError::failed(format!(
            "{field} {shown:?} is not a time ({why}); use YYYY-MM-DD, YYYY-MM-DD HH:MM or \
             YYYY-MM-DD HH:MM:SS, in UTC"
        ))
    };
    let text = raw.trim();
    if text.len() > 19 || !text.is_ascii() {
        return Err(bad("too long or not plain digits"));
    }
    let (date, time) = match text.find([' ', 'T']) {
        Some(at) => (&text[..at], Some(&text[at + 1..])),
        None => (text, None),
    };
    let number = |s: &str, digits: usize, what: &str| -> Result<u64, ToolError> {
        if s.len() != digits || !s.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad(&format!("{what} must be {digits} digits")));
        }
        s.parse::<u64>().map_err(|_| bad(what))
    };
    let mut parts = date.split('-');
    let (Some(y), Some(m), Some(d), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(bad("the date must be YYYY-MM-DD"));
    };
    let (y, m, d) = (
        number(y, 4, "the year")?,
        number(m, 2, "the month")?,
        number(d, 2, "the day")?,
    );
    if y < 1970 {
        return Err(bad("years before 1970 hold no versions"));
    }
    if !(1..=12).contains(&m) {
        return Err(bad("the month must be 01 to 12"));
    }
    if d < 1 || d > days_in_month(y, m) {
        return Err(bad("that day does not exist in that month"));
    }
    let (mut hh, mut mm, mut ss, precision) = (0, 0, 0, 86_400_000u64);
    let precision = match time {
        None => precision,
        Some(t) => {
            let fields: Vec<&str> = t.split(':').collect();
            match fields.as_slice() {
                [h, mi] => {
                    hh = number(h, 2, "the hour")?;
                    mm = number(mi, 2, "the minutes")?;
                    60_000
                }
                [h, mi, s] => {
                    hh = number(h, 2, "the hour")?;
                    mm = number(mi, 2, "the minutes")?;
                    ss = number(s, 2, "the seconds")?;
                    1000
                }
                _ => return Err(bad("the time must be HH:MM or HH:MM:SS")),
            }
        }
    };
    if hh > 23 || mm > 59 || ss > 59 {
        return Err(bad("hours go to 23, minutes and seconds to 59"));
    }
    let days = days_from_civil(y as i64, m as u32, d as u32) as u64;
    let start = ((days * 86_400) + hh * 3600 + mm * 60 + ss) * 1000;
    Ok(if end { start + precision - 1 } else { start })
}

fn days_in_month(y: u64, m: u64) -> u64 {
    match m {
        2 if (y.is_multiple_of(4) && !y.is_multiple_of(100)) || y.is_multiple_of(400) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (i64::from(m) + 9) % 12;
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The date of a day count since 1970-01-01 (the inverse of `days_from_civil`).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_round_trip_and_bounds_are_inclusive() {
        let t = parse_time("from", "2024-02-29 13:05:09", false).unwrap();
        assert_eq!(format_ms(t), "2024-02-29 13:05:09");
        assert_eq!(parse_time("from", "1970-01-01", false).unwrap(), 0);
        assert_eq!(
            parse_time("to", "1970-01-01", true).unwrap(),
            86_400_000 - 1
        );
        assert_eq!(
            parse_time("to", "1970-01-01 00:01", true).unwrap(),
            120_000 - 1
        );
        assert_eq!(
            parse_time("from", "2000-03-01T00:00", false).unwrap(),
            951_868_800_000
        );
    }

    #[test]
    fn bad_times_say_what_is_expected() {
        for raw in [
            "yesterday",
            "2024-13-01",
            "2023-02-29",
            "2024-01-01 24:00",
            "2024-01-01 12",
            "2024-1-1",
            "1969-12-31",
            "2024-01-01 12:00:00:00",
            "２０２４-01-01",
            "",
        ] {
            let err = parse_time("from", raw, false).unwrap_err().to_string();
            assert!(err.contains("YYYY-MM-DD HH:MM"), "{raw}: {err}");
        }
    }
}
