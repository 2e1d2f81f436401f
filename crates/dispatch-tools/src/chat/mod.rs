//! The chatbot tools (list_chatbot, send_to_chatbot): a Telegram or Discord bot speaks for the
//! user in chats a person approved (`tooldispatch chatbot authorize`). The bot tokens are
//! stored secrets; the API roots come from the config file (`[chatbot]`), which is also how
//! tests point them at servers on 127.0.0.1.

pub mod api;
pub mod list_chatbot;
pub mod send_to_chatbot;
pub mod split;
#[cfg(test)]
mod tests;

use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;

pub use api::{ChatApi, ChatError, PendingChat};
pub use list_chatbot::ListChatbot;
pub use send_to_chatbot::SendToChatbot;

/// Where the bots' APIs are and how long a rate limit may be waited out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChatbotConfig {
    /// The Telegram Bot API root (`{api}/bot<TOKEN>/<method>`).
    pub telegram_api: String,
    /// The Discord REST API root (`{api}/channels/{id}/messages`).
    pub discord_api: String,
    /// The longest `retry_after` of a 429 that is waited out; a longer one fails the call
    /// with the time to retry.
    pub max_retry_wait: Duration,
}

/// `[chatbot] max_retry_wait_secs` unless the config file says otherwise.
pub const DEFAULT_MAX_RETRY_WAIT: Duration = Duration::from_secs(30);

impl Default for ChatbotConfig {
    fn default() -> Self {
        ChatbotConfig {
            telegram_api: "https://api.telegram.org".to_string(),
            discord_api: "https://discord.com/api/v10".to_string(),
            max_retry_wait: DEFAULT_MAX_RETRY_WAIT,
        }
    }
}

/// A chat platform a bot can speak on.
#[derive(Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[serde(rename_all = "lowercase")]
pub enum Platform {
    Telegram,
    Discord,
}

impl Platform {
    pub const ALL: [Platform; 2] = [Platform::Telegram, Platform::Discord];

    /// `telegram` or `discord`, as stored and as the CLI takes it.
    pub fn name(self) -> &'static str {
        match self {
            Platform::Telegram => "telegram",
            Platform::Discord => "discord",
        }
    }

    /// The platform `name` names (case-insensitive).
    pub fn parse(name: &str) -> Option<Platform> {
        Platform::ALL
            .into_iter()
            .find(|p| p.name().eq_ignore_ascii_case(name.trim()))
    }

    /// The people-facing name.
    pub fn title(self) -> &'static str {
        match self {
            Platform::Telegram => "Telegram",
            Platform::Discord => "Discord",
        }
    }

    /// The stored secret that holds the bot's token.
    pub fn token_secret(self) -> &'static str {
        match self {
            Platform::Telegram => "TELEGRAM_BOT_TOKEN",
            Platform::Discord => "DISCORD_BOT_TOKEN",
        }
    }

    /// The most characters one message may have.
    pub fn limit(self) -> usize {
        match self {
            Platform::Telegram => 4096,
            Platform::Discord => 2000,
        }
    }

    /// Whether `id` has the shape of a chat id on this platform: Telegram chat ids are
    /// integers (groups and channels negative), Discord ids are snowflakes (digits). Checked
    /// before an id goes into a URL or a request, so no id can reach another endpoint.
    pub fn valid_id(self, id: &str) -> bool {
        let digits = match self {
            Platform::Telegram => id.strip_prefix('-').unwrap_or(id),
            Platform::Discord => id,
        };
        !digits.is_empty() && digits.len() <= 20 && digits.bytes().all(|b| b.is_ascii_digit())
    }

    /// The subject URL of a message to chat `id`: what the gate shows, rules match
    /// (`allow send_to_chatbot(telegram://-1001234/**)`) and "remember" generalises to.
    pub fn target_url(self, id: &str) -> String {
        format!("{}://{id}/", self.name())
    }
}
