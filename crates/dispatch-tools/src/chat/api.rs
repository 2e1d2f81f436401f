//! The two bot APIs as the chatbot tools and `tooldispatch chatbot` use them: send one
//! message (waiting out short rate limits), list the chats a bot could be approved for, look
//! one chat up.
//!
//! Telegram: `POST {api}/bot<TOKEN>/<method>` with a JSON body, answered with
//! `{"ok": true, "result": …}` or `{"ok": false, "error_code", "description",
//! "parameters": {"retry_after"}}`. Discord: `{api}/…` with `Authorization: Bot TOKEN`, errors
//! as `{"message", "code"}` and a 429 as `{"retry_after": <float seconds>}`.
//!
//! The Telegram token is part of every URL, and reqwest names the URL in its errors: those are
//! reported without it, and every message built here has the token replaced by its secret's
//! name, whatever the server echoed.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::{ChatbotConfig, Platform};

/// The deadline of one request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Response bytes read; an API answer is far smaller.
const MAX_RESPONSE: usize = 4 * 1024 * 1024;
/// Requests one message part may take when the API keeps answering 429.
const MAX_ATTEMPTS: usize = 4;
/// Guilds whose channels `pending` lists for Discord.
const MAX_GUILDS: usize = 50;
/// Server text quoted in an error.
const EXCERPT: usize = 300;

/// Why a request to a bot API did not do what was asked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChatError {
    /// The token is missing or the API rejected it: store a valid one.
    #[error("{message}")]
    Credential { key: String, message: String },
    /// The bot may not do this in that chat (removed, blocked, missing permissions); the
    /// message says what a person must do.
    #[error("{0}")]
    Forbidden(String),
    /// Anything else, said plainly.
    #[error("{0}")]
    Failed(String),
}

/// A chat a bot can see, as `tooldispatch chatbot pending` lists it and an approval stores it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct PendingChat {
    pub id: String,
    pub name: String,
    pub kind: String,
}

/// What a request was for, which decides how a refusal is explained.
#[derive(Clone, Copy)]
enum Purpose<'a> {
    /// Posting a message to this chat.
    Send(&'a str),
    /// Looking this chat up.
    Lookup(&'a str),
    /// Listing chats.
    List,
}

impl Purpose<'_> {
    fn chat(self) -> Option<String> {
        match self {
            Purpose::Send(id) | Purpose::Lookup(id) => Some(id.to_string()),
            Purpose::List => None,
        }
    }
}

/// One answer of an API: its status and its JSON body (`Null` if it had none).
struct Answer {
    status: StatusCode,
    body: Value,
    /// Discord's `Retry-After` header, when the body has no `retry_after`.
    retry_after_header: Option<f64>,
}

/// A client for both bot APIs.
#[derive(Clone)]
pub struct ChatApi {
    http: reqwest::Client,
    config: ChatbotConfig,
}

impl ChatApi {
    pub fn new(config: ChatbotConfig) -> Result<Self, String> {
        let http = crate::web::client::builder()
            .timeout(REQUEST_TIMEOUT)
            .user_agent(concat!(
                "DiscordBot (https://github.com/tooldispatch, ",
                env!("CARGO_PKG_VERSION"),
                ")"
            ))
            .build()
            .map_err(|e| format!("cannot set up the chatbot HTTP client: {e}"))?;
        Ok(ChatApi { http, config })
    }

    pub fn config(&self) -> &ChatbotConfig {
        &self.config
    }

