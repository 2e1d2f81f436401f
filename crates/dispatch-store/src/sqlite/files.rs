//! File history in SQLite: one row per version, content as a BLOB (capped).

use async_trait::async_trait;
use rusqlite::{OptionalExtension, Row, params, params_from_iter};

use super::{JobError, SqliteStore, to_i64};
use crate::StoreResult;
use crate::file_history::{FileAction, FileHistory, FileVersion, NewFileVersion, VersionQuery};

const COLUMNS: &str =
    "id, path, action, content, truncated, hash, size, trash_path, session, run, tool, changed_ms";

fn read_row(row: &Row<'_>) -> rusqlite::Result<FileVersion> {
    let action: String = row.get(2)?;
    Ok(FileVersion {
        id: row.get::<_, i64>(0)?.max(0) as u64,
        path: row.get(1)?,
        // An unknown action can only come from a newer binary; read it as a modification.
        action: FileAction::parse(&action).unwrap_or(FileAction::Modify),
        content: row.get(3)?,
        truncated: row.get(4)?,
        hash: row.get(5)?,
        size: row.get::<_, i64>(6)?.max(0) as u64,
        trash_path: row.get(7)?,
        session: row.get(8)?,
        run: row.get(9)?,
        tool: row.get(10)?,
        changed_ms: row.get::<_, i64>(11)?.max(0) as u64,
    })
}

#[async_trait]
impl FileHistory for SqliteStore {
    async fn record_version(&self, version: NewFileVersion) -> StoreResult<u64> {
        let v = FileVersion::from_new(0, version, self.clock.now_ms());
        self.run(format!("record a version of {}", v.path), move |conn| {
            conn.prepare_cached(
                "INSERT INTO file_history (path, action, content, truncated, hash, size,
                     trash_path, session, run, tool, changed_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
            )?
            .execute(params![
                v.path,
                v.action.as_str(),
                v.content,
                v.truncated,
                v.hash,
                to_i64(v.size, "file size")?,
                v.trash_path,
                v.session,
                v.run,
                v.tool,
                to_i64(v.changed_ms, "time")?,
            ])?;
            Ok(conn.last_insert_rowid().max(0) as u64)
        })
        .await
    }

    async fn version(&self, id: u64) -> StoreResult<Option<FileVersion>> {
        self.run(format!("read file version {id}"), move |conn| {
            let id = to_i64(id, "version")?;
            Ok(conn
                .prepare_cached(&format!("SELECT {COLUMNS} FROM file_history WHERE id = ?1"))?
                .query_row(params![id], read_row)
                .optional()?)
        })
        .await
    }

    async fn versions(&self, query: &VersionQuery) -> StoreResult<Vec<FileVersion>> {
        let query = query.clone();
        self.run("list file versions".to_string(), move |conn| {
            let mut sql = format!("SELECT {COLUMNS} FROM file_history WHERE 1 = 1");
            let mut values: Vec<rusqlite::types::Value> = Vec::new();
            if !query.paths.is_empty() {
                let marks = vec!["?"; query.paths.len()].join(", ");
                sql.push_str(&format!(" AND path IN ({marks})"));
                values.extend(query.paths.iter().cloned().map(Into::into));
            }
            if let Some(session) = &query.session {
                sql.push_str(" AND session = ?");
                values.push(session.clone().into());
            }
            if let Some(run) = &query.run {
                sql.push_str(" AND run = ?");
                values.push(run.clone().into());
            }
            if let Some(from) = query.from_ms {
                sql.push_str(" AND changed_ms >= ?");
                values.push(to_i64(from, "time")?.into());
            }
            if let Some(to) = query.to_ms {
                sql.push_str(" AND changed_ms <= ?");
                values.push(to_i64(to, "time")?.into());
            }
            sql.push_str(" ORDER BY id DESC");
            if query.limit > 0 {
                sql.push_str(&format!(" LIMIT {}", query.limit));
            }
            let mut stmt = conn.prepare(&sql)?;
            let rows = stmt
                .query_map(params_from_iter(values), read_row)?
                .collect::<Result<Vec<_>, _>>()
                .map_err(JobError::from)?;
            Ok(rows)
        })
        .await
    }
}
