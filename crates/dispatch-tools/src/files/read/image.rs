//! Images come back as image parts (`data:` URLs) that every wire format can show the model;
//! only the formats the model APIs accept are sent, and each image and each call is capped
//! because a data URL costs a third more than the file.

use std::fs::File;
use std::io::Read;

use base64::Engine;

use super::{ImageBudget, Section, human_size};

/// Largest image returned.
pub const MAX_IMAGE_BYTES: u64 = 5 << 20;
/// Most image bytes one read_files call returns.
pub const MAX_CALL_IMAGE_BYTES: usize = 20 << 20;

/// The MIME type of an image format the model APIs accept, from its magic bytes.
pub fn mime_of(head: &[u8]) -> Option<&'static str> {
    if head.starts_with(b"\x89PNG\r\n\x1a\n") {
        Some("image/png")
    } else if head.starts_with(b"\xff\xd8\xff") {
        Some("image/jpeg")
    } else if head.starts_with(b"GIF87a") || head.starts_with(b"GIF89a") {
        Some("image/gif")
    } else if head.len() >= 12 && head.starts_with(b"RIFF") && &head[8..12] == b"WEBP" {
        Some("image/webp")
    } else {
        None
    }
}

pub fn read_image(
    head: Vec<u8>,
    file: File,
    size: u64,
    mime: &str,
    budget: &mut ImageBudget,
) -> Result<Section, String> {
    if size > MAX_IMAGE_BYTES {
        return Err(format!(
            "this image is {}, over the {} limit for images; make a smaller copy first \
             (e.g. run_command `convert in.png -resize 50% small.png`)",
            human_size(size),
            human_size(MAX_IMAGE_BYTES)
        ));
    }
    if size as usize > budget.0 {
        return Err(format!(
            "this call already returns {} of images (the limit per call); read this image in \
             another call",
            human_size(MAX_CALL_IMAGE_BYTES as u64)
        ));
    }
    let mut bytes = head;
    file.take(MAX_IMAGE_BYTES + 1 - bytes.len() as u64)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read it: {e}"))?;
    if bytes.len() as u64 > MAX_IMAGE_BYTES || bytes.len() > budget.0 {
        return Err("the image grew while it was read; read it again".into());
    }
    budget.0 -= bytes.len();
    let url = format!(
        "data:{mime};base64,{}",
        base64::engine::general_purpose::STANDARD.encode(&bytes)
    );
    Ok(Section {
        summary: format!("{mime}, {}", human_size(bytes.len() as u64)),
        body: "(returned as an image)\n".into(),
        image: Some(url),
    })
}
