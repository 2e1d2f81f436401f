//! `generate_image`: make an image with the OpenAI images API (a new one from a prompt, or an
//! edit of a reference image from the work directory). It costs money, so every call asks
//! unless a rule allows it. The image is kept among the session's deliverables and returned as
//! an image part with its path; `save_to` also puts a copy in the work directory.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use base64::Engine;
use dispatch_engine::{
    Access, Effect, Gate, Subject, ToolContext, ToolError, ToolOutput, ToolSpec,
};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use super::save::{SaveTo, deliverables_dir, save_deliverable};
use super::{ImageRequest, MediaMaker, Reference, no_maker};
use crate::BuiltinTool;
use crate::files::beneath::Target;
use crate::files::confine::Confinement;
use crate::files::read::image::{MAX_IMAGE_BYTES, mime_of};
use crate::files::write::human_bytes;

/// The seed's timeout: a high-quality image can take minutes.
const TIMEOUT: Duration = Duration::from_secs(15 * 60);
/// The largest reference image sent (the images API's own limit for gpt-image-1).
const MAX_REFERENCE_BYTES: u64 = 50 << 20;

#[derive(Deserialize, JsonSchema, Clone, Copy, Debug)]
enum Size {
    #[serde(rename = "1024x1024")]
    Square,
    #[serde(rename = "1536x1024")]
    Landscape,
    #[serde(rename = "1024x1536")]
    Portrait,
    #[serde(rename = "1792x1024")]
    WideDalle,
    #[serde(rename = "1024x1792")]
    TallDalle,
    #[serde(rename = "auto")]
    Auto,
}

impl Size {
    fn as_str(self) -> &'static str {
        match self {
            Size::Square => "1024x1024",
            Size::Landscape => "1536x1024",
            Size::Portrait => "1024x1536",
            Size::WideDalle => "1792x1024",
            Size::TallDalle => "1024x1792",
            Size::Auto => "auto",
        }
    }
}

#[derive(Deserialize, JsonSchema, Clone, Copy, Debug)]
#[serde(rename_all = "snake_case")]
enum Quality {
    Low,
    Medium,
    High,
    Auto,
}

impl Quality {
    fn as_str(self) -> &'static str {
        match self {
            Quality::Low => "low",
            Quality::Medium => "medium",
            Quality::High => "high",
            Quality::Auto => "auto",
        }
    }
}

/// Make one image.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GenerateImageArgs {
    /// What the image shows: subject, style, composition, text in it.
    #[schemars(length(min = 1, max = 32000))]
    prompt: String,
    /// 1024x1024 (default), 1536x1024, 1024x1536 or auto; 1792x1024 and 1024x1792 for dall-e-3.
    size: Option<Size>,
    /// low, medium, high or auto (default: the model's); higher costs more.
    quality: Option<Quality>,
    /// An image in the work directory (PNG, JPEG or WebP) to edit or take as the starting point.
    reference_image_path: Option<String>,
    /// Also write the image to this new file in the work directory (asks; never overwrites).
    save_to: Option<String>,
}

pub struct GenerateImage {
    maker: Option<Arc<dyn MediaMaker>>,
}

impl GenerateImage {
    pub fn new(maker: Option<Arc<dyn MediaMaker>>) -> Self {
        GenerateImage { maker }
    }
}

#[async_trait]
impl BuiltinTool for GenerateImage {
    const NAME: &'static str = "generate_image";
    const DESCRIPTION: &'static str = "Generate an image with the configured image model (costs money, so the user is asked). Give a detailed prompt; with reference_image_path the image is an edit of that work-directory image. The image comes back for you to see, saved in this session's deliverables (its path is returned); save_to also writes it to a new file in the work directory.";
    type Args = GenerateImageArgs;

    fn declare(&self, spec: ToolSpec) -> ToolSpec {
        // Each call is a new paid image: a repeat is a new request, never the earlier answer.
        spec.gate(Gate::Ask)
            .effect(Effect::Pure)
            .no_dedupe()
            .timeout(TIMEOUT)
    }

    fn subject(&self, args: &Value, workdir: &Path) -> Option<Subject> {
        use crate::subjects::{resolved, text};
        let paths = resolved(
            workdir,
            text(args, "reference_image_path")
                .into_iter()
                .chain(text(args, "save_to")),
        );
        let why = match text(args, "save_to") {
            Some(to) => format!(
                "generate_image calls a paid image API and writes the image to {to} in the work directory"
            ),
            None => "generate_image calls a paid image API (each image costs money)".to_string(),
        };
        Some(Subject::new(Access::Changes).paths(paths).why(why))
    }

    fn effect(&self, args: &Value) -> Option<Effect> {
        // A copy in the work directory changes what later reads see.
        crate::subjects::text(args, "save_to").map(|_| Effect::Mutates)
    }

