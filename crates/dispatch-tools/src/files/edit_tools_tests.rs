//! edit_file, remove_file, restore_file and file_history through a real engine: real files in
//! temp directories, the memory store as file history, rounds as a model would send them.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use dispatch_engine::{
    ApproveAll, Effect, Engine, EngineConfig, Provider, RoundRequest, Status, Tool, ToolContext,
    ToolError, ToolOutput, ToolSpec,
};
use dispatch_store::{FileAction, VersionQuery};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use super::confine::Confinement;
use crate::test_support::{Harness, run_tool};

const TOOLS: &str = "edit_file,remove_file,restore_file,file_history";

async fn approving() -> Harness {
    let h = Harness::with_confirmer(Arc::new(ApproveAll));
    h.select("s", TOOLS).await;
    h
}

/// One call in its own round: (status, content without the `[tool] ` prefix).
async fn call(h: &Harness, run: &str, tool: &str, args: Value) -> (Status, String) {
    let out = h.round("s", run, vec![run_tool("c", tool, args)]).await;
    let r = &out.results[0];
    let prefix = format!("[{tool}] ");
    (
        r.status,
        r.content
            .strip_prefix(&prefix)
            .unwrap_or(&r.content)
            .to_string(),
    )
}

async fn ok(h: &Harness, run: &str, tool: &str, args: Value) -> String {
    let (status, text) = call(h, run, tool, args).await;
    assert_eq!(status, Status::Ok, "{text}");
    text
}

async fn failed(h: &Harness, run: &str, tool: &str, args: Value) -> String {
    let (status, text) = call(h, run, tool, args).await;
    assert_eq!(status, Status::Failed, "{text}");
    text
}

/// The version id named by "restore_file(version=N)" in a result.
fn undo_version(text: &str) -> u64 {
    let at = text.rfind("restore_file(version=").expect(text) + "restore_file(version=".len();
    text[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect::<String>()
        .parse()
        .unwrap()
}

async fn versions(h: &Harness) -> Vec<dispatch_store::FileVersion> {
    h.store.versions(&VersionQuery::default()).await.unwrap()
}

fn mode_of(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o7777
}

#[tokio::test]
async fn write_patch_replace_all_and_insert_row() {
    let h = approving().await;
    let root = h.root();
    let text = ok(
        &h,
        "r1",
        "edit_file",
        json!({"path": "src/lib.rs", "content": "fn a() {}\nfn b() {}\n"}),
    )
    .await;
    assert!(text.contains("created, 2 line(s)"), "{text}");
    assert!(text.contains("undo with restore_file(version="), "{text}");
    let path = root.join("src/lib.rs");
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        "fn a() {}\nfn b() {}\n"
    );

    let text = ok(
        &h,
        "r1",
        "edit_file",
        json!({"path": "src/lib.rs", "targets": [
            {"old_string": "fn b()", "new_string": "fn beta()"},
            {"old_string": "{}", "new_string": "{ 1 }", "replace_all": true},
            {"insert_string": "// header", "row": 1},
            {"insert_string": "// footer\n", "row": 4}
        ]}),
    )
    .await;
    assert!(text.contains("3 replacement(s), 2 insertion(s)"), "{text}");
    assert!(text.contains("+4 −2 line(s)"), "{text}");
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        "// header\nfn a() { 1 }\nfn beta() { 1 }\n// footer\n"
    );
    let all = versions(&h).await;
    assert_eq!(all.len(), 2);
    assert_eq!(all[0].action, FileAction::Modify);
    assert_eq!(
        all[0].content.as_deref(),
        Some(&b"fn a() {}\nfn b() {}\n"[..])
    );
    assert_eq!(all[1].action, FileAction::Create);
    assert_eq!(all[1].content, None);
    assert_eq!(all[0].tool, "edit_file");
    assert_eq!((all[0].session.as_str(), all[0].run.as_str()), ("s", "r1"));
}

