//! Hostile arguments for edit_file, remove_file, restore_file and file_history: each set must
//! fail with a message that says what was wrong, and leave everything as it was — the work
//! directory, a sibling directory outside it (the target of escapes), and the trash.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::Arc;

use dispatch_engine::{ApproveAll, Status};
use dispatch_store::{FileAction, NewFileVersion};
use serde_json::{Value, json};

use crate::test_support::{Harness, run_tool};

/// Everything observable about a directory tree: kind, bytes, mode and mtime of every entry.
fn snapshot(root: &Path) -> BTreeMap<String, (String, Vec<u8>, u32, i64)> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            let kind = meta.file_type();
            let (what, bytes) = if kind.is_symlink() {
                let target = std::fs::read_link(&path).unwrap();
                (
                    "link".to_string(),
                    target.to_string_lossy().as_bytes().to_vec(),
                )
            } else if kind.is_dir() {
                stack.push(path.clone());
                ("dir".to_string(), Vec::new())
            } else if kind.is_file() {
                ("file".to_string(), std::fs::read(&path).unwrap())
            } else {
                ("other".to_string(), Vec::new())
            };
            let rel = path
                .strip_prefix(root)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            out.insert(
                rel,
                (
                    what,
                    bytes,
                    meta.mode(),
                    meta.mtime_nsec() + meta.mtime() * 1_000_000_000,
                ),
            );
        }
    }
    out
}

