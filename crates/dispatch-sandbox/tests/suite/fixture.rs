//! A temp HOME, work dir, data dir and an "outside" dir per case; running real commands in the
//! sandbox; snapshots proving nothing outside the allowed places changed.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, symlink};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use dispatch_sandbox::{Level, Limits, Mode, Policy, Sandbox, default_hidden_with};

/// The machine's sandbox, or `None` (with the reason printed) when it has none and CI does
/// not require one.
pub fn sandbox() -> Option<&'static Sandbox> {
    static SANDBOX: OnceLock<Sandbox> = OnceLock::new();
    let sandbox = SANDBOX.get_or_init(|| Sandbox::detect(Mode::Auto));
    let Some(why) = sandbox.missing() else {
        return Some(sandbox);
    };
    dispatch_testkit::skip(dispatch_testkit::Need::Sandbox, &why);
    None
}

pub const SSH_SECRET: &str = "SSH-PRIVATE-KEY-abc123";
pub const STORE_KEY: &str = "STORE-KEY-def456";

pub struct Fixture {
    _root: tempfile::TempDir,
    pub root: PathBuf,
    pub home: PathBuf,
    pub work: PathBuf,
    pub outside: PathBuf,
    pub data: PathBuf,
}

impl Fixture {
    /// Never under /tmp: the sandbox's /tmp is a fresh tmpfs, which would hide a fixture
    /// there for the wrong reason. Under target/tmp, unless the checkout itself lies under
    /// /tmp (a CI clone may), then under /var/tmp.
    pub fn new() -> Fixture {
        let target = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
        let base = if target.starts_with("/tmp") {
            std::path::Path::new("/var/tmp")
        } else {
            target
        };
        let dir = tempfile::Builder::new()
            .prefix("sbx-")
            .tempdir_in(base)
            .unwrap();
        let root = dir.path().canonicalize().unwrap();
        let f = Fixture {
            home: root.join("home"),
            work: root.join("work"),
            outside: root.join("outside"),
            data: root.join("home/.local/share/tooldispatch"),
            root,
            _root: dir,
        };
        let write = |p: PathBuf, text: &str| {
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        };
        write(f.work.join("README"), "hello from the work dir\n");
        write(f.work.join(".tooldispatch/rules.toml"), "allow = []\n");
        write(f.home.join(".ssh/id_rsa"), SSH_SECRET);
        write(
            f.home.join(".aws/credentials"),
            "aws_secret_access_key = AWS-SECRET\n",
        );
        write(
            f.home.join(".netrc"),
            "machine x login u password NETRC-SECRET\n",
        );
        write(
            f.home.join(".config/tooldispatch/config.toml"),
            "store = \"x\"\n",
        );
        write(f.home.join(".bashrc"), "# rc\n");
        write(f.data.join("store.db"), "SQLite format 3\0STORE-DATA");
        write(f.data.join("store.db.key"), STORE_KEY);
        write(f.outside.join("keep.txt"), "outside\n");
        symlink(f.data.join("store.db.key"), f.work.join("key-link")).unwrap();
        symlink(f.home.join(".ssh"), f.work.join("ssh-link")).unwrap();
        symlink(f.home.join(".ssh/id_rsa"), f.work.join("id-link")).unwrap();
        f
    }

    /// The policy a caller builds: defaults from this HOME, plus the data dir, the store file,
    /// its key and `<workdir>/.tooldispatch`.
    pub fn policy(&self, level: Level) -> Policy {
        let home = self.home.clone();
        let mut hidden = default_hidden_with(|name| match name {
            "HOME" => Some(home.clone().into()),
            _ => None,
        });
        hidden.push(self.data.clone());
        hidden.push(self.data.join("store.db"));
        hidden.push(self.data.join("store.db.key"));
        hidden.push(self.work.join(".tooldispatch"));
        // Where a data dir inside the work dir would be (skipped while it does not exist).
        hidden.push(self.work.join(".data"));
        Policy {
            level,
            workdir: self.work.clone(),
            write_paths: Vec::new(),
            network: false,
            hidden,
            read_only_binds: Vec::new(),
            limits: Limits::default(),
        }
    }

