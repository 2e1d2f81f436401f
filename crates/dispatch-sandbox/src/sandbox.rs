//! Finding bubblewrap once, and turning a [`Policy`] into a `bwrap` command line.

use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, OnceLock};

use crate::cgroup::{self, CgroupGuard};
use crate::policy::{GIB, Level, MIB, Policy};
use crate::{SandboxError, explain};

/// Where `bwrap`, `prlimit` and `sh` are looked for: system directories only, never PATH
/// (a relative PATH entry such as `node_modules/.bin` would let the work directory pick them).
const SYSTEM_DIRS: &[&str] = &["/usr/bin", "/bin", "/usr/sbin", "/sbin", "/usr/local/bin"];

/// The `[sandbox] mode` setting.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Mode {
    /// Use the sandbox when this machine has one.
    #[default]
    Auto,
    /// Never sandbox (dangerous: a wrong read-only judgment can then write and reach the
    /// network).
    Off,
}

/// What sandbox this machine has.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Availability {
    /// Commands run sandboxed by `mechanism`; `details` lists what holds and what does not.
    Available {
        mechanism: String,
        details: Vec<String>,
    },
    /// No sandbox can be set up here, and why.
    Unavailable { reason: String },
    /// Turned off by configuration.
    Off,
}

/// The sandbox of this machine, detected once; cheap to share.
#[derive(Debug)]
pub struct Sandbox {
    availability: Availability,
    bwrap: PathBuf,
    sh: PathBuf,
    /// `--unshare-user --disable-userns` work here.
    userns: bool,
    prlimit: Option<PathBuf>,
    /// Where per-command pids cgroups are created.
    cgroup_base: Option<PathBuf>,
    /// A mode-000 empty file bound over hidden files (falls back to `/dev/null`).
    denied_file: PathBuf,
    root: bool,
}

/// A sandboxed command line, and the cgroup to drop once the command has ended.
#[derive(Debug)]
pub struct Wrapped {
    pub program: PathBuf,
    pub args: Vec<OsString>,
    /// Removes the command's pids cgroup (killing leftovers) when dropped.
    pub cgroup: Option<CgroupGuard>,
}

impl Sandbox {
    /// Probe this machine: bwrap in a system directory, and a trial sandbox that runs `true`.
    pub fn detect(mode: Mode) -> Sandbox {
        let root = rustix::process::geteuid().is_root();
        let mut sandbox = Sandbox {
            availability: Availability::Off,
            bwrap: PathBuf::new(),
            sh: find_system("sh").unwrap_or_else(|| PathBuf::from("/bin/sh")),
            userns: false,
            prlimit: None,
            cgroup_base: None,
            denied_file: PathBuf::from("/dev/null"),
            root,
        };
        if mode == Mode::Off {
            return sandbox;
        }
        if !cfg!(target_os = "linux") {
            sandbox.availability = Availability::Unavailable {
                reason: "not Linux: the sandbox needs Linux namespaces (bubblewrap)".into(),
            };
            return sandbox;
        }
        let Some(bwrap) = find_system("bwrap") else {
            sandbox.availability = Availability::Unavailable {
                reason: format!(
                    "bubblewrap is not installed (no bwrap in {}); install it, e.g. `apt-get install bubblewrap`",
                    SYSTEM_DIRS.join(", ")
                ),
            };
            return sandbox;
        };
        sandbox.bwrap = bwrap;
        sandbox.prlimit = find_system("prlimit");
        sandbox.denied_file = denied_file().unwrap_or_else(|_| PathBuf::from("/dev/null"));
        // With a user namespace the sandbox can also forbid nested ones; some kernels allow
        // bwrap (as root) only without one.
        let with_userns = sandbox.trial(true);
        let trial = match with_userns {
            Ok(()) => {
                sandbox.userns = true;
                Ok(())
            }
            Err(first) => sandbox.trial(false).map_err(|_| first),
        };
        if let Err(why) = trial {
            sandbox.availability = Availability::Unavailable {
                reason: format!(
                    "bubblewrap cannot create a sandbox here ({why}); user namespaces may be disabled (sysctl kernel.unprivileged_userns_clone, user.max_user_namespaces, or AppArmor's restrict_unprivileged_userns) or the kernel is too old"
                ),
            };
            return sandbox;
        }
        sandbox.cgroup_base = cgroup::find_base();
        let mut details = vec![
            "levels: read-only (no writes but a private /tmp, no network) and workspace (writes in the work dir and declared paths; network only when the call asks)".to_string(),
            "no new privileges, all capabilities dropped, new PID/IPC/UTS namespaces, new session, dies with its parent".to_string(),
        ];
        if !sandbox.userns {
            details.push("no user namespace: nested namespaces are not forbidden".into());
        }
        match &sandbox.prlimit {
            Some(p) => details.push(format!(
                "file size and memory limits through {} (RLIMIT_FSIZE, RLIMIT_DATA)",
                p.display()
            )),
            None => {
                details.push("no prlimit (util-linux): file size and memory are not limited".into())
            }
        }
        match (&sandbox.cgroup_base, root) {
            (Some(base), _) => details.push(format!(
                "process limit: a pids cgroup per command under {}",
                base.display()
            )),
            (None, false) => details.push("process limit: RLIMIT_NPROC (no pids cgroup)".into()),
            (None, true) => details.push(
                "no process limit: running as root without a writable pids cgroup (RLIMIT_NPROC does not hold for root)".into(),
            ),
        }
        sandbox.availability = Availability::Available {
            mechanism: format!("bubblewrap ({})", sandbox.bwrap.display()),
            details,
        };
        sandbox
    }

