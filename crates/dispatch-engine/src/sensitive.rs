//! Sensitive paths (credentials, keys) and the read-only `run_command` judgement of the confirm gate.

use std::collections::BTreeSet;

use serde_json::Value;

/// Private keys; each is also sensitive with a `.pub` suffix because the pair is usually stored together.
const KEY_FILE_NAMES: &[&str] = &[
    "id_rsa",
    "id_dsa",
    "id_ecdsa",
    "id_ed25519",
    "ssh_host_rsa_key",
    "ssh_host_ecdsa_key",
    "ssh_host_ed25519_key",
];

// `.envrc` is direnv's file: it is sourced into the shell and in practice holds the same
// exported secrets as `.env`, so it is treated the same way.
const SECRET_FILE_NAMES: &[&str] = &[
    "authorized_keys",
    "known_hosts",
    ".netrc",
    ".git-credentials",
    ".npmrc",
    ".pypirc",
    "credentials",
    ".env",
    ".envrc",
];

const SECRET_NAME_PREFIXES: &[&str] = &[".env."];

const SECRET_EXTENSIONS: &[&str] = &["pem", "key", "p12", "pfx", "cer", "kdbx"];

// `.docker` is here because `config.json` in it holds registry auth tokens.
const SECRET_DIRS: &[&str] = &[".ssh", ".gnupg", ".aws", ".kube", ".docker"];

/// True for paths that must always ask (credentials, keys).
pub fn is_sensitive_path(path: &str) -> bool {
    let segments: Vec<&str> = path
        .trim()
        .split(['/', '\\'])
        .map(windows_visible_name)
        .filter(|segment| !segment.is_empty() && *segment != ".")
        .collect();
    // `:` splits git's `REV:path` and NTFS streams (`id_rsa:$DATA` opens `id_rsa`), so every
    // colon-separated part is judged on its own; a false alarm only costs a question.
    let in_secret_dir = segments
        .iter()
        .flat_map(|s| s.split(':'))
        .any(|part| SECRET_DIRS.iter().any(|dir| part.eq_ignore_ascii_case(dir)));
    // A repository's config and hooks name programs git runs, even for read-only commands.
    let git_control = segments.windows(2).any(|pair| {
        pair[0].eq_ignore_ascii_case(".git")
            && (pair[1].eq_ignore_ascii_case("config") || pair[1].eq_ignore_ascii_case("hooks"))
    });
    in_secret_dir
        || git_control
        || segments
            .last()
            .is_some_and(|base| base.split(':').any(is_secret_name))
}

/// Windows ignores trailing dots and spaces in names, so `id_rsa.` opens `id_rsa` there.
fn windows_visible_name(segment: &str) -> &str {
    if segment == "." || segment == ".." {
        segment
    } else {
        segment.trim_end_matches(['.', ' '])
    }
}

fn is_secret_name(name: &str) -> bool {
    // Compared case-insensitively because macOS and Windows file systems are.
    let lower = name.to_ascii_lowercase();
    let stem = lower.strip_suffix(".pub").unwrap_or(&lower);
    KEY_FILE_NAMES.contains(&stem)
        || SECRET_FILE_NAMES.contains(&lower.as_str())
        || SECRET_NAME_PREFIXES
            .iter()
            .any(|prefix| lower.starts_with(prefix))
        || lower
            .rsplit_once('.')
            .is_some_and(|(_, ext)| SECRET_EXTENSIONS.contains(&ext))
}