#[tokio::test]
async fn hostile_arguments_fail_clearly_and_touch_nothing() {
    let h = Harness::with_confirmer(Arc::new(ApproveAll));
    h.select("s", "edit_file,remove_file,restore_file,file_history")
        .await;
    let root = h.root();
    let parent = root.parent().unwrap().to_path_buf();
    let outside = tempfile::tempdir_in(&parent).unwrap();
    let out = outside.path().canonicalize().unwrap();
    let out_name = out.file_name().unwrap().to_string_lossy().into_owned();
    std::fs::write(out.join("secret.txt"), "outside secret\n").unwrap();
    std::fs::create_dir(out.join("deep")).unwrap();
    std::fs::write(out.join("deep/x.txt"), "x\n").unwrap();

    std::fs::write(root.join("good.txt"), "good line\nsecond\n").unwrap();
    std::fs::write(root.join(".env"), "KEY=1\n").unwrap();
    std::fs::create_dir(root.join("dir")).unwrap();
    std::fs::write(root.join("dir/inner.txt"), "inner\n").unwrap();
    std::fs::create_dir(root.join(".tooldispatch")).unwrap();
    std::fs::write(root.join(".tooldispatch/rules"), "ask edit_file\n").unwrap();
    std::os::unix::fs::symlink(&out, root.join("out")).unwrap();
    std::os::unix::fs::symlink(out.join("secret.txt"), root.join("out_file")).unwrap();
    std::os::unix::fs::symlink("good.txt", root.join("link_in")).unwrap();
    std::os::unix::fs::symlink("loop_b", root.join("loop_a")).unwrap();
    std::os::unix::fs::symlink("loop_a", root.join("loop_b")).unwrap();
    let status = std::process::Command::new("mkfifo")
        .arg(root.join("fifo"))
        .status()
        .unwrap();
    assert!(status.success());

    // A poisoned history: versions of a file outside the work directory and of a credential.
    let poisoned = h
        .store
        .record_version(NewFileVersion {
            path: out.join("secret.txt").to_string_lossy().into_owned(),
            action: FileAction::Modify,
            content: Some(b"overwrite the outside\n".to_vec()),
            trash_path: None,
            session: "s".into(),
            run: "other".into(),
            tool: "edit_file".into(),
        })
        .await
        .unwrap();
    let env_version = h
        .store
        .record_version(NewFileVersion {
            path: root.join(".env").to_string_lossy().into_owned(),
            action: FileAction::Modify,
            content: Some(b"KEY=old\n".to_vec()),
            trash_path: None,
            session: "s".into(),
            run: "env-task".into(),
            tool: "edit_file".into(),
        })
        .await
        .unwrap();

    let replace = json!({"old_string": "good", "new_string": "bad"});
    let many_paths: Vec<String> = (0..70).map(|i| format!("f{i}.txt")).collect();
    #[rustfmt::skip]
    let cases: Vec<(&str, Value, &str)> = vec![
        // edit_file: where
        ("edit_file", json!({"path": "../escape.txt", "content": "x"}), "outside the work directory"),
        ("edit_file", json!({"path": format!("../{out_name}/secret.txt"), "content": "x"}), "outside the work directory"),
        ("edit_file", json!({"path": "/etc/passwd", "content": "x"}), "outside the work directory"),
        ("edit_file", json!({"path": "out/new.txt", "content": "x"}), "outside the work directory"),
        ("edit_file", json!({"path": "out_file", "targets": [{"old_string": "outside", "new_string": "in"}]}), "outside the work directory"),
        ("edit_file", json!({"path": "out/deep/../secret.txt", "content": "x"}), "outside the work directory"),
        ("edit_file", json!({"path": "loop_a/x.txt", "content": "x"}), "symlink loop"),
        ("edit_file", json!({"path": "~/.bashrc", "content": "x"}), "not expanded"),
        ("edit_file", json!({"path": "a\u{0}b.txt", "content": "x"}), "NUL"),
        ("edit_file", json!({"path": "   ", "content": "x"}), "missing required field(s) path"),
        ("edit_file", json!({"path": "x".repeat(5000), "content": "x"}), "over the limit"),
        ("edit_file", json!({"path": ".tooldispatch/rules", "content": "allow *"}), "denied list"),
        ("edit_file", json!({"path": "dir", "content": "x"}), "is a directory"),
        ("edit_file", json!({"path": "dir/", "content": "x"}), "ends with `/`"),
        ("edit_file", json!({"path": "fifo", "targets": [replace]}), "not a regular file"),
        ("edit_file", json!({"path": "good.txt/child.txt", "content": "x"}), "is a file, not a directory"),
        // edit_file: what
        ("edit_file", json!({"path": "good.txt"}), "nothing to do"),
        ("edit_file", json!({"path": "good.txt", "content": "x", "targets": [replace]}), "both content and targets"),
        ("edit_file", json!({"path": "good.txt", "mode": "write", "targets": [replace]}), "mode=write takes content"),
        ("edit_file", json!({"path": "good.txt", "mode": "patch", "content": "x"}), "mode=patch takes targets"),
        ("edit_file", json!({"path": "good.txt", "mode": "delete", "content": "x"}), "/mode: \"delete\" is not one of"),
        ("edit_file", json!({"path": "good.txt", "targets": []}), "targets is empty"),
        ("edit_file", json!({"path": "good.txt", "targets": vec![replace.clone(); 101]}), "over the limit of 100"),
        ("edit_file", json!({"path": "good.txt", "content": "x".repeat(4 * 1024 * 1024 + 1)}), "content is 4194305 bytes, over the 4.0 MiB limit"),
        ("edit_file", json!({"path": "good.txt", "targets": [{"old_string": "g".repeat(1024 * 1024 + 1), "new_string": ""}]}), "old_string is 1048577 bytes, over the 1.0 MiB limit"),
        ("edit_file", json!({"path": "good.txt", "targets": [{"insert_string": "x", "row": -1}]}), "/targets/0/row"),
        ("edit_file", json!({"path": "good.txt", "targets": [{"insert_string": "x", "row": 99_999}]}), "outside the file"),
        ("edit_file", json!({"path": "good.txt", "targets": "good"}), "/targets"),
        ("edit_file", json!({"path": 42, "content": "x"}), "/path"),
        ("edit_file", json!({"path": "good.txt", "targets": [{"old_string": "good", "new_string": "bad", "evil": true}]}), "'evil' was unexpected"),
        ("edit_file", json!({"path": "missing.txt", "targets": [replace]}), "does not exist"),
        ("edit_file", json!({"path": "good.txt", "targets": [{"old_string": "good line\nsecond\nthird", "new_string": ""}]}), "not found"),
        ("edit_file", json!({"path": "good.txt", "targets": [replace, {"old_string": "e", "new_string": "E"}]}), "matches"),
        // remove_file
        ("remove_file", json!({"path": "../../etc/hosts"}), "outside the work directory"),
        ("remove_file", json!({"path": format!("../{out_name}/secret.txt")}), "outside the work directory"),
        ("remove_file", json!({"path": "out_file"}), "outside the work directory"),
        ("remove_file", json!({"path": "out/deep/x.txt"}), "outside the work directory"),
        ("remove_file", json!({"path": "link_in"}), "is a symlink"),
        ("remove_file", json!({"path": "dir"}), "is a directory"),
        ("remove_file", json!({"path": "."}), "is a directory"),
        ("remove_file", json!({"path": "fifo"}), "not a regular file"),
        ("remove_file", json!({"path": "nope.txt"}), "does not exist"),
        ("remove_file", json!({"path": ".tooldispatch/rules"}), "denied list"),
        ("remove_file", json!({"paths": ["good.txt"]}), "missing required field(s) path"),
        // restore_file
        ("restore_file", json!({}), "give version"),
        ("restore_file", json!({"version": 1, "task_id": "current"}), "not both"),
        ("restore_file", json!({"version": 999_999}), "there is no version"),
        ("restore_file", json!({"version": -1}), "/version"),
        ("restore_file", json!({"version": "1"}), "/version"),
        ("restore_file", json!({"version": poisoned}), "outside the work directory"),
        ("restore_file", json!({"version": env_version}), "credential file"),
        ("restore_file", json!({"version": env_version, "paths": ["good.txt"]}), "not in paths"),
        ("restore_file", json!({"task_id": "other"}), "outside the work directory"),
        ("restore_file", json!({"task_id": "env-task"}), "credential file"),
        ("restore_file", json!({"task_id": "no-such-task"}), "changed no files"),
        ("restore_file", json!({"task_id": "   "}), "task_id is empty"),
        ("restore_file", json!({"task_id": "t".repeat(300)}), "longer than"),
        ("restore_file", json!({"task_id": "current", "paths": []}), "paths is empty"),
        ("restore_file", json!({"task_id": "current", "paths": ["../x"]}), "outside the work directory"),
        ("restore_file", json!({"task_id": "current", "paths": many_paths}), "over the limit of 64"),
        // file_history
        ("file_history", json!({"mode": "list", "from": "yesterday"}), "is not a time"),
        ("file_history", json!({"from": "2024-02-30"}), "does not exist in that month"),
        ("file_history", json!({"to": "2024-01-01 25:00"}), "hours go to 23"),
        ("file_history", json!({"from": "2024-05-01", "to": "2024-04-01"}), "swap them"),
        ("file_history", json!({"limit": 0}), "/limit: 0 is less than the minimum of 1"),
        ("file_history", json!({"limit": 1000}), "/limit: 1000 is greater than the maximum of 24"),
        ("file_history", json!({"path": "../../etc"}), "outside the work directory"),
        ("file_history", json!({"path": "out_file"}), "outside the work directory"),
        ("file_history", json!({"paths": []}), "paths is empty"),
        ("file_history", json!({"paths": vec!["a.txt"; 25]}), "over the limit of 24"),
        ("file_history", json!({"mode": "read"}), "mode=read needs"),
        ("file_history", json!({"mode": "read", "version": env_version}), "credential file"),
        ("file_history", json!({"mode": "read", "version": poisoned}), "outside the work directory"),
        ("file_history", json!({"mode": "list", "version": 1}), "version is for mode=read"),
        ("file_history", json!({"mode": "read", "path": "dir"}), "is a directory"),
        ("file_history", json!({"task_id": ""}), "task_id is empty"),
        ("file_history", json!({"mode": "remove"}), "/mode: \"remove\" is not one of"),
    ];
    assert!(cases.len() >= 30);

    let before = (snapshot(&out), snapshot(&root), snapshot(h.data_dir.path()));
    for (i, (tool, args, expected)) in cases.into_iter().enumerate() {
        let shown: String = args.to_string().chars().take(120).collect();
        let result = h
            .round(
                "s",
                &format!("hostile-{i}"),
                vec![run_tool("c", tool, args)],
            )
            .await;
        let r = &result.results[0];
        assert!(
            r.status.is_error(),
            "case {i} {tool} {shown}: expected a failure, got {:?}: {}",
            r.status,
            r.content
        );
        assert_ne!(r.status, Status::Declined, "case {i}: declined, not judged");
        assert!(
            r.content.contains(expected),
            "case {i} {tool} {shown}: expected {expected:?} in: {}",
            r.content
        );
        let after = (snapshot(&out), snapshot(&root), snapshot(h.data_dir.path()));
        assert!(
            after == before,
            "case {i} {tool} {shown} changed the file system"
        );
    }
}

