//! Where media land: always a fresh, private file among the session's deliverables (as
//! write_result saves them), and a copy in the work directory when the model asked for one
//! (`save_to`, which the gate has asked about). A copy never replaces an existing file.

use std::io;
use std::path::PathBuf;

use dispatch_engine::ToolContext;
use dispatch_engine::ToolError;
use dispatch_engine::shaping::{safe_component, session_dir};

use crate::files::beneath::Target;
use crate::files::confine::Confinement;
use crate::files::write::io_error;
use crate::output::write_result::{DELIVERABLES_DIR, save, slug};

/// A `save_to` checked before any money is spent: inside the work directory, not a directory,
/// not there yet.
pub struct SaveTo {
    confine: Confinement,
    pub path: PathBuf,
    pub shown: String,
}

impl SaveTo {
    /// `raw` resolved the way the file tools resolve paths; refused when outside the work
    /// directory, on the denied list, or already taken.
    pub fn check(cx: &ToolContext, raw: &str, ext: &str) -> Result<SaveTo, ToolError> {
        let confine = Confinement::for_call(cx)?;
        if raw.ends_with('/') {
            return Err(ToolError::failed(format!(
                "save_to {raw:?} ends with `/`, so it names a directory; give a file path such as \"{raw}out.{ext}\""
            )));
        }
        let path = confine.resolve(raw).map_err(|e| {
            ToolError::failed(format!(
                "save_to: {e}; nothing was generated (no cost). Leave save_to out to keep the file in the session's deliverables only"
            ))
        })?;
        let shown = confine.display(&path).into_owned();
        if std::fs::symlink_metadata(&path).is_ok() {
            return Err(taken(&shown));
        }
        Ok(SaveTo {
            confine,
            path,
            shown,
        })
    }

    /// Write the copy; the file must still not exist.
    pub async fn write(&self, bytes: Vec<u8>) -> Result<(), ToolError> {
        let (confine, path, shown) = (self.confine.clone(), self.path.clone(), self.shown.clone());
        tokio::task::spawn_blocking(move || {
            let target = Target::open(&confine, &path, &shown, true)?;
            target.create_new(&bytes).map_err(|e| match e.kind() {
                io::ErrorKind::AlreadyExists => taken(&shown),
                _ => io_error("write", &shown, &e),
            })
        })
        .await
        .map_err(|e| ToolError::failed(format!("writing save_to stopped unexpectedly: {e}")))?
    }
}

fn taken(shown: &str) -> ToolError {
    ToolError::failed(format!(
        "save_to {shown} already exists and is never overwritten; choose a new file name (nothing was generated, or the generated file is still in the deliverables named above)"
    ))
}

/// The session's deliverables directory of this call, or why there is none.
pub fn deliverables_dir(cx: &ToolContext, tool: &str) -> Result<PathBuf, ToolError> {
    match &cx.data_dir {
        Some(data_dir) => Ok(session_dir(data_dir, &cx.session_id).join(DELIVERABLES_DIR)),
        None => Err(ToolError::failed(format!(
            "this dispatcher has no data directory, so {tool} has nowhere to keep what it makes; nothing was generated (no cost)"
        ))),
    }
}

/// Save `bytes` as a new private file `<run>-<n>-<slug of title>.<ext>` in `dir`.
pub async fn save_deliverable(
    cx: &ToolContext,
    dir: PathBuf,
    title: &str,
    ext: &'static str,
    bytes: Vec<u8>,
) -> Result<PathBuf, ToolError> {
    let prefix = safe_component(&cx.run_id);
    let slug = slug(title);
    tokio::task::spawn_blocking(move || save(&dir, &prefix, &slug, ext, &bytes))
        .await
        .map_err(|e| ToolError::failed(format!("saving stopped unexpectedly: {e}")))?
        .map_err(|e| {
            ToolError::failed(format!(
                "the file was generated but could not be saved under the session's data directory: {e}"
            ))
        })
}
