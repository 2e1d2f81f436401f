//! The config file: settings that outlive one command line.
//!
//! Found at `--config FILE` (or `TOOLDISPATCH_CONFIG`), else
//! `$XDG_CONFIG_HOME/tooldispatch/config.toml` (else `~/.config/tooldispatch/config.toml`) when
//! it exists. A command-line option or its environment variable wins over the file; the file
//! wins over the built-in default. Unknown keys are refused, so a typo never silently does
//! nothing.
//!
//! ```toml
//! store = "sqlite:/var/lib/tooldispatch/store.db"   # or redis://10.0.0.5:6379/0, memory:
//! max_concurrent = 4
//! spill_quota_mib = 1024                            # spilled output one session keeps on disk
//! max_calls_per_round = 512                          # a reply with more tool calls is refused
//!
//! [commands]
//! read_only = ["npm test", "cargo check"]            # run_command without asking
//!
//! [search]
//! searxng_url = "http://127.0.0.1:8888"              # search_web's backend (else Brave/Tavily keys,
//!                                                    # else DuckDuckGo / Google News, keyless)
//! min_gap_ms = 1000                                  # least time between two searches
//! # duckduckgo_url = "https://html.duckduckgo.com"   # where the keyless defaults are asked
//! # google_news_url = "https://news.google.com"
//!
//! [net]
//! allow_hosts = ["intranet.example", "127.0.0.1:8080"]   # private hosts the web tools may reach
//!
//! [filter]                                           # optional: a model trims fetched pages
//! model = "alpha"                                    # a [models.<name>] entry, any provider
//! # or an OpenAI-compatible server of its own:
//! # base_url = "http://127.0.0.1:8080/v1"
//! # model = "qwen2.5-7b-instruct"
//! # api_key_env = "FILTER_API_KEY"                   # the variable holding its key, if any
//!
//! [chatbot]                                          # list_chatbot / send_to_chatbot
//! telegram_api = "https://api.telegram.org"          # the defaults; tokens are secrets
//! discord_api = "https://discord.com/api/v10"        # (TELEGRAM_BOT_TOKEN, DISCORD_BOT_TOKEN)
//! max_retry_wait_secs = 30                           # longest 429 retry_after waited out
//!
//! [server]                                           # tooldispatch serve
//! cors_origins = ["http://localhost:5173"]           # web pages that may call the API
//! max_client_tools = 128                             # client tools one session may declare
//! client_tools_kib_per_session = 1024                # their declarations' size, per session
//! client_tools_budget_mib = 64                       # all sessions' declarations together
//!
//! [mcp.servers.git]                                 # an MCP server's tools: mcp__git__<tool>
//! command = "uvx"                                    # stdio: a program (or url = "https://…/mcp")
//! args = ["mcp-server-git"]
//! env = { GITHUB_TOKEN = "{{secret:GITHUB_TOKEN}}" } # stdio env; url servers take headers
//! timeout_s = 60                                     # a call may go this long without progress
//! trust_annotations = false                          # true: readOnlyHint tools run without asking
//! sandbox = false                                    # true: the server runs in the command sandbox
//!
//! [sandbox]
//! mode = "auto"     # "off" is DANGEROUS: commands then run unconfined, so a command wrongly
//!                   # judged read-only can write anywhere the user can and reach the network
//!
//! [models.claude]                                    # the first model is the default;
//! provider = "anthropic"                             # `--model NAME` picks another.
//! model = "claude-sonnet-4-5"                        # openai | openai-responses | anthropic | gemini
//! key = "{{secret:ANTHROPIC}}"                       # or "env:VAR", or "none"; default: the
//!                                                    # provider's variable (ANTHROPIC_API_KEY, …)
//! max_tokens = 16000
//! reasoning = "medium"                               # low | medium | high
//!
//! [models.local]
//! provider = "openai"                                # any OpenAI-compatible server
//! model = "qwen3:8b"
//! base_url = "http://127.0.0.1:11434/v1"
//! key = "none"
//! timeout_secs = 300                                 # silence allowed before or within the stream
//! max_attempts = 4                                   # on 429, 5xx and connection errors
//! max_retry_wait_secs = 60                           # longest wait between two attempts
//!
//! [models.images]                                    # the media tools send `model` as is:
//! provider = "openai"                                # name an image or speech model
//! model = "gpt-image-1"
//!
//! [models.speech]
//! provider = "openai"
//! model = "gpt-4o-mini-tts"
//!
//! [media]                                            # generate_image / generate_audio models,
//! image_model = "images"                             # by name; default: the first openai or
//! audio_model = "speech"                             # openai-responses entry
//! ```

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::CliError;