    /// The sandbox of this process, detected on first use.
    pub fn shared() -> Arc<Sandbox> {
        static SHARED: OnceLock<Arc<Sandbox>> = OnceLock::new();
        SHARED
            .get_or_init(|| Arc::new(Sandbox::detect(Mode::Auto)))
            .clone()
    }

    /// A sandbox that is turned off.
    pub fn off() -> Sandbox {
        Sandbox::detect(Mode::Off)
    }

    /// No sandbox can be set up, for `reason` (a platform an embedder knows has none; tests of
    /// what happens then).
    pub fn unavailable(reason: impl Into<String>) -> Sandbox {
        let mut sandbox = Sandbox::off();
        sandbox.availability = Availability::Unavailable {
            reason: reason.into(),
        };
        sandbox
    }

    pub fn availability(&self) -> &Availability {
        &self.availability
    }

    /// Whether commands can run sandboxed.
    pub fn available(&self) -> bool {
        matches!(self.availability, Availability::Available { .. })
    }

    /// Why commands cannot run sandboxed here, in words (for a test suite's skip line); `None`
    /// when they can.
    pub fn missing(&self) -> Option<String> {
        (!self.available())
            .then(|| format!("no OS sandbox on this machine ({:?})", self.availability))
    }

    /// Whether each command gets a pids cgroup of its own (which also lists its processes).
    pub fn cgroups(&self) -> bool {
        self.cgroup_base.is_some()
    }

    /// Whether the process limit holds (a pids cgroup, or RLIMIT_NPROC for non-root).
    pub fn limits_processes(&self) -> bool {
        self.cgroup_base.is_some() || (!self.root && self.prlimit.is_some())
    }

    /// The sentence [`explain`] gives for a finished command.
    pub fn explain(
        &self,
        policy: &Policy,
        status: std::process::ExitStatus,
        stderr: &[u8],
    ) -> Option<String> {
        explain(policy, status, stderr)
    }

