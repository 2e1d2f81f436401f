//! `[models.<name>]`: which provider, which model, where its key comes from.

use std::fmt;
use std::time::Duration;

use serde::Deserialize;

use crate::ModelError;
use crate::retry::RetryPolicy;

/// One `[models.<name>]` entry of the config file.
#[derive(Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ModelConfig {
    pub provider: ProviderKind,
    /// The provider's model name (`gpt-5`, `claude-sonnet-4-5`, `gemini-2.5-pro`, …).
    pub model: String,
    /// The API root; defaults to the provider's own. Any OpenAI-compatible server (vLLM,
    /// Ollama, OpenRouter…) works with `provider = "openai"`.
    pub base_url: Option<String>,
    /// `{{secret:NAME}}` (the secret store), `env:VAR`, or `none` for a server that needs no
    /// key; absent: the provider's usual variable (`OPENAI_API_KEY`, …). A key written out is
    /// refused: the config file is no place for it.
    pub key: Option<String>,
    /// The most tokens one turn may produce.
    pub max_tokens: Option<u32>,
    /// How hard a reasoning model thinks (see `reasoning` in each provider's file).
    pub reasoning: Option<Reasoning>,
    /// Seconds the server may stay silent (before or within the stream) before the request
    /// fails (default 300: a reasoning model can think for minutes before its first token).
    pub timeout_secs: Option<u64>,
    /// Attempts for one turn on 429, 5xx and connection errors (default 4).
    pub max_attempts: Option<u32>,
    /// The longest wait between two attempts, in seconds (default 60).
    pub max_retry_wait_secs: Option<u64>,
}

/// The provider APIs a model can be reached through.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq, Hash)]
pub enum ProviderKind {
    /// OpenAI Chat Completions, or any compatible server.
    #[serde(rename = "openai")]
    OpenAi,
    /// OpenAI Responses.
    #[serde(rename = "openai-responses")]
    OpenAiResponses,
    /// Anthropic Messages.
    #[serde(rename = "anthropic")]
    Anthropic,
    /// Gemini generateContent.
    #[serde(rename = "gemini")]
    Gemini,
}

impl ProviderKind {
    /// The engine's wire format for this provider's messages.
    pub fn wire(self) -> dispatch_engine::Provider {
        match self {
            ProviderKind::OpenAi => dispatch_engine::Provider::OpenAi,
            ProviderKind::OpenAiResponses => dispatch_engine::Provider::OpenAiResponses,
            ProviderKind::Anthropic => dispatch_engine::Provider::Anthropic,
            ProviderKind::Gemini => dispatch_engine::Provider::Gemini,
        }
    }

    /// The API root used when `base_url` is not set.
    pub fn default_base_url(self) -> &'static str {
        match self {
            ProviderKind::OpenAi | ProviderKind::OpenAiResponses => "https://api.openai.com/v1",
            ProviderKind::Anthropic => "https://api.anthropic.com/v1",
            ProviderKind::Gemini => "https://generativelanguage.googleapis.com/v1beta",
        }
    }

    /// The environment variable read when `key` is not set.
    pub fn default_key_env(self) -> &'static str {
        match self {
            ProviderKind::OpenAi | ProviderKind::OpenAiResponses => "OPENAI_API_KEY",
            ProviderKind::Anthropic => "ANTHROPIC_API_KEY",
            ProviderKind::Gemini => "GEMINI_API_KEY",
        }
    }
}

impl fmt::Display for ProviderKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.wire().as_str())
    }
}

/// Reasoning effort; each provider file maps it onto its own field.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Reasoning {
    Low,
    Medium,
    High,
}

impl Reasoning {
    pub fn as_str(self) -> &'static str {
        match self {
            Reasoning::Low => "low",
            Reasoning::Medium => "medium",
            Reasoning::High => "high",
        }
    }
}

/// Where a key is read from, as `key` names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeySource {
    Secret(String),
    Env(String),
    /// The server needs no key (a local vLLM or Ollama).
    None,
}

impl fmt::Display for KeySource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeySource::Secret(name) => write!(f, "the secret {name} ({{{{secret:{name}}}}})"),
            KeySource::Env(var) => write!(f, "the environment variable {var}"),
            KeySource::None => f.write_str("key = \"none\" (no key sent)"),
        }
    }
}

/// An API key and where it came from. Its value never shows in Debug output or errors.
#[derive(Clone)]
pub struct ApiKey {
    value: String,
    source: KeySource,
}

impl ApiKey {
    /// A key read from `source` by the caller (for a secret store that answers asynchronously).
    pub fn new(value: impl Into<String>, source: KeySource) -> Self {
        ApiKey {
            value: value.into(),
            source,
        }
    }

    /// The value to send, or `None` when the server needs no key.
    pub(crate) fn value(&self) -> Option<&str> {
        (self.source != KeySource::None && !self.value.is_empty()).then_some(self.value.as_str())
    }

    /// Where the key came from, for "check the key" messages.
    pub fn source(&self) -> &KeySource {
        &self.source
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ApiKey")
            .field("source", &self.source)
            .field("value", &"<hidden>")
            .finish()
    }
}