#[derive(Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// The store URL.
    pub store: Option<String>,
    /// The concurrency bound for concurrent calls.
    pub max_concurrent: Option<usize>,
    /// MiB of spilled output (long results, command output) one session keeps on disk; the
    /// oldest spills are removed past it (default 1024).
    pub spill_quota_mib: Option<u64>,
    /// The most tool calls one model reply may carry (default 512); a reply with more is
    /// refused whole (exit 2, HTTP 400 `too_many_calls`) before any call runs.
    pub max_calls_per_round: Option<usize>,
    #[serde(default)]
    pub commands: Commands,
    #[serde(default)]
    pub search: Search,
    #[serde(default)]
    pub net: Net,
    /// A model-backed result filter; without it the built-in one runs.
    pub filter: Option<Filter>,
    #[serde(default)]
    pub server: Server,
    #[serde(default)]
    pub sandbox: SandboxSection,
    #[serde(default)]
    pub mcp: McpSection,
    /// `[models.<name>]`, in file order: the first is the default.
    #[serde(default)]
    pub models: Models,
    #[serde(default)]
    pub media: Media,
    #[serde(default)]
    pub chatbot: Chatbot,
}

/// `[chatbot]`: where the chatbot tools and `tooldispatch chatbot` reach the bot APIs.
#[derive(Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Chatbot {
    /// The Telegram Bot API root (default https://api.telegram.org).
    pub telegram_api: Option<String>,
    /// The Discord REST API root (default https://discord.com/api/v10).
    pub discord_api: Option<String>,
    /// The longest 429 `retry_after` waited out before retrying (default 30 s); a longer one
    /// fails the call with the time to retry.
    pub max_retry_wait_secs: Option<u64>,
}

impl Chatbot {
    /// The tools' settings: the file's, else the defaults.
    pub fn to_config(&self) -> dispatch_tools::chat::ChatbotConfig {
        let mut config = dispatch_tools::chat::ChatbotConfig::default();
        if let Some(api) = &self.telegram_api {
            config.telegram_api = api.clone();
        }
        if let Some(api) = &self.discord_api {
            config.discord_api = api.clone();
        }
        if let Some(secs) = self.max_retry_wait_secs {
            config.max_retry_wait = std::time::Duration::from_secs(secs);
        }
        config
    }
}

/// The `[models.<name>]` entries in the order the file lists them (serde maps lose it; the
/// toml crate keeps it with `preserve_order`, and this visitor keeps what it is given).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Models(pub Vec<(String, dispatch_model::ModelConfig)>);

impl Models {
    /// The model `name` names, or the default (the first) when no name is given.
    pub fn pick(&self, name: Option<&str>) -> Result<(&str, &dispatch_model::ModelConfig), String> {
        let found = match name {
            Some(name) => self.0.iter().find(|(n, _)| n == name),
            None => self.0.first(),
        };
        match (found, name) {
            (Some((name, config)), _) => Ok((name.as_str(), config)),
            (None, None) => Err(
                "no model is configured: add a [models.<name>] table (provider, model) to the config file"
                    .to_owned(),
            ),
            (None, Some(name)) => Err(format!(
                "no model {name:?} in the config file; configured: {}",
                self.names()
            )),
        }
    }