    /// Send `text` (one part, within the platform's limit) to chat `id`; the message id the
    /// platform gave it. A 429 whose `retry_after` is within `[chatbot] max_retry_wait_secs`
    /// is waited out (up to 4 requests); a longer one fails with when to retry.
    pub async fn send(
        &self,
        platform: Platform,
        token: &str,
        id: &str,
        text: &str,
        cancel: &CancellationToken,
    ) -> Result<String, ChatError> {
        if !platform.valid_id(id) {
            return Err(ChatError::Failed(format!(
                "{id:?} is not a {} chat id; call list_chatbot(platform=\"{}\") for the ids you may send to",
                platform.title(),
                platform.name()
            )));
        }
        let (method, path, body) = match platform {
            Platform::Telegram => (
                Method::POST,
                "sendMessage".to_string(),
                json!({"chat_id": telegram_chat_id(id), "text": text, "parse_mode": "HTML"}),
            ),
            // No mention in a model's text pings anyone (@everyone, roles, users).
            Platform::Discord => (
                Method::POST,
                format!("channels/{id}/messages"),
                json!({"content": text, "allowed_mentions": {"parse": []}}),
            ),
        };
        let mut attempt = 1;
        loop {
            let answer = self
                .request(platform, token, method.clone(), &path, Some(&body))
                .await?;
            if answer.status == StatusCode::TOO_MANY_REQUESTS {
                let wait = retry_after(platform, &answer);
                if wait > self.config.max_retry_wait.as_secs_f64() {
                    return Err(ChatError::Failed(format!(
                        "{} is rate-limiting the bot and asks to wait {}, longer than the {} s this dispatcher waits ([chatbot] max_retry_wait_secs); nothing more was sent. Retry after {}",
                        platform.title(),
                        seconds(wait),
                        self.config.max_retry_wait.as_secs(),
                        when(wait)
                    )));
                }
                if attempt >= MAX_ATTEMPTS {
                    return Err(ChatError::Failed(format!(
                        "{} kept answering 429 (rate limited) to {MAX_ATTEMPTS} attempts; nothing more was sent. Retry after {}",
                        platform.title(),
                        when(wait)
                    )));
                }
                attempt += 1;
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_secs_f64(wait.max(0.0))) => continue,
                    _ = cancel.cancelled() => return Err(ChatError::Failed(
                        "cancelled while waiting out the platform's rate limit".to_string(),
                    )),
                }
            }
            let answer = self.check(platform, token, answer, Purpose::Send(id))?;
            let message_id = match platform {
                Platform::Telegram => answer.body["result"]["message_id"].clone(),
                Platform::Discord => answer.body["id"].clone(),
            };
            return Ok(match message_id {
                Value::String(s) => s,
                Value::Null => String::new(),
                other => other.to_string(),
            });
        }
    }

    /// The chats the bot can see and a person could approve. Telegram: the chats of the
    /// updates `getUpdates` still holds (messages to the bot, the bot added to a group, channel
    /// posts from the last 24 hours; not confirmed, so other readers still get them). Discord:
    /// the text and announcement channels of the servers the bot is in (a bot cannot list its
    /// DM channels; approve one by id).
    pub async fn pending(
        &self,
        platform: Platform,
        token: &str,
    ) -> Result<Vec<PendingChat>, ChatError> {
        match platform {
            Platform::Telegram => {
                let answer = self
                    .request(
                        platform,
                        token,
                        Method::POST,
                        "getUpdates",
                        Some(&json!({"timeout": 0})),
                    )
                    .await?;
                let answer = self.check(platform, token, answer, Purpose::List)?;
                let mut chats: Vec<PendingChat> = Vec::new();
                for update in answer.body["result"].as_array().into_iter().flatten() {
                    let Some(chat) = update_chat(update) else {
                        continue;
                    };
                    let Some(found) = telegram_chat(chat) else {
                        continue;
                    };
                    // The latest update names the chat as it is now.
                    chats.retain(|c| c.id != found.id);
                    chats.push(found);
                }
                Ok(chats)
            }
            Platform::Discord => {
                let answer = self
                    .request(platform, token, Method::GET, "users/@me/guilds", None)
                    .await?;
                let answer = self.check(platform, token, answer, Purpose::List)?;
                let mut chats = Vec::new();
                for guild in answer
                    .body
                    .as_array()
                    .into_iter()
                    .flatten()
                    .take(MAX_GUILDS)
                {
                    let Some(guild_id) = guild["id"].as_str().filter(|g| platform.valid_id(g))
                    else {
                        continue;
                    };
                    let guild_name = guild["name"].as_str().unwrap_or(guild_id);
                    let answer = self
                        .request(
                            platform,
                            token,
                            Method::GET,
                            &format!("guilds/{guild_id}/channels"),
                            None,
                        )
                        .await?;
                    let answer = self.check(platform, token, answer, Purpose::List)?;
                    for channel in answer.body.as_array().into_iter().flatten() {
                        let kind = discord_kind(channel["type"].as_u64());
                        if !matches!(kind, "guild_text" | "guild_announcement") {
                            continue;
                        }
                        if let Some(found) = discord_channel(channel, Some(guild_name)) {
                            chats.push(found);
                        }
                    }
                }
                Ok(chats)
            }
        }
    }

    /// Chat `id` as the platform describes it to the bot (Telegram `getChat`, Discord
    /// `GET /channels/{id}`): proof the bot can reach it, and its name and kind.
    pub async fn chat_info(
        &self,
        platform: Platform,
        token: &str,
        id: &str,
    ) -> Result<PendingChat, ChatError> {
        if !platform.valid_id(id) {
            return Err(ChatError::Failed(format!(
                "{id:?} is not a {} chat id: {}",
                platform.title(),
                match platform {
                    Platform::Telegram =>
                        "Telegram chat ids are integers (groups and channels are negative, like -1001234567890)",
                    Platform::Discord =>
                        "Discord channel ids are snowflakes, all digits (Developer Mode → right-click the channel → Copy Channel ID)",
                }
            )));
        }
        let answer = match platform {
            Platform::Telegram => {
                self.request(
                    platform,
                    token,
                    Method::POST,
                    "getChat",
                    Some(&json!({"chat_id": telegram_chat_id(id)})),
                )
                .await?
            }
            Platform::Discord => {
                self.request(
                    platform,
                    token,
                    Method::GET,
                    &format!("channels/{id}"),
                    None,
                )
                .await?
            }
        };
        let answer = self.check(platform, token, answer, Purpose::Lookup(id))?;
        let found = match platform {
            Platform::Telegram => telegram_chat(&answer.body["result"]),
            Platform::Discord => discord_channel(&answer.body, None),
        };
        found.ok_or_else(|| {
            ChatError::Failed(format!(
                "{} answered the lookup of chat {id} without a chat in it: {}",
                platform.title(),
                excerpt(&answer.body.to_string())
            ))
        })
    }

    /// One request; its status and JSON body. Only a connection problem is an error here.
    async fn request(
        &self,
        platform: Platform,
        token: &str,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Answer, ChatError> {
        let (root, url) = match platform {
            Platform::Telegram => {
                let root = self.config.telegram_api.trim_end_matches('/');
                (root, format!("{root}/bot{token}/{path}"))
            }
            Platform::Discord => {
                let root = self.config.discord_api.trim_end_matches('/');
                (root, format!("{root}/{path}"))
            }
        };
        let mut request = self.http.request(method, &url);
        if platform == Platform::Discord {
            request = request.header("Authorization", format!("Bot {token}"));
        }
        if let Some(body) = body {
            request = request.json(body);
        }
        let unreachable = |e: reqwest::Error| {
            ChatError::Failed(scrub(
                &format!(
                    "cannot reach the {} API at {root}: {}; check the network, or [chatbot] {}_api in the config file",
                    platform.title(),
                    e.without_url(),
                    platform.name()
                ),
                platform,
                token,
            ))
        };
        let mut response = request.send().await.map_err(unreachable)?;
        let status = response.status();
        let retry_after_header = response
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<f64>().ok());
        let mut bytes = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(unreachable)? {
            bytes.extend_from_slice(&chunk);
            if bytes.len() > MAX_RESPONSE {
                return Err(ChatError::Failed(format!(
                    "the {} API answered with more than {} MiB; that is not an API answer (is [chatbot] {}_api right?)",
                    platform.title(),
                    MAX_RESPONSE / 1024 / 1024,
                    platform.name()
                )));
            }
        }
        let body = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes)
                .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()))
        };
        Ok(Answer {
            status,
            body,
            retry_after_header,
        })
    }

    /// A successful answer as it is; any other turned into what happened and what to do.
    fn check(
        &self,
        platform: Platform,
        token: &str,
        answer: Answer,
        purpose: Purpose<'_>,
    ) -> Result<Answer, ChatError> {
        let chat = purpose.chat();
        let api_ok = match platform {
            Platform::Telegram => answer.body["ok"].as_bool() == Some(true),
            Platform::Discord => true,
        };
        if answer.status.is_success() && api_ok {
            return Ok(answer);
        }
        // Telegram says the status in the body too; it wins when they differ.
        let code = answer.body["error_code"]
            .as_u64()
            .and_then(|c| u16::try_from(c).ok())
            .unwrap_or(answer.status.as_u16());
        let said = match &answer.body {
            Value::String(text) => text.clone(),
            body => body["description"]
                .as_str()
                .or(body["message"].as_str())
                .map(str::to_string)
                .unwrap_or_else(|| body.to_string()),
        };
        let said = scrub(&excerpt(&said), platform, token);
        let title = platform.title();
        let chat_text = chat
            .as_ref()
            .map_or(String::new(), |id| format!(" chat {id}"));
        // Telegram says an unknown chat with a 400.
        let unknown_chat = code == 404
            || (platform == Platform::Telegram && code == 400 && said.contains("chat not found"));
        let error = match code {
            401 => ChatError::Credential {
                key: platform.token_secret().to_string(),
                message: format!(
                    "the {title} API rejected the stored bot token {} (HTTP 401: {said}); ask the user to store the bot's current token with store_secret(key=\"{}\") or `tooldispatch secret set {}`, then retry",
                    platform.token_secret(),
                    platform.token_secret(),
                    platform.token_secret()
                ),
            },
            403 => ChatError::Forbidden(match platform {
                Platform::Telegram => format!(
                    "Telegram refused (error 403, {:?}): the bot cannot post in{chat_text}. It was removed from the group or channel, blocked by the user, or the user never started it. A person must add the bot back to the chat (for a channel: as an admin allowed to post), or for a private chat open the bot in Telegram and press Start (or unblock it); then retry. Meanwhile list_chatbot shows the other chats",
                    access_refusal(&said)
                ),
                Platform::Discord => format!(
                    "Discord refused (error 403, {:?}): the bot has no access to{chat_text}. A person must invite the bot to that server and give its role View Channel and Send Messages in the channel (for a DM: the user must share a server with the bot and allow DMs); then retry. Meanwhile list_chatbot shows the other chats",
                    access_refusal(&said)
                ),
            }),
            _ if unknown_chat && chat.is_some() => ChatError::Failed(format!(
                "{title} does not know{chat_text} (HTTP {code}: {said}), or the bot is not in it: it was deleted, the id is wrong, or it changed (a Telegram group upgraded to a supergroup gets a new id). `tooldispatch chatbot pending {}` shows the chats the bot sees; approve the current id",
                platform.name()
            )),
            404 => ChatError::Failed(format!(
                "the {title} API answered 404 ({said}); is [chatbot] {}_api in the config file the API root?",
                platform.name()
            )),
            409 if platform == Platform::Telegram => ChatError::Failed(format!(
                "Telegram refused getUpdates (HTTP 409: {said}): while the bot has a webhook, or another program polls it, its updates go there. Find the chat id there (or delete the webhook), then `tooldispatch chatbot authorize telegram CHAT_ID`"
            )),
            400 if platform == Platform::Telegram && matches!(purpose, Purpose::Send(_)) => {
                ChatError::Failed(format!(
                    "Telegram refused the message (HTTP 400: {said}). If it cannot parse the entities, fix the HTML: only <b>, <i>, <u>, <s>, <code>, <pre>, <a href=\"…\">, <blockquote> and <tg-spoiler> work, each closed, and a literal <, > or & must be written &lt; &gt; &amp;; then retry"
                ))
            }
            _ => ChatError::Failed(format!(
                "the {title} API answered HTTP {code} for{}: {said}",
                if chat_text.is_empty() {
                    " the request".to_string()
                } else {
                    chat_text
                }
            )),
        };
        Err(error)
    }
}

