//! The sandbox's properties as a table of real commands: each row runs in fresh temp dirs and
//! asserts its outcome, the note the model would read, and that nothing outside the places
//! its level may write changed.

use std::path::Path;
use std::time::Duration;

use dispatch_sandbox::{Level, Limits, MIB};
use pretty_assertions::assert_eq;

use super::fixture::{Fixture, Outcome, SSH_SECRET, STORE_KEY, pong_server, run, sandbox, which};

type Check = Box<dyn Fn(&Fixture, &Outcome)>;

struct Case {
    name: &'static str,
    level: Level,
    argv: Vec<&'static str>,
    network: bool,
    limits: Option<Limits>,
    write_paths: Vec<&'static str>,
    env: Vec<(&'static str, String)>,
    stdin: Option<&'static str>,
    timeout: Duration,
    setup: Option<fn(&Fixture)>,
    needs: Vec<&'static str>,
    check: Check,
}

fn case(name: &'static str, level: Level, argv: &[&'static str], check: Check) -> Case {
    Case {
        name,
        level,
        argv: argv.to_vec(),
        network: false,
        limits: None,
        write_paths: Vec::new(),
        env: Vec::new(),
        stdin: None,
        timeout: Duration::from_secs(30),
        setup: None,
        needs: Vec::new(),
        check,
    }
}

impl Case {
    fn network(mut self) -> Self {
        self.network = true;
        self
    }
    fn limits(mut self, limits: Limits) -> Self {
        self.limits = Some(limits);
        self
    }
    fn needs(mut self, program: &'static str) -> Self {
        self.needs.push(program);
        self
    }
    fn setup(mut self, f: fn(&Fixture)) -> Self {
        self.setup = Some(f);
        self
    }
    fn timeout(mut self, secs: u64) -> Self {
        self.timeout = Duration::from_secs(secs);
        self
    }
}

/// Exit 0 and `text` on stdout.
fn ok(text: &'static str) -> Check {
    Box::new(move |_, o| {
        assert_eq!(o.code(), Some(0), "{o:#?}");
        assert!(o.stdout.contains(text), "stdout lacks {text:?}: {o:#?}");
    })
}

/// A non-zero exit with a `sandbox:` note containing `note`, and no secret in the output.
fn blocked(note: &'static str) -> Check {
    Box::new(move |_, o| {
        assert_ne!(o.code(), Some(0), "{o:#?}");
        let n = o
            .note
            .as_deref()
            .unwrap_or_else(|| panic!("no note: {o:#?}"));
        assert!(n.starts_with("sandbox: "), "{n}");
        assert!(n.contains(note), "note lacks {note:?}: {n}");
        for secret in [
            SSH_SECRET,
            STORE_KEY,
            "AWS-SECRET",
            "NETRC-SECRET",
            "allow = []",
        ] {
            assert!(
                !o.stdout.contains(secret) && !o.stderr.contains(secret),
                "{o:#?}"
            );
        }
    })
}

fn both(a: Check, b: Check) -> Check {
    Box::new(move |f, o| {
        a(f, o);
        b(f, o);
    })
}

const RO: Level = Level::ReadOnly;
const WS: Level = Level::Workspace;
const READ_ONLY_NOTE: &str = "read-only sandbox allows no writes outside its temp dir";
const WORKSPACE_NOTE: &str = "workspace sandbox allows writes only in the work directory";
const HIDDEN_NOTE: &str = "hidden in the sandbox";
const NETWORK_NOTE: &str = "ask again with network: true";

fn small_files() -> Limits {
    Limits {
        file_size: MIB,
        ..Limits::default()
    }
}

