//! Secrets in SQLite: one row per name holding the nonce and the ciphertext; the key lives in
//! `<store file>.key` beside the store, so the database file alone reveals no value.

use async_trait::async_trait;
use rusqlite::{OptionalExtension, params};

use super::{SqliteStore, to_i64};
use crate::secrets::{Sealed, validate_name};
use crate::{Secrets, StoreResult};

pub(super) use crate::secrets::KeyFile as SecretKeyFile;

#[async_trait]
impl Secrets for SqliteStore {
    async fn secret_set(&self, name: &str, value: &str) -> StoreResult<()> {
        validate_name(name)?;
        // Sealed here, not on the connection thread: the plaintext never enters a job.
        let Sealed { nonce, ciphertext } = self.secrets.key().await?.seal(name, value)?;
        let now = self.clock.now_ms();
        let name = name.to_string();
        self.run(format!("store secret {name}"), move |conn| {
            conn.prepare_cached(
                "INSERT INTO secrets (name, nonce, ciphertext, updated_ms) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (name) DO UPDATE SET nonce = ?2, ciphertext = ?3, updated_ms = ?4",
            )?
            .execute(params![name, nonce, ciphertext, to_i64(now, "time")?])?;
            Ok(())
        })
        .await
    }

    async fn secret_get(&self, name: &str) -> StoreResult<Option<String>> {
        validate_name(name)?;
        let owned = name.to_string();
        let row: Option<(Vec<u8>, Vec<u8>)> = self
            .read(format!("read secret {name}"), move |conn| {
                Ok(conn
                    .prepare_cached("SELECT nonce, ciphertext FROM secrets WHERE name = ?1")?
                    .query_row(params![owned], |row| Ok((row.get(0)?, row.get(1)?)))
                    .optional()?)
            })
            .await?;
        match row {
            Some((nonce, ciphertext)) => {
                let key = self.secrets.key().await?;
                key.open(name, &nonce, &ciphertext).map(Some)
            }
            None => Ok(None),
        }
    }

    async fn secret_names(&self) -> StoreResult<Vec<String>> {
        self.read("list secrets".to_string(), |conn| {
            let mut stmt = conn.prepare_cached("SELECT name FROM secrets ORDER BY name")?;
            let names = stmt
                .query_map([], |row| row.get::<_, String>(0))?
                .collect::<Result<Vec<_>, _>>()?;
            Ok(names)
        })
        .await
    }

    async fn secret_delete(&self, name: &str) -> StoreResult<bool> {
        validate_name(name)?;
        let owned = name.to_string();
        self.run(format!("delete secret {name}"), move |conn| {
            let deleted = conn
                .prepare_cached("DELETE FROM secrets WHERE name = ?1")?
                .execute(params![owned])?;
            Ok(deleted > 0)
        })
        .await
    }

