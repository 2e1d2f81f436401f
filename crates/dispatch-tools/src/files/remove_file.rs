//! `remove_file`: move one file into the trash under the data directory.
//!
//! Nothing is unlinked: the file is renamed into `<data_dir>/trash/` and a `delete` version
//! records where it went, so `restore_file` can put it back byte for byte. One regular file per
//! call: a directory is refused (its files are removed one by one, each with its own version),
//! and so is a symlink named directly, because confinement resolves links and the file removed
//! would be the link's target, not the link the model named.

use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use dispatch_engine::{
    Access, Effect, Gate, Subject, ToolContext, ToolError, ToolOutput, ToolSpec,
};
use dispatch_store::{FileAction, FileHistory};
use schemars::JsonSchema;
use serde::Deserialize;

use super::beneath::Target;
use super::confine::Confinement;
use super::write::{Recorder, blocking, check_regular, human_bytes, io_error};
use crate::{BuiltinTool, Stores};

/// Move a file to the trash (restorable).
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RemoveFileArgs {
    /// The file, relative to the work directory (one regular file; not a directory).
    path: String,
}

pub struct RemoveFile {
    /// Where each change is recorded first, so it can be undone in turn.
    history: Option<Arc<dyn FileHistory>>,
}

impl RemoveFile {
    pub fn new(stores: &Stores) -> Self {
        RemoveFile {
            history: stores.file_history.clone(),
        }
    }
}

#[async_trait]
impl BuiltinTool for RemoveFile {
    const NAME: &'static str = "remove_file";
    const DESCRIPTION: &'static str = "Remove one file by moving it to the trash; the result names the version that \
        restore_file(version=N) puts back byte for byte. Regular files only (files ≤ 64 \
        MiB): remove a directory's files one by one. Always asks the user.";
    type Args = RemoveFileArgs;

    fn declare(&self, spec: ToolSpec) -> ToolSpec {
        spec.gate(Gate::Destructive).effect(Effect::Mutates)
    }

    fn subject(&self, args: &serde_json::Value, workdir: &std::path::Path) -> Option<Subject> {
        use crate::subjects::{resolved, texts};
        Some(Subject::new(Access::Destroys).paths(resolved(workdir, texts(args, "path"))))
    }

    async fn run(&self, cx: ToolContext, args: RemoveFileArgs) -> Result<ToolOutput, ToolError> {
        let recorder = Recorder::for_call(self.history.as_ref(), &cx, Self::NAME)?;
        recorder.require_data_dir("remove files")?;
        let confine = Confinement::for_call(&cx)?;
        let path = confine.resolve(&args.path)?;
        let shown = confine.display(&path).into_owned();
        refuse_named_symlink(&confine, &args.path)?;

        let (file, shown_owned, confined) = (path.clone(), shown.clone(), confine.clone());
        let target = blocking(move || {
            let meta = std::fs::symlink_metadata(&file).map_err(|e| {
                if e.kind() == std::io::ErrorKind::NotFound {
                    ToolError::failed(format!(
                        "{shown_owned} does not exist; nothing to remove (find_files lists what \
                         is there)"
                    ))
                } else {
                    io_error("inspect", &shown_owned, &e)
                }
            })?;
            if meta.is_dir() {
                return Err(ToolError::failed(format!(
                    "{shown_owned} is a directory; remove_file removes one regular file at a time \
                     so each can be restored — remove the files in it one by one"
                )));
            }
            check_regular(&meta, &shown_owned)?;
            // The move goes through the directory held open here, never through a link.
            Target::open(&confined, &file, &shown_owned, false)
        })
        .await?;

        let (version, size) = recorder
            .remove_to_trash(&target, &shown, FileAction::Delete)
            .await?;
        Ok(ToolOutput::text(format!(
            "removed {shown} ({}) to the trash. Version {version} records it; undo with \
             restore_file(version={version})",
            human_bytes(size)
        ))
        .with_paths(vec![path]))
    }
}

/// A path whose last component is a symlink would remove the link's target: say so.
fn refuse_named_symlink(confine: &Confinement, raw: &str) -> Result<(), ToolError> {
    let raw_path = Path::new(raw);
    let (Some(name), Some(parent)) = (raw_path.file_name(), raw_path.parent()) else {
        return Ok(());
    };
    let parent = if parent.as_os_str().is_empty() {
        ".".to_string()
    } else {
        parent.to_string_lossy().into_owned()
    };
    let Ok(parent) = confine.resolve(&parent) else {
        return Ok(());
    };
    let named = parent.join(name);
    match std::fs::symlink_metadata(&named) {
        Ok(meta) if meta.file_type().is_symlink() => {
            let target = std::fs::read_link(&named)
                .map(|t| t.display().to_string())
                .unwrap_or_else(|_| "?".into());
            Err(ToolError::failed(format!(
                "{raw:?} is a symlink (to {target}); remove_file moves regular files only and \
                 will not remove a link's target through the link. Name the target itself to \
                 remove it"
            )))
        }
        _ => Ok(()),
    }
}
