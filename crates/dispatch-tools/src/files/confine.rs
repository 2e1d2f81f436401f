//! Path confinement for every tool that touches the file system (DESIGN §6).
//!
//! A path from the model is hostile: it is resolved the way the kernel would resolve it (`..`
//! and every symlink, including one in the last component) and must then lie inside the work
//! directory. A few places inside the work directory are refused outright (the rules file
//! directory, the data directory); a symlink whose target is a credential file is refused
//! unless the model names the sensitive file itself, so the confirm gate (which judges the
//! path as written) cannot be walked around through an innocent-looking link.
//!
//! Every refusal says which rule refused and what the model can do instead.

use std::io;
use std::path::{Component, Path, PathBuf};

use dispatch_engine::sensitive::is_sensitive_path;
use dispatch_engine::{ToolContext, ToolError};

/// Longest path accepted from the model (Linux's PATH_MAX).
pub const MAX_PATH_BYTES: usize = 4096;

/// Directories inside the work directory that no file tool may read or change, relative to it.
/// `.tooldispatch` holds the rules that decide what runs without asking.
pub const DENIED_IN_WORKDIR: &[&str] = &[".tooldispatch"];

/// The confinement of one call: its work directory and the places refused inside it.
#[derive(Clone, Debug)]
pub struct Confinement {
    root: PathBuf,
    /// As named; each is also refused by what it resolves to at the time of a check.
    denied: Vec<PathBuf>,
}

/// A denied place: its name, and what it resolves to now (the same when it is no link).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeniedPlace {
    pub named: PathBuf,
    pub resolved: PathBuf,
}

impl Confinement {
    /// Confine to `root` (resolved here), refusing `DENIED_IN_WORKDIR` and `extra_denied`.
    pub fn new(root: &Path, extra_denied: &[PathBuf]) -> io::Result<Confinement> {
        let root = root.canonicalize()?;
        let mut denied: Vec<PathBuf> = DENIED_IN_WORKDIR.iter().map(|d| root.join(d)).collect();
        denied.extend(extra_denied.iter().cloned());
        Ok(Confinement { root, denied })
    }

    /// The denied places, each resolved now. A denied name is a place, not a string: when
    /// `.tooldispatch` is a link to `cfgdir`, `cfgdir` is denied too, and a link planted or
    /// changed after this confinement was made is still followed, because it is resolved at
    /// every check. A place that does not exist (yet) is denied under its own name.
    pub fn denied_places(&self) -> Vec<DeniedPlace> {
        self.denied
            .iter()
            .map(|named| DeniedPlace {
                named: named.clone(),
                resolved: resolve_existing_prefix(named).unwrap_or_else(|_| named.clone()),
            })
            .collect()
    }

    /// The denied place `resolved` (a resolved path) lies in, if any.
    pub fn denied_place_of(&self, resolved: &Path) -> Option<DeniedPlace> {
        self.denied_places()
            .into_iter()
            .find(|d| resolved.starts_with(&d.named) || resolved.starts_with(&d.resolved))
    }

    /// The confinement of a call: its work directory; its data directory (store, trash, spilled
    /// results) is refused when it lies inside the work directory.
    pub fn for_call(cx: &ToolContext) -> Result<Confinement, ToolError> {
        let extra: Vec<PathBuf> = cx.data_dir.iter().map(|d| d.to_path_buf()).collect();
        Confinement::new(&cx.workdir, &extra).map_err(|e| {
            ToolError::failed(format!(
                "the work directory {} cannot be used: {e}",
                cx.workdir.display()
            ))
        })
    }

