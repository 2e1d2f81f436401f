//! `find_files`: list directories, match names with globs and search contents with a regex,
//! several queries per call, on ripgrep's own crates (`ignore` walks and honours .gitignore,
//! `globset` matches names, `grep-searcher` + `grep-regex` search and skip binary files).
//!
//! Decisions the seed leaves open:
//! - Hidden files are shown (`.github/`, `.env.example` are often what is looked for); `.git`
//!   is never walked, nor are the denied places (`.tooldispatch`, the data directory).
//! - .gitignore, .ignore and .git/info/exclude apply even outside a git repository, and those of
//!   the directories above `dir` apply too (as with ripgrep and git); the user's global
//!   gitignore does not (results depend only on the project).
//! - Symlinks are never followed: they are listed (with their target when it lies inside the
//!   work directory) and never searched, so nothing outside the work directory is read.
//! - Credential files (`.env`, keys) are not searched: their lines would reach the model
//!   without the confirmation read_files asks for. The result says how many were skipped.
//! - A glob without `/` matches the file name at any depth (`*.rs`); with `/` it matches the
//!   path below `dir` (`src/**/mod.rs`).
//! - Every result is capped (entries, matches, matches per file, bytes, entries walked) and a
//!   capped result ends with a note on how to narrow the query. One query's error never fails
//!   the others; the call fails only when every query did.

use std::io;
use std::path::{Path, PathBuf};

use async_trait::async_trait;
use dispatch_engine::sensitive::is_sensitive_path;
use dispatch_engine::{Access, Effect, Subject, ToolContext, ToolError, ToolOutput, ToolSpec};
use globset::{GlobBuilder, GlobMatcher};
use grep_matcher::{LineTerminator, Matcher};
use grep_regex::{RegexMatcher, RegexMatcherBuilder};
use grep_searcher::{BinaryDetection, Searcher, SearcherBuilder, Sink, SinkContext, SinkMatch};
use ignore::WalkBuilder;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use super::confine::Confinement;
use super::read::{human_size, thousands};
use crate::BuiltinTool;

/// Most queries in one call.
pub const MAX_QUERIES: usize = 16;
/// Most entries one list or glob query returns.
pub const MAX_ENTRIES: usize = 500;
/// Most matching lines one search query returns.
pub const MAX_MATCHES: usize = 200;
/// Most matching lines shown from one file.
pub const MAX_MATCHES_PER_FILE: usize = 20;
/// Most bytes of results one call returns, shared by its queries.
pub const MAX_OUTPUT_BYTES: usize = 16_000;
/// Most entries one query walks before it stops.
pub const MAX_WALKED: usize = 500_000;
/// A shown line is cut to this many characters around its match.
const MAX_SHOWN_LINE_CHARS: usize = 240;
/// Memory a search may use for one line, and for the compiled regex.
const SEARCH_HEAP_LIMIT: usize = 64 << 20;
const REGEX_SIZE_LIMIT: usize = 16 << 20;

/// Find files and search their contents.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FindFilesArgs {
    /// list: the entries of dir; glob: paths whose name matches pattern; search: lines
    /// matching the regex pattern. Omitted: search when a query has pattern and file_pattern,
    /// glob when it has only pattern, list otherwise.
    mode: Option<Mode>,
    /// 1 to 16 queries, answered in order.
    #[schemars(length(min = 1, max = 16))]
    queries: Vec<Query>,
}

#[derive(Deserialize, JsonSchema, Clone, Copy, PartialEq, Eq, Debug)]
#[serde(rename_all = "lowercase")]
enum Mode {
    List,
    Glob,
    Search,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Query {
    /// Directory to look in, relative to the work directory. Default ".".
    #[schemars(length(min = 1, max = 4096))]
    dir: Option<String>,
    /// glob: a name pattern with a literal part, e.g. `*.rs`, `test_*.py`, `src/**/mod.rs`.
    /// search: a regex (Rust syntax; `(?i)` for case-insensitive).
    #[schemars(length(min = 1, max = 1000))]
    pattern: Option<String>,
    /// Only files whose name (or, with `/`, path below dir) matches this glob. Default `**/*`.
    #[schemars(length(min = 1, max = 1000))]
    file_pattern: Option<String>,
    /// Descend into subdirectories. Default: false for list, true for glob and search.
    recursive: Option<bool>,
}

pub struct FindFiles;

#[async_trait]
impl BuiltinTool for FindFiles {
    const NAME: &'static str = "find_files";
    const DESCRIPTION: &'static str = "List directories, find files by name, or search file contents; 1-16 queries \
        per call. mode=list: the entries of dir (recursive=true for the whole tree). \
        mode=glob: files and directories whose name matches pattern (`*.rs`; with `/` \
        the path below dir is matched, `**` crosses directories). mode=search: lines \
        matching the regex pattern, as `path:line: text` with a line of context, in \
        files matching file_pattern (e.g. `*.py`). .gitignore is respected, binary \
        files are skipped, results are capped (500 entries, 200 matches) with a note \
        to narrow the query. Result paths are relative to the work directory; read \
        files with read_files.";
    type Args = FindFilesArgs;

    fn declare(&self, spec: ToolSpec) -> ToolSpec {
        spec.concurrent().read_only().effect(Effect::Observes)
    }

