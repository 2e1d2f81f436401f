//! What one command may do: its level, where it may write, whether it may use the network,
//! what it may not read, and its limits.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// One mebibyte.
pub const MIB: u64 = 1024 * 1024;
/// One gibibyte.
pub const GIB: u64 = 1024 * MIB;

/// How much a sandboxed command may change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Level {
    /// No writes except a private temp dir, no network: for commands judged read-only.
    ReadOnly,
    /// Writes in the work dir and declared paths; network only when the policy allows it.
    Workspace,
}

impl Level {
    /// `read-only` or `workspace`, for messages.
    pub fn name(self) -> &'static str {
        match self {
            Level::ReadOnly => "read-only",
            Level::Workspace => "workspace",
        }
    }
}

/// Resource limits of one command (per process, except `processes`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Largest file a process may write (RLIMIT_FSIZE), in bytes.
    pub file_size: u64,
    /// Most heap and other private writable memory per process (RLIMIT_DATA), in bytes.
    /// RLIMIT_DATA rather than RLIMIT_AS: node and the JVM reserve large address ranges they
    /// never touch, and an address-space limit breaks them.
    pub memory: u64,
    /// Most processes and threads of the command together (a pids cgroup, or RLIMIT_NPROC).
    pub processes: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            file_size: GIB,
            memory: 8 * GIB,
            processes: 1024,
        }
    }
}

/// What one command may do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Policy {
    pub level: Level,
    /// The work directory (absolute, resolved): readable in both levels, writable in Workspace.
    pub workdir: PathBuf,
    /// Further writable paths (absolute, already resolved and confined by the caller).
    pub write_paths: Vec<PathBuf>,
    /// Whether a Workspace command may use the network (never in ReadOnly).
    pub network: bool,
    /// Paths nobody in the sandbox may read, even inside the work directory.
    pub hidden: Vec<PathBuf>,
    /// Folders shown read-only at another path inside the sandbox, `(outside, inside)`: a
    /// script tool's own folder lives under tooldispatch's hidden config or data directory,
    /// so it is shown at `inside` (beneath the sandbox's private /tmp) and nothing else of
    /// that directory becomes readable.
    pub read_only_binds: Vec<(PathBuf, PathBuf)>,
    pub limits: Limits,
}

impl Policy {
    /// A policy for `workdir` with the default hidden paths (from this process's HOME and
    /// XDG variables) plus `<workdir>/.tooldispatch`, default limits, no network.
    pub fn new(level: Level, workdir: &Path) -> Policy {
        let mut hidden = default_hidden();
        hidden.push(workdir.join(".tooldispatch"));
        Policy {
            level,
            workdir: workdir.to_path_buf(),
            write_paths: Vec::new(),
            network: false,
            hidden,
            read_only_binds: Vec::new(),
            limits: Limits::default(),
        }
    }

    /// Whether the command gets the network.
    pub fn network_allowed(&self) -> bool {
        self.level == Level::Workspace && self.network
    }
}

/// Credentials and tooldispatch's own files under HOME (honouring XDG_CONFIG_HOME and
/// XDG_DATA_HOME), the user's runtime dir (agent and D-Bus sockets) and container sockets.
pub fn default_hidden() -> Vec<PathBuf> {
    default_hidden_with(|name| std::env::var_os(name))
}

/// [`default_hidden`] reading variables through `var` (tests pass their own HOME).
pub fn default_hidden_with(var: impl Fn(&str) -> Option<OsString>) -> Vec<PathBuf> {
    let absolute = |name: &str| {
        var(name)
            .map(PathBuf::from)
            .filter(|p| p.is_absolute() && p != Path::new("/"))
    };
    let mut out = Vec::new();
    if let Some(home) = absolute("HOME") {
        for name in [
            ".ssh",
            ".aws",
            ".gnupg",
            ".netrc",
            ".git-credentials",
            ".docker",
            ".kube",
            ".azure",
            ".pypirc",
            ".password-store",
            ".config/gh",
            ".config/gcloud",
            ".cargo/credentials",
            ".cargo/credentials.toml",
            ".local/share/keyrings",
        ] {
            out.push(home.join(name));
        }
        let config = absolute("XDG_CONFIG_HOME").unwrap_or_else(|| home.join(".config"));
        let data = absolute("XDG_DATA_HOME").unwrap_or_else(|| home.join(".local/share"));
        out.push(config.join("tooldispatch"));
        out.push(data.join("tooldispatch"));
    }
    if let Some(runtime) = absolute("XDG_RUNTIME_DIR") {
        out.push(runtime);
    }
    for socket in [
        "/run/docker.sock",
        "/var/run/docker.sock",
        "/run/containerd/containerd.sock",
        "/run/podman/podman.sock",
    ] {
        out.push(PathBuf::from(socket));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn xdg_dirs_replace_the_home_defaults() {
        let hidden = default_hidden_with(|name| match name {
            "HOME" => Some("/h".into()),
            "XDG_DATA_HOME" => Some("/d".into()),
            "XDG_CONFIG_HOME" => Some("relative/ignored".into()),
            _ => None,
        });
        assert!(hidden.contains(&PathBuf::from("/d/tooldispatch")));
        assert!(hidden.contains(&PathBuf::from("/h/.config/tooldispatch")));
        assert!(hidden.contains(&PathBuf::from("/h/.ssh")));
        assert!(!hidden.contains(&PathBuf::from("/h/.local/share/tooldispatch")));
    }

    #[test]
    fn no_home_hides_only_the_fixed_sockets() {
        let hidden = default_hidden_with(|_| None);
        assert_eq!(hidden.len(), 4);
    }
}
