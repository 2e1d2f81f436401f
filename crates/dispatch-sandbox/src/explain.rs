//! One sentence the model can act on when the sandbox stopped something.
//!
//! What the sandbox refuses shows up as an ordinary error of the program (EROFS, a refused
//! connection, EAGAIN from fork, a failed allocation) or as its exit status (SIGXFSZ); this
//! module recognises those and says which rule it was and what to do instead.

use std::path::Path;
use std::process::ExitStatus;

use crate::policy::{Level, Policy};
use crate::sandbox::bytes;

/// SIGXFSZ: a process wrote past RLIMIT_FSIZE.
const SIGXFSZ: i32 = 25;

/// A one-line `sandbox: …` note for a command that ended with `status` and printed `stderr`
/// under `policy`, or `None` when nothing points at the sandbox.
pub fn explain(policy: &Policy, status: ExitStatus, stderr: &[u8]) -> Option<String> {
    use std::os::unix::process::ExitStatusExt;
    let text = String::from_utf8_lossy(stderr);
    let code = status.code();
    // bwrap reports a child killed by signal N as exit code 128 + N.
    let signal = status
        .signal()
        .or_else(|| code.filter(|c| (129..160).contains(c)).map(|c| c - 128));
    let limits = policy.limits;

    if code == Some(1)
        && let Some(line) = text.lines().find(|l| l.starts_with("bwrap: "))
    {
        return Some(format!(
            "sandbox: the sandbox could not start the command ({}); check that the program and its directory exist",
            line.trim()
        ));
    }
    if signal == Some(SIGXFSZ) || text.contains("File too large") {
        return Some(format!(
            "sandbox: the command hit the sandbox's file-size limit of {} (a write past it stops the process with SIGXFSZ); write less — e.g. bound the output with head -c or dd count= — or split it into smaller files",
            bytes(limits.file_size)
        ));
    }
    if hit_process_limit(&text) {
        return Some(format!(
            "sandbox: the command hit the sandbox's limit of {} processes and threads, so it could not start more; run fewer at once (a lower -j or worker count) and make sure nothing forks without end",
            limits.processes
        ));
    }
    if out_of_memory(&text) {
        return Some(format!(
            "sandbox: the command ran out of memory under the sandbox's limit of {} per process; use less memory (smaller inputs, streaming, fewer items at once)",
            bytes(limits.memory)
        ));
    }
    if text.contains("Read-only file system") {
        return Some(match policy.level {
            Level::ReadOnly => "sandbox: blocked: the read-only sandbox allows no writes outside its temp dir (/tmp); this command writes, so it needs approval to run in the workspace sandbox — ask again with write_paths naming what it writes (e.g. write_paths: [\".\"]), which asks the user".to_string(),
            Level::Workspace => {
                let mut places = vec![format!("the work directory {}", policy.workdir.display())];
                places.extend(policy.write_paths.iter().map(|p| p.display().to_string()));
                format!(
                    "sandbox: blocked: the workspace sandbox allows writes only in {} and /tmp; write inside the work directory instead (a tool that keeps a cache in HOME can be pointed at the work directory or /tmp through env, e.g. CARGO_HOME, npm_config_cache, GOCACHE, PIP_CACHE_DIR)",
                    places.join(", ")
                )
            }
        });
    }
    if !policy.network_allowed() && no_network(&text) {
        return Some("sandbox: the command ran without network access (the sandbox gives the network only to calls with network: true, which asks the user); if it needs the network, ask again with network: true".to_string());
    }
    if text.contains("Permission denied") {
        return Some(hidden_note(policy, &text));
    }
    // Moving or removing a hidden path fails on its mount point.
    if text.contains("Device or resource busy") && policy.hidden.iter().any(|p| mentions(&text, p))
    {
        return Some(hidden_note(policy, &text));
    }
    None
}

/// The note for a refused read: names the hidden path the text mentions, if any.
pub fn hidden_note(policy: &Policy, text: &str) -> String {
    let named = policy
        .hidden
        .iter()
        .filter(|p| mentions(text, p))
        .max_by_key(|p| p.as_os_str().len());
    match named {
        Some(path) => format!(
            "sandbox: {} is hidden in the sandbox (credentials and tooldispatch's own files cannot be read by commands, also not through a link); do without it",
            path.display()
        ),
        None => "sandbox: if the denied path is (or links to) a credential or tooldispatch's own files (~/.ssh, ~/.aws, .tooldispatch/, the data dir, …), it is hidden in the sandbox and cannot be read by commands; do without it".to_string(),
    }
}