    fn subject(&self, args: &Value, workdir: &std::path::Path) -> Option<Subject> {
        use crate::subjects::{nested, resolved};
        Some(Subject::new(Access::Reads).paths(resolved(workdir, nested(args, "queries", "dir"))))
    }

    async fn run(&self, cx: ToolContext, args: FindFilesArgs) -> Result<ToolOutput, ToolError> {
        if args.queries.is_empty() || args.queries.len() > MAX_QUERIES {
            return Err(ToolError::failed(format!(
                "queries must hold 1 to {MAX_QUERIES} entries, got {}; split the batch",
                args.queries.len()
            )));
        }
        let confinement = Confinement::for_call(&cx)?;
        // Each denied place by its name and by where it leads now (`.tooldispatch -> cfgdir`
        // keeps `cfgdir` out of listings and searches too).
        let denied: Vec<PathBuf> = confinement
            .denied_places()
            .into_iter()
            .flat_map(|d| [d.named, d.resolved])
            .collect();
        let cancel = cx.cancel.clone();
        let answers = tokio::task::spawn_blocking(move || {
            let cancelled = move || cancel.is_cancelled();
            let budget = (MAX_OUTPUT_BYTES / args.queries.len()).max(1000);
            args.queries
                .iter()
                .enumerate()
                .map(|(i, q)| {
                    let place = Place {
                        confinement: &confinement,
                        denied: &denied,
                        cancelled: &cancelled,
                        budget,
                    };
                    answer(i + 1, args.mode, q, &place)
                })
                .collect::<Vec<_>>()
        })
        .await
        .map_err(|e| ToolError::failed(format!("find_files stopped unexpectedly: {e}")))?;
        let all_failed = answers.iter().all(Result::is_err);
        let numbered = answers.len() > 1;
        let mut text = String::new();
        for (i, answer) in answers.into_iter().enumerate() {
            let prefix = if numbered {
                format!("[{}] ", i + 1)
            } else {
                String::new()
            };
            match answer {
                Ok(block) => text.push_str(&format!("{prefix}{block}")),
                Err(message) if all_failed => text.push_str(&format!("{prefix}{message}\n")),
                Err(message) => text.push_str(&format!("{prefix}error: {message}\n")),
            }
            if numbered {
                text.push('\n');
            }
        }
        if all_failed {
            return Err(ToolError::failed(text.trim_end()));
        }
        Ok(ToolOutput::text(text.trim_end()))
    }
}

/// What every query of a call shares.
struct Place<'a> {
    confinement: &'a Confinement,
    denied: &'a [PathBuf],
    cancelled: &'a dyn Fn() -> bool,
    budget: usize,
}

/// A query checked and compiled.
struct Plan {
    mode: Mode,
    dir: PathBuf,
    recursive: bool,
    name_glob: Option<NameGlob>,
    file_glob: Option<NameGlob>,
    regex: Option<RegexMatcher>,
    describe: String,
}

/// A glob matched against the file name, or against the path below dir when it has a `/`.
struct NameGlob {
    matcher: GlobMatcher,
    whole_path: bool,
}

impl NameGlob {
    fn is_match(&self, relative: &Path) -> bool {
        if self.whole_path {
            self.matcher.is_match(relative)
        } else {
            relative
                .file_name()
                .is_some_and(|name| self.matcher.is_match(name))
        }
    }
}

fn answer(number: usize, mode: Option<Mode>, q: &Query, place: &Place) -> Result<String, String> {
    let plan = plan(mode, q, place.confinement).map_err(|e| format!("query {number}: {e}"))?;
    let mut out = Output::new(place.budget);
    let walked = walk(&plan, place, &mut out);
    Ok(out.finish(&plan, walked))
}

