//! `restore_file`: put a recorded version back, or undo everything one task changed.
//!
//! A version holds a file as it was *before* a change, so restoring version N undoes the change
//! N recorded, and undoing a task restores, for each file the task touched, the oldest version
//! the task recorded: the file as it was before the task began. A version that says the file
//! did not exist removes it (into the trash). A restore is itself a change: it records a
//! `restore` version first, so it can be undone the same way. Every path is confined again at
//! restore time, because the history outlives the symlinks and work directory it was made in.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use dispatch_engine::sensitive::is_sensitive_path;
use dispatch_engine::{
    Access, Effect, Gate, Subject, ToolContext, ToolError, ToolOutput, ToolSpec,
};
use dispatch_store::{FileAction, FileHistory, FileVersion, VersionQuery};
use schemars::JsonSchema;
use serde::Deserialize;

use super::beneath::Target;
use super::confine::Confinement;
use super::write::{
    MAX_SNAPSHOT_FILE_BYTES, Recorder, blocking, human_bytes, io_error, version_bytes,
};
use crate::{BuiltinTool, Stores};

/// Most files one task undo restores.
pub const MAX_RESTORE_FILES: usize = 256;
/// Most entries in `paths`.
pub const MAX_PATHS: usize = 64;
/// Longest task id accepted.
pub const MAX_TASK_ID_CHARS: usize = 200;
/// Most versions of one task read back (a task that changed more is undone by paths).
const MAX_TASK_VERSIONS: usize = 20_000;

/// Put a recorded version back, or undo a task.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RestoreFileArgs {
    /// A version id (from an edit's result or file_history): the file goes back to that version's content, or is removed if the version says it did not exist.
    #[serde(default)]
    version: Option<u64>,
    /// Undo a task: "current" (this run) or a run id; every file the task changed goes back to its state before the task.
    #[serde(default)]
    task_id: Option<String>,
    /// With task_id: only these files (at most 64). With version: must name the version's file (required when it is a credential file).
    #[serde(default)]
    paths: Option<Vec<String>>,
}

pub struct RestoreFile {
    /// Where each change is recorded first, so it can be undone in turn.
    history: Option<Arc<dyn FileHistory>>,
}

impl RestoreFile {
    pub fn new(stores: &Stores) -> Self {
        RestoreFile {
            history: stores.file_history.clone(),
        }
    }
}

/// One file to put back.
struct Job {
    path: PathBuf,
    shown: String,
    version: FileVersion,
}

#[async_trait]
impl BuiltinTool for RestoreFile {
    const NAME: &'static str = "restore_file";
    const DESCRIPTION: &'static str = "Undo file changes. version=N puts back the file as version N holds it (removing \
        it if it did not exist then). task_id=\"current\" (or a run id) returns every \
        file that task changed to its state before the task; paths narrows that to some \
        files. Each restore is recorded, so it can be undone too. Always asks the user.";
    type Args = RestoreFileArgs;

    fn declare(&self, spec: ToolSpec) -> ToolSpec {
        spec.gate(Gate::Destructive).effect(Effect::Mutates)
    }

    /// The paths named; a restore by version or task touches files the call does not name,
    /// which it reports in its output for dedupe.
    fn subject(&self, args: &serde_json::Value, workdir: &std::path::Path) -> Option<Subject> {
        use crate::subjects::{resolved, texts};
        Some(Subject::new(Access::Destroys).paths(resolved(workdir, texts(args, "paths"))))
    }