    fn names(&self) -> String {
        if self.0.is_empty() {
            return "none".to_owned();
        }
        let names: Vec<&str> = self.0.iter().map(|(n, _)| n.as_str()).collect();
        names.join(", ")
    }
}

impl<'de> Deserialize<'de> for Models {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct InOrder;
        impl<'de> serde::de::Visitor<'de> for InOrder {
            type Value = Models;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a table of [models.<name>] tables")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Models, A::Error> {
                let mut models = Vec::new();
                while let Some(entry) = map.next_entry()? {
                    models.push(entry);
                }
                Ok(Models(models))
            }
        }
        deserializer.deserialize_map(InOrder)
    }
}

/// `[media]`: which configured models the media tools use.
#[derive(Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Media {
    /// The `[models.<name>]` generate_image calls (an OpenAI image model such as gpt-image-1).
    pub image_model: Option<String>,
    /// The `[models.<name>]` generate_audio calls (an OpenAI speech model such as
    /// gpt-4o-mini-tts).
    pub audio_model: Option<String>,
}

/// `[mcp]`: MCP servers whose tools tooldispatch offers as `mcp__<server>__<tool>`.
#[derive(Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct McpSection {
    /// `[mcp.servers.<name>]`, one per server.
    #[serde(default)]
    pub servers: std::collections::BTreeMap<String, dispatch_mcp::client::ServerConfig>,
}

/// `[sandbox]`: the OS sandbox around every command (see `tooldispatch sandbox`).
#[derive(Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct SandboxSection {
    /// `auto` (the default: sandbox when the machine can) or `off` — dangerous: commands run
    /// unconfined, so a wrong read-only judgment can write files and reach the network.
    #[serde(default)]
    pub mode: SandboxMode,
}

#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum SandboxMode {
    #[default]
    Auto,
    Off,
}

impl SandboxMode {
    pub fn to_mode(self) -> dispatch_sandbox::Mode {
        match self {
            SandboxMode::Auto => dispatch_sandbox::Mode::Auto,
            SandboxMode::Off => dispatch_sandbox::Mode::Off,
        }
    }
}

#[derive(Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Server {
    /// Origins (`scheme://host:port`) whose web pages may call the daemon's API (CORS).
    #[serde(default)]
    pub cors_origins: Vec<String>,
    /// Most client tools one session may declare (default 128, at most 256).
    pub max_client_tools: Option<usize>,
    /// KiB of client-tool declarations one session may declare (default 1024).
    pub client_tools_kib_per_session: Option<usize>,
    /// MiB of client-tool declarations all sessions the daemon knows may hold together
    /// (default 64); past it new sessions with client tools get 429.
    pub client_tools_budget_mib: Option<usize>,
}

impl Server {
    /// The daemon's caps, the built-in defaults where the file sets none.
    pub fn limits(&self) -> dispatch_server::Limits {
        use dispatch_server::Limits;
        Limits {
            max_client_tools: self
                .max_client_tools
                .unwrap_or(Limits::DEFAULT_MAX_CLIENT_TOOLS),
            client_tool_bytes: self
                .client_tools_kib_per_session
                .unwrap_or(Limits::DEFAULT_CLIENT_TOOLS_KIB_PER_SESSION)
                .saturating_mul(1024),
            client_tools_budget: self
                .client_tools_budget_mib
                .unwrap_or(Limits::DEFAULT_CLIENT_TOOLS_BUDGET_MIB)
                .saturating_mul(1024 * 1024),
        }
    }
}

#[derive(Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Filter {
    /// The API root of an OpenAI-compatible server (`/chat/completions` is appended); then
    /// `model` is the model id sent to it. Without it, `model` names a `[models.<name>]`.
    pub base_url: Option<String>,
    pub model: String,
    /// The environment variable that holds the API key, when the server needs one.
    pub api_key_env: Option<String>,
    /// The deadline of one filtering request (default 20 s); the built-in filter runs after it.
    pub timeout_secs: Option<u64>,
}