/// What a 403 said, without Telegram's `Forbidden: ` prefix. The engine reads "403" next to
/// "forbidden" or "HTTP" as a rejected credential and would point the model to store_secret,
/// but here the token is fine: a person must let the bot into the chat.
fn access_refusal(said: &str) -> String {
    let trimmed = said.trim();
    match trimmed.get(..10) {
        Some(head) if head.eq_ignore_ascii_case("forbidden:") => trimmed[10..].trim().to_string(),
        _ => trimmed.to_string(),
    }
}

/// A Telegram chat id as JSON: a number when it is one, so the API matches it exactly.
fn telegram_chat_id(id: &str) -> Value {
    id.parse::<i64>().map_or_else(|_| json!(id), |n| json!(n))
}

/// The seconds a 429 asks to wait: Telegram's `parameters.retry_after` (whole seconds),
/// Discord's `retry_after` (float seconds) or the `Retry-After` header; 1 s if none says.
fn retry_after(platform: Platform, answer: &Answer) -> f64 {
    let body = match platform {
        Platform::Telegram => answer.body["parameters"]["retry_after"].as_f64(),
        Platform::Discord => answer.body["retry_after"].as_f64(),
    };
    body.or(answer.retry_after_header)
        .filter(|s| s.is_finite() && *s >= 0.0)
        .unwrap_or(1.0)
}

