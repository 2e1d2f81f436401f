//! `generate_audio`: speak a text with the OpenAI speech API. It costs money, so every call asks
//! unless a rule allows it. The audio is kept among the session's deliverables; the result is
//! its path, size and duration (exact for wav, pcm and flac, from frame headers for mp3).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use dispatch_engine::{
    Access, Effect, Gate, Subject, ToolContext, ToolError, ToolOutput, ToolSpec,
};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use super::duration::audio_duration;
use super::save::{SaveTo, deliverables_dir, save_deliverable};
use super::{MediaMaker, SpeechRequest, no_maker};
use crate::BuiltinTool;
use crate::files::write::human_bytes;

/// The seed's timeout for speech.
const TIMEOUT: Duration = Duration::from_secs(5 * 60);
/// The speech API's own limit on the input, in characters.
const MAX_TEXT_CHARS: usize = 4096;
const DEFAULT_VOICE: &str = "alloy";

#[derive(Deserialize, JsonSchema, Clone, Copy, Debug, Default)]
#[serde(rename_all = "snake_case")]
enum Format {
    Mp3,
    #[default]
    Wav,
    Opus,
    Aac,
    Flac,
    Pcm,
}

impl Format {
    fn as_str(self) -> &'static str {
        match self {
            Format::Mp3 => "mp3",
            Format::Wav => "wav",
            Format::Opus => "opus",
            Format::Aac => "aac",
            Format::Flac => "flac",
            Format::Pcm => "pcm",
        }
    }
}

/// Speak a text.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GenerateAudioArgs {
    /// The words to speak, at most 4096 characters.
    #[schemars(length(min = 1, max = 4096))]
    text: String,
    /// alloy (default), ash, ballad, coral, echo, fable, nova, onyx, sage, shimmer or verse.
    #[schemars(length(min = 1, max = 40), regex(pattern = r"^[A-Za-z0-9_-]+$"))]
    voice: Option<String>,
    /// wav (default), mp3, opus, aac, flac, or pcm (raw 24 kHz 16-bit mono).
    format: Option<Format>,
    /// Also write the audio to this new file in the work directory (asks; never overwrites).
    save_to: Option<String>,
}

pub struct GenerateAudio {
    maker: Option<Arc<dyn MediaMaker>>,
}

impl GenerateAudio {
    pub fn new(maker: Option<Arc<dyn MediaMaker>>) -> Self {
        GenerateAudio { maker }
    }
}

#[async_trait]
impl BuiltinTool for GenerateAudio {
    const NAME: &'static str = "generate_audio";
    const DESCRIPTION: &'static str = "Turn text into speech with the configured speech model (costs money, so the user is asked). Returns the audio file's path in this session's deliverables, its size and duration; save_to also writes it to a new file in the work directory.";
    type Args = GenerateAudioArgs;

    fn declare(&self, spec: ToolSpec) -> ToolSpec {
        spec.gate(Gate::Ask)
            .effect(Effect::Pure)
            .no_dedupe()
            .timeout(TIMEOUT)
    }

    fn subject(&self, args: &Value, workdir: &Path) -> Option<Subject> {
        use crate::subjects::{resolved, text};
        let why = match text(args, "save_to") {
            Some(to) => format!(
                "generate_audio calls a paid speech API and writes the audio to {to} in the work directory"
            ),
            None => "generate_audio calls a paid speech API (each call costs money)".to_string(),
        };
        Some(
            Subject::new(Access::Changes)
                .paths(resolved(workdir, text(args, "save_to")))
                .why(why),
        )
    }

    fn effect(&self, args: &Value) -> Option<Effect> {
        crate::subjects::text(args, "save_to").map(|_| Effect::Mutates)
    }

    async fn run(&self, cx: ToolContext, args: GenerateAudioArgs) -> Result<ToolOutput, ToolError> {
        let Some(maker) = &self.maker else {
            return Err(no_maker(Self::NAME, "audio", "gpt-4o-mini-tts"));
        };
        let chars = args.text.chars().count();
        if args.text.trim().is_empty() {
            return Err(ToolError::failed("text is empty; give the words to speak"));
        }
        if chars > MAX_TEXT_CHARS {
            return Err(ToolError::failed(format!(
                "text is {chars} characters, over the speech API's {MAX_TEXT_CHARS}; split it into several calls"
            )));
        }
        let format = args.format.unwrap_or_default();
        let ext = format.as_str();
        let dir = deliverables_dir(&cx, Self::NAME)?;
        let save_to = match &args.save_to {
            Some(raw) => Some(SaveTo::check(&cx, raw, ext)?),
            None => None,
        };
        let made = maker
            .speech(
                SpeechRequest {
                    text: args.text.clone(),
                    voice: args
                        .voice
                        .clone()
                        .unwrap_or_else(|| DEFAULT_VOICE.to_string()),
                    format: ext.to_string(),
                },
                &cx.cancel,
            )
            .await
            .map_err(super::MediaError::into_tool_error)?;
        if made.bytes.is_empty() {
            return Err(ToolError::failed(format!(
                "{} answered with no audio at all; try again, or with another voice or format",
                made.model
            )));
        }
        let duration = match audio_duration(ext, &made.bytes) {
            Ok(d) => format!("{:.3} s", d.as_secs_f64()),
            Err(why) => format!("unknown ({why})"),
        };
        let size = made.bytes.len() as u64;
        let saved = save_deliverable(&cx, dir, &args.text, ext, made.bytes.clone()).await?;
        let mut text = format!(
            "generated {ext} speech with {}: {}, duration {duration}; saved to {}",
            made.model,
            human_bytes(size),
            saved.display()
        );
        let mut paths = Vec::new();
        if let Some(to) = &save_to {
            to.write(made.bytes).await.map_err(|e| {
                ToolError::failed(format!(
                    "the audio was generated and saved to {}, but the copy failed: {e}",
                    saved.display()
                ))
            })?;
            text.push_str(&format!(" and to {}", to.shown));
            paths.push(to.path.clone());
        }
        Ok(ToolOutput::text(text).with_paths(paths))
    }
}