    /// The resolved work directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Resolve `raw` (relative to the work directory, or absolute) to an absolute path inside
    /// the work directory with no `..` and no symlink left in it. The path need not exist;
    /// its existing part is resolved through the file system, the rest lexically.
    pub fn resolve(&self, raw: &str) -> Result<PathBuf, ToolError> {
        let refuse = |why: String| ToolError::failed(format!("path {raw:?} refused: {why}"));
        if raw.trim().is_empty() {
            return Err(refuse(
                "it is empty; give a path relative to the work directory".into(),
            ));
        }
        if raw.len() > MAX_PATH_BYTES {
            return Err(ToolError::failed(format!(
                "path refused: it is {} bytes long, over the limit of {MAX_PATH_BYTES}",
                raw.len()
            )));
        }
        if raw.contains('\0') {
            return Err(refuse("it contains a NUL byte".into()));
        }
        if raw.starts_with('~') {
            return Err(refuse(format!(
                "`~` is not expanded; paths are relative to the work directory {}",
                self.root.display()
            )));
        }
        let joined = self.root.join(raw);
        let resolved = resolve_existing_prefix(&joined).map_err(|e| match e.raw_os_error() {
            Some(code) if code == libc_eloop() => refuse(
                "it goes through a symlink loop; name the file the links should reach".into(),
            ),
            _ => refuse(format!("it cannot be resolved: {e}")),
        })?;
        if !resolved.starts_with(&self.root) {
            return Err(refuse(format!(
                "it resolves to {}, outside the work directory {} (rule: file tools are confined \
                 to the work directory). Use a path inside it; to work elsewhere, start \
                 tooldispatch with that directory as --workdir",
                resolved.display(),
                self.root.display()
            )));
        }
        if let Some(denied) = self.denied_place_of(&resolved) {
            let place = if denied.resolved == denied.named {
                denied.named.display().to_string()
            } else {
                format!(
                    "{} (where {} leads)",
                    denied.resolved.display(),
                    denied.named.display()
                )
            };
            return Err(refuse(format!(
                "{place} is on the denied list (rule: tooldispatch's own files — rules, store, \
                 trash, spilled results — are never read or changed by tools, wherever a link \
                 puts them). Leave it alone; the user edits those files"
            )));
        }
        if is_sensitive_path(&resolved.to_string_lossy()) && !is_sensitive_path(raw) {
            return Err(refuse(format!(
                "it is a link to {}, a credential file (rule: sensitive files are only touched \
                 when named directly, so the user is asked). Name that path itself if you need it",
                resolved.display()
            )));
        }
        Ok(resolved)
    }

    /// `path` relative to the work directory, for messages (the absolute path if outside).
    pub fn display<'a>(&self, path: &'a Path) -> std::borrow::Cow<'a, str> {
        match path.strip_prefix(&self.root) {
            Ok(rel) if rel.as_os_str().is_empty() => ".".into(),
            Ok(rel) => rel.to_string_lossy(),
            Err(_) => path.to_string_lossy(),
        }
    }
}

/// ELOOP, without a libc dependency: 40 on Linux, 62 on the BSDs and macOS.
fn libc_eloop() -> i32 {
    if cfg!(any(
        target_os = "macos",
        target_os = "freebsd",
        target_os = "openbsd"
    )) {
        62
    } else {
        40
    }
}