    async fn run(&self, cx: ToolContext, args: RestoreFileArgs) -> Result<ToolOutput, ToolError> {
        let recorder = Recorder::for_call(self.history.as_ref(), &cx, Self::NAME)?;
        let confine = Confinement::for_call(&cx)?;
        let named = resolve_paths(&confine, args.paths.as_deref())?;
        let (jobs, heading) = match (args.version, args.task_id.as_deref()) {
            (Some(_), Some(_)) => {
                return Err(ToolError::failed(
                    "give version or task_id, not both: version restores one recorded version, \
                     task_id undoes a whole task",
                ));
            }
            (None, None) => {
                return Err(ToolError::failed(
                    "give version (a version id from file_history or an edit's result) or \
                     task_id (\"current\" undoes this run's file changes)",
                ));
            }
            (Some(id), None) => by_version(&recorder, &confine, id, named.as_deref()).await?,
            (None, Some(task)) => by_task(&recorder, &confine, &cx, task, named.as_deref()).await?,
        };
        for job in &jobs {
            precheck(job, recorder.data_dir())?;
        }

        let mut lines = Vec::with_capacity(jobs.len());
        let mut failures = Vec::new();
        let mut changed = 0usize;
        for job in &jobs {
            if cx.cancel.is_cancelled() {
                failures.push(job.shown.clone());
                lines.push(format!(
                    "- {}: not restored, the call was stopped",
                    job.shown
                ));
                continue;
            }
            match restore_one(&recorder, &confine, job).await {
                Ok((line, did_change)) => {
                    changed += usize::from(did_change);
                    lines.push(format!("- {}: {line}", job.shown));
                }
                Err(e) => {
                    failures.push(job.shown.clone());
                    lines.push(format!("- {}: FAILED, left as it was: {e}", job.shown));
                }
            }
        }
        let paths: Vec<PathBuf> = jobs.iter().map(|j| j.path.clone()).collect();
        if !failures.is_empty() && changed == 0 {
            return Err(ToolError::failed(format!(
                "{heading}: nothing was restored.\n{}",
                lines.join("\n")
            )));
        }
        let mut text = if failures.is_empty() {
            format!("{heading}:\n{}", lines.join("\n"))
        } else {
            // Some files changed: the result must carry their paths, so it is not an error.
            format!(
                "{heading}: PARTLY FAILED — {} of {} file(s) could not be restored ({}); the \
                 others were:\n{}",
                failures.len(),
                jobs.len(),
                failures.join(", "),
                lines.join("\n")
            )
        };
        if changed > 0 {
            text.push_str(
                "\nEach restore recorded the state it replaced: restore that version to undo it.",
            );
        }
        Ok(ToolOutput::text(text).with_paths(paths))
    }
}

/// The files named in `paths`, resolved.
fn resolve_paths(
    confine: &Confinement,
    paths: Option<&[String]>,
) -> Result<Option<Vec<PathBuf>>, ToolError> {
    let Some(paths) = paths else {
        return Ok(None);
    };
    if paths.is_empty() {
        return Err(ToolError::failed(
            "paths is empty; omit it to restore every file, or name the files to restore",
        ));
    }
    if paths.len() > MAX_PATHS {
        return Err(ToolError::failed(format!(
            "paths has {} entries, over the limit of {MAX_PATHS}; restore in several calls",
            paths.len()
        )));
    }
    paths
        .iter()
        .map(|p| confine.resolve(p))
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
}

/// A stored path, confined again: it must still be inside the work directory and reached
/// without a symlink.
fn confined_job(confine: &Confinement, version: FileVersion) -> Result<Job, ToolError> {
    let resolved = confine.resolve(&version.path).map_err(|e| {
        ToolError::failed(format!(
            "version {} is of {}, which cannot be restored here: {e}",
            version.id, version.path
        ))
    })?;
    if resolved != Path::new(&version.path) {
        return Err(ToolError::failed(format!(
            "version {} is of {}, which now resolves to {} (a symlink or a different work \
             directory); restore refuses to write through it",
            version.id,
            version.path,
            resolved.display()
        )));
    }
    Ok(Job {
        shown: confine.display(&resolved).into_owned(),
        path: resolved,
        version,
    })
}

/// A credential file is only restored when the call names it, so the confirm gate sees it.
fn check_sensitive(job: &Job, named: Option<&[PathBuf]>) -> Result<(), ToolError> {
    let is_named = named.is_some_and(|n| n.contains(&job.path));
    if is_sensitive_path(&job.version.path) && !is_named {
        return Err(ToolError::failed(format!(
            "{} is a credential file; restoring it needs its path in `paths` so the user sees \
             which file is overwritten. Call again with paths=[{:?}]",
            job.shown, job.shown
        )));
    }
    Ok(())
}

