//! Secret redaction (DESIGN §3.17): a stored secret's value never reaches a result, an event,
//! the transcript, the dedupe map or the cache; it reads `[secret:NAME]` instead.

use std::borrow::Cow;
use std::sync::{Arc, PoisonError, RwLock};

use dispatch_store::{Secrets, StoreResult};

use crate::ToolError;

/// Values shorter than this are not scanned for: they would match ordinary text everywhere.
pub const MIN_SECRET_LEN: usize = 4;

/// Replaces secret values in text. Empty (no secrets) costs nothing. Clones share one list, so
/// a secret stored during a round (store_secret) is hidden from then on by every clone.
#[derive(Clone, Default)]
pub struct Redactor {
    /// Longest value first, so a secret that contains another is replaced whole.
    secrets: Arc<RwLock<Vec<(String, String)>>>,
}

impl std::fmt::Debug for Redactor {
    // Never print the values.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Redactor")
            .field("secrets", &self.read().len())
            .finish()
    }
}

impl Redactor {
    pub fn new(secrets: Vec<(String, String)>) -> Self {
        let redactor = Redactor::default();
        for (name, value) in secrets {
            redactor.add(name, value);
        }
        redactor
    }

    /// A redactor for every secret the store holds.
    pub async fn load(store: &dyn Secrets) -> StoreResult<Self> {
        let redactor = Redactor::default();
        for name in store.secret_names().await? {
            if let Some(value) = store.secret_get(&name).await? {
                redactor.add(name, value);
            }
        }
        Ok(redactor)
    }