fn plan(mode: Option<Mode>, q: &Query, confinement: &Confinement) -> Result<Plan, String> {
    let mode = mode.unwrap_or(match (&q.pattern, &q.file_pattern) {
        (Some(_), Some(_)) => Mode::Search,
        (Some(_), None) => Mode::Glob,
        _ => Mode::List,
    });
    let raw_dir = q.dir.as_deref().unwrap_or(".");
    let dir = confinement.resolve(raw_dir).map_err(|e| e.to_string())?;
    match std::fs::metadata(&dir) {
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(format!(
                "dir {raw_dir:?} does not exist; list its parent with mode=\"list\" to see what is there"
            ));
        }
        Err(e) => return Err(format!("dir {raw_dir:?} cannot be read: {e}")),
    }
    let recursive = q.recursive.unwrap_or(mode != Mode::List);
    let file_glob = match q.file_pattern.as_deref() {
        None | Some("**/*") | Some("**") | Some("*") => None,
        Some(p) => Some(compile_glob(p, "file_pattern", false)?),
    };
    let shown_dir = confinement.display(&dir).into_owned();
    let (name_glob, regex, describe) = match mode {
        Mode::List => {
            if q.pattern.is_some() {
                return Err(
                    "mode list takes no pattern; use mode \"glob\" to match names or \
                            \"search\" to match contents"
                        .into(),
                );
            }
            (None, None, format!("list {shown_dir}"))
        }
        Mode::Glob => {
            let Some(p) = q.pattern.as_deref() else {
                return Err("mode glob needs a pattern, e.g. \"*.rs\"".into());
            };
            let glob = compile_glob(p, "pattern", true)?;
            (Some(glob), None, format!("glob {p:?} in {shown_dir}"))
        }
        Mode::Search => {
            let Some(p) = q.pattern.as_deref() else {
                return Err("mode search needs a pattern (the regex to look for)".into());
            };
            let regex = RegexMatcherBuilder::new()
                .line_terminator(Some(b'\n'))
                .crlf(true)
                .size_limit(REGEX_SIZE_LIMIT)
                .dfa_size_limit(REGEX_SIZE_LIMIT)
                .build(p)
                .map_err(|e| {
                    format!(
                        "pattern is not a valid regex: {e}\n(Rust regex syntax; escape special \
                         characters such as `(` or `.` with `\\`)"
                    )
                })?;
            (None, Some(regex), format!("search /{p}/ in {shown_dir}"))
        }
    };
    let mut describe = describe;
    if let Some(fp) = &q.file_pattern
        && file_glob.is_some()
    {
        describe.push_str(&format!(", files {fp:?}"));
    }
    if recursive && mode == Mode::List {
        describe.push_str(" (recursive)");
    }
    if !recursive && mode != Mode::List {
        describe.push_str(" (not recursive)");
    }
    Ok(Plan {
        mode,
        dir,
        recursive,
        name_glob,
        file_glob,
        regex,
        describe,
    })
}

/// Check and compile a glob from the model.
fn compile_glob(pattern: &str, field: &str, needs_literal: bool) -> Result<NameGlob, String> {
    if pattern.starts_with('/') {
        return Err(format!(
            "{field} {pattern:?} starts with `/`; globs match below dir, so drop it (set dir to choose where to look)"
        ));
    }
    if pattern.starts_with('~') {
        return Err(format!(
            "{field} {pattern:?} starts with `~`, which is not expanded; globs match below dir"
        ));
    }
    if pattern.split(['/', '\\']).any(|part| part == "..") {
        return Err(format!(
            "{field} {pattern:?} contains `..`; globs only match below dir, so set dir instead"
        ));
    }
    let matcher = GlobBuilder::new(pattern)
        .literal_separator(true)
        .backslash_escape(true)
        .build()
        .map_err(|e| format!("{field} {pattern:?} is not a valid glob: {e}"))?
        .compile_matcher();
    if needs_literal && !has_literal(pattern) {
        return Err(format!(
            "{field} {pattern:?} has no literal part; give part of the name (e.g. \"*.rs\" or \
             \"*test*\"), or use mode \"list\" with recursive=true to see everything"
        ));
    }
    Ok(NameGlob {
        matcher,
        whole_path: pattern.contains('/'),
    })
}

/// A glob has a literal when some character outside `[...]` classes is not a metacharacter.
fn has_literal(pattern: &str) -> bool {
    let mut in_class = false;
    let mut escaped = false;
    for c in pattern.chars() {
        if escaped {
            return true;
        }
        match c {
            '\\' => escaped = true,
            '[' if !in_class => in_class = true,
            ']' if in_class => in_class = false,
            _ if in_class => {}
            '*' | '?' | '{' | '}' | ',' | '/' | '!' => {}
            _ => return true,
        }
    }
    false
}

/// Results of one query as they are found, within its byte budget.
struct Output {
    lines: Vec<String>,
    bytes: usize,
    budget: usize,
    entries: usize,
    matches: usize,
    files_matched: usize,
    binary_skipped: usize,
    secret_skipped: usize,
    unreadable: usize,
    /// The first thing that could not be read, and why.
    first_unreadable: Option<String>,
    /// Why the query stopped early, for the note.
    capped: Option<String>,
    last_group_file: Option<PathBuf>,
}

impl Output {
    fn new(budget: usize) -> Self {
        Output {
            lines: Vec::new(),
            bytes: 0,
            budget,
            entries: 0,
            matches: 0,
            files_matched: 0,
            binary_skipped: 0,
            secret_skipped: 0,
            unreadable: 0,
            first_unreadable: None,
            capped: None,
            last_group_file: None,
        }
    }

    fn unreadable(&mut self, why: String) {
        self.unreadable += 1;
        self.first_unreadable.get_or_insert(why);
    }

    /// Add a line; false when the byte budget is spent (and the query should stop).
    fn push(&mut self, line: String) -> bool {
        if self.bytes + line.len() + 1 > self.budget {
            self.capped.get_or_insert_with(|| {
                format!("the {}-byte output budget", thousands(self.budget as u64))
            });
            return false;
        }
        self.bytes += line.len() + 1;
        self.lines.push(line);
        true
    }

