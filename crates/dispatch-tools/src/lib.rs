//! The built-in tools of tooldispatch, one module per family and one file per tool. Each tool is
//! a documented arguments struct (its JSON Schema derived from it, so the schema the model sees
//! and the code that parses it cannot drift) plus one `Tool` impl.

use dispatch_engine::{Registry, RegistryError, register_system_tools};
use schemars::JsonSchema;
use serde_json::Value;

#[cfg(test)]
mod core_tools_tests;
pub mod files;
pub mod interactive;
pub mod math;
pub mod memory;
pub mod output;
pub mod planning;
pub mod shell;
mod subjects;
#[cfg(test)]
mod test_support;
pub mod web;

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
}

impl Default for ToolsConfig {
    fn default() -> Self {
        ToolsConfig {
            search: web::SearchConfig::default(),
            net: std::sync::Arc::default(),
            filter: std::sync::Arc::new(web::filter::DeterministicFilter),
            read_only_commands: shell::ReadOnlyCommands::default(),
            sandbox: shell::process::SandboxConfig::default(),
        }
    }
}

/// A registry with the system tools and every built-in tool, with default settings.
pub fn builtin_registry() -> Result<Registry, RegistryError> {
    builtin_registry_with(&ToolsConfig::default())
}

/// A registry with the system tools and every built-in tool, set up by `config`.
pub fn builtin_registry_with(config: &ToolsConfig) -> Result<Registry, RegistryError> {
    let mut registry = Registry::empty();
    register_system_tools(&mut registry)?;
    registry.register(std::sync::Arc::new(planning::ReasoningGuide::new()))?;
    registry.register(std::sync::Arc::new(planning::WriteTodo::new()))?;
    registry.register(std::sync::Arc::new(math::Calculate::new()))?;
    registry.register(std::sync::Arc::new(files::EditFile::new()))?;
    registry.register(std::sync::Arc::new(files::RemoveFile::new()))?;
    registry.register(std::sync::Arc::new(files::RestoreFile::new()))?;
    registry.register(std::sync::Arc::new(files::FileHistoryTool::new()))?;
    registry.register(std::sync::Arc::new(files::ReadFiles::new()))?;
    registry.register(std::sync::Arc::new(files::FindFiles::new()))?;
    registry.register(std::sync::Arc::new(
        shell::RunCommand::new()
            .with_read_only_commands(config.read_only_commands.clone())
            .with_sandbox(config.sandbox.clone()),
    ))?;
    registry.register(std::sync::Arc::new(
        shell::BackgroundCommand::new()
            .with_read_only_commands(config.read_only_commands.clone())
            .with_sandbox(config.sandbox.clone()),
    ))?;
    registry.register(std::sync::Arc::new(memory::WriteError::new()))?;
    registry.register(std::sync::Arc::new(memory::ErrorHistory::new()))?;
    registry.register(std::sync::Arc::new(memory::ChatHistoryTool::new()))?;
    registry.register(std::sync::Arc::new(output::WriteResult::new()))?;
    registry.register(std::sync::Arc::new(output::HtmlTemplate::new()))?;
    registry.register(std::sync::Arc::new(interactive::AskUser::new()))?;
    registry.register(std::sync::Arc::new(interactive::StoreSecret::new()))?;
    registry.register(std::sync::Arc::new(web::HttpRequest::new(
        config.net.clone(),
    )))?;
    registry.register(std::sync::Arc::new(
        web::FetchPage::new(config.net.clone()).with_filter(config.filter.clone()),
    ))?;
    registry.register(std::sync::Arc::new(web::DownloadFile::new(
        config.net.clone(),
    )))?;
    registry.register(std::sync::Arc::new(
        web::SearchWeb::new(config.search.clone()).with_filter(config.filter.clone()),
    ))?;
    registry.register(std::sync::Arc::new(web::PublicApiList::new()))?;
    Ok(registry)
}

/// The JSON Schema of an arguments struct, inlined (no `$ref`), without the meta keys models
/// do not need.
pub fn schema_of<T: JsonSchema>() -> Value {
    let generator = schemars::generate::SchemaSettings::draft07()
        .with(|s| s.inline_subschemas = true)
        .into_generator();
    let mut schema = generator.into_root_schema_for::<T>().to_value();
    if let Value::Object(map) = &mut schema {
        map.remove("$schema");
        map.remove("title");
    }
    schema
}

/// Parse validated arguments into the tool's struct; a mismatch is the tool's bug, told plainly.
pub fn parse_args<T: serde::de::DeserializeOwned>(
    tool: &str,
    args: Value,
) -> Result<T, dispatch_engine::ToolError> {
    serde_json::from_value(args).map_err(|e| {
        dispatch_engine::ToolError::failed(format!(
            "arguments for {tool} do not fit its schema: {e}"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn concurrent_set_is_exactly_the_seeds() {
        let registry = builtin_registry().unwrap();
        for tool in registry.iter() {
            let spec = tool.spec();
            if spec.name == "run_tool" {
                continue; // never dispatched
            }
            assert_eq!(
                spec.is_concurrent(),
                SEED_CONCURRENT.contains(&spec.name.as_str()),
                "{} has the wrong concurrency",
                spec.name
            );
        }
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
