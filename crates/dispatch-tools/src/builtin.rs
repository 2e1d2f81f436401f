//! The shape of a built-in tool. A tool writes its name once and its arguments once, as a
//! `Deserialize + JsonSchema` struct: the schema the model sees is derived from that struct and
//! every call is parsed into it, so the two cannot drift. [`Builtin`] turns such a tool into the
//! engine's [`Tool`], which speaks JSON.

use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use dispatch_engine::{
    Effect, Question, Subject, Tool, ToolContext, ToolError, ToolOutput, ToolSpec,
};
use dispatch_store::{
    AgentStore, ApprovedChats, ChatHistory, ErrorMemory, FileHistory, ResultCache, Store,
};
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// A built-in tool: its name, description and arguments, what it declares to the engine, and
/// how it runs. Register it through [`builtin`].
#[async_trait]
pub trait BuiltinTool: Send + Sync + 'static {
    /// The name the model calls the tool by.
    const NAME: &'static str;
    /// What the model reads about the tool.
    const DESCRIPTION: &'static str;
    /// The arguments: their JSON Schema is the tool's parameters, and a call is parsed into them.
    type Args: DeserializeOwned + JsonSchema + Send;

    /// The rest of the spec (gate, concurrency, effect, timeout, ...), set on
    /// `ToolSpec::new(NAME, DESCRIPTION, schema of Args)`, which has the seed's defaults.
    fn declare(&self, spec: ToolSpec) -> ToolSpec;

    /// Run one call. The engine has validated the arguments against the schema first.
    async fn run(&self, cx: ToolContext, args: Self::Args) -> Result<ToolOutput, ToolError>;

    /// What a call touches ([`Tool::subject`]); `None` declares nothing beyond the spec's gate.
    /// The gate asks before schema validation, so this reads the raw arguments and must take
    /// anything: a field of the wrong type is simply not there (see `crate::subjects`).
    fn subject(&self, _args: &Value, _workdir: &Path) -> Option<Subject> {
        None
    }

    /// What a call does to the world when its arguments decide it ([`Tool::effect`]); `None`
    /// means the spec's effect. Raw arguments, as for `subject`.
    fn effect(&self, _args: &Value) -> Option<Effect> {
        None
    }

    /// A tool that asks the user: the questions a call puts to them ([`Tool::questions`]).
    fn questions(&self, _args: &Self::Args) -> Vec<Question> {
        Vec::new()
    }

    /// A tool that asks the user: what the model said about its progress, kept verbatim with
    /// the pending task ([`Tool::parked_state`]).
    fn parked_state(&self, _args: &Value) -> Value {
        Value::Null
    }

    /// A tool that asks the user: finish a parked call with the user's answers, one per
    /// question in order ([`Tool::answered`]).
    async fn answered(
        &self,
        _cx: ToolContext,
        _args: Self::Args,
        _answers: Vec<String>,
    ) -> Result<ToolOutput, ToolError> {
        Err(ToolError::failed(format!(
            "{} does not take answers from the user",
            Self::NAME
        )))
    }
}

/// A built-in as the engine sees it: the spec built once, each call's arguments parsed once.
pub struct Builtin<T> {
    tool: T,
    spec: ToolSpec,
}

impl<T: BuiltinTool> Builtin<T> {
    pub fn new(tool: T) -> Self {
        let spec = tool.declare(ToolSpec::new(
            T::NAME,
            T::DESCRIPTION,
            schema_of::<T::Args>(),
        ));
        Builtin { tool, spec }
    }
}

/// `tool`, ready for `Registry::register`.
pub fn builtin<T: BuiltinTool>(tool: T) -> Arc<dyn Tool> {
    Arc::new(Builtin::new(tool))
}

#[async_trait]
impl<T: BuiltinTool> Tool for Builtin<T> {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, cx: ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        self.tool.run(cx, parse::<T>(args)?).await
    }

    fn effect(&self, args: &Value) -> Effect {
        self.tool.effect(args).unwrap_or(self.spec.effect)
    }

    fn subject(&self, args: &Value, workdir: &Path) -> Subject {
        self.tool
            .subject(args, workdir)
            .unwrap_or_else(|| Subject::from_gate(self.spec.gate))
    }

    fn questions(&self, args: &Value) -> Vec<Question> {
        // Asked once the arguments passed the schema; a parse failure is the tool's own bug,
        // and the call itself then reports it.
        match parse::<T>(args.clone()) {
            Ok(args) => self.tool.questions(&args),
            Err(_) => Vec::new(),
        }
    }

    fn parked_state(&self, args: &Value) -> Value {
        self.tool.parked_state(args)
    }

    async fn answered(
        &self,
        cx: ToolContext,
        args: Value,
        answers: Vec<String>,
    ) -> Result<ToolOutput, ToolError> {
        self.tool.answered(cx, parse::<T>(args)?, answers).await
    }
}