/// Every path-like string in a call's arguments.
pub fn path_args(args: &Value) -> Vec<&str> {
    let mut out = Vec::new();
    let Some(object) = args.as_object() else {
        return out;
    };
    fn push_strings<'a>(value: Option<&'a Value>, out: &mut Vec<&'a str>) {
        match value {
            Some(Value::String(text)) if !text.is_empty() => out.push(text.as_str()),
            // A list where a single path was expected is still a list of paths to check.
            Some(Value::Array(items)) => out.extend(
                items
                    .iter()
                    .filter_map(Value::as_str)
                    .filter(|text| !text.is_empty()),
            ),
            _ => {}
        }
    }
    // One pass over the arguments' own keys (usually a handful) rather than a lookup per
    // known key: this runs for every call that reaches the gate.
    for (key, value) in object {
        match key.as_str() {
            "path" | "file" | "target" | "save_to" | "output_file" | "dir" | "cwd" | "paths"
            | "write_paths" => push_strings(Some(value), &mut out),
            "files" | "queries" => {
                let inner = if key == "files" { "path" } else { "dir" };
                for item in value.as_array().into_iter().flatten() {
                    push_strings(item.get(inner), &mut out);
                }
            }
            "argv" => {
                for item in value
                    .as_array()
                    .into_iter()
                    .flatten()
                    .skip(1)
                    .filter_map(Value::as_str)
                {
                    // `--out=../x` names the file `../x`, not `--out=../x`.
                    let candidate = match item.split_once('=') {
                        Some((flag, value)) if flag.starts_with('-') => value,
                        _ => item,
                    };
                    if looks_like_path(candidate) {
                        out.push(candidate);
                    }
                }
            }
            _ => {}
        }
    }
    out
}

fn looks_like_path(text: &str) -> bool {
    !text.is_empty()
        && (text.contains(['/', '\\'])
            || text.starts_with('.')
            || text.starts_with('~')
            || is_sensitive_path(text))
}

const SEED_READ_ONLY: &[&str] = &[
    "git diff",
    "git log",
    "git show",
    "git status",
    "git blame",
    "git shortlog",
    "git describe",
    "git rev-parse",
    "git rev-list",
    "git ls-files",
    "git ls-tree",
    "git cat-file",
    "git diff-tree",
    "pwd",
    "whoami",
    "date",
    "uname",
    "wc",
    "cat",
    "head",
    "tail",
    "ls",
    "id",
    "hostname",
    "uptime",
    "df",
    "du",
    "file",
    "stat",
    "basename",
    "dirname",
    "realpath",
    "sha256sum",
    "md5sum",
    "diff",
    "cd",
];

/// Commands that run without asking: entries `bin`, `bin a1` or `bin a1 a2`.
#[derive(Clone, Debug)]
pub struct ReadOnlyCommands {
    entries: BTreeSet<String>,
}

impl Default for ReadOnlyCommands {
    fn default() -> Self {
        let mut list = ReadOnlyCommands {
            entries: BTreeSet::new(),
        };
        list.extend(SEED_READ_ONLY.iter().copied());
        list
    }
}

impl ReadOnlyCommands {
    /// Adds entries such as `"npm test"`; runs of whitespace count as one space.
    pub fn extend<I: IntoIterator<Item = S>, S: Into<String>>(&mut self, extra: I) {
        for entry in extra {
            let entry = normalise(&entry.into());
            if !entry.is_empty() {
                self.entries.insert(entry);
            }
        }
    }

    /// True when `candidate` (e.g. `"git log"`) is on the list.
    pub fn contains(&self, candidate: &str) -> bool {
        self.entries.contains(&normalise(candidate))
    }
}

fn normalise(entry: &str) -> String {
    entry.split_whitespace().collect::<Vec<_>>().join(" ")
}

// A program named by a relative path (`./cat`) or an arbitrary directory is whatever file sits
// there, not the system tool of that name, so only these directories keep the base-name rule.
const SYSTEM_BIN_DIRS: &[&str] = &[
    "/bin",
    "/usr/bin",
    "/usr/local/bin",
    "/sbin",
    "/usr/sbin",
    "/opt/homebrew/bin",
];

// Git global flags that take no value; the seed's "a flag followed by a non-flag consumes two"
// would otherwise swallow the subcommand in `git --no-pager log`.
const GIT_BOOLEAN_FLAGS: &[&str] = &[
    "-p",
    "--paginate",
    "-P",
    "--no-pager",
    "--bare",
    "--no-replace-objects",
    "--literal-pathspecs",
    "--glob-pathspecs",
    "--noglob-pathspecs",
    "--icase-pathspecs",
    "--no-optional-locks",
    "--no-lazy-fetch",
    "--no-advice",
];