fn cases() -> Vec<Case> {
    let sh = |script: &'static str| vec!["sh", "-c", script];
    let mut cases = vec![
        // Reading works.
        case("ls the work dir", RO, &["ls", "{work}"], ok("README")),
        case(
            "cat in the work dir, read-only",
            RO,
            &["cat", "README"],
            ok("hello from the work dir"),
        ),
        case(
            "cat in the work dir, workspace",
            WS,
            &["cat", "README"],
            ok("hello from the work dir"),
        ),
        case(
            "system files are readable",
            RO,
            &["cat", "/etc/passwd"],
            ok("root:"),
        ),
        case(
            "env passes",
            RO,
            &["sh", "-c", "echo \"$FOO\""],
            ok("bar-value"),
        )
        .env_var("FOO", "bar-value"),
        case(
            "TMPDIR is the private /tmp",
            RO,
            &["sh", "-c", "echo \"$TMPDIR\""],
            ok("/tmp"),
        ),
        case("stdin reaches the command", RO, &["cat"], ok("piped in")).stdin("piped in"),
        case(
            "exit codes are preserved",
            RO,
            &["sh", "-c", "exit 42"],
            Box::new(|_, o| {
                assert_eq!(o.code(), Some(42));
                assert_eq!(o.note, None);
            }),
        ),
        case(
            "cargo --version",
            RO,
            &["{cargo}", "--version"],
            ok("cargo "),
        ),
        case(
            "git status in a repo in the work dir",
            RO,
            &["git", "status"],
            ok("On branch"),
        )
        .needs("git")
        .setup(git_repo),
        case(
            "git status, workspace",
            WS,
            &["git", "status", "--short"],
            ok("?? README"),
        )
        .needs("git")
        .setup(git_repo),
        case(
            "node runs under the memory limit",
            RO,
            &["node", "-e", "console.log(6*7)"],
            ok("42"),
        )
        .needs("node"),
        case(
            "python runs under the memory limit",
            RO,
            &["python3", "-c", "print(6*7)"],
            ok("42"),
        )
        .needs("python3"),
        // The private temp dir.
        case(
            "read-only may write its own /tmp, which the host never sees",
            RO,
            &sh("echo scratch > /tmp/td-sbx-probe && cat /tmp/td-sbx-probe"),
            Box::new(|_, o| {
                assert_eq!(o.code(), Some(0), "{o:#?}");
                assert!(o.stdout.contains("scratch"));
                assert!(!Path::new("/tmp/td-sbx-probe").exists());
            }),
        ),
        // Writes.
        case(
            "read-only cannot write in the work dir",
            RO,
            &["touch", "{work}/new"],
            blocked(READ_ONLY_NOTE),
        ),
        case(
            "read-only cannot write outside",
            RO,
            &sh("echo x > {outside}/new"),
            blocked(READ_ONLY_NOTE),
        ),
        case(
            "read-only cannot change HOME",
            RO,
            &sh("echo x >> {home}/.bashrc"),
            blocked(READ_ONLY_NOTE),
        ),
        case(
            "read-only cannot delete",
            RO,
            &["rm", "-rf", "{outside}"],
            blocked(READ_ONLY_NOTE),
        ),
        case(
            "workspace writes in the work dir",
            WS,
            &sh("echo made > {work}/new && mkdir -p {work}/d/e && echo deep > {work}/d/e/f"),
            Box::new(|f, o| {
                assert_eq!(o.code(), Some(0), "{o:#?}");
                assert_eq!(
                    std::fs::read_to_string(f.work.join("new")).unwrap(),
                    "made\n"
                );
                assert_eq!(
                    std::fs::read_to_string(f.work.join("d/e/f")).unwrap(),
                    "deep\n"
                );
            }),
        ),
        case(
            "workspace cannot write outside",
            WS,
            &sh("echo x > {outside}/new"),
            blocked(WORKSPACE_NOTE),
        ),
        case(
            "workspace cannot change HOME",
            WS,
            &sh("echo x >> {home}/.bashrc"),
            blocked(WORKSPACE_NOTE),
        ),
        case(
            "workspace cannot delete outside",
            WS,
            &["rm", "-rf", "{outside}"],
            blocked(WORKSPACE_NOTE),
        ),
        case(
            "workspace cannot write /etc",
            WS,
            &["touch", "/etc/td-sbx-probe"],
            blocked(WORKSPACE_NOTE),
        ),
        case(
            "workspace writes a declared path outside the work dir, nothing beside it",
            WS,
            &sh("echo ok > {outside}/allowed/f && echo no > {outside}/f"),
            Box::new(|f, o| {
                assert_ne!(o.code(), Some(0), "{o:#?}");
                assert_eq!(
                    std::fs::read_to_string(f.outside.join("allowed/f")).unwrap(),
                    "ok\n"
                );
                assert!(!f.outside.join("f").exists());
                assert!(o.note.as_deref().unwrap().contains("allowed"), "{o:#?}");
            }),
        )
        .write_path("{outside}/allowed")
        .setup(|f| std::fs::create_dir(f.outside.join("allowed")).unwrap()),
        case(
            "workspace cannot write .tooldispatch",
            WS,
            &sh("echo 'allow = [\"*\"]' > {work}/.tooldispatch/rules.toml"),
            blocked(HIDDEN_NOTE),
        ),
        case(
            "read-only cannot write .tooldispatch",
            RO,
            &sh("echo x > {work}/.tooldispatch/new"),
            blocked(HIDDEN_NOTE),
        ),
        case(
            "workspace cannot replace .tooldispatch",
            WS,
            &["mv", "{work}/.tooldispatch", "{work}/moved"],
            both(
                blocked(HIDDEN_NOTE),
                Box::new(|f, _| {
                    assert!(f.work.join(".tooldispatch/rules.toml").exists());
                }),
            ),
        ),
        // Hidden paths.
        case(
            "read-only cannot read .tooldispatch",
            RO,
            &["cat", "{work}/.tooldispatch/rules.toml"],
            blocked(HIDDEN_NOTE),
        ),
        case(
            "~/.ssh/id_rsa is unreadable, read-only",
            RO,
            &["cat", "{home}/.ssh/id_rsa"],
            blocked("/.ssh is hidden"),
        ),
        case(
            "~/.ssh/id_rsa is unreadable, workspace",
            WS,
            &["cat", "{home}/.ssh/id_rsa"],
            blocked("/.ssh is hidden"),
        ),
        case(
            "~/.ssh cannot be listed",
            RO,
            &["ls", "{home}/.ssh"],
            blocked(HIDDEN_NOTE),
        ),
        case(
            "~/.aws is unreadable",
            RO,
            &["cat", "{home}/.aws/credentials"],
            blocked(HIDDEN_NOTE),
        ),
        case(
            "~/.netrc is unreadable",
            WS,
            &["cat", "{home}/.netrc"],
            blocked(HIDDEN_NOTE),
        ),
        case(
            "the config dir is unreadable",
            RO,
            &["cat", "{home}/.config/tooldispatch/config.toml"],
            blocked(HIDDEN_NOTE),
        ),
        case(
            "the store key is unreadable",
            RO,
            &["cat", "{data}/store.db.key"],
            blocked(HIDDEN_NOTE),
        ),
        case(
            "the store is unreadable",
            WS,
            &["cat", "{data}/store.db"],
            blocked(HIDDEN_NOTE),
        ),
        case(
            "a link in the work dir to the key is blocked",
            RO,
            &["cat", "key-link"],
            blocked(HIDDEN_NOTE),
        ),
        case(
            "a link in the work dir to ~/.ssh is blocked",
            WS,
            &["cat", "ssh-link/id_rsa"],
            blocked(HIDDEN_NOTE),
        ),
        case(
            "a link in the work dir to id_rsa is blocked",
            WS,
            &["cat", "id-link"],
            blocked(HIDDEN_NOTE),
        ),
        case(
            "copying the key out through a link is blocked",
            WS,
            &["cp", "id-link", "{work}/stolen"],
            blocked(HIDDEN_NOTE),
        ),
        case(
            "a data dir inside the work dir is hidden too",
            WS,
            &["cat", "{work}/.data/store.db.key"],
            blocked(HIDDEN_NOTE),
        )
        .setup(|f| {
            std::fs::create_dir(f.work.join(".data")).unwrap();
            std::fs::write(f.work.join(".data/store.db.key"), STORE_KEY).unwrap();
        }),
        // Network.
        case(
            "read-only has no network",
            RO,
            &["curl", "-sS", "--max-time", "5", "http://127.0.0.1:{port}/"],
            blocked(NETWORK_NOTE),
        )
        .needs("curl"),
        case(
            "read-only has no network even when asked",
            RO,
            &["curl", "-sS", "--max-time", "5", "http://127.0.0.1:{port}/"],
            blocked(NETWORK_NOTE),
        )
        .network()
        .needs("curl"),
        case(
            "workspace has no network by default",
            WS,
            &["curl", "-sS", "--max-time", "5", "http://127.0.0.1:{port}/"],
            blocked(NETWORK_NOTE),
        )
        .needs("curl"),
        case(
            "workspace with network: true connects",
            WS,
            &["curl", "-sS", "--max-time", "5", "http://127.0.0.1:{port}/"],
            ok("pong"),
        )
        .network()
        .needs("curl"),
        // Limits.
        case(
            "/dev/zero into a work file stops at the file-size limit",
            WS,
            &sh("head -c 20000000 /dev/zero > {work}/big"),
            both(
                blocked("file-size limit of 1 MiB"),
                Box::new(|f, _| {
                    assert!(std::fs::metadata(f.work.join("big")).unwrap().len() <= MIB);
                }),
            ),
        )
        .limits(small_files()),
        case(
            "dd past the file-size limit (no shell)",
            WS,
            &[
                "dd",
                "if=/dev/zero",
                "of={work}/big",
                "bs=65536",
                "count=100",
            ],
            blocked("file-size limit of 1 MiB"),
        )
        .limits(small_files()),
        case(
            "/dev/zero into the private /tmp stops too",
            RO,
            &sh("cat /dev/zero > /tmp/big"),
            blocked("file-size limit"),
        )
        .limits(small_files()),
        case(
            "a memory hog ends with a clear message",
            RO,
            &["python3", "-c", "b = bytearray(1024 * 1024 * 1024)"],
            blocked("memory under the sandbox's limit of 256 MiB per process"),
        )
        .limits(Limits {
            memory: 256 * MIB,
            ..Limits::default()
        })
        .needs("python3"),
        // Privileges and other processes.
        case(
            "no capabilities and no new privileges, even as root",
            WS,
            &[
                "grep",
                "-E",
                "^(CapEff|CapPrm|NoNewPrivs)",
                "/proc/self/status",
            ],
            Box::new(|_, o| {
                assert_eq!(o.code(), Some(0), "{o:#?}");
                assert!(
                    o.stdout.contains("CapEff:\t0000000000000000"),
                    "{}",
                    o.stdout
                );
                assert!(
                    o.stdout.contains("CapPrm:\t0000000000000000"),
                    "{}",
                    o.stdout
                );
                assert!(o.stdout.contains("NoNewPrivs:\t1"), "{}", o.stdout);
            }),
        ),
        case(
            "a setuid-root binary gains nothing",
            WS,
            &[
                "{work}/suid-grep",
                "-E",
                "^(CapEff|NoNewPrivs|Uid)",
                "/proc/self/status",
            ],
            Box::new(|_, o| {
                assert_eq!(o.code(), Some(0), "{o:#?}");
                assert!(
                    o.stdout.contains("CapEff:\t0000000000000000"),
                    "{}",
                    o.stdout
                );
                assert!(o.stdout.contains("NoNewPrivs:\t1"), "{}", o.stdout);
                let uid = rustix::process::getuid().as_raw().to_string();
                let uids = o.stdout.lines().find(|l| l.starts_with("Uid:")).unwrap();
                assert!(uids.split_whitespace().skip(1).all(|u| u == uid), "{uids}");
            }),
        )
        .setup(|f| {
            use std::os::unix::fs::PermissionsExt;
            let copy = f.work.join("suid-grep");
            std::fs::copy(which("grep").unwrap(), &copy).unwrap();
            std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o4755)).unwrap();
        }),
        case(
            "su does not make anyone root",
            WS,
            &["su", "-c", "id -u > {work}/rooted", "root"],
            Box::new(|f, o| {
                // As root `su` has nothing to gain and may run; the point is it cannot gain caps.
                if !rustix::process::getuid().is_root() {
                    assert_ne!(o.code(), Some(0), "{o:#?}");
                    assert!(!f.work.join("rooted").exists());
                }
            }),
        )
        .needs("su")
        .timeout(10),
        case(
            "mount is refused (no CAP_SYS_ADMIN)",
            WS,
            &["mount", "-t", "tmpfs", "none", "{work}"],
            Box::new(|_, o| {
                assert_ne!(o.code(), Some(0), "{o:#?}");
            }),
        )
        .needs("mount"),
        case(
            "chown is refused (no CAP_CHOWN)",
            WS,
            &["chown", "1", "{work}/README"],
            Box::new(|f, o| {
                use std::os::unix::fs::MetadataExt;
                assert_ne!(o.code(), Some(0), "{o:#?}");
                assert_eq!(
                    std::fs::metadata(f.work.join("README")).unwrap().uid(),
                    rustix::process::getuid().as_raw()
                );
            }),
        ),
        case(
            "the process-limit cgroup cannot be left",
            WS,
            &sh(
                "for f in /sys/fs/cgroup/pids/cgroup.procs /sys/fs/cgroup/unified/cgroup.procs /sys/fs/cgroup/cgroup.procs; do [ -e $f ] && echo $$ > $f; done",
            ),
            blocked(WORKSPACE_NOTE),
        ),
        case(
            "nested user namespaces are refused",
            RO,
            &["unshare", "-r", "true"],
            Box::new(|_, o| {
                assert_ne!(o.code(), Some(0), "{o:#?}");
            }),
        )
        .needs("unshare"),
        case(
            "another process's environ is out of reach",
            RO,
            &["cat", "/proc/{pid}/environ"],
            Box::new(|_, o| {
                assert_ne!(o.code(), Some(0), "{o:#?}");
                assert!(o.stderr.contains("No such file"), "{o:#?}");
            }),
        ),
        case(
            "only the sandbox's own processes are visible",
            RO,
            &sh("ls /proc | grep -c '^[0-9]'"),
            Box::new(|_, o| {
                assert_eq!(o.code(), Some(0), "{o:#?}");
                let n: u32 = o.stdout.trim().parse().unwrap();
                assert!(n <= 6, "{n} processes visible");
            }),
        ),
        case(
            "strace cannot attach to the test process",
            WS,
            &["strace", "-p", "{pid}"],
            Box::new(|_, o| {
                assert_ne!(o.code(), Some(0), "{o:#?}");
            }),
        )
        .needs("strace")
        .timeout(10),
    ];
    cases.push(
        case(
            "a bounded fork bomb hits the process limit",
            WS,
            &sh("i=0; while [ $i -lt 2000 ]; do sleep 30 & i=$((i+1)); done; wait"),
            blocked("limit of 64 processes"),
        )
        .limits(Limits {
            processes: 64,
            ..Limits::default()
        })
        .timeout(60),
    );
    cases
}