#[derive(Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Net {
    /// Hosts (`host` or `host:port`) the web tools may reach although they resolve to
    /// private, loopback or link-local addresses.
    #[serde(default)]
    pub allow_hosts: Vec<String>,
}

#[derive(Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Search {
    /// A SearXNG instance with its JSON format enabled; search_web uses it first.
    pub searxng_url: Option<String>,
    /// The least time between two requests to one search backend.
    pub min_gap_ms: Option<u64>,
    /// Where the keyless web default (DuckDuckGo's HTML endpoint) is asked.
    pub duckduckgo_url: Option<String>,
    /// Where the keyless news default (Google News' RSS search) is asked.
    pub google_news_url: Option<String>,
}

#[derive(Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Commands {
    /// Commands (`bin`, `bin sub`, `bin sub arg`) added to the read-only list: run_command
    /// runs them without asking.
    #[serde(default)]
    pub read_only: Vec<String>,
}

/// `$XDG_CONFIG_HOME/tooldispatch/config.toml`, else `~/.config/tooldispatch/config.toml`.
pub fn default_path() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))?;
    Some(base.join("tooldispatch").join("config.toml"))
}

impl Config {
    /// The file `explicit` names (which must exist), else the default file if there is one,
    /// else no settings.
    pub fn load(explicit: Option<&Path>) -> Result<Config, CliError> {
        let path = match explicit {
            Some(path) => path.to_path_buf(),
            None => match default_path().filter(|p| p.is_file()) {
                Some(path) => path,
                None => return Ok(Config::default()),
            },
        };
        let text = std::fs::read_to_string(&path).map_err(|e| {
            CliError::input(format!(
                "cannot read the config file {}: {e}",
                path.display()
            ))
        })?;
        Config::parse(&text)
            .map_err(|e| CliError::input(format!("config file {}: {e}", path.display())))
    }

    /// Parse the file's text; the error names the key or line that is wrong.
    pub fn parse(text: &str) -> Result<Config, String> {
        let config: Config = toml::from_str(text)
            .map_err(|e| e.message().to_string() + &span_note(text, e.span()))?;
        if config.max_concurrent == Some(0) {
            return Err("max_concurrent must be at least 1".to_string());
        }
        if config.max_calls_per_round == Some(0) {
            return Err("max_calls_per_round must be at least 1".to_string());
        }
        let most = dispatch_engine::client::MAX_CLIENT_TOOLS;
        if let Some(n) = config.server.max_client_tools
            && n > most
        {
            return Err(format!(
                "[server] max_client_tools = {n} is more than the {most} client tools a session can declare; set it to {most} or less"
            ));
        }
        for (key, value) in [
            (
                "client_tools_kib_per_session",
                config.server.client_tools_kib_per_session,
            ),
            (
                "client_tools_budget_mib",
                config.server.client_tools_budget_mib,
            ),
        ] {
            if value == Some(0) {
                return Err(format!(
                    "[server] {key} must be at least 1 (0 would refuse every client tool; set max_client_tools = 0 for that)"
                ));
            }
        }
        for (name, model) in &config.models.0 {
            model
                .validate()
                .map_err(|e| format!("[models.{name}]: {e}"))?;
        }
        for (key, name) in [
            ("image_model", &config.media.image_model),
            ("audio_model", &config.media.audio_model),
        ] {
            if let Some(name) = name
                && config.models.pick(Some(name)).is_err()
            {
                return Err(format!(
                    "[media] {key} = {name:?} names no [models.{name}] table; configured: {}",
                    config.models.names()
                ));
            }
        }
        for (key, api) in [
            ("telegram_api", &config.chatbot.telegram_api),
            ("discord_api", &config.chatbot.discord_api),
        ] {
            if let Some(api) = api
                && !(api.starts_with("https://") || api.starts_with("http://"))
            {
                return Err(format!(
                    "[chatbot] {key} = {api:?} is not an http:// or https:// URL; give the API root, e.g. https://api.telegram.org"
                ));
            }
        }
        if let Some(filter) = &config.filter
            && filter.base_url.is_none()
            && config.models.pick(Some(&filter.model)).is_err()
        {
            return Err(format!(
                "[filter] model = {:?} names no [models.{}] table (configured: {}); name one, or give base_url for an OpenAI-compatible server of its own",
                filter.model,
                filter.model,
                config.models.names()
            ));
        }
        Ok(config)
    }
}