    fn finish(self, plan: &Plan, walked: usize) -> String {
        let count = match plan.mode {
            Mode::List | Mode::Glob if self.entries == 0 => "nothing found".to_string(),
            Mode::List | Mode::Glob => count_of(self.entries, "entry", "entries"),
            Mode::Search if self.matches == 0 => "no matches".to_string(),
            Mode::Search => format!(
                "{} in {}",
                count_of(self.matches, "matching line", "matching lines"),
                count_of(self.files_matched, "file", "files")
            ),
        };
        let at_least = if self.capped.is_some() && self.entries + self.matches > 0 {
            "at least "
        } else {
            ""
        };
        let mut text = format!("{}: {at_least}{count}\n", plan.describe);
        for line in &self.lines {
            text.push_str(line);
            text.push('\n');
        }
        let mut notes = Vec::new();
        if self.binary_skipped > 0 {
            notes.push(format!(
                "{} skipped",
                count_of(self.binary_skipped, "binary file", "binary files")
            ));
        }
        if self.secret_skipped > 0 {
            notes.push(format!(
                "{} not searched (read one with read_files, which asks the user)",
                count_of(self.secret_skipped, "credential file", "credential files")
            ));
        }
        if self.unreadable > 0 {
            let example = self
                .first_unreadable
                .map(|e| format!(", e.g. {e}"))
                .unwrap_or_default();
            notes.push(format!(
                "{} could not be read{example}",
                count_of(self.unreadable, "entry", "entries")
            ));
        }
        if !notes.is_empty() {
            text.push_str(&format!("({})\n", notes.join("; ")));
        }
        if let Some(why) = self.capped {
            let how = match plan.mode {
                Mode::Search => "a more specific pattern, a file_pattern, or a deeper dir",
                Mode::Glob => "a more specific pattern or a deeper dir",
                Mode::List => "a deeper dir, a file_pattern, or recursive=false",
            };
            text.push_str(&format!(
                "[capped at {why} after walking {} entries: narrow your query — {how}]\n",
                thousands(walked as u64)
            ));
        }
        text
    }
}

/// `1 entry`, `2,000 entries`.
fn count_of(n: usize, one: &str, many: &str) -> String {
    format!(
        "{} {}",
        thousands(n as u64),
        if n == 1 { one } else { many }
    )
}

/// Walk the plan's directory and fill `out`; returns how many entries were walked.
fn walk(plan: &Plan, place: &Place, out: &mut Output) -> usize {
    let root = place.confinement.root().to_path_buf();
    let denied = place.denied.to_vec();
    let mut builder = WalkBuilder::new(&plan.dir);
    builder
        .hidden(false)
        .parents(true)
        .ignore(true)
        .git_ignore(true)
        .git_exclude(true)
        .git_global(false)
        .require_git(false)
        .follow_links(false)
        .sort_by_file_name(|a, b| a.cmp(b))
        .filter_entry(move |e| {
            e.file_name() != ".git" && !denied.iter().any(|d| e.path().starts_with(d))
        });
    if !plan.recursive {
        builder.max_depth(Some(1));
    }
    let mut searcher = SearcherBuilder::new()
        .line_number(true)
        .line_terminator(LineTerminator::crlf())
        .before_context(1)
        .after_context(1)
        .binary_detection(BinaryDetection::quit(0))
        .heap_limit(Some(SEARCH_HEAP_LIMIT))
        .build();
    let mut walked = 0usize;
    for entry in builder.build() {
        if out.capped.is_some() {
            break;
        }
        walked += 1;
        if walked > MAX_WALKED {
            out.capped = Some(format!("{} walked entries", thousands(MAX_WALKED as u64)));
            break;
        }
        if walked.is_multiple_of(256) && (place.cancelled)() {
            out.capped = Some("cancellation".into());
            break;
        }
        let entry = match entry {
            Ok(e) => e,
            Err(e) => {
                out.unreadable(e.to_string());
                continue;
            }
        };
        let Some(file_type) = entry.file_type() else {
            continue;
        };
        // The directory itself is not one of its entries (a file given as dir is).
        if entry.depth() == 0 && file_type.is_dir() {
            continue;
        }
        let path = entry.path();
        let shown = path.strip_prefix(&root).unwrap_or(path);
        let below_dir = path.strip_prefix(&plan.dir).unwrap_or(path);
        let below_dir = if below_dir.as_os_str().is_empty() {
            Path::new(path.file_name().unwrap_or_default())
        } else {
            below_dir
        };
        match plan.mode {
            Mode::List | Mode::Glob => {
                let is_dir = file_type.is_dir();
                if let Some(glob) = &plan.name_glob
                    && !glob.is_match(below_dir)
                {
                    continue;
                }
                if let Some(glob) = &plan.file_glob
                    && (is_dir || !glob.is_match(below_dir))
                {
                    continue;
                }
                if out.entries >= MAX_ENTRIES {
                    out.capped = Some(format!("{MAX_ENTRIES} entries"));
                    break;
                }
                let line = entry_line(shown, path, &file_type, &entry, place);
                if !out.push(line) {
                    break;
                }
                out.entries += 1;
            }
            Mode::Search => {
                if !file_type.is_file() {
                    continue; // directories, and symlinks (never followed)
                }
                if let Some(glob) = &plan.file_glob
                    && !glob.is_match(below_dir)
                {
                    continue;
                }
                // Judged below the work directory: where the project lives is not a secret.
                if is_sensitive_path(&shown.to_string_lossy()) {
                    out.secret_skipped += 1;
                    continue;
                }
                let Some(regex) = &plan.regex else { continue };
                search_file(&mut searcher, regex, path, shown, out);
            }
        }
    }
    walked
}

