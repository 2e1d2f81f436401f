//! Which commands only read: the judgement that lets run_command and background_command run
//! a call without asking, in the read-only sandbox.
//!
//! It refuses to guess. Every program on the list comes with the options it may take; an
//! option it does not know, a value glued to a short option (`-f.env` is `-f .env`), a file
//! operand outside the work directory, or a program named by a path outside the system's own
//! directories makes the call "not read-only", and then it asks. A wrong "read-only" can still
//! do no harm: the call runs in the read-only sandbox (no writes, no network, secrets hidden).
//!
//! Options that make a program open files the call does not name are left out, because the
//! gate can only judge the files it is told about: recursion (`diff -r`, `diff -N` across
//! directories), following links out of a tree (`ls -L`, `du -L`), and lists of files read
//! from a file (`file -f`).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use dispatch_engine::subject::resolve_path;

/// What the judgement found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Judgement {
    /// The call only reads.
    pub read_only: bool,
    /// The files the call names (operands and file-valued options), resolved against `cwd`.
    pub paths: Vec<PathBuf>,
}

/// What the value of a short option that takes one is.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Value {
    /// A value that is not a file (a count, a format, a pattern).
    Text,
    /// A file the program reads.
    File,
}

/// The options one program (or git subcommand) accepts while staying read-only.
struct Options {
    /// Short flags without a value, as one string of letters.
    short: &'static str,
    /// Short flags with a value (text or file).
    short_value: &'static [(char, Value)],
    /// Long options (`--name`); `=` marks one that takes a value (`--lines=`), `=?` an
    /// optional value (`--color=?`).
    long: &'static [&'static str],
    /// Long options whose value is a file.
    long_file: &'static [&'static str],
    /// Operands must start with this (date's `+FORMAT`: any other operand sets the clock),
    /// and are then not files.
    operand_prefix: Option<char>,
    /// Operands allowed at all.
    operands: bool,
    /// `-NUM` (head -5, git log -3).
    numeric: bool,
}

const NO_OPTIONS: Options = Options {
    short: "",
    short_value: &[],
    long: &[],
    long_file: &[],
    operand_prefix: None,
    operands: false,
    numeric: false,
};