/// " (line N)" for an error located in the text.
fn span_note(text: &str, span: Option<std::ops::Range<usize>>) -> String {
    match span {
        Some(span) => {
            let line = text[..span.start.min(text.len())].matches('\n').count() + 1;
            format!(" (line {line})")
        }
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dispatch_mcp::client::ServerConfig;

    #[test]
    fn every_key_parses() {
        let config = Config::parse(
            "store = \"memory:\"\nmax_concurrent = 4\nspill_quota_mib = 64\nmax_calls_per_round = 100\n[commands]\nread_only = [\"npm test\"]\n[search]\nsearxng_url = \"http://127.0.0.1:8888\"\nmin_gap_ms = 500\nduckduckgo_url = \"http://127.0.0.1:8890\"\ngoogle_news_url = \"http://127.0.0.1:8891\"\n[net]\nallow_hosts = [\"intranet.example\", \"127.0.0.1:8080\"]\n[filter]\nbase_url = \"http://127.0.0.1:9/v1\"\nmodel = \"m\"\ntimeout_secs = 5\n[server]\ncors_origins = [\"http://localhost:5173\"]\nmax_client_tools = 16\nclient_tools_kib_per_session = 64\nclient_tools_budget_mib = 8\n[sandbox]\nmode = \"off\"\n[mcp.servers.git]\ncommand = \"uvx\"\nargs = [\"mcp-server-git\"]\ntimeout_s = 30\ntrust_annotations = true\n[mcp.servers.web]\nurl = \"http://127.0.0.1:9/mcp\"\nheaders = { Authorization = \"Bearer {{secret:T}}\" }\n[chatbot]\ntelegram_api = \"http://127.0.0.1:9001\"\ndiscord_api = \"http://127.0.0.1:9002/api/v10\"\nmax_retry_wait_secs = 5\n",
        )
        .unwrap();
        assert_eq!(
            config,
            Config {
                store: Some("memory:".into()),
                max_concurrent: Some(4),
                spill_quota_mib: Some(64),
                max_calls_per_round: Some(100),
                commands: Commands {
                    read_only: vec!["npm test".into()]
                },
                search: Search {
                    searxng_url: Some("http://127.0.0.1:8888".into()),
                    min_gap_ms: Some(500),
                    duckduckgo_url: Some("http://127.0.0.1:8890".into()),
                    google_news_url: Some("http://127.0.0.1:8891".into()),
                },
                net: Net {
                    allow_hosts: vec!["intranet.example".into(), "127.0.0.1:8080".into()],
                },
                filter: Some(Filter {
                    base_url: Some("http://127.0.0.1:9/v1".into()),
                    model: "m".into(),
                    api_key_env: None,
                    timeout_secs: Some(5),
                }),
                server: Server {
                    cors_origins: vec!["http://localhost:5173".into()],
                    max_client_tools: Some(16),
                    client_tools_kib_per_session: Some(64),
                    client_tools_budget_mib: Some(8),
                },
                sandbox: SandboxSection {
                    mode: SandboxMode::Off
                },
                mcp: McpSection {
                    servers: [
                        (
                            "git".to_string(),
                            ServerConfig {
                                timeout_s: 30,
                                trust_annotations: true,
                                ..ServerConfig::stdio("uvx", &["mcp-server-git"])
                            }
                        ),
                        ("web".to_string(), {
                            let mut web = ServerConfig::http("http://127.0.0.1:9/mcp");
                            web.headers
                                .insert("Authorization".into(), "Bearer {{secret:T}}".into());
                            web
                        }),
                    ]
                    .into(),
                },
                models: Models::default(),
                media: Media::default(),
                chatbot: Chatbot {
                    telegram_api: Some("http://127.0.0.1:9001".into()),
                    discord_api: Some("http://127.0.0.1:9002/api/v10".into()),
                    max_retry_wait_secs: Some(5),
                },
            }
        );
        assert_eq!(
            config.chatbot.to_config(),
            dispatch_tools::chat::ChatbotConfig {
                telegram_api: "http://127.0.0.1:9001".into(),
                discord_api: "http://127.0.0.1:9002/api/v10".into(),
                max_retry_wait: std::time::Duration::from_secs(5),
            }
        );
        assert_eq!(
            Chatbot::default().to_config(),
            dispatch_tools::chat::ChatbotConfig::default()
        );
        assert_eq!(Config::parse("").unwrap(), Config::default());
        assert_eq!(
            config.server.limits(),
            dispatch_server::Limits {
                max_client_tools: 16,
                client_tool_bytes: 64 * 1024,
                client_tools_budget: 8 * 1024 * 1024,
            }
        );
        assert_eq!(
            Config::default().server.limits(),
            dispatch_server::Limits::default()
        );
    }

    #[test]
    fn server_caps_out_of_range_are_refused_naming_the_key() {
        let err = Config::parse("[server]\nmax_client_tools = 1000\n").unwrap_err();
        assert!(
            err.contains("max_client_tools = 1000") && err.contains("256"),
            "{err}"
        );
        for key in ["client_tools_kib_per_session", "client_tools_budget_mib"] {
            let err = Config::parse(&format!("[server]\n{key} = 0\n")).unwrap_err();
            assert!(err.contains(key) && err.contains("at least 1"), "{err}");
        }
    }

    #[test]
    fn mistakes_name_the_key_and_line() {
        let err = Config::parse("store = \"memory:\"\nstroe = \"x\"\n").unwrap_err();
        assert!(err.contains("stroe") && err.contains("line 2"), "{err}");
        let err = Config::parse("max_concurrent = \"four\"").unwrap_err();
        assert!(err.contains("line 1"), "{err}");
        let err = Config::parse("max_concurrent = 0").unwrap_err();
        assert!(err.contains("at least 1"), "{err}");
        let err = Config::parse("max_calls_per_round = 0").unwrap_err();
        assert!(
            err.contains("max_calls_per_round must be at least 1"),
            "{err}"
        );
        let err = Config::parse("[chatbot]\ntelegram_api = \"api.telegram.org\"").unwrap_err();
        assert!(
            err.starts_with("[chatbot] telegram_api = \"api.telegram.org\" is not an http"),
            "{err}"
        );
        let err = Config::parse("[commands]\nread_only = \"ls\"").unwrap_err();
        assert!(err.contains("line 2"), "{err}");
    }

    #[test]
    fn models_keep_the_file_order_and_the_first_is_the_default() {
        use dispatch_model::{ModelConfig, ProviderKind, Reasoning};
        // Names that sort in the opposite order, so a sorted map would pick the wrong default.
        let config = Config::parse(
            "[models.zeta]\nprovider = \"anthropic\"\nmodel = \"claude-sonnet-4-5\"\nkey = \"{{secret:ANTHROPIC}}\"\nmax_tokens = 16000\nreasoning = \"medium\"\n\n[models.alpha]\nprovider = \"openai\"\nmodel = \"qwen3\"\nbase_url = \"http://127.0.0.1:11434/v1\"\nkey = \"none\"\ntimeout_secs = 30\nmax_attempts = 2\nmax_retry_wait_secs = 10\n\n[models.mid]\nprovider = \"gemini\"\nmodel = \"gemini-2.5-flash\"\n\n[models.resp]\nprovider = \"openai-responses\"\nmodel = \"gpt-5\"\nkey = \"env:WORK_OPENAI_KEY\"\n\n[media]\nimage_model = \"mid\"\naudio_model = \"resp\"\n",
        )
        .unwrap();
        let mut zeta = ModelConfig::new(ProviderKind::Anthropic, "claude-sonnet-4-5");
        zeta.key = Some("{{secret:ANTHROPIC}}".into());
        zeta.max_tokens = Some(16000);
        zeta.reasoning = Some(Reasoning::Medium);
        let mut alpha = ModelConfig::new(ProviderKind::OpenAi, "qwen3");
        alpha.base_url = Some("http://127.0.0.1:11434/v1".into());
        alpha.key = Some("none".into());
        alpha.timeout_secs = Some(30);
        alpha.max_attempts = Some(2);
        alpha.max_retry_wait_secs = Some(10);
        let mut resp = ModelConfig::new(ProviderKind::OpenAiResponses, "gpt-5");
        resp.key = Some("env:WORK_OPENAI_KEY".into());
        assert_eq!(
            config.models,
            Models(vec![
                ("zeta".into(), zeta.clone()),
                ("alpha".into(), alpha),
                (
                    "mid".into(),
                    ModelConfig::new(ProviderKind::Gemini, "gemini-2.5-flash")
                ),
                ("resp".into(), resp),
            ])
        );
        assert_eq!(config.models.pick(None).unwrap(), ("zeta", &zeta));
        assert_eq!(
            config.models.pick(Some("mid")).unwrap().1.provider,
            ProviderKind::Gemini
        );
        assert_eq!(
            config.models.pick(Some("gpt")).unwrap_err(),
            "no model \"gpt\" in the config file; configured: zeta, alpha, mid, resp"
        );
        assert_eq!(
            config.media,
            Media {
                image_model: Some("mid".into()),
                audio_model: Some("resp".into()),
            }
        );
        assert!(
            Config::default()
                .models
                .pick(None)
                .unwrap_err()
                .contains("add a [models.<name>] table")
        );
    }

    #[test]
    fn model_mistakes_name_the_table() {
        let err =
            Config::parse("[models.a]\nprovider = \"openai\"\nmodel = \"m\"\napi_key = \"x\"\n")
                .unwrap_err();
        assert!(err.contains("api_key") && err.contains("line"), "{err}");
        let err = Config::parse("[models.a]\nprovider = \"azure\"\nmodel = \"m\"\n").unwrap_err();
        assert!(err.contains("azure") && err.contains("line 2"), "{err}");
        let err = Config::parse(
            "[models.a]\nprovider = \"openai\"\nmodel = \"m\"\nkey = \"sk-abc123\"\n",
        )
        .unwrap_err();
        assert!(
            err.starts_with("[models.a]: key must not hold the key itself"),
            "{err}"
        );
        assert!(!err.contains("sk-abc123"), "{err}");
        let err = Config::parse(
            "[models.a]\nprovider = \"openai\"\nmodel = \"m\"\n[media]\nimage_model = \"b\"\n",
        )
        .unwrap_err();
        assert_eq!(
            err,
            "[media] image_model = \"b\" names no [models.b] table; configured: a"
        );
        let err = Config::parse("[media]\nvideo_model = \"a\"\n").unwrap_err();
        assert!(err.contains("video_model"), "{err}");
        let err = Config::parse(
            "[models.a]\nprovider = \"openai\"\nmodel = \"m\"\n[filter]\nmodel = \"b\"\n",
        )
        .unwrap_err();
        assert!(
            err.starts_with("[filter] model = \"b\" names no [models.b] table (configured: a)"),
            "{err}"
        );
        let config = Config::parse(
            "[models.a]\nprovider = \"anthropic\"\nmodel = \"m\"\n[filter]\nmodel = \"a\"\n",
        )
        .unwrap();
        assert_eq!(config.filter.unwrap().base_url, None);
    }
}