    async fn secret_generation(&self) -> StoreResult<u64> {
        let generation: i64 = self
            .read("read the secrets generation".to_string(), |conn| {
                Ok(conn
                    .prepare_cached("SELECT generation FROM secrets_generation WHERE id = 1")?
                    .query_row([], |row| row.get(0))?)
            })
            .await?;
        // A counter from 0 upwards; the cast only reinterprets a value SQLite never makes.
        Ok(generation.cast_unsigned())
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use pretty_assertions::assert_eq;
    use rusqlite::Connection;
    use tempfile::TempDir;

    use crate::sqlite::SqliteStore;
    use crate::{Secrets, StoreError};

    const VALUE: &str = "sk-live-plaintext-that-must-not-leak";

    fn contains(haystack: &[u8], needle: &[u8]) -> bool {
        haystack.windows(needle.len()).any(|w| w == needle)
    }

    /// Every byte SQLite wrote for the store (the file, and its WAL if one is left).
    fn raw_bytes(db: &Path) -> Vec<u8> {
        let mut bytes = std::fs::read(db).unwrap();
        let mut wal = db.as_os_str().to_owned();
        wal.push("-wal");
        if let Ok(more) = std::fs::read(&wal) {
            bytes.extend(more);
        }
        bytes
    }

    #[tokio::test]
    async fn values_are_not_stored_in_plaintext() {
        let dir = TempDir::new().unwrap();
        let db = dir.path().join("store.db");
        let store = SqliteStore::open(&db).unwrap();
        store.secret_set("TOKEN", VALUE).await.unwrap();
        let conn = Connection::open(&db).unwrap();
        let (nonce, ciphertext): (Vec<u8>, Vec<u8>) = conn
            .query_row(
                "SELECT nonce, ciphertext FROM secrets WHERE name = 'TOKEN'",
                [],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
            .unwrap();
        assert_eq!(nonce.len(), crate::secrets::NONCE_LEN);
        assert!(!contains(&ciphertext, VALUE.as_bytes()));
        drop(conn);
        assert!(!contains(&raw_bytes(&db), VALUE.as_bytes()));
        drop(store);
        assert!(!contains(&raw_bytes(&db), VALUE.as_bytes()));
        assert_eq!(
            std::fs::read(dir.path().join("store.db.key"))
                .unwrap()
                .len(),
            crate::secrets::KEY_LEN
        );
    }

    #[cfg(unix)]
    #[tokio::test]
    async fn the_key_file_beside_the_store_is_0600_and_made_on_first_use() {
        use std::os::unix::fs::PermissionsExt;
        let dir = TempDir::new().unwrap();
        let store = SqliteStore::open(&dir.path().join("store.db")).unwrap();
        let key = dir.path().join("store.db.key");
        assert!(!key.exists(), "no key file before a secret is used");
        store.secret_set("TOKEN", VALUE).await.unwrap();
        let mode = std::fs::metadata(&key).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[tokio::test]
    async fn a_ciphertext_copied_to_another_name_does_not_decrypt() {
        let dir = TempDir::new().unwrap();
        let db = dir.path().join("store.db");
        let store = SqliteStore::open(&db).unwrap();
        store.secret_set("REAL", VALUE).await.unwrap();
        Connection::open(&db)
            .unwrap()
            .execute(
                "INSERT INTO secrets (name, nonce, ciphertext, updated_ms)
                 SELECT 'STOLEN', nonce, ciphertext, updated_ms FROM secrets WHERE name = 'REAL'",
                [],
            )
            .unwrap();
        let err = store.secret_get("STOLEN").await.unwrap_err();
        assert!(matches!(err, StoreError::Corrupt(_)), "{err}");
        assert!(!err.to_string().contains(VALUE));
        assert_eq!(
            store.secret_get("REAL").await.unwrap().as_deref(),
            Some(VALUE)
        );
    }

    #[cfg(unix)]
    #[tokio::test]
    async fn a_group_readable_key_file_is_refused_with_the_chmod_fix() {
        use std::os::unix::fs::PermissionsExt;
        let dir = TempDir::new().unwrap();
        let db = dir.path().join("store.db");
        let key = dir.path().join("store.db.key");
        drop({
            let store = SqliteStore::open(&db).unwrap();
            store.secret_set("TOKEN", VALUE).await.unwrap();
            store
        });
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o640)).unwrap();
        let store = SqliteStore::open(&db).unwrap();
        let err = store.secret_get("TOKEN").await.unwrap_err().to_string();
        assert!(
            err.contains(&format!("chmod 600 {}", key.display())),
            "{err}"
        );
        // Fixed as told, the same store reads the value without being reopened.
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(
            store.secret_get("TOKEN").await.unwrap().as_deref(),
            Some(VALUE)
        );
    }

    #[tokio::test]
    async fn values_survive_reopening_with_the_same_key_file_only() {
        let dir = TempDir::new().unwrap();
        let db = dir.path().join("store.db");
        let key = dir.path().join("store.db.key");
        drop({
            let store = SqliteStore::open(&db).unwrap();
            store.secret_set("TOKEN", VALUE).await.unwrap();
            store
        });
        {
            let store = SqliteStore::open(&db).unwrap();
            assert_eq!(
                store.secret_get("TOKEN").await.unwrap().as_deref(),
                Some(VALUE)
            );
        }
        // Another key (the old one lost): a clear error, never a wrong value.
        std::fs::remove_file(&key).unwrap();
        let store = SqliteStore::open(&db).unwrap();
        store.secret_set("NEW", "fresh").await.unwrap();
        let err = store.secret_get("TOKEN").await.unwrap_err();
        assert!(matches!(err, StoreError::Corrupt(_)), "{err}");
        assert!(err.to_string().contains("different key file"), "{err}");
        assert_eq!(
            store.secret_get("NEW").await.unwrap().as_deref(),
            Some("fresh")
        );
        assert_eq!(store.secret_names().await.unwrap(), vec!["NEW", "TOKEN"]);
    }
}
