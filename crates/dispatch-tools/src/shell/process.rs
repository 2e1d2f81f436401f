//! Starting a command and stopping it together with everything it started, shared by
//! run_command and background_command.
//!
//! Why a process group: a command's children (a build's compilers, `cmd &`, a test runner's
//! workers) outlive it when only the command is killed, keep its output pipes open and keep
//! changing files. Every command therefore leads its own process group, and stopping it signals
//! the whole group: SIGTERM, a short grace, then SIGKILL for whatever ignored it. If the call is
//! dropped instead of finishing (the engine's timeout or a cancelled round), [`Group`]'s `Drop`
//! does the same from a helper thread.
//!
//! Why a scrubbed environment: the dispatcher's own environment often holds API keys and
//! tokens, and a command's output goes back to the model. Variables that look like secrets are
//! withheld unless the call names them in `pass_env`.
//!
//! Why a sandbox: whether a command may run without asking is judged from its argv, and that
//! judgment can be wrong. Every command therefore runs in the OS sandbox (`dispatch-sandbox`):
//! one judged read-only in the read-only sandbox, any other in the workspace sandbox, so a
//! wrong judgment cannot write or reach the network. The program is looked up here against
//! absolute PATH entries only: a relative entry (`node_modules/.bin`, `.`, an empty one) would
//! let the work directory, which the model controls, choose what runs.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dispatch_engine::{ToolContext, ToolError};
use dispatch_sandbox::{CgroupGuard, Level, Limits, Policy, Sandbox};
use rustix::process::{Pid, Signal};
use tokio::io::AsyncReadExt;
use tokio::process::{Child, ChildStderr, ChildStdout};

use crate::files::confine::Confinement;

/// Most argv items.
pub const MAX_ARGV_ITEMS: usize = 256;
/// Longest single argv item, in bytes.
pub const MAX_ARG_BYTES: usize = 32 * 1024;
/// Most bytes of all argv items together.
pub const MAX_ARGV_BYTES: usize = 256 * 1024;
/// Most variables in `env`, and most names in `pass_env`.
pub const MAX_ENV_ITEMS: usize = 64;
/// Longest variable name.
pub const MAX_ENV_NAME_BYTES: usize = 128;
/// Longest value of a variable set through `env`.
pub const MAX_ENV_VALUE_BYTES: usize = 32 * 1024;
/// How long a process group has between SIGTERM and SIGKILL.
pub const GRACE: Duration = Duration::from_secs(2);
/// Most `write_paths` entries.
pub const MAX_WRITE_PATHS: usize = 32;
/// PATH when the command's environment has none.
const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// The sandbox commands run in, and what it hides besides its defaults.
#[derive(Clone, Default)]
pub struct SandboxConfig {
    /// `None`: the machine's sandbox, detected once per process ([`Sandbox::shared`]).
    sandbox: Option<Arc<Sandbox>>,
    /// Paths hidden besides the defaults and the data dir: the store file and its `.key`.
    pub hidden: Vec<PathBuf>,
    pub limits: Limits,
}

impl SandboxConfig {
    /// Use `sandbox` (tests inject one; `Sandbox::off()` runs commands unconfined).
    pub fn new(sandbox: Arc<Sandbox>) -> SandboxConfig {
        SandboxConfig {
            sandbox: Some(sandbox),
            ..SandboxConfig::default()
        }
    }

    /// Hide `paths` too (the store file and its key when they lie outside the data dir).
    pub fn with_hidden(mut self, paths: Vec<PathBuf>) -> SandboxConfig {
        self.hidden = paths;
        self
    }

    pub fn sandbox(&self) -> Arc<Sandbox> {
        self.sandbox.clone().unwrap_or_else(Sandbox::shared)
    }
}

/// Whether a prepared command runs in the read-only sandbox: the same judgement the gate
/// made from the call's subject ([`super::readonly::judge`]), on the confined working
/// directory. A shell line, a call asking for the network or one declaring write paths is
/// never read-only.
pub fn judged_read_only(
    prepared: &Prepared,
    shell: bool,
    extra: &super::readonly::ReadOnlyCommands,
) -> bool {
    if shell || prepared.network || !prepared.write_paths.is_empty() {
        return false;
    }
    let skip = if prepared.hardened {
        super::git::overrides().len()
    } else {
        0
    };
    let argv: Vec<String> = std::iter::once(prepared.named.clone())
        .chain(prepared.args.iter().skip(skip).cloned())
        .collect();
    super::readonly::judge(&argv, &prepared.cwd, &prepared.workdir, extra).read_only
}

impl SandboxConfig {
    /// Why no OS sandbox holds a command's read-only judgement here, when one cannot be set
    /// up; `None` when it can, or when the user turned it off on purpose (`[sandbox] mode`).
    pub fn missing(&self) -> Option<String> {
        match self.sandbox().availability() {
            dispatch_sandbox::Availability::Unavailable { reason } => Some(reason.clone()),
            _ => None,
        }
    }
}

/// The command-line arguments run_command and background_command share, as sent.
pub struct CommandArgs<'a> {
    pub argv: &'a [String],
    pub cwd: Option<&'a str>,
    pub shell: bool,
    pub env: Option<&'a BTreeMap<String, String>>,
    pub pass_env: Option<&'a [String]>,
    /// The command may use the network (workspace sandbox only).
    pub network: bool,
    /// Paths beneath the work directory the command declares it writes.
    pub write_paths: Option<&'a [String]>,
}

