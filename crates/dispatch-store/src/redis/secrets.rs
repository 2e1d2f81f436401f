//! Secrets in Redis: one hash field per name holding hex of `nonce ‖ ciphertext`. The key
//! stays in a local file (see "Secrets" in redis/mod.rs): Redis alone reveals no value.

use std::path::PathBuf;

use async_trait::async_trait;

use super::{RedisStore, backend};
use crate::secrets::{fresh_generation, validate_name};
use crate::{Secrets, StoreError, StoreResult};

/// `$XDG_DATA_HOME/tooldispatch/redis.key`, else `~/.local/share/tooldispatch/redis.key`;
/// relative to the working directory when neither variable is set (a bare service account).
pub(super) fn default_key_path() -> PathBuf {
    // The XDG spec says to ignore a relative XDG_DATA_HOME.
    let data_home = std::env::var_os("XDG_DATA_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|h| !h.is_empty())
                .map(|home| PathBuf::from(home).join(".local").join("share"))
        })
        .unwrap_or_default();
    data_home.join("tooldispatch").join("redis.key")
}

fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn from_hex(text: &str, name: &str) -> StoreResult<Vec<u8>> {
    let corrupt = || StoreError::Corrupt(format!("redis: secret {name} is not hex"));
    if !text.len().is_multiple_of(2) {
        return Err(corrupt());
    }
    (0..text.len())
        .step_by(2)
        .map(|i| {
            text.get(i..i + 2)
                .and_then(|pair| u8::from_str_radix(pair, 16).ok())
                .ok_or_else(corrupt)
        })
        .collect()
}

impl RedisStore {
    /// The key file the secrets are sealed with.
    pub fn secret_key_file(&self) -> &std::path::Path {
        self.secrets.path()
    }
}

#[async_trait]
impl Secrets for RedisStore {
    async fn secret_set(&self, name: &str, value: &str) -> StoreResult<()> {
        validate_name(name)?;
        let sealed = to_hex(&self.secrets.key().await?.seal_joined(name, value)?);
        let generation = fresh_generation()?;
        let mut conn = self.connection().await?;
        // One MULTI/EXEC: a reader sees the new value and the new generation together.
        ::redis::pipe()
            .atomic()
            .cmd("HSET")
            .arg(self.keys.secrets())
            .arg(name)
            .arg(sealed)
            .ignore()
            .cmd("SET")
            .arg(self.keys.secrets_generation())
            .arg(generation)
            .ignore()
            .query_async::<()>(&mut conn)
            .await
            .map_err(backend(format!("store secret {name}")))?;
        Ok(())
    }

    async fn secret_get(&self, name: &str) -> StoreResult<Option<String>> {
        validate_name(name)?;
        let mut conn = self.connection().await?;
        let sealed: Option<String> = ::redis::cmd("HGET")
            .arg(self.keys.secrets())
            .arg(name)
            .query_async(&mut conn)
            .await
            .map_err(backend(format!("read secret {name}")))?;
        let Some(sealed) = sealed else {
            return Ok(None);
        };
        let joined = from_hex(&sealed, name)?;
        self.secrets
            .key()
            .await?
            .open_joined(name, &joined)
            .map(Some)
    }

    async fn secret_names(&self) -> StoreResult<Vec<String>> {
        let mut conn = self.connection().await?;
        let mut names: Vec<String> = ::redis::cmd("HKEYS")
            .arg(self.keys.secrets())
            .query_async(&mut conn)
            .await
            .map_err(backend("list secrets"))?;
        names.sort();
        Ok(names)
    }

    async fn secret_delete(&self, name: &str) -> StoreResult<bool> {
        validate_name(name)?;
        let generation = fresh_generation()?;
        let mut conn = self.connection().await?;
        // A new generation even when nothing was there: a spare reload costs less than a
        // second round trip to ask first.
        let (deleted,): (i64,) = ::redis::pipe()
            .atomic()
            .cmd("HDEL")
            .arg(self.keys.secrets())
            .arg(name)
            .cmd("SET")
            .arg(self.keys.secrets_generation())
            .arg(generation)
            .ignore()
            .query_async(&mut conn)
            .await
            .map_err(backend(format!("delete secret {name}")))?;
        Ok(deleted > 0)
    }

    async fn secret_generation(&self) -> StoreResult<u64> {
        let mut conn = self.connection().await?;
        // No key yet (no secret stored since this version, or ever) reads as 0.
        let generation: Option<u64> = ::redis::cmd("GET")
            .arg(self.keys.secrets_generation())
            .query_async(&mut conn)
            .await
            .map_err(backend("read the secrets generation"))?;
        Ok(generation.unwrap_or(0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trips_and_rejects_junk() {
        let bytes = [0u8, 1, 0xab, 0xff];
        assert_eq!(to_hex(&bytes), "0001abff");
        assert_eq!(from_hex("0001abff", "A").unwrap(), bytes);
        assert!(from_hex("abc", "A").is_err());
        assert!(from_hex("zz", "A").is_err());
        assert!(from_hex("é0", "A").is_err());
    }

    /// Two processes on one Redis: the same key file reads the other's secrets, another key
    /// file gets an error, and Redis holds no plaintext.
    #[tokio::test]
    async fn machines_sharing_redis_need_the_same_key_file() {
        use std::sync::Arc;

        use crate::redis::testing;
        if testing::unavailable() {
            return;
        }
        let dir = tempfile::TempDir::new().unwrap();
        let shared_key = dir.path().join("shared.key");
        let prefix = testing::unique_prefix();
        let sweeper = testing::KeySweeper::for_prefix(prefix.clone());
        let open = |key: &std::path::Path| {
            RedisStore::lazy(testing::URL, &prefix, Arc::new(crate::SystemClock))
                .unwrap()
                .with_secret_key_file(key)
        };
        let writer = open(&shared_key);
        writer.secret_set("TOKEN", "plain-value").await.unwrap();
        let reader = open(&shared_key);
        assert_eq!(
            reader.secret_get("TOKEN").await.unwrap().as_deref(),
            Some("plain-value")
        );
        let stranger = open(&dir.path().join("other.key"));
        let err = stranger.secret_get("TOKEN").await.unwrap_err();
        assert!(matches!(err, StoreError::Corrupt(_)), "{err}");

        let mut conn = writer.connection().await.unwrap();
        let raw: String = ::redis::cmd("HGET")
            .arg(writer.keys.secrets())
            .arg("TOKEN")
            .query_async(&mut conn)
            .await
            .unwrap();
        assert!(!raw.contains("plain-value"));
        assert!(!raw.contains(&to_hex(b"plain-value")));
        drop((writer, reader, stranger));
        drop(sweeper);
    }
}