/// A model that escaped the content twice (`\n` as two characters) still writes lines; content
/// that was right keeps its backslashes (the engine's rule, dispatch-engine `escapes.rs`).
#[tokio::test]
async fn a_write_with_twice_escaped_content_gets_real_line_breaks() {
    let h = approving().await;
    let root = h.root();
    // The value holds `\n` and `\"` as two characters each (the JSON text held `\\n`).
    let content = r#"def main():\n    print(\"hi\")\n"#;
    let out = h
        .round(
            "s",
            "r1",
            vec![run_tool(
                "c",
                "edit_file",
                json!({"path": "hello.py", "content": content}),
            )],
        )
        .await;
    assert_eq!(
        out.results[0].status,
        Status::Ok,
        "{}",
        out.results[0].content
    );
    assert_eq!(
        std::fs::read_to_string(root.join("hello.py")).unwrap(),
        "def main():\n    print(\"hi\")\n"
    );
    // Right as sent: a Windows path and a regex on one line, and real lines with a literal
    // `\n` in a string; all kept byte for byte.
    for (path, content) in [
        ("win.txt", r"copy C:\temp\new.txt to D:\backup"),
        ("re.txt", r"match \d+\n in the log"),
        ("fmt.c", "int main(void) {\n    printf(\"%d\\n\", 1);\n}\n"),
    ] {
        ok(
            &h,
            "r2",
            "edit_file",
            json!({"path": path, "content": content}),
        )
        .await;
        assert_eq!(
            std::fs::read_to_string(root.join(path)).unwrap(),
            content,
            "{path}"
        );
    }
}

#[tokio::test]
async fn missing_and_ambiguous_old_strings_change_nothing_and_say_where() {
    let h = approving().await;
    let path = h.root().join("a.py");
    std::fs::write(&path, "def f():\n    return 1\n\ndef g():\n    return 1\n").unwrap();
    let err = failed(
        &h,
        "r1",
        "edit_file",
        json!({"path": "a.py", "targets": [{"old_string": "def f():\n  return 1", "new_string": "x"}]}),
    )
    .await;
    assert!(
        err.contains("lines 1-2 match if whitespace is ignored"),
        "{err}"
    );
    assert!(err.contains("No target was applied"), "{err}");
    let err = failed(
        &h,
        "r1",
        "edit_file",
        json!({"path": "a.py", "targets": [
            {"old_string": "def g", "new_string": "def h"},
            {"old_string": "    return 1", "new_string": "    return 2"}
        ]}),
    )
    .await;
    assert!(
        err.contains("targets[1]: old_string matches 2 places, starting at lines 2, 5"),
        "{err}"
    );
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        "def f():\n    return 1\n\ndef g():\n    return 1\n",
        "a failed target must leave the file as it was"
    );
    assert!(
        versions(&h).await.is_empty(),
        "a failed edit records no version"
    );
}

#[tokio::test]
async fn a_crlf_file_patched_keeps_crlf_and_its_final_newline_state() {
    let h = approving().await;
    let path = h.root().join("win.txt");
    std::fs::write(&path, "one\r\ntwo\r\nthree").unwrap();
    ok(
        &h,
        "r1",
        "edit_file",
        json!({"path": "win.txt", "targets": [
            {"old_string": "one\ntwo", "new_string": "1\n2"},
            {"insert_string": "four", "row": 4}
        ]}),
    )
    .await;
    assert_eq!(std::fs::read(&path).unwrap(), b"1\r\n2\r\nthree\r\nfour");
    // A whole-file write into a CRLF file keeps CRLF too.
    let text = ok(
        &h,
        "r1",
        "edit_file",
        json!({"path": "win.txt", "content": "x\ny\n"}),
    )
    .await;
    assert!(text.contains("CRLF line endings kept"), "{text}");
    assert_eq!(std::fs::read(&path).unwrap(), b"x\r\ny\r\n");
}

#[tokio::test]
async fn a_non_utf8_file_is_patched_on_its_bytes() {
    let h = approving().await;
    let path = h.root().join("latin1.txt");
    let original = b"nom = \"Ren\xe9\"\nage = 3\n".to_vec();
    std::fs::write(&path, &original).unwrap();
    ok(
        &h,
        "r1",
        "edit_file",
        json!({"path": "latin1.txt", "targets": [{"old_string": "age = 3", "new_string": "age = 4"}]}),
    )
    .await;
    assert_eq!(
        std::fs::read(&path).unwrap(),
        b"nom = \"Ren\xe9\"\nage = 4\n"
    );
    // Undo restores the exact bytes.
    let v = versions(&h).await[0].id;
    ok(&h, "r1", "restore_file", json!({"version": v})).await;
    assert_eq!(std::fs::read(&path).unwrap(), original);
}

