//! `tooldispatch chatbot pending|authorize|list|revoke`: the chats list_chatbot and
//! send_to_chatbot may use. A model can only post where a person approved here, so a prompt
//! injection cannot pick its own audience.

use std::time::{SystemTime, UNIX_EPOCH};

use clap::{Args, Subcommand};
use dispatch_store::{ApprovedChat, Store};
use dispatch_tools::chat::{ChatApi, ChatError, Platform};
use serde_json::json;

use crate::config::Config;
use crate::{CliError, print_line, setup};

#[derive(Args)]
pub struct ChatbotArgs {
    #[command(subcommand)]
    command: ChatbotCommand,
    /// Store URL: sqlite:PATH (default under $XDG_DATA_HOME/tooldispatch/), redis://HOST:PORT/DB or memory:.
    #[arg(long, env = "TOOLDISPATCH_STORE", global = true)]
    store: Option<String>,
    /// The config file (default: $XDG_CONFIG_HOME/tooldispatch/config.toml when it exists).
    #[arg(long, env = "TOOLDISPATCH_CONFIG", global = true)]
    config: Option<std::path::PathBuf>,
}

#[derive(Subcommand)]
enum ChatbotCommand {
    /// The chats the bot can see and a person could approve: Telegram, the chats that messaged
    /// the bot or added it (getUpdates, last 24 h); Discord, the text channels of its servers.
    Pending {
        /// telegram or discord.
        #[arg(value_parser = parse_platform)]
        platform: Platform,
        /// Print a JSON array instead.
        #[arg(long)]
        json: bool,
    },
    /// Approve a chat: the bot looks it up (so the id is real and reachable), then
    /// list_chatbot shows it and send_to_chatbot may post to it.
    Authorize {
        /// telegram or discord.
        #[arg(value_parser = parse_platform)]
        platform: Platform,
        /// The chat id (`chatbot pending` shows them); Telegram group ids are negative.
        #[arg(allow_hyphen_values = true)]
        id: String,
        /// The name the model sees instead of the platform's.
        #[arg(long)]
        name: Option<String>,
    },
    /// The approved chats (of one platform, or all).
    List {
        /// telegram or discord; omit for both.
        #[arg(value_parser = parse_platform)]
        platform: Option<Platform>,
        /// Print a JSON array instead.
        #[arg(long)]
        json: bool,
    },
    /// Withdraw a chat's approval.
    Revoke {
        /// telegram or discord.
        #[arg(value_parser = parse_platform)]
        platform: Platform,
        /// The chat id, as `chatbot list` shows it.
        #[arg(allow_hyphen_values = true)]
        id: String,
    },
}

fn parse_platform(s: &str) -> Result<Platform, String> {
    Platform::parse(s).ok_or_else(|| format!("unknown platform {s:?}: telegram or discord"))
}