impl fmt::Debug for ModelConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // A literal key is refused by `validate`, but it sits in the struct until then.
        let key = match (&self.key, self.key_source()) {
            (None, _) => None,
            (Some(key), Ok(_)) => Some(key.as_str()),
            (Some(_), Err(_)) => Some("<literal key, hidden>"),
        };
        f.debug_struct("ModelConfig")
            .field("provider", &self.provider)
            .field("model", &self.model)
            .field("base_url", &self.base_url)
            .field("key", &key)
            .field("max_tokens", &self.max_tokens)
            .field("reasoning", &self.reasoning)
            .field("timeout_secs", &self.timeout_secs)
            .field("max_attempts", &self.max_attempts)
            .field("max_retry_wait_secs", &self.max_retry_wait_secs)
            .finish()
    }
}

const KEY_FORMS: &str = "write key = \"{{secret:NAME}}\" (stored with `tooldispatch secret set NAME`), key = \"env:VAR\", or key = \"none\" for a server that needs no key";

impl ModelConfig {
    /// A config with the defaults for everything but provider and model.
    pub fn new(provider: ProviderKind, model: impl Into<String>) -> Self {
        ModelConfig {
            provider,
            model: model.into(),
            base_url: None,
            key: None,
            max_tokens: None,
            reasoning: None,
            timeout_secs: None,
            max_attempts: None,
            max_retry_wait_secs: None,
        }
    }

    /// Checks what serde cannot: the key's form, the numbers' ranges.
    pub fn validate(&self) -> Result<(), String> {
        if self.model.trim().is_empty() {
            return Err("model is empty: name the provider's model, e.g. model = \"gpt-5\"".into());
        }
        self.key_source().map_err(|e| e.to_string())?;
        if let Some(url) = &self.base_url
            && !(url.starts_with("http://") || url.starts_with("https://"))
        {
            return Err(format!(
                "base_url {url:?} must start with http:// or https://"
            ));
        }
        if self.max_tokens == Some(0) {
            return Err("max_tokens must be at least 1".into());
        }
        if self.max_attempts == Some(0) {
            return Err("max_attempts must be at least 1".into());
        }
        if self.timeout_secs == Some(0) {
            return Err("timeout_secs must be at least 1".into());
        }
        if self.provider == ProviderKind::Anthropic
            && let (Some(max), Some(effort)) = (self.max_tokens, self.reasoning)
        {
            let budget = crate::anthropic::thinking_budget(effort);
            if max <= budget {
                return Err(format!(
                    "max_tokens {max} leaves no room for the answer: reasoning = \"{}\" lets Anthropic think for {budget} tokens, and max_tokens counts them; raise max_tokens above {budget} or leave it out",
                    effort.as_str()
                ));
            }
        }
        Ok(())
    }

    /// Where the key is read from; a key written out in the file is an error.
    pub fn key_source(&self) -> Result<KeySource, ModelError> {
        let Some(key) = self.key.as_deref().map(str::trim) else {
            return Ok(KeySource::Env(self.provider.default_key_env().to_owned()));
        };
        if key == "none" {
            return Ok(KeySource::None);
        }
        if let Some(var) = key.strip_prefix("env:") {
            let var = var.trim();
            if var.is_empty() {
                return Err(ModelError::Config(format!(
                    "key \"env:\" names no variable; {KEY_FORMS}"
                )));
            }
            return Ok(KeySource::Env(var.to_owned()));
        }
        if let Some(name) = key
            .strip_prefix("{{secret:")
            .and_then(|rest| rest.strip_suffix("}}"))
        {
            let name = name.trim();
            if name.is_empty() {
                return Err(ModelError::Config(format!(
                    "key \"{{{{secret:}}}}\" names no secret; {KEY_FORMS}"
                )));
            }
            return Ok(KeySource::Secret(name.to_owned()));
        }
        // Never echo the value: it is most likely the key itself.
        Err(ModelError::Config(format!(
            "key must not hold the key itself (a config file is read by too many tools and backups); {KEY_FORMS}"
        )))
    }

    /// The key: a secret through `secret`, a variable through `env` (both lookups are passed in
    /// so the crate depends on no store and tests never touch the process environment).
    pub fn resolve_key(
        &self,
        secret: &dyn Fn(&str) -> Option<String>,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<ApiKey, ModelError> {
        let source = self.key_source()?;
        let value = match &source {
            KeySource::None => return Ok(ApiKey::new("", source)),
            KeySource::Secret(name) => secret(name),
            KeySource::Env(var) => env(var),
        };
        match value.filter(|v| !v.trim().is_empty()) {
            Some(value) => Ok(ApiKey::new(value.trim(), source)),
            None => {
                let fix = match &source {
                    KeySource::Secret(name) => {
                        format!("store it with `tooldispatch secret set {name}`")
                    }
                    _ => format!("set it, or {KEY_FORMS}"),
                };
                Err(ModelError::Config(format!(
                    "no {} key: {source} is not set; {fix}",
                    self.provider
                )))
            }
        }
    }

    /// The API root without a trailing slash.
    pub(crate) fn base_url(&self) -> &str {
        self.base_url
            .as_deref()
            .unwrap_or(self.provider.default_base_url())
            .trim_end_matches('/')
    }

    pub(crate) fn idle_timeout(&self) -> Duration {
        Duration::from_secs(self.timeout_secs.unwrap_or(300))
    }

    pub(crate) fn retry_policy(&self) -> RetryPolicy {
        let default = RetryPolicy::default();
        RetryPolicy {
            max_attempts: self.max_attempts.unwrap_or(default.max_attempts),
            max_wait: self
                .max_retry_wait_secs
                .map(Duration::from_secs)
                .unwrap_or(default.max_wait),
            ..default
        }
    }
}
