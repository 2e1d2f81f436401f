//! Secrets in process memory, sealed like the other backends (under a key made on first use
//! that dies with the store), so the memory store exercises the same encryption path.

use std::collections::BTreeMap;
use std::sync::MutexGuard;

use async_trait::async_trait;

use super::MemoryStore;
use crate::secrets::{Sealed, SecretKey, validate_name};
use crate::{Secrets, StoreError, StoreResult};

/// The key (made by the first `secret_set`), the sealed values by name, and how many times
/// they changed (the generation: one store, one process, so a counter is enough).
#[derive(Default)]
pub(super) struct SecretState {
    key: Option<SecretKey>,
    values: BTreeMap<String, Sealed>,
    generation: u64,
}

impl MemoryStore {
    fn secret_state(&self) -> StoreResult<MutexGuard<'_, SecretState>> {
        self.secrets.lock().map_err(|_| {
            StoreError::Backend("memory store: a thread panicked while writing secrets".into())
        })
    }
}

#[async_trait]
impl Secrets for MemoryStore {
    async fn secret_set(&self, name: &str, value: &str) -> StoreResult<()> {
        validate_name(name)?;
        let mut state = self.secret_state()?;
        let sealed = match &state.key {
            Some(key) => key.seal(name, value)?,
            None => {
                let key = SecretKey::generate()?;
                let sealed = key.seal(name, value)?;
                state.key = Some(key);
                sealed
            }
        };
        state.values.insert(name.to_string(), sealed);
        state.generation += 1;
        Ok(())
    }

    async fn secret_get(&self, name: &str) -> StoreResult<Option<String>> {
        validate_name(name)?;
        let state = self.secret_state()?;
        match (&state.key, state.values.get(name)) {
            (Some(key), Some(sealed)) => {
                key.open(name, &sealed.nonce, &sealed.ciphertext).map(Some)
            }
            _ => Ok(None),
        }
    }

    async fn secret_names(&self) -> StoreResult<Vec<String>> {
        // A BTreeMap lists its keys sorted.
        Ok(self.secret_state()?.values.keys().cloned().collect())
    }

    async fn secret_delete(&self, name: &str) -> StoreResult<bool> {
        validate_name(name)?;
        let mut state = self.secret_state()?;
        let removed = state.values.remove(name).is_some();
        if removed {
            state.generation += 1;
        }
        Ok(removed)
    }

    async fn secret_generation(&self) -> StoreResult<u64> {
        Ok(self.secret_state()?.generation)
    }
}