/// `2.5 s`, `30 s`.
fn seconds(secs: f64) -> String {
    if secs.fract() == 0.0 {
        format!("{secs:.0} s")
    } else {
        format!("{secs:.1} s")
    }
}

/// "HH:MM:SS UTC (in N s)": when a rate limit of `secs` from now ends.
fn when(secs: f64) -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64();
    // Saturating: a huge retry_after from a server must not overflow.
    let at = (now + secs.ceil()).min(u64::MAX as f64) as u64 % 86_400;
    format!(
        "{:02}:{:02}:{:02} UTC (in {})",
        at / 3600,
        at / 60 % 60,
        at % 60,
        seconds(secs.ceil())
    )
}

/// The chat of one Telegram update, whichever kind it is.
fn update_chat(update: &Value) -> Option<&Value> {
    [
        "message",
        "edited_message",
        "channel_post",
        "edited_channel_post",
        "my_chat_member",
        "chat_member",
        "chat_join_request",
    ]
    .iter()
    .find_map(|kind| update.get(*kind).and_then(|u| u.get("chat")))
    .or_else(|| update.pointer("/callback_query/message/chat"))
}

/// A Telegram `Chat` object: groups and channels by title, people by name (and @username).
fn telegram_chat(chat: &Value) -> Option<PendingChat> {
    let id = match &chat["id"] {
        Value::Number(n) => n.to_string(),
        Value::String(s) => s.clone(),
        _ => return None,
    };
    let person = [chat["first_name"].as_str(), chat["last_name"].as_str()]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join(" ");
    let name = match (chat["title"].as_str(), chat["username"].as_str()) {
        (Some(title), _) => title.to_string(),
        (None, Some(user)) if person.is_empty() => format!("@{user}"),
        (None, Some(user)) => format!("{person} (@{user})"),
        (None, None) => person,
    };
    Some(PendingChat {
        id,
        name: clean(&name),
        kind: clean(chat["type"].as_str().unwrap_or("unknown")),
    })
}

