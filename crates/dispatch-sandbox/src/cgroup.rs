//! The process limit: one pids cgroup per command.
//!
//! RLIMIT_NPROC is not enforced for uid 0 (nor for anyone holding CAP_SYS_RESOURCE) and counts
//! every process of the user, not of the command; a pids cgroup counts exactly the command's
//! processes and threads and holds for root. The command joins it before `bwrap` starts (see
//! [`crate::Sandbox::wrap`]), so nothing it forks escapes the count.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

static NEXT: AtomicU64 = AtomicU64::new(0);

/// The pids cgroup this process is in, when we may create children in it.
pub(crate) fn find_base() -> Option<PathBuf> {
    let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let mut candidates = Vec::new();
    for line in own.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        let rel = path.trim_start_matches('/');
        if controllers.split(',').any(|c| c == "pids") {
            candidates.push(Path::new("/sys/fs/cgroup/pids").join(rel));
        } else if id == "0" && controllers.is_empty() {
            // cgroup v2: pure (/sys/fs/cgroup) or hybrid (/sys/fs/cgroup/unified); children get a
            // pids.max only when the pids controller is enabled for them.
            for root in ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"] {
                let dir = Path::new(root).join(rel);
                let enabled = std::fs::read_to_string(dir.join("cgroup.subtree_control"))
                    .is_ok_and(|s| s.split_whitespace().any(|c| c == "pids"));
                if enabled {
                    candidates.push(dir);
                }
            }
        }
    }
    let base = candidates.into_iter().find(|dir| probe(dir).is_ok())?;
    sweep(&base);
    Some(base)
}

/// Remove the empty cgroups of dispatchers that are gone (they exited before their cleanup).
fn sweep(base: &Path) {
    let Ok(entries) = std::fs::read_dir(base) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(owner) = name
            .to_str()
            .and_then(|n| n.strip_prefix("tooldispatch-"))
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        // Only removed, never killed: rmdir succeeds only on an empty cgroup, and a pid we
        // cannot see may be a dispatcher in another PID namespace sharing this hierarchy.
        if !Path::new(&format!("/proc/{owner}")).exists() {
            let _ = std::fs::remove_dir(entry.path());
        }
    }
}

fn probe(base: &Path) -> io::Result<()> {
    let guard = CgroupGuard::create(base, 16)?;
    drop(guard);
    Ok(())
}

/// A command's pids cgroup; dropping it kills what is left in it and removes it.
#[derive(Debug)]
pub struct CgroupGuard {
    dir: PathBuf,
}

impl CgroupGuard {
    /// Create a fresh cgroup under `base` allowing at most `limit` processes and threads.
    pub(crate) fn create(base: &Path, limit: u32) -> io::Result<CgroupGuard> {
        // The pid alone can repeat: dispatchers in other PID namespaces may share this
        // hierarchy. The time makes a clash unlikely; a clash takes the next name.
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let mut attempt = 0;
        let dir = loop {
            let name = format!(
                "tooldispatch-{}-{nanos}-{}",
                std::process::id(),
                NEXT.fetch_add(1, Ordering::Relaxed)
            );
            let dir = base.join(name);
            match std::fs::create_dir(&dir) {
                Ok(()) => break dir,
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists && attempt < 8 => attempt += 1,
                Err(e) => return Err(e),
            }
        };
        let guard = CgroupGuard { dir };
        std::fs::write(guard.dir.join("pids.max"), limit.to_string())?;
        Ok(guard)
    }

    /// The file a process writes its pid to in order to join.
    pub fn procs_file(&self) -> PathBuf {
        self.dir.join("cgroup.procs")
    }

    /// The cgroup's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Processes still in the cgroup.
    pub fn members(&self) -> Vec<i32> {
        members(&self.dir)
    }

    /// SIGKILL everything in the cgroup.
    pub fn kill_all(&self) {
        kill_all(&self.dir);
    }
}

fn members(dir: &Path) -> Vec<i32> {
    std::fs::read_to_string(dir.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

fn kill_all(dir: &Path) {
    // cgroup v2 kills the whole tree at once; v1 has no such file, so signal each member.
    if std::fs::write(dir.join("cgroup.kill"), "1").is_ok() {
        return;
    }
    for pid in members(dir) {
        if let Some(pid) = rustix::process::Pid::from_raw(pid)
            && pid.as_raw_pid() > 1
        {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
        }
    }
}

impl Drop for CgroupGuard {
    fn drop(&mut self) {
        if std::fs::remove_dir(&self.dir).is_ok() || !self.dir.exists() {
            return;
        }
        // Something is still inside (a leftover, or the sandbox's processes still being torn
        // down): kill it, retry briefly, then from a helper thread so dropping never blocks long.
        self.kill_all();
        for _ in 0..50 {
            std::thread::sleep(Duration::from_millis(2));
            if std::fs::remove_dir(&self.dir).is_ok() || !self.dir.exists() {
                return;
            }
        }
        let dir = self.dir.clone();
        let _ = std::thread::Builder::new()
            .name("tooldispatch-cgroup".into())
            .spawn(move || {
                for _ in 0..100 {
                    if std::fs::remove_dir(&dir).is_ok() || !dir.exists() {
                        return;
                    }
                    kill_all(&dir);
                    std::thread::sleep(Duration::from_millis(100));
                }
            });
    }
}
