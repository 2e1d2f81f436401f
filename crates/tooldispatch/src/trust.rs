//! Trusted work directories: a directory's own `.tooldispatch/rules` (and, later, its tools)
//! count only after the user trusts it with `tooldispatch trust`, so a cloned repository
//! cannot grant itself permissions.
//!
//! The list lives beside the config file, in `$XDG_CONFIG_HOME/tooldispatch/trusted` (else
//! `~/.config/tooldispatch/trusted`): one absolute, resolved directory per line. Trust is for
//! that directory exactly, not for what is below it: trusting `~/code` must not trust every
//! repository cloned into it later.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use clap::Args;

use crate::CliError;

#[derive(Args)]
pub struct TrustArgs {
    /// The directory to trust (default: the current directory).
    dir: Option<PathBuf>,
    /// Print the trusted directories, one per line.
    #[arg(long, conflicts_with_all = ["dir", "remove"])]
    list: bool,
    /// Stop trusting this directory.
    #[arg(long, value_name = "DIR", conflicts_with = "dir")]
    remove: Option<PathBuf>,
}

/// Where the list is kept.
pub fn list_path() -> Option<PathBuf> {
    Some(crate::config::default_path()?.with_file_name("trusted"))
}

fn read_list(path: &Path) -> Result<Vec<PathBuf>, CliError> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .map(PathBuf::from)
            .collect()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(CliError::failed(format!(
            "cannot read the trusted directories from {}: {e}",
            path.display()
        ))),
    }
}

fn write_list(path: &Path, dirs: &[PathBuf]) -> Result<(), CliError> {
    let fail =
        |e: std::io::Error| CliError::failed(format!("cannot write {}: {e}", path.display()));
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(fail)?;
    }
    let tmp = path.with_extension("tmp");
    let mut file = std::fs::File::create(&tmp).map_err(fail)?;
    writeln!(
        file,
        "# Work directories whose .tooldispatch/ rules and tools are used (tooldispatch trust)."
    )
    .map_err(fail)?;
    for dir in dirs {
        writeln!(file, "{}", dir.display()).map_err(fail)?;
    }
    drop(file);
    std::fs::rename(&tmp, path).map_err(fail)
}

/// The user trusts `workdir` (already resolved).
pub fn is_trusted(workdir: &Path) -> bool {
    list_path()
        .and_then(|path| read_list(&path).ok())
        .is_some_and(|dirs| dirs.iter().any(|d| d == workdir))
}

fn resolve(dir: &Path) -> Result<PathBuf, CliError> {
    dir.canonicalize()
        .map_err(|e| CliError::input(format!("{} is not a usable directory: {e}", dir.display())))
}

pub fn run(args: TrustArgs) -> Result<(), CliError> {
    let path = list_path().ok_or_else(|| {
        CliError::failed("neither XDG_CONFIG_HOME nor HOME is set, so there is no place to keep the trusted directories")
    })?;
    let mut dirs = read_list(&path)?;
    if args.list {
        for dir in &dirs {
            crate::print_line(&dir.display().to_string());
        }
        return Ok(());
    }
    if let Some(dir) = args.remove {
        // A directory that no longer exists can still be removed by the name it was trusted as.
        let dir = dir.canonicalize().unwrap_or(dir);
        let before = dirs.len();
        dirs.retain(|d| *d != dir);
        if dirs.len() == before {
            return Err(CliError::input(format!(
                "{} is not trusted; `tooldispatch trust --list` shows the trusted directories",
                dir.display()
            )));
        }
        write_list(&path, &dirs)?;
        eprintln!("tooldispatch: no longer trusted: {}", dir.display());
        return Ok(());
    }
    let dir =
        match args.dir {
            Some(dir) => resolve(&dir)?,
            None => resolve(&std::env::current_dir().map_err(|e| {
                CliError::failed(format!("cannot read the current directory: {e}"))
            })?)?,
        };
    if !dir.is_dir() {
        return Err(CliError::input(format!(
            "{} is not a directory",
            dir.display()
        )));
    }
    if !dirs.contains(&dir) {
        dirs.push(dir.clone());
        write_list(&path, &dirs)?;
    }
    eprintln!(
        "tooldispatch: trusted {}: its .tooldispatch/rules now apply",
        dir.display()
    );
    Ok(())
}