/// A checked command, ready to spawn.
#[derive(Debug)]
pub struct Prepared {
    /// Absolute: resolved against absolute PATH entries, or against cwd.
    program: PathBuf,
    /// The program as the model named it (`./script.sh`, not the path it was resolved to), so
    /// a message suggests an argv the model can send back as it is.
    named: String,
    /// git's config overrides lead `args` (they are not the model's words).
    hardened: bool,
    args: Vec<String>,
    pub cwd: PathBuf,
    /// The working directory relative to the work directory, for messages.
    pub cwd_display: String,
    env: Vec<(OsString, OsString)>,
    /// Inherited variables withheld because they look like secrets (names only).
    pub withheld: Vec<String>,
    /// The command as the model wrote it, clipped, for messages.
    pub display: String,
    /// The resolved work directory.
    workdir: PathBuf,
    data_dir: Option<PathBuf>,
    /// Declared write paths, resolved beneath the work directory.
    pub write_paths: Vec<PathBuf>,
    /// The same, relative to the work directory, for messages.
    pub write_paths_display: Vec<String>,
    pub network: bool,
    /// Folders shown read-only inside the sandbox, `(outside, inside)` (a script tool's own).
    pub read_only_binds: Vec<(PathBuf, PathBuf)>,
}

impl Prepared {
    /// A script tool's command, checked when its definition was loaded (a draft's may be the
    /// model's own): `program` is absolute, it runs in the work directory with `env` (already
    /// scrubbed; its PATH keeps only absolute entries, so no program of the work directory is
    /// picked up by name), and sees `read_only_binds`.
    pub fn declared(
        cx: &ToolContext,
        program: PathBuf,
        args: Vec<String>,
        env: Vec<(OsString, OsString)>,
        network: bool,
        read_only_binds: Vec<(PathBuf, PathBuf)>,
    ) -> Result<Prepared, ToolError> {
        let confinement = Confinement::for_call(cx)?;
        let workdir = confinement.root().to_path_buf();
        let mut env = env;
        absolute_path(&mut env);
        let mut display = std::iter::once(program.display().to_string())
            .chain(args.iter().map(|a| quote(a)))
            .collect::<Vec<_>>()
            .join(" ");
        clip(&mut display, 300);
        Ok(Prepared {
            named: program.display().to_string(),
            program,
            hardened: false,
            args,
            cwd: workdir.clone(),
            cwd_display: ".".into(),
            env,
            withheld: Vec::new(),
            display,
            workdir,
            data_dir: cx.data_dir.as_deref().map(Path::to_path_buf),
            write_paths: Vec::new(),
            write_paths_display: Vec::new(),
            network,
            read_only_binds,
        })
    }
}

/// Check the arguments, confine the working directory and build the environment.
/// `parent_env` is what the command would inherit.
pub fn prepare(
    cx: &ToolContext,
    args: CommandArgs<'_>,
    parent_env: &[(OsString, OsString)],
) -> Result<Prepared, ToolError> {
    check_argv(args.argv, args.shell)?;
    let extra = check_env(args.env)?;
    let pass = check_pass_env(args.pass_env)?;
    let confinement = Confinement::for_call(cx)?;
    let cwd = match args.cwd.map(str::trim) {
        None | Some("") | Some(".") => confinement.root().to_path_buf(),
        Some(raw) => confinement
            .resolve(raw)
            .map_err(|e| ToolError::failed(format!("cwd: {e}")))?,
    };
    let cwd_display = confinement.display(&cwd).into_owned();
    let (write_paths, write_paths_display) = resolve_write_paths(&confinement, args.write_paths)?;
    match std::fs::metadata(&cwd) {
        Ok(meta) if meta.is_dir() => {}
        Ok(_) => {
            return Err(ToolError::failed(format!(
                "cwd {cwd_display:?} is a file, not a directory; give a directory inside the work directory or omit cwd"
            )));
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(ToolError::failed(format!(
                "cwd {cwd_display:?} does not exist; create it first (for example with [\"mkdir\", \"-p\", {cwd_display:?}]) or omit cwd to run in the work directory"
            )));
        }
        Err(e) => {
            return Err(ToolError::failed(format!(
                "cwd {cwd_display:?} cannot be used: {e}"
            )));
        }
    }

    let (mut env, withheld) = child_env(parent_env, &pass);
    for (name, value) in extra {
        env.retain(|(n, _)| n != name.as_str());
        env.push((name.into(), value.into()));
    }
    env.retain(|(n, _)| n != "PWD");
    env.push(("PWD".into(), cwd.clone().into_os_string()));
    // Nested lookups (make → cc, npm → node) must not depend on the cwd either.
    let path = absolute_path(&mut env);

    let mut hardened = false;
    let (program, rest): (PathBuf, Vec<String>) = if args.shell {
        let line = args.argv.first().cloned().unwrap_or_default();
        ("/bin/sh".into(), vec!["-c".to_string(), line])
    } else {
        let first = args.argv.first().map(String::as_str).unwrap_or_default();
        (
            find_program(first, &cwd, &cwd_display, &path)?,
            args.argv.iter().skip(1).cloned().collect(),
        )
    };

    let mut display = if args.shell {
        format!(
            "sh -c {:?}",
            args.argv.first().map(String::as_str).unwrap_or("")
        )
    } else {
        args.argv
            .iter()
            .map(|a| quote(a))
            .collect::<Vec<_>>()
            .join(" ")
    };
    clip(&mut display, 300);
    let named = if args.shell {
        "/bin/sh".to_string()
    } else {
        args.argv.first().cloned().unwrap_or_default()
    };
    // git never runs what the repository's own config names (see `git.rs`).
    let mut rest = rest;
    if !args.shell && super::git::is_git(&program) {
        rest.splice(0..0, super::git::overrides());
        hardened = true;
    }
    if hardened {
        for (name, value) in super::git::ENV {
            env.retain(|(n, _)| n != name);
            env.push((name.into(), value.into()));
        }
    }
    Ok(Prepared {
        program,
        named,
        hardened,
        args: rest,
        cwd,
        cwd_display,
        env,
        withheld,
        display,
        workdir: confinement.root().to_path_buf(),
        data_dir: cx.data_dir.as_deref().map(Path::to_path_buf),
        write_paths,
        write_paths_display,
        network: args.network,
        read_only_binds: Vec::new(),
    })
}