/// True when `argv` only reads: listed, no network, no sensitive path, no output file.
/// `cwd` is the call's working directory as the model wrote it (`None`: the work directory).
pub fn is_read_only_command(
    argv: &[String],
    network: bool,
    cwd: Option<&str>,
    list: &ReadOnlyCommands,
) -> bool {
    if network {
        return false;
    }
    let Some((program, args)) = argv.split_first() else {
        return false;
    };
    let Some(bin) = program_name(program) else {
        return false;
    };
    if args
        .iter()
        .any(|arg| arg_is_sensitive(arg) || arg_leaves_workdir(arg))
    {
        return false;
    }
    let rest = if bin == "git" {
        if args.iter().any(|arg| is_git_output_flag(arg)) || git_elsewhere(args, cwd) {
            return false;
        }
        match skip_git_global_flags(args) {
            Some(rest) => rest,
            None => return false,
        }
    } else {
        args
    };
    if mutating_form(bin, args) {
        return false;
    }
    let words: Vec<&str> = std::iter::once(bin)
        .chain(rest.iter().take(2).map(String::as_str))
        .collect();
    (1..=words.len())
        .rev()
        .filter_map(|n| words.get(..n))
        // `["git log"]` runs a program called "git log", not git; joining would hide that.
        .filter(|prefix| !prefix.iter().any(|word| word.contains(char::is_whitespace)))
        .any(|prefix| list.contains(&prefix.join(" ")))
}

fn program_name(program: &str) -> Option<&str> {
    match program.rsplit_once(['/', '\\']) {
        None => Some(program),
        Some((dir, base)) if SYSTEM_BIN_DIRS.contains(&dir) => Some(base),
        Some(_) => None,
    }
}

fn arg_is_sensitive(arg: &str) -> bool {
    is_sensitive_path(arg)
        || arg
            .split_once('=')
            .is_some_and(|(_, value)| is_sensitive_path(value))
}

/// An argument naming something outside the work directory: an absolute path (`/proc/…/environ`,
/// `/dev/zero`, another user's files), a home path, or one that climbs out with `..`, as
/// itself or as the value of `--opt=…`. Reading those is for the user to allow, not a list.
fn arg_leaves_workdir(arg: &str) -> bool {
    let leaves = |text: &str| {
        text.starts_with('/')
            || text.starts_with('~')
            || text.split(['/', '\\']).any(|segment| segment == "..")
    };
    leaves(arg) || arg.split_once('=').is_some_and(|(_, value)| leaves(value))
}

/// Whether git (given its arguments after the program) reads a repository other than the work
/// directory's own: `-C`, `--git-dir`, `--work-tree` or a `cwd` pick another one, and a
/// repository's config can name programs that even read-only commands run (core.fsmonitor,
/// diff.external).
fn git_elsewhere(args: &[String], cwd: Option<&str>) -> bool {
    cwd.is_some_and(|dir| !matches!(dir.trim(), "" | "." | "./"))
        || args.iter().any(|arg| {
            arg == "-C"
                || arg.starts_with("--git-dir")
                || arg.starts_with("--work-tree")
                || arg.starts_with("--namespace")
        })
}

fn is_git_output_flag(arg: &str) -> bool {
    // git accepts any unambiguous abbreviation of a long option, so `--outp=x` is `--output=x`;
    // every `--out…` is refused rather than listing abbreviations.
    (arg.starts_with("-o") && !arg.starts_with("--")) || arg.starts_with("--out")
}

/// The arguments after git's global flags, or `None` when a flag can run arbitrary code.
fn skip_git_global_flags(args: &[String]) -> Option<&[String]> {
    let mut i = 0;
    while let Some(flag) = args.get(i).filter(|arg| arg.starts_with('-')) {
        // `-c` and `--config-env` set config such as core.pager or an alias to any command;
        // `--exec-path=` makes git run subcommands from another directory.
        if flag.starts_with("-c")
            || flag.starts_with("--config-env")
            || flag.starts_with("--exec-path=")
        {
            return None;
        }
        let takes_value = !GIT_BOOLEAN_FLAGS.contains(&flag.as_str())
            && !flag.contains('=')
            && args.get(i + 1).is_some_and(|next| !next.starts_with('-'));
        i += if takes_value { 2 } else { 1 };
    }
    args.get(i..)
}