pub async fn run(args: ChatbotArgs) -> Result<(), CliError> {
    let config = Config::load(args.config.as_deref())?;
    let store = setup::open_store(args.store.as_deref(), &config)?;
    let failed = |e: dispatch_store::StoreError| CliError::failed(e.to_string());
    match args.command {
        ChatbotCommand::Pending { platform, json } => {
            let token = token(&*store, platform).await?;
            let api = ChatApi::new(config.chatbot.to_config()).map_err(CliError::failed)?;
            let chats = api.pending(platform, &token).await.map_err(api_error)?;
            let approved = store
                .approved_chats(Some(platform.name()))
                .await
                .map_err(failed)?;
            let is_approved = |id: &str| approved.iter().any(|c| c.id == id);
            if json {
                let listed: Vec<_> = chats
                    .iter()
                    .map(|c| json!({"id": c.id, "name": c.name, "kind": c.kind, "approved": is_approved(&c.id)}))
                    .collect();
                print_line(&serde_json::Value::from(listed).to_string());
            } else {
                for c in &chats {
                    let mark = if is_approved(&c.id) { "\tapproved" } else { "" };
                    print_line(&format!("{}\t{}\t{}{mark}", c.id, c.kind, c.name));
                }
            }
            if chats.is_empty() {
                eprintln!(
                    "tooldispatch: the {} bot sees no chats yet: {}, then run this again",
                    platform.title(),
                    match platform {
                        Platform::Telegram =>
                            "send the bot a message (or add it to a group and write there)",
                        Platform::Discord =>
                            "invite the bot to a server (OAuth2 URL with the bot scope); a DM channel cannot be listed, approve it by id",
                    }
                );
            } else if !json {
                eprintln!(
                    "tooldispatch: approve one with `tooldispatch chatbot authorize {} ID [--name NAME]`",
                    platform.name()
                );
            }
        }
        ChatbotCommand::Authorize { platform, id, name } => {
            let id = id.trim().to_string();
            let token = token(&*store, platform).await?;
            let api = ChatApi::new(config.chatbot.to_config()).map_err(CliError::failed)?;
            let found = api
                .chat_info(platform, &token, &id)
                .await
                .map_err(api_error)?;
            let name = name
                .map(|n| n.trim().to_string())
                .filter(|n| !n.is_empty())
                .unwrap_or(found.name);
            let chat = ApprovedChat {
                platform: platform.name().to_string(),
                id: found.id,
                name,
                kind: found.kind,
                approved_ms: now_ms(),
            };
            store.approve_chat(&chat).await.map_err(failed)?;
            eprintln!(
                "tooldispatch: approved {} chat {} {:?} ({}); list_chatbot shows it, and send_to_chatbot may post to it (asking first unless a rule allows send_to_chatbot({}**))",
                platform.name(),
                chat.id,
                chat.name,
                chat.kind,
                platform.target_url(&chat.id)
            );
        }
        ChatbotCommand::List { platform, json } => {
            let chats = store
                .approved_chats(platform.map(Platform::name))
                .await
                .map_err(failed)?;
            if json {
                let listed: Vec<_> = chats
                    .iter()
                    .map(|c| json!({"platform": c.platform, "id": c.id, "name": c.name, "kind": c.kind, "approved_ms": c.approved_ms}))
                    .collect();
                print_line(&serde_json::Value::from(listed).to_string());
            } else {
                for c in &chats {
                    print_line(&format!("{}\t{}\t{}\t{}", c.platform, c.id, c.kind, c.name));
                }
                if chats.is_empty() {
                    eprintln!(
                        "tooldispatch: no chat is approved; `tooldispatch chatbot pending telegram|discord` shows the candidates"
                    );
                }
            }
        }
        ChatbotCommand::Revoke { platform, id } => {
            let id = id.trim();
            if !store
                .revoke_chat(platform.name(), id)
                .await
                .map_err(failed)?
            {
                return Err(CliError::failed(format!(
                    "{} chat {id} is not approved; `tooldispatch chatbot list` shows the approved chats",
                    platform.name()
                )));
            }
            eprintln!(
                "tooldispatch: revoked {} chat {id}; send_to_chatbot refuses it from now on",
                platform.name()
            );
        }
    }
    Ok(())
}

/// The platform's stored bot token.
async fn token(store: &dyn Store, platform: Platform) -> Result<String, CliError> {
    let name = platform.token_secret();
    let token = store
        .secret_get(name)
        .await
        .map_err(|e| CliError::failed(format!("cannot read the secret {name}: {e}")))?;
    token
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty())
        .ok_or_else(|| {
            CliError::failed(format!(
                "no {} bot token is stored: run `tooldispatch secret set {name}` and paste the token ({}), then retry",
                platform.title(),
                match platform {
                    Platform::Telegram => "from @BotFather",
                    Platform::Discord => "Developer Portal → the application → Bot → Reset Token",
                }
            ))
        })
}

fn api_error(e: ChatError) -> CliError {
    CliError::failed(e.to_string())
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}