/// One list/glob line: `dir/`, `file  (size)`, `link -> target`.
fn entry_line(
    shown: &Path,
    path: &Path,
    file_type: &std::fs::FileType,
    entry: &ignore::DirEntry,
    place: &Place,
) -> String {
    let shown = shown.to_string_lossy();
    if file_type.is_dir() {
        return format!("{shown}/");
    }
    if file_type.is_symlink() {
        let target = place
            .confinement
            .resolve(&path.to_string_lossy())
            .ok()
            .filter(|t| !place.denied.iter().any(|d| t.starts_with(d)))
            .map(|t| place.confinement.display(&t).into_owned());
        return match target {
            Some(t) => format!("{shown} -> {t}"),
            None => format!("{shown} -> (a link leading outside the work directory, or broken)"),
        };
    }
    match entry.metadata() {
        Ok(m) if file_type.is_file() => format!("{shown}  ({})", human_size(m.len())),
        _ => shown.into_owned(),
    }
}

/// Search one file, adding its matches (and their context) to `out`.
fn search_file(
    searcher: &mut Searcher,
    regex: &RegexMatcher,
    path: &Path,
    shown: &Path,
    out: &mut Output,
) {
    let mut sink = FileSink {
        regex,
        lines: Vec::new(),
        matches: 0,
        more_in_file: false,
        binary: false,
        room: MAX_MATCHES.saturating_sub(out.matches),
        query_full: false,
    };
    if let Err(e) = searcher.search_path(regex, path, &mut sink) {
        out.unreadable(format!("{}: {e}", shown.display()));
        return;
    }
    if sink.binary {
        out.binary_skipped += 1;
        return;
    }
    if sink.matches == 0 {
        return;
    }
    out.files_matched += 1;
    let shown = shown.to_string_lossy();
    if out.last_group_file.is_some() {
        out.push("--".into());
    }
    out.last_group_file = Some(path.to_path_buf());
    for line in sink.lines {
        let text = match line {
            Shown::Match(n, text) => format!("{shown}:{n}: {text}"),
            Shown::Context(n, text) => format!("{shown}-{n}- {text}"),
            Shown::Break => "--".to_string(),
        };
        if !out.push(text) {
            return;
        }
    }
    out.matches += sink.matches;
    if sink.more_in_file
        && !out.push(format!(
            "{shown}: … more matches in this file (search it alone, or read it with read_files)"
        ))
    {
        return;
    }
    if sink.query_full {
        out.capped = Some(format!("{MAX_MATCHES} matching lines"));
    }
}

enum Shown {
    Match(u64, String),
    Context(u64, String),
    Break,
}

struct FileSink<'a> {
    regex: &'a RegexMatcher,
    lines: Vec<Shown>,
    matches: usize,
    more_in_file: bool,
    binary: bool,
    /// Matches this query may still show.
    room: usize,
    query_full: bool,
}

impl Sink for FileSink<'_> {
    type Error = io::Error;

    fn matched(&mut self, _: &Searcher, m: &SinkMatch<'_>) -> Result<bool, io::Error> {
        if self.matches >= self.room {
            self.query_full = true;
            return Ok(false);
        }
        if self.matches >= MAX_MATCHES_PER_FILE {
            self.more_in_file = true;
            return Ok(false);
        }
        self.matches += 1;
        let n = m.line_number().unwrap_or(0);
        self.lines
            .push(Shown::Match(n, clip_line(m.bytes(), Some(self.regex))));
        Ok(true)
    }

    fn context(&mut self, _: &Searcher, c: &SinkContext<'_>) -> Result<bool, io::Error> {
        let n = c.line_number().unwrap_or(0);
        self.lines
            .push(Shown::Context(n, clip_line(c.bytes(), None)));
        Ok(true)
    }

    fn context_break(&mut self, _: &Searcher) -> Result<bool, io::Error> {
        self.lines.push(Shown::Break);
        Ok(true)
    }

    fn binary_data(&mut self, _: &Searcher, _: u64) -> Result<bool, io::Error> {
        self.binary = true;
        Ok(false)
    }
}

