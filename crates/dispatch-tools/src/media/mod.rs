//! Tools that make media through a paid API: `generate_image` and `generate_audio`. The API
//! calls live in dispatch-model, which builds on this crate: it implements [`MediaMaker`], and
//! the binary hands one to [`ToolsConfig::media`](crate::ToolsConfig). The tools own what the
//! model sends (arguments, paths, confirmation) and what comes back (files, image parts).

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

mod duration;
mod generate_audio;
mod generate_image;
mod save;

pub use duration::audio_duration;
pub use generate_audio::GenerateAudio;
pub use generate_image::GenerateImage;

/// One image to make: from the prompt alone, or as an edit of a reference image.
pub struct ImageRequest {
    pub prompt: String,
    /// `1024x1024`, `1536x1024`, …; `None`: the API's default.
    pub size: Option<String>,
    /// `low`, `medium`, `high` or `auto`; `None`: the API's default.
    pub quality: Option<String>,
    /// The image to edit, read from the work directory by the tool.
    pub reference: Option<Reference>,
}

/// A reference image's bytes, with the name and type it is uploaded under.
pub struct Reference {
    pub file_name: String,
    pub mime: &'static str,
    pub bytes: Vec<u8>,
}

/// Speech to make from text.
pub struct SpeechRequest {
    pub text: String,
    pub voice: String,
    /// `mp3`, `wav`, `opus`, `aac`, `flac` or `pcm`.
    pub format: String,
}

/// What the API made, and which configured model made it (`[models.img] gpt-image-1`).
pub struct Made {
    pub bytes: Vec<u8>,
    pub model: String,
}

/// Why nothing was made; every message says what to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MediaError {
    /// No model is configured for this kind of media: the user must add one.
    NoModel(String),
    /// The key is missing or the API refused it.
    Credential(String),
    /// Anything else (refused request, server errors after the retries, a malformed answer).
    Failed(String),
}

/// Makes media through a provider's API. Implementations never put the API key in a message.
#[async_trait]
pub trait MediaMaker: Send + Sync {
    async fn image(
        &self,
        request: ImageRequest,
        cancel: &CancellationToken,
    ) -> Result<Made, MediaError>;
    async fn speech(
        &self,
        request: SpeechRequest,
        cancel: &CancellationToken,
    ) -> Result<Made, MediaError>;
}

impl MediaError {
    /// As the call's error.
    fn into_tool_error(self) -> dispatch_engine::ToolError {
        match self {
            MediaError::NoModel(message) | MediaError::Failed(message) => {
                dispatch_engine::ToolError::failed(message)
            }
            MediaError::Credential(message) => {
                dispatch_engine::ToolError::Credential { key: None, message }
            }
        }
    }
}

/// What a media tool says when the binary gave it no maker at all.
fn no_maker(tool: &str, kind: &str, example: &str) -> dispatch_engine::ToolError {
    dispatch_engine::ToolError::failed(format!(
        "{tool} has no model to call: the user adds a [models.<name>] entry with provider = \"openai\" (e.g. model = \"{example}\") to tooldispatch's config file and names it in [media] {kind}_model; continue without it meanwhile"
    ))
}