    /// Every file and dir under the fixture (except the work dir's contents when `skip_work`,
    /// but never `.tooldispatch`): kind, mode, size and content.
    pub fn snapshot(&self, skip_work: bool) -> BTreeMap<PathBuf, String> {
        let mut out = BTreeMap::new();
        walk(&self.root, &mut |path| {
            let inside_work =
                path.starts_with(&self.work) && !path.starts_with(self.work.join(".tooldispatch"));
            if skip_work && inside_work && path != self.work {
                return;
            }
            let meta = std::fs::symlink_metadata(path).unwrap();
            let what = if meta.is_file() {
                format!(
                    "file {:o} {}",
                    meta.mode(),
                    String::from_utf8_lossy(&std::fs::read(path).unwrap())
                )
            } else if meta.is_symlink() {
                format!("link {}", std::fs::read_link(path).unwrap().display())
            } else if path == self.work {
                "dir".to_string()
            } else {
                format!("dir {:o}", meta.mode())
            };
            out.insert(path.to_path_buf(), what);
        });
        out
    }
}

fn walk(dir: &Path, visit: &mut dyn FnMut(&Path)) {
    visit(dir);
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<PathBuf> = entries.map(|e| e.unwrap().path()).collect();
    entries.sort();
    for path in entries {
        if std::fs::symlink_metadata(&path).unwrap().is_dir() {
            walk(&path, visit);
        } else {
            visit(&path);
        }
    }
}

/// How a sandboxed command ended.
#[derive(Debug)]
pub struct Outcome {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
    pub note: Option<String>,
    pub timed_out: bool,
    pub elapsed: Duration,
}

impl Outcome {
    pub fn code(&self) -> Option<i32> {
        self.status.code()
    }
}

/// A program's absolute path from the system directories.
pub fn which(name: &str) -> Option<PathBuf> {
    if name.starts_with('/') {
        return Some(PathBuf::from(name));
    }
    ["/usr/local/bin", "/usr/bin", "/bin", "/usr/sbin", "/sbin"]
        .iter()
        .map(|d| Path::new(d).join(name))
        .find(|p| p.exists())
}

/// Run `argv` in the sandbox under `policy` with a small fixed environment (plus `env`), in
/// its own process group; killed (the group) after `timeout`.
pub fn run(
    sandbox: &Sandbox,
    policy: &Policy,
    argv: &[String],
    env: &[(String, String)],
    stdin: Option<&str>,
    timeout: Duration,
) -> Outcome {
    let program = which(&argv[0]).unwrap_or_else(|| panic!("{} not installed", argv[0]));
    let args: Vec<OsString> = argv[1..].iter().map(OsString::from).collect();
    let wrapped = sandbox
        .wrap(policy, &program, &args, &policy.workdir)
        .unwrap();
    let mut command = Command::new(&wrapped.program);
    command
        .args(&wrapped.args)
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("LANG", "C")
        .env("HOME", policy.workdir.parent().unwrap().join("home"))
        .envs(env.iter().map(|(k, v)| (k, v)))
        .current_dir(&policy.workdir)
        .process_group(0)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let started = Instant::now();
    let mut child = command.spawn().unwrap();
    if let Some(text) = stdin {
        let mut pipe = child.stdin.take().unwrap();
        let text = text.to_string();
        std::thread::spawn(move || {
            let _ = pipe.write_all(text.as_bytes());
        });
    }
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let out_reader = std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = out.read_to_end(&mut buf);
        buf
    });
    let err_reader = std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = err.read_to_end(&mut buf);
        buf
    });
    let pgid = rustix::process::Pid::from_raw(child.id() as i32).unwrap();
    let mut timed_out = false;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > timeout {
            timed_out = true;
            let _ = rustix::process::kill_process_group(pgid, rustix::process::Signal::KILL);
            break child.wait().unwrap();
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let elapsed = started.elapsed();
    drop(wrapped.cgroup);
    let stdout = String::from_utf8_lossy(&out_reader.join().unwrap()).into_owned();
    let stderr_bytes = err_reader.join().unwrap();
    let note = sandbox.explain(policy, status, &stderr_bytes);
    Outcome {
        status,
        stdout,
        stderr: String::from_utf8_lossy(&stderr_bytes).into_owned(),
        note,
        timed_out,
        elapsed,
    }
}

/// A TCP server on 127.0.0.1 answering every connection with an HTTP "pong".
pub fn pong_server() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut buf = [0u8; 1024];
            let _ = stream.read(&mut buf);
            let _ = stream.write_all(b"HTTP/1.0 200 OK\r\nContent-Length: 4\r\n\r\npong");
        }
    });
    port
}

/// Host processes whose command line contains `marker`.
pub fn processes_with(marker: &str) -> Vec<i32> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        // Zombies have an empty cmdline; they hold nothing.
        if cmdline.contains(marker) {
            out.push(pid);
        }
    }
    out
}