    /// The command line that runs `program args` in `cwd` under `policy`. `program` should be
    /// an absolute path (it is exec'd inside the sandbox as given).
    pub fn wrap(
        &self,
        policy: &Policy,
        program: &Path,
        args: &[OsString],
        cwd: &Path,
    ) -> Result<Wrapped, SandboxError> {
        match &self.availability {
            Availability::Available { .. } => {}
            Availability::Unavailable { reason } => {
                return Err(SandboxError::Unavailable(reason.clone()));
            }
            Availability::Off => {
                return Err(SandboxError::Unavailable(
                    "turned off in the config ([sandbox] mode = \"off\")".into(),
                ));
            }
        }
        let mut out: Vec<OsString> = Vec::with_capacity(64 + args.len());
        self.bwrap_args(policy, cwd, &mut out)?;
        out.push("--".into());
        if let Some(prlimit) = &self.prlimit {
            out.push(prlimit.clone().into());
            out.push(format!("--fsize={}", policy.limits.file_size).into());
            out.push(format!("--data={}", policy.limits.memory).into());
            if self.cgroup_base.is_none() && !self.root {
                out.push(format!("--nproc={}", policy.limits.processes).into());
            }
            out.push("--".into());
        }
        out.push(program.as_os_str().to_owned());
        out.extend(args.iter().cloned());

        let Some(base) = &self.cgroup_base else {
            return Ok(Wrapped {
                program: self.bwrap.clone(),
                args: out,
                cgroup: None,
            });
        };
        let guard = CgroupGuard::create(base, policy.limits.processes.max(8))
            .map_err(SandboxError::Cgroup)?;
        // Join the cgroup first, then become bwrap: same pid, so nothing escapes the count.
        let mut wrapped: Vec<OsString> = vec![
            "-c".into(),
            "echo $$ > \"$0\" || exit 125; exec \"$@\"".into(),
            guard.procs_file().into(),
            self.bwrap.clone().into(),
        ];
        wrapped.extend(out);
        Ok(Wrapped {
            program: self.sh.clone(),
            args: wrapped,
            cgroup: Some(guard),
        })
    }