fn program_options(bin: &str) -> Option<Options> {
    let files = |short, short_value, long| Options {
        short,
        short_value,
        long,
        long_file: &[],
        operand_prefix: None,
        operands: true,
        numeric: false,
    };
    Some(match bin {
        "pwd" => Options {
            short: "LP",
            ..NO_OPTIONS
        },
        "whoami" => NO_OPTIONS,
        "uptime" => Options {
            short: "ps",
            long: &["--pretty", "--since"],
            ..NO_OPTIONS
        },
        "uname" => Options {
            short: "asnrvmpio",
            long: &[
                "--all",
                "--kernel-name",
                "--nodename",
                "--kernel-release",
                "--kernel-version",
                "--machine",
                "--processor",
                "--hardware-platform",
                "--operating-system",
            ],
            ..NO_OPTIONS
        },
        "id" => Options {
            short: "ugGnrz",
            operands: true,
            ..NO_OPTIONS
        },
        "hostname" => Options {
            short: "sfdiIAay",
            long: &[
                "--short",
                "--fqdn",
                "--domain",
                "--ip-address",
                "--all-ip-addresses",
                "--all-fqdns",
                "--alias",
            ],
            ..NO_OPTIONS
        },
        "cat" => files(
            "AbeEnstTuv",
            &[],
            &[
                "--show-all",
                "--number-nonblank",
                "--show-ends",
                "--number",
                "--squeeze-blank",
                "--show-tabs",
                "--show-nonprinting",
            ],
        ),
        "head" | "tail" => Options {
            short: "qvz",
            short_value: &[('n', Value::Text), ('c', Value::Text)],
            long: &[
                "--lines=",
                "--bytes=",
                "--quiet",
                "--silent",
                "--verbose",
                "--zero-terminated",
            ],
            numeric: true,
            ..files("", &[], &[])
        },
        "wc" => files(
            "clmwL",
            &[],
            &[
                "--bytes",
                "--chars",
                "--lines",
                "--words",
                "--max-line-length",
            ],
        ),
        "ls" => Options {
            short: "aAbBcCdfFgGhHiklmnNopqQrRsStuUvxXZ1",
            short_value: &[('I', Value::Text), ('w', Value::Text), ('T', Value::Text)],
            long: &[
                "--all",
                "--almost-all",
                "--human-readable",
                "--recursive",
                "--reverse",
                "--size",
                "--classify",
                "--directory",
                "--inode",
                "--numeric-uid-gid",
                "--group-directories-first",
                "--sort=",
                "--time=",
                "--format=",
                "--color=?",
                "--ignore=",
                "--width=",
                "--full-time",
                "--si",
                "--literal",
                "--quote-name",
                "--indicator-style=",
            ],
            ..files("", &[], &[])
        },
        "file" => Options {
            short: "bcdEhiklLNnprsSz0",
            short_value: &[
                ('m', Value::File),
                ('e', Value::Text),
                ('F', Value::Text),
                ('P', Value::Text),
            ],
            long: &[
                "--brief",
                "--mime",
                "--mime-type",
                "--mime-encoding",
                "--dereference",
                "--no-dereference",
                "--keep-going",
                "--raw",
                "--special-files",
                "--uncompress",
                "--extension",
                "--apple",
                "--exclude=",
            ],
            long_file: &["--magic-file"],
            ..files("", &[], &[])
        },
        "stat" => Options {
            short: "LfTt",
            short_value: &[('c', Value::Text)],
            long: &[
                "--dereference",
                "--file-system",
                "--terse",
                "--format=",
                "--printf=",
            ],
            ..files("", &[], &[])
        },
        "realpath" => Options {
            short: "eEmLPqsz",
            long: &[
                "--canonicalize-existing",
                "--canonicalize-missing",
                "--logical",
                "--physical",
                "--quiet",
                "--strip",
                "--no-symlinks",
                "--zero",
            ],
            long_file: &["--relative-to", "--relative-base"],
            ..files("", &[], &[])
        },
        "basename" => Options {
            short: "az",
            short_value: &[('s', Value::Text)],
            long: &["--multiple", "--suffix=", "--zero"],
            operands: true,
            ..NO_OPTIONS
        },
        "dirname" => Options {
            short: "z",
            long: &["--zero"],
            operands: true,
            ..NO_OPTIONS
        },
        "sha256sum" | "md5sum" | "sha1sum" | "sha512sum" | "b2sum" => {
            files("btz", &[], &["--binary", "--text", "--tag", "--zero"])
        }
        "du" => Options {
            short: "0abcDHhkmsSx",
            short_value: &[('d', Value::Text), ('t', Value::Text), ('B', Value::Text)],
            long: &[
                "--all",
                "--apparent-size",
                "--bytes",
                "--total",
                "--human-readable",
                "--si",
                "--summarize",
                "--max-depth=",
                "--threshold=",
                "--block-size=",
                "--one-file-system",
                "--separate-dirs",
                "--count-links",
                "--time",
            ],
            ..files("", &[], &[])
        },
        "df" => Options {
            short: "ahHiklPTx",
            short_value: &[('t', Value::Text), ('B', Value::Text)],
            long: &[
                "--all",
                "--human-readable",
                "--si",
                "--inodes",
                "--local",
                "--portability",
                "--print-type",
                "--total",
                "--output=?",
                "--type=",
                "--exclude-type=",
                "--block-size=",
            ],
            ..files("", &[], &[])
        },
        "diff" => Options {
            short: "abBdeEipqsStTuwy",
            short_value: &[
                ('U', Value::Text),
                ('C', Value::Text),
                ('W', Value::Text),
                ('I', Value::Text),
                ('F', Value::Text),
            ],
            long: &[
                "--brief",
                "--report-identical-files",
                "--unified=?",
                "--context=?",
                "--side-by-side",
                "--ignore-case",
                "--ignore-all-space",
                "--ignore-space-change",
                "--ignore-blank-lines",
                "--ignore-tab-expansion",
                "--ignore-trailing-space",
                "--strip-trailing-cr",
                "--text",
                "--minimal",
                "--color=?",
                "--normal",
                "--suppress-common-lines",
                "--width=",
                "--label=",
                "--show-function-line=",
                "--show-c-function",
                "--expand-tabs",
            ],
            long_file: &["--from-file", "--to-file"],
            numeric: false,
            ..files("", &[], &[])
        },
        "date" => Options {
            short: "uR",
            short_value: &[('d', Value::Text), ('r', Value::File), ('f', Value::File)],
            long: &[
                "--utc",
                "--universal",
                "--rfc-email",
                "--iso-8601=?",
                "--rfc-3339=",
                "--date=",
                "--debug",
            ],
            long_file: &["--reference", "--file"],
            operands: true,
            operand_prefix: Some('+'),
            ..NO_OPTIONS
        },
        _ => return None,
    })
}