#[tokio::test]
async fn a_binary_file_is_not_patched_as_text_but_can_be_rewritten() {
    let h = approving().await;
    let path = h.root().join("blob.bin");
    std::fs::write(&path, b"\x00\x01abc\x00").unwrap();
    let err = failed(
        &h,
        "r1",
        "edit_file",
        json!({"path": "blob.bin", "targets": [{"old_string": "zzz", "new_string": "y"}]}),
    )
    .await;
    assert!(err.contains("not found"), "{err}");
    ok(
        &h,
        "r1",
        "edit_file",
        json!({"path": "blob.bin", "targets": [{"old_string": "abc", "new_string": "xyz"}]}),
    )
    .await;
    assert_eq!(std::fs::read(&path).unwrap(), b"\x00\x01xyz\x00");
}

#[tokio::test]
async fn permissions_survive_the_atomic_write() {
    let h = approving().await;
    let path = h.root().join("run.sh");
    std::fs::write(&path, "#!/bin/sh\necho hi\n").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o750)).unwrap();
    ok(
        &h,
        "r1",
        "edit_file",
        json!({"path": "run.sh", "targets": [{"old_string": "hi", "new_string": "there"}]}),
    )
    .await;
    assert_eq!(mode_of(&path), 0o750);
    ok(
        &h,
        "r1",
        "edit_file",
        json!({"path": "run.sh", "content": "#!/bin/sh\n"}),
    )
    .await;
    assert_eq!(mode_of(&path), 0o750);
    // No temporary file is left beside it.
    let names: Vec<String> = std::fs::read_dir(h.root())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, vec!["run.sh".to_string()]);
}