/// Listed programs whose particular arguments change the system instead of reading it.
fn mutating_form(bin: &str, args: &[String]) -> bool {
    match bin {
        "date" => date_sets_clock(args),
        "hostname" => hostname_sets_name(args),
        // `file -C` compiles a magic file and writes `<name>.mgc`.
        "file" => args.iter().any(|arg| {
            short_cluster(arg).is_some_and(|cluster| cluster.contains('C'))
                || arg.starts_with("--comp")
        }),
        _ => false,
    }
}

/// `-abc` without the dash; `None` for long options, `-` and operands.
fn short_cluster(arg: &str) -> Option<&str> {
    arg.strip_prefix('-')
        .filter(|cluster| !cluster.is_empty() && !cluster.starts_with('-'))
}

/// `date -s`/`--set` and a bare `MMDDhhmm` operand set the system clock; `+FORMAT` only prints.
fn date_sets_clock(args: &[String]) -> bool {
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        if arg.starts_with('+') {
            continue;
        }
        if arg == "--" {
            return args.any(|operand| !operand.starts_with('+'));
        }
        if let Some(long) = arg.strip_prefix("--") {
            let (name, value) = match long.split_once('=') {
                Some((name, value)) => (name, Some(value)),
                None => (long, None),
            };
            // getopt_long accepts unambiguous prefixes, so `--s` and `--se` are `--set`.
            if "set".starts_with(name) {
                return true;
            }
            let needs_value = ["date", "file", "reference"]
                .iter()
                .any(|option| option.starts_with(name));
            if needs_value && value.is_none() {
                args.next();
            }
            continue;
        }
        if let Some(cluster) = short_cluster(arg) {
            for (at, flag) in cluster.char_indices() {
                match flag {
                    's' => return true,
                    'd' | 'f' | 'r' => {
                        if cluster.get(at + 1..).is_none_or(str::is_empty) {
                            args.next();
                        }
                        break;
                    }
                    // `-I` takes an optional attached value such as `-Iseconds`.
                    'I' => break,
                    _ => {}
                }
            }
            continue;
        }
        return true;
    }
    false
}