/// Git's global options that stay read-only; any other (`-c`, `-C`, `--git-dir`, `--exec-path`,
/// `--config-env`, an unknown one) makes the call ask.
const GIT_GLOBAL: &[&str] = &[
    "--no-pager",
    "-P",
    "--no-optional-locks",
    "--literal-pathspecs",
    "--glob-pathspecs",
    "--noglob-pathspecs",
    "--icase-pathspecs",
    "--no-replace-objects",
    "--no-advice",
];

/// Options the history and diff commands of git share.
const GIT_LOG_LONG: &[&str] = &[
    "--oneline",
    "--stat=?",
    "--shortstat",
    "--numstat",
    "--name-only",
    "--name-status",
    "--graph",
    "--decorate=?",
    "--no-decorate",
    "--all",
    "--patch",
    "--no-patch",
    "--max-count=",
    "--skip=",
    "--since=",
    "--after=",
    "--until=",
    "--before=",
    "--author=",
    "--committer=",
    "--grep=",
    "--format=",
    "--pretty=?",
    "--abbrev-commit",
    "--no-abbrev-commit",
    "--abbrev=?",
    "--no-color",
    "--color=?",
    "--reverse",
    "--first-parent",
    "--merges",
    "--no-merges",
    "--unified=",
    "--cached",
    "--staged",
    "--word-diff=?",
    "--follow",
    "--summary",
    "--date=",
    "--relative-date",
    "--ignore-space-change",
    "--ignore-all-space",
    "--ignore-blank-lines",
    "--no-ext-diff",
    "--no-textconv",
    "--find-renames=?",
    "--diff-filter=",
    "--raw",
    "--full-index",
    "--topo-order",
    "--date-order",
    "--branches=?",
    "--tags=?",
    "--remotes=?",
    "--no-walk",
    "--boundary",
    "--left-right",
    "--cherry-pick",
    "--ancestry-path",
    "--simplify-by-decoration",
    "--parents",
    "--children",
    "--count",
    "--quiet",
    "--exit-code",
    "--minimal",
    "--patience",
    "--histogram",
    "--no-renames",
    "--check",
    "--full-history",
    "--dirstat=?",
    "--compact-summary",
    "--show-signature",
    "--source",
    "--log-size",
    "--email=?",
    "--committer=",
    "--numbered",
    "--regexp-ignore-case",
    "--invert-grep",
    "--all-match",
    "--no-prefix",
    "--root",
    "--no-commit-id",
    "--name-rev",
];