fn resolve_write_paths(
    confinement: &Confinement,
    raw: Option<&[String]>,
) -> Result<(Vec<PathBuf>, Vec<String>), ToolError> {
    let raw = raw.unwrap_or_default();
    if raw.len() > MAX_WRITE_PATHS {
        return Err(ToolError::failed(format!(
            "write_paths has {} entries, over the limit of {MAX_WRITE_PATHS}; name the directories that contain them",
            raw.len()
        )));
    }
    let mut paths = Vec::with_capacity(raw.len());
    let mut shown = Vec::with_capacity(raw.len());
    for entry in raw {
        let path = confinement
            .resolve(entry)
            .map_err(|e| ToolError::failed(format!("write_paths: {e}")))?;
        shown.push(confinement.display(&path).into_owned());
        paths.push(path);
    }
    Ok((paths, shown))
}

/// Replace `env`'s PATH (the default when it has none) by its absolute entries only, and
/// return the PATH it had, for looking the program up.
fn absolute_path(env: &mut Vec<(OsString, OsString)>) -> OsString {
    let path = env
        .iter()
        .find(|(n, _)| n == "PATH")
        .map(|(_, v)| v.clone())
        .unwrap_or_else(|| DEFAULT_PATH.into());
    env.retain(|(n, _)| n != "PATH");
    env.push(("PATH".into(), absolute_path_entries(&path)));
    path
}

/// `path` without its relative entries (`.`, `node_modules/.bin`, empty ones).
fn absolute_path_entries(path: &std::ffi::OsStr) -> OsString {
    std::env::join_paths(std::env::split_paths(path).filter(|p| p.is_absolute()))
        .unwrap_or_default()
}

/// The program `first` names: a path (relative to cwd) or a name looked up in the absolute
/// entries of `path`. Checked here, because inside the sandbox a failed exec would only be a
/// line from bwrap.
fn find_program(
    first: &str,
    cwd: &Path,
    cwd_display: &str,
    path: &std::ffi::OsStr,
) -> Result<PathBuf, ToolError> {
    use std::os::unix::fs::PermissionsExt;
    if first.contains('/') {
        // A relative path names a file in the command's directory, whatever directory the
        // dispatcher itself runs in.
        let program = cwd.join(first);
        let meta = match std::fs::metadata(&program) {
            Ok(meta) => meta,
            Err(e) => return Err(program_error(&e, first, cwd_display)),
        };
        if meta.is_dir() || meta.permissions().mode() & 0o111 == 0 {
            return Err(program_error(
                &io::Error::from(io::ErrorKind::PermissionDenied),
                first,
                cwd_display,
            ));
        }
        if !executable_format(&program) {
            return Err(program_error(
                &io::Error::from_raw_os_error(8),
                first,
                cwd_display,
            ));
        }
        return Ok(program);
    }
    let executable = |p: &Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    let entries: Vec<PathBuf> = std::env::split_paths(path).collect();
    if let Some(found) = entries
        .iter()
        .filter(|d| d.is_absolute())
        .map(|d| d.join(first))
        .find(|p| executable(p))
    {
        return Ok(found);
    }
    let relative = entries
        .iter()
        .filter(|d| !d.is_absolute())
        .find(|d| executable(&cwd.join(d).join(first)));
    Err(ToolError::failed(match relative {
        Some(dir) => {
            let shown = if dir.as_os_str().is_empty() {
                first.to_string()
            } else {
                format!("{}/{first}", dir.display())
            };
            format!(
                "command not found: {first:?} is only in the relative PATH entry {:?}, and relative PATH entries are ignored (they would let the work directory choose the program); give its path, e.g. [\"./{}\"]",
                dir.display(),
                shown.trim_start_matches("./")
            )
        }
        None => format!(
            "command not found: {first:?} is not on PATH. Check the spelling, give its path (e.g. \"./{first}\" for a script in cwd), or install it first"
        ),
    }))
}

/// A `#!` script or an ELF binary: what the kernel runs without ENOEXEC.
fn executable_format(program: &Path) -> bool {
    use std::io::Read;
    let mut magic = [0u8; 4];
    let Ok(mut file) = std::fs::File::open(program) else {
        // Execute-only files cannot be read; let exec decide.
        return true;
    };
    let n = file.read(&mut magic).unwrap_or(0);
    let magic = magic.get(..n).unwrap_or_default();
    magic.starts_with(b"#!") || magic.starts_with(b"\x7fELF")
}