#[tokio::test]
async fn an_edit_through_an_inner_symlink_changes_the_target_and_keeps_the_link() {
    let h = approving().await;
    let root = h.root();
    std::fs::write(root.join("real.txt"), "v1\n").unwrap();
    std::os::unix::fs::symlink("real.txt", root.join("alias.txt")).unwrap();
    let out = h
        .round(
            "s",
            "r1",
            vec![run_tool(
                "c",
                "edit_file",
                json!({"path": "alias.txt", "content": "v2\n"}),
            )],
        )
        .await;
    assert_eq!(
        out.results[0].status,
        Status::Ok,
        "{}",
        out.results[0].content
    );
    assert!(
        std::fs::symlink_metadata(root.join("alias.txt"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(
        std::fs::read_to_string(root.join("real.txt")).unwrap(),
        "v2\n"
    );
    assert_eq!(
        versions(&h).await[0].path,
        root.join("real.txt").to_string_lossy()
    );
}

/// Every byte value, and more than the snapshot cap is not needed here: the trash keeps it.
fn binary_content() -> Vec<u8> {
    let mut bytes: Vec<u8> = (0..=255u8).collect();
    bytes.extend((0..10_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8));
    bytes
}

#[tokio::test]
async fn remove_then_restore_is_byte_identical_for_binary_content() {
    let h = approving().await;
    let path = h.root().join("data/blob.bin");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let bytes = binary_content();
    std::fs::write(&path, &bytes).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();

    let text = ok(&h, "r1", "remove_file", json!({"path": "data/blob.bin"})).await;
    assert!(text.contains("to the trash"), "{text}");
    assert!(!path.exists());
    let v = &versions(&h).await[0];
    assert_eq!(v.action, FileAction::Delete);
    let trash = PathBuf::from(v.trash_path.clone().unwrap());
    assert!(trash.starts_with(h.data_dir.path().canonicalize().unwrap().join("trash")));
    assert_eq!(std::fs::read(&trash).unwrap(), bytes);

    let text = ok(
        &h,
        "r1",
        "restore_file",
        json!({"version": undo_version(&text)}),
    )
    .await;
    assert!(text.contains("recreated as version"), "{text}");
    assert_eq!(std::fs::read(&path).unwrap(), bytes);
    assert_eq!(mode_of(&path), 0o640);
}

#[tokio::test]
async fn a_file_over_the_snapshot_cap_is_kept_in_the_trash_and_restored_exactly() {
    let h = approving().await;
    let path = h.root().join("big.txt");
    let line = "0123456789abcdefghijklmnopqrstuvwxyz\n";
    let big = line.repeat((9 * 1024 * 1024) / line.len());
    std::fs::write(&path, &big).unwrap();
    let text = ok(
        &h,
        "r1",
        "edit_file",
        json!({"path": "big.txt", "targets": [{"insert_string": "first", "row": 1}]}),
    )
    .await;
    let v = &versions(&h).await[0];
    assert!(
        v.truncated && v.content.is_none() && v.trash_path.is_some(),
        "{v:?}"
    );
    ok(
        &h,
        "r1",
        "restore_file",
        json!({"version": undo_version(&text)}),
    )
    .await;
    assert!(std::fs::read(&path).unwrap() == big.as_bytes());
}

#[tokio::test]
async fn a_task_undo_restores_three_files_and_paths_narrow_it() {
    let h = approving().await;
    let root = h.root();
    std::fs::write(root.join("b.txt"), "b original\n").unwrap();
    std::fs::write(root.join("c.txt"), "c original\n").unwrap();
    // An earlier task's change stays.
    ok(
        &h,
        "r0",
        "edit_file",
        json!({"path": "c.txt", "content": "c before r1\n"}),
    )
    .await;

    ok(
        &h,
        "r1",
        "edit_file",
        json!({"path": "a.txt", "content": "a new\n"}),
    )
    .await;
    ok(
        &h,
        "r1",
        "edit_file",
        json!({"path": "b.txt", "content": "b one\n"}),
    )
    .await;
    ok(
        &h,
        "r1",
        "edit_file",
        json!({"path": "b.txt", "content": "b two\n"}),
    )
    .await;
    ok(&h, "r1", "remove_file", json!({"path": "c.txt"})).await;

    // Narrowed to b.txt: only b goes back, to its state before r1 (not to "b one").
    let text = ok(
        &h,
        "r1",
        "restore_file",
        json!({"task_id": "current", "paths": ["b.txt"]}),
    )
    .await;
    assert!(text.contains("undo of task r1 (1 file(s)"), "{text}");
    assert_eq!(
        std::fs::read_to_string(root.join("b.txt")).unwrap(),
        "b original\n"
    );
    assert_eq!(
        std::fs::read_to_string(root.join("a.txt")).unwrap(),
        "a new\n"
    );
    assert!(!root.join("c.txt").exists());

    // The whole task, from another run by its id.
    let out = h
        .round(
            "s",
            "r2",
            vec![run_tool("c", "restore_file", json!({"task_id": "r1"}))],
        )
        .await;
    let r = &out.results[0];
    assert_eq!(r.status, Status::Ok, "{}", r.content);
    assert!(r.content.contains("a.txt: removed"), "{}", r.content);
    assert!(
        r.content.contains("b.txt: already as in version"),
        "{}",
        r.content
    );
    assert!(
        r.content.contains("c.txt: recreated as version"),
        "{}",
        r.content
    );
    assert!(!root.join("a.txt").exists());
    assert_eq!(
        std::fs::read_to_string(root.join("b.txt")).unwrap(),
        "b original\n"
    );
    assert_eq!(
        std::fs::read_to_string(root.join("c.txt")).unwrap(),
        "c before r1\n"
    );

    // A path the task did not change is named, with what it did change.
    let err = failed(
        &h,
        "r3",
        "restore_file",
        json!({"task_id": "r1", "paths": ["zzz.txt"]}),
    )
    .await;
    assert!(
        err.contains("did not change zzz.txt; it changed: a.txt, b.txt, c.txt"),
        "{err}"
    );
}

#[tokio::test]
async fn restoring_the_version_of_a_created_file_removes_it_and_that_can_be_undone() {
    let h = approving().await;
    let path = h.root().join("new.txt");
    let text = ok(
        &h,
        "r1",
        "edit_file",
        json!({"path": "new.txt", "content": "hello\n"}),
    )
    .await;
    let text = ok(
        &h,
        "r1",
        "restore_file",
        json!({"version": undo_version(&text)}),
    )
    .await;
    assert!(text.contains("removed"), "{text}");
    assert!(!path.exists());
    // The restore recorded what it replaced.
    ok(
        &h,
        "r1",
        "restore_file",
        json!({"version": undo_version(&text)}),
    )
    .await;
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "hello\n");
    let actions: Vec<FileAction> = versions(&h).await.iter().map(|v| v.action).collect();
    assert_eq!(
        actions,
        vec![FileAction::Restore, FileAction::Restore, FileAction::Create]
    );
}

#[tokio::test]
async fn file_history_lists_and_diffs_a_version_against_the_disk() {
    let h = approving().await;
    std::fs::write(h.root().join("notes.md"), "alpha\nbeta\ngamma\n").unwrap();
    ok(
        &h,
        "r1",
        "edit_file",
        json!({"path": "notes.md", "targets": [{"old_string": "beta", "new_string": "BETA"}]}),
    )
    .await;
    ok(
        &h,
        "r1",
        "edit_file",
        json!({"path": "other.md", "content": "x\n"}),
    )
    .await;

    let list = ok(&h, "r1", "file_history", json!({"path": "notes.md"})).await;
    assert!(list.starts_with("1 version(s) of notes.md"), "{list}");
    assert!(
        list.contains("modify") && list.contains("edit_file"),
        "{list}"
    );
    assert!(list.contains("task r1"), "{list}");
    let all = ok(
        &h,
        "r1",
        "file_history",
        json!({"mode": "list", "task_id": "current", "limit": 5}),
    )
    .await;
    assert!(
        all.starts_with("2 version(s) of the work directory (task r1)"),
        "{all}"
    );
    let none = ok(
        &h,
        "r1",
        "file_history",
        json!({"mode": "list", "from": "2000-01-01", "to": "2000-01-02 12:00"}),
    )
    .await;
    assert!(none.starts_with("no recorded versions"), "{none}");
    let one = ok(
        &h,
        "r1",
        "file_history",
        json!({"mode": "list", "limit": 1}),
    )
    .await;
    assert!(one.contains("more versions exist"), "{one}");

    let diff = ok(&h, "r1", "file_history", json!({"paths": ["notes.md"]})).await;
    assert!(diff.contains("--- notes.md @ version 1"), "{diff}");
    assert!(diff.contains("+++ notes.md on disk now"), "{diff}");
    assert!(diff.contains("\n-beta\n+BETA\n"), "{diff}");
    let created = ok(
        &h,
        "r1",
        "file_history",
        json!({"mode": "read", "version": 2}),
    )
    .await;
    assert!(
        created.contains("did not exist in this version"),
        "{created}"
    );
}

#[tokio::test]
async fn file_history_runs_again_after_a_mutating_call() {
    let h = approving().await;
    std::fs::write(h.root().join("a.txt"), "1\n").unwrap();
    ok(
        &h,
        "r1",
        "edit_file",
        json!({"path": "a.txt", "content": "2\n"}),
    )
    .await;
    let args = json!({"mode": "list", "path": "a.txt", "limit": 24});
    let first = ok(&h, "r1", "file_history", args.clone()).await;
    let (status, again) = call(&h, "r1", "file_history", args.clone()).await;
    assert_eq!(
        status,
        Status::Deduped,
        "nothing changed, so the answer is remembered"
    );
    assert_eq!(again, first);
    ok(
        &h,
        "r1",
        "edit_file",
        json!({"path": "a.txt", "content": "3\n"}),
    )
    .await;
    let (status, after) = call(&h, "r1", "file_history", args).await;
    assert_eq!(
        status,
        Status::Ok,
        "an edit must make file_history run again"
    );
    assert!(after.starts_with("2 version(s)"), "{after}");
}

#[tokio::test]
async fn the_headless_confirmer_declines_remove_and_restore() {
    let h = Harness::new();
    h.select("s", TOOLS).await;
    let path = h.root().join("keep.txt");
    std::fs::write(&path, "k").unwrap();
    let (status, text) = call(&h, "r1", "remove_file", json!({"path": "keep.txt"})).await;
    assert_eq!(status, Status::Declined, "{text}");
    assert!(text.contains("no one is available to approve"), "{text}");
    let (status, _) = call(&h, "r1", "restore_file", json!({"task_id": "current"})).await;
    assert_eq!(status, Status::Declined);
    assert_eq!(std::fs::read(&path).unwrap(), b"k");
    assert!(
        h.data_dir.path().read_dir().unwrap().next().is_none(),
        "nothing in the trash"
    );
}

#[tokio::test]
async fn remove_file_refuses_directories_and_links_by_name() {
    let h = approving().await;
    let root = h.root();
    std::fs::create_dir(root.join("dir")).unwrap();
    std::fs::write(root.join("dir/f"), "x").unwrap();
    std::os::unix::fs::symlink("dir/f", root.join("link")).unwrap();
    let err = failed(&h, "r1", "remove_file", json!({"path": "dir"})).await;
    assert!(
        err.contains("is a directory") && err.contains("one by one"),
        "{err}"
    );
    let err = failed(&h, "r1", "remove_file", json!({"path": "link"})).await;
    assert!(err.contains("is a symlink"), "{err}");
    assert!(root.join("dir/f").exists() && root.join("link").exists());
}

/// A read-style tool whose result depends on the files it reports, like read_files.
struct Peek {
    spec: ToolSpec,
}

#[async_trait]
impl Tool for Peek {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }
    async fn call(&self, cx: ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        let confine = Confinement::for_call(&cx)?;
        let path = confine.resolve(args["path"].as_str().unwrap_or_default())?;
        let text = std::fs::read_to_string(&path).map_err(|e| ToolError::failed(e.to_string()))?;
        Ok(ToolOutput::text(text).with_paths(vec![path]))
    }
}

#[tokio::test]
async fn an_edit_drops_exactly_the_reads_of_its_resolved_path() {
    let workdir = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    let root = workdir.path().canonicalize().unwrap();
    std::fs::create_dir(root.join("sub")).unwrap();
    std::fs::write(root.join("a.txt"), "a1").unwrap();
    std::fs::write(root.join("b.txt"), "b1").unwrap();
    let store = dispatch_store::open("memory:").unwrap();
    let stores = crate::Stores {
        file_history: Some(store.clone()),
        ..crate::Stores::default()
    };
    let mut registry =
        crate::builtin_registry_with(&crate::ToolsConfig::default(), &stores).unwrap();
    registry
        .register(Arc::new(Peek {
            spec: ToolSpec::new(
                "peek",
                "Read one file.",
                json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}),
            )
            .read_only()
            .concurrent()
            .effect(Effect::ReadsPaths),
        }))
        .unwrap();
    let mut config = EngineConfig::new(root.clone());
    config.data_dir = Some(data.path().canonicalize().unwrap());
    let engine = Engine::new(registry, store.clone(), Arc::new(ApproveAll), config).unwrap();
    let round = |run: &'static str, calls| {
        engine.round(RoundRequest::new("s", run, Provider::OpenAi, calls))
    };
    let select = crate::test_support::call(
        "sel",
        "find_tools",
        json!({"query": "select:peek,edit_file"}),
    );
    round("r1", vec![select]).await.unwrap();
    let reads = || {
        vec![
            run_tool("p1", "peek", json!({"path": "a.txt"})),
            run_tool("p2", "peek", json!({"path": "b.txt"})),
        ]
    };
    let statuses = |out: &dispatch_engine::RoundOutcome| -> Vec<Status> {
        out.results.iter().map(|r| r.status).collect()
    };
    let out = round("r1", reads()).await.unwrap();
    assert_eq!(statuses(&out), vec![Status::Ok, Status::Ok]);
    let out = round("r1", reads()).await.unwrap();
    assert_eq!(statuses(&out), vec![Status::Deduped, Status::Deduped]);
    // Written through a different spelling of the same file.
    let edit = run_tool(
        "e",
        "edit_file",
        json!({"path": "sub/../a.txt", "content": "a2"}),
    );
    let out = round("r1", vec![edit]).await.unwrap();
    assert_eq!(
        out.results[0].status,
        Status::Ok,
        "{}",
        out.results[0].content
    );
    let out = round("r1", reads()).await.unwrap();
    assert_eq!(statuses(&out), vec![Status::Ok, Status::Deduped]);
    assert!(
        out.results[0].content.contains("a2"),
        "{}",
        out.results[0].content
    );
}

