//! Installing tools, a person's action (`tooldispatch tools install`, `tooldispatch ext
//! install|list|remove`), never the model's: the model writes drafts in the work directory and
//! tries them with test_tool; a person reads them and installs them.
//!
//! Everything is checked before anything is put in place: every definition must load, only
//! regular files and folders are copied (a link could point anywhere), sizes are capped, and
//! the new folder replaces the old one by a rename, so a failed install leaves nothing behind.

use std::io::Read;
use std::path::{Component, Path, PathBuf};

use serde_json::Value;

use super::definition::{self, DEFINITION_FILE, Problem, Scope};
use super::source::folders;

/// Most bytes one install copies.
const MAX_INSTALL_BYTES: u64 = 64 * 1024 * 1024;
/// Most files and folders one install copies.
const MAX_INSTALL_ENTRIES: usize = 2000;
/// The optional file describing an extension.
pub const EXTENSION_FILE: &str = "extension.json";

/// Why an install or removal did not happen.
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    #[error("{0}")]
    Refused(String),
    #[error("the definitions have problems, so nothing was installed:\n{}", list(.0))]
    Problems(Vec<Problem>),
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
}

fn list(problems: &[Problem]) -> String {
    problems
        .iter()
        .map(|p| format!("  {p}"))
        .collect::<Vec<_>>()
        .join("\n")
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> InstallError {
    let what = what.into();
    move |source| InstallError::Io { what, source }
}

/// Install the draft tool folder `draft` as the user's script tool under `user_dir`; returns
/// the registered name.
pub fn install_tool(draft: &Path, user_dir: &Path, replace: bool) -> Result<String, InstallError> {
    let def = definition::load(draft, Scope::User).map_err(InstallError::Problems)?;
    let target = user_dir.join(&def.name);
    put_in_place(&def.dir, &target, replace, &def.tool_name())?;
    Ok(def.tool_name())
}

/// An installed extension.
#[derive(Clone, Debug)]
pub struct Extension {
    pub name: String,
    pub description: Option<String>,
    pub version: Option<String>,
    /// The `ext_` names of its tools that load.
    pub tools: Vec<String>,
    pub problems: Vec<Problem>,
    pub dir: PathBuf,
}

/// Install the extension in folder or `.tar.gz` `source` under `extensions_dir`.
pub fn install_extension(
    source: &Path,
    extensions_dir: &Path,
    replace: bool,
) -> Result<Extension, InstallError> {
    std::fs::create_dir_all(extensions_dir)
        .map_err(io(format!("cannot create {}", extensions_dir.display())))?;
    let meta =
        std::fs::metadata(source).map_err(io(format!("cannot read {}", source.display())))?;
    // An archive is unpacked beside the extensions first (same file system, so the final
    // rename works), and removed whatever happens.
    let file_name = |p: &Path| {
        p.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    };
    let _unpacked;
    let (root, fallback) = if meta.is_dir() {
        let root = source
            .canonicalize()
            .map_err(io(format!("cannot read {}", source.display())))?;
        let name = file_name(&root);
        (root, name)
    } else {
        let dir = tempdir_in(extensions_dir)?;
        unpack_tar_gz(source, &dir.0)?;
        let stem = file_name(source)
            .trim_end_matches(".tar.gz")
            .trim_end_matches(".tgz")
            .to_string();
        let (root, name) = match single_folder(&dir.0) {
            Some(top) => {
                let name = file_name(&top);
                (top, name)
            }
            None => (dir.0.clone(), stem),
        };
        _unpacked = dir;
        (root, name)
    };
    let name = extension_name(&root, fallback)?;
    let tools = check_extension(&root, &name)?;
    let target = extensions_dir.join(&name);
    put_in_place(&root, &target, replace, &format!("the extension {name}"))?;
    Ok(Extension {
        description: read_meta(&target).0,
        version: read_meta(&target).1,
        name,
        tools,
        problems: Vec::new(),
        dir: target,
    })
}

/// The installed extensions, each with its tools and problems.
pub fn list_extensions(extensions_dir: &Path) -> Vec<Extension> {
    folders(extensions_dir)
        .into_iter()
        .map(|dir| {
            let name = dir
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let (tools, problems) = load_tools(&dir, &name);
            let (description, version) = read_meta(&dir);
            Extension {
                name,
                description,
                version,
                tools,
                problems,
                dir,
            }
        })
        .collect()
}

/// Remove the installed extension `name`.
pub fn remove_extension(extensions_dir: &Path, name: &str) -> Result<PathBuf, InstallError> {
    if !valid_name(name) {
        return Err(InstallError::Refused(format!(
            "{name:?} is not an extension name; see `tooldispatch ext list`"
        )));
    }
    let dir = extensions_dir.join(name);
    if !dir.is_dir() {
        return Err(InstallError::Refused(format!(
            "no extension {name:?} is installed; see `tooldispatch ext list`"
        )));
    }
    std::fs::remove_dir_all(&dir).map_err(io(format!("cannot remove {}", dir.display())))?;
    Ok(dir)
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-')
}

/// `extension.json`'s name, else `fallback` (the folder's, or the archive's).
fn extension_name(root: &Path, fallback: String) -> Result<String, InstallError> {
    let declared = std::fs::read(root.join(EXTENSION_FILE))
        .ok()
        .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
        .and_then(|v| v.get("name").and_then(Value::as_str).map(str::to_string));
    let name = declared.unwrap_or(fallback);
    if valid_name(&name) {
        Ok(name)
    } else {
        Err(InstallError::Refused(format!(
            "the extension's name {name:?} may use only a-z, 0-9, _ and - (at most 64); set \"name\" in {EXTENSION_FILE}"
        )))
    }
}

fn read_meta(dir: &Path) -> (Option<String>, Option<String>) {
    let meta = std::fs::read(dir.join(EXTENSION_FILE))
        .ok()
        .and_then(|b| serde_json::from_slice::<Value>(&b).ok());
    let field = |k: &str| {
        meta.as_ref()
            .and_then(|m| m.get(k))
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    (field("description"), field("version"))
}

/// The tools of an extension folder: names of those that load, and every problem.
fn load_tools(root: &Path, name: &str) -> (Vec<String>, Vec<Problem>) {
    let mut tools = Vec::new();
    let mut problems = Vec::new();
    for dir in folders(root) {
        match definition::load(&dir, Scope::Extension(name.to_string())) {
            Ok(def) => tools.push(def.tool_name()),
            Err(found) => problems.extend(found),
        }
    }
    (tools, problems)
}

fn check_extension(root: &Path, name: &str) -> Result<Vec<String>, InstallError> {
    let (tools, problems) = load_tools(root, name);
    if !problems.is_empty() {
        return Err(InstallError::Problems(problems));
    }
    if tools.is_empty() {
        return Err(InstallError::Refused(format!(
            "{} holds no tool: an extension is a folder of tool folders, each with a {DEFINITION_FILE}",
            root.display()
        )));
    }
    Ok(tools)
}

/// A temporary folder removed when dropped.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn tempdir_in(parent: &Path) -> Result<TempDir, InstallError> {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let dir = parent.join(format!(".incoming-{}-{nanos}", std::process::id()));
    std::fs::create_dir(&dir).map_err(io(format!("cannot create {}", dir.display())))?;
    Ok(TempDir(dir))
}

/// The only entry of `dir` when it is a folder (an archive with a top folder).
fn single_folder(dir: &Path) -> Option<PathBuf> {
    let entries: Vec<_> = std::fs::read_dir(dir).ok()?.flatten().collect();
    match entries.as_slice() {
        [one] if one.file_type().is_ok_and(|t| t.is_dir()) => Some(one.path()),
        _ => None,
    }
}

/// Unpack a gzip'd tar: regular files and folders only, no absolute paths or `..`, within the
/// size and count caps.
fn unpack_tar_gz(archive: &Path, into: &Path) -> Result<(), InstallError> {
    let file =
        std::fs::File::open(archive).map_err(io(format!("cannot open {}", archive.display())))?;
    let mut tar = tar::Archive::new(flate2::read::GzDecoder::new(file));
    let entries = tar.entries().map_err(io(format!(
        "{} is not a .tar.gz archive",
        archive.display()
    )))?;
    let mut bytes = 0u64;
    for (count, entry) in entries.enumerate() {
        let mut entry = entry.map_err(io(format!(
            "{} is not a readable .tar.gz",
            archive.display()
        )))?;
        if count >= MAX_INSTALL_ENTRIES {
            return Err(InstallError::Refused(format!(
                "the archive holds more than {MAX_INSTALL_ENTRIES} entries"
            )));
        }
        let path = entry
            .path()
            .map_err(io("an archive entry has an unreadable name"))?
            .into_owned();
        if !path
            .components()
            .all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
        {
            return Err(InstallError::Refused(format!(
                "the archive entry {} leaves the extension's folder; it may hold only relative paths",
                path.display()
            )));
        }
        let kind = entry.header().entry_type();
        let target = into.join(&path);
        if kind.is_dir() {
            std::fs::create_dir_all(&target)
                .map_err(io(format!("cannot create {}", target.display())))?;
        } else if kind.is_file() {
            bytes += entry.size();
            if bytes > MAX_INSTALL_BYTES {
                return Err(InstallError::Refused(format!(
                    "the archive unpacks to more than {} MiB",
                    MAX_INSTALL_BYTES / (1024 * 1024)
                )));
            }
            if let Some(parent) = target.parent() {
                std::fs::create_dir_all(parent)
                    .map_err(io(format!("cannot create {}", parent.display())))?;
            }
            let mode = entry.header().mode().unwrap_or(0o644) & 0o755;
            let mut data = Vec::with_capacity(entry.size() as usize);
            entry.read_to_end(&mut data).map_err(io(format!(
                "cannot read {} from the archive",
                path.display()
            )))?;
            write_file(&target, &data, mode)?;
        } else if matches!(
            kind,
            tar::EntryType::XGlobalHeader | tar::EntryType::XHeader
        ) {
            continue;
        } else {
            return Err(InstallError::Refused(format!(
                "the archive entry {} is a link or device; an extension holds only files and folders",
                path.display()
            )));
        }
    }
    Ok(())
}

fn write_file(target: &Path, data: &[u8], mode: u32) -> Result<(), InstallError> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(target, data).map_err(io(format!("cannot write {}", target.display())))?;
    std::fs::set_permissions(target, std::fs::Permissions::from_mode(mode))
        .map_err(io(format!("cannot set the mode of {}", target.display())))
}