/// `hostname NAME`, `-F FILE`/`--file` and `-b`/`--boot` set the host name.
fn hostname_sets_name(args: &[String]) -> bool {
    args.iter().any(|arg| {
        if let Some(long) = arg.strip_prefix("--") {
            let name = long.split('=').next().unwrap_or(long);
            (!name.is_empty() && "boot".starts_with(name))
                || (name.len() >= 2 && "file".starts_with(name))
        } else if let Some(cluster) = short_cluster(arg) {
            cluster.contains(['F', 'b'])
        } else {
            true
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use serde_json::json;

    fn argv(words: &[&str]) -> Vec<String> {
        words.iter().map(|word| word.to_string()).collect()
    }

    fn read_only(words: &[&str]) -> bool {
        is_read_only_command(&argv(words), false, None, &ReadOnlyCommands::default())
    }

    fn flagged<'a>(paths: &[&'a str]) -> Vec<&'a str> {
        paths
            .iter()
            .copied()
            .filter(|path| is_sensitive_path(path))
            .collect()
    }

    #[test]
    fn ssh_keys_and_their_public_halves_are_sensitive() {
        let paths = [
            "id_rsa",
            "~/.config/id_rsa.pub",
            "keys/id_dsa",
            "id_ecdsa.pub",
            "backup/id_ed25519",
            "/etc/ssh/ssh_host_rsa_key",
            "etc/ssh_host_ecdsa_key.pub",
            "ssh_host_ed25519_key",
        ];
        assert_eq!(flagged(&paths), paths.to_vec());
    }

    #[test]
    fn credential_file_names_are_sensitive() {
        let paths = [
            "authorized_keys",
            "known_hosts",
            "/home/u/.netrc",
            ".git-credentials",
            "web/.npmrc",
            ".pypirc",
            "creds/credentials",
            ".env",
            "app/.env.production",
            ".envrc",
        ];
        assert_eq!(flagged(&paths), paths.to_vec());
    }

    #[test]
    fn secret_extensions_are_sensitive_in_any_case() {
        let paths = [
            "tls/server.pem",
            "server.KEY",
            "cert.P12",
            "a.pfx",
            "ca.Cer",
            "vault.kdbx",
        ];
        assert_eq!(flagged(&paths), paths.to_vec());
    }

    #[test]
    fn anything_under_a_secret_directory_is_sensitive() {
        let paths = [
            "~/.ssh/config",
            "/home/u/.gnupg/pubring.kbx",
            ".aws/config",
            "/root/.kube/config",
            "~/.docker/config.json",
            "~/.ssh",
        ];
        assert_eq!(flagged(&paths), paths.to_vec());
    }

    #[test]
    fn separators_trailing_slashes_and_dot_segments_do_not_hide_secrets() {
        let paths = [
            r"C:\Users\u\.ssh\id_rsa",
            r"proj\.env",
            "./.env",
            "~/.ssh/",
            "./keys/./id_rsa",
            " .env ",
            "id_rsa.",
            "id_rsa:$DATA",
            "HEAD:config/.env",
        ];
        assert_eq!(flagged(&paths), paths.to_vec());
    }

    #[test]
    fn ordinary_files_are_not_sensitive() {
        let paths = [
            "src/key_handling.rs",
            "environment.md",
            ".environment",
            "src/env.rs",
            "docs/pem.md",
            "Cargo.toml",
            "keys/README",
            "ssh/notes.txt",
            "credentials.rs",
            "",
            "/",
        ];
        assert_eq!(flagged(&paths), Vec::<&str>::new());
    }

    #[test]
    fn path_args_collects_every_documented_key() {
        let args = json!({
            "path": "a",
            "file": "b",
            "target": "c",
            "save_to": "d",
            "output_file": "e",
            "dir": "f",
            "cwd": "g",
            "paths": ["h", 1, "i"],
            "write_paths": ["j"],
            "files": [{"path": "k"}, {"name": "x"}, {"path": "l"}],
            "queries": [{"dir": "m"}, {"pattern": "y"}],
            "url": "https://example.com/not/a/path",
            "mode": "read"
        });
        // Collected in the arguments' key order; what matters is that none is missed.
        let mut found = path_args(&args);
        found.sort_unstable();
        assert_eq!(
            found,
            vec![
                "a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m"
            ]
        );
    }

    #[test]
    fn path_args_takes_path_like_argv_items_but_not_the_program() {
        let args = json!({
            "argv": ["./build.sh", "status", "src/main.rs", ".env", "~", "id_rsa", "-v",
                     "--out=../x", "--name=plain", "server.pem", "notes"]
        });
        assert_eq!(
            path_args(&args),
            vec!["src/main.rs", ".env", "~", "id_rsa", "../x", "server.pem"]
        );
    }

    #[test]
    fn path_args_of_a_non_object_is_empty() {
        assert_eq!(path_args(&json!(["path", "x"])), Vec::<&str>::new());
        assert_eq!(path_args(&json!("src/x")), Vec::<&str>::new());
    }

    #[test]
    fn default_list_holds_the_seed_commands() {
        let list = ReadOnlyCommands::default();
        let listed: Vec<&str> = SEED_READ_ONLY
            .iter()
            .copied()
            .filter(|entry| list.contains(entry))
            .collect();
        assert_eq!(listed, SEED_READ_ONLY.to_vec());
        assert_eq!(list.contains("git push"), false);
        assert_eq!(list.contains("rm"), false);
    }

    #[test]
    fn listed_commands_are_read_only() {
        assert_eq!(read_only(&["ls", "-la", "src"]), true);
        assert_eq!(read_only(&["git", "status"]), true);
        assert_eq!(read_only(&["git", "log", "--oneline", "-5"]), true);
        assert_eq!(read_only(&["/usr/bin/cat", "README.md"]), true);
    }

    #[test]
    fn unlisted_commands_are_not_read_only() {
        assert_eq!(read_only(&["rm", "-rf", "x"]), false);
        assert_eq!(read_only(&["git", "push"]), false);
        assert_eq!(read_only(&["git"]), false);
    }

    #[test]
    fn empty_argv_is_not_read_only() {
        assert_eq!(read_only(&[]), false);
    }

    #[test]
    fn network_access_is_not_read_only() {
        let list = ReadOnlyCommands::default();
        assert_eq!(
            is_read_only_command(&argv(&["ls"]), true, None, &list),
            false
        );
        assert_eq!(
            is_read_only_command(&argv(&["ls"]), false, None, &list),
            true
        );
    }

    #[test]
    fn program_outside_system_directories_is_not_read_only() {
        assert_eq!(read_only(&["./cat", "x"]), false);
        assert_eq!(read_only(&["scripts/ls"]), false);
        assert_eq!(read_only(&["/tmp/evil/ls"]), false);
        assert_eq!(read_only(&["/bin/ls"]), true);
    }

    #[test]
    fn program_name_with_whitespace_is_not_read_only() {
        assert_eq!(read_only(&["git log"]), false);
        assert_eq!(read_only(&["git", "log -p"]), false);
    }

    #[test]
    fn git_on_another_repository_is_not_read_only() {
        // Another repository's config can name programs even `status` runs (core.fsmonitor).
        assert_eq!(read_only(&["git", "-C", "sub/dir", "status"]), false);
        assert_eq!(read_only(&["git", "--git-dir=.git", "log"]), false);
        assert_eq!(
            read_only(&["git", "--work-tree", "w", "--git-dir=.git", "diff", "HEAD"]),
            false
        );
        assert_eq!(read_only(&["git", "--no-pager", "log"]), true);
        let list = ReadOnlyCommands::default();
        let status = argv(&["git", "status"]);
        assert!(!is_read_only_command(
            &status,
            false,
            Some("fix/evil.git"),
            &list
        ));
        assert!(is_read_only_command(&status, false, Some("."), &list));
        assert!(is_read_only_command(
            &argv(&["ls"]),
            false,
            Some("src"),
            &list
        ));
    }

    #[test]
    fn arguments_outside_the_work_directory_are_not_read_only() {
        for argv in [
            &["cat", "/proc/self/environ"][..],
            &["cat", "/dev/zero"],
            &["ls", "../.."],
            &["cat", "src/../../etc/passwd"],
            &["head", "~/notes"],
            &["grep", "--file=/etc/hosts", "x"],
        ] {
            assert_eq!(read_only(argv), false, "{argv:?}");
        }
        assert_eq!(read_only(&["cat", "src/main.rs"]), true);
        assert_eq!(
            read_only(&["ls", "-la", "src/.."]),
            false,
            "`..` anywhere climbs"
        );
    }

    #[test]
    fn a_repositorys_config_and_hooks_are_sensitive() {
        assert!(is_sensitive_path(".git/config"));
        assert!(is_sensitive_path("sub/.git/hooks/pre-commit"));
        assert!(is_sensitive_path("fix/evil.git/../.GIT/Config"));
        assert!(!is_sensitive_path(".git/HEAD"));
        assert!(!is_sensitive_path("docs/config"));
    }

    #[test]
    fn git_boolean_global_flag_keeps_the_subcommand() {
        assert_eq!(read_only(&["git", "--no-pager", "log", "-3"]), true);
        assert_eq!(read_only(&["git", "--no-pager", "commit"]), false);
    }

    #[test]
    fn git_with_c_flag_is_not_read_only() {
        assert_eq!(
            read_only(&["git", "-c", "core.pager=sh -c evil", "log"]),
            false
        );
        assert_eq!(read_only(&["git", "-C", "d", "-c", "a=b", "status"]), false);
        assert_eq!(
            read_only(&["git", "--config-env=core.pager=X", "log"]),
            false
        );
        assert_eq!(read_only(&["git", "--exec-path=/tmp", "status"]), false);
    }

    #[test]
    fn git_output_flags_are_not_read_only() {
        for flag in [
            "-o",
            "-opatches",
            "--output",
            "--output=diff.txt",
            "--output-directory",
            "--output-directory=out",
            "--outp=x",
        ] {
            assert_eq!(read_only(&["git", "diff", flag]), false, "{flag}");
        }
        assert_eq!(read_only(&["git", "log", "--oneline"]), true);
    }

    #[test]
    fn cat_of_ssh_key_is_not_read_only() {
        assert_eq!(read_only(&["cat", "/home/u/.ssh/id_rsa"]), false);
        assert_eq!(read_only(&["cat", "id_ed25519"]), false);
        assert_eq!(read_only(&["head", "--file=.env"]), false);
        assert_eq!(read_only(&["git", "show", "HEAD:deploy/.env"]), false);
        assert_eq!(read_only(&["git", "-C", "~/.ssh", "log"]), false);
    }

    #[test]
    fn date_that_sets_the_clock_is_not_read_only() {
        // A read-only verdict runs without asking, and setting the clock breaks TLS, logs and builds.
        assert_eq!(read_only(&["date", "-s", "2020-01-01"]), false);
        assert_eq!(read_only(&["date", "--set=2020-01-01"]), false);
        assert_eq!(read_only(&["date", "--se", "2020-01-01"]), false);
        assert_eq!(read_only(&["date", "-us", "2020-01-01"]), false);
        assert_eq!(read_only(&["date", "01010000"]), false);
        assert_eq!(read_only(&["date", "--", "01010000"]), false);
    }

    #[test]
    fn date_that_only_prints_is_read_only() {
        assert_eq!(read_only(&["date"]), true);
        assert_eq!(read_only(&["date", "+%s"]), true);
        assert_eq!(read_only(&["date", "-u", "+%F"]), true);
        assert_eq!(read_only(&["date", "-d", "tomorrow", "+%F"]), true);
        assert_eq!(read_only(&["date", "--date", "next monday"]), true);
        assert_eq!(read_only(&["date", "-Iseconds"]), true);
    }

    #[test]
    fn hostname_that_sets_the_name_is_not_read_only() {
        assert_eq!(read_only(&["hostname", "newname"]), false);
        assert_eq!(read_only(&["hostname", "-F", "/etc/hostname"]), false);
        assert_eq!(read_only(&["hostname", "--boot"]), false);
        assert_eq!(read_only(&["hostname"]), true);
        assert_eq!(read_only(&["hostname", "--fqdn"]), true);
        assert_eq!(read_only(&["hostname", "-s"]), true);
    }

    #[test]
    fn file_compile_is_not_read_only() {
        assert_eq!(read_only(&["file", "-C", "-m", "magic"]), false);
        assert_eq!(read_only(&["file", "--compile"]), false);
        assert_eq!(read_only(&["file", "README.md"]), true);
    }

    #[test]
    fn extended_list_is_consulted_for_two_and_three_word_entries() {
        let mut list = ReadOnlyCommands::default();
        assert_eq!(
            is_read_only_command(&argv(&["npm", "test"]), false, None, &list),
            false
        );
        list.extend(["npm  test", "cargo metadata --offline", ""]);
        assert_eq!(
            is_read_only_command(&argv(&["npm", "test", "--", "-x"]), false, None, &list),
            true
        );
        assert_eq!(
            is_read_only_command(
                &argv(&["cargo", "metadata", "--offline", "--format-version=1"]),
                false,
                None,
                &list
            ),
            true
        );
        assert_eq!(
            is_read_only_command(&argv(&["cargo", "metadata"]), false, None, &list),
            false
        );
        assert_eq!(list.contains(""), false);
    }
}
