//! The OpenAI media APIs behind `generate_image` and `generate_audio`: `POST /images/generations`
//! (JSON), `POST /images/edits` (multipart, with the reference image), `POST /audio/speech`.
//! Requests go through [`ModelClient::post`], so they are retried like a turn (429 and 5xx,
//! honouring `Retry-After`) and the key is sent the same way and never appears in a message.
//!
//! Which model: `[media] image_model` / `audio_model` name a `[models.<name>]` entry; without
//! one, the first entry whose provider is `openai` or `openai-responses`. Its `model` is sent
//! as it is, so the user names an image or speech model there (`gpt-image-1`,
//! `gpt-4o-mini-tts`), not a chat model.

use std::sync::Arc;

use async_trait::async_trait;
use base64::Engine;
use dispatch_store::Store;
use dispatch_tools::media::{ImageRequest, Made, MediaError, MediaMaker, SpeechRequest};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::{KeySource, ModelClient, ModelConfig, ModelError, ProviderKind, RetryPolicy};

/// The largest answer read: a base64 image of the largest size at high quality is far below.
const MAX_ANSWER_BYTES: usize = 100 << 20;

/// The model a media tool calls, or what the user must do to have one.
type Choice = Result<(String, ModelConfig), String>;

/// [`MediaMaker`] over OpenAI's images and speech APIs (or a compatible server).
pub struct OpenAiMedia {
    /// Where `{{secret:NAME}}` keys are read, at each call (a secret may be stored later).
    store: Arc<dyn Store>,
    image: Choice,
    audio: Choice,
    retry: Option<RetryPolicy>,
}

impl OpenAiMedia {
    /// The makers for `models` (in file order) and the `[media]` names (already checked to
    /// exist).
    pub fn new(
        store: Arc<dyn Store>,
        models: &[(String, ModelConfig)],
        image_model: Option<&str>,
        audio_model: Option<&str>,
    ) -> Self {
        OpenAiMedia {
            store,
            image: choose(models, image_model, "image", "gpt-image-1"),
            audio: choose(models, audio_model, "audio", "gpt-4o-mini-tts"),
            retry: None,
        }
    }

    /// Replaces the retry policy of the model entries (tests use short waits).
    pub fn with_retry_policy(mut self, retry: RetryPolicy) -> Self {
        self.retry = Some(retry);
        self
    }

    /// A client of the chosen model, its key resolved now.
    async fn client(&self, choice: &Choice) -> Result<(String, ModelClient), MediaError> {
        let (name, config) = choice
            .as_ref()
            .map_err(|e| MediaError::NoModel(e.clone()))?;
        let secret = match config.key_source() {
            Ok(KeySource::Secret(secret)) => self
                .store
                .secret_get(&secret)
                .await
                .map_err(|e| MediaError::Failed(format!("the secret store failed: {e}")))?,
            _ => None,
        };
        let key = config
            .resolve_key(&|_| secret.clone(), &|var| std::env::var(var).ok())
            .map_err(|e| MediaError::Credential(e.to_string()))?;
        let mut client = ModelClient::new(config.clone(), key)
            .map_err(|e| MediaError::Failed(format!("[models.{name}]: {e}")))?;
        if let Some(retry) = self.retry {
            client = client.with_retry_policy(retry);
        }
        Ok((format!("[models.{name}] {}", config.model), client))
    }
}

/// The entry `named` names, else the first OpenAI one; `kind` and `example` for the message.
fn choose(
    models: &[(String, ModelConfig)],
    named: Option<&str>,
    kind: &str,
    example: &str,
) -> Choice {
    let openai =
        |p: ProviderKind| matches!(p, ProviderKind::OpenAi | ProviderKind::OpenAiResponses);
    let add = format!(
        "add a [models.<name>] entry with provider = \"openai\" and model = \"{example}\" to tooldispatch's config file and name it in [media] {kind}_model"
    );
    match named {
        Some(name) => match models.iter().find(|(n, _)| n == name) {
            Some((_, config)) if openai(config.provider) => Ok((name.to_string(), config.clone())),
            Some((_, config)) => Err(format!(
                "[media] {kind}_model names [models.{name}], whose provider is {}, but the {kind} API is OpenAI's (or a compatible server's): the user must {add}",
                config.provider
            )),
            None => Err(format!(
                "[media] {kind}_model names [models.{name}], which is not configured: the user must {add}"
            )),
        },
        None => models
            .iter()
            .find(|(_, c)| openai(c.provider))
            .map(|(n, c)| (n.clone(), c.clone()))
            .ok_or_else(|| {
                format!("no OpenAI model is configured for {kind}: the user must {add}")
            }),
    }
}

