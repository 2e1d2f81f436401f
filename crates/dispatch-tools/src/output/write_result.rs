//! `write_result`: keep the run's deliverable as a file the user (or a later run) can open,
//! under the session's data directory rather than the work directory, so saving it never asks
//! and never touches the user's files. Its `content` is dropped from the stored history once
//! saved: the file is the record, the transcript keeps only its size.

use std::fs::{self, DirBuilder, OpenOptions, Permissions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use async_trait::async_trait;
use dispatch_engine::shaping::{safe_component, session_dir};
use dispatch_engine::{Effect, ToolContext, ToolError, ToolOutput, ToolSpec};
use schemars::JsonSchema;
use serde::Deserialize;

use crate::BuiltinTool;
use crate::files::write::human_bytes;

/// The largest deliverable accepted, in bytes.
pub const RESULT_CAP: usize = 8 * 1024 * 1024;
/// The most characters of the title that go into the file name.
const SLUG_MAX: usize = 60;
/// The session subdirectory that holds deliverables (a sibling of the spilled `results`).
pub const DELIVERABLES_DIR: &str = "deliverables";

/// Save the deliverable.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WriteResultArgs {
    /// The whole deliverable, at most 8 MiB.
    content: String,
    /// markdown (default), html, json (must be valid JSON) or text.
    #[serde(default)]
    format: Option<Format>,
    /// A short title; it names the file.
    #[serde(default)]
    title: Option<String>,
}

#[derive(Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
enum Format {
    Markdown,
    Html,
    Json,
    Text,
}

impl Format {
    fn extension(self) -> &'static str {
        match self {
            Format::Markdown => "md",
            Format::Html => "html",
            Format::Json => "json",
            Format::Text => "txt",
        }
    }
    fn name(self) -> &'static str {
        match self {
            Format::Markdown => "markdown",
            Format::Html => "html",
            Format::Json => "json",
            Format::Text => "text",
        }
    }
}

pub struct WriteResult;

#[async_trait]
impl BuiltinTool for WriteResult {
    const NAME: &'static str = "write_result";
    const DESCRIPTION: &'static str = "Save the task's final deliverable (report, page, data) as a file in this session's results and get its path back. Call it once the answer is complete. format: markdown (default), html, json (must parse) or text; at most 8 MiB. Writes nothing in the work directory (use edit_file for project files).";
    type Args = WriteResultArgs;

    fn declare(&self, spec: ToolSpec) -> ToolSpec {
        spec
            // Writing under the session's own data directory changes none of the user's files.
            .read_only()
            .effect(Effect::Pure)
            // Every call saves a new file: a repeated call must save again, not be answered
            // from the dedupe table.
            .no_dedupe()
            .elide_args(&["content"])
    }

    async fn run(&self, cx: ToolContext, args: WriteResultArgs) -> Result<ToolOutput, ToolError> {
        let format = args.format.unwrap_or(Format::Markdown);
        let Some(data_dir) = cx.data_dir.clone() else {
            return Err(ToolError::failed(
                "this dispatcher has no data directory, so results cannot be saved; give the deliverable in your final answer instead",
            ));
        };
        if args.content.trim().is_empty() {
            return Err(ToolError::failed(
                "content is empty; pass the whole deliverable as content",
            ));
        }
        if args.content.len() > RESULT_CAP {
            return Err(ToolError::failed(format!(
                "content is {}, over the {} limit; shorten it or split it into several results with distinct titles",
                human_bytes(args.content.len() as u64),
                human_bytes(RESULT_CAP as u64)
            )));
        }
        if format == Format::Json
            && let Err(e) = serde_json::from_str::<serde::de::IgnoredAny>(&args.content)
        {
            return Err(ToolError::failed(format!(
                "content is not valid JSON: {e} (line {}, column {}); fix it, or save it with format=\"text\"",
                e.line(),
                e.column()
            )));
        }
        let dir = session_dir(&data_dir, &cx.session_id).join(DELIVERABLES_DIR);
        let slug = slug(args.title.as_deref().unwrap_or(""));
        let prefix = safe_component(&cx.run_id);
        let content = args.content;
        let ext = format.extension();
        let path = tokio::task::spawn_blocking(move || {
            save(&dir, &prefix, &slug, ext, content.as_bytes())
        })
        .await
        .map_err(|e| ToolError::failed(format!("saving the result stopped unexpectedly: {e}")))?
        .map_err(|e| {
            ToolError::failed(format!(
                "could not save the result under the session's data directory: {e}; give the deliverable in your final answer instead"
            ))
        })?;
        let size = fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
        Ok(ToolOutput::text(format!(
            "saved the {} result to {} ({})",
            format.name(),
            path.display(),
            human_bytes(size)
        )))
    }
}

