//! git runs with the repository's executable configuration neutralised.
//!
//! A repository's own `.git/config` (cloned, or planted by a tool the model ran) can name
//! programs git starts on its own: an fsmonitor on `git status`, hooks, a pager, an editor, an
//! ssh command, a credential helper. Every git a command tool starts gets these keys set on
//! its command line, where they take precedence over every config file, and the system-wide
//! file is not read. What no fixed key list can reach (drivers and filters named by
//! `.gitattributes`, aliases of subcommands git does not know) stays inside the OS sandbox.

/// `-c` overrides placed right after the program name.
const OVERRIDES: &[&str] = &[
    // A cloned repository may carry a bare repository as ordinary files, with a config of its
    // own (textconv drivers, ...); git then finds it when run inside that directory.
    "safe.bareRepository=explicit",
    "core.fsmonitor=false",
    "core.hooksPath=/dev/null",
    "core.pager=cat",
    "core.editor=true",
    "sequence.editor=true",
    "core.sshCommand=ssh",
    "core.askPass=",
    "core.gitProxy=",
    "diff.external=",
    "credential.helper=",
    "protocol.ext.allow=never",
    "uploadpack.packObjectsHook=",
    "gpg.program=gpg",
];

/// Environment for every git: no system-wide config file, and never a terminal prompt.
pub const ENV: &[(&str, &str)] = &[("GIT_CONFIG_NOSYSTEM", "1"), ("GIT_TERMINAL_PROMPT", "0")];

/// True when `program` (resolved) is git.
pub fn is_git(program: &std::path::Path) -> bool {
    program.file_name().is_some_and(|name| name == "git")
}

/// The arguments that go between `git` and the model's own arguments.
pub fn overrides() -> Vec<String> {
    OVERRIDES
        .iter()
        .flat_map(|kv| ["-c".to_string(), kv.to_string()])
        .collect()
}