    fn bwrap_args(
        &self,
        policy: &Policy,
        cwd: &Path,
        out: &mut Vec<OsString>,
    ) -> Result<(), SandboxError> {
        let resolve = |what: &'static str, path: &Path| {
            path.canonicalize().map_err(|source| SandboxError::Path {
                what,
                path: path.to_path_buf(),
                source,
            })
        };
        let workdir = resolve("the work directory", &policy.workdir)?;
        let cwd = resolve("the command's directory", cwd)?;
        let mut writable = Vec::new();
        if policy.level == Level::Workspace {
            writable.push(workdir.clone());
            for path in &policy.write_paths {
                // A declared path that does not exist yet cannot be a mount point; inside the
                // work directory it is writable anyway.
                if let Ok(path) = path.canonicalize() {
                    writable.push(path);
                }
            }
        }
        let arg = |out: &mut Vec<OsString>, items: &[&str]| {
            out.extend(items.iter().map(OsString::from));
        };
        let path_arg = |out: &mut Vec<OsString>, flag: &str, a: &Path, b: &Path| {
            out.push(flag.into());
            out.push(a.as_os_str().to_owned());
            out.push(b.as_os_str().to_owned());
        };
        let one = |out: &mut Vec<OsString>, flag: &str, a: &Path| {
            out.push(flag.into());
            out.push(a.as_os_str().to_owned());
        };
        arg(out, &["--unshare-all"]);
        if self.userns {
            arg(out, &["--unshare-user", "--disable-userns"]);
        }
        if policy.network_allowed() {
            arg(out, &["--share-net"]);
        }
        arg(
            out,
            &[
                "--die-with-parent",
                "--new-session",
                "--cap-drop",
                "ALL",
                "--ro-bind",
                "/",
                "/",
                "--dev",
                "/dev",
                "--proc",
                "/proc",
                "--perms",
                "1777",
                "--tmpfs",
                "/tmp",
            ],
        );
        // Without the network, no socket file either: a read-only mount does not stop
        // connect(2) to a Unix socket, and the services listening under /run (databases,
        // D-Bus, the name service, container daemons) would take writes or reach out for the
        // command. With the network the call was approved for that, and DNS may live there.
        if !policy.network_allowed() {
            for run in ["/run", "/var/run"] {
                let Ok(real) = Path::new(run).canonicalize() else {
                    continue;
                };
                let needed = workdir.starts_with(&real) || cwd.starts_with(&real);
                if real.is_dir() && real.as_path() == Path::new(run) && !needed {
                    one(out, "--tmpfs", &real);
                }
            }
        }
        // The work dir is bound again after /tmp's tmpfs, which would cover one inside /tmp.
        if policy.level == Level::ReadOnly {
            path_arg(out, "--ro-bind", &workdir, &workdir);
        }
        for path in &writable {
            path_arg(out, "--bind", path, path);
        }
        // In the workspace, git's own executable config stays read-only: a command that
        // wrote `core.fsmonitor` or a hook there would have it run later by the user's own
        // git, outside any sandbox. A write path naming them lifts this.
        if policy.level == Level::Workspace {
            for guarded in [".git/config", ".git/hooks"] {
                let path = workdir.join(guarded);
                let named = policy
                    .write_paths
                    .iter()
                    .any(|w| path.starts_with(w) && *w != workdir);
                if !named
                    && std::fs::symlink_metadata(&path).is_ok_and(|m| !m.file_type().is_symlink())
                {
                    path_arg(out, "--ro-bind", &path, &path);
                }
            }
        }
        // A hidden path that does not exist yet but could be made in a writable place (the
        // work directory's `.tooldispatch/`, a data directory inside the work directory) is
        // made now, empty, so that it is masked like any other: otherwise the command could
        // create it and write there.
        for hidden in &policy.hidden {
            if std::fs::symlink_metadata(hidden).is_err()
                && writable.iter().any(|w| hidden.starts_with(w))
            {
                use std::os::unix::fs::DirBuilderExt;
                let _ = std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o700)
                    .create(hidden);
            }
        }
        // A temp-dir cleaner may have removed the placeholder since detection: make it again,
        // or fall back to /dev/null (reads as empty) rather than fail every command.
        let denied = if self.denied_file.is_file() {
            self.denied_file.clone()
        } else {
            denied_file().unwrap_or_else(|_| PathBuf::from("/dev/null"))
        };
        for hidden in visible_hidden(policy, &workdir, &writable) {
            if hidden.is_dir() {
                // Mode 000: listing or entering it fails with "Permission denied".
                arg(out, &["--perms", "000"]);
                one(out, "--tmpfs", &hidden);
                one(out, "--remount-ro", &hidden);
            } else {
                path_arg(out, "--ro-bind", &denied, &hidden);
            }
        }
        // Last, so no tmpfs or hiding mount covers them; the source is read outside the
        // sandbox, so a hidden parent does not hide it.
        for (outside, inside) in &policy.read_only_binds {
            let outside = resolve("a read-only folder", outside)?;
            path_arg(out, "--ro-bind", &outside, inside);
        }
        one(out, "--chdir", &cwd);
        arg(out, &["--setenv", "TMPDIR", "/tmp"]);
        Ok(())
    }

    /// Run `true` in a minimal sandbox like the real one.
    fn trial(&self, userns: bool) -> Result<(), String> {
        let probe = Sandbox {
            availability: Availability::Off,
            bwrap: self.bwrap.clone(),
            sh: self.sh.clone(),
            userns,
            prlimit: None,
            cgroup_base: None,
            denied_file: self.denied_file.clone(),
            root: self.root,
        };
        let root = Path::new("/");
        let policy = Policy {
            level: Level::ReadOnly,
            workdir: root.to_path_buf(),
            write_paths: Vec::new(),
            network: false,
            hidden: Vec::new(),
            read_only_binds: Vec::new(),
            limits: crate::Limits::default(),
        };
        let mut args = Vec::new();
        probe
            .bwrap_args(&policy, root, &mut args)
            .map_err(|e| e.to_string())?;
        args.push("--".into());
        args.push(
            find_system("true")
                .unwrap_or_else(|| "/bin/true".into())
                .into(),
        );
        let output = Command::new(&self.bwrap)
            .args(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .output()
            .map_err(|e| format!("cannot run {}: {e}", self.bwrap.display()))?;
        if output.status.success() {
            return Ok(());
        }
        let stderr = String::from_utf8_lossy(&output.stderr);
        Err(format!(
            "bwrap failed: {}",
            stderr.lines().next().unwrap_or("no message").trim()
        ))
    }

    /// A human description of the sandbox for `tooldispatch sandbox`.
    pub fn describe(&self, policy: &Policy) -> String {
        let mut text = String::new();
        match &self.availability {
            Availability::Available { mechanism, details } => {
                text.push_str(&format!("sandbox: available — {mechanism}\n"));
                for d in details {
                    text.push_str(&format!("  {d}\n"));
                }
            }
            Availability::Unavailable { reason } => {
                text.push_str(&format!("sandbox: unavailable — {reason}\n"));
                text.push_str("  commands that would run without asking ask the user instead\n");
            }
            Availability::Off => {
                text.push_str("sandbox: off ([sandbox] mode = \"off\" in the config) — commands run unconfined; a wrong read-only judgment can write files and reach the network\n");
            }
        }
        let l = policy.limits;
        text.push_str(&format!(
            "limits: file size {}, memory {} per process, {} processes\n",
            bytes(l.file_size),
            bytes(l.memory),
            l.processes
        ));
        text.push_str("hidden paths (unreadable in the sandbox; missing ones are skipped):\n");
        for path in &policy.hidden {
            let state = if path.exists() { "" } else { " (missing)" };
            text.push_str(&format!("  {}{state}\n", path.display()));
        }
        text
    }
}