#[async_trait]
impl MediaMaker for OpenAiMedia {
    async fn image(
        &self,
        request: ImageRequest,
        cancel: &CancellationToken,
    ) -> Result<Made, MediaError> {
        let (label, client) = self.client(&self.image).await?;
        let config = client.config();
        let dalle = config.model.starts_with("dall-e");
        let quality = request.quality.as_deref().map(|q| match (dalle, q) {
            // dall-e-3 knows standard and hd only.
            (true, "high") => "hd",
            (true, _) => "standard",
            (false, q) => q,
        });
        let mut fields: Vec<(&str, String)> = vec![
            ("model", config.model.clone()),
            ("prompt", request.prompt.clone()),
            ("n", "1".to_string()),
        ];
        if let Some(size) = &request.size {
            fields.push(("size", size.clone()));
        }
        if let Some(quality) = quality {
            fields.push(("quality", quality.to_string()));
        }
        // gpt-image models always answer in base64 and refuse the field; the others answer
        // with a URL unless asked.
        if !config.model.starts_with("gpt-image") {
            fields.push(("response_format", "b64_json".to_string()));
        }
        let answer = match &request.reference {
            None => {
                let body: serde_json::Map<String, Value> = fields
                    .iter()
                    .map(|(k, v)| {
                        let value = if *k == "n" { json!(1) } else { json!(v) };
                        (k.to_string(), value)
                    })
                    .collect();
                client
                    .post(
                        "/images/generations",
                        "application/json",
                        Value::Object(body).to_string().into_bytes(),
                        MAX_ANSWER_BYTES,
                        cancel,
                    )
                    .await
            }
            Some(reference) => {
                let (content_type, body) = multipart(&fields, reference);
                client
                    .post(
                        "/images/edits",
                        &content_type,
                        body,
                        MAX_ANSWER_BYTES,
                        cancel,
                    )
                    .await
            }
        }
        .map_err(|e| failure("the images API", &label, e))?;
        let bytes = image_bytes(&answer).map_err(|why| {
            MediaError::Failed(format!(
                "the images API ({label}) answered, but {why}; nothing was saved"
            ))
        })?;
        Ok(Made {
            bytes,
            model: label,
        })
    }

    async fn speech(
        &self,
        request: SpeechRequest,
        cancel: &CancellationToken,
    ) -> Result<Made, MediaError> {
        let (label, client) = self.client(&self.audio).await?;
        let body = json!({
            "model": client.config().model,
            "input": request.text,
            "voice": request.voice,
            "response_format": request.format,
        });
        let bytes = client
            .post(
                "/audio/speech",
                "application/json",
                body.to_string().into_bytes(),
                MAX_ANSWER_BYTES,
                cancel,
            )
            .await
            .map_err(|e| failure("the speech API", &label, e))?;
        // A JSON body on success is no audio: a compatible server that says what went wrong.
        if bytes.first() == Some(&b'{') && serde_json::from_slice::<Value>(&bytes).is_ok() {
            return Err(MediaError::Failed(format!(
                "the speech API ({label}) answered with JSON instead of audio: {}",
                String::from_utf8_lossy(&bytes[..bytes.len().min(300)])
            )));
        }
        Ok(Made {
            bytes,
            model: label,
        })
    }
}

/// A failed request as the tool reports it; a refused key points at the key.
fn failure(api: &str, label: &str, error: ModelError) -> MediaError {
    let message = format!("{api} ({label}) failed: {error}");
    match error {
        ModelError::Status {
            status: 401 | 403, ..
        } => MediaError::Credential(message),
        ModelError::Config(_) => MediaError::Credential(message),
        _ => MediaError::Failed(message),
    }
}