    async fn run(&self, cx: ToolContext, args: GenerateImageArgs) -> Result<ToolOutput, ToolError> {
        let Some(maker) = &self.maker else {
            return Err(no_maker(Self::NAME, "image", "gpt-image-1"));
        };
        if args.prompt.trim().is_empty() {
            return Err(ToolError::failed(
                "prompt is empty; describe the image to make",
            ));
        }
        // Everything that can be refused is checked before the paid request.
        let dir = deliverables_dir(&cx, Self::NAME)?;
        let save_to = match &args.save_to {
            Some(raw) => Some(SaveTo::check(&cx, raw, "png")?),
            None => None,
        };
        let reference = match &args.reference_image_path {
            Some(raw) => Some(read_reference(&cx, raw).await?),
            None => None,
        };
        let made = maker
            .image(
                ImageRequest {
                    prompt: args.prompt.clone(),
                    size: args.size.map(|s| s.as_str().to_string()),
                    quality: args.quality.map(|q| q.as_str().to_string()),
                    reference,
                },
                &cx.cancel,
            )
            .await
            .map_err(super::MediaError::into_tool_error)?;
        let mime = mime_of(&made.bytes);
        let ext = match mime {
            Some("image/png") => "png",
            Some("image/jpeg") => "jpg",
            Some("image/webp") => "webp",
            Some("image/gif") => "gif",
            _ => "bin",
        };
        let size = made.bytes.len() as u64;
        let saved = save_deliverable(&cx, dir, &args.prompt, ext, made.bytes.clone()).await?;
        let mut text = format!(
            "generated an image with {} ({}{}); saved to {}",
            made.model,
            human_bytes(size),
            mime.map(|m| format!(", {m}")).unwrap_or_default(),
            saved.display()
        );
        let mut paths = Vec::new();
        if let Some(to) = &save_to {
            to.write(made.bytes.clone()).await.map_err(|e| {
                ToolError::failed(format!(
                    "the image was generated and saved to {}, but the copy failed: {e}",
                    saved.display()
                ))
            })?;
            text.push_str(&format!(" and to {}", to.shown));
            paths.push(to.path.clone());
        }
        let images = match mime {
            Some(mime) if size <= MAX_IMAGE_BYTES => vec![format!(
                "data:{mime};base64,{}",
                base64::engine::general_purpose::STANDARD.encode(&made.bytes)
            )],
            Some(_) => {
                text.push_str(&format!(
                    "\n(the image is over {} and is not shown here; open the file to look at it)",
                    human_bytes(MAX_IMAGE_BYTES)
                ));
                Vec::new()
            }
            None => {
                text.push_str(
                    "\n(the API's bytes are no PNG, JPEG, WebP or GIF, so they are not shown; the file holds them as sent)",
                );
                Vec::new()
            }
        };
        Ok(ToolOutput::text(text).with_images(images).with_paths(paths))
    }
}

/// The reference image's bytes, read from the work directory as read_files would reach it.
async fn read_reference(cx: &ToolContext, raw: &str) -> Result<Reference, ToolError> {
    let confine = Confinement::for_call(cx)?;
    let path = confine.resolve(raw).map_err(|e| {
        ToolError::failed(format!(
            "reference_image_path: {e}; nothing was generated (no cost)"
        ))
    })?;
    let shown = confine.display(&path).into_owned();
    let file_name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "reference".to_string());
    let existing = tokio::task::spawn_blocking({
        let shown = shown.clone();
        move || {
            // Said here in the images API's terms; the capped read below still enforces it.
            if let Ok(meta) = std::fs::metadata(&path)
                && meta.len() > MAX_REFERENCE_BYTES
            {
                return Err(ToolError::failed(format!(
                    "reference_image_path {shown} is {} bytes, over the images API's {} limit for a reference image; shrink or recompress it first. Nothing was generated (no cost)",
                    meta.len(),
                    crate::files::write::human_bytes(MAX_REFERENCE_BYTES)
                )));
            }
            match Target::open_existing(&confine, &path, &shown)? {
            Some(target) => target.read_existing(&shown, MAX_REFERENCE_BYTES),
            None => Ok(None),
            }
        }
    })
    .await
    .map_err(|e| ToolError::failed(format!("reading the reference stopped unexpectedly: {e}")))??;
    let Some(existing) = existing else {
        return Err(ToolError::failed(format!(
            "reference_image_path {shown} does not exist; find_files can list the images in the work directory. Nothing was generated (no cost)"
        )));
    };
    let mime = match mime_of(&existing.bytes) {
        Some(mime @ ("image/png" | "image/jpeg" | "image/webp")) => mime,
        _ => {
            return Err(ToolError::failed(format!(
                "reference_image_path {shown} is no PNG, JPEG or WebP image (the images API takes only those); convert it first. Nothing was generated (no cost)"
            )));
        }
    };
    Ok(Reference {
        file_name,
        mime,
        bytes: existing.bytes,
    })
}
