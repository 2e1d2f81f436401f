//! Secrets (DESIGN §3 item 17): named values such as API tokens, kept encrypted at rest.
//!
//! Every value is sealed with XChaCha20-Poly1305 under a [`SecretKey`] that lives in a key file
//! of its own (mode 0600), never in the store: a copy of the store alone reveals nothing. Each
//! value gets a fresh random 24-byte nonce, and the secret's name is the associated data, so a
//! ciphertext moved to another name fails to decrypt instead of answering for it.
//!
//! Nothing here derives `Debug` on a type that holds a key or a plaintext, so neither can reach
//! a log by accident.

use std::io::Write;
use std::path::{Path, PathBuf};

use async_trait::async_trait;
use chacha20poly1305::aead::{Aead, Generate, Key, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use tokio::sync::OnceCell;

use crate::{StoreError, StoreResult};

/// Bytes in a key file.
pub const KEY_LEN: usize = 32;

/// Bytes in a nonce (XChaCha20: long enough that random nonces never collide in practice).
pub const NONCE_LEN: usize = 24;

/// The longest secret name.
const MAX_NAME_LEN: usize = 128;

/// Named secrets, encrypted at rest.
#[async_trait]
pub trait Secrets: Send + Sync {
    /// Store `value` under `name`, replacing any earlier value.
    async fn secret_set(&self, name: &str, value: &str) -> StoreResult<()>;
    /// The value of `name`, or `None` when there is none.
    async fn secret_get(&self, name: &str) -> StoreResult<Option<String>>;
    /// Every stored name, sorted.
    async fn secret_names(&self) -> StoreResult<Vec<String>>;
    /// Forget `name`; whether there was a value to forget.
    async fn secret_delete(&self, name: &str) -> StoreResult<bool>;
    /// A token that changes whenever a secret is stored or removed, through this handle or any
    /// other on the same store (another process included). Compare it for equality only: it
    /// tells a reader whether its copy of the values is stale without decrypting them.
    /// A writer changes the token in the transaction that changes the value (or after it), so
    /// a reader that reads the token before the values never keeps old values under a new one.
    async fn secret_generation(&self) -> StoreResult<u64>;
}

/// A random generation token: unlike a counter, it cannot come back to a value a reader
/// remembers after the store was emptied and written again (a Redis `FLUSHDB`).
pub(crate) fn fresh_generation() -> StoreResult<u64> {
    let bytes = XNonce::try_generate().map_err(random_failed)?;
    let mut token = [0u8; 8];
    token.copy_from_slice(&bytes[..8]);
    Ok(u64::from_le_bytes(token))
}

/// Refuse a name that is not 1 to 128 of `A-Z a-z 0-9 _ . -` (UPPER_SNAKE such as
/// `GITHUB_TOKEN` is the usual form). Names appear in `[secret:NAME]` placeholders and in
/// Redis field names, so they are kept to characters that need no escaping anywhere.
pub fn validate_name(name: &str) -> StoreResult<()> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-');
    if !name.is_empty() && name.len() <= MAX_NAME_LEN && name.chars().all(allowed) {
        return Ok(());
    }
    // The name is shown escaped and cut short: a bad "name" may be a pasted value.
    let shown: String = name.chars().take(40).collect();
    Err(StoreError::Backend(format!(
        "invalid secret name {shown:?}: use 1 to {MAX_NAME_LEN} characters of A-Z, a-z, 0-9, \
         '_', '.' or '-', e.g. GITHUB_TOKEN"
    )))
}

/// The key that seals every secret of one store. Deliberately not `Debug` or `Clone`.
pub struct SecretKey {
    cipher: XChaCha20Poly1305,
}

/// A sealed value: the nonce it was sealed with and the ciphertext (with its tag).
pub struct Sealed {
    pub nonce: Vec<u8>,
    pub ciphertext: Vec<u8>,
}

impl SecretKey {
    /// A fresh random key that lives only in memory.
    pub fn generate() -> StoreResult<SecretKey> {
        let key = Key::<XChaCha20Poly1305>::try_generate().map_err(random_failed)?;
        Ok(SecretKey {
            cipher: XChaCha20Poly1305::new(&key),
        })
    }

