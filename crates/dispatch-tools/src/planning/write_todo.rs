//! `write_todo`: replace the session's whole todo list.

use async_trait::async_trait;
use dispatch_engine::{Effect, ToolContext, ToolError, ToolOutput, ToolSpec};
use dispatch_store::{Todo, TodoStatus};
use schemars::JsonSchema;
use serde::Deserialize;

use crate::BuiltinTool;

/// Replace the whole todo list.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WriteTodoArgs {
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

pub struct WriteTodo;

#[async_trait]
impl BuiltinTool for WriteTodo {
    const NAME: &'static str = "write_todo";
    const DESCRIPTION: &'static str = "Save the checklist for a task of three or more steps. Send the whole list every time (it replaces the previous one); keep exactly one step in_progress while working and mark each step completed as soon as it is done.";
    type Args = WriteTodoArgs;

    fn declare(&self, spec: ToolSpec) -> ToolSpec {
        spec.read_only()
            .concurrent()
            .effect(Effect::Pure)
            // Writing the list is the point of the call: A, B, A must store A again.
            .no_dedupe()
    }

    async fn run(&self, _cx: ToolContext, args: WriteTodoArgs) -> Result<ToolOutput, ToolError> {
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

#[cfg(test)]
mod tests {
    use dispatch_engine::{EventKind, Status};
    use dispatch_store::{Todo, TodoStatus};
    use pretty_assertions::assert_eq;
    use serde_json::json;

    use crate::test_support::*;

    fn todo(content: &str, status: TodoStatus, active_form: Option<&str>) -> Todo {
        Todo {
            content: content.to_string(),
            status,
            active_form: active_form.map(str::to_string),
        }
    }

    const NEXT: &str = "next: once a different fix works, call write_error(tool_name=\"write_todo\", keywords=[...], symptom=..., action=..., outcome=\"resolved\") so the next run finds it";

    #[tokio::test]
    async fn the_summary_counts_done_in_progress_and_pending_steps() {
        let h = Harness::new();
        let out = h
            .round(
                "s",
                "r",
                vec![call(
                    "c1",
                    "write_todo",
                    json!({"todos": [
                        {"content": "Read the code", "status": "completed"},
                        {"content": "Write the tests", "status": "in_progress", "active_form": "Writing the tests"},
                        {"content": "Fix the bugs", "status": "pending"}
                    ]}),
                )],
            )
            .await;
        assert_eq!(
            results(&out),
            [result(
                "c1",
                Status::Ok,
                "[write_todo] checklist saved: 3 step(s) — 1 done, 1 in progress, 1 pending"
            )]
        );
    }

    #[tokio::test]
    async fn two_steps_in_progress_are_refused_naming_both() {
        let h = Harness::new();
        let out = h
            .round(
                "s",
                "r",
                vec![call(
                    "c1",
                    "write_todo",
                    json!({"todos": [
                        {"content": "Write the tests", "status": "in_progress"},
                        {"content": "Read the code", "status": "completed"},
                        {"content": "Fix the bugs", "status": "in_progress"}
                    ]}),
                )],
            )
            .await;
        assert_eq!(
            results(&out),
            [result(
                "c1",
                Status::Failed,
                &format!(
                    "[write_todo] tool=write_todo failed: at most one step may be in_progress, found 2 (Write the tests; Fix the bugs); keep one in_progress and set the others to pending or completed\n{NEXT}"
                )
            )]
        );
        // A refused list is not saved.
        assert_eq!(events_of(&out.events, "TodoUpdate").len(), 0);
    }

    #[tokio::test]
    async fn a_step_without_a_status_is_pending() {
        let h = Harness::new();
        let out = h
            .round(
                "s",
                "r",
                vec![call(
                    "c1",
                    "write_todo",
                    json!({"todos": [
                        {"content": "Omitted"},
                        {"content": "Null", "status": null, "active_form": "  "}
                    ]}),
                )],
            )
            .await;
        assert_eq!(
            results(&out),
            [result(
                "c1",
                Status::Ok,
                "[write_todo] checklist saved: 2 step(s) — 0 done, 0 in progress, 2 pending"
            )]
        );
        let (snapshot, _) = h.store.load("s", "").await.unwrap();
        assert_eq!(
            snapshot.todos,
            [
                todo("Omitted", TodoStatus::Pending, None),
                todo("Null", TodoStatus::Pending, None),
            ]
        );
    }

    #[tokio::test]
    async fn an_empty_list_is_refused_by_the_schema() {
        let h = Harness::new();
        let out = h
            .round(
                "s",
                "r",
                vec![call("c1", "write_todo", json!({"todos": []}))],
            )
            .await;
        assert_eq!(
            results(&out),
            [result(
                "c1",
                Status::Invalid,
                "tool=write_todo failed: invalid arguments: /todos: [] has less than 1 item"
            )]
        );
    }

    #[tokio::test]
    async fn a_blank_step_is_refused_naming_its_index() {
        let h = Harness::new();
        let out = h
            .round(
                "s",
                "r",
                vec![call(
                    "c1",
                    "write_todo",
                    json!({"todos": [{"content": "Real step"}, {"content": "   "}]}),
                )],
            )
            .await;
        assert_eq!(
            results(&out),
            [result(
                "c1",
                Status::Failed,
                &format!(
                    "[write_todo] tool=write_todo failed: todos[1].content is empty; every step needs a short description\n{NEXT}"
                )
            )]
        );
    }

    #[tokio::test]
    async fn a_saved_list_is_sent_as_a_todo_update_event() {
        let h = Harness::new();
        let out = h
            .round(
                "s",
                "r",
                vec![call(
                    "c1",
                    "write_todo",
                    json!({"todos": [
                        {"content": "  Write the tests ", "status": "in_progress", "active_form": " Writing the tests "},
                        {"content": "Ship it"}
                    ]}),
                )],
            )
            .await;
        let updates: Vec<Vec<Todo>> = events_of(&out.events, "TodoUpdate")
            .into_iter()
            .map(|kind| match kind {
                EventKind::TodoUpdate { todos } => todos.clone(),
                other => panic!("not a TodoUpdate: {other:?}"),
            })
            .collect();
        assert_eq!(
            updates,
            [vec![
                todo(
                    "Write the tests",
                    TodoStatus::InProgress,
                    Some("Writing the tests")
                ),
                todo("Ship it", TodoStatus::Pending, None),
            ]]
        );
    }

    #[tokio::test]
    async fn the_list_persists_in_the_session_across_runs() {
        let h = Harness::new();
        let list = json!({"todos": [
            {"content": "Plan", "status": "completed"},
            {"content": "Build", "status": "in_progress"}
        ]});
        h.round("s", "r1", vec![call("c1", "write_todo", list)])
            .await;
        // A later run that does not write the list, and one whose write is refused.
        h.round(
            "s",
            "r2",
            vec![call(
                "c2",
                "reasoning_guide",
                json!({"topic": "write_todo"}),
            )],
        )
        .await;
        let refused = h
            .round(
                "s",
                "r3",
                vec![call(
                    "c3",
                    "write_todo",
                    json!({"todos": [
                        {"content": "A", "status": "in_progress"},
                        {"content": "B", "status": "in_progress"}
                    ]}),
                )],
            )
            .await;
        assert_eq!(refused.results[0].status, Status::Failed);
        let (snapshot, _) = h.store.load("s", "r4").await.unwrap();
        let (other, _) = h.store.load("t", "r1").await.unwrap();
        assert_eq!(
            (snapshot.todos, other.todos),
            (
                vec![
                    todo("Plan", TodoStatus::Completed, None),
                    todo("Build", TodoStatus::InProgress, None),
                ],
                vec![]
            )
        );
    }
}