/// The image of an images API answer: `data[0].b64_json`. A URL answer is refused: fetching
/// it would reach a host the user never approved, and the b64 form is always available.
fn image_bytes(answer: &[u8]) -> Result<Vec<u8>, String> {
    let value: Value = serde_json::from_slice(answer).map_err(|_| {
        format!(
            "its answer is not JSON (it began {:?})",
            String::from_utf8_lossy(&answer[..answer.len().min(200)])
        )
    })?;
    let first = value
        .pointer("/data/0")
        .ok_or("its answer has no data[0]")?;
    if let Some(b64) = first.get("b64_json").and_then(Value::as_str) {
        return base64::engine::general_purpose::STANDARD
            .decode(b64.trim())
            .map_err(|e| format!("data[0].b64_json is not base64 ({e})"));
    }
    if first.get("url").is_some() {
        return Err(
            "with a URL instead of the image bytes, which this tool does not fetch; the server ignored response_format = \"b64_json\" — use a model or server that returns b64_json (gpt-image-1 always does)"
                .to_string(),
        );
    }
    Err("data[0] holds neither b64_json nor url".to_string())
}

/// A multipart/form-data body of `fields` and the reference image as `image`.
fn multipart(
    fields: &[(&str, String)],
    reference: &dispatch_tools::media::Reference,
) -> (String, Vec<u8>) {
    let mut boundary = format!(
        "tooldispatch-{:x}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos()
    );
    // The boundary must not occur in any part.
    while contains(&reference.bytes, boundary.as_bytes())
        || fields.iter().any(|(_, v)| v.contains(&boundary))
    {
        boundary.push('x');
    }
    let mut body = Vec::new();
    for (name, value) in fields {
        body.extend_from_slice(
            format!(
                "--{boundary}\r\ncontent-disposition: form-data; name=\"{name}\"\r\n\r\n{value}\r\n"
            )
            .as_bytes(),
        );
    }
    // The name goes into a header: keep it to safe characters.
    let file_name: String = reference
        .file_name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    body.extend_from_slice(
        format!(
            "--{boundary}\r\ncontent-disposition: form-data; name=\"image\"; filename=\"{file_name}\"\r\ncontent-type: {}\r\n\r\n",
            reference.mime
        )
        .as_bytes(),
    );
    body.extend_from_slice(&reference.bytes);
    body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    (format!("multipart/form-data; boundary={boundary}"), body)
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn entry(name: &str, provider: ProviderKind) -> (String, ModelConfig) {
        (
            name.to_string(),
            ModelConfig::new(provider, format!("{name}-model")),
        )
    }

    #[test]
    fn the_named_model_is_used_else_the_first_openai_one() {
        let models = vec![
            entry("claude", ProviderKind::Anthropic),
            entry("chat", ProviderKind::OpenAiResponses),
            entry("img", ProviderKind::OpenAi),
        ];
        let picked = |named| choose(&models, named, "image", "gpt-image-1").map(|(n, _)| n);
        assert_eq!(picked(Some("img")), Ok("img".to_string()));
        assert_eq!(picked(None), Ok("chat".to_string()));
        let wrong = picked(Some("claude")).unwrap_err();
        assert!(
            wrong.starts_with(
                "[media] image_model names [models.claude], whose provider is anthropic"
            ),
            "{wrong}"
        );
        let none = choose(&models[..1], None, "audio", "gpt-4o-mini-tts").unwrap_err();
        assert_eq!(
            none,
            "no OpenAI model is configured for audio: the user must add a [models.<name>] entry with provider = \"openai\" and model = \"gpt-4o-mini-tts\" to tooldispatch's config file and name it in [media] audio_model"
        );
    }

    #[test]
    fn a_url_answer_is_refused_and_b64_is_decoded() {
        assert_eq!(
            image_bytes(br#"{"data":[{"b64_json":"aGVsbG8="}]}"#),
            Ok(b"hello".to_vec())
        );
        let url = image_bytes(br#"{"data":[{"url":"https://x/y.png"}]}"#).unwrap_err();
        assert!(url.contains("URL instead of the image bytes"), "{url}");
        assert!(image_bytes(b"<html>").unwrap_err().contains("not JSON"));
        assert!(
            image_bytes(br#"{"data":[]}"#)
                .unwrap_err()
                .contains("no data[0]")
        );
    }
}
