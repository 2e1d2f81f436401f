//! download_file against a real server on 127.0.0.1, through the engine.

use std::sync::Arc;
use std::time::Duration;

use dispatch_engine::{ApproveAll, EventKind, Headless, Status};
use pretty_assertions::assert_eq;
use serde_json::json;

use crate::test_support::*;
use crate::web::http_request::tests::web_harness;
use crate::web::test_server::{Reply, TestServer};

const FIVE_MB: usize = 5 * 1024 * 1024;

fn payload() -> Vec<u8> {
    (0..FIVE_MB).map(|i| (i % 251) as u8).collect()
}

async fn download(
    h: &Harness,
    run: &str,
    args: serde_json::Value,
) -> (Status, String, Vec<String>) {
    let out = h
        .round("s", run, vec![run_tool("c1", "download_file", args)])
        .await;
    let progress = events_of(&out.events, "ToolProgress")
        .into_iter()
        .filter_map(|e| match e {
            EventKind::ToolProgress { text, .. } => Some(text.to_string()),
            _ => None,
        })
        .collect();
    let r = &out.results[0];
    let text = r
        .content
        .strip_prefix("[download_file] ")
        .unwrap_or(&r.content)
        .to_string();
    (r.status, text, progress)
}

/// Files left in the work directory, relative, sorted (a leftover temporary file shows here).
fn files(h: &Harness) -> Vec<String> {
    let root = h.root();
    let mut out: Vec<String> = walk(&root)
        .into_iter()
        .map(|p| p.strip_prefix(&root).unwrap().display().to_string())
        .collect();
    out.sort();
    out
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}

#[tokio::test]
async fn a_five_megabyte_file_is_streamed_to_disk_with_progress() {
    let server = TestServer::start(|_| {
        Reply::new(200, "application/octet-stream", payload())
            .chunked(256 * 1024, Duration::from_millis(40))
    })
    .await;
    let h = web_harness(&server, Arc::new(ApproveAll)).await;
    let url = server.url("/data.bin");
    let (status, text, progress) =
        download(&h, "r1", json!({"url": url, "path": "downloads/data.bin"})).await;
    assert_eq!(status, Status::Ok, "{text}");
    assert_eq!(
        std::fs::read(h.root().join("downloads/data.bin")).unwrap(),
        payload()
    );
    assert_eq!(files(&h), ["downloads/data.bin"]);
    assert!(
        text.starts_with(&format!("downloaded {url} to downloads/data.bin: 5.0 MiB, application/octet-stream; new file; version ")),
        "{text}"
    );
    // Several progress events while the bytes arrive, the last with the whole size.
    assert!(progress.len() >= 3, "{progress:?}");
    assert_eq!(
        progress.last().unwrap(),
        &format!("downloaded {FIVE_MB} of {FIVE_MB} bytes\n")
    );
    for p in &progress {
        assert!(
            p.starts_with("downloaded ") && p.ends_with(&format!(" of {FIVE_MB} bytes\n")),
            "{p}"
        );
    }
}

#[tokio::test]
async fn paths_outside_the_work_directory_are_refused_before_any_request() {
    let server = TestServer::start(|_| Reply::new(200, "text/plain", "x")).await;
    let h = web_harness(&server, Arc::new(ApproveAll)).await;
    let url = server.url("/x");
    let (s1, t1, _) = download(&h, "r1", json!({"url": url, "path": "../escape.txt"})).await;
    let (s2, t2, _) = download(&h, "r2", json!({"url": url, "path": ".tooldispatch/rules"})).await;
    assert_eq!((s1, s2), (Status::Failed, Status::Failed));
    assert!(
        t1.starts_with(
            "tool=download_file failed: path \"../escape.txt\" refused: it resolves to "
        ),
        "{t1}"
    );
    assert!(t1.contains("outside the work directory"), "{t1}");
    assert!(t2.contains("is on the denied list"), "{t2}");
    assert_eq!(server.requests().len(), 0);
}