/// Swaps `d` (a directory) and `l` (a link out of the work directory) with
/// `renameat2(RENAME_EXCHANGE)` on its own thread until stopped.
struct Swapper {
    stop: Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<u64>,
}

impl Swapper {
    fn start(root: &Path) -> Swapper {
        use rustix::fs::{Mode, OFlags, RenameFlags};
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (root, stopped) = (root.to_path_buf(), stop.clone());
        let thread = std::thread::spawn(move || {
            let dir =
                rustix::fs::open(&root, OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty()).unwrap();
            let mut swaps = 0u64;
            while !stopped.load(std::sync::atomic::Ordering::Relaxed) {
                rustix::fs::renameat_with(&dir, "d", &dir, "l", RenameFlags::EXCHANGE).unwrap();
                swaps += 1;
                // Pauses of varying length, so some calls pass the check and meet the swap
                // on their way to the write rather than at the check.
                std::thread::sleep(std::time::Duration::from_micros(swaps % 300));
            }
            swaps
        });
        Swapper { stop, thread }
    }

    /// Stop swapping; how many swaps there were.
    fn stop(self) -> u64 {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.thread.join().unwrap()
    }
}

/// Issue 13: a directory swapped for a symlink (`renameat2(RENAME_EXCHANGE)`) between the
/// confinement check and the write sent edit_file's write through the link. A thread swaps
/// `d` (a directory) and `l` (a link to a directory outside) while edit_file writes `d/f.txt`
/// again and again: every call either writes inside or refuses, and the outside directory
/// never gets a byte.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_swapped_for_a_symlink_mid_edit_never_lets_a_byte_outside() {
    let h = Harness::with_confirmer(Arc::new(ApproveAll));
    h.select("s", "edit_file").await;
    let root = h.root();
    let outside = tempfile::tempdir().unwrap();
    let out = outside.path().canonicalize().unwrap();
    std::fs::create_dir(root.join("d")).unwrap();
    std::os::unix::fs::symlink(&out, root.join("l")).unwrap();

    let swapper = Swapper::start(&root);
    let (mut written, mut outside_at_check, mut caught_at_write) = (0, 0, 0);
    for i in 0..300 {
        let args = json!({"path": "d/f.txt", "content": format!("write {i}\n")});
        let round = h
            .round(
                "s",
                &format!("race-{i}"),
                vec![run_tool("c", "edit_file", args)],
            )
            .await;
        let r = &round.results[0];
        if r.status == Status::Ok {
            written += 1;
        } else if r.content.contains("outside the work directory") {
            outside_at_check += 1;
        } else {
            // Past the check, then met the swap: refused at the open beneath the work dir.
            assert!(
                r.content.contains("swapped"),
                "write {i}: an unexpected failure: {}",
                r.content
            );
            caught_at_write += 1;
        }
        if i % 50 == 0 {
            let landed: Vec<_> = std::fs::read_dir(&out).unwrap().collect();
            assert!(landed.is_empty(), "write {i} reached outside: {landed:?}");
        }
    }
    let swaps = swapper.stop();
    let landed: Vec<_> = std::fs::read_dir(&out).unwrap().collect();
    assert!(landed.is_empty(), "bytes reached outside: {landed:?}");
    assert!(swaps > 0);
    eprintln!(
        "{written} written inside, {outside_at_check} refused at the check, {caught_at_write} \
         refused at the write, {swaps} swaps"
    );
    // The directory (under whichever name it has now) holds the last successful write.
    let inside = ["d/f.txt", "l/f.txt"]
        .iter()
        .map(|p| root.join(p))
        .find(|p| std::fs::symlink_metadata(p.parent().unwrap()).is_ok_and(|m| m.is_dir()))
        .unwrap();
    if written > 0 {
        assert!(
            std::fs::read_to_string(inside)
                .unwrap()
                .starts_with("write ")
        );
    }
}

