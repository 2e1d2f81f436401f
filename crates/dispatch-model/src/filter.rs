//! The model-backed ResultFilter: fetch_page and search_web output is trimmed by one of the
//! configured models to what matters for the call's focus. It asks through the same client as
//! the agent loop (any provider, its retries, its key from a secret or the environment), and
//! any failure (no key, an HTTP error, no answer in time, an empty answer) falls back to the
//! built-in filter with a note saying why.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use dispatch_store::Secrets;
use dispatch_tools::web::filter::{
    Filtered, MODEL_INSTRUCTION, ResultFilter, model_outcome, model_request,
};
use tokio_util::sync::CancellationToken;

use crate::{KeySource, ModelClient, ModelConfig, TurnRequest, user_message};

/// How long one filtering request may take before the built-in filter is used (default).
pub const DEFAULT_FILTER_TIMEOUT: Duration = Duration::from_secs(20);

pub struct ModelResultFilter {
    config: ModelConfig,
    /// Where a `{{secret:NAME}}` key is read, at the first use.
    secrets: Arc<dyn Secrets>,
    timeout: Duration,
    client: OnceLock<ModelClient>,
}

impl ModelResultFilter {
    /// A filter asking the model of `config` (one attempt per page unless the config sets
    /// `max_attempts`: a page should not wait on back-offs), within `timeout`.
    pub fn new(mut config: ModelConfig, secrets: Arc<dyn Secrets>, timeout: Duration) -> Self {
        config.max_attempts = config.max_attempts.or(Some(1));
        ModelResultFilter {
            config,
            secrets,
            timeout,
            client: OnceLock::new(),
        }
    }

    async fn client(&self) -> Result<&ModelClient, String> {
        if let Some(client) = self.client.get() {
            return Ok(client);
        }
        let stored = match self.config.key_source().map_err(|e| e.to_string())? {
            KeySource::Secret(name) => self
                .secrets
                .secret_get(&name)
                .await
                .map_err(|e| format!("cannot read its key: {e}"))?,
            _ => None,
        };
        let key = self
            .config
            .resolve_key(&|_| stored.clone(), &|var| std::env::var(var).ok())
            .map_err(|e| e.to_string())?;
        let client = ModelClient::new(self.config.clone(), key).map_err(|e| e.to_string())?;
        Ok(self.client.get_or_init(|| client))
    }

    async fn ask(&self, text: &str, focus: Option<&str>, budget: usize) -> Result<String, String> {
        let client = self.client().await?;
        let history = [user_message(
            self.config.provider,
            &model_request(text, focus, budget),
        )];
        let request = TurnRequest {
            system: MODEL_INSTRUCTION,
            history: &history,
            tools: &[],
        };
        let cancel = CancellationToken::new();
        let answer = tokio::time::timeout(self.timeout, client.turn(&request, &cancel, &|_| {}))
            .await
            .map_err(|_| format!("no answer within {}", seconds(self.timeout)))?
            .map_err(|e| e.to_string())?;
        let text = answer.text.trim();
        if text.is_empty() {
            return Err("its answer had no text".to_string());
        }
        Ok(text.to_string())
    }
}

fn seconds(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{} s", d.as_secs())
    } else {
        format!("{:.1} s", d.as_secs_f64())
    }
}

#[async_trait]
impl ResultFilter for ModelResultFilter {
    async fn filter(&self, text: &str, focus: Option<&str>, budget: usize) -> Filtered {
        model_outcome(self.ask(text, focus, budget).await, text, focus, budget)
    }
}
