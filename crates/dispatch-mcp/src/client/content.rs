//! An MCP tool result (`CallToolResult` on the wire) as a tooldispatch result.
//!
//! Read from the result's JSON, the spec's own shape, so every content type a server may send
//! is handled the same way whatever the SDK's Rust types make of it: text stays text, images
//! become image parts, and what the model cannot see (audio, binary resources) is described
//! in words with its URI and MIME type instead of being dropped or dumped as base64.

use std::fmt::Write as _;

use super::clip;
use dispatch_engine::{ToolError, ToolOutput};
use serde_json::Value;

/// Images kept from one result (they go into the stored transcript and the next request).
const MAX_IMAGES: usize = 8;
/// Bytes of image data (as `data:` URLs) kept from one result.
const MAX_IMAGE_BYTES: usize = 8 * 1024 * 1024;

/// The result of one call: the output, or a failure carrying the server's own words.
pub fn to_output(result: &Value) -> Result<ToolOutput, ToolError> {
    let mut text = String::new();
    let mut images = Vec::new();
    let mut has_text = false;
    let mut image_bytes = 0;
    for block in result
        .get("content")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let piece = match block.get("type").and_then(Value::as_str).unwrap_or("") {
            "text" => {
                has_text = true;
                str_of(block, "text").to_string()
            }
            "image" => match image_url(block) {
                Some(url)
                    if images.len() < MAX_IMAGES && image_bytes + url.len() <= MAX_IMAGE_BYTES =>
                {
                    image_bytes += url.len();
                    images.push(url);
                    continue;
                }
                Some(_) => format!(
                    "[image of type {}, {} bytes, left out: a result keeps at most {MAX_IMAGES} images and {} MiB of them]",
                    str_or(block, "mimeType", "unknown"),
                    decoded_len(str_of(block, "data")),
                    MAX_IMAGE_BYTES / (1024 * 1024)
                ),
                None => format!(
                    "[image of type {} that could not be read: its data is not base64]",
                    str_or(block, "mimeType", "unknown")
                ),
            },
            "audio" => format!(
                "[audio: {}, {} bytes; audio cannot be shown to the model]",
                str_or(block, "mimeType", "unknown type"),
                decoded_len(str_of(block, "data"))
            ),
            "resource_link" => resource_link(block),
            "resource" => embedded_resource(block.get("resource").unwrap_or(&Value::Null)),
            other => format!(
                "[content of type {other:?} that tooldispatch does not know: {}]",
                clip(&block.to_string(), 400)
            ),
        };
        if !text.is_empty() {
            text.push('\n');
        }
        text.push_str(&piece);
    }
    // Structured content stands in for text only when the server sent none: the spec asks
    // servers to send both, and then the text is the readable form.
    if !has_text && let Some(structured) = result.get("structuredContent") {
        let json = serde_json::to_string_pretty(structured).unwrap_or_default();
        if !text.is_empty() {
            text.push('\n');
        }
        text.push_str(&json);
    }
    if result.get("isError").and_then(Value::as_bool) == Some(true) {
        let message = if text.trim().is_empty() {
            "the MCP server reported an error without saying what went wrong".to_string()
        } else {
            text
        };
        return Err(ToolError::failed(message));
    }
    if text.is_empty() && images.is_empty() {
        text.push_str("(the tool returned no content)");
    }
    Ok(ToolOutput::text(text).with_images(images))
}

fn str_of<'a>(block: &'a Value, key: &str) -> &'a str {
    block.get(key).and_then(Value::as_str).unwrap_or("")
}

fn str_or<'a>(block: &'a Value, key: &str, default: &'a str) -> &'a str {
    block
        .get(key)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .unwrap_or(default)
}

/// An image block as a `data:` URL, when its data is base64 and its type an image.
fn image_url(block: &Value) -> Option<String> {
    use base64::Engine as _;
    let data = str_of(block, "data");
    let mime = str_or(block, "mimeType", "image/png");
    if !mime.starts_with("image/") || mime.contains([';', ',', ' ']) {
        return None;
    }
    base64::engine::general_purpose::STANDARD
        .decode(data.as_bytes())
        .ok()?;
    Some(format!("data:{mime};base64,{data}"))
}