/// A line for display: no terminator, valid UTF-8, at most [`MAX_SHOWN_LINE_CHARS`] around
/// the match.
fn clip_line(bytes: &[u8], regex: Option<&RegexMatcher>) -> String {
    let bytes = bytes.strip_suffix(b"\n").unwrap_or(bytes);
    let bytes = bytes.strip_suffix(b"\r").unwrap_or(bytes);
    let text = String::from_utf8_lossy(bytes);
    let chars = text.chars().count();
    if chars <= MAX_SHOWN_LINE_CHARS {
        return text.into_owned();
    }
    // Centre the window on the match (a byte offset; map it to a char index).
    let match_at = regex
        .and_then(|r| r.find(bytes).ok().flatten())
        .map(|m| String::from_utf8_lossy(&bytes[..m.start()]).chars().count())
        .unwrap_or(0);
    let start = match_at
        .saturating_sub(MAX_SHOWN_LINE_CHARS / 3)
        .min(chars - MAX_SHOWN_LINE_CHARS);
    let window: String = text
        .chars()
        .skip(start)
        .take(MAX_SHOWN_LINE_CHARS)
        .collect();
    let before = if start > 0 { "…" } else { "" };
    let after = if start + MAX_SHOWN_LINE_CHARS < chars {
        "…"
    } else {
        ""
    };
    format!(
        "{before}{window}{after} [line of {} chars]",
        thousands(chars as u64)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literal_parts_are_found_outside_classes() {
        for p in ["*.rs", "test_*", "src/**/mod.rs", "a", "\\*", "*[ab]x"] {
            assert!(has_literal(p), "{p}");
        }
        for p in ["*", "**", "**/*", "?", "*/*", "[a-z]*", "{*,?}", "!*"] {
            assert!(!has_literal(p), "{p}");
        }
    }

    #[test]
    fn long_lines_are_cut_around_the_match() {
        let mut line = "a".repeat(1000);
        line.push_str("NEEDLE");
        line.push_str(&"b".repeat(1000));
        let regex = RegexMatcher::new("NEEDLE").unwrap();
        let shown = clip_line(line.as_bytes(), Some(&regex));
        assert!(shown.contains("NEEDLE"), "{shown}");
        assert!(shown.starts_with('…') && shown.contains("… [line of 2,006 chars]"));
        assert_eq!(clip_line(b"short\r\n", None), "short");
    }
}

#[cfg(test)]
mod harness_tests {
    use dispatch_engine::{SlotResult, Status};
    use pretty_assertions::assert_eq;
    use serde_json::{Value, json};

    use crate::test_support::*;

    async fn find(h: &Harness, run: &str, args: Value) -> SlotResult {
        let out = h
            .round("s", run, vec![run_tool("c1", "find_files", args)])
            .await;
        out.results[0].clone()
    }

    fn put(h: &Harness, rel: &str, content: &[u8]) {
        let path = h.root().join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
    }

    /// A small project: sources, an ignored build dir, hidden files, a binary, a secret.
    async fn project() -> Harness {
        let h = Harness::new();
        put(&h, ".gitignore", b"target/\n*.log\n");
        put(
            &h,
            "src/main.rs",
            b"mod util;\n\nfn main() {\n    util::greet();\n}\n",
        );
        put(
            &h,
            "src/util.rs",
            b"pub fn greet() {\n    println!(\"hello\");\n}\n",
        );
        put(&h, "src/deep/nested/mod.rs", b"// fn main is not here\n");
        put(&h, "target/debug/out.rs", b"fn main() {}\n");
        put(&h, "run.log", b"fn main in a log\n");
        put(&h, ".github/workflows/ci.yml", b"name: ci\n");
        put(&h, ".git/config", b"[core] fn main\n");
        put(&h, ".tooldispatch/rules", b"allow fn main\n");
        put(&h, "blob.bin", b"fn main\0\0\0binary");
        put(&h, ".env", b"TOKEN=fn main secret\n");
        put(&h, "README.md", b"# demo\n");
        h.select("s", "find_files").await;
        h
    }

    #[tokio::test]
    async fn list_shows_hidden_files_but_not_ignored_git_or_denied_places() {
        let h = project().await;
        let r = find(&h, "r1", json!({"queries": [{}]})).await;
        assert_eq!(r.status, Status::Ok, "{}", r.content);
        assert_eq!(
            r.content,
            "[find_files] list .: 6 entries\n.env  (21 bytes)\n.github/\n.gitignore  (14 bytes)\n\
             README.md  (7 bytes)\nblob.bin  (16 bytes)\nsrc/"
        );
    }

    #[tokio::test]
    async fn recursive_list_and_globs_respect_gitignore() {
        let h = project().await;
        let r = find(
            &h,
            "r1",
            json!({"queries": [
                {"dir": "src", "recursive": true},
                {"pattern": "*.rs"},
                {"pattern": "src/**/mod.rs"},
                {"dir": "src", "pattern": "*.rs", "recursive": false}
            ]}),
        )
        .await;
        assert_eq!(r.status, Status::Ok, "{}", r.content);
        assert_eq!(
            r.content,
            "[find_files] [1] list src (recursive): 5 entries\nsrc/deep/\nsrc/deep/nested/\n\
             src/deep/nested/mod.rs  (23 bytes)\nsrc/main.rs  (44 bytes)\nsrc/util.rs  (42 bytes)\n\n\
             [2] glob \"*.rs\" in .: 3 entries\nsrc/deep/nested/mod.rs  (23 bytes)\nsrc/main.rs  (44 bytes)\n\
             src/util.rs  (42 bytes)\n\n\
             [3] glob \"src/**/mod.rs\" in .: 1 entry\nsrc/deep/nested/mod.rs  (23 bytes)\n\n\
             [4] glob \"*.rs\" in src (not recursive): 2 entries\nsrc/main.rs  (44 bytes)\nsrc/util.rs  (42 bytes)"
        );
    }

    #[tokio::test]
    async fn search_shows_path_line_and_context_and_skips_binary_ignored_and_secret_files() {
        let h = project().await;
        let r = find(
            &h,
            "r1",
            json!({"mode": "search", "queries": [{"pattern": "fn (main|greet)"}]}),
        )
        .await;
        assert_eq!(r.status, Status::Ok, "{}", r.content);
        assert_eq!(
            r.content,
            "[find_files] search /fn (main|greet)/ in .: 3 matching lines in 3 files\n\
             src/deep/nested/mod.rs:1: // fn main is not here\n\
             --\n\
             src/main.rs-2- \n\
             src/main.rs:3: fn main() {\n\
             src/main.rs-4-     util::greet();\n\
             --\n\
             src/util.rs:1: pub fn greet() {\n\
             src/util.rs-2-     println!(\"hello\");\n\
             (1 binary file skipped; 1 credential file not searched (read one with read_files, which asks the user))"
        );
        // pattern + file_pattern without a mode is a search.
        let r = find(
            &h,
            "r2",
            json!({"queries": [{"pattern": "greet", "file_pattern": "util.rs"}]}),
        )
        .await;
        assert!(
            r.content.starts_with("[find_files] search /greet/ in ., files \"util.rs\": 1 matching line in 1 file\nsrc/util.rs:1: pub fn greet() {"),
            "{}",
            r.content
        );
    }

    #[tokio::test]
    async fn searches_are_capped_with_a_note_to_narrow_the_query() {
        let h = project().await;
        for i in 0..30 {
            let body: String = (0..30).map(|j| format!("hit {i}-{j}\n")).collect();
            put(&h, &format!("many/f{i:02}.txt"), body.as_bytes());
        }
        let r = find(
            &h,
            "r1",
            json!({"mode": "search", "queries": [{"dir": "many", "pattern": "hit"}]}),
        )
        .await;
        assert_eq!(r.status, Status::Ok);
        assert!(
            r.content
                .contains("many/f00.txt: … more matches in this file"),
            "{}",
            r.content
        );
        assert!(
            r.content.trim_end().ends_with(
                "narrow your query — a more specific pattern, a file_pattern, or a deeper dir]"
            ),
            "{}",
            r.content
        );
        assert!(
            r.content.len() <= super::MAX_OUTPUT_BYTES + 500,
            "{}",
            r.content.len()
        );
        // A listing over the entry cap.
        for i in 0..600 {
            put(&h, &format!("wide/e{i:03}"), b"");
        }
        let r = find(&h, "r2", json!({"queries": [{"dir": "wide"}]})).await;
        assert!(r.content.contains("[capped at"), "{}", &r.content[..200]);
        assert!(r.content.contains("narrow your query"));
    }

    #[tokio::test]
    async fn links_are_listed_but_never_followed_out() {
        let h = project().await;
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret.txt"), "fn main OUTSIDE").unwrap();
        std::os::unix::fs::symlink(outside.path(), h.root().join("src/out")).unwrap();
        std::os::unix::fs::symlink(
            outside.path().join("secret.txt"),
            h.root().join("src/out.txt"),
        )
        .unwrap();
        std::os::unix::fs::symlink("util.rs", h.root().join("src/alias.rs")).unwrap();
        std::os::unix::fs::symlink("loop2", h.root().join("src/loop1")).unwrap();
        std::os::unix::fs::symlink("loop1", h.root().join("src/loop2")).unwrap();
        let r = find(
            &h,
            "r1",
            json!({"queries": [
                {"dir": "src"},
                {"dir": "src", "pattern": "OUTSIDE", "file_pattern": "*"}
            ]}),
        )
        .await;
        assert_eq!(r.status, Status::Ok, "{}", r.content);
        assert!(
            r.content.contains("src/alias.rs -> src/util.rs"),
            "{}",
            r.content
        );
        assert!(
            r.content
                .contains("src/out -> (a link leading outside the work directory, or broken)")
        );
        assert!(r.content.contains("src/loop1 -> (a link leading outside"));
        assert!(
            r.content
                .contains("[2] search /OUTSIDE/ in src: no matches"),
            "{}",
            r.content
        );
        assert!(!r.content.contains("fn main OUTSIDE"));
        let r = find(&h, "r2", json!({"queries": [{"dir": "src/out"}]})).await;
        assert_eq!(r.status, Status::Failed);
        assert!(
            r.content.contains("outside the work directory"),
            "{}",
            r.content
        );
    }

    #[tokio::test]
    async fn bad_queries_fail_alone_with_the_reason() {
        let h = project().await;
        let r = find(
            &h,
            "r1",
            json!({"queries": [
                {"pattern": "fn", "dir": "src"},
                {"pattern": "**"},
                {"pattern": "README*"}
            ]}),
        )
        .await;
        assert_eq!(r.status, Status::Ok, "{}", r.content);
        assert_eq!(
            r.content,
            "[find_files] [1] glob \"fn\" in src: nothing found\n\n\
             [2] error: query 2: pattern \"**\" has no literal part; give part of the name (e.g. \"*.rs\" or \"*test*\"), or use mode \"list\" with recursive=true to see everything\n\n\
             [3] glob \"README*\" in .: 1 entry\nREADME.md  (7 bytes)"
        );
        let r = find(
            &h,
            "r2",
            json!({"mode": "search", "queries": [{"pattern": "fn ("}]}),
        )
        .await;
        assert_eq!(r.status, Status::Failed);
        assert!(
            r.content.contains("query 1: pattern is not a valid regex")
                && r.content.contains("unclosed group"),
            "{}",
            r.content
        );
    }
}

/// Benchmarks, run by hand (numbers are printed, not asserted):
/// `cargo test -p dispatch-tools --release --lib bench_ -- --ignored --nocapture --test-threads=1`
#[cfg(test)]
mod bench {
    use std::path::Path;
    use std::time::{Duration, Instant};

    use dispatch_engine::Status;
    use serde_json::json;

    use crate::test_support::*;

    fn median(mut samples: Vec<Duration>) -> Duration {
        samples.sort();
        samples[samples.len() / 2]
    }

    /// 50,000 files of ~1 KiB in 500 directories; the needle is in 10 of them.
    fn tree(root: &Path) {
        for d in 0..500 {
            let dir = root.join(format!("pkg{d:03}/src"));
            std::fs::create_dir_all(&dir).unwrap();
            for f in 0..100 {
                let n = d * 100 + f;
                let mut body = String::with_capacity(1100);
                for l in 0..24 {
                    body.push_str(&format!("let value_{l} = compute({n}, {l}); // filler\n"));
                }
                if n % 5000 == 17 {
                    body.push_str("const NEEDLE_7f3a: u32 = 1;\n");
                }
                std::fs::write(dir.join(format!("m{f:02}.rs")), body).unwrap();
            }
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "benchmark: run by hand with --release"]
    async fn bench_search_50k_files_against_rg() {
        let h = Harness::new();
        h.select("s", "find_files").await;
        let root = h.root();
        let started = Instant::now();
        tree(&root);
        eprintln!("tree of 50,000 files written in {:?}", started.elapsed());
        let reps = 5;
        let mut ours = Vec::new();
        for rep in 0..=reps {
            let t = Instant::now();
            let out = h
                .round(
                    "s",
                    &format!("b{rep}"),
                    vec![run_tool(
                        "c1",
                        "find_files",
                        json!({"mode": "search", "queries": [{"pattern": "NEEDLE_[0-9a-f]+"}]}),
                    )],
                )
                .await;
            let took = t.elapsed();
            let r = &out.results[0];
            assert_eq!(r.status, Status::Ok, "{}", r.content);
            assert!(
                r.content.contains("10 matching lines in 10 files"),
                "{}",
                r.content
            );
            if rep > 0 {
                ours.push(took); // the first pass warms the page cache
            }
        }
        let rg = |threads: Option<&str>| {
            let mut samples = Vec::new();
            for rep in 0..=reps {
                let mut cmd = std::process::Command::new("rg");
                cmd.arg("-n")
                    .arg("-C1")
                    .arg("NEEDLE_[0-9a-f]+")
                    .arg(".")
                    .current_dir(&root);
                if let Some(j) = threads {
                    cmd.arg("-j").arg(j);
                }
                let t = Instant::now();
                let out = cmd.output().expect("rg is installed for the benchmark");
                let took = t.elapsed();
                assert!(out.status.success());
                if rep > 0 {
                    samples.push(took);
                }
            }
            median(samples)
        };
        let ours = median(ours);
        let rg_default = rg(None);
        let rg_one = rg(Some("1"));
        eprintln!(
            "find_files search, 50,000 files: {ours:?} (median of {reps}); rg: {rg_default:?}; \
             rg -j1: {rg_one:?}; ratio find_files/rg = {:.2}, find_files/rg -j1 = {:.2}",
            ours.as_secs_f64() / rg_default.as_secs_f64(),
            ours.as_secs_f64() / rg_one.as_secs_f64()
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "benchmark: run by hand with --release"]
    async fn bench_read_100_files() {
        let h = Harness::new();
        h.select("s", "read_files").await;
        let root = h.root();
        let mut names = Vec::new();
        for i in 0..100 {
            let body: String = (0..200)
                .map(|l| format!("line {l} of file {i}: some ordinary source text\n"))
                .collect();
            let name = format!("f{i:03}.txt");
            std::fs::write(root.join(&name), body).unwrap();
            names.push(name);
        }
        let reps = 10;
        let mut ours = Vec::new();
        for rep in 0..=reps {
            let calls: Vec<_> = names
                .chunks(64)
                .enumerate()
                .map(|(i, chunk)| {
                    let files: Vec<_> = chunk.iter().map(|n| json!({"path": n})).collect();
                    run_tool(&format!("c{i}"), "read_files", json!({"files": files}))
                })
                .collect();
            let t = Instant::now();
            let out = h.round("s", &format!("b{rep}"), calls).await;
            let took = t.elapsed();
            assert!(out.results.iter().all(|r| r.status == Status::Ok));
            if rep > 0 {
                ours.push(took);
            }
        }
        let mut plain = Vec::new();
        for _ in 0..reps {
            let t = Instant::now();
            let total: usize = names
                .iter()
                .map(|n| std::fs::read_to_string(root.join(n)).unwrap().len())
                .sum();
            assert!(total > 0);
            plain.push(t.elapsed());
        }
        let ours = median(ours);
        let plain = median(plain);
        eprintln!(
            "read_files of 100 files (200 lines each, two calls in one round): {ours:?} \
             (median of {reps}), {:?} per file; plain std::fs::read_to_string of the same \
             files: {plain:?}",
            ours / 100
        );
    }
}