/// Canonicalize the longest existing ancestor of `path` (following symlinks), then append the
/// components that do not exist yet, applying their `..` lexically (a directory that does not
/// exist cannot be a symlink). A symlink loop anywhere surfaces as ELOOP.
fn resolve_existing_prefix(path: &Path) -> io::Result<PathBuf> {
    // Walk down from the root component by component so that `a/missing/../b` resolves the
    // same way the kernel would once `missing` exists.
    let mut resolved = PathBuf::new();
    let mut missing = false;
    for component in path.components() {
        match component {
            Component::Prefix(p) => resolved.push(p.as_os_str()),
            Component::RootDir => resolved.push(Component::RootDir.as_os_str()),
            Component::CurDir => {}
            Component::ParentDir => {
                resolved.pop();
                // Back from a part that does not exist into one that may: what follows must be
                // checked for symlinks again (`missing/../link/x` reaches through `link`).
                if missing {
                    missing = std::fs::symlink_metadata(&resolved).is_err();
                }
            }
            Component::Normal(name) => {
                resolved.push(name);
                if missing {
                    continue;
                }
                match std::fs::symlink_metadata(&resolved) {
                    Ok(meta) if meta.file_type().is_symlink() => {
                        resolved = resolved.canonicalize().map_err(|e| {
                            if e.kind() == io::ErrorKind::NotFound {
                                io::Error::new(
                                    e.kind(),
                                    format!(
                                        "{} is a symlink whose target does not exist",
                                        resolved.display()
                                    ),
                                )
                            } else {
                                e
                            }
                        })?;
                    }
                    Ok(_) => {}
                    Err(e) if e.kind() == io::ErrorKind::NotFound => missing = true,
                    Err(e) if e.kind() == io::ErrorKind::NotADirectory => {
                        // `file.txt/x`: the rest can never exist; let the tool report it.
                        missing = true;
                    }
                    Err(e) => return Err(e),
                }
            }
        }
    }
    Ok(resolved)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setup() -> (tempfile::TempDir, Confinement) {
        let dir = tempfile::tempdir().unwrap();
        let c = Confinement::new(dir.path(), &[]).unwrap();
        (dir, c)
    }

    #[test]
    fn relative_and_absolute_paths_inside_resolve() {
        let (_dir, c) = setup();
        std::fs::create_dir(c.root().join("src")).unwrap();
        std::fs::write(c.root().join("src/a.rs"), "x").unwrap();
        assert_eq!(c.resolve("src/a.rs").unwrap(), c.root().join("src/a.rs"));
        assert_eq!(
            c.resolve("./src/../src/a.rs").unwrap(),
            c.root().join("src/a.rs")
        );
        let abs = c.root().join("src/a.rs");
        assert_eq!(c.resolve(abs.to_str().unwrap()).unwrap(), abs);
        assert_eq!(
            c.resolve("new/dir/file.txt").unwrap(),
            c.root().join("new/dir/file.txt")
        );
        assert_eq!(c.resolve(".").unwrap(), c.root());
    }

    #[test]
    fn escapes_are_refused_with_the_rule() {
        let (_dir, c) = setup();
        for raw in ["../x", "/etc/passwd", "src/../../x", "missing/../../x", "/"] {
            let err = c.resolve(raw).unwrap_err().to_string();
            assert!(err.contains("outside the work directory"), "{raw}: {err}");
            assert!(err.contains("--workdir"), "{raw}: {err}");
        }
    }

    #[test]
    fn symlinks_are_followed_before_the_check() {
        let (_dir, c) = setup();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret.txt"), "s").unwrap();
        std::os::unix::fs::symlink(outside.path(), c.root().join("out")).unwrap();
        std::os::unix::fs::symlink(outside.path().join("secret.txt"), c.root().join("f")).unwrap();
        assert!(
            c.resolve("out/secret.txt")
                .unwrap_err()
                .to_string()
                .contains("outside")
        );
        assert!(c.resolve("f").unwrap_err().to_string().contains("outside"));
        assert!(
            c.resolve("out/new.txt")
                .unwrap_err()
                .to_string()
                .contains("outside")
        );
        // A link that stays inside is fine, and resolves to its target.
        std::fs::write(c.root().join("real.txt"), "r").unwrap();
        std::os::unix::fs::symlink(c.root().join("real.txt"), c.root().join("alias")).unwrap();
        assert_eq!(c.resolve("alias").unwrap(), c.root().join("real.txt"));
    }

    #[test]
    fn a_detour_through_a_missing_directory_still_follows_links() {
        let (_dir, c) = setup();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret.txt"), "s").unwrap();
        std::os::unix::fs::symlink(outside.path(), c.root().join("out")).unwrap();
        for raw in [
            "nope/../out/secret.txt",
            "a/b/../../out/new.txt",
            "nope/../out",
        ] {
            let err = c.resolve(raw).unwrap_err().to_string();
            assert!(err.contains("outside the work directory"), "{raw}: {err}");
        }
        std::fs::write(c.root().join(".env"), "K=1").unwrap();
        std::os::unix::fs::symlink(c.root().join(".env"), c.root().join("notes")).unwrap();
        let err = c.resolve("nope/../notes").unwrap_err().to_string();
        assert!(err.contains("credential file"), "{err}");
        assert_eq!(c.resolve("nope/../x.txt").unwrap(), c.root().join("x.txt"));
    }

    #[test]
    fn a_symlink_loop_is_named() {
        let (_dir, c) = setup();
        std::os::unix::fs::symlink("b", c.root().join("a")).unwrap();
        std::os::unix::fs::symlink("a", c.root().join("b")).unwrap();
        let err = c.resolve("a/x").unwrap_err().to_string();
        assert!(err.contains("symlink loop"), "{err}");
    }

    #[test]
    fn denied_places_and_bad_strings_are_refused() {
        let (_dir, c) = setup();
        let err = c.resolve(".tooldispatch/rules").unwrap_err().to_string();
        assert!(err.contains("denied list"), "{err}");
        assert!(c.resolve("").unwrap_err().to_string().contains("empty"));
        assert!(c.resolve("a\0b").unwrap_err().to_string().contains("NUL"));
        assert!(
            c.resolve("~/x")
                .unwrap_err()
                .to_string()
                .contains("not expanded")
        );
        assert!(
            c.resolve(&"a/".repeat(3000))
                .unwrap_err()
                .to_string()
                .contains("limit")
        );
    }

    /// Issue 13's class: however `.tooldispatch` reaches its directory — itself, a link, a
    /// link to a nested directory, a chain of links, a link made after the confinement — every
    /// path into that directory is refused, and the rest of the work directory is not.
    #[test]
    fn the_rules_directory_is_denied_wherever_it_resolves() {
        use std::os::unix::fs::symlink;
        for layout in ["real", "link", "nested", "chain", "late"] {
            let dir = tempfile::tempdir().unwrap();
            let root = dir.path().canonicalize().unwrap();
            let early = Confinement::new(&root, &[]).unwrap();
            let target = match layout {
                "real" => ".tooldispatch",
                "link" | "late" => "cfgdir",
                "nested" => "a/b",
                _ => "cfg",
            };
            std::fs::create_dir_all(root.join(target)).unwrap();
            std::fs::write(root.join(target).join("rules"), "ask *").unwrap();
            match layout {
                "link" | "late" | "nested" => symlink(target, root.join(".tooldispatch")).unwrap(),
                "chain" => {
                    symlink(target, root.join("hop")).unwrap();
                    symlink("hop", root.join(".tooldispatch")).unwrap();
                }
                _ => {}
            }
            let c = if layout == "late" {
                early
            } else {
                Confinement::new(&root, &[]).unwrap()
            };
            for raw in [
                ".tooldispatch/rules".to_string(),
                format!("{target}/rules"),
                format!("{target}/new-rules"),
                target.to_string(),
                format!("missing/../{target}/rules"),
                root.join(target)
                    .join("rules")
                    .to_string_lossy()
                    .into_owned(),
            ] {
                let err = c.resolve(&raw).unwrap_err().to_string();
                assert!(err.contains("denied list"), "{layout} {raw}: {err}");
            }
            assert!(c.resolve("notes.txt").is_ok(), "{layout}");
            assert!(c.resolve("cfgdir-sibling/x").is_ok(), "{layout}");
        }
    }

    #[test]
    fn a_link_to_a_credential_file_must_be_named_directly() {
        let (_dir, c) = setup();
        std::fs::write(c.root().join(".env"), "KEY=1").unwrap();
        std::os::unix::fs::symlink(c.root().join(".env"), c.root().join("notes.txt")).unwrap();
        let err = c.resolve("notes.txt").unwrap_err().to_string();
        assert!(err.contains("credential file"), "{err}");
        assert_eq!(c.resolve(".env").unwrap(), c.root().join(".env"));
    }

    #[test]
    fn extra_denied_paths_inside_the_root_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("data")).unwrap();
        let c = Confinement::new(dir.path(), &[dir.path().join("data")]).unwrap();
        assert!(
            c.resolve("data/store.db")
                .unwrap_err()
                .to_string()
                .contains("denied")
        );
        assert!(c.resolve("database.txt").is_ok());
    }
}
