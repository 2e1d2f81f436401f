//! The built-in tools of tooldispatch, one module per family and one file per tool. Each tool is
//! a documented arguments struct (its JSON Schema derived from it, so the schema the model sees
//! and the code that parses it cannot drift) plus one [`BuiltinTool`] impl.

use dispatch_engine::{Registry, RegistryError, register_system_tools};

pub mod agents;
mod builtin;
pub mod chat;
#[cfg(test)]
mod core_tools_tests;
pub mod extensions;
pub mod files;
pub mod interactive;
pub mod math;
pub mod media;
pub mod memory;
pub mod output;
pub mod planning;
pub mod shell;
mod subjects;
#[cfg(test)]
mod test_support;
pub mod web;

pub use builtin::{Builtin, BuiltinTool, Stores, builtin, schema_of};

/// The seed's 21 concurrent-tagged tools (seed §3); every other built-in runs serially.
pub const SEED_CONCURRENT: [&str; 21] = [
    "read_files",
    "find_files",
    "find_tools",
    "file_history",
    "chat_history",
    "error_history",
    "write_error",
    "fetch_page",
    "search_web",
    "http_request",
    "public_api_list",
    "download_file",
    "test_tool",
    "calculate",
    "subagents",
    "background_subagents",
    "list_chatbot",
    "send_to_chatbot",
    "reasoning_guide",
    "html_template",
    "write_todo",
];

/// Settings of the built-in tools that come from the user (the config file), not the model.
#[derive(Clone)]
pub struct ToolsConfig {
    pub search: web::SearchConfig,
    /// What the web tools may reach beyond public hosts (`net.allow_hosts`).
    pub net: std::sync::Arc<web::NetPolicy>,
    /// The filter fetch_page and search_web results pass through on every return.
    pub filter: std::sync::Arc<dyn web::filter::ResultFilter>,
    /// Commands the user declared read-only (`[commands] read_only`): run_command and
    /// background_command run them without asking, in the read-only sandbox.
    pub read_only_commands: shell::ReadOnlyCommands,
    /// The OS sandbox run_command and background_command start programs in.
    pub sandbox: shell::process::SandboxConfig,
    /// The script and ext tools test_tool may run by name; `None`: drafts only.
    pub extensions: Option<std::sync::Arc<extensions::ExtensionTools>>,
    /// Where subagents find the agent loop once the engine exists (empty: no model).
    pub legs: agents::Legs,
    /// What generate_image and generate_audio call (`None`: they say no model is configured).
    pub media: Option<std::sync::Arc<dyn media::MediaMaker>>,
    /// Where list_chatbot and send_to_chatbot reach the bot APIs (`[chatbot]`).
    pub chatbot: chat::ChatbotConfig,
}

impl Default for ToolsConfig {
    fn default() -> Self {
        ToolsConfig {
            search: web::SearchConfig::default(),
            net: std::sync::Arc::default(),
            filter: std::sync::Arc::new(web::filter::DeterministicFilter),
            read_only_commands: shell::ReadOnlyCommands::default(),
            sandbox: shell::process::SandboxConfig::default(),
            extensions: None,
            legs: agents::Legs::default(),
            media: None,
            chatbot: chat::ChatbotConfig::default(),
        }
    }
}

/// A registry with the system tools and every built-in tool, with default settings and no
/// stores: enough to list and describe the tools. Run through an engine, its file tools refuse
/// to change files, its memory tools say they have no store, and nothing is read from a cache.
pub fn builtin_registry() -> Result<Registry, RegistryError> {
    builtin_registry_with(&ToolsConfig::default(), &Stores::default())
}

