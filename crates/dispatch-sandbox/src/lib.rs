//! The OS sandbox around every command tooldispatch starts (DESIGN §2, §6).
//!
//! The engine judges from an argv whether a command only reads; that judgment can be wrong,
//! and a wrong one must not be able to do harm. So a command judged read-only runs in the
//! [`Level::ReadOnly`] sandbox (no writes but a private, fresh `/tmp`, no network) and an
//! approved command in the [`Level::Workspace`] sandbox (writes in the work directory and the
//! declared write paths, network only when the call asked for it). In both, credentials and
//! tooldispatch's own files ([`Policy::hidden`]) cannot be read, even from inside the work
//! directory or through a symlink; the command cannot gain privileges (no new privileges, every
//! capability dropped even for root, setuid bits ignored), sees only its own processes (new PID
//! namespace, so no ptrace or `/proc/<pid>/environ` of anything outside), dies with its parent,
//! runs in a new session (no TIOCSTI into our terminal), and has limits on file size, memory
//! and the number of processes so `/dev/zero` tricks and fork bombs end with a clear message
//! ([`explain`]).
//!
//! ## Why bubblewrap
//!
//! `unsafe_code` is forbidden workspace-wide, so nothing can run between `fork` and `exec`
//! (`pre_exec`); whatever confines the command must be a program we start. Debian's `bwrap`
//! is that program: it takes the whole policy as arguments, needs no daemon and no root, and
//! builds a new mount namespace, so it can *hide* a path inside an allowed tree (an empty,
//! mode-000 tmpfs over a directory, a mode-000 file bound over a file). Landlock can only
//! grant access beneath a path, never take it back below it, so `~/.ssh` inside a readable
//! home, or `.tooldispatch/` inside a writable work directory, could not be hidden with it;
//! and a symlink to a hidden file resolves to the mount that covers it, so hiding by
//! resolved path closes links too.
//!
//! Limits are set by util-linux `prlimit` as the first program inside the sandbox (RLIMIT_FSIZE,
//! RLIMIT_DATA). The process limit is a pids cgroup when one can be created (the only limit
//! that holds for root: the kernel does not enforce RLIMIT_NPROC for uid 0); the process joins
//! it race-free through `sh -c 'echo $$ > cgroup.procs; exec bwrap …'` and the cgroup is
//! removed when the command's [`CgroupGuard`] drops. Without a cgroup, non-root users get
//! RLIMIT_NPROC instead.
//!
//! Not covered: hard links to a hidden file made before the sandbox existed, UNIX sockets that
//! are not in the hidden list (and abstract ones when a call has the network), and kernel bugs.
//! By design the workspace level cannot write caches in HOME (`~/.cargo/registry`, `~/.npm`):
//! [`explain`] tells the model to point them at the work directory or /tmp. Killing the outer `bwrap` kills
//! everything: the sandbox's PID 1 dies (`--die-with-parent`) and the kernel kills every process
//! in its namespace. For a graceful stop, SIGTERM the members of the command's cgroup
//! ([`CgroupGuard::members`]) but the outer `bwrap` first; without a cgroup the stop is a SIGKILL.

mod cgroup;
mod explain;
mod policy;
mod sandbox;

pub use cgroup::CgroupGuard;
pub use explain::{explain, hidden_note};
pub use policy::{GIB, Level, Limits, MIB, Policy, default_hidden, default_hidden_with};
pub use sandbox::{Availability, Mode, Sandbox, Wrapped};

/// Why a command could not be put in the sandbox.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// No sandbox can be set up on this machine (or it is turned off).
    #[error("no OS sandbox: {0}")]
    Unavailable(String),
    /// A path the policy names cannot be used.
    #[error("{what} {path} cannot be used in the sandbox: {source}")]
    Path {
        what: &'static str,
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    /// The process-limit cgroup could not be created.
    #[error("cannot set up the sandbox's process limit: {0}")]
    Cgroup(std::io::Error),
}
