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

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    const KEY: &str = "sk-live-0123456789abcdef";

    fn with_key(provider: ProviderKind, key: Option<&str>) -> ModelConfig {
        let mut config = ModelConfig::new(provider, "m");
        config.key = key.map(str::to_owned);
        config
    }

    fn lookup(name: &'static str) -> impl Fn(&str) -> Option<String> {
        move |asked| (asked == name).then(|| KEY.to_owned())
    }

    #[test]
    fn keys_come_from_secrets_named_variables_or_each_providers_default_variable() {
        let none = |_: &str| None;
        let from_secret = with_key(ProviderKind::OpenAi, Some("{{secret:OPENAI}}"))
            .resolve_key(&lookup("OPENAI"), &none)
            .unwrap();
        assert_eq!(from_secret.value(), Some(KEY));
        assert_eq!(from_secret.source(), &KeySource::Secret("OPENAI".into()));

        let from_env = with_key(ProviderKind::Anthropic, Some("env:WORK_KEY"))
            .resolve_key(&none, &lookup("WORK_KEY"))
            .unwrap();
        assert_eq!(from_env.source(), &KeySource::Env("WORK_KEY".into()));

        for (provider, var) in [
            (ProviderKind::OpenAi, "OPENAI_API_KEY"),
            (ProviderKind::OpenAiResponses, "OPENAI_API_KEY"),
            (ProviderKind::Anthropic, "ANTHROPIC_API_KEY"),
            (ProviderKind::Gemini, "GEMINI_API_KEY"),
        ] {
            let key = with_key(provider, None)
                .resolve_key(&none, &|asked| (asked == var).then(|| KEY.to_owned()))
                .unwrap();
            assert_eq!(key.value(), Some(KEY), "{provider}");
        }

        let keyless = with_key(ProviderKind::OpenAi, Some("none"))
            .resolve_key(&none, &none)
            .unwrap();
        assert_eq!(keyless.value(), None);
    }

    #[test]
    fn a_missing_key_names_where_it_was_looked_for_and_how_to_fix_it() {
        let none = |_: &str| None;
        let err = with_key(ProviderKind::Gemini, None)
            .resolve_key(&none, &none)
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "no gemini key: the environment variable GEMINI_API_KEY is not set; set it, or {KEY_FORMS}"
            )
        );
        let err = with_key(ProviderKind::Anthropic, Some("{{secret:CLAUDE}}"))
            .resolve_key(&none, &|_| Some(KEY.into()))
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "no anthropic key: the secret CLAUDE ({{secret:CLAUDE}}) is not set; store it with `tooldispatch secret set CLAUDE`"
        );
        // An empty variable is as good as none.
        let err = with_key(ProviderKind::OpenAi, Some("env:EMPTY"))
            .resolve_key(&none, &|_| Some("  ".into()))
            .unwrap_err();
        assert!(err.to_string().contains("EMPTY is not set"), "{err}");
    }

    #[test]
    fn a_key_written_into_the_config_is_refused_without_echoing_it() {
        let config = with_key(ProviderKind::OpenAi, Some(KEY));
        let err = config.validate().unwrap_err();
        assert!(err.starts_with("key must not hold the key itself"), "{err}");
        assert!(!err.contains(KEY));
        assert!(!format!("{config:?}").contains(KEY));
        for malformed in ["env:", "{{secret:}}", "{{secret:X"] {
            assert!(
                with_key(ProviderKind::OpenAi, Some(malformed))
                    .validate()
                    .is_err(),
                "{malformed}"
            );
        }
    }

    #[test]
    fn debug_output_never_shows_a_key() {
        let key = ApiKey::new(KEY, KeySource::Env("OPENAI_API_KEY".into()));
        let shown = format!("{key:?}");
        assert!(!shown.contains(KEY), "{shown}");
        assert!(shown.contains("OPENAI_API_KEY"), "{shown}");
    }

    #[test]
    fn the_config_table_refuses_unknown_fields_and_providers() {
        let parse =
            |text: &str| serde_json::from_str::<ModelConfig>(text).map_err(|e| e.to_string());
        let config = parse(r#"{"provider": "openai-responses", "model": "gpt-5", "reasoning": "high", "max_tokens": 9}"#).unwrap();
        assert_eq!(config.provider, ProviderKind::OpenAiResponses);
        assert_eq!(config.reasoning, Some(Reasoning::High));
        assert!(
            parse(r#"{"provider": "openai", "model": "m", "api_key": "x"}"#)
                .unwrap_err()
                .contains("unknown field `api_key`")
        );
        assert!(
            parse(r#"{"provider": "claude", "model": "m"}"#)
                .unwrap_err()
                .contains("unknown variant `claude`")
        );
        assert!(parse(r#"{"provider": "gemini", "model": "m", "reasoning": "max"}"#).is_err());
    }

    #[test]
    fn anthropic_max_tokens_must_leave_room_beyond_the_thinking_budget() {
        let mut config = ModelConfig::new(ProviderKind::Anthropic, "claude");
        config.reasoning = Some(Reasoning::High);
        config.max_tokens = Some(24576);
        let err = config.validate().unwrap_err();
        assert!(err.contains("raise max_tokens above 24576"), "{err}");
        config.max_tokens = Some(30000);
        assert_eq!(config.validate(), Ok(()));
        config.max_tokens = None;
        assert_eq!(config.validate(), Ok(()));
    }

    #[test]
    fn base_url_defaults_per_provider_and_loses_its_trailing_slash() {
        assert_eq!(
            ModelConfig::new(ProviderKind::Anthropic, "m").base_url(),
            "https://api.anthropic.com/v1"
        );
        assert_eq!(
            ModelConfig::new(ProviderKind::Gemini, "m").base_url(),
            "https://generativelanguage.googleapis.com/v1beta"
        );
        let mut local = ModelConfig::new(ProviderKind::OpenAi, "m");
        local.base_url = Some("http://127.0.0.1:11434/v1/".into());
        assert_eq!(local.base_url(), "http://127.0.0.1:11434/v1");
        local.base_url = Some("127.0.0.1:11434".into());
        assert!(
            local
                .validate()
                .unwrap_err()
                .contains("must start with http")
        );
    }
}