/// A registry with the system tools and every built-in tool, set up by `config` and keeping
/// their state in `stores`.
pub fn builtin_registry_with(
    config: &ToolsConfig,
    stores: &Stores,
) -> Result<Registry, RegistryError> {
    let tools = [
        builtin(planning::ReasoningGuide),
        builtin(planning::WriteTodo),
        builtin(math::Calculate),
        builtin(files::EditFile::new(stores)),
        builtin(files::RemoveFile::new(stores)),
        builtin(files::RestoreFile::new(stores)),
        builtin(files::FileHistoryTool::new(stores)),
        builtin(files::ReadFiles),
        builtin(files::FindFiles),
        builtin(
            shell::RunCommand::new()
                .with_read_only_commands(config.read_only_commands.clone())
                .with_sandbox(config.sandbox.clone()),
        ),
        builtin(
            shell::BackgroundCommand::new()
                .with_read_only_commands(config.read_only_commands.clone())
                .with_sandbox(config.sandbox.clone()),
        ),
        builtin(memory::WriteError::new(stores)),
        builtin(memory::ErrorHistory::new(stores)),
        builtin(memory::ChatHistoryTool::new(stores)),
        builtin(output::WriteResult),
        builtin(output::HtmlTemplate),
        builtin(interactive::AskUser),
        builtin(interactive::StoreSecret),
        builtin(web::HttpRequest::new(config.net.clone(), stores)),
        builtin(web::FetchPage::new(config.net.clone(), stores).with_filter(config.filter.clone())),
        builtin(web::DownloadFile::new(config.net.clone(), stores)),
        builtin(
            web::SearchWeb::new(config.search.clone(), stores).with_filter(config.filter.clone()),
        ),
        builtin(web::PublicApiList),
        builtin(agents::Subagents::new(config.legs.clone())),
        builtin(agents::BackgroundSubagents::new(
            config.legs.clone(),
            stores,
        )),
        builtin(media::GenerateImage::new(config.media.clone())),
        builtin(media::GenerateAudio::new(config.media.clone())),
        builtin(chat::ListChatbot::new(stores)),
        builtin(chat::SendToChatbot::new(config.chatbot.clone(), stores)),
        builtin(extensions::TestTool::new(
            config.sandbox.clone(),
            config.extensions.clone(),
        )),
    ];
    let mut registry = Registry::empty();
    register_system_tools(&mut registry)?;
    for tool in tools {
        registry.register(tool)?;
    }
    Ok(registry)
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;

    /// Seed tools not built yet, each with the issue that builds it. The seed test below fails
    /// once one of them is registered, so the entry goes when the tool arrives.
    const NOT_YET_BUILT: [(&str, &str); 0] = [];

    #[test]
    fn concurrent_set_is_exactly_the_seeds() {
        let registry = builtin_registry().unwrap();
        let mut problems = Vec::new();
        for name in SEED_CONCURRENT {
            let pending = NOT_YET_BUILT.iter().find(|(n, _)| *n == name);
            match (registry.get(name), pending) {
                (None, None) => problems.push(format!(
                    "{name}: a seed tool that is not registered (list it in NOT_YET_BUILT with \
                     the issue that builds it, or register it)"
                )),
                (Some(_), Some((_, issue))) => problems.push(format!(
                    "{name}: registered now; remove it from NOT_YET_BUILT ({issue})"
                )),
                (Some(tool), None) if !tool.spec().is_concurrent() => problems.push(format!(
                    "{name}: the seed runs it concurrently, ours serially"
                )),
                _ => {}
            }
        }
        for (name, issue) in NOT_YET_BUILT {
            if !SEED_CONCURRENT.contains(&name) {
                problems.push(format!(
                    "{name} ({issue}): in NOT_YET_BUILT but not a seed concurrent tool"
                ));
            }
        }
        for tool in registry.iter() {
            let spec = tool.spec();
            // run_tool is never dispatched; every other tool off the seed's list runs alone.
            if spec.name != "run_tool"
                && spec.is_concurrent()
                && !SEED_CONCURRENT.contains(&spec.name.as_str())
            {
                problems.push(format!(
                    "{}: concurrent, but the seed runs it serially",
                    spec.name
                ));
            }
        }
        assert_eq!(problems, Vec::<String>::new());
    }

    /// Every built-in's spec as registered (name, description, schema and everything the engine
    /// schedules and gates by), so a change to what a tool declares is always reviewed.
    #[test]
    fn every_builtin_spec_as_registered() {
        let registry = builtin_registry().unwrap();
        let specs: Vec<Value> = registry
            .iter()
            .map(|tool| {
                let s = tool.spec();
                serde_json::json!({
                    "name": s.name,
                    "description": s.description,
                    "parameters": s.parameters,
                    "declares": format!(
                        "{:?} {:?} cache={:?} timeout={:?} idle_timeout={:?} fire_and_forget={} \
                         origin={:?} effect={:?} elide_args={:?} system={} asks_user={} dedupe={}",
                        s.concurrency, s.gate, s.cache, s.timeout, s.idle_timeout,
                        s.fire_and_forget, s.origin, s.effect, s.elide_args, s.system,
                        s.asks_user, s.dedupe
                    ),
                })
            })
            .collect();
        insta::assert_json_snapshot!(specs);
    }

    #[test]
    fn every_builtin_schema_is_inline_and_an_object() {
        let registry = builtin_registry().unwrap();
        for tool in registry.iter() {
            let schema = &tool.spec().parameters;
            assert_eq!(schema["type"], "object", "{}", tool.name());
            let text = schema.to_string();
            assert!(
                !text.contains("$ref") && !text.contains("$schema"),
                "{}: {text}",
                tool.name()
            );
        }
    }
}