fn check_argv(argv: &[String], shell: bool) -> Result<(), ToolError> {
    let Some(first) = argv.first() else {
        return Err(ToolError::failed(
            "argv is empty; give the program and its arguments, one item each, e.g. [\"ls\", \"-la\"]",
        ));
    };
    if argv.len() > MAX_ARGV_ITEMS {
        return Err(ToolError::failed(format!(
            "argv has {} items, over the limit of {MAX_ARGV_ITEMS}; pass long file lists through a file or a glob the program expands",
            argv.len()
        )));
    }
    let mut total = 0;
    for (i, arg) in argv.iter().enumerate() {
        if arg.len() > MAX_ARG_BYTES {
            return Err(ToolError::failed(format!(
                "argv[{i}] is {} bytes, over the limit of {MAX_ARG_BYTES}; write long input to a file (or send it as stdin) and pass its path",
                arg.len()
            )));
        }
        if arg.contains('\0') {
            return Err(ToolError::failed(format!(
                "argv[{i}] contains a NUL byte, which no program can receive; remove it"
            )));
        }
        total += arg.len();
    }
    if total > MAX_ARGV_BYTES {
        return Err(ToolError::failed(format!(
            "argv totals {total} bytes, over the limit of {MAX_ARGV_BYTES}; write long input to a file and pass its path"
        )));
    }
    if shell {
        if argv.len() != 1 {
            return Err(ToolError::failed(format!(
                "with shell=true, argv must be exactly one string (the command line for sh -c), got {} items; join them into one line or drop shell and pass the words as argv",
                argv.len()
            )));
        }
        if first.trim().is_empty() {
            return Err(ToolError::failed(
                "the shell command line is empty; give the command to run",
            ));
        }
        return Ok(());
    }
    if first.trim().is_empty() {
        return Err(ToolError::failed(
            "argv[0] is empty; it must name the program to run, e.g. [\"ls\", \"-la\"]",
        ));
    }
    // A path may hold spaces (`./my script.sh`); a bare word with spaces is a command line.
    let is_path = first.starts_with('/') || first.starts_with("./") || first.starts_with("../");
    if first.trim() != first || (first.contains(char::is_whitespace) && !is_path) {
        let words: Vec<&str> = first.split_whitespace().collect();
        return Err(ToolError::failed(format!(
            "argv[0] {first:?} contains spaces, but no shell splits it: pass each word as its own item, e.g. {words:?} (or set shell=true for a shell command line, which always asks the user)"
        )));
    }
    Ok(())
}

fn valid_env_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn check_env(env: Option<&BTreeMap<String, String>>) -> Result<Vec<(String, String)>, ToolError> {
    let Some(env) = env else {
        return Ok(Vec::new());
    };
    if env.len() > MAX_ENV_ITEMS {
        return Err(ToolError::failed(format!(
            "env has {} variables, over the limit of {MAX_ENV_ITEMS}",
            env.len()
        )));
    }
    let mut out = Vec::with_capacity(env.len());
    for (name, value) in env {
        if name.len() > MAX_ENV_NAME_BYTES || !valid_env_name(name) {
            let mut shown = name.clone();
            clip(&mut shown, 60);
            return Err(ToolError::failed(format!(
                "env name {shown:?} is not a valid variable name: use letters, digits and _ (not starting with a digit), at most {MAX_ENV_NAME_BYTES} bytes"
            )));
        }
        if value.len() > MAX_ENV_VALUE_BYTES {
            return Err(ToolError::failed(format!(
                "env {name} is {} bytes, over the limit of {MAX_ENV_VALUE_BYTES}; put long values in a file",
                value.len()
            )));
        }
        if value.contains('\0') {
            return Err(ToolError::failed(format!(
                "env {name} contains a NUL byte, which no program can receive; remove it"
            )));
        }
        out.push((name.clone(), value.clone()));
    }
    Ok(out)
}

/// A `pass_env` entry: a variable name, or a prefix ending in `*` (`AWS_*`).
#[derive(Debug)]
pub struct PassName {
    name: String,
    prefix: bool,
}

impl PassName {
    fn matches(&self, name: &str) -> bool {
        if self.prefix {
            name.starts_with(&self.name)
        } else {
            name == self.name
        }
    }
}

fn check_pass_env(pass: Option<&[String]>) -> Result<Vec<PassName>, ToolError> {
    let Some(pass) = pass else {
        return Ok(Vec::new());
    };
    if pass.len() > MAX_ENV_ITEMS {
        return Err(ToolError::failed(format!(
            "pass_env has {} names, over the limit of {MAX_ENV_ITEMS}; a prefix such as \"AWS_*\" covers a family",
            pass.len()
        )));
    }
    let mut out = Vec::with_capacity(pass.len());
    for entry in pass {
        let (name, prefix) = match entry.strip_suffix('*') {
            Some(stem) => (stem, true),
            None => (entry.as_str(), false),
        };
        // A bare `*` or a one-letter prefix would pass every secret at once.
        let too_broad = prefix && name.len() < 2;
        if too_broad || name.len() > MAX_ENV_NAME_BYTES || !valid_env_name(name) {
            let mut shown = entry.clone();
            clip(&mut shown, 60);
            return Err(ToolError::failed(format!(
                "pass_env entry {shown:?} is not a variable name or a prefix like \"AWS_*\" (at least 2 characters before the *)"
            )));
        }
        out.push(PassName {
            name: name.to_string(),
            prefix,
        });
    }
    Ok(out)
}

/// Words of a variable name that mark it as a secret (the name is split at `_`).
const SECRET_WORDS: &[&str] = &[
    "KEY", "KEYS", "AUTH", "PASS", "PAT", "PW", "PWD", "JWT", "DSN", "WEBHOOK",
];
/// Fragments anywhere in a name that mark it as a secret.
const SECRET_FRAGMENTS: &[&str] = &[
    "TOKEN",
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "PASSPHRASE",
    "CREDENTIAL",
    "APIKEY",
    "ACCESSKEY",
    "PRIVATEKEY",
    "COOKIE",
    "CONNECTION_STRING",
    "CONNECTIONSTRING",
];
/// Value prefixes of well-known API keys, whatever the variable is called.
const SECRET_VALUE_PREFIXES: &[&str] = &[
    "sk-",
    "sk_live_",
    "ghp_",
    "gho_",
    "ghs_",
    "github_pat_",
    "glpat-",
    "xoxb-",
    "xoxp-",
    "AKIA",
    "AIza",
];
/// Prefixes of whole families of credentials.
const SECRET_PREFIXES: &[&str] = &["AWS_", "AZURE_", "GCP_", "GOOGLE_"];
/// Variables that match a rule above but hold no secret and that programs rely on.
const NOT_SECRET: &[&str] = &["PWD", "OLDPWD"];