#[tokio::test]
async fn without_a_file_history_or_data_dir_nothing_is_changed() {
    let workdir = tempfile::tempdir().unwrap();
    let root = workdir.path().canonicalize().unwrap();
    std::fs::write(root.join("a.txt"), "a").unwrap();
    let store = dispatch_store::open("memory:").unwrap();
    // No file history at all.
    let engine = Engine::new(
        crate::builtin_registry().unwrap(),
        store.clone(),
        Arc::new(ApproveAll),
        EngineConfig::new(root.clone()),
    )
    .unwrap();
    let run = |calls| engine.round(RoundRequest::new("s", "r", Provider::OpenAi, calls));
    run(vec![crate::test_support::call(
        "sel",
        "find_tools",
        json!({"query": format!("select:{TOOLS}")}),
    )])
    .await
    .unwrap();
    let out = run(vec![
        run_tool("1", "edit_file", json!({"path": "a.txt", "content": "b"})),
        run_tool("2", "remove_file", json!({"path": "a.txt"})),
    ])
    .await
    .unwrap();
    for r in &out.results {
        assert_eq!(r.status, Status::Failed, "{}", r.content);
        assert!(r.content.contains("keeps no file history"), "{}", r.content);
    }
    // A file history but no data directory: no trash, so no removal.
    let stores = crate::Stores {
        file_history: Some(store.clone()),
        ..crate::Stores::default()
    };
    let engine = Engine::new(
        crate::builtin_registry_with(&crate::ToolsConfig::default(), &stores).unwrap(),
        store.clone(),
        Arc::new(ApproveAll),
        EngineConfig::new(root.clone()),
    )
    .unwrap();
    let out = engine
        .round(RoundRequest::new(
            "s",
            "r2",
            Provider::OpenAi,
            vec![run_tool("3", "remove_file", json!({"path": "a.txt"}))],
        ))
        .await
        .unwrap();
    assert_eq!(out.results[0].status, Status::Failed);
    assert!(
        out.results[0].content.contains("no data directory"),
        "{}",
        out.results[0].content
    );
    assert_eq!(std::fs::read(root.join("a.txt")).unwrap(), b"a");
}