/// Validated arguments as the tool's struct. They passed its schema, so a mismatch is the
/// tool's bug (schema and struct disagree), told plainly.
fn parse<T: BuiltinTool>(args: Value) -> Result<T::Args, ToolError> {
    serde_json::from_value(args).map_err(|e| {
        ToolError::failed(format!(
            "arguments for {} do not fit its schema: {e}",
            T::NAME
        ))
    })
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

/// The stores built-in tools read and write, handed to each tool when it is built. A missing
/// one is `None`, and the tools that need it say so when called (file tools then refuse to
/// change files rather than change them without a way back).
///
/// The engine is given its own handles for its own work: the result cache for the entries
/// results ask it to write, the error memory for `related_errors`, and the secrets, which it
/// redacts and hands to tools round by round (`ToolContext::secrets`).
#[derive(Clone, Default)]
pub struct Stores {
    /// The result cache fetch_page, search_web and http_request read their entries from.
    pub cache: Option<Arc<dyn ResultCache>>,
    /// Where file tools record a file's state before changing it (file_history, restore_file).
    pub file_history: Option<Arc<dyn FileHistory>>,
    /// Recorded failures and fixes (write_error, error_history).
    pub error_memory: Option<Arc<dyn ErrorMemory>>,
    /// The sessions' transcripts as searchable history (chat_history).
    pub chat_history: Option<Arc<dyn ChatHistory>>,
    /// Background subagents' state and results (background_subagents).
    pub agents: Option<Arc<dyn AgentStore>>,
    /// The chats a person approved for the chatbot tools (list_chatbot, send_to_chatbot).
    pub chats: Option<Arc<dyn ApprovedChats>>,
}

impl Stores {
    /// Every store kept in `store`.
    pub fn all(store: &Arc<dyn Store>) -> Self {
        Stores {
            cache: Some(store.clone()),
            file_history: Some(store.clone()),
            error_memory: Some(store.clone()),
            chat_history: Some(store.clone()),
            agents: Some(store.clone()),
            chats: Some(store.clone()),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use dispatch_engine::{Access, Gate, Subject, Tool};
    use pretty_assertions::assert_eq;
    use serde::Deserialize;
    use serde_json::json;

    use super::*;

    // Says nothing about its calls beyond its gate, like most tools (a `//` comment: a doc
    // comment would become the schema's description).
    #[derive(Deserialize, JsonSchema)]
    #[serde(deny_unknown_fields)]
    pub struct NoteArgs {
        /// What to note.
        text: String,
    }

    struct Note;

    #[async_trait]
    impl BuiltinTool for Note {
        const NAME: &'static str = "note";
        const DESCRIPTION: &'static str = "Note something.";
        type Args = NoteArgs;

        fn declare(&self, spec: ToolSpec) -> ToolSpec {
            spec.gate(Gate::Ask).effect(Effect::Mutates)
        }

        async fn run(&self, _cx: ToolContext, args: NoteArgs) -> Result<ToolOutput, ToolError> {
            Ok(ToolOutput::text(args.text))
        }
    }

    #[test]
    fn the_spec_is_the_name_the_description_the_args_schema_and_the_declarations() {
        let tool = Builtin::new(Note);
        let spec = tool.spec();
        assert_eq!(
            (spec.name.as_str(), spec.description.as_str()),
            ("note", "Note something.")
        );
        assert_eq!(
            spec.parameters,
            json!({
                "type": "object",
                "properties": {"text": {"type": "string", "description": "What to note."}},
                "required": ["text"],
                "additionalProperties": false
            })
        );
        assert_eq!((spec.gate, spec.effect), (Gate::Ask, Effect::Mutates));
    }

    /// A tool that declares nothing per call keeps its spec's safe default: one that can
    /// change things asks, whatever its arguments hold.
    #[test]
    fn a_tool_that_says_nothing_per_call_keeps_its_gate_and_effect() {
        let tool = Builtin::new(Note);
        for args in [json!({"text": "a"}), json!("not an object"), json!(null)] {
            assert_eq!(
                tool.subject(&args, Path::new("/work")),
                Subject::new(Access::Changes)
            );
            assert_eq!(tool.effect(&args), Effect::Mutates);
        }
    }

    #[test]
    fn arguments_that_do_not_fit_the_struct_are_the_tools_bug_told_plainly() {
        let err = parse::<Note>(json!({"text": 7}))
            .err()
            .map(|e| e.to_string());
        assert_eq!(
            err.as_deref(),
            Some(
                "arguments for note do not fit its schema: invalid type: integer `7`, expected a string"
            )
        );
    }

    #[test]
    fn questions_of_arguments_that_do_not_parse_are_none() {
        let tool = Builtin::new(crate::interactive::AskUser);
        assert_eq!(tool.questions(&json!({"questions": 3})), Vec::new());
        let asked = tool.questions(&json!({
            "questions": [{"question": "Which  colour?", "options": ["red", "blue"]}],
            "state": {"objective": "o", "completed": [], "next_steps": []}
        }));
        assert_eq!(
            asked
                .iter()
                .map(|q| (q.question.as_str(), q.options.clone()))
                .collect::<Vec<_>>(),
            [("Which colour?", vec!["red".to_string(), "blue".to_string()])]
        );
    }
}