/// True when an inherited variable looks like it holds a secret: by its name (case-insensitive)
/// or because its value is a URL carrying a user or password (`https://u:p@host`).
pub fn looks_secret(name: &str, value: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    if NOT_SECRET.contains(&upper.as_str()) {
        return false;
    }
    upper.split('_').any(|word| SECRET_WORDS.contains(&word))
        || SECRET_FRAGMENTS.iter().any(|f| upper.contains(f))
        || SECRET_PREFIXES.iter().any(|p| upper.starts_with(p))
        || url_with_userinfo(value)
        || SECRET_VALUE_PREFIXES
            .iter()
            .any(|p| value.starts_with(p) && value.len() >= p.len() + 16)
}

fn url_with_userinfo(value: &str) -> bool {
    let Some((scheme, rest)) = value.split_once("://") else {
        return false;
    };
    let scheme_ok = !scheme.is_empty()
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    scheme_ok && authority.contains('@')
}

/// The environment a command gets: `parent` without the variables that look like secrets
/// (unless `pass` names them), and the withheld names, sorted.
pub fn child_env(
    parent: &[(OsString, OsString)],
    pass: &[PassName],
) -> (Vec<(OsString, OsString)>, Vec<String>) {
    let mut kept = Vec::with_capacity(parent.len());
    let mut withheld = Vec::new();
    for (name, value) in parent {
        let name_text = name.to_string_lossy();
        let secret = looks_secret(&name_text, &value.to_string_lossy());
        if secret && !pass.iter().any(|p| p.matches(&name_text)) {
            withheld.push(name_text.into_owned());
        } else {
            kept.push((name.clone(), value.clone()));
        }
    }
    withheld.sort();
    (kept, withheld)
}

/// This process's environment, which commands inherit (scrubbed) by default.
pub fn process_env() -> Vec<(OsString, OsString)> {
    std::env::vars_os().collect()
}

/// The sandbox policy `prepared` runs under at `level`: the default hidden paths, the data
/// dir, the config's extras (store file, key) and `<workdir>/.tooldispatch`.
pub fn policy(prepared: &Prepared, config: &SandboxConfig, level: Level) -> Policy {
    let mut policy = Policy::new(level, &prepared.workdir);
    policy.hidden.extend(prepared.data_dir.iter().cloned());
    policy.hidden.extend(config.hidden.iter().cloned());
    policy.write_paths = prepared.write_paths.clone();
    policy.network = prepared.network;
    policy.read_only_binds = prepared.read_only_binds.clone();
    policy.limits = config.limits;
    policy
}

