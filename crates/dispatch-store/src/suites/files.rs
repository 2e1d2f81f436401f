//! One behaviour suite for every `FileHistory` backend (memory, SQLite, and the tiered store,
//! which keeps file history in its local SQLite file whether Redis answers or not).

use std::sync::Arc;

use pretty_assertions::assert_eq;
use tempfile::TempDir;

use crate::file_history::{FileAction, FileHistory, NewFileVersion, SNAPSHOT_CAP, VersionQuery};
use crate::memory::MemoryStore;

struct Fixture {
    files: Arc<dyn FileHistory>,
    _dir: Option<TempDir>,
}

fn memory() -> Fixture {
    Fixture {
        files: Arc::new(MemoryStore::default()),
        _dir: None,
    }
}

#[cfg(feature = "sqlite")]
fn sqlite() -> Fixture {
    let dir = TempDir::new().unwrap();
    let store = crate::sqlite::SqliteStore::open(&dir.path().join("store.db")).unwrap();
    Fixture {
        files: Arc::new(store),
        _dir: Some(dir),
    }
}

/// A tiered store whose Redis is a closed port: file history must not care.
#[cfg(all(feature = "sqlite", feature = "redis"))]
fn tiered() -> Fixture {
    let dir = TempDir::new().unwrap();
    let url = format!(
        "redis://127.0.0.1:1/0?local={}",
        dir.path().join("local.db").display()
    );
    Fixture {
        files: Arc::new(crate::tiered::TieredStore::open(&url).unwrap()),
        _dir: Some(dir),
    }
}

fn change(path: &str, content: Option<&str>, run: &str) -> NewFileVersion {
    NewFileVersion {
        path: path.to_string(),
        action: if content.is_some() {
            FileAction::Modify
        } else {
            FileAction::Create
        },
        content: content.map(|c| c.as_bytes().to_vec()),
        trash_path: None,
        session: "s1".to_string(),
        run: run.to_string(),
        tool: "edit_file".to_string(),
    }
}

async fn versions_round_trip_with_their_content(f: Fixture) {
    let first = f
        .files
        .record_version(change("/w/a.txt", None, "r1"))
        .await
        .unwrap();
    let second = f
        .files
        .record_version(change("/w/a.txt", Some("one\n"), "r1"))
        .await
        .unwrap();
    assert!(second > first, "ids increase: {first} then {second}");

    let created = f.files.version(first).await.unwrap().unwrap();
    assert_eq!(created.action, FileAction::Create);
    assert!(!created.existed());
    assert_eq!(created.content, None);
    assert_eq!(created.hash, "");

    let modified = f.files.version(second).await.unwrap().unwrap();
    assert_eq!(modified.content.as_deref(), Some(&b"one\n"[..]));
    assert!(modified.existed() && !modified.truncated);
    assert_eq!(modified.size, 4);
    assert_eq!(modified.hash, blake3::hash(b"one\n").to_hex().to_string());
    assert_eq!(
        (modified.session.as_str(), modified.run.as_str()),
        ("s1", "r1")
    );
    assert_eq!(modified.tool, "edit_file");

    assert_eq!(f.files.version(second + 100).await.unwrap(), None);
}

async fn queries_narrow_and_list_newest_first(f: Fixture) {
    let a1 = f
        .files
        .record_version(change("/w/a", Some("a1"), "r1"))
        .await
        .unwrap();
    let b1 = f
        .files
        .record_version(change("/w/b", Some("b1"), "r1"))
        .await
        .unwrap();
    let a2 = f
        .files
        .record_version(change("/w/a", Some("a2"), "r2"))
        .await
        .unwrap();
    let mut other = change("/w/a", Some("a3"), "r1");
    other.session = "s2".to_string();
    let a3 = f.files.record_version(other).await.unwrap();

    let ids =
        |vs: Vec<crate::file_history::FileVersion>| vs.iter().map(|v| v.id).collect::<Vec<_>>();
    let all = f.files.versions(&VersionQuery::default()).await.unwrap();
    assert_eq!(ids(all), vec![a3, a2, b1, a1]);

    let of_a = VersionQuery {
        paths: vec!["/w/a".to_string()],
        ..Default::default()
    };
    assert_eq!(
        ids(f.files.versions(&of_a).await.unwrap()),
        vec![a3, a2, a1]
    );

    let task = VersionQuery {
        session: Some("s1".to_string()),
        run: Some("r1".to_string()),
        ..Default::default()
    };
    assert_eq!(ids(f.files.versions(&task).await.unwrap()), vec![b1, a1]);

    let limited = VersionQuery {
        paths: vec!["/w/a".to_string(), "/w/b".to_string()],
        limit: 2,
        ..Default::default()
    };
    assert_eq!(ids(f.files.versions(&limited).await.unwrap()), vec![a3, a2]);

    let future = VersionQuery {
        from_ms: Some(u64::MAX / 4),
        ..Default::default()
    };
    assert!(f.files.versions(&future).await.unwrap().is_empty());
    let past = VersionQuery {
        to_ms: Some(1),
        ..Default::default()
    };
    assert!(f.files.versions(&past).await.unwrap().is_empty());
}

async fn oversized_snapshots_keep_hash_and_size_only(f: Fixture) {
    let big = vec![b'x'; SNAPSHOT_CAP + 1];
    let mut new = change("/w/big.bin", None, "r1");
    new.action = FileAction::Delete;
    new.content = Some(big.clone());
    new.trash_path = Some("/data/trash/1-big.bin".to_string());
    let id = f.files.record_version(new).await.unwrap();
    let v = f.files.version(id).await.unwrap().unwrap();
    assert!(v.existed() && v.truncated);
    assert_eq!(v.content, None);
    assert_eq!(v.size, big.len() as u64);
    assert_eq!(v.hash, blake3::hash(&big).to_hex().to_string());
    assert_eq!(v.trash_path.as_deref(), Some("/data/trash/1-big.bin"));
    assert_eq!(v.action, FileAction::Delete);
}

async fn concurrent_writers_get_distinct_ids(f: Fixture) {
    let mut tasks = Vec::new();
    for i in 0..32 {
        let files = f.files.clone();
        tasks.push(tokio::spawn(async move {
            files
                .record_version(change(&format!("/w/{i}"), Some("x"), "r1"))
                .await
                .unwrap()
        }));
    }
    let mut ids = Vec::new();
    for task in tasks {
        ids.push(task.await.unwrap());
    }
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 32);
    assert_eq!(
        f.files
            .versions(&VersionQuery::default())
            .await
            .unwrap()
            .len(),
        32
    );
}

macro_rules! suite {
    ($backend:ident, $open:path) => {
        mod $backend {
            #[tokio::test]
            async fn versions_round_trip_with_their_content() {
                super::versions_round_trip_with_their_content($open()).await;
            }
            #[tokio::test]
            async fn queries_narrow_and_list_newest_first() {
                super::queries_narrow_and_list_newest_first($open()).await;
            }
            #[tokio::test]
            async fn oversized_snapshots_keep_hash_and_size_only() {
                super::oversized_snapshots_keep_hash_and_size_only($open()).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn concurrent_writers_get_distinct_ids() {
                super::concurrent_writers_get_distinct_ids($open()).await;
            }
        }
    };
}

suite!(memory_backend, super::memory);
#[cfg(feature = "sqlite")]
suite!(sqlite_backend, super::sqlite);
#[cfg(all(feature = "sqlite", feature = "redis"))]
suite!(tiered_backend, super::tiered);
