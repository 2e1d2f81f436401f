//! A round's result for one call as an MCP `CallToolResult`: text and image content blocks,
//! `isError` for every status the model should read as a failure, and the status in `_meta`.

use dispatch_engine::{RoundOutcome, SlotResult};
use rmcp::model::{CallToolResult, ContentBlock, MetaObject};
use serde_json::json;

/// The `_meta` keys tooldispatch sets on a result.
pub const META_STATUS: &str = "tooldispatch/status";
pub const META_SESSION: &str = "tooldispatch/session";
pub const META_RUN: &str = "tooldispatch/run";
pub const META_ROUND: &str = "tooldispatch/round";

/// The result of call `call_id` in `outcome`.
pub fn call_result(outcome: &RoundOutcome, call_id: &str) -> CallToolResult {
    let mut meta = serde_json::Map::new();
    meta.insert(META_SESSION.into(), json!(outcome.session));
    meta.insert(META_RUN.into(), json!(outcome.run));
    meta.insert(META_ROUND.into(), json!(outcome.round));
    let Some(result) = outcome.results.iter().find(|r| r.tool_call_id == call_id) else {
        // The call has no result only when it parked the run to ask the user and the client
        // could not be asked (no elicitation, a secret, or the user closed the form): the
        // question waits as a pending task.
        let text = match &outcome.pending {
            Some(task) => format!(
                "{} got no answer from the user: this MCP client cannot ask them (it does not support elicitation, the question asks for a secret, which elicitation must not carry, or the user closed the form). Ask the user yourself in the conversation. (The question waits as task {} of session {}.)",
                task.tool, task.task_hash, task.session
            ),
            None => "the call produced no result; call it again if you still need it".into(),
        };
        meta.insert(META_STATUS.into(), json!("pending"));
        let mut result = CallToolResult::error(vec![ContentBlock::text(text)]);
        result.meta = Some(MetaObject::from(meta));
        return result;
    };
    meta.insert(META_STATUS.into(), json!(result.status));
    let mut out = if result.is_error {
        CallToolResult::error(blocks(result))
    } else {
        CallToolResult::success(blocks(result))
    };
    out.meta = Some(MetaObject::from(meta));
    out
}

/// The text, then each image: `data:` URLs become image content, anything else a link in text.
fn blocks(result: &SlotResult) -> Vec<ContentBlock> {
    let mut blocks = Vec::with_capacity(1 + result.images.len());
    if !result.content.is_empty() || result.images.is_empty() {
        blocks.push(ContentBlock::text(result.content.clone()));
    }
    for image in &result.images {
        match data_url(image) {
            Some((mime, data)) => blocks.push(ContentBlock::image(data, mime)),
            None => blocks.push(ContentBlock::text(format!("image: {image}"))),
        }
    }
    blocks
}

/// `data:<mime>;base64,<data>` → (mime, data).
fn data_url(url: &str) -> Option<(&str, &str)> {
    let rest = url.strip_prefix("data:")?;
    let (head, data) = rest.split_once(',')?;
    let mime = head.strip_suffix(";base64")?;
    (!mime.is_empty()).then_some((mime, data))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_urls_split_into_mime_and_data() {
        assert_eq!(
            data_url("data:image/png;base64,iVBOR"),
            Some(("image/png", "iVBOR"))
        );
        assert_eq!(data_url("https://example.com/a.png"), None);
        assert_eq!(data_url("data:;base64,xx"), None);
        assert_eq!(data_url("data:text/plain,hello"), None);
    }
}
