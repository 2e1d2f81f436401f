//! Malformed and malicious arguments for read_files and find_files, as a table: each must end
//! in a clear error (its status and a fragment of its message), and none may read or change
//! anything outside the work directory. The model is the adversary here, so the table is the
//! list of things a confused or hostile model has sent or could send.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

use dispatch_engine::Status;
use serde_json::{Value, json};

use crate::test_support::*;

const SENTINEL: &str = "SENTINEL-SECRET-4242";

/// Every file below `dir` with its size and modification time.
fn snapshot(dir: &Path) -> BTreeMap<String, (u64, std::time::SystemTime)> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let entry = entry.unwrap();
            let meta = std::fs::symlink_metadata(entry.path()).unwrap();
            if meta.is_dir() {
                stack.push(entry.path());
            }
            out.insert(
                entry.path().display().to_string(),
                (meta.len(), meta.modified().unwrap()),
            );
        }
    }
    out
}

fn zip_of(parts: &[(&str, &[u8])]) -> Vec<u8> {
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let options = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated);
    for (name, content) in parts {
        zip.start_file(*name, options).unwrap();
        zip.write_all(content).unwrap();
    }
    zip.finish().unwrap().into_inner()
}

#[tokio::test]
async fn hostile_arguments_get_clear_errors_and_touch_nothing_outside() {
    let h = Harness::new();
    h.select("s", "read_files,find_files").await;
    let root = h.root();
    let outside = tempfile::tempdir().unwrap();
    let secret = outside.path().join("secret.txt");
    std::fs::write(&secret, SENTINEL).unwrap();
    std::fs::write(h.data_dir.path().join("store.db"), SENTINEL).unwrap();

    std::fs::write(root.join("a.txt"), "one line\n").unwrap();
    std::fs::write(root.join(".env"), format!("KEY={SENTINEL}\n")).unwrap();
    std::fs::create_dir_all(root.join(".tooldispatch")).unwrap();
    std::fs::write(root.join(".tooldispatch/rules"), SENTINEL).unwrap();
    std::os::unix::fs::symlink(&secret, root.join("link-out")).unwrap();
    std::os::unix::fs::symlink(outside.path(), root.join("dir-out")).unwrap();
    std::os::unix::fs::symlink("loop2", root.join("loop1")).unwrap();
    std::os::unix::fs::symlink("loop1", root.join("loop2")).unwrap();
    std::os::unix::fs::symlink(root.join(".env"), root.join("notes.txt")).unwrap();
    let fifo = std::process::Command::new("mkfifo")
        .arg(root.join("fifo"))
        .status()
        .unwrap();
    assert!(fifo.success());
    std::fs::write(
        root.join("fake.pdf"),
        b"%PDF-1.7\n this is not really a pdf",
    )
    .unwrap();
    std::fs::write(root.join("fake.docx"), b"PK\x03\x04 not really a zip").unwrap();
    std::fs::write(
        root.join("bomb.docx"),
        zip_of(&[("word/document.xml", &vec![b'a'; 33 << 20])]),
    )
    .unwrap();
    std::fs::write(
        root.join("bad.pptx"),
        zip_of(&[("hello.txt", b"not a presentation")]),
    )
    .unwrap();

    let outside_before = snapshot(outside.path());
    let work_before = snapshot(&root);

    let secret_abs = secret.display().to_string();
    let data_dir = h.data_dir.path().display().to_string();
    let store = h.data_dir.path().join("store.db").display().to_string();
    let file = |v: Value| json!({ "files": [v] });
    let query = |v: Value| json!({ "queries": [v] });
    let search = |v: Value| json!({ "mode": "search", "queries": [v] });
    use Status::{Declined, Failed, Invalid};
    let cases: Vec<(&str, Value, Status, &str)> = vec![
        // read_files: the shape of the arguments
        ("read_files", json!({}), Invalid, "files"),
        ("read_files", json!({"files": []}), Invalid, "/files"),
        ("read_files", json!({"files": "a.txt"}), Invalid, "/files"),
        (
            "read_files",
            json!({"files": vec![json!({"path": "a.txt"}); 65]}),
            Invalid,
            "/files",
        ),
        ("read_files", file(json!({})), Invalid, "path"),
        (
            "read_files",
            file(json!({"path": ""})),
            Invalid,
            "/files/0/path",
        ),
        (
            "read_files",
            file(json!({"path": "a".repeat(5000)})),
            Invalid,
            "/files/0/path",
        ),
        (
            "read_files",
            file(json!({"path": ["a.txt"]})),
            Invalid,
            "/files/0/path",
        ),
        (
            "read_files",
            file(json!({"path": "a.txt", "offset": 0})),
            Invalid,
            "/files/0/offset",
        ),
        (
            "read_files",
            file(json!({"path": "a.txt", "offset": -1})),
            Invalid,
            "/files/0/offset",
        ),
        (
            "read_files",
            file(json!({"path": "a.txt", "offset": "5"})),
            Invalid,
            "/files/0/offset",
        ),
        (
            "read_files",
            file(json!({"path": "a.txt", "offset": 1.5})),
            Invalid,
            "/files/0/offset",
        ),
        (
            "read_files",
            file(json!({"path": "a.txt", "limit": 0})),
            Invalid,
            "/files/0/limit",
        ),
        (
            "read_files",
            file(json!({"path": "a.txt", "limit": 1e12})),
            Invalid,
            "/files/0/limit",
        ),
        (
            "read_files",
            file(json!({"path": "a.txt", "encoding": "x"})),
            Invalid,
            "encoding",
        ),
        // read_files: where the path leads
        (
            "read_files",
            file(json!({"path": "../x.txt"})),
            Failed,
            "outside the work directory",
        ),
        (
            "read_files",
            file(json!({"path": secret_abs})),
            Failed,
            "outside the work directory",
        ),
        (
            "read_files",
            file(json!({"path": "/etc/hostname"})),
            Failed,
            "outside the work directory",
        ),
        (
            "read_files",
            file(json!({"path": "a.txt/../../x"})),
            Failed,
            "outside the work directory",
        ),
        (
            "read_files",
            file(json!({"path": "~/.bashrc"})),
            Failed,
            "not expanded",
        ),
        (
            "read_files",
            file(json!({"path": "a\u{0}b"})),
            Failed,
            "NUL",
        ),
        (
            "read_files",
            file(json!({"path": "link-out"})),
            Failed,
            "outside the work directory",
        ),
        (
            "read_files",
            file(json!({"path": "dir-out/secret.txt"})),
            Failed,
            "outside the work directory",
        ),
        (
            "read_files",
            file(json!({"path": "dir-out"})),
            Failed,
            "outside the work directory",
        ),
        (
            "read_files",
            file(json!({"path": "loop1"})),
            Failed,
            "symlink loop",
        ),
        (
            "read_files",
            file(json!({"path": ".tooldispatch/rules"})),
            // The gate asks before the tool's own refusal: a path inside tooldispatch's own
            // files always asks (and, headless, is declined).
            Declined,
            "holds tooldispatch's own rules",
        ),
        (
            "read_files",
            file(json!({"path": store})),
            Failed,
            "outside the work directory",
        ),
        (
            "read_files",
            file(json!({"path": "notes.txt"})),
            // The gate judges the file a link reaches: a link to .env asks like .env.
            Declined,
            "sensitive path .env",
        ),
        (
            "read_files",
            file(json!({"path": ".env"})),
            Declined,
            "no one is available to approve",
        ),
        // read_files: what the path is
        (
            "read_files",
            file(json!({"path": "."})),
            Failed,
            "directory; list it with find_files",
        ),
        (
            "read_files",
            file(json!({"path": "fifo"})),
            Failed,
            "not a regular file (a named pipe)",
        ),
        (
            "read_files",
            file(json!({"path": "a.txt", "offset": 99})),
            Failed,
            "past the end",
        ),
        (
            "read_files",
            file(json!({"path": "fake.pdf"})),
            Failed,
            "cannot read this PDF",
        ),
        (
            "read_files",
            file(json!({"path": "fake.docx"})),
            Failed,
            "not a readable zip archive",
        ),
        (
            "read_files",
            file(json!({"path": "bomb.docx"})),
            Failed,
            "unpacks to more than 32.0 MiB",
        ),
        (
            "read_files",
            file(json!({"path": "bad.pptx"})),
            Failed,
            "not a PowerPoint presentation",
        ),
        // find_files: the shape of the arguments
        ("find_files", json!({}), Invalid, "queries"),
        ("find_files", json!({"queries": []}), Invalid, "/queries"),
        (
            "find_files",
            json!({"queries": vec![json!({}); 17]}),
            Invalid,
            "/queries",
        ),
        (
            "find_files",
            json!({"mode": "delete", "queries": [{}]}),
            Invalid,
            "/mode",
        ),
        (
            "find_files",
            query(json!({"recursive": "yes"})),
            Invalid,
            "/queries/0/recursive",
        ),
        (
            "find_files",
            query(json!({"pattern": "x".repeat(2000)})),
            Invalid,
            "/queries/0/pattern",
        ),
        (
            "find_files",
            query(json!({"dir": ".", "mode": "list"})),
            Invalid,
            "mode",
        ),
        // find_files: where dir leads
        (
            "find_files",
            query(json!({"dir": "../"})),
            Failed,
            "outside the work directory",
        ),
        (
            "find_files",
            query(json!({"dir": "/"})),
            Failed,
            "outside the work directory",
        ),
        (
            "find_files",
            query(json!({"dir": "~"})),
            Failed,
            "not expanded",
        ),
        ("find_files", query(json!({"dir": "a\u{0}"})), Failed, "NUL"),
        (
            "find_files",
            query(json!({"dir": ".tooldispatch"})),
            Declined,
            "holds tooldispatch's own rules",
        ),
        (
            "find_files",
            query(json!({"dir": "dir-out"})),
            Failed,
            "outside the work directory",
        ),
        (
            "find_files",
            query(json!({"dir": "link-out"})),
            Failed,
            "outside the work directory",
        ),
        (
            "find_files",
            query(json!({"dir": data_dir})),
            Failed,
            "outside the work directory",
        ),
        (
            "find_files",
            query(json!({"dir": "nope"})),
            Failed,
            "does not exist",
        ),
        // find_files: patterns
        (
            "find_files",
            query(json!({"pattern": "**"})),
            Failed,
            "no literal part",
        ),
        (
            "find_files",
            query(json!({"pattern": "/etc/*"})),
            Failed,
            "starts with `/`",
        ),
        (
            "find_files",
            query(json!({"pattern": "~/x*"})),
            Failed,
            "starts with `~`",
        ),
        (
            "find_files",
            query(json!({"pattern": "../*.txt"})),
            Failed,
            "contains `..`",
        ),
        (
            "find_files",
            query(json!({"pattern": "[a-"})),
            Failed,
            "not a valid glob",
        ),
        (
            "find_files",
            search(json!({"pattern": "("})),
            Failed,
            "not a valid regex",
        ),
        (
            "find_files",
            search(json!({"pattern": "(?:a{1000}){1000}"})),
            Failed,
            "not a valid regex",
        ),
        (
            "find_files",
            search(json!({"pattern": "a\nb"})),
            Failed,
            "not a valid regex",
        ),
        (
            "find_files",
            search(json!({"pattern": "x", "file_pattern": "/abs/*"})),
            Failed,
            "file_pattern \"/abs/*\" starts with `/`",
        ),
        (
            "find_files",
            search(json!({"pattern": "x", "file_pattern": "../*"})),
            Failed,
            "contains `..`",
        ),
        ("find_files", search(json!({})), Failed, "needs a pattern"),
        (
            "find_files",
            json!({"mode": "list", "queries": [{"pattern": "x"}]}),
            Failed,
            "takes no pattern",
        ),
        (
            "find_files",
            json!({"mode": "glob", "queries": [{}]}),
            Failed,
            "needs a pattern",
        ),
    ];
    assert!(cases.len() >= 60, "{} cases", cases.len());
    for (i, (tool, args, status, fragment)) in cases.into_iter().enumerate() {
        let out = h
            .round(
                "s",
                &format!("h{i}"),
                vec![run_tool("c1", tool, args.clone())],
            )
            .await;
        let r = &out.results[0];
        eprintln!(
            "case {i}: {:?} {}",
            r.status,
            r.content.lines().next().unwrap_or("")
        );
        assert_eq!(r.status, status, "case {i}: {tool} {args}\n{}", r.content);
        assert!(
            r.content.contains(fragment),
            "case {i}: {tool} {args}: wanted {fragment:?} in\n{}",
            r.content
        );
        assert!(
            !r.content.contains(SENTINEL) && r.images.is_empty(),
            "case {i}: {tool} {args} leaked:\n{}",
            r.content
        );
    }
    assert_eq!(snapshot(outside.path()), outside_before);
    assert_eq!(snapshot(&root), work_before);
}