/// Bytes a base64 text decodes to (estimated from its length; padding aside).
fn decoded_len(data: &str) -> usize {
    let trimmed = data.trim_end_matches('=');
    trimmed.len() * 3 / 4
}

fn resource_link(block: &Value) -> String {
    let mut line = format!("[resource link] {}", str_or(block, "uri", "(no URI)"));
    let name = str_of(block, "name");
    if !name.is_empty() {
        let _ = write!(line, " — {name}");
    }
    let mime = str_of(block, "mimeType");
    if !mime.is_empty() {
        let _ = write!(line, " ({mime})");
    }
    let description = str_of(block, "description");
    if !description.is_empty() {
        let _ = write!(line, ": {description}");
    }
    line
}

fn embedded_resource(resource: &Value) -> String {
    let uri = str_or(resource, "uri", "(no URI)");
    let mime = str_or(resource, "mimeType", "unknown type");
    match resource.get("text").and_then(Value::as_str) {
        Some(text) => format!("[resource {uri} ({mime})]\n{text}"),
        None => format!(
            "[resource {uri} ({mime}): {} bytes of binary data, not shown]",
            decoded_len(str_of(resource, "blob"))
        ),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    #[test]
    fn every_content_type_reads_as_text_or_an_image() {
        let out = to_output(&json!({"content": [
            {"type": "text", "text": "hello"},
            {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"},
            {"type": "audio", "data": "AAAAAAAA", "mimeType": "audio/wav"},
            {"type": "resource_link", "uri": "file:///a.txt", "name": "a.txt", "mimeType": "text/plain"},
            {"type": "resource", "resource": {"uri": "mem://x", "mimeType": "text/plain", "text": "inside"}},
            {"type": "resource", "resource": {"uri": "mem://y", "blob": "AAAA"}},
        ]}))
        .unwrap();
        assert_eq!(
            out.images,
            vec!["data:image/png;base64,iVBORw0KGgo=".to_string()]
        );
        assert_eq!(
            out.text,
            "hello\n[audio: audio/wav, 6 bytes; audio cannot be shown to the model]\n\
             [resource link] file:///a.txt — a.txt (text/plain)\n\
             [resource mem://x (text/plain)]\ninside\n\
             [resource mem://y (unknown type): 3 bytes of binary data, not shown]"
        );
    }

    #[test]
    fn images_beyond_the_cap_are_described() {
        let image = json!({"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"});
        let blocks: Vec<Value> = (0..MAX_IMAGES + 2).map(|_| image.clone()).collect();
        let out = to_output(&json!({"content": blocks})).unwrap();
        assert_eq!(out.images.len(), MAX_IMAGES);
        assert_eq!(
            out.text.lines().filter(|l| l.contains("left out")).count(),
            2,
            "{}",
            out.text
        );
    }

    #[test]
    fn structured_content_stands_in_only_without_text() {
        let only = to_output(&json!({"content": [], "structuredContent": {"sum": 3}})).unwrap();
        assert_eq!(only.text, "{\n  \"sum\": 3\n}");
        let both = to_output(&json!({"content": [{"type": "text", "text": "3"}],
            "structuredContent": {"sum": 3}}))
        .unwrap();
        assert_eq!(both.text, "3");
    }

    #[test]
    fn is_error_fails_with_the_servers_words() {
        let err = to_output(
            &json!({"isError": true, "content": [{"type": "text", "text": "no such repo"}]}),
        )
        .unwrap_err();
        assert_eq!(err.to_string(), "no such repo");
        let bare = to_output(&json!({"isError": true, "content": []})).unwrap_err();
        assert!(bare.to_string().contains("without saying"), "{bare}");
    }

    #[test]
    fn an_image_that_is_not_base64_or_not_an_image_is_described() {
        let out = to_output(&json!({"content": [
            {"type": "image", "data": "not base64!", "mimeType": "image/png"},
            {"type": "image", "data": "AAAA", "mimeType": "text/html"},
        ]}))
        .unwrap();
        assert!(out.images.is_empty());
        assert_eq!(out.text.lines().count(), 2, "{}", out.text);
    }
}
