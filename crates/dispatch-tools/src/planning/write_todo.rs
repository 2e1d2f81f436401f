//! `write_todo`: replace the session's whole todo list.

use async_trait::async_trait;
use dispatch_engine::{Effect, Tool, ToolContext, ToolError, ToolOutput, ToolSpec};
use dispatch_store::{Todo, TodoStatus};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use crate::{parse_args, schema_of};

/// Replace the whole todo list.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct WriteTodoArgs {
    /// Every step of the task, in order; this list replaces the previous one.
    #[schemars(length(min = 1))]
    todos: Vec<TodoArg>,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct TodoArg {
    /// What the step achieves, short and checkable.
    content: String,
    /// pending (default), in_progress (at most one step) or completed.
    #[serde(default)]
    status: Option<StatusArg>,
    /// The step in the present continuous, shown while it runs ("Running tests").
    #[serde(default)]
    active_form: Option<String>,
}

#[derive(Deserialize, JsonSchema, Clone, Copy)]
#[serde(rename_all = "snake_case")]
enum StatusArg {
    Pending,
    InProgress,
    Completed,
}

pub struct WriteTodo {
    spec: ToolSpec,
}

impl WriteTodo {
    pub fn new() -> Self {
        WriteTodo {
            spec: ToolSpec::new(
                "write_todo",
                "Save the checklist for a task of three or more steps. Send the whole list every time (it replaces the previous one); keep exactly one step in_progress while working and mark each step completed as soon as it is done.",
                schema_of::<WriteTodoArgs>(),
            )
            .read_only()
            .concurrent()
            // The result echoes the arguments only; a repeat within the run changes nothing.
            .effect(Effect::Pure),
        }
    }
}

impl Default for WriteTodo {
    fn default() -> Self {
        Self::new()
    }
}

#[async_trait]
impl Tool for WriteTodo {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, _cx: ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        let args: WriteTodoArgs = parse_args("write_todo", args)?;
        let mut todos = Vec::with_capacity(args.todos.len());
        for (i, item) in args.todos.into_iter().enumerate() {
            let content = item.content.trim().to_string();
            if content.is_empty() {
                return Err(ToolError::failed(format!(
                    "todos[{i}].content is empty; every step needs a short description"
                )));
            }
            let status = match item.status.unwrap_or(StatusArg::Pending) {
                StatusArg::Pending => TodoStatus::Pending,
                StatusArg::InProgress => TodoStatus::InProgress,
                StatusArg::Completed => TodoStatus::Completed,
            };
            let active_form = item
                .active_form
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty());
            todos.push(Todo {
                content,
                status,
                active_form,
            });
        }
        let count = |s: TodoStatus| todos.iter().filter(|t| t.status == s).count();
        let (done, running, pending) = (
            count(TodoStatus::Completed),
            count(TodoStatus::InProgress),
            count(TodoStatus::Pending),
        );
        if running > 1 {
            let names: Vec<&str> = todos
                .iter()
                .filter(|t| t.status == TodoStatus::InProgress)
                .map(|t| t.content.as_str())
                .collect();
            return Err(ToolError::failed(format!(
                "at most one step may be in_progress, found {running} ({}); keep one in_progress and set the others to pending or completed",
                names.join("; ")
            )));
        }
        let text = format!(
            "checklist saved: {} step(s) — {done} done, {running} in progress, {pending} pending",
            todos.len()
        );
        Ok(ToolOutput {
            text,
            todos: Some(todos),
            ..ToolOutput::default()
        })
    }
}