/// Issue 13, the same race for removal: remove_file of `d/f.txt` while `d` is swapped for a
/// link to a directory holding its own `f.txt`. The file outside is never moved to the trash.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_swapped_for_a_symlink_mid_remove_never_removes_a_file_outside() {
    use rustix::fs::{Mode, OFlags};
    let h = Harness::with_confirmer(Arc::new(ApproveAll));
    h.select("s", "remove_file").await;
    let root = h.root();
    let outside = tempfile::tempdir().unwrap();
    let out = outside.path().canonicalize().unwrap();
    std::fs::write(out.join("f.txt"), "outside\n").unwrap();
    std::fs::create_dir(root.join("d")).unwrap();
    std::os::unix::fs::symlink(&out, root.join("l")).unwrap();
    // The real directory, whatever its name: each round puts a fresh f.txt in it.
    let real = rustix::fs::open(
        root.join("d"),
        OFlags::RDONLY | OFlags::DIRECTORY,
        Mode::empty(),
    )
    .unwrap();

    let swapper = Swapper::start(&root);
    let mut removed = 0;
    for i in 0..200 {
        let fd = rustix::fs::openat(
            &real,
            "f.txt",
            OFlags::WRONLY | OFlags::CREATE | OFlags::TRUNC,
            Mode::from_raw_mode(0o644),
        )
        .unwrap();
        std::io::Write::write_all(&mut std::fs::File::from(fd), b"inside\n").unwrap();
        let round = h
            .round(
                "s",
                &format!("race-{i}"),
                vec![run_tool("c", "remove_file", json!({"path": "d/f.txt"}))],
            )
            .await;
        let r = &round.results[0];
        if r.status == Status::Ok {
            removed += 1;
        } else {
            assert!(
                r.content.contains("outside the work directory") || r.content.contains("swapped"),
                "remove {i}: an unexpected failure: {}",
                r.content
            );
        }
        assert_eq!(
            std::fs::read_to_string(out.join("f.txt")).unwrap(),
            "outside\n",
            "remove {i} reached outside"
        );
    }
    let swaps = swapper.stop();
    eprintln!("{removed} removed inside, {swaps} swaps");
    assert_eq!(std::fs::read_dir(&out).unwrap().count(), 1);
}