/// `1 GiB`, `512 MiB` or bytes.
pub(crate) fn bytes(n: u64) -> String {
    if n >= GIB && n.is_multiple_of(GIB) {
        format!("{} GiB", n / GIB)
    } else if n >= MIB && n.is_multiple_of(MIB) {
        format!("{} MiB", n / MIB)
    } else {
        format!("{n} bytes")
    }
}

/// The hidden paths to cover, resolved and deduplicated, children of hidden dirs dropped.
/// A path that does not exist is skipped; one under /tmp is skipped unless it lies in a bound
/// tree (the sandbox's /tmp is a fresh tmpfs, so it is not there anyway).
fn visible_hidden(policy: &Policy, workdir: &Path, writable: &[PathBuf]) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = policy
        .hidden
        .iter()
        .filter_map(|p| p.canonicalize().ok())
        .filter(|p| p != Path::new("/"))
        .filter(|p| {
            let covered = ["/tmp", "/proc", "/dev"].iter().any(|t| p.starts_with(t));
            !covered || p.starts_with(workdir) || writable.iter().any(|w| p.starts_with(w))
        })
        .collect();
    out.sort();
    out.dedup();
    let mut kept: Vec<PathBuf> = Vec::with_capacity(out.len());
    for path in out {
        if !kept.iter().any(|k| path.starts_with(k)) {
            kept.push(path);
        }
    }
    kept
}

fn find_system(name: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    SYSTEM_DIRS
        .iter()
        .map(|d| Path::new(d).join(name))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// An empty file nobody may read (mode 000), bound over hidden files so reading one fails with
/// "Permission denied" (the capabilities that would bypass the mode are dropped) instead of
/// looking empty. Kept in a private directory of this user under the temp dir.
fn denied_file() -> io::Result<PathBuf> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
    let uid = rustix::process::geteuid().as_raw();
    let dir = std::env::temp_dir().join(format!("tooldispatch-sandbox-{uid}"));
    match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    let meta = std::fs::symlink_metadata(&dir)?;
    if !meta.is_dir() || meta.uid() != uid || meta.mode() & 0o022 != 0 {
        return Err(io::Error::other("the sandbox's private dir is not ours"));
    }
    let file = dir.join("hidden");
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o000)
        .open(&file)
    {
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    let meta = std::fs::symlink_metadata(&file)?;
    if !meta.is_file() || meta.len() != 0 || meta.uid() != uid {
        return Err(io::Error::other("the hidden placeholder is not ours"));
    }
    if meta.permissions().mode() & 0o777 != 0 {
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o000))?;
    }
    Ok(file)
}
