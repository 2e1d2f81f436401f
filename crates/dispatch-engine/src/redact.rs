//! Secret redaction (DESIGN §3.17): a stored secret's value never reaches a result, an event,
//! the transcript, the dedupe map or the cache; it reads `[secret:NAME]` instead.

use std::borrow::Cow;

use async_trait::async_trait;

/// Where the engine learns the secret values to hide (the store's secrets).
#[async_trait]
pub trait SecretValues: Send + Sync {
    /// Every stored secret as `(name, value)`.
    async fn secret_values(&self) -> Result<Vec<(String, String)>, String>;
}

/// The store's secrets as a source of values to redact.
pub struct StoredSecrets(pub std::sync::Arc<dyn dispatch_store::Secrets>);

#[async_trait]
impl SecretValues for StoredSecrets {
    async fn secret_values(&self) -> Result<Vec<(String, String)>, String> {
        let names = self.0.secret_names().await.map_err(|e| e.to_string())?;
        let mut values = Vec::with_capacity(names.len());
        for name in names {
            if let Some(value) = self.0.secret_get(&name).await.map_err(|e| e.to_string())? {
                values.push((name, value));
            }
        }
        Ok(values)
    }
}

/// Values shorter than this are not scanned for: they would match ordinary text everywhere.
pub const MIN_SECRET_LEN: usize = 4;

/// Replaces secret values in text. Empty (no secrets) costs nothing.
#[derive(Clone, Default)]
pub struct Redactor {
    /// Longest value first, so a secret that contains another is replaced whole.
    secrets: Vec<(String, String)>,
}

impl std::fmt::Debug for Redactor {
    // Never print the values.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Redactor")
            .field("secrets", &self.secrets.len())
            .finish()
    }
}

impl Redactor {
    pub fn new(secrets: Vec<(String, String)>) -> Self {
        let mut secrets: Vec<(String, String)> = secrets
            .into_iter()
            .filter(|(_, value)| value.len() >= MIN_SECRET_LEN)
            .collect();
        secrets.sort_by_key(|(_, value)| std::cmp::Reverse(value.len()));
        Redactor { secrets }
    }

    pub fn is_empty(&self) -> bool {
        self.secrets.is_empty()
    }

    /// `text` with every secret value replaced by `[secret:NAME]`.
    pub fn redact<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let mut out: Cow<'a, str> = Cow::Borrowed(text);
        for (name, value) in &self.secrets {
            if out.contains(value.as_str()) {
                out = Cow::Owned(out.replace(value.as_str(), &format!("[secret:{name}]")));
            }
        }
        out
    }

    /// Redact a string in place.
    pub fn redact_in_place(&self, text: &mut String) {
        if let Cow::Owned(clean) = self.redact(text) {
            *text = clean;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_become_their_names_longest_first() {
        let r = Redactor::new(vec![
            ("SHORT".into(), "abc".into()),
            ("TOKEN".into(), "sk-12345".into()),
            ("LONGER".into(), "sk-12345-extra".into()),
        ]);
        assert_eq!(
            r.redact("a sk-12345-extra b sk-12345 c abc"),
            "a [secret:LONGER] b [secret:TOKEN] c abc"
        );
        assert!(matches!(r.redact("nothing here"), Cow::Borrowed(_)));
        assert_eq!(format!("{r:?}"), "Redactor { secrets: 2 }");
    }
}