#[tokio::test]
async fn an_existing_file_is_replaced_only_with_overwrite_and_can_be_restored() {
    let server = TestServer::start(|_| Reply::new(200, "text/plain", "new content")).await;
    let h = web_harness(&server, Arc::new(ApproveAll)).await;
    std::fs::write(h.root().join("notes.txt"), "old content").unwrap();
    let url = server.url("/notes");
    let (s1, t1, _) = download(&h, "r1", json!({"url": url, "path": "notes.txt"})).await;
    assert_eq!(s1, Status::Failed);
    assert!(
        t1.starts_with(
            "tool=download_file failed: notes.txt already exists; pass overwrite=true to replace it"
        ),
        "{t1}"
    );
    assert_eq!(server.requests().len(), 0);

    let (s2, t2, _) = download(
        &h,
        "r2",
        json!({"url": url, "path": "notes.txt", "overwrite": true}),
    )
    .await;
    assert_eq!(s2, Status::Ok, "{t2}");
    assert_eq!(
        std::fs::read_to_string(h.root().join("notes.txt")).unwrap(),
        "new content"
    );
    let version: u64 = t2
        .split("restore_file(version=")
        .nth(1)
        .and_then(|r| r.split(')').next())
        .unwrap()
        .parse()
        .unwrap();
    assert!(t2.contains("replaced the previous 11 bytes"), "{t2}");
    h.select("s", "restore_file").await;
    let out = h
        .round(
            "s",
            "r3",
            vec![run_tool("c1", "restore_file", json!({"version": version}))],
        )
        .await;
    assert_eq!(
        out.results[0].status,
        Status::Ok,
        "{}",
        out.results[0].content
    );
    assert_eq!(
        std::fs::read_to_string(h.root().join("notes.txt")).unwrap(),
        "old content"
    );
}

#[tokio::test]
async fn an_error_status_fails_with_the_start_of_the_body_and_saves_nothing() {
    let server = TestServer::start(|_| Reply::new(404, "text/plain", "x".repeat(20_000))).await;
    let h = web_harness(&server, Arc::new(ApproveAll)).await;
    let url = server.url("/gone.zip");
    let (status, text, _) = download(&h, "r1", json!({"url": url, "path": "gone.zip"})).await;
    assert_eq!(status, Status::Failed);
    let expected = format!(
        "tool=download_file failed: HTTP 404 Not Found from {url}; nothing was saved. Response body: {}… (cut after 8192 bytes)",
        "x".repeat(8192)
    );
    let first = text.lines().next().unwrap();
    assert!(first == expected, "{}", &first[..first.len().min(300)]);
    assert_eq!(files(&h), Vec::<String>::new());
}

#[tokio::test]
async fn a_download_over_the_size_cap_is_dropped() {
    let server =
        TestServer::start(|_| Reply::new(200, "application/octet-stream", vec![0u8; 4096])).await;
    let policy = Arc::new(crate::web::NetPolicy::from_list(&[server.host_port()]).unwrap());
    // Only the system tools and a download_file with a small limit.
    let registry = |stores: &crate::Stores| {
        let mut registry = dispatch_engine::Registry::empty();
        dispatch_engine::register_system_tools(&mut registry).unwrap();
        registry
            .register(crate::builtin(
                crate::web::DownloadFile::new(policy, stores).with_max_bytes(1000),
            ))
            .unwrap();
        registry
    };
    let h = Harness::with_registry(registry, Arc::new(ApproveAll));
    h.select("s", "download_file").await;
    let url = server.url("/big");
    let (status, text, _) = download(&h, "r1", json!({"url": url, "path": "big.bin"})).await;
    assert_eq!(status, Status::Failed);
    assert!(text.starts_with(&format!("tool=download_file failed: {url} announces 4096 bytes, over the download limit of 1000 bytes; nothing was saved")), "{text}");
    assert_eq!(files(&h), Vec::<String>::new());
}

#[tokio::test]
async fn a_download_asks_and_headless_declines() {
    let server = TestServer::start(|_| Reply::new(200, "text/plain", "x")).await;
    let h = web_harness(&server, Arc::new(Headless)).await;
    let (status, _, _) =
        download(&h, "r1", json!({"url": server.url("/x"), "path": "x.txt"})).await;
    assert_eq!(status, Status::Declined);
    assert_eq!(server.requests().len(), 0);
}

#[tokio::test]
async fn a_refused_address_saves_nothing() {
    let server = TestServer::start(|_| Reply::redirect(302, "http://10.9.8.7/payload")).await;
    let h = web_harness(&server, Arc::new(ApproveAll)).await;
    let (status, text, _) =
        download(&h, "r1", json!({"url": server.url("/x"), "path": "p.bin"})).await;
    assert_eq!(status, Status::Failed);
    assert!(text.contains("(rule: private)"), "{text}");
    assert_eq!(files(&h), Vec::<String>::new());
}