    /// The key in the key file at `path`, created (with 32 random bytes, mode 0600) when the
    /// file does not exist. An existing file that group or others may read is refused rather
    /// than used: the key would already be exposed to them.
    pub fn load_or_create(path: &Path) -> StoreResult<SecretKey> {
        match std::fs::metadata(path) {
            Ok(_) => SecretKey::load(path),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                match SecretKey::create(path) {
                    Ok(key) => Ok(key),
                    // Another process created it first: use theirs.
                    Err(CreateError::Exists) => SecretKey::load(path),
                    Err(CreateError::Failed(e)) => Err(e),
                }
            }
            Err(e) => Err(key_error(path, &e)),
        }
    }

    fn load(path: &Path) -> StoreResult<SecretKey> {
        check_private(path)?;
        let bytes = std::fs::read(path).map_err(|e| key_error(path, &e))?;
        let key = Key::<XChaCha20Poly1305>::try_from(bytes.as_slice()).map_err(|_| {
            StoreError::Corrupt(format!(
                "secret key file {} holds {} bytes, not {KEY_LEN}: restore it from a backup \
                 (secrets sealed with the lost key cannot be recovered)",
                path.display(),
                bytes.len()
            ))
        })?;
        Ok(SecretKey {
            cipher: XChaCha20Poly1305::new(&key),
        })
    }

    /// Write a new key to a private temporary file, then link it into place: the key file
    /// appears complete or not at all, and a link never replaces a file another process made.
    fn create(path: &Path) -> Result<SecretKey, CreateError> {
        let fail = |e: &std::io::Error| CreateError::Failed(key_error(path, e));
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(|e| fail(&e))?;
        }
        let key = Key::<XChaCha20Poly1305>::try_generate()
            .map_err(|e| CreateError::Failed(random_failed(e)))?;
        let mut tmp_name = path.as_os_str().to_owned();
        tmp_name.push(format!(".tmp-{}", std::process::id()));
        let tmp = Path::new(&tmp_name);
        let written =
            write_private(tmp, key.as_slice()).and_then(|()| std::fs::hard_link(tmp, path));
        // The temporary name goes whatever happened; a failure to remove it only leaves litter.
        let _ = std::fs::remove_file(tmp);
        match written {
            Ok(()) => Ok(SecretKey {
                cipher: XChaCha20Poly1305::new(&key),
            }),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Err(CreateError::Exists),
            Err(e) => Err(fail(&e)),
        }
    }

    /// Seal `value` for `name` under a fresh nonce.
    pub fn seal(&self, name: &str, value: &str) -> StoreResult<Sealed> {
        let nonce = XNonce::try_generate().map_err(random_failed)?;
        let payload = Payload {
            msg: value.as_bytes(),
            aad: name.as_bytes(),
        };
        let ciphertext = self
            .cipher
            .encrypt(&nonce, payload)
            .map_err(|_| StoreError::Backend(format!("cannot encrypt secret {name}")))?;
        Ok(Sealed {
            nonce: nonce.to_vec(),
            ciphertext,
        })
    }

    /// The value sealed for `name`. Fails (never returns garbage) when the key differs, the
    /// bytes were altered, or they were sealed for another name.
    pub fn open(&self, name: &str, nonce: &[u8], ciphertext: &[u8]) -> StoreResult<String> {
        let undecryptable = || {
            StoreError::Corrupt(format!(
                "secret {name} cannot be decrypted: it was stored with a different key file, \
                 altered, or copied from another name; set it again"
            ))
        };
        let nonce = XNonce::try_from(nonce).map_err(|_| undecryptable())?;
        let payload = Payload {
            msg: ciphertext,
            aad: name.as_bytes(),
        };
        let plain = self
            .cipher
            .decrypt(&nonce, payload)
            .map_err(|_| undecryptable())?;
        String::from_utf8(plain).map_err(|_| undecryptable())
    }

    /// `nonce ‖ ciphertext` as one byte string (for stores with one value per field).
    pub fn seal_joined(&self, name: &str, value: &str) -> StoreResult<Vec<u8>> {
        let Sealed {
            mut nonce,
            ciphertext,
        } = self.seal(name, value)?;
        nonce.extend_from_slice(&ciphertext);
        Ok(nonce)
    }

    /// The value of a [`SecretKey::seal_joined`] byte string.
    pub fn open_joined(&self, name: &str, joined: &[u8]) -> StoreResult<String> {
        // A short string splits at its end and then fails authentication like any other.
        let (nonce, ciphertext) = joined.split_at(joined.len().min(NONCE_LEN));
        self.open(name, nonce, ciphertext)
    }
}

/// A key file and its key, loaded (or created) on first use rather than when the store opens:
/// a store that never touches secrets never makes a key file.
pub(crate) struct KeyFile {
    path: PathBuf,
    /// Left unset while the file is missing or refused, so fixing it needs no reopen.
    key: OnceCell<SecretKey>,
}

impl KeyFile {
    pub(crate) fn new(path: PathBuf) -> KeyFile {
        KeyFile {
            path,
            key: OnceCell::new(),
        }
    }