fn mentions(text: &str, path: &Path) -> bool {
    let shown = path.to_string_lossy();
    if text.contains(shown.as_ref()) {
        return true;
    }
    // `~/.ssh/id_rsa` or `.tooldispatch/rules.toml` as a program printed them.
    let name = path.file_name().map(|n| n.to_string_lossy());
    name.is_some_and(|n| n.starts_with('.') && n.len() > 2 && text.contains(&format!("{n}/")))
}

fn hit_process_limit(text: &str) -> bool {
    let lower = text.to_ascii_lowercase();
    lower.contains("cannot fork")
        || lower.contains("can't fork")
        || lower.contains("fork: retry")
        || lower.contains("too many processes")
        || (lower.contains("resource temporarily unavailable")
            && (lower.contains("fork") || lower.contains("spawn") || lower.contains("thread")))
        || lower.contains("failed to spawn thread")
}

fn out_of_memory(text: &str) -> bool {
    let lower = text.to_ascii_lowercase();
    lower.contains("memoryerror")
        || lower.contains("cannot allocate memory")
        || lower.contains("out of memory")
        || lower.contains("memory allocation of")
        || lower.contains("bad_alloc")
        || lower.contains("failed to allocate")
        || lower.contains("memory exhausted")
}

fn no_network(text: &str) -> bool {
    let lower = text.to_ascii_lowercase();
    [
        "network is unreachable",
        "connection refused",
        "could not resolve host",
        "temporary failure in name resolution",
        "name or service not known",
        "no address associated with hostname",
        "getaddrinfo",
        "enotfound",
        "eai_again",
        "failed to connect",
        "couldn't connect",
    ]
    .iter()
    .any(|p| lower.contains(p))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;

    fn policy(level: Level) -> Policy {
        Policy {
            level,
            workdir: "/w".into(),
            write_paths: vec!["/w/out".into()],
            network: false,
            hidden: vec!["/h/.ssh".into(), "/w/.tooldispatch".into()],
            read_only_binds: Vec::new(),
            limits: crate::Limits::default(),
        }
    }

    fn code(c: i32) -> ExitStatus {
        ExitStatus::from_raw(c << 8)
    }

    #[test]
    fn sigxfsz_as_a_signal_or_as_bwraps_exit_code_is_the_file_size_limit() {
        for status in [ExitStatus::from_raw(25), code(153)] {
            let note = explain(&policy(Level::Workspace), status, b"").unwrap();
            assert!(note.contains("file-size limit of 1 GiB"), "{note}");
        }
    }

    #[test]
    fn a_read_only_write_refusal_says_how_to_get_approval() {
        let note = explain(
            &policy(Level::ReadOnly),
            code(1),
            b"touch: cannot touch 'x': Read-only file system\n",
        )
        .unwrap();
        assert!(note.contains("ask again with write_paths"), "{note}");
        let note = explain(
            &policy(Level::Workspace),
            code(1),
            b"sh: 1: cannot create /etc/x: Read-only file system\n",
        )
        .unwrap();
        assert!(note.contains("/w, /w/out and /tmp"), "{note}");
    }

    #[test]
    fn a_refused_read_names_the_hidden_path() {
        let note = explain(
            &policy(Level::ReadOnly),
            code(1),
            b"cat: /h/.ssh/id_rsa: Permission denied\n",
        )
        .unwrap();
        assert!(note.starts_with("sandbox: /h/.ssh is hidden"), "{note}");
    }

    #[test]
    fn network_errors_point_at_network_true_only_without_network() {
        let text = b"curl: (7) Failed to connect to 127.0.0.1 port 1: Connection refused\n";
        assert!(
            explain(&policy(Level::ReadOnly), code(7), text)
                .unwrap()
                .contains("network: true")
        );
        let mut open = policy(Level::Workspace);
        open.network = true;
        assert_eq!(explain(&open, code(7), text), None);
    }

    #[test]
    fn an_ordinary_failure_gets_no_note() {
        assert_eq!(
            explain(
                &policy(Level::Workspace),
                code(2),
                b"ls: cannot access 'x'\n"
            ),
            None
        );
    }
}