/// A Discord channel object: `#name (server)`, or the DM's recipient.
fn discord_channel(channel: &Value, guild: Option<&str>) -> Option<PendingChat> {
    let id = channel["id"].as_str()?.to_string();
    let kind = discord_kind(channel["type"].as_u64());
    let name = match channel["name"].as_str() {
        Some(name) => match guild {
            Some(guild) => format!("#{name} ({guild})"),
            None => format!("#{name}"),
        },
        None => {
            let people: Vec<&str> = channel["recipients"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|r| r["global_name"].as_str().or(r["username"].as_str()))
                .collect();
            if people.is_empty() {
                id.clone()
            } else {
                people.join(", ")
            }
        }
    };
    Some(PendingChat {
        id,
        name: clean(&name),
        kind: kind.to_string(),
    })
}

/// Discord's channel types by name.
fn discord_kind(kind: Option<u64>) -> &'static str {
    match kind {
        Some(0) => "guild_text",
        Some(1) => "dm",
        Some(2) => "guild_voice",
        Some(3) => "group_dm",
        Some(5) => "guild_announcement",
        Some(10..=12) => "thread",
        Some(13) => "guild_stage_voice",
        Some(15) => "guild_forum",
        Some(16) => "guild_media",
        _ => "unknown",
    }
}

/// A name from a platform, fit for one line of output: control characters gone, length capped.
fn clean(text: &str) -> String {
    let one_line: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(200)
        .collect();
    one_line.trim().to_string()
}

/// At most `EXCERPT` characters of a server's text.
fn excerpt(text: &str) -> String {
    let text = text.trim();
    match text.char_indices().nth(EXCERPT) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_string(),
    }
}

/// `text` with the token replaced by its secret's name.
pub(crate) fn scrub(text: &str, platform: Platform, token: &str) -> String {
    if token.is_empty() {
        return text.to_string();
    }
    text.replace(token, &format!("[secret:{}]", platform.token_secret()))
}