    /// `<store file>.key`, beside the store file.
    pub(crate) fn beside(store: &Path) -> KeyFile {
        let mut path = store.as_os_str().to_owned();
        path.push(".key");
        KeyFile::new(PathBuf::from(path))
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// The key. The file is read in place, blocking: it is 32 bytes, read once per store.
    pub(crate) async fn key(&self) -> StoreResult<&SecretKey> {
        self.key
            .get_or_try_init(|| async { SecretKey::load_or_create(&self.path) })
            .await
    }
}

enum CreateError {
    /// The key file exists already.
    Exists,
    Failed(StoreError),
}

fn random_failed(e: impl std::fmt::Display) -> StoreError {
    StoreError::Backend(format!("the system random number generator failed: {e}"))
}

fn key_error(path: &Path, e: &std::io::Error) -> StoreError {
    StoreError::Backend(format!("secret key file {}: {e}", path.display()))
}

/// Create `path` only if it does not exist (O_EXCL), readable by its owner alone from the
/// first byte on: a chmod after creation would leave a window where others could open it.
fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options.open(path)?;
    file.write_all(bytes)?;
    file.sync_all()
}

/// Refuse a key file that group or others may access.
#[cfg(unix)]
fn check_private(path: &Path) -> StoreResult<()> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(path)
        .map_err(|e| key_error(path, &e))?
        .permissions()
        .mode();
    if mode & 0o077 != 0 {
        return Err(StoreError::Backend(format!(
            "secret key file {path} has mode {mode:03o}: group or others can access it, so it is \
             not used; fix it with: chmod 600 {path}",
            path = path.display(),
            mode = mode & 0o777,
        )));
    }
    Ok(())
}

/// Windows has no mode bits; the file inherits its directory's ACL.
#[cfg(not(unix))]
fn check_private(_path: &Path) -> StoreResult<()> {
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_of_letters_digits_and_underscore_dot_dash_are_valid() {
        for name in ["GITHUB_TOKEN", "a", "api.key-2", &"X".repeat(128)] {
            assert!(validate_name(name).is_ok(), "{name}");
        }
    }

    #[test]
    fn other_names_are_refused_with_the_rule() {
        for name in ["", "has space", "a/b", "é", "a:b", &"X".repeat(129)] {
            let err = validate_name(name).unwrap_err().to_string();
            assert!(err.contains("invalid secret name"), "{err}");
            assert!(err.contains("GITHUB_TOKEN"), "{err}");
        }
    }

    #[test]
    fn a_value_opens_only_under_its_own_name_and_key() {
        let key = SecretKey::generate().unwrap();
        let sealed = key.seal("A", "hunter2").unwrap();
        assert_eq!(sealed.nonce.len(), NONCE_LEN);
        assert_eq!(
            key.open("A", &sealed.nonce, &sealed.ciphertext).unwrap(),
            "hunter2"
        );
        assert!(matches!(
            key.open("B", &sealed.nonce, &sealed.ciphertext),
            Err(StoreError::Corrupt(_))
        ));
        let other = SecretKey::generate().unwrap();
        assert!(matches!(
            other.open("A", &sealed.nonce, &sealed.ciphertext),
            Err(StoreError::Corrupt(_))
        ));
        let joined = key.seal_joined("A", "v").unwrap();
        assert_eq!(key.open_joined("A", &joined).unwrap(), "v");
        assert!(key.open_joined("A", &joined[..10]).is_err());
    }

    #[test]
    fn sealing_twice_uses_fresh_nonces() {
        let key = SecretKey::generate().unwrap();
        let a = key.seal("A", "same").unwrap();
        let b = key.seal("A", "same").unwrap();
        assert_ne!(a.nonce, b.nonce);
        assert_ne!(a.ciphertext, b.ciphertext);
    }

    #[cfg(unix)]
    #[test]
    fn a_new_key_file_is_0600_and_is_loaded_again() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::TempDir::new().unwrap();
        let path = dir.path().join("sub").join("store.key");
        let first = SecretKey::load_or_create(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(std::fs::read(&path).unwrap().len(), KEY_LEN);
        let sealed = first.seal("A", "v").unwrap();
        let again = SecretKey::load_or_create(&path).unwrap();
        assert_eq!(
            again.open("A", &sealed.nonce, &sealed.ciphertext).unwrap(),
            "v"
        );
        // Nothing but the key file is left behind.
        assert_eq!(
            std::fs::read_dir(path.parent().unwrap()).unwrap().count(),
            1
        );
    }

    #[cfg(unix)]
    #[test]
    fn a_key_file_others_can_read_is_refused_with_the_fix() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::TempDir::new().unwrap();
        let path = dir.path().join("store.key");
        SecretKey::load_or_create(&path).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
        let err = SecretKey::load_or_create(&path).err().unwrap().to_string();
        assert!(
            err.contains(&format!("chmod 600 {}", path.display())),
            "{err}"
        );
    }

    #[test]
    fn a_key_file_of_the_wrong_length_is_refused() {
        let dir = tempfile::TempDir::new().unwrap();
        let path = dir.path().join("store.key");
        write_private(&path, b"short").unwrap();
        assert!(matches!(
            SecretKey::load_or_create(&path),
            Err(StoreError::Corrupt(_))
        ));
    }
}
