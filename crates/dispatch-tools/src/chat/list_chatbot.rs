//! `list_chatbot`: the chats a person approved for a platform's bot, the only ones
//! send_to_chatbot will post to.

use std::sync::Arc;

use async_trait::async_trait;
use dispatch_engine::{ToolContext, ToolError, ToolOutput, ToolSpec};
use dispatch_store::ApprovedChats;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

use super::Platform;
use crate::{BuiltinTool, Stores};

/// List the approved chats of a platform.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListChatbotArgs {
    /// The platform whose approved chats to list.
    platform: Platform,
}

/// The `list_chatbot` tool.
pub struct ListChatbot {
    chats: Option<Arc<dyn ApprovedChats>>,
}

impl ListChatbot {
    pub fn new(stores: &Stores) -> Self {
        ListChatbot {
            chats: stores.chats.clone(),
        }
    }
}

#[async_trait]
impl BuiltinTool for ListChatbot {
    const NAME: &'static str = "list_chatbot";
    const DESCRIPTION: &'static str = "List the Telegram or Discord chats the user approved for their bot: a JSON array of {platform, id, name, kind}. send_to_chatbot posts only to these ids; a person approves more with `tooldispatch chatbot authorize`.";
    type Args = ListChatbotArgs;

    fn declare(&self, spec: ToolSpec) -> ToolSpec {
        spec.concurrent().read_only()
    }

    async fn run(&self, cx: ToolContext, args: ListChatbotArgs) -> Result<ToolOutput, ToolError> {
        let platform = args.platform;
        bot_token(&cx, platform).await?;
        let chats = approved(&self.chats, platform).await?;
        if chats.is_empty() {
            return Ok(ToolOutput::text(format!(
                "[] (no {} chat is approved yet: ask the user to run `tooldispatch chatbot pending {}` to see the chats that messaged the bot, then `tooldispatch chatbot authorize {} CHAT_ID`)",
                platform.title(),
                platform.name(),
                platform.name()
            )));
        }
        let listed: Vec<_> = chats
            .iter()
            .map(|c| json!({"platform": c.platform, "id": c.id, "name": c.name, "kind": c.kind}))
            .collect();
        Ok(ToolOutput::text(
            serde_json::to_string_pretty(&listed).unwrap_or_default(),
        ))
    }
}

/// The approved chats of `platform`.
pub(crate) async fn approved(
    chats: &Option<Arc<dyn ApprovedChats>>,
    platform: Platform,
) -> Result<Vec<dispatch_store::ApprovedChat>, ToolError> {
    let Some(chats) = chats else {
        return Err(ToolError::failed(
            "this dispatcher has no store for approved chats, so no chat can be used; run it with a store (the CLI and the daemon have one)",
        ));
    };
    chats
        .approved_chats(Some(platform.name()))
        .await
        .map_err(|e| ToolError::failed(format!("cannot read the approved chats: {e}")))
}

/// The stored bot token of `platform`; a missing one points the model to store_secret.
pub(crate) async fn bot_token(cx: &ToolContext, platform: Platform) -> Result<String, ToolError> {
    let name = platform.token_secret();
    let token = match &cx.secrets {
        Some(secrets) => secrets
            .get(name)
            .await
            .map_err(|e| ToolError::failed(format!("cannot read the secret {name}: {e}")))?,
        None => None,
    };
    token
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty())
        .ok_or_else(|| ToolError::Credential {
            key: Some(name.to_string()),
            message: format!(
                "no {} bot token is stored; ask the user for the bot's token ({}) and store it with store_secret(key=\"{name}\") — or they run `tooldispatch secret set {name}` — then retry",
                platform.title(),
                match platform {
                    Platform::Telegram => "from @BotFather",
                    Platform::Discord => "Developer Portal → the application → Bot → Reset Token",
                }
            ),
        })
}
