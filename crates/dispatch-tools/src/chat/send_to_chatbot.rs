//! `send_to_chatbot`: post a message as the user's bot to a chat a person approved. It speaks
//! for the user, so it asks unless a rule allows the chat (`allow
//! send_to_chatbot(telegram://-1001234/**)`); a target that is not approved is refused whatever
//! the gate said, with the way to find the approved ones.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use dispatch_engine::{
    Access, Effect, Gate, Subject, ToolContext, ToolError, ToolOutput, ToolSpec,
};
use dispatch_store::ApprovedChats;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::api::scrub;
use super::list_chatbot::{approved, bot_token};
use super::split::{Markup, split};
use super::{ChatApi, ChatError, ChatbotConfig, Platform};
use crate::{BuiltinTool, Stores};

/// The longest message taken, in characters (it goes out in parts of the platform's limit).
pub const MAX_MESSAGE_CHARS: usize = 32_000;

/// Post a message to an approved chat.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SendToChatbotArgs {
    /// The platform of the chat.
    platform: Platform,
    /// The chat's id exactly as list_chatbot gave it.
    #[schemars(length(min = 1, max = 64))]
    target_id: String,
    /// The message: Telegram HTML or Discord Markdown (see the tool description).
    #[schemars(length(min = 1, max = 32000))]
    message: String,
}

/// The `send_to_chatbot` tool.
pub struct SendToChatbot {
    api: Result<ChatApi, String>,
    chats: Option<Arc<dyn ApprovedChats>>,
}

impl SendToChatbot {
    pub fn new(config: ChatbotConfig, stores: &Stores) -> Self {
        SendToChatbot {
            api: ChatApi::new(config),
            chats: stores.chats.clone(),
        }
    }
}

#[async_trait]
impl BuiltinTool for SendToChatbot {
    const NAME: &'static str = "send_to_chatbot";
    const DESCRIPTION: &'static str = "Post a message as the user's bot to a Telegram or Discord chat they approved (ids from list_chatbot; any other target is refused). It speaks for the user, so it asks them first unless a rule allows that chat. Telegram messages are HTML: only <b>, <i>, <u>, <s>, <code>, <pre>, <a href=\"URL\">, <blockquote> and <tg-spoiler> work, each closed; write a literal <, > or & as &lt; &gt; &amp;. Discord messages are Markdown (**bold**, *italic*, `code`, ```code blocks```, [text](url)); mentions do not ping. A message longer than the platform's limit (Telegram 4,096, Discord 2,000 characters) goes out in several, split at paragraph breaks. Rate limits are waited out when short.";
    type Args = SendToChatbotArgs;

    fn declare(&self, spec: ToolSpec) -> ToolSpec {
        // Each part may wait out a rate limit (up to [chatbot] max_retry_wait_secs, 4 times).
        spec.concurrent()
            .gate(Gate::Ask)
            .effect(Effect::Mutates)
            .timeout(Duration::from_secs(15 * 60))
    }

    fn subject(&self, args: &Value, _workdir: &std::path::Path) -> Option<Subject> {
        let platform = crate::subjects::text(args, "platform").and_then(Platform::parse);
        let target = crate::subjects::text(args, "target_id");
        let mut subject = Subject::new(Access::Changes);
        if let (Some(platform), Some(target)) = (platform, target) {
            // A target that is not an id stays out of the URL (it is refused when the call runs).
            let shown = if platform.valid_id(target) {
                target
            } else {
                "invalid-id"
            };
            subject = subject.url(platform.target_url(shown)).why(format!(
                "send_to_chatbot posts a message as your {} bot to chat {shown}, speaking for you",
                platform.title()
            ));
        }
        Some(subject)
    }

    async fn run(&self, cx: ToolContext, args: SendToChatbotArgs) -> Result<ToolOutput, ToolError> {
        let api = self
            .api
            .as_ref()
            .map_err(|e| ToolError::failed(e.clone()))?;
        let platform = args.platform;
        let target = args.target_id.trim();
        let token = bot_token(&cx, platform).await?;
        let chats = approved(&self.chats, platform).await?;
        let Some(chat) = chats.iter().find(|c| c.id == target) else {
            let shown: String = target.chars().take(64).collect();
            return Err(ToolError::failed(format!(
                "{} chat {shown:?} is not an approved chat, so nothing was sent. Call list_chatbot(platform=\"{}\") for the chats you may send to ({} approved); a person approves another with `tooldispatch chatbot authorize {} CHAT_ID`",
                platform.title(),
                platform.name(),
                chats.len(),
                platform.name()
            )));
        };
        let length = args.message.chars().count();
        if length > MAX_MESSAGE_CHARS {
            return Err(ToolError::failed(format!(
                "the message is {length} characters, over the limit of {MAX_MESSAGE_CHARS}; shorten it, or send it as several calls"
            )));
        }
        if args.message.trim().is_empty() {
            return Err(ToolError::failed(
                "the message is empty (only whitespace); nothing was sent",
            ));
        }
        let markup = match platform {
            Platform::Telegram => Markup::Html,
            Platform::Discord => Markup::Markdown,
        };
        let parts = split(&args.message, platform.limit(), markup);
        let mut ids = Vec::with_capacity(parts.len());
        for (i, part) in parts.iter().enumerate() {
            if parts.len() > 1 {
                cx.progress
                    .emit(format!("sending part {} of {}\n", i + 1, parts.len()));
            }
            match api.send(platform, &token, &chat.id, part, &cx.cancel).await {
                Ok(id) => ids.push(id),
                Err(e) => {
                    let sent = if i == 0 {
                        String::new()
                    } else {
                        format!(
                            "parts 1–{i} of {} were sent (message ids {}); part {} and later were not. ",
                            parts.len(),
                            ids.join(", "),
                            i + 1
                        )
                    };
                    return Err(match e {
                        ChatError::Credential { key, message } => ToolError::Credential {
                            key: Some(key),
                            message: format!("{sent}{message}"),
                        },
                        ChatError::Forbidden(m) | ChatError::Failed(m) => {
                            ToolError::failed(scrub(&format!("{sent}{m}"), platform, &token))
                        }
                    });
                }
            }
        }
        let result = json!({
            "ok": true,
            "platform": platform.name(),
            "target_id": chat.id,
            "name": chat.name,
            "parts": parts.len(),
            "message_ids": ids,
        });
        Ok(ToolOutput::text(result.to_string()))
    }
}