    /// Hide `value` as `[secret:NAME]` from now on, also in the encodings a server may echo
    /// it back in (hex, base64, URL- and JSON-escaped).
    pub fn add(&self, name: String, value: String) {
        if value.len() < MIN_SECRET_LEN {
            return;
        }
        let mut secrets = self.secrets.write().unwrap_or_else(PoisonError::into_inner);
        secrets.retain(|(n, _)| *n != name);
        for form in encodings(&value) {
            let at = secrets.partition_point(|(_, v)| v.len() >= form.len());
            secrets.insert(at, (name.clone(), form));
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Vec<(String, String)>> {
        self.secrets.read().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn is_empty(&self) -> bool {
        self.read().is_empty()
    }

    /// `text` with every secret value replaced by `[secret:NAME]`.
    pub fn redact<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let mut out: Cow<'a, str> = Cow::Borrowed(text);
        for (name, value) in self.read().iter() {
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

/// `value` and the forms it takes when something encodes it, each once.
fn encodings(value: &str) -> Vec<String> {
    use base64::Engine as _;
    let bytes = value.as_bytes();
    let hex: Vec<String> = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let url_escaped: String = bytes
        .iter()
        .map(|&b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect();
    let json_escaped = serde_json::to_string(value).unwrap_or_default();
    let mut forms = vec![
        value.to_string(),
        hex.concat(),
        hex.join(" "),
        base64::engine::general_purpose::STANDARD_NO_PAD.encode(bytes),
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes),
        url_escaped,
        json_escaped
            .get(1..json_escaped.len().saturating_sub(1))
            .unwrap_or_default()
            .to_string(),
    ];
    forms.retain(|f| f.len() >= MIN_SECRET_LEN);
    forms.sort();
    forms.dedup();
    forms
}

/// The store's secrets as a tool sees them: read one, expand `{{secret:NAME}}`, or store one
/// so that the rest of the round already hides its value.
#[derive(Clone)]
pub struct ToolSecrets {
    store: Arc<dyn Secrets>,
    redactor: Redactor,
}

/// How a secret is referenced in arguments that accept one: `{{secret:NAME}}`.
const PLACEHOLDER_OPEN: &str = "{{secret:";

impl ToolSecrets {
    pub fn new(store: Arc<dyn Secrets>, redactor: Redactor) -> Self {
        ToolSecrets { store, redactor }
    }

    pub async fn get(&self, name: &str) -> StoreResult<Option<String>> {
        self.store.secret_get(name).await
    }

    /// Store `value` under `name`; results and events of this round already hide it.
    pub async fn set(&self, name: &str, value: &str) -> StoreResult<()> {
        self.store.secret_set(name, value).await?;
        self.redactor.add(name.to_string(), value.to_string());
        Ok(())
    }

    pub async fn names(&self) -> StoreResult<Vec<String>> {
        self.store.secret_names().await
    }

    /// `text` with each `{{secret:NAME}}` replaced by the stored value. A name with no value
    /// is a credential error, so the model is pointed to store_secret.
    pub async fn expand(&self, text: &str) -> Result<String, ToolError> {
        let mut out = String::with_capacity(text.len());
        let mut rest = text;
        while let Some(at) = rest.find(PLACEHOLDER_OPEN) {
            out.push_str(&rest[..at]);
            let after = &rest[at + PLACEHOLDER_OPEN.len()..];
            let Some(end) = after.find("}}") else {
                out.push_str(&rest[at..]);
                return Ok(out);
            };
            let name = after[..end].trim();
            let value =
                self.store.secret_get(name).await.map_err(|e| {
                    ToolError::failed(format!("cannot read the secret {name}: {e}"))
                })?;
            let Some(value) = value else {
                return Err(ToolError::Credential {
                    key: Some(name.to_string()),
                    message: format!(
                        "no secret named {name} is stored, so {{{{secret:{name}}}}} cannot be filled in; ask the user to store it with store_secret(key=\"{name}\"), then retry"
                    ),
                });
            };
            out.push_str(&value);
            rest = &after[end + 2..];
        }
        out.push_str(rest);
        Ok(out)
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
        // Each secret is kept with its encoded forms.
        assert_eq!(format!("{r:?}"), "Redactor { secrets: 8 }");
    }

    #[tokio::test]
    async fn a_secret_stored_by_a_tool_is_hidden_by_every_clone_at_once() {
        let store = dispatch_store::open("memory:").unwrap();
        let redactor = Redactor::default();
        let seen_by_events = redactor.clone();
        let secrets = ToolSecrets::new(store.clone(), redactor);
        secrets.set("API_KEY", "k-0123456789").await.unwrap();
        assert_eq!(
            seen_by_events.redact("Bearer k-0123456789"),
            "Bearer [secret:API_KEY]"
        );
        assert_eq!(
            store.secret_get("API_KEY").await.unwrap().as_deref(),
            Some("k-0123456789")
        );
    }

    #[tokio::test]
    async fn placeholders_expand_to_stored_values_and_a_missing_one_names_store_secret() {
        let store = dispatch_store::open("memory:").unwrap();
        store.secret_set("GH", "ghp_value").await.unwrap();
        let secrets = ToolSecrets::new(store, Redactor::default());
        assert_eq!(
            secrets
                .expand("token {{secret:GH}} and {{ secret:GH }}, {{secret:unclosed")
                .await
                .unwrap(),
            "token ghp_value and {{ secret:GH }}, {{secret:unclosed"
        );
        assert_eq!(secrets.expand("plain").await.unwrap(), "plain");
        let err = secrets.expand("{{secret:NOPE}}").await.unwrap_err();
        match err {
            ToolError::Credential { key, message } => {
                assert_eq!(key.as_deref(), Some("NOPE"));
                assert_eq!(
                    message,
                    "no secret named NOPE is stored, so {{secret:NOPE}} cannot be filled in; ask the user to store it with store_secret(key=\"NOPE\"), then retry"
                );
            }
            other => panic!("not a credential error: {other:?}"),
        }
    }

    #[test]
    fn an_echoed_secret_is_hidden_in_its_encoded_forms_too() {
        let r = Redactor::new(vec![("K".into(), "a/b+c \"d\"".into())]);
        for echoed in [
            "a/b+c \"d\"",
            "612f622b6320226422",
            "61 2f 62 2b 63 20 22 64 22",
            "YS9iK2MgImQi",
            "YS9iK2MgImQi",
            "a%2Fb%2Bc%20%22d%22",
            "a/b+c \\\"d\\\"",
        ] {
            assert_eq!(r.redact(&format!("<{echoed}>")), "<[secret:K]>", "{echoed}");
        }
    }
}