impl Case {
    fn env_var(mut self, name: &'static str, value: &str) -> Self {
        self.env.push((name, value.to_string()));
        self
    }
    fn stdin(mut self, text: &'static str) -> Self {
        self.stdin = Some(text);
        self
    }
    fn write_path(mut self, path: &'static str) -> Self {
        self.write_paths.push(path);
        self
    }
}

fn git_repo(f: &Fixture) {
    let status = std::process::Command::new(which("git").unwrap())
        .args(["init", "-q"])
        .current_dir(&f.work)
        .env("HOME", &f.home)
        .status()
        .unwrap();
    assert!(status.success());
}

fn expand(arg: &str, f: &Fixture, port: u16) -> String {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    arg.replace("{work}", &f.work.to_string_lossy())
        .replace("{home}", &f.home.to_string_lossy())
        .replace("{outside}", &f.outside.to_string_lossy())
        .replace("{data}", &f.data.to_string_lossy())
        .replace("{port}", &port.to_string())
        .replace("{pid}", &std::process::id().to_string())
        .replace("{cargo}", &cargo)
}

#[test]
fn every_case_holds_and_nothing_outside_changes() {
    let Some(sandbox) = sandbox() else { return };
    let port = pong_server();
    let cases = cases();
    assert!(cases.len() >= 40, "{} cases", cases.len());
    let mut ran = 0;
    for case in cases {
        if let Some(missing) = case.needs.iter().find(|p| which(p).is_none()) {
            dispatch_testkit::skipped(&format!("case {:?}: {missing} is not installed", case.name));
            continue;
        }
        if case.name.contains("fork bomb") && !sandbox.limits_processes() {
            dispatch_testkit::skipped(&format!(
                "case {:?}: no process limit on this machine",
                case.name
            ));
            continue;
        }
        let f = Fixture::new();
        if let Some(setup) = case.setup {
            setup(&f);
        }
        let mut policy = f.policy(case.level);
        policy.network = case.network;
        if let Some(limits) = case.limits {
            policy.limits = limits;
        }
        policy.write_paths = case
            .write_paths
            .iter()
            .map(|p| expand(p, &f, port).into())
            .collect();
        let argv: Vec<String> = case.argv.iter().map(|a| expand(a, &f, port)).collect();
        if which(&argv[0]).is_none_or(|p| !p.exists()) {
            dispatch_testkit::skipped(&format!(
                "case {:?}: {} is not installed",
                case.name, argv[0]
            ));
            continue;
        }
        let env: Vec<(String, String)> = case
            .env
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect();
        let may_write_work = case.level == Level::Workspace;
        let before = f.snapshot(may_write_work);
        let outcome = run(sandbox, &policy, &argv, &env, case.stdin, case.timeout);
        eprintln!(
            "{:?}: {:?} in {:?}; note: {:?}",
            case.name, outcome.status, outcome.elapsed, outcome.note
        );
        assert!(!outcome.timed_out, "{}: timed out: {outcome:#?}", case.name);
        (case.check)(&f, &outcome);
        let mut after = f.snapshot(may_write_work);
        if !case.write_paths.is_empty() {
            after.retain(|p, _| !p.starts_with(f.outside.join("allowed")));
            let mut before = before.clone();
            before.retain(|p, _| !p.starts_with(f.outside.join("allowed")));
            assert_eq!(before, after, "{}: something outside changed", case.name);
        } else {
            assert_eq!(before, after, "{}: something outside changed", case.name);
        }
        assert!(!Path::new("/etc/td-sbx-probe").exists());
        ran += 1;
    }
    eprintln!("{ran} cases ran");
}