fn git_subcommand(sub: &str) -> Option<Options> {
    let log = Options {
        short: "pusmwbrtzRq",
        short_value: &[('n', Value::Text), ('U', Value::Text), ('M', Value::Text)],
        long: GIT_LOG_LONG,
        long_file: &[],
        operand_prefix: None,
        operands: true,
        numeric: true,
    };
    Some(match sub {
        "log" | "show" | "diff" | "diff-tree" | "shortlog" | "rev-list" | "whatchanged" => log,
        "status" => Options {
            short: "sbvuz",
            short_value: &[],
            long: &[
                "--short",
                "--branch",
                "--porcelain=?",
                "--long",
                "--verbose",
                "--untracked-files=?",
                "--ignored=?",
                "--ignore-submodules=?",
                "--show-stash",
                "--ahead-behind",
                "--no-ahead-behind",
                "--renames",
                "--no-renames",
                "--column=?",
                "--no-column",
            ],
            ..log
        },
        "blame" => Options {
            short: "bcfelnpstwM",
            short_value: &[('L', Value::Text)],
            long: &[
                "--porcelain",
                "--line-porcelain",
                "--incremental",
                "--root",
                "--show-stats",
                "--show-name",
                "--show-number",
                "--show-email",
                "--date=",
                "--abbrev=?",
                "--color-lines",
                "--color-by-age",
            ],
            ..log
        },
        "describe" => Options {
            short: "",
            short_value: &[],
            long: &[
                "--tags",
                "--all",
                "--always",
                "--long",
                "--abbrev=",
                "--exact-match",
                "--first-parent",
                "--contains",
                "--candidates=",
                "--match=",
                "--exclude=",
            ],
            numeric: false,
            ..log
        },
        "rev-parse" => Options {
            short: "q",
            short_value: &[],
            long: &[
                "--show-toplevel",
                "--show-prefix",
                "--show-cdup",
                "--abbrev-ref=?",
                "--short=?",
                "--git-dir",
                "--git-common-dir",
                "--absolute-git-dir",
                "--is-inside-work-tree",
                "--is-inside-git-dir",
                "--is-bare-repository",
                "--verify",
                "--quiet",
                "--symbolic",
                "--symbolic-full-name",
                "--all",
                "--branches",
                "--tags",
                "--show-object-format=?",
            ],
            numeric: false,
            ..log
        },
        "ls-files" => Options {
            short: "cdmoiksuvtz",
            short_value: &[],
            long: &[
                "--cached",
                "--deleted",
                "--modified",
                "--others",
                "--ignored",
                "--stage",
                "--unmerged",
                "--killed",
                "--exclude-standard",
                "--directory",
                "--no-empty-directory",
                "--full-name",
                "--error-unmatch",
                "--eol",
                "--deduplicate",
                "--recurse-submodules",
                "--abbrev=?",
                "--format=",
            ],
            numeric: false,
            ..log
        },
        "ls-tree" => Options {
            short: "rdtlz",
            short_value: &[],
            long: &[
                "--name-only",
                "--name-status",
                "--object-only",
                "--long",
                "--full-name",
                "--full-tree",
                "--abbrev=?",
                "--format=",
            ],
            numeric: false,
            ..log
        },
        "cat-file" => Options {
            short: "tspe",
            short_value: &[],
            long: &[
                "--batch-check=?",
                "--batch=?",
                "--follow-symlinks",
                "--buffer",
            ],
            numeric: false,
            ..log
        },
        _ => return None,
    })
}

// A program named by a relative path (`./cat`) or an arbitrary directory is whatever file sits
// there, not the system tool of that name.
const SYSTEM_BIN_DIRS: &[&str] = &["/bin", "/usr/bin", "/usr/local/bin", "/sbin", "/usr/sbin"];

/// Commands the user declared read-only in the config file (`[commands] read_only`): entries
/// `bin`, `bin a1` or `bin a1 a2`, matched as a prefix of argv. They run without asking, in
/// the read-only sandbox; a command that must write needs an allow rule instead.
#[derive(Clone, Debug, Default)]
pub struct ReadOnlyCommands {
    entries: BTreeSet<String>,
}

impl ReadOnlyCommands {
    /// Adds entries such as `"npm test"`; runs of whitespace count as one space.
    pub fn extend<I: IntoIterator<Item = S>, S: Into<String>>(&mut self, extra: I) {
        for entry in extra {
            let entry = entry
                .into()
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ");
            if !entry.is_empty() {
                self.entries.insert(entry);
            }
        }
    }

    fn covers(&self, bin: &str, args: &[String]) -> bool {
        (0..=args.len().min(2)).any(|n| {
            let words: Vec<&str> = std::iter::once(bin)
                .chain(args[..n].iter().map(String::as_str))
                .collect();
            // `["git log"]` is a program called "git log", not git.
            !words.iter().any(|w| w.contains(char::is_whitespace))
                && self.entries.contains(&words.join(" "))
        })
    }
}