async fn by_version(
    recorder: &Recorder,
    confine: &Confinement,
    id: u64,
    named: Option<&[PathBuf]>,
) -> Result<(Vec<Job>, String), ToolError> {
    let version = recorder
        .history()
        .version(id)
        .await
        .map_err(|e| ToolError::failed(format!("cannot read the file history: {e}")))?
        .ok_or_else(|| {
            ToolError::failed(format!(
                "there is no version {id}; file_history(mode=list) shows the recorded versions"
            ))
        })?;
    let job = confined_job(confine, version)?;
    if let Some(named) = named
        && !named.contains(&job.path)
    {
        return Err(ToolError::failed(format!(
            "version {id} is of {}, which is not in paths; with version, paths may only name \
             that file (or omit paths)",
            job.shown
        )));
    }
    check_sensitive(&job, named)?;
    let heading = format!("restore of version {id}");
    Ok((vec![job], heading))
}

async fn by_task(
    recorder: &Recorder,
    confine: &Confinement,
    cx: &ToolContext,
    task: &str,
    named: Option<&[PathBuf]>,
) -> Result<(Vec<Job>, String), ToolError> {
    let task = task.trim();
    if task.is_empty() {
        return Err(ToolError::failed(
            "task_id is empty; use \"current\" for this run, or a run id from file_history",
        ));
    }
    if task.chars().count() > MAX_TASK_ID_CHARS {
        return Err(ToolError::failed(format!(
            "task_id is longer than {MAX_TASK_ID_CHARS} characters; run ids are short"
        )));
    }
    let run = if task == "current" {
        cx.run_id.to_string()
    } else {
        task.to_string()
    };
    let versions = recorder
        .history()
        .versions(&VersionQuery {
            session: Some(cx.session_id.to_string()),
            run: Some(run.clone()),
            limit: MAX_TASK_VERSIONS + 1,
            ..VersionQuery::default()
        })
        .await
        .map_err(|e| ToolError::failed(format!("cannot read the file history: {e}")))?;
    if versions.len() > MAX_TASK_VERSIONS {
        return Err(ToolError::failed(format!(
            "task {run} recorded more than {MAX_TASK_VERSIONS} versions; undo it by paths in \
             several calls"
        )));
    }
    if versions.is_empty() {
        return Err(ToolError::failed(format!(
            "task {run} changed no files in this session (no versions recorded); \
             file_history(mode=list) shows which tasks did"
        )));
    }
    // Newest first: the last one seen for a path is the task's oldest, its state before.
    let mut oldest: BTreeMap<String, FileVersion> = BTreeMap::new();
    for v in versions {
        oldest.insert(v.path.clone(), v);
    }
    if let Some(named) = named {
        let missing: Vec<String> = named
            .iter()
            .filter(|p| !oldest.contains_key(&*p.to_string_lossy()))
            .map(|p| confine.display(p).into_owned())
            .collect();
        if !missing.is_empty() {
            let changed: Vec<String> = oldest
                .keys()
                .take(20)
                .map(|p| confine.display(Path::new(p)).into_owned())
                .collect();
            return Err(ToolError::failed(format!(
                "task {run} did not change {}; it changed: {}",
                missing.join(", "),
                changed.join(", ")
            )));
        }
        oldest.retain(|path, _| named.iter().any(|n| n.as_os_str() == path.as_str()));
    }
    if oldest.len() > MAX_RESTORE_FILES {
        return Err(ToolError::failed(format!(
            "task {run} changed {} files, over the {MAX_RESTORE_FILES} one call restores; name \
             some of them in paths",
            oldest.len()
        )));
    }
    let mut jobs = Vec::with_capacity(oldest.len());
    for version in oldest.into_values() {
        let job = confined_job(confine, version)?;
        check_sensitive(&job, named)?;
        jobs.push(job);
    }
    let heading = format!(
        "undo of task {run} ({} file(s), each back to its state before the task)",
        jobs.len()
    );
    Ok((jobs, heading))
}