/// Issue 13: with `.tooldispatch -> cfgdir`, `edit_file cfgdir/rules` granted permissions,
/// because `.tooldispatch` was denied by name only. Every file tool now refuses the rules
/// directory by where it resolves: writes, creations, removals, reads and searches.
#[tokio::test]
async fn a_tooldispatch_link_does_not_open_its_target_to_file_tools() {
    let h = Harness::with_confirmer(Arc::new(ApproveAll));
    h.select("s", "edit_file,remove_file,read_files,find_files")
        .await;
    let root = h.root();
    std::fs::create_dir_all(root.join("cfgdir")).unwrap();
    std::fs::write(root.join("cfgdir/rules"), "ask edit_file\n").unwrap();
    std::os::unix::fs::symlink("cfgdir", root.join(".tooldispatch")).unwrap();
    std::os::unix::fs::symlink("cfgdir", root.join("alias")).unwrap();

    #[rustfmt::skip]
    let cases: Vec<(&str, Value)> = vec![
        ("edit_file", json!({"path": "cfgdir/rules", "content": "allow *\n"})),
        ("edit_file", json!({"path": "cfgdir/rules", "targets": [{"old_string": "ask", "new_string": "allow"}]})),
        ("edit_file", json!({"path": "cfgdir/more-rules", "content": "allow *\n"})),
        ("edit_file", json!({"path": ".tooldispatch/rules", "content": "allow *\n"})),
        ("edit_file", json!({"path": "alias/rules", "content": "allow *\n"})),
        ("edit_file", json!({"path": "x/../cfgdir/rules", "content": "allow *\n"})),
        ("remove_file", json!({"path": "cfgdir/rules"})),
        ("read_files", json!({"files": [{"path": "cfgdir/rules"}]})),
        ("find_files", json!({"queries": [{"dir": "cfgdir"}]})),
    ];
    let before = snapshot(&root);
    for (i, (tool, args)) in cases.into_iter().enumerate() {
        let round = h
            .round(
                "s",
                &format!("cfg-{i}"),
                vec![run_tool("c", tool, args.clone())],
            )
            .await;
        let r = &round.results[0];
        assert!(r.status.is_error(), "case {i} {tool} {args}: {}", r.content);
        assert!(
            r.content.contains("denied list") && r.content.contains("cfgdir"),
            "case {i} {tool} {args}: {}",
            r.content
        );
        assert!(
            snapshot(&root) == before,
            "case {i} {tool} {args} changed files"
        );
    }
    // A search of the whole work directory does not look inside either.
    let round = h
        .round(
            "s",
            "cfg-search",
            vec![run_tool(
                "c",
                "find_files",
                json!({"mode": "search", "queries": [{"pattern": "edit_file"}]}),
            )],
        )
        .await;
    assert!(
        !round.results[0].content.contains("cfgdir"),
        "{}",
        round.results[0].content
    );
    assert_eq!(
        std::fs::read_to_string(root.join("cfgdir/rules")).unwrap(),
        "ask edit_file\n"
    );
}