/// Judge `argv` run in `cwd` (absolute) under `workdir` (absolute, resolved).
pub fn judge(argv: &[String], cwd: &Path, workdir: &Path, extra: &ReadOnlyCommands) -> Judgement {
    let mut judgement = Judgement::default();
    let Some((program, args)) = argv.split_first() else {
        return judgement;
    };
    let Some(bin) = program_name(program) else {
        return judgement;
    };
    let inside = |path: &Path| path.starts_with(workdir);
    if !inside(cwd) {
        return judgement;
    }
    let mut files: Vec<&str> = Vec::new();
    let known = if bin == "git" {
        judge_git(args, &mut files)
    } else {
        program_options(bin).is_some_and(|options| parse(&options, args, &mut files))
    };
    let listed = !known && extra.covers(bin, args);
    if listed {
        // The user vouched for the program; its file operands are still checked below.
        files = args
            .iter()
            .filter(|a| !a.starts_with('-'))
            .map(String::as_str)
            .collect();
    }
    judgement.paths = files.iter().map(|f| resolve_path(cwd, f)).collect();
    judgement.read_only = (known || listed) && judgement.paths.iter().all(|p| inside(p));
    judgement
}

fn program_name(program: &str) -> Option<&str> {
    match program.rsplit_once('/') {
        None => Some(program),
        Some((dir, base)) if SYSTEM_BIN_DIRS.contains(&dir) => Some(base),
        Some(_) => None,
    }
}

fn judge_git<'a>(args: &'a [String], files: &mut Vec<&'a str>) -> bool {
    let mut at = 0;
    while let Some(arg) = args.get(at).filter(|a| a.starts_with('-')) {
        if !GIT_GLOBAL.contains(&arg.as_str()) {
            return false;
        }
        at += 1;
    }
    let Some(sub) = args.get(at) else {
        return false;
    };
    let Some(options) = git_subcommand(sub) else {
        return false;
    };
    let rest = &args[at + 1..];
    // Revisions and paths mix before `--`; after it every operand is a path. Every operand is
    // judged as a possible path (a revision such as `HEAD:config/.env` names a file too).
    let mut operands = Vec::new();
    if !parse(&options, rest, &mut operands) {
        return false;
    }
    files.extend(operands);
    true
}