/// Refuse early, before anything changes, when a version's content is gone.
fn precheck(job: &Job, data_dir: Option<&Path>) -> Result<(), ToolError> {
    let v = &job.version;
    if !v.existed() || v.content.is_some() {
        return Ok(());
    }
    let in_trash = v
        .trash_path
        .as_deref()
        .is_some_and(|t| data_dir.is_some() && Path::new(t).is_file());
    if !in_trash {
        return Err(ToolError::failed(format!(
            "{}: version {} kept no content (over the snapshot limit) and its trash copy is \
             gone, so it cannot be restored; nothing was changed",
            job.shown, v.id
        )));
    }
    Ok(())
}

/// Restore one file; the line for the report and whether the file changed.
async fn restore_one(
    recorder: &Recorder,
    confine: &Confinement,
    job: &Job,
) -> Result<(String, bool), ToolError> {
    let v = &job.version;
    let version = v.id;
    let data_dir = recorder.data_dir().map(Path::to_path_buf);
    let (file, shown, wanted) = (job.path.clone(), job.shown.clone(), v.clone());
    let confined = confine.clone();
    let (current, target, trash_meta) = blocking(move || {
        let current = match Target::open_existing(&confined, &file, &shown)? {
            Some(dir) => dir.read_existing(&shown, MAX_SNAPSHOT_FILE_BYTES)?,
            None => None,
        };
        let target = version_bytes(&wanted, data_dir.as_deref()).map_err(ToolError::failed)?;
        // Permissions come from our own trash copy only (write.rs keeps at most 0o7777).
        let trash_meta = wanted
            .trash_path
            .as_deref()
            .map(Path::new)
            .filter(|t| {
                data_dir
                    .as_deref()
                    .is_some_and(|d| super::write::is_trash_file(d, t))
            })
            .and_then(|t| std::fs::symlink_metadata(t).ok());
        Ok((current, target, trash_meta))
    })
    .await?;

    let Some(target) = target else {
        if current.is_none() {
            return Ok((
                format!("already absent, as in version {version}; unchanged"),
                false,
            ));
        }
        let (file, shown, confined) = (job.path.clone(), job.shown.clone(), confine.clone());
        let dir = blocking(move || Target::open(&confined, &file, &shown, false)).await?;
        let (undo, size) = recorder
            .remove_to_trash(&dir, &job.shown, FileAction::Restore)
            .await?;
        return Ok((
            format!(
                "removed ({}; it did not exist in version {version}); moved to the trash, undo \
                 with restore_file(version={undo})",
                human_bytes(size)
            ),
            true,
        ));
    };
    if current.as_ref().is_some_and(|c| c.bytes == target) {
        return Ok((format!("already as in version {version}; unchanged"), false));
    }
    let (keep, before) = match current {
        Some(c) => (Some(c.meta), Some(c.bytes)),
        // A removed file comes back with the permissions its trash copy kept.
        None => (trash_meta, None),
    };
    let existed = before.is_some();
    // Opened (and its directories made) before the version is recorded; written through.
    let (file, shown, confined) = (job.path.clone(), job.shown.clone(), confine.clone());
    let dir = blocking(move || Target::open(&confined, &file, &shown, !existed)).await?;
    let undo = recorder
        .record(&job.path, &job.shown, FileAction::Restore, before, None)
        .await?;
    let size = target.len() as u64;
    let shown = job.shown.clone();
    blocking(move || {
        dir.write_atomic(&target, keep.as_ref())
            .map_err(|e| io_error("write", &shown, &e))
    })
    .await?;
    let how = if existed { "back to" } else { "recreated as" };
    Ok((
        format!(
            "{how} version {version} ({}); undo with restore_file(version={undo})",
            human_bytes(size)
        ),
        true,
    ))
}