/// Copy `from` to a fresh folder beside `target`, then swap it in.
fn put_in_place(from: &Path, target: &Path, replace: bool, what: &str) -> Result<(), InstallError> {
    if target.exists() && !replace {
        return Err(InstallError::Refused(format!(
            "{what} is installed already at {}; pass --replace to overwrite it",
            target.display()
        )));
    }
    let parent = target
        .parent()
        .ok_or_else(|| InstallError::Refused("the install folder has no parent".into()))?;
    std::fs::create_dir_all(parent).map_err(io(format!("cannot create {}", parent.display())))?;
    let staging = tempdir_in(parent)?;
    let mut budget = (0u64, 0usize);
    copy_tree(from, &staging.0, &mut budget)?;
    let old = parent.join(format!(
        ".old-{}",
        target
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    ));
    let _ = std::fs::remove_dir_all(&old);
    if target.exists() {
        std::fs::rename(target, &old)
            .map_err(io(format!("cannot move {} aside", target.display())))?;
    }
    std::fs::rename(&staging.0, target)
        .map_err(io(format!("cannot install into {}", target.display())))?;
    let _ = std::fs::remove_dir_all(&old);
    Ok(())
}

/// Copy regular files and folders; a link or anything else refuses the install.
fn copy_tree(from: &Path, to: &Path, budget: &mut (u64, usize)) -> Result<(), InstallError> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(to).map_err(io(format!("cannot create {}", to.display())))?;
    let entries = std::fs::read_dir(from).map_err(io(format!("cannot read {}", from.display())))?;
    for entry in entries {
        let entry = entry.map_err(io(format!("cannot read {}", from.display())))?;
        let path = entry.path();
        let meta = std::fs::symlink_metadata(&path)
            .map_err(io(format!("cannot read {}", path.display())))?;
        budget.1 += 1;
        if budget.1 > MAX_INSTALL_ENTRIES {
            return Err(InstallError::Refused(format!(
                "more than {MAX_INSTALL_ENTRIES} files and folders"
            )));
        }
        let target = to.join(entry.file_name());
        if meta.is_dir() {
            copy_tree(&path, &target, budget)?;
        } else if meta.is_file() {
            budget.0 += meta.len();
            if budget.0 > MAX_INSTALL_BYTES {
                return Err(InstallError::Refused(format!(
                    "more than {} MiB to copy",
                    MAX_INSTALL_BYTES / (1024 * 1024)
                )));
            }
            let data =
                std::fs::read(&path).map_err(io(format!("cannot read {}", path.display())))?;
            write_file(&target, &data, meta.permissions().mode() & 0o755)?;
        } else {
            return Err(InstallError::Refused(format!(
                "{} is a link or special file; a tool folder may hold only files and folders (copy what the link points to instead)",
                path.display()
            )));
        }
    }
    Ok(())
}