/// Walk `args` against `options`: false at the first thing it does not know. File operands
/// and file-valued options go to `files`.
fn parse<'a>(options: &Options, args: &'a [String], files: &mut Vec<&'a str>) -> bool {
    let mut args = args.iter();
    let mut only_operands = false;
    while let Some(arg) = args.next() {
        if only_operands || arg == "-" || !arg.starts_with('-') {
            if !options.operands {
                return false;
            }
            match options.operand_prefix {
                Some(prefix) if !arg.starts_with(prefix) => return false,
                Some(_) => {}
                // git's operands are revisions or paths; both are checked as paths, so a
                // revision that names a secret file still asks.
                None => files.push(arg),
            }
            continue;
        }
        if arg == "--" {
            only_operands = true;
            continue;
        }
        if let Some(long) = arg.strip_prefix("--") {
            let (name, value) = match long.split_once('=') {
                Some((name, value)) => (name, Some(value)),
                None => (long, None),
            };
            let name = format!("--{name}");
            if options.long_file.contains(&name.as_str()) {
                match value.or_else(|| args.next().map(String::as_str)) {
                    Some(file) => files.push(file),
                    None => return false,
                }
                continue;
            }
            let accepted = options
                .long
                .iter()
                .any(|known| match known.strip_suffix("=?") {
                    Some(bare) => bare == name,
                    None => match known.strip_suffix('=') {
                        Some(bare) => bare == name && value.is_some(),
                        None => *known == name && value.is_none(),
                    },
                });
            if !accepted {
                return false;
            }
            continue;
        }
        let cluster = &arg[1..];
        if options.numeric && cluster.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        // A short cluster: flags, then at most one option whose value is the rest of the
        // cluster or the next argument (`-n5`, `-n 5`, `-f.env`).
        for (at, flag) in cluster.char_indices() {
            if options.short.contains(flag) {
                continue;
            }
            let Some(&(_, kind)) = options.short_value.iter().find(|(c, _)| *c == flag) else {
                return false;
            };
            let glued = &cluster[at + flag.len_utf8()..];
            let value = if glued.is_empty() {
                match args.next() {
                    Some(next) => next.as_str(),
                    None => return false,
                }
            } else {
                glued
            };
            if kind == Value::File {
                files.push(value);
            }
            break;
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn judged(words: &[&str]) -> bool {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let argv: Vec<String> = words.iter().map(|w| w.to_string()).collect();
        judge(&argv, &root, &root, &ReadOnlyCommands::default()).read_only
    }

    #[test]
    fn listed_commands_with_known_options_only_read() {
        for words in [
            &["ls", "-la", "src"][..],
            &["cat", "-n", "README.md"],
            &["head", "-n", "5", "a.txt"],
            &["head", "-5", "a.txt"],
            &["tail", "-n5", "a.txt"],
            &["wc", "-l", "a", "b"],
            &["git", "status", "--short"],
            &["git", "--no-pager", "log", "--oneline", "-n", "3"],
            &["git", "diff", "--stat", "HEAD~1", "--", "src"],
            &["git", "show", "HEAD"],
            &["date", "+%Y-%m-%d"],
            &["/usr/bin/uname", "-a"],
            &["sha256sum", "Cargo.lock"],
        ] {
            assert!(judged(words), "{words:?} should be read-only");
        }
    }

    #[test]
    fn review_payloads_and_unknown_options_are_not_read_only() {
        for words in [
            // The review's critical payload: an unknown git global option must not be guessed.
            &[
                "git",
                "--no-literal-pathspecs",
                "grep",
                "-Osh -c \"id; touch /tmp/x\" x",
                "--max-depth=5",
                "log",
            ][..],
            &["git", "-c", "core.pager=sh", "log"],
            &["git", "-C", "/", "status"],
            &["git", "log", "--output=x"],
            &["git", "log", "--ext-diff"],
            &["git", "diff", "--textconv"],
            &["git", "grep", "x"],
            &["git", "push"],
            // A value glued to a short option is a separate argument: the file is judged.
            &["date", "-f/dev/zero"],
            // The review's second class: options that open files the call does not name.
            &["diff", "-rN", "cfg", "empty"],
            &["diff", "--recursive", "a", "b"],
            &["file", "-f", "list"],
            &["ls", "-RL", "."],
            &["du", "-L", "."],
            &["file", "-f/outside/x"],
            &["date", "-s", "2020-01-01"],
            &["date", "010100002020"],
            &["cat", "/etc/passwd"],
            &["cat", "../x"],
            &["ls", "--hyperlink"],
            &["./cat", "x"],
            &["/tmp/cat", "x"],
            &["rm", "x"],
            &["cat", "--unknown"],
            &["tail", "-c"],
        ] {
            assert!(!judged(words), "{words:?} must not be read-only");
        }
    }

    #[test]
    fn glued_file_values_are_reported_as_paths() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let argv: Vec<String> = ["date", "-f.env"].iter().map(|w| w.to_string()).collect();
        let judgement = judge(&argv, &root, &root, &ReadOnlyCommands::default());
        assert_eq!(judgement.paths, vec![root.join(".env")]);
        assert!(
            judgement.read_only,
            "inside the work dir; the gate asks for .env itself"
        );
    }

    #[test]
    fn a_symlink_out_of_the_work_dir_is_judged_by_its_target() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::write(outside.path().join("id_rsa"), "key").unwrap();
        std::os::unix::fs::symlink(outside.path().join("id_rsa"), root.join("notes")).unwrap();
        let argv: Vec<String> = ["cat", "notes"].iter().map(|w| w.to_string()).collect();
        let judgement = judge(&argv, &root, &root, &ReadOnlyCommands::default());
        assert!(!judgement.read_only);
        assert_eq!(
            judgement.paths,
            vec![outside.path().canonicalize().unwrap().join("id_rsa")]
        );
    }

    #[test]
    fn user_listed_commands_are_prefixes() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let mut extra = ReadOnlyCommands::default();
        extra.extend(["npm run lint"]);
        let argv = |w: &[&str]| w.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(
            judge(
                &argv(&["npm", "run", "lint", "--fix"]),
                &root,
                &root,
                &extra
            )
            .read_only
        );
        assert!(!judge(&argv(&["npm", "run", "build"]), &root, &root, &extra).read_only);
        assert!(!judge(&argv(&["npm run lint"]), &root, &root, &extra).read_only);
    }
}