/// The title as a file-name part: ASCII letters and digits, runs of anything else one `-`,
/// lower case, at most [`SLUG_MAX`] characters; `result` when nothing is left.
pub fn slug(title: &str) -> String {
    let mut out = String::new();
    for c in title.chars() {
        if out.len() >= SLUG_MAX {
            break;
        }
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.is_empty() && !out.ends_with('-') {
            out.push('-');
        }
    }
    let trimmed = out.trim_end_matches('-');
    if trimmed.is_empty() {
        "result".to_string()
    } else {
        trimmed.to_string()
    }
}

/// Write `bytes` to `<dir>/<prefix>-<n>-<slug>.<ext>` with the first free `n` (from 1): a
/// private temporary file is written and synced, then hard-linked to its name, which fails
/// rather than replaces when another call took that name first.
pub(crate) fn save(
    dir: &Path,
    prefix: &str,
    slug: &str,
    ext: &str,
    bytes: &[u8],
) -> io::Result<PathBuf> {
    DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
    fs::set_permissions(dir, Permissions::from_mode(0o700))?;
    let taken = fs::read_dir(dir)?
        .filter_map(Result::ok)
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with(&format!("{prefix}-"))
        })
        .count();
    let temp = dir.join(format!(".{prefix}.{}.tmp", std::process::id()));
    let result = (|| {
        let mut file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&temp)?;
        file.set_permissions(Permissions::from_mode(0o600))?;
        file.write_all(bytes)?;
        file.sync_all()?;
        drop(file);
        for n in taken + 1..taken + 1000 {
            let path = dir.join(format!("{prefix}-{n}-{slug}.{ext}"));
            match fs::hard_link(&temp, &path) {
                Ok(()) => return Ok(path),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            }
        }
        Err(io::Error::other("no free file name for this run's results"))
    })();
    let _ = fs::remove_file(&temp);
    result
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;
    use std::path::PathBuf;

    use dispatch_engine::Status;
    use dispatch_engine::shaping::session_dir;
    use dispatch_store::TranscriptMessage;
    use serde_json::{Value, json};

    use super::*;
    use crate::test_support::*;

    /// The path a successful write_result reports.
    fn saved_path(content: &str) -> PathBuf {
        let start = content.find(" to /").unwrap() + 4;
        let end = content.rfind(" (").unwrap();
        PathBuf::from(&content[start..end])
    }

    async fn write(h: &Harness, run: &str, args: Value) -> (Status, String) {
        let out = h
            .round("s1", run, vec![call("c1", "write_result", args)])
            .await;
        (out.results[0].status, out.results[0].content.clone())
    }

    #[tokio::test]
    async fn each_format_is_saved_privately_under_the_session_deliverables() {
        let h = Harness::new();
        let deliverables =
            session_dir(&h.data_dir.path().canonicalize().unwrap(), "s1").join(DELIVERABLES_DIR);
        for (format, ext, content) in [
            ("markdown", "md", "# Report\n\nAll good.\n"),
            ("html", "html", "<h1>Report</h1>"),
            ("json", "json", "{\"a\": [1, 2, 3]}"),
            ("text", "txt", "plain words"),
        ] {
            let (status, text) = write(
                &h,
                "r1",
                json!({"content": content, "format": format, "title": "Final Report"}),
            )
            .await;
            assert_eq!(status, Status::Ok, "{text}");
            let path = saved_path(&text);
            assert!(path.is_absolute());
            assert_eq!(path.parent().unwrap(), deliverables);
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            assert!(name.ends_with(&format!("-final-report.{ext}")), "{name}");
            assert_eq!(fs::read_to_string(&path).unwrap(), content);
            let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "{name}");
            assert!(
                text.contains(&format!("({} bytes)", content.len())),
                "{text}"
            );
        }
        let mode = fs::metadata(&deliverables).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
        // Four distinct numbered files, no temporaries left behind.
        let mut names: Vec<String> = fs::read_dir(&deliverables)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names.len(), 4, "{names:?}");
        for n in 1..=4 {
            assert!(
                names
                    .iter()
                    .any(|x| x.contains(&format!("-{n}-final-report."))),
                "{names:?}"
            );
        }
        // Nothing appeared in the work directory.
        assert_eq!(fs::read_dir(h.root()).unwrap().count(), 0);
    }

    #[tokio::test]
    async fn default_format_is_markdown_and_a_repeated_call_saves_again() {
        let h = Harness::new();
        let args = json!({"content": "same"});
        let (s1, t1) = write(&h, "r1", args.clone()).await;
        let (s2, t2) = write(&h, "r1", args).await;
        assert_eq!((s1, s2), (Status::Ok, Status::Ok), "{t1} / {t2}");
        let (p1, p2) = (saved_path(&t1), saved_path(&t2));
        assert_ne!(p1, p2);
        assert!(p1.to_string_lossy().ends_with("-1-result.md"), "{p1:?}");
        assert!(p2.to_string_lossy().ends_with("-2-result.md"), "{p2:?}");
    }

    #[tokio::test]
    async fn without_a_data_directory_the_call_fails_plainly() {
        let workdir = tempfile::tempdir().unwrap();
        let store = dispatch_store::open("memory:").unwrap();
        let config = dispatch_engine::EngineConfig::new(workdir.path().canonicalize().unwrap());
        assert!(config.data_dir.is_none());
        let engine = dispatch_engine::Engine::new(
            crate::builtin_registry().unwrap(),
            store,
            std::sync::Arc::new(dispatch_engine::Headless),
            config,
        )
        .unwrap();
        let out = engine
            .round(dispatch_engine::RoundRequest::new(
                "s1",
                "r1",
                dispatch_engine::Provider::OpenAi,
                vec![call("c1", "write_result", json!({"content": "x"}))],
            ))
            .await
            .unwrap();
        assert_eq!(out.results[0].status, Status::Failed);
        assert!(
            out.results[0]
                .content
                .contains("no data directory, so results cannot be saved"),
            "{}",
            out.results[0].content
        );
        assert_eq!(fs::read_dir(workdir.path()).unwrap().count(), 0);
    }

    #[tokio::test]
    async fn invalid_json_is_refused_with_line_and_column() {
        let h = Harness::new();
        let (status, text) = write(
            &h,
            "r1",
            json!({"content": "{\n  \"a\": 1,\n  \"b\": \n}", "format": "json"}),
        )
        .await;
        assert_eq!(status, Status::Failed);
        assert!(
            text.contains("not valid JSON") && text.contains("line 4, column 1"),
            "{text}"
        );
        assert!(!h.data_dir.path().join("sessions").exists());
    }

    #[tokio::test]
    async fn empty_and_oversize_content_are_refused() {
        let h = Harness::new();
        let (status, text) = write(&h, "r1", json!({"content": "  \n"})).await;
        // The engine's preflight already treats a blank required string as missing.
        assert_eq!(status, Status::Invalid, "{text}");
        assert!(text.contains("missing required field(s) content"), "{text}");
        let big = "x".repeat(RESULT_CAP + 1);
        let (status, text) = write(&h, "r1", json!({"content": big})).await;
        assert_eq!(status, Status::Failed, "{}", &text[..text.len().min(300)]);
        assert!(text.contains("over the 8.0 MiB limit"), "{text}");
    }

    #[tokio::test]
    async fn hostile_titles_make_safe_file_names() {
        let h = Harness::new();
        let deliverables =
            session_dir(&h.data_dir.path().canonicalize().unwrap(), "s1").join(DELIVERABLES_DIR);
        let long = "é".repeat(10_000) + &"a".repeat(10_000);
        for (title, slug) in [
            ("../../x", "x"),
            ("a\0b/../c", "a-b-c"),
            ("/etc/passwd", "etc-passwd"),
            ("...", "result"),
            ("", "result"),
            (long.as_str(), &"a".repeat(SLUG_MAX) as &str),
        ] {
            let (status, text) =
                write(&h, "../../run", json!({"content": "c", "title": title})).await;
            assert_eq!(status, Status::Ok, "{text}");
            let path = saved_path(&text);
            assert_eq!(path.parent().unwrap(), deliverables, "{title:?}");
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            assert!(name.ends_with(&format!("-{slug}.md")), "{title:?} → {name}");
            assert!(name.len() < 128, "{name}");
            assert!(
                name.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.'),
                "{name}"
            );
        }
    }

    #[tokio::test]
    async fn content_is_elided_from_the_stored_transcript_after_success() {
        let h = Harness::new();
        let secret_body = "THE-WHOLE-DELIVERABLE ".repeat(20);
        let (status, text) = write(
            &h,
            "r1",
            json!({"content": secret_body, "format": "text", "title": "t"}),
        )
        .await;
        assert_eq!(status, Status::Ok, "{text}");
        let (status, _) = write(&h, "r2", json!({"content": "{bad", "format": "json"})).await;
        assert_eq!(status, Status::Failed);
        let arguments = |run: &'static str| {
            let store = h.store.clone();
            async move {
                let entries = store.transcript("s1", Some(run)).await.unwrap();
                entries
                    .iter()
                    .find_map(|e| match &e.message {
                        TranscriptMessage::Assistant { tool_calls } => {
                            Some(tool_calls[0].arguments.clone())
                        }
                        _ => None,
                    })
                    .unwrap()
            }
        };
        let stored: Value = serde_json::from_str(&arguments("r1").await).unwrap();
        assert_eq!(
            stored,
            json!({"format": "text", "title": "t", "wrote_bytes": secret_body.len()})
        );
        // A failed call keeps its content, so the model can see what it sent.
        let failed: Value = serde_json::from_str(&arguments("r2").await).unwrap();
        assert_eq!(failed["content"], "{bad");
    }
}