/// Start the command in its own process group, in the read-only sandbox when `read_only`, the
/// workspace sandbox otherwise; unconfined when the machine has no sandbox (or it is off).
/// Its stdout and stderr are piped; stdin is piped when `stdin` is true, otherwise it reads
/// nothing (`/dev/null`).
pub fn spawn(
    prepared: &Prepared,
    stdin: bool,
    config: &SandboxConfig,
    read_only: bool,
) -> Result<(Child, Group), ToolError> {
    let sandbox = config.sandbox();
    let level = if read_only {
        Level::ReadOnly
    } else {
        Level::Workspace
    };
    let mut confined = None;
    let mut command = if sandbox.available() {
        let policy = policy(prepared, config, level);
        let args: Vec<OsString> = prepared.args.iter().map(OsString::from).collect();
        let wrapped = sandbox
            .wrap(&policy, &prepared.program, &args, &prepared.cwd)
            .map_err(|e| ToolError::failed(format!("cannot start the sandbox: {e}")))?;
        let mut command = tokio::process::Command::new(&wrapped.program);
        command.args(&wrapped.args);
        confined = Some(Confined {
            policy,
            cgroup: wrapped.cgroup,
        });
        command
    } else {
        let mut command = tokio::process::Command::new(&prepared.program);
        command.args(&prepared.args);
        command
    };
    command
        .current_dir(&prepared.cwd)
        .env_clear()
        .envs(prepared.env.iter().map(|(k, v)| (k, v)))
        .process_group(0)
        .stdin(if stdin { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // The group is stopped by `Group`, not just the leader.
        .kill_on_drop(false);
    let child = command.spawn().map_err(|e| spawn_error(&e, prepared))?;
    let mut group = Group::new(child.id());
    group.confined = confined;
    Ok((child, group))
}

fn spawn_error(e: &io::Error, prepared: &Prepared) -> ToolError {
    program_error(e, &prepared.named, &prepared.cwd_display)
}

fn program_error(e: &io::Error, program: &str, cwd_display: &str) -> ToolError {
    let message = match e.kind() {
        io::ErrorKind::NotFound if program.contains('/') => format!(
            "cannot run {program:?}: no such file. Check the path (relative paths start in cwd {cwd_display:?}) or list the directory first"
        ),
        io::ErrorKind::NotFound => format!(
            "command not found: {program:?} is not on PATH. Check the spelling, give its path (e.g. \"./{program}\" for a script in cwd), or install it first"
        ),
        io::ErrorKind::PermissionDenied => format!(
            "cannot run {program:?}: permission denied (not executable, or a directory). Make it executable with [\"chmod\", \"+x\", \"{program}\"] or run it through its interpreter, e.g. [\"sh\", \"{program}\"]"
        ),
        // ENOEXEC: a file without a #! line or for another machine.
        _ if e.raw_os_error() == Some(8) => format!(
            "cannot run {program:?}: not an executable format (a script without a #! line?). Run it through its interpreter, e.g. [\"sh\", \"{program}\"] or [\"python3\", \"{program}\"]"
        ),
        _ => format!("cannot start {program:?}: {e}"),
    };
    ToolError::failed(message)
}

/// A command running in the sandbox: its policy, and its process-limit cgroup (removed,
/// with anything left in it, when the group drops).
struct Confined {
    policy: Policy,
    cgroup: Option<CgroupGuard>,
}

/// The last bytes of a command's stderr, where the sandbox's refusals show.
#[derive(Default)]
pub struct StderrTail(Vec<u8>);

impl StderrTail {
    const CAP: usize = 8 * 1024;

    pub fn push(&mut self, chunk: &[u8]) {
        self.0.extend_from_slice(chunk);
        let over = self.0.len().saturating_sub(Self::CAP);
        self.0.drain(..over);
    }

    pub fn bytes(&self) -> &[u8] {
        &self.0
    }
}

/// The process group of a running command. Dropping it while armed stops the group.
///
/// A sandboxed command's group holds the outer `bwrap` only (the sandbox runs in a session of
/// its own); killing it makes the sandbox's PID 1 die, and the kernel then kills everything in
/// the sandbox's PID namespace, so stopping the group still stops everything. The SIGTERM of
/// [`Group::stop`] goes to the processes in the command's cgroup instead, so they get their
/// grace; without a cgroup a sandboxed command is stopped at once.
pub struct Group {
    pgid: Option<Pid>,
    confined: Option<Confined>,
}

/// How a group ended when it was stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stopped {
    /// Nothing was left in the group.
    Empty,
    /// Everything left ended after SIGTERM.
    Terminated,
    /// Something ignored SIGTERM for the whole grace and got SIGKILL.
    Killed,
}

impl Group {
    fn new(pid: Option<u32>) -> Group {
        let pgid = pid
            .and_then(|p| i32::try_from(p).ok())
            .and_then(Pid::from_raw)
            .filter(|p| safe_target(*p));
        Group {
            pgid,
            confined: None,
        }
    }

    /// SIGTERM what runs: the group, or, for a sandboxed command with a cgroup, every process
    /// inside the sandbox but the outer bwrap — which would die of it at once and take the
    /// sandbox down with SIGKILL, leaving no grace. (The sandbox's PID 1 ignores a SIGTERM from
    /// outside; it exits when the command does.) False when nothing is left.
    fn terminate(&self, pgid: Pid) -> bool {
        let cgroup = self.confined.as_ref().and_then(|c| c.cgroup.as_ref());
        match cgroup {
            Some(cgroup) if alive(pgid) => {
                for pid in cgroup.members() {
                    if pid != pgid.as_raw_pid()
                        && let Some(pid) = Pid::from_raw(pid).filter(|p| safe_target(*p))
                    {
                        let _ = rustix::process::kill_process(pid, Signal::TERM);
                    }
                }
                true
            }
            _ => signal(pgid, Signal::TERM),
        }
    }

    /// The command's status as if it were our child: bwrap reports a command killed by
    /// signal N as exit code 128 + N, which is turned back into that signal.
    pub fn reported_status(&self, status: ExitStatus) -> ExitStatus {
        use std::os::unix::process::ExitStatusExt;
        match status.code() {
            Some(code @ 129..=159) if self.confined.is_some() => ExitStatus::from_raw(code - 128),
            _ => status,
        }
    }

    /// The sandbox level the command runs at (`None`: unconfined).
    pub fn level(&self) -> Option<Level> {
        self.confined.as_ref().map(|c| c.policy.level)
    }

    /// A `sandbox: …` line when the way the command ended points at the sandbox (a refused
    /// write or connection, a limit).
    pub fn sandbox_note(&self, status: Option<ExitStatus>, stderr: &[u8]) -> Option<String> {
        let confined = self.confined.as_ref()?;
        let status = status?;
        if status.success() {
            return None;
        }
        dispatch_sandbox::explain(&confined.policy, status, stderr)
    }

    /// The group id (the command's pid) while the group is armed.
    pub fn id(&self) -> Option<i32> {
        self.pgid.map(Pid::as_raw_pid)
    }

    /// SIGTERM the group, wait up to [`GRACE`] for it to empty (reaping `child`, the leader,
    /// so it does not linger as a zombie member), then SIGKILL what is left. Disarms the guard.
    pub async fn stop(&mut self, child: &mut Child) -> Stopped {
        let Some(pgid) = self.pgid else {
            return Stopped::Empty;
        };
        if !self.terminate(pgid) {
            self.pgid = None;
            let _ = child.try_wait();
            return Stopped::Empty;
        }
        let deadline = Instant::now() + GRACE;
        loop {
            let _ = child.try_wait();
            if !alive(pgid) {
                self.pgid = None;
                return Stopped::Terminated;
            }
            if Instant::now() >= deadline {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        signal(pgid, Signal::KILL);
        self.pgid = None;
        let _ = tokio::time::timeout(Duration::from_secs(1), child.wait()).await;
        Stopped::Killed
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        if let Some(pgid) = self.pgid.take() {
            stop_in_background(pgid);
        }
    }
}

/// Never signal pid 1 (`kill(-1)` reaches every process) or our own group.
fn safe_target(pgid: Pid) -> bool {
    pgid.as_raw_pid() > 1 && pgid != rustix::process::getpgrp() && pgid != rustix::process::getpid()
}

/// Signal every process in the group; false when the group no longer exists.
fn signal(pgid: Pid, sig: Signal) -> bool {
    if !safe_target(pgid) {
        return false;
    }
    match rustix::process::kill_process_group(pgid, sig) {
        Ok(()) => true,
        Err(e) => e != rustix::io::Errno::SRCH,
    }
}

fn alive(pgid: Pid) -> bool {
    match rustix::process::test_kill_process_group(pgid) {
        Ok(()) => true,
        Err(e) => e != rustix::io::Errno::SRCH,
    }
}

/// Stop a group without awaiting: SIGTERM now, SIGKILL from a helper thread after the grace.
pub fn stop_in_background(pgid: Pid) {
    if !signal(pgid, Signal::TERM) {
        return;
    }
    let spawned = std::thread::Builder::new()
        .name("tooldispatch-kill".into())
        .spawn(move || {
            let deadline = Instant::now() + GRACE;
            while Instant::now() < deadline {
                if !alive(pgid) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            signal(pgid, Signal::KILL);
        });
    if spawned.is_err() {
        signal(pgid, Signal::KILL);
    }
}

/// Stop several groups at once, blocking for at most `grace` (shutdown of the job table).
pub fn stop_all_blocking(pgids: &[i32], grace: Duration) {
    let pgids: Vec<Pid> = pgids
        .iter()
        .filter_map(|p| Pid::from_raw(*p))
        .filter(|p| signal(*p, Signal::TERM))
        .collect();
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline && pgids.iter().any(|p| alive(*p)) {
        std::thread::sleep(Duration::from_millis(20));
    }
    for pgid in pgids {
        signal(pgid, Signal::KILL);
    }
}

/// Which output stream a chunk came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

/// Size of one read from a pipe.
const CHUNK: usize = 64 * 1024;

/// The command's stdout and stderr, read chunk by chunk as either has data.
pub struct Pipes {
    stdout: Option<ChildStdout>,
    stderr: Option<ChildStderr>,
    buf_out: Vec<u8>,
    buf_err: Vec<u8>,
}

impl Pipes {
    pub fn take(child: &mut Child) -> Pipes {
        Pipes {
            stdout: child.stdout.take(),
            stderr: child.stderr.take(),
            buf_out: vec![0; CHUNK],
            buf_err: vec![0; CHUNK],
        }
    }

    /// Both pipes reached end of file (or were abandoned).
    pub fn done(&self) -> bool {
        self.stdout.is_none() && self.stderr.is_none()
    }

    /// Stop reading: a process outside the group still holds the pipes.
    pub fn abandon(&mut self) {
        self.stdout = None;
        self.stderr = None;
    }

    /// The next chunk from either pipe; an empty chunk means that pipe closed. Cancel-safe:
    /// nothing is read unless the chunk is returned. Never resolves once both are closed.
    pub async fn next(&mut self) -> (Stream, &[u8]) {
        let (stream, read) = tokio::select! {
            r = read_some(&mut self.stdout, &mut self.buf_out) => (Stream::Stdout, r),
            r = read_some(&mut self.stderr, &mut self.buf_err) => (Stream::Stderr, r),
        };
        // A read error ends that stream like EOF would.
        let n: usize = read.unwrap_or_default();
        if n == 0 {
            match stream {
                Stream::Stdout => self.stdout = None,
                Stream::Stderr => self.stderr = None,
            }
        }
        let buf = match stream {
            Stream::Stdout => &self.buf_out,
            Stream::Stderr => &self.buf_err,
        };
        (stream, buf.get(..n).unwrap_or_default())
    }
}

async fn read_some<R: tokio::io::AsyncRead + Unpin>(
    pipe: &mut Option<R>,
    buf: &mut [u8],
) -> io::Result<usize> {
    match pipe {
        Some(pipe) => pipe.read(buf).await,
        None => std::future::pending().await,
    }
}

/// `exit code N` or `killed by signal N (SIGNAME)`.
pub fn describe_exit(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    if let Some(code) = status.code() {
        return format!("exit code {code}");
    }
    match status.signal() {
        Some(sig) => {
            let name = match sig {
                1 => " (SIGHUP)",
                2 => " (SIGINT)",
                3 => " (SIGQUIT)",
                4 => " (SIGILL)",
                6 => " (SIGABRT)",
                7 => " (SIGBUS)",
                8 => " (SIGFPE)",
                9 => " (SIGKILL)",
                11 => " (SIGSEGV)",
                13 => " (SIGPIPE)",
                14 => " (SIGALRM)",
                15 => " (SIGTERM)",
                _ => "",
            };
            format!("killed by signal {sig}{name}")
        }
        None => format!("ended with status {status}"),
    }
}

/// A directory inside the data directory for this session's command files.
pub fn session_dir(cx: &ToolContext, kind: &str) -> Option<PathBuf> {
    let data = cx.data_dir.as_deref()?;
    Some(dispatch_engine::shaping::session_dir(data, &cx.session_id).join(kind))
}

pub use dispatch_engine::shaping::safe_component;

/// Create `dir` (and its parents) readable by the user only.
pub fn private_dir(dir: &Path) -> io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

/// Quote an argument for display when it is not a plain word.
fn quote(arg: &str) -> String {
    let plain = !arg.is_empty()
        && arg
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c));
    if plain {
        arg.to_string()
    } else {
        format!("{arg:?}")
    }
}

/// Cut `text` to at most `max` bytes on a char boundary, marking the cut.
pub fn clip(text: &mut String, max: usize) {
    if text.len() <= max {
        return;
    }
    let mut cut = max;
    while cut > 0 && !text.is_char_boundary(cut) {
        cut -= 1;
    }
    text.truncate(cut);
    text.push('…');
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn env(pairs: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        pairs.iter().map(|(k, v)| (k.into(), v.into())).collect()
    }

    fn names(env: &[(OsString, OsString)]) -> Vec<String> {
        env.iter()
            .map(|(k, _)| k.to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn secret_looking_names_are_withheld_and_ordinary_ones_kept() {
        let parent = env(&[
            ("PATH", "/usr/bin"),
            ("HOME", "/home/u"),
            ("PWD", "/w"),
            ("KEYBOARD_LAYOUT", "us"),
            ("GIT_AUTHOR_NAME", "A"),
            ("MONKEY_COUNT", "3"),
            ("LANG", "C.UTF-8"),
            ("MY_API_TOKEN", "t"),
            ("CI_JOB_JWT", "eyJ"),
            ("STORAGE_CONNECTION_STRING", "AccountKey=x"),
            ("SENTRY_DSN", "https://k@o.ingest.sentry.io/1"),
            (
                "SLACK_WEBHOOK_URL",
                "https://hooks.slack.com/services/T/B/x",
            ),
            ("HARMLESS_LOOKING", "ghp_0123456789abcdefABCDEF0123"),
            ("GITHUB_TOKEN", "t"),
            ("OPENAI_API_KEY", "k"),
            ("ANTHROPIC_API_KEY", "k"),
            ("AWS_ACCESS_KEY_ID", "a"),
            ("AWS_REGION", "eu"),
            ("DB_PASSWORD", "p"),
            ("db_pass", "p"),
            ("CLIENT_SECRET", "s"),
            ("GOOGLE_APPLICATION_CREDENTIALS", "/c.json"),
            ("SSH_AUTH_SOCK", "/tmp/agent"),
            ("NPM_CONFIG__AUTH", "x"),
            ("STRIPE_KEY", "k"),
            ("SIGNING_KEYS", "k"),
            ("DATABASE_URL", "postgres://user:pw@db/x"),
            ("PROXY_URL", "http://proxy:3128"),
            ("GH_PAT", "p"),
        ]);
        let (kept, withheld) = child_env(&parent, &[]);
        assert_eq!(
            names(&kept),
            [
                "PATH",
                "HOME",
                "PWD",
                "KEYBOARD_LAYOUT",
                "GIT_AUTHOR_NAME",
                "MONKEY_COUNT",
                "LANG",
                "PROXY_URL"
            ]
        );
        assert_eq!(
            withheld,
            [
                "ANTHROPIC_API_KEY",
                "AWS_ACCESS_KEY_ID",
                "AWS_REGION",
                "CI_JOB_JWT",
                "CLIENT_SECRET",
                "DATABASE_URL",
                "DB_PASSWORD",
                "GH_PAT",
                "GITHUB_TOKEN",
                "GOOGLE_APPLICATION_CREDENTIALS",
                "HARMLESS_LOOKING",
                "MY_API_TOKEN",
                "NPM_CONFIG__AUTH",
                "OPENAI_API_KEY",
                "SENTRY_DSN",
                "SIGNING_KEYS",
                "SLACK_WEBHOOK_URL",
                "SSH_AUTH_SOCK",
                "STORAGE_CONNECTION_STRING",
                "STRIPE_KEY",
                "db_pass",
            ]
        );
    }

    #[test]
    fn pass_env_lets_named_secrets_and_prefixes_through() {
        let parent = env(&[
            ("GITHUB_TOKEN", "t"),
            ("AWS_ACCESS_KEY_ID", "a"),
            ("AWS_SECRET_ACCESS_KEY", "s"),
            ("NPM_TOKEN", "n"),
        ]);
        let pass =
            check_pass_env(Some(&["GITHUB_TOKEN".to_string(), "AWS_*".to_string()])).unwrap();
        let (kept, withheld) = child_env(&parent, &pass);
        assert_eq!(
            names(&kept),
            ["GITHUB_TOKEN", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"]
        );
        assert_eq!(withheld, ["NPM_TOKEN"]);
    }

    #[test]
    fn over_broad_or_malformed_pass_env_entries_are_refused() {
        for bad in ["*", "A*", "1ABC", "A-B", "", "A B", "X*Y"] {
            let err = check_pass_env(Some(&[bad.to_string()]))
                .unwrap_err()
                .to_string();
            assert!(err.contains("pass_env entry"), "{bad}: {err}");
        }
    }

    #[test]
    fn urls_carrying_credentials_are_recognised() {
        assert!(url_with_userinfo("https://tok@github.com/x"));
        assert!(url_with_userinfo("redis://:pw@127.0.0.1:6379/0"));
        assert!(!url_with_userinfo("https://example.com/a@b"));
        assert!(!url_with_userinfo("mail me@x"));
        assert!(!url_with_userinfo("://@"));
    }

    #[test]
    fn signals_never_reach_init_or_our_own_group() {
        assert!(!safe_target(Pid::from_raw(1).unwrap()));
        assert!(!safe_target(rustix::process::getpgrp()));
        assert!(!safe_target(rustix::process::getpid()));
        assert_eq!(Group::new(Some(1)).id(), None);
        assert_eq!(Group::new(Some(0)).id(), None);
        assert_eq!(Group::new(Some(u32::MAX)).id(), None);
    }
}