/// Timings of the heaviest paths (run by hand: `cargo test -p dispatch-tools timing_of_large_edits -- --ignored --nocapture`).
#[tokio::test]
#[ignore]
async fn timing_of_large_edits() {
    let h = approving().await;
    let line = "    let value_number_0000 = compute_something(argument_one, argument_two);\n";
    let lines = (15 * 1024 * 1024) / line.len();
    let big: String = (0..lines)
        .map(|i| line.replace("0000", &format!("{:06}", i)))
        .collect();
    std::fs::write(h.root().join("big.rs"), &big).unwrap();
    let t = std::time::Instant::now();
    ok(
        &h,
        "r1",
        "edit_file",
        json!({"path": "big.rs", "targets": [{"old_string": "value_number_100000 ", "new_string": "renamed "}]}),
    )
    .await;
    println!(
        "patch one target in a {} MiB file of {lines} lines: {:?}",
        big.len() >> 20,
        t.elapsed()
    );
    let t = std::time::Instant::now();
    let err = failed(
        &h,
        "r1",
        "edit_file",
        json!({"path": "big.rs", "targets": [{"old_string": "    let value_numbr_100001 = compute_somthing(argument_one, argument_two);", "new_string": "x"}]}),
    )
    .await;
    println!(
        "missing old_string with candidates over {lines} lines: {:?}",
        t.elapsed()
    );
    assert!(err.contains("most similar"), "{err}");
    let t = std::time::Instant::now();
    ok(
        &h,
        "r1",
        "edit_file",
        json!({"path": "w.txt", "content": "y".repeat(4 * 1024 * 1024)}),
    )
    .await;
    println!("write 4 MiB: {:?}", t.elapsed());
    let t = std::time::Instant::now();
    ok(&h, "r1", "remove_file", json!({"path": "big.rs"})).await;
    ok(&h, "r2", "restore_file", json!({"task_id": "r1"})).await;
    println!(
        "remove + task undo of a 15 MiB file and a 4 MiB file: {:?}",
        t.elapsed()
    );
    let t = std::time::Instant::now();
    ok(
        &h,
        "r2",
        "file_history",
        json!({"mode": "read", "version": 1}),
    )
    .await;
    println!(
        "diff a 15 MiB version against disk (too large: sizes only): {:?}",
        t.elapsed()
    );
}
